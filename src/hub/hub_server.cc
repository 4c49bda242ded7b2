#include "hub/hub_server.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "agent/logging.h"
#include "core/version.h"
#include "serve/api.h"
#include "serve/text_format.h"

namespace ithbat::hub {
namespace {

using nlohmann::json;

constexpr std::string_view kHealthPath = "/healthz";

void Apply(serve::ApiResponse r, httplib::Response& res) {
  res.status = r.status;
  res.set_header("Content-Type", r.content_type);
  res.body = std::move(r.body);
}

void ApplyError(int status, std::string_view message, httplib::Response& res) {
  Apply(serve::ErrorResponse(status, serve::ErrorCodeForStatus(status), message), res);
}

// "Bearer <token>", the scheme case-insensitive (RFC 6750); "" otherwise.
std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = header[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return {};
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return token;
}

}  // namespace

std::string RenderHubHealth(const Hub& hub) {
  json agents = json::array();
  json stale = json::array();
  json down = json::array();
  for (const AgentState& a : hub.Agents()) {
    agents.push_back(
        {{"agent", a.target.Address()},
         {"node", a.target.node},
         {"up", a.up},
         {"stale", a.stale},
         {"pulls", a.pulls},
         {"pull_errors", a.pull_errors},
         {"last_error", a.last_error},
         {"last_success", a.last_success > 0 ? json(FormatRfc3339(a.last_success)) : json(nullptr)}});
    if (a.stale) stale.push_back(a.target.node);
    if (!a.up) down.push_back(a.target.Address());
  }
  const HubStats s = hub.Stats();
  json body = {{"status", "ok"},
               {"agents", std::move(agents)},
               {"down", std::move(down)},
               {"stale", std::move(stale)},
               {"rounds", s.rounds},
               {"last_round", s.last_round_at > 0 ? json(FormatRfc3339(s.last_round_at)) : json(nullptr)}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct HubServer::Impl {
  Impl(const Hub& h, std::function<NotifyCounters()> n, HubServerOptions o)
      : hub(h), notify(std::move(n)), options(std::move(o)) {}

  template <class F>
  httplib::Server::Handler Wrap(std::string_view what, F fn) {
    return [what, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      try {
        Apply(fn(req), res);
      } catch (...) {
        agent::GetLogger("hub")->error("http: {} {} failed", what, req.path);
        res.headers.clear();
        ApplyError(500, "internal error (logged by the hub)", res);
      }
    };
  }
  void Configure();

  const Hub& hub;
  std::function<NotifyCounters()> notify;
  HubServerOptions options;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  uint16_t port = 0;
  std::mutex stop_mu;
};

void HubServer::Impl::Configure() {
  const int threads = options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  const auto sec = static_cast<time_t>(options.request_timeout / kNsPerSec);
  const auto usec = static_cast<time_t>((options.request_timeout % kNsPerSec) / kNsPerUs);
  server.set_read_timeout(sec, usec);
  server.set_write_timeout(sec, usec);
  server.set_payload_max_length(options.max_request_bytes);
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second hub share the port.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    using HR = httplib::Server::HandlerResponse;
    try {
      size_t bytes = req.method.size() + req.target.size() + req.version.size() + 4;
      for (const auto& [name, value] : req.headers) bytes += name.size() + value.size() + 4;
      if (bytes > options.max_request_bytes) {
        ApplyError(431,
                   fmt::format("request headers are {} bytes, more than the limit of {}", bytes,
                               options.max_request_bytes),
                   res);
        return HR::Handled;
      }
      if (!options.bearer_token.empty() && req.path != kHealthPath) {
        const std::string header = req.get_header_value("Authorization");
        if (!serve::ConstantTimeEquals(BearerToken(header), options.bearer_token)) {
          res.set_header("WWW-Authenticate", header.empty()
                                                 ? R"(Bearer realm="ithbat")"
                                                 : R"(Bearer realm="ithbat", error="invalid_token")");
          ApplyError(401,
                     header.empty() ? "a bearer token is required (Authorization: Bearer <token>)"
                                    : "invalid bearer token",
                     res);
          return HR::Handled;
        }
      }
    } catch (...) {
      ApplyError(500, "internal error (logged by the hub)", res);
      return HR::Handled;
    }
    return HR::Unhandled;
  });
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        try {
          ApplyError(res.status, res.status == 404 ? "no such endpoint; see docs/hub.md" : "request refused",
                     res);
        } catch (...) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr&) {
        try {
          ApplyError(500, "internal error (logged by the hub)", res);
        } catch (...) {
          res.status = 500;
        }
      });

  server.Get("/api/v1/diagnoses", Wrap("diagnoses", [this](const httplib::Request&) {
               return serve::ServeDiagnoses(true, hub.Current());
             }));
  server.Get(std::string(kHealthPath), Wrap("healthz", [this](const httplib::Request&) {
               return serve::ApiResponse{200, std::string(serve::kJsonContentType), RenderHubHealth(hub)};
             }));
  server.Get("/metrics", Wrap("metrics", [this](const httplib::Request&) {
               return serve::ApiResponse{200, std::string(serve::kPrometheusContentType),
                                         RenderHubMetrics(hub, notify ? notify() : NotifyCounters{})};
             }));
  server.Get("/api/v1/version",
             Wrap("version", [](const httplib::Request&) { return serve::ServeVersion(); }));
  // Other methods get 405 from handlers (not the pre-routing hook) so that httplib reads and
  // bounds their body first, as the agent's server does.
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_header("Allow", "GET, HEAD");
      ApplyError(405,
                 fmt::format("method {} not allowed; the hub's API is read-only", req.method.substr(0, 16)),
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

HubServer::HubServer() = default;
HubServer::~HubServer() { Stop(); }

Result<std::unique_ptr<HubServer>> HubServer::Start(const Hub& hub, std::function<NotifyCounters()> notify,
                                                    HubServerOptions options) {
  if (options.threads < 1 || options.threads > 64) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "threads must be in [1, 64], got {}", options.threads);
  }
  std::unique_ptr<HubServer> s(new HubServer());
  s->impl_ = std::make_unique<Impl>(hub, std::move(notify), std::move(options));
  Impl& impl = *s->impl_;
  impl.Configure();
  const HubServerOptions& o = impl.options;
  errno = 0;
  int port = -1;
  if (o.port == 0) {
    port = impl.server.bind_to_any_port(o.bind_address);
  } else if (impl.server.bind_to_port(o.bind_address, o.port)) {
    port = o.port;
  }
  const int err = errno;
  if (port <= 0) {
    const std::string where = fmt::format("cannot listen on {}:{}", o.bind_address, o.port);
    if (err != 0) return ErrnoError(ErrorCode::kUnavailable, where, err);
    return MakeErrorF(ErrorCode::kUnavailable, "{}: invalid address", where);
  }
  impl.port = static_cast<uint16_t>(port);
  impl.thread = std::thread([&impl] {
    impl.server.listen_after_bind();
    impl.listen_returned = true;
  });
  // stop() is a no-op until the accept loop runs; wait for it so Stop cannot hang.
  while (!impl.server.is_running() && !impl.listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (impl.listen_returned) {
    impl.thread.join();
    return MakeErrorF(ErrorCode::kUnavailable, "the hub's HTTP server on {}:{} stopped at once",
                      o.bind_address, impl.port);
  }
  return s;
}

void HubServer::Stop() {
  if (!impl_) return;
  std::lock_guard lock(impl_->stop_mu);
  if (!impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

uint16_t HubServer::port() const { return impl_ ? impl_->port : 0; }

}  // namespace ithbat::hub
