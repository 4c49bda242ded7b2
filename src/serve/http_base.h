#pragma once
// The bounded HTTP server that the agent's server (serve::HttpServer) and the hub's
// (hub::HubServer) share, on libmicrohttpd (docs/security.md, "HTTP", says why that library):
// an event loop on a fixed number of threads, so a slow client holds a connection slot and a
// little memory, never a worker; every connection's memory capped (request line and headers
// live in a fixed pool: a request past it is refused before it grows); a connection limit, a
// per-address limit and an idle timeout; a request body (no route takes one) counted and
// refused, never buffered or decompressed. On top: the size limit (431/413) and the optional
// bearer token (401) checked before any route, the agent's JSON error bodies, 405 for every
// method but GET/HEAD, handlers that turn an exception into a 500 and a log line, and binding
// and stopping. Routes and their answers stay with each server.
//
// Private to ithbat (the hub links serve).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/logger.h>

#include "core/result.h"
#include "core/time.h"
#include "serve/api.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace ithbat::serve {

struct HttpBaseOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0 = pick a free port
  std::string bearer_token;  // empty = no auth
  // Request line + headers + body. The agent's and hub's requests are a path and a short query;
  // 16 KiB is twice the 8 KiB line nginx and Prometheus accept by default. A request up to 16 KiB
  // past this gets the JSON 431/413 below; past that the library's fixed per-connection pool
  // refuses it itself (431 or 414, no JSON body).
  size_t max_request_bytes = 16 * 1024;
  // A connection that sends or takes nothing for this long is closed (rounded up to seconds).
  TimeNs request_timeout = 10 * kNsPerSec;  // positive
  int threads = 4;  // event-loop threads; positive (the callers bound it)
  // Open connections at once, and from one client address. A slow client costs one slot and at
  // most its pool (max_request_bytes + 16 KiB, 32 KiB by default): 64 MiB if every slot held a
  // full one (docs/security.md).
  unsigned max_connections = 2048;
  unsigned max_connections_per_address = 1024;
  // Answers made but not yet taken by their clients, all together: past this, a route is
  // answered 503 (Retry-After: 1) until slow readers drain or time out. /healthz is exempt.
  // One answer may pass it (a big query is produced when there is room), so the most held is
  // this plus the largest answer a query may give.
  size_t max_answer_bytes_in_flight = 32 * 1024 * 1024;

  std::string open_path = "/healthz";  // served without a token so that probes need no secret
  // Who logs a 500: "internal error (logged by the <owner>)".
  std::string owner = "agent";
  // Names the server in "the <server_name> on host:port stopped at once".
  std::string server_name = "HTTP server";
  // Ends the 405 message: "method POST not allowed; <read_only_note>".
  std::string read_only_note = "the API is read-only (GET, HEAD)";
  // The error message for a status the base answers without a route (404, 413, ...).
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

// What a handler sees of a request: the decoded path and query parameters.
struct HttpRequest {
  std::string method;  // GET or HEAD
  std::string path;
  QueryParams params;
};

// A handler body: the request in, status/content type/body out.
using ApiHandler = std::function<ApiResponse(const HttpRequest&)>;

// What the server refused and how many connections it holds (for self-metrics and tests).
struct HttpBaseStats {
  uint64_t requests = 0;              // answered by a route (any status)
  uint64_t refused_too_large = 0;     // 431/413 answered, or a chunked body cut off, by the base
  uint64_t refused_unauthorized = 0;  // 401
  uint64_t refused_method = 0;        // 405
  uint64_t refused_busy = 0;          // 503: answers in flight over their budget
  uint64_t answer_bytes_in_flight = 0;
  uint64_t open_connections = 0;
  uint64_t library_messages = 0;      // connections libmicrohttpd refused or dropped itself, and its errors
};

class HttpBase {
 public:
  // Configures the server (no socket yet). Register the routes with Get, then call Start.
  explicit HttpBase(HttpBaseOptions options);
  ~HttpBase();  // stops
  HttpBase(const HttpBase&) = delete;
  HttpBase& operator=(const HttpBase&) = delete;

  // GET (and HEAD) of exactly `path` answered by `fn`; `what` names it in the log when it throws.
  void Get(const std::string& path, std::string what, ApiHandler fn);

  // Binds (errors: kUnavailable with the OS reason when the address is taken or invalid) and
  // starts the event-loop threads; returns once they run.
  Status Start();
  // Closes the listening socket and every connection and joins the threads (a handler that runs
  // finishes first). Idempotent.
  void Stop();
  uint16_t port() const { return port_; }  // the bound port (after Start)
  HttpBaseStats Stats() const;
  // Replaces the bearer token (empty: none) for the requests that arrive from now on (SIGHUP
  // reloads it). Thread-safe.
  void SetBearerToken(std::string token);
  // A body counted in the answer bytes in flight from now until its last reference is gone,
  // for an answer a route shares between requests (ApiResponse::shared_body). Thread-safe.
  std::shared_ptr<const std::string> TrackedBody(std::string body);

  // libmicrohttpd's callbacks (C linkage needs free functions; they forward here).
  struct Exchange;
  int OnRequest(MHD_Connection* connection, const char* url, const char* method, const char* upload_data,
                size_t* upload_data_size, void** request_state);
  void OnRequestDone(void** request_state);
  void OnConnection(bool opened);
  void OnLibraryLog(const char* text);

 private:
  struct Route {
    std::string what;
    ApiHandler fn;
  };
  // The answer to a request that is complete (headers and, if any, its body counted).
  int Answer(MHD_Connection* connection, const std::string& url, const std::string& method);
  // An answer that needs no route: the size, method and token checks, in that order. Returns
  // true (and sets `out`) when the request is refused.
  bool Screen(MHD_Connection* connection, const char* url, const char* method, ApiResponse& out,
              std::map<std::string, std::string>& headers_out);
  int Send(MHD_Connection* connection, ApiResponse response, const std::map<std::string, std::string>& headers,
           const char* method, const char* url);
  ApiResponse Error(int status, std::string_view message) const;
  spdlog::logger& Log() const;
  std::string InternalErrorMessage() const;

  HttpBaseOptions options_;
  mutable std::mutex token_mu_;
  std::string token_;  // guarded by token_mu_; options_.bearer_token at first
  std::map<std::string, Route> routes_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  std::mutex stop_mu_;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> refused_too_large_{0};
  std::atomic<uint64_t> refused_unauthorized_{0};
  std::atomic<uint64_t> refused_method_{0};
  std::atomic<uint64_t> refused_busy_{0};
  // Shared with the bodies' deleters, which may run after a Stop (a response the library
  // still held): they decrement through this, never through a dangling HttpBase.
  std::shared_ptr<std::atomic<uint64_t>> answer_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::atomic<uint64_t> open_connections_{0};
  std::atomic<uint64_t> library_messages_{0};
};

}  // namespace ithbat::serve
