// httplib glue: binding, threads, limits, auth and routing. What each endpoint answers lives in
// api.cc (JSON) and exposition.cc (/metrics).
#include "serve/http_server.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "core/time.h"
#include "serve/api.h"
#include "serve/text_format.h"

namespace ithbat::serve {
namespace {

constexpr std::string_view kHealthPath = "/healthz";
constexpr int kMaxThreads = 256;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// "Bearer <token>" (scheme case-insensitive, RFC 6750); empty when absent or another scheme.
std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size() || !EqualsIgnoreCase(header.substr(0, kScheme.size()), kScheme))
    return {};
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return token;
}

void Apply(ApiResponse r, httplib::Response& res) {
  res.status = r.status;
  res.body = std::move(r.body);
  res.set_header("Content-Type", r.content_type);
}

void ApplyError(int status, std::string_view message, httplib::Response& res) {
  Apply(ErrorResponse(status, ErrorCodeForStatus(status), message), res);
}

std::string_view DefaultMessage(int status) {
  switch (status) {
    case 400:
      return "malformed request (a header line over 8 KiB, or bad syntax)";
    case 404:
      return "no such endpoint; see docs/http-api.md";
    case 413:
      return "request body too large";
    case 414:
      return "request line too long (8 KiB max)";
    case 405:
      return "method not allowed";
    case 408:
      return "request timeout";
    case 416:
      return "range not satisfiable";
    default:
      return status >= 500 ? "internal error" : "request refused";
  }
}

}  // namespace

struct HttpServer::Impl {
  Impl(const store::Store& s, ServerSources src, ServerOptions o)
      : store(s), sources(std::move(src)), options(std::move(o)) {}

  void Configure();
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) const;

  // Runs a handler body; an exception becomes a 500 JSON error and a log line, never a crash
  // or an httplib default page.
  template <class F>
  httplib::Server::Handler Wrap(std::string_view what, F fn) {
    return [what, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      try {
        Apply(fn(req), res);
      } catch (const std::exception& e) {
        spdlog::error("http: {} {} failed: {}", what, req.path, e.what());
        res.headers.clear();
        ApplyError(500, "internal error (logged by the agent)", res);
      } catch (...) {
        spdlog::error("http: {} {} failed with an unknown exception", what, req.path);
        res.headers.clear();
        ApplyError(500, "internal error (logged by the agent)", res);
      }
    };
  }

  const store::Store& store;
  ServerSources sources;
  ServerOptions options;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  uint16_t port = 0;
  std::mutex stop_mu;
};

httplib::Server::HandlerResponse HttpServer::Impl::PreRoute(const httplib::Request& req,
                                                            httplib::Response& res) const {
  using HR = httplib::Server::HandlerResponse;
  // httplib bounds each line (8 KiB); this bounds their sum.
  size_t bytes = req.method.size() + req.target.size() + req.version.size() + 4;
  for (const auto& [name, value] : req.headers) bytes += name.size() + value.size() + 4;
  if (bytes > options.max_request_bytes) {
    ApplyError(431,
               fmt::format("request headers are {} bytes, more than the limit of {}", bytes,
                           options.max_request_bytes),
               res);
    return HR::Handled;
  }
  // /healthz stays open so that probes need no secret; it reveals only collector health.
  if (!options.bearer_token.empty() && req.path != kHealthPath) {
    std::string header = req.get_header_value("Authorization");
    std::string_view token = BearerToken(header);
    if (!ConstantTimeEquals(token, options.bearer_token)) {
      res.set_header("WWW-Authenticate", header.empty() ? R"(Bearer realm="ithbat")"
                                                        : R"(Bearer realm="ithbat", error="invalid_token")");
      ApplyError(401,
                 header.empty() ? "a bearer token is required (Authorization: Bearer <token>)"
                                : "invalid bearer token",
                 res);
      return HR::Handled;
    }
  }
  return HR::Unhandled;
}

void HttpServer::Impl::Configure() {
  int threads = options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  auto sec = static_cast<time_t>(options.request_timeout / kNsPerSec);
  auto usec = static_cast<time_t>((options.request_timeout % kNsPerSec) / kNsPerUs);
  server.set_read_timeout(sec, usec);
  server.set_write_timeout(sec, usec);
  server.set_payload_max_length(options.max_request_bytes);
  // Small JSON answers must not wait for the client's delayed ACK (Nagle): without this a hub or
  // `ithbat record` pulling an agent paid ~40 ms per request.
  server.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which would let a second agent bind the same port
  // and silently receive half the scrapes. SO_REUSEADDR alone still allows a quick restart.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    try {
      return PreRoute(req, res);
    } catch (const std::exception& e) {
      spdlog::error("http: pre-routing {} failed: {}", req.path, e.what());
      ApplyError(500, "internal error (logged by the agent)", res);
      return httplib::Server::HandlerResponse::Handled;
    }
  });
  // Statuses httplib sets itself (404, 400, 413, 414) get the same JSON error body as ours.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        try {
          ApplyError(res.status, DefaultMessage(res.status), res);
        } catch (...) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, const std::exception_ptr& ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          spdlog::error("http: {} failed: {}", req.path, e.what());
        } catch (...) {
          spdlog::error("http: {} failed with an unknown exception", req.path);
        }
        try {
          ApplyError(500, "internal error (logged by the agent)", res);
        } catch (...) {
          res.status = 500;
        }
      });
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    spdlog::debug("http: {} {} -> {}", req.method, req.path, res.status);
  });

  server.Get("/metrics", Wrap("/metrics", [this](const httplib::Request&) {
               ApiResponse r;
               r.content_type = std::string(kPrometheusContentType);
               r.body = RenderPrometheusText(store, NowNs() - options.stale_after);
               return r;
             }));
  server.Get("/api/v1/series", Wrap("series", [this](const httplib::Request& req) {
               return ServeSeries(store, req.params, options, NowNs());
             }));
  server.Get("/api/v1/events",
             Wrap("events", [this](const httplib::Request& req) { return ServeEvents(store, req.params); }));
  server.Get("/api/v1/steps", Wrap("steps", [this](const httplib::Request& req) {
               return ServeSteps(store, req.params, NowNs());
             }));
  server.Get("/api/v1/metrics", Wrap("metrics list", [this](const httplib::Request&) {
               return ServeMetricList(
                   store, sources.metric_descs ? sources.metric_descs() : std::vector<MetricDesc>());
             }));
  server.Get(
      std::string(kHealthPath), Wrap("healthz", [this](const httplib::Request&) {
        return ServeHealth(sources.collectors ? sources.collectors() : std::vector<agent::CollectorStatus>());
      }));
  server.Get("/api/v1/diagnoses", Wrap("diagnoses", [this](const httplib::Request&) {
               const bool enabled = static_cast<bool>(sources.diagnoses);
               return ServeDiagnoses(enabled, enabled ? sources.diagnoses() : std::vector<Diagnosis>());
             }));
  server.Get("/api/v1/version", Wrap("version", [](const httplib::Request&) { return ServeVersion(); }));

  // Other methods get 405 from real handlers rather than from the pre-routing hook, so that
  // httplib reads (and bounds) the body first: an unread body would be parsed as the next
  // request on a kept-alive connection.
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_header("Allow", "GET, HEAD");
      ApplyError(405, fmt::format("method {} not allowed; the API is read-only (GET, HEAD)", req.method),
                 res);
    } catch (...) {
      res.status = 405;
    }
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Options(".*", not_allowed);
}

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const store::Store& store, ServerSources sources,
                                                      ServerOptions options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "threads must be in [1, {}], got {}", kMaxThreads,
                      options.threads);
  }
  if (options.request_timeout <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "request timeout must be positive");
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>(store, std::move(sources), std::move(options));
  Impl& impl = *server->impl_;
  impl.Configure();

  const ServerOptions& o = impl.options;
  errno = 0;
  int port = -1;
  if (o.port == 0) {
    port = impl.server.bind_to_any_port(o.bind_address);
  } else if (impl.server.bind_to_port(o.bind_address, o.port)) {
    port = o.port;
  }
  int err = errno;
  if (port <= 0) {
    std::string where = fmt::format("cannot listen on {}:{}", o.bind_address, o.port);
    if (err != 0) return ErrnoError(ErrorCode::kUnavailable, where, err);
    return MakeErrorF(ErrorCode::kUnavailable, "{}: invalid address", where);
  }
  impl.port = static_cast<uint16_t>(port);
  impl.thread = std::thread([&impl] {
    impl.server.listen_after_bind();
    impl.listen_returned = true;
  });
  // The socket already listens (connections queue), but Stop() must not race the accept loop's
  // start: httplib's stop() is a no-op until the loop runs, which would leave join() hanging.
  while (!impl.server.is_running() && !impl.listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (impl.listen_returned) {
    impl.thread.join();
    return MakeErrorF(ErrorCode::kUnavailable, "the HTTP server on {}:{} stopped at once", o.bind_address,
                      impl.port);
  }
  spdlog::info("http: serving on {}:{}{}", o.bind_address, impl.port,
               o.bearer_token.empty() ? "" : " (bearer token required)");
  return server;
}

void HttpServer::Stop() {
  if (!impl_) return;
  std::lock_guard lock(impl_->stop_mu);
  if (!impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

uint16_t HttpServer::port() const { return impl_ ? impl_->port : 0; }

}  // namespace ithbat::serve
