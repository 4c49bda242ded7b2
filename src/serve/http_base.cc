#include "serve/http_base.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "serve/text_format.h"

namespace ithbat::serve {

// What one request carries between libmicrohttpd's calls of the access handler: set on the
// first call (headers complete), counted while a body arrives, answered on the last.
struct HttpBase::Exchange {
  size_t body_bytes = 0;
  bool answered = false;  // a response is queued (a refusal may be queued before the body)
};

namespace {

// The pool holds the request line, the headers and the read buffer, and later the response's
// headers: 16 KiB past the request limit covers the response headers and lets the base answer
// a request somewhat over the limit with its own JSON 431.
size_t PoolBytes(size_t max_request_bytes) { return max_request_bytes + 16 * 1024; }

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

bool IsReadMethod(std::string_view method) { return method == "GET" || method == "HEAD"; }

// The method as logged and echoed: at most 16 bytes of it.
std::string_view ShortMethod(const char* method) {
  std::string_view m = method ? method : "";
  return m.substr(0, 16);
}

MHD_Result ToMhd(int ok) { return ok ? MHD_YES : MHD_NO; }

MHD_Result AccessThunk(void* cls, MHD_Connection* connection, const char* url, const char* method,
                       const char* /*version*/, const char* upload_data, size_t* upload_data_size,
                       void** request_state) {
  return ToMhd(static_cast<HttpBase*>(cls)->OnRequest(connection, url, method, upload_data, upload_data_size,
                                                      request_state));
}

void CompletedThunk(void* cls, MHD_Connection*, void** request_state, MHD_RequestTerminationCode) {
  static_cast<HttpBase*>(cls)->OnRequestDone(request_state);
}

void ConnectionThunk(void* cls, MHD_Connection*, void**, MHD_ConnectionNotificationCode code) {
  static_cast<HttpBase*>(cls)->OnConnection(code == MHD_CONNECTION_NOTIFY_STARTED);
}

void LogThunk(void* cls, const char* format, va_list args) {
  char text[512];
  std::vsnprintf(text, sizeof(text), format, args);
  static_cast<HttpBase*>(cls)->OnLibraryLog(text);
}

MHD_Result SumHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* sum = static_cast<size_t*>(cls);
  *sum += (key ? std::string_view(key).size() : 0) + (value ? std::string_view(value).size() : 0) + 4;
  return MHD_YES;
}

MHD_Result CollectParam(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* params = static_cast<QueryParams*>(cls);
  params->emplace(key ? key : "", value ? value : "");
  return MHD_YES;
}

// The library's free callback holds a reference to the body until the response is gone.
void ReleaseBody(void* cls) { delete static_cast<std::shared_ptr<const std::string>*>(cls); }

// A listening socket for `address`:`port` (numeric or a name getaddrinfo resolves), non-blocking
// (the event-loop threads share it), SO_REUSEADDR for a quick restart but not SO_REUSEPORT,
// which would let a second agent bind the same port and receive half the requests.
Result<int> Listen(const std::string& address, uint16_t port) {
  const std::string where = fmt::format("cannot listen on {}:{}", address, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return MakeErrorF(ErrorCode::kUnavailable, "{}: invalid address ({})", where, gai_strerror(rc));
  }
  int err = 0;
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // Small JSON answers must not wait for the client's delayed ACK (Nagle); accepted sockets
    // inherit it on Linux.
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return ErrnoError(ErrorCode::kUnavailable, where, err);
  return fd;
}

uint16_t BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

// Each connection is a descriptor: the soft limit (often 1024) must leave room for the
// connection limit besides the store's files and the probes. The event loop uses epoll, so a
// higher limit costs nothing; the hard limit stays the operator's.
void RaiseDescriptorLimit(unsigned connections, spdlog::logger& log) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(connections) + 1024;
  if (limit.rlim_cur >= wanted) return;
  rlim_t raised = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (raised <= limit.rlim_cur) {
    log.warn("http: the descriptor limit ({}) is below the connection limit ({}) + 1024", limit.rlim_cur,
             connections);
    return;
  }
  rlim_t before = limit.rlim_cur;
  limit.rlim_cur = raised;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    log.debug("http: raised the descriptor limit from {} to {}", before, raised);
  }
}

}  // namespace

HttpBase::HttpBase(HttpBaseOptions options) : options_(std::move(options)), token_(options_.bearer_token) {}

void HttpBase::SetBearerToken(std::string token) {
  std::lock_guard lock(token_mu_);
  token_ = std::move(token);
}

HttpBase::~HttpBase() { Stop(); }

spdlog::logger& HttpBase::Log() const {
  return options_.logger ? *options_.logger : *spdlog::default_logger_raw();
}

std::string HttpBase::InternalErrorMessage() const {
  return fmt::format("internal error (logged by the {})", options_.owner);
}

ApiResponse HttpBase::Error(int status, std::string_view message) const {
  return ErrorResponse(status, ErrorCodeForStatus(status), message);
}

void HttpBase::Get(const std::string& path, std::string what, ApiHandler fn) {
  routes_[path] = Route{std::move(what), std::move(fn)};
}

HttpBaseStats HttpBase::Stats() const {
  HttpBaseStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.refused_too_large = refused_too_large_.load(std::memory_order_relaxed);
  s.refused_unauthorized = refused_unauthorized_.load(std::memory_order_relaxed);
  s.refused_method = refused_method_.load(std::memory_order_relaxed);
  s.refused_busy = refused_busy_.load(std::memory_order_relaxed);
  s.answer_bytes_in_flight = answer_bytes_->load(std::memory_order_relaxed);
  s.open_connections = open_connections_.load(std::memory_order_relaxed);
  s.library_messages = library_messages_.load(std::memory_order_relaxed);
  return s;
}

void HttpBase::OnConnection(bool opened) {
  if (opened) {
    open_connections_.fetch_add(1, std::memory_order_relaxed);
  } else {
    open_connections_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void HttpBase::OnLibraryLog(const char* text) {
  std::string_view t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.remove_suffix(1);
  // The library logs each connection it refused or dropped (over a limit, past its pool,
  // malformed, closed half-way): an attacker decides how many, so they go to the debug log and
  // a count, never as a flood into the agent's log at its default level.
  library_messages_.fetch_add(1, std::memory_order_relaxed);
  Log().debug("http: {}", t);
}

void HttpBase::OnRequestDone(void** request_state) {
  delete static_cast<Exchange*>(*request_state);
  *request_state = nullptr;
}

bool HttpBase::Screen(MHD_Connection* connection, const char* url, const char* method, ApiResponse& out,
                      std::map<std::string, std::string>& headers_out) {
  // The library bounds the headers by its pool; this bounds them by the configured limit, with
  // the API's JSON error.
  size_t bytes = std::string_view(method).size() + std::string_view(url).size() + 12;
  MHD_get_connection_values(connection, MHD_HEADER_KIND, &SumHeader, &bytes);
  MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &SumHeader, &bytes);
  if (bytes > options_.max_request_bytes) {
    refused_too_large_.fetch_add(1, std::memory_order_relaxed);
    out = Error(431, fmt::format("request headers are {} bytes, more than the limit of {}", bytes,
                                 options_.max_request_bytes));
    return true;
  }
  // Both framings at once is how requests are smuggled past a proxy that reads the other one
  // (RFC 9112 section 6.1 lets a server refuse it); no client of ours sends a body at all.
  if (MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) != nullptr &&
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) != nullptr) {
    out = Error(400, "both Content-Length and Transfer-Encoding: the request's length is ambiguous");
    return true;
  }
  // A declared body over the limit is refused before it is sent (a chunked one is counted as it
  // comes, below).
  if (const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      length != nullptr && IsReadMethod(method)) {
    std::string_view digits = length;
    uint64_t declared = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), declared);
    // Malformed or out of range counts as too large: the library has already refused a length
    // it cannot parse, so this is only belt and braces.
    if (ec != std::errc() || end != digits.data() + digits.size() || declared > options_.max_request_bytes) {
      refused_too_large_.fetch_add(1, std::memory_order_relaxed);
      out = Error(413, fmt::format("a request body of {} bytes, more than the limit of {}", digits.substr(0, 20),
                                   options_.max_request_bytes));
      return true;
    }
  }
  if (!IsReadMethod(method)) {
    refused_method_.fetch_add(1, std::memory_order_relaxed);
    headers_out["Allow"] = "GET, HEAD";
    out = Error(405, fmt::format("method {} not allowed; {}", ShortMethod(method), options_.read_only_note));
    return true;
  }
  // The open path (/healthz) stays open so that probes need no secret; it reveals only health.
  std::string token;
  {
    std::lock_guard lock(token_mu_);
    token = token_;
  }
  if (!token.empty() && url != options_.open_path) {
    const char* value = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    std::string_view header = value ? value : "";
    if (!ConstantTimeEquals(BearerToken(header), token)) {
      refused_unauthorized_.fetch_add(1, std::memory_order_relaxed);
      headers_out["WWW-Authenticate"] =
          header.empty() ? R"(Bearer realm="ithbat")" : R"(Bearer realm="ithbat", error="invalid_token")";
      out = Error(401, header.empty() ? "a bearer token is required (Authorization: Bearer <token>)"
                                      : "invalid bearer token");
      return true;
    }
  }
  return false;
}

std::shared_ptr<const std::string> HttpBase::TrackedBody(std::string body) {
  const uint64_t size = body.size();
  answer_bytes_->fetch_add(size, std::memory_order_relaxed);
  return std::shared_ptr<const std::string>(new std::string(std::move(body)),
                                            [counter = answer_bytes_, size](const std::string* s) {
                                              counter->fetch_sub(size, std::memory_order_relaxed);
                                              delete s;
                                            });
}

int HttpBase::Send(MHD_Connection* connection, ApiResponse response,
                   const std::map<std::string, std::string>& headers, const char* method, const char* url) {
  auto* holder = new std::shared_ptr<const std::string>(
      response.shared_body ? std::move(response.shared_body) : TrackedBody(std::move(response.body)));
  const std::string& body = **holder;
  // The library only reads the buffer; its type asks for a mutable pointer.
  MHD_Response* r = MHD_create_response_from_buffer_with_free_callback_cls(
      body.size(), const_cast<char*>(body.data()), &ReleaseBody, holder);
  if (r == nullptr) {
    delete holder;
    return 0;  // the library closes the connection
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
  for (const auto& [name, value] : headers) MHD_add_response_header(r, name.c_str(), value.c_str());
  const MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(response.status), r);
  MHD_destroy_response(r);  // the queued response keeps its own reference
  Log().debug("http: {} {} -> {}", ShortMethod(method), url, response.status);
  return queued == MHD_YES;
}

int HttpBase::Answer(MHD_Connection* connection, const std::string& url, const std::string& method) {
  auto route = routes_.find(url);
  if (route == routes_.end()) {
    return Send(connection,
                Error(404, options_.default_message ? options_.default_message(404) : "no such endpoint"), {},
                method.c_str(), url.c_str());
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  // Slow readers hold their answers: past the budget nothing new is produced for them, but
  // /healthz (a few bytes) always answers.
  if (url != options_.open_path &&
      answer_bytes_->load(std::memory_order_relaxed) > options_.max_answer_bytes_in_flight) {
    refused_busy_.fetch_add(1, std::memory_order_relaxed);
    return Send(connection,
                Error(503, fmt::format("busy: {} bytes of answers are waiting for slow clients (limit {}); retry",
                                       answer_bytes_->load(std::memory_order_relaxed),
                                       options_.max_answer_bytes_in_flight)),
                {{"Retry-After", "1"}}, method.c_str(), url.c_str());
  }
  // An exception becomes a 500 JSON error and a log line, never a crash or a library page.
  try {
    HttpRequest request{method, url, {}};
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &CollectParam, &request.params);
    return Send(connection, route->second.fn(request), {}, method.c_str(), url.c_str());
  } catch (const std::exception& e) {
    Log().error("http: {} {} failed: {}", route->second.what, url, e.what());
  } catch (...) {
    Log().error("http: {} {} failed with an unknown exception", route->second.what, url);
  }
  try {
    return Send(connection, Error(500, InternalErrorMessage()), {}, method.c_str(), url.c_str());
  } catch (...) {
    return 0;  // out of memory: the library closes the connection
  }
}

int HttpBase::OnRequest(MHD_Connection* connection, const char* url, const char* method, const char* /*upload_data*/,
                        size_t* upload_data_size, void** request_state) {
  try {
    auto* exchange = static_cast<Exchange*>(*request_state);
    if (exchange == nullptr) {
      // The first call: the request line and headers are in. A refusal goes out now, before any
      // body: the library then sends no "100 Continue", and "Connection: close" ends the
      // connection after the answer, so an unread body is never parsed as the next request.
      exchange = new Exchange();
      *request_state = exchange;
      ApiResponse refusal;
      std::map<std::string, std::string> headers;
      if (Screen(connection, url, method, refusal, headers)) {
        exchange->answered = true;
        headers["Connection"] = "close";
        return Send(connection, std::move(refusal), headers, method, url);
      }
      return 1;
    }
    if (*upload_data_size > 0) {
      // No route takes a body: it is counted and dropped, never kept. Past the limit (a chunked
      // body declares no length) the connection is closed, the rest unread: libmicrohttpd
      // 0.9.75 cannot queue an answer while a body arrives, so there is no 413 then.
      exchange->body_bytes += *upload_data_size;
      *upload_data_size = 0;
      if (exchange->body_bytes > options_.max_request_bytes) {
        if (!exchange->answered) refused_too_large_.fetch_add(1, std::memory_order_relaxed);
        exchange->answered = true;
        return 0;
      }
      return 1;
    }
    if (exchange->answered) return 1;
    exchange->answered = true;
    return Answer(connection, url, method);
  } catch (...) {
    return 0;  // out of memory: the library closes the connection
  }
}

Status HttpBase::Start() {
  const HttpBaseOptions& o = options_;
  if (daemon_ != nullptr) return MakeError(ErrorCode::kInternal, "the HTTP server already runs");
  Result<int> fd = Listen(o.bind_address, o.port);
  if (!fd) return std::unexpected(fd.error());
  port_ = BoundPort(*fd);
  RaiseDescriptorLimit(o.max_connections, Log());

  const unsigned timeout_s =
      static_cast<unsigned>(std::max<TimeNs>(1, (o.request_timeout + kNsPerSec - 1) / kNsPerSec));
  const unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &AccessThunk, this,                                   //
      MHD_OPTION_EXTERNAL_LOGGER, &LogThunk, this,  // first, or early messages go to stderr
      MHD_OPTION_LISTEN_SOCKET, *fd,                                                     //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(std::max(1, o.threads)),       //
      MHD_OPTION_CONNECTION_LIMIT, o.max_connections,                                    //
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, o.max_connections_per_address,                 //
      MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,                                          //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, PoolBytes(o.max_request_bytes),                //
      MHD_OPTION_NOTIFY_COMPLETED, &CompletedThunk, this,                                //
      MHD_OPTION_NOTIFY_CONNECTION, &ConnectionThunk, this,                              //
      MHD_OPTION_END);
  if (daemon_ == nullptr) {
    close(*fd);
    return MakeErrorF(ErrorCode::kUnavailable, "the {} on {}:{} stopped at once", o.server_name, o.bind_address,
                      port_);
  }
  return Ok();
}

void HttpBase::Stop() {
  std::lock_guard lock(stop_mu_);
  if (daemon_ == nullptr) return;
  MHD_stop_daemon(daemon_);  // closes the listening socket it was given
  daemon_ = nullptr;
}

}  // namespace ithbat::serve
