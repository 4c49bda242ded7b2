#include "serve/http_base.h"

#include <cerrno>
#include <chrono>
#include <exception>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "serve/text_format.h"

namespace ithbat::serve {
namespace {

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

}  // namespace

HttpBase::HttpBase(HttpBaseOptions options) : options_(std::move(options)) { Configure(); }

HttpBase::~HttpBase() { Stop(); }

spdlog::logger& HttpBase::Log() const {
  return options_.logger ? *options_.logger : *spdlog::default_logger_raw();
}

std::string HttpBase::InternalErrorMessage() const {
  return fmt::format("internal error (logged by the {})", options_.owner);
}

httplib::Server::HandlerResponse HttpBase::PreRoute(const httplib::Request& req, httplib::Response& res) const {
  using HR = httplib::Server::HandlerResponse;
  // httplib bounds each line (8 KiB); this bounds their sum.
  size_t bytes = req.method.size() + req.target.size() + req.version.size() + 4;
  for (const auto& [name, value] : req.headers) bytes += name.size() + value.size() + 4;
  if (bytes > options_.max_request_bytes) {
    ApplyError(431,
               fmt::format("request headers are {} bytes, more than the limit of {}", bytes,
                           options_.max_request_bytes),
               res);
    return HR::Handled;
  }
  // The open path (/healthz) stays open so that probes need no secret; it reveals only health.
  if (!options_.bearer_token.empty() && req.path != options_.open_path) {
    std::string header = req.get_header_value("Authorization");
    std::string_view token = BearerToken(header);
    if (!ConstantTimeEquals(token, options_.bearer_token)) {
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

void HttpBase::Configure() {
  int threads = options_.threads;
  server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  auto sec = static_cast<time_t>(options_.request_timeout / kNsPerSec);
  auto usec = static_cast<time_t>((options_.request_timeout % kNsPerSec) / kNsPerUs);
  server_.set_read_timeout(sec, usec);
  server_.set_write_timeout(sec, usec);
  server_.set_payload_max_length(options_.max_request_bytes);
  // Small JSON answers must not wait for the client's delayed ACK (Nagle): without this a hub or
  // `ithbat record` pulling an agent paid ~40 ms per request.
  server_.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which would let a second agent (or hub) bind the
  // same port and silently receive half the scrapes. SO_REUSEADDR alone still allows a quick
  // restart.
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    try {
      return PreRoute(req, res);
    } catch (const std::exception& e) {
      Log().error("http: pre-routing {} failed: {}", req.path, e.what());
    } catch (...) {
      Log().error("http: pre-routing {} failed with an unknown exception", req.path);
    }
    try {
      res.headers.clear();
      ApplyError(500, InternalErrorMessage(), res);
    } catch (...) {
      res.status = 500;
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404, 400, 413, 414) get the same JSON error body as ours.
  server_.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        try {
          ApplyError(res.status,
                     options_.default_message ? options_.default_message(res.status) : "request refused", res);
        } catch (...) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, const std::exception_ptr& ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          Log().error("http: {} failed: {}", req.path, e.what());
        } catch (...) {
          Log().error("http: {} failed with an unknown exception", req.path);
        }
        try {
          ApplyError(500, InternalErrorMessage(), res);
        } catch (...) {
          res.status = 500;
        }
      });
  server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    Log().debug("http: {} {} -> {}", req.method, req.path, res.status);
  });

  // Other methods get 405 from real handlers rather than from the pre-routing hook, so that
  // httplib reads (and bounds) the body first: an unread body would be parsed as the next
  // request on a kept-alive connection.
  auto not_allowed = [this](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_header("Allow", "GET, HEAD");
      ApplyError(405,
                 fmt::format("method {} not allowed; {}", req.method.substr(0, 16), options_.read_only_note),
                 res);
    } catch (...) {
      res.status = 405;
    }
  };
  server_.Post(".*", not_allowed);
  server_.Put(".*", not_allowed);
  server_.Patch(".*", not_allowed);
  server_.Delete(".*", not_allowed);
  server_.Options(".*", not_allowed);
}

void HttpBase::Get(const std::string& pattern, std::string what, ApiHandler fn) {
  // An exception becomes a 500 JSON error and a log line, never a crash or an httplib default
  // page.
  server_.Get(pattern, [this, what = std::move(what), fn = std::move(fn)](const httplib::Request& req,
                                                                          httplib::Response& res) {
    try {
      Apply(fn(req), res);
      return;
    } catch (const std::exception& e) {
      Log().error("http: {} {} failed: {}", what, req.path, e.what());
    } catch (...) {
      Log().error("http: {} {} failed with an unknown exception", what, req.path);
    }
    res.headers.clear();
    ApplyError(500, InternalErrorMessage(), res);
  });
}

Status HttpBase::Start() {
  const HttpBaseOptions& o = options_;
  errno = 0;
  int port = -1;
  if (o.port == 0) {
    port = server_.bind_to_any_port(o.bind_address);
  } else if (server_.bind_to_port(o.bind_address, o.port)) {
    port = o.port;
  }
  int err = errno;
  if (port <= 0) {
    std::string where = fmt::format("cannot listen on {}:{}", o.bind_address, o.port);
    if (err != 0) return ErrnoError(ErrorCode::kUnavailable, where, err);
    return MakeErrorF(ErrorCode::kUnavailable, "{}: invalid address", where);
  }
  port_ = static_cast<uint16_t>(port);
  thread_ = std::thread([this] {
    server_.listen_after_bind();
    listen_returned_ = true;
  });
  // The socket already listens (connections queue), but Stop() must not race the accept loop's
  // start: httplib's stop() is a no-op until the loop runs, which would leave join() hanging.
  while (!server_.is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (listen_returned_) {
    thread_.join();
    return MakeErrorF(ErrorCode::kUnavailable, "the {} on {}:{} stopped at once", o.server_name, o.bind_address,
                      port_);
  }
  return Ok();
}

void HttpBase::Stop() {
  std::lock_guard lock(stop_mu_);
  if (!thread_.joinable()) return;
  server_.stop();
  thread_.join();
}

}  // namespace ithbat::serve
