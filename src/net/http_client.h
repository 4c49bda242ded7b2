#pragma once
// The one HTTP client every outgoing request of the agent and the hub goes through: the serving
// collector's scrapes of a local inference server, the hub's pulls from agents, the webhook.
// Each peer may be hostile (any local user can start a process that looks like vLLM; an agent
// may be compromised; a webhook relay may misbehave), so every answer is bounded before it is
// held: the status line and headers together (count and bytes), the body, and the whole exchange
// in time. Bodies are never decoded (no Accept-Encoding is sent and content decoding is off), so
// a compression bomb stays the size it was sent at. Redirects are not followed; only http:// and
// https:// are fetched.
//
// On libcurl (Debian's libcurl4-openssl-dev): it exposes a callback per header line and per body
// chunk, where the bounds are enforced as the bytes arrive, an overall deadline, and TLS with the
// system's CA store. cpp-httplib's client, used before, grew a header line without bound before
// checking it (docs/security.md).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/time.h"

namespace ithbat::net {

struct HttpLimits {
  TimeNs connect_timeout = 2 * kNsPerSec;
  TimeNs deadline = 10 * kNsPerSec;          // the whole exchange, connect to last byte
  size_t max_header_bytes = 64 * 1024;       // status line and headers together
  size_t max_headers = 256;                  // header lines
  size_t max_body_bytes = 16 * 1024 * 1024;  // what is kept of the body
};

struct HttpCall {
  std::string method = "GET";  // GET, HEAD or POST
  std::string url;             // http:// or https://, with the query already in it (QueryString)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // POST's, sent as is
  // A body past max_body_bytes fails the call (kResourceExhausted) unless this is set: then the
  // first max_body_bytes are kept and the answer says it was cut (a webhook receiver that takes
  // the message and answers with a long page has still taken it).
  bool keep_cut_body = false;
};

struct HttpAnswer {
  int status = 0;
  std::string body;
  bool cut = false;  // keep_cut_body: the body went past max_body_bytes
  std::string content_type;
  std::string retry_after;  // the Retry-After header as sent (at most 64 bytes), or empty
};

// One peer's client: it reuses its connection between calls (keep-alive). Not thread-safe: one
// per thread or guarded by the caller.
//
// Errors: kInvalidArgument (a URL that is not http:// or https://, a bad method), kUnavailable
// (resolving, connecting or TLS failed), kTimeout (the deadline passed), kResourceExhausted
// (headers or body over their limits), kIo (the connection broke or the answer is not HTTP).
// Any HTTP status is an answer, not an error.
class HttpClient {
 public:
  explicit HttpClient(HttpLimits limits = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Result<HttpAnswer> Send(const HttpCall& call);
  // Closes the kept connection (a pull's end: no idle connection left on the peer). The next
  // Send opens a new one.
  void Close();
  const HttpLimits& limits() const { return limits_; }

 private:
  HttpLimits limits_;
  struct Handle;
  std::unique_ptr<Handle> handle_;
};

// "a=1&b=x%20y" from name/value pairs in order, percent-encoding all but RFC 3986's unreserved
// characters.
std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params);
std::string QueryString(const std::multimap<std::string, std::string>& params);

// Whether this libcurl speaks TLS (https://).
bool HttpsSupported();

// "http://host:port" with an IPv6 host in brackets.
std::string HttpOrigin(std::string_view host, uint16_t port, bool https = false);

}  // namespace ithbat::net
