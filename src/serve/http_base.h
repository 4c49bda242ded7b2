#pragma once
// The httplib machinery that the agent's server (serve::HttpServer) and the hub's
// (hub::HubServer) share: one httplib::Server configured with a fixed thread pool, read/write
// timeouts, a request size limit, TCP_NODELAY and no SO_REUSEPORT; a pre-routing hook that
// enforces the size limit (431) and the optional bearer token (401); the agent's JSON error
// bodies for every status httplib answers itself; 405 for every method but GET/HEAD; handlers
// that turn an exception into a 500 and a log line; and binding, the accept loop on a thread of
// its own, and stopping. Routes and their answers stay with each server.
//
// Private to ithbat (the hub links serve); include it only where httplib is already used.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>
#include <spdlog/logger.h>

#include "core/result.h"
#include "core/time.h"
#include "serve/api.h"

namespace ithbat::serve {

struct HttpBaseOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0 = pick a free port
  std::string bearer_token;  // empty = no auth
  size_t max_request_bytes = 64 * 1024;  // headers + body
  TimeNs request_timeout = 10 * kNsPerSec;  // read and write timeouts; positive
  int threads = 4;  // workers; positive (the callers bound it)

  std::string open_path = "/healthz";  // served without a token so that probes need no secret
  // Who logs a 500: "internal error (logged by the <owner>)".
  std::string owner = "agent";
  // Names the server in "the <server_name> on host:port stopped at once".
  std::string server_name = "HTTP server";
  // Ends the 405 message: "method POST not allowed; <read_only_note>".
  std::string read_only_note = "the API is read-only (GET, HEAD)";
  // The error message for a status httplib set itself (400, 404, 413, 414, ...).
  std::function<std::string(int status)> default_message;
  // Where failures and requests are logged; null = spdlog's default logger at the time.
  std::shared_ptr<spdlog::logger> logger;
};

// The listening fields of a server's public options (serve::ServerOptions, hub::HubServerOptions
// both name them alike); the rest of HttpBaseOptions keeps its defaults.
template <class ServerOptionsT>
HttpBaseOptions ListenOptionsFrom(const ServerOptionsT& o) {
  HttpBaseOptions b;
  b.bind_address = o.bind_address;
  b.port = o.port;
  b.bearer_token = o.bearer_token;
  b.max_request_bytes = o.max_request_bytes;
  b.request_timeout = o.request_timeout;
  b.threads = o.threads;
  return b;
}

// A handler body: the request in, status/content type/body out.
using ApiHandler = std::function<ApiResponse(const httplib::Request&)>;

class HttpBase {
 public:
  // Configures the server (no socket yet). Register the routes with Get, then call Start.
  explicit HttpBase(HttpBaseOptions options);
  ~HttpBase();  // stops
  HttpBase(const HttpBase&) = delete;
  HttpBase& operator=(const HttpBase&) = delete;

  // GET (and HEAD) `pattern` answered by `fn`; `what` names it in the log when it throws.
  void Get(const std::string& pattern, std::string what, ApiHandler fn);

  // Binds (errors: kUnavailable with the OS reason when the address is taken or invalid) and
  // runs the accept loop on a thread of its own; returns once that loop runs.
  Status Start();
  // Closes the listening socket, lets in-flight requests finish and joins the thread. Idempotent.
  void Stop();
  uint16_t port() const { return port_; }  // the bound port (after Start)

 private:
  void Configure();
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) const;
  spdlog::logger& Log() const;
  std::string InternalErrorMessage() const;

  HttpBaseOptions options_;
  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  uint16_t port_ = 0;
  std::mutex stop_mu_;
};

}  // namespace ithbat::serve
