#include "net/http_client.h"

#include <algorithm>

#include <fmt/format.h>

#include "net/curl_api.h"

namespace ithbat::net {
namespace {

bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// One call's state, seen by the callbacks.
struct Exchange {
  const HttpLimits* limits = nullptr;
  bool keep_cut = false;
  HttpAnswer answer;
  size_t header_bytes = 0;
  size_t header_lines = 0;
  bool headers_over = false;
  bool body_over = false;
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t n = size * count;
  x->header_bytes += n;
  x->header_lines += 1;
  if (x->header_bytes > x->limits->max_header_bytes || x->header_lines > x->limits->max_headers) {
    x->headers_over = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    // A new response's headers (after a 100 Continue, say): what the last one said is void.
    x->answer.content_type.clear();
    x->answer.retry_after.clear();
  } else if (StartsWithIgnoreCase(line, "content-type:")) {
    x->answer.content_type = std::string(Trim(line.substr(13)).substr(0, 256));
  } else if (StartsWithIgnoreCase(line, "retry-after:")) {
    x->answer.retry_after = std::string(Trim(line.substr(12)).substr(0, 64));
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t n = size * count;
  const size_t room = x->limits->max_body_bytes - x->answer.body.size();
  if (n > room) {
    if (x->keep_cut) x->answer.body.append(data, room);
    x->body_over = true;
    return 0;  // aborts the transfer; the connection is not reused
  }
  x->answer.body.append(data, n);
  return n;
}

long Millis(TimeNs t) { return static_cast<long>(std::max<TimeNs>(1, (t + kNsPerMs - 1) / kNsPerMs)); }

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

void AppendEncoded(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (Unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

template <class Pairs>
std::string Query(const Pairs& params) {
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    AppendEncoded(out, name);
    out += '=';
    AppendEncoded(out, value);
  }
  return out;
}

}  // namespace

struct HttpClient::Handle {
  const CurlApi* api = nullptr;  // set with curl
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) api->easy_cleanup(curl);
  }
};

// libcurl is loaded by the first Send, not here: a collector holding a client that never calls
// costs nothing (curl_api.h).
HttpClient::HttpClient(HttpLimits limits) : limits_(limits), handle_(std::make_unique<Handle>()) {}

HttpClient::~HttpClient() = default;

void HttpClient::Close() { handle_ = std::make_unique<Handle>(); }

Result<HttpAnswer> HttpClient::Send(const HttpCall& call) {
  std::string_view url = call.url;
  if (!url.starts_with("http://") && !url.starts_with("https://")) {
    // The URL is not quoted in errors: its path or query may hold a secret (a webhook's).
    return MakeError(ErrorCode::kInvalidArgument, "the URL is not an http:// or https:// one");
  }
  if (call.method != "GET" && call.method != "HEAD" && call.method != "POST") {
    return MakeErrorF(ErrorCode::kInvalidArgument, "method {} is not one the client sends", call.method.substr(0, 16));
  }
  auto loaded = Curl();
  if (!loaded) return std::unexpected(loaded.error());
  const CurlApi& api = **loaded;
  if (handle_->curl == nullptr) {
    handle_->api = &api;
    handle_->curl = api.easy_init();
    if (handle_->curl == nullptr) return MakeError(ErrorCode::kResourceExhausted, "cannot create an HTTP handle");
  }
  CURL* c = handle_->curl;
  // Every option set again for each call; the connection cache survives the reset.
  api.easy_reset(c);

  Exchange x;
  x.limits = &limits_;
  x.keep_cut = call.keep_cut_body;
  char error_text[CURL_ERROR_SIZE] = {0};
  const std::string url_text(url);

  api.easy_setopt(c, CURLOPT_URL, url_text.c_str());
  api.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  api.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  // The agent's environment must not route its loopback scrapes or its webhook through a proxy
  // (http_proxy and friends), nor read ~/.netrc.
  api.easy_setopt(c, CURLOPT_PROXY, "");
  api.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, Millis(limits_.connect_timeout));
  api.easy_setopt(c, CURLOPT_TIMEOUT_MS, Millis(limits_.deadline));
  api.easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);            // small requests: no wait for a delayed ACK
  api.easy_setopt(c, CURLOPT_HTTP_CONTENT_DECODING, 0L);  // never inflate what a peer compressed
  api.easy_setopt(c, CURLOPT_ERRORBUFFER, error_text);
  api.easy_setopt(c, CURLOPT_HEADERFUNCTION, &OnHeader);
  api.easy_setopt(c, CURLOPT_HEADERDATA, &x);
  api.easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnBody);
  api.easy_setopt(c, CURLOPT_WRITEDATA, &x);
  if (!call.keep_cut_body) {
    // A declared length over the limit is refused before any of the body is read.
    api.easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits_.max_body_bytes));
  }

  curl_slist* headers = nullptr;
  for (const auto& [name, value] : call.headers) {
    headers = api.slist_append(headers, fmt::format("{}: {}", name, value).c_str());
  }
  if (call.method == "POST") {
    api.easy_setopt(c, CURLOPT_POST, 1L);
    api.easy_setopt(c, CURLOPT_POSTFIELDS, call.body.data());
    api.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body.size()));
    // No "Expect: 100-continue" round trip for a large message.
    headers = api.slist_append(headers, "Expect:");
  } else if (call.method == "HEAD") {
    api.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else {
    api.easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  api.easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  const CURLcode rc = api.easy_perform(c);
  api.easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  api.slist_free_all(headers);
  api.easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);

  long status = 0;
  api.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  x.answer.status = static_cast<int>(status);
  const std::string why =
      error_text[0] != '\0' ? std::string(error_text) : std::string(api.easy_strerror(rc));

  if (x.headers_over) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "the answer's headers exceed {} bytes or {} lines",
                      limits_.max_header_bytes, limits_.max_headers);
  }
  if (x.body_over || rc == CURLE_FILESIZE_EXCEEDED) {
    if (call.keep_cut_body && x.answer.status > 0) {
      x.answer.cut = true;
      return std::move(x.answer);
    }
    return MakeErrorF(ErrorCode::kResourceExhausted, "the answer is larger than {} bytes", limits_.max_body_bytes);
  }
  switch (rc) {
    case CURLE_OK:
      return std::move(x.answer);
    case CURLE_OPERATION_TIMEDOUT:
      return MakeErrorF(ErrorCode::kTimeout, "no complete answer within {} ms ({})", Millis(limits_.deadline), why);
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return MakeErrorF(ErrorCode::kUnavailable, "connection refused or failed ({})", why);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
      return MakeErrorF(ErrorCode::kUnavailable, "TLS failed ({})", why);
    case CURLE_UNSUPPORTED_PROTOCOL:  // the scheme was checked above: this is an answer that is not HTTP/1.x
      return MakeErrorF(ErrorCode::kIo, "the answer is not HTTP ({})", why);
    case CURLE_URL_MALFORMAT:
      return MakeError(ErrorCode::kInvalidArgument, "the URL is malformed");
    case CURLE_OUT_OF_MEMORY:
      // libcurl 7.88 says so when one header line passes its own 100 KiB bound (before our
      // per-line callback sees it): a hostile answer, far more often than a real shortage.
      return MakeErrorF(ErrorCode::kResourceExhausted,
                        "an answer header line over libcurl's 100 KiB bound, or out of memory ({})", why);
    default:
      return MakeErrorF(ErrorCode::kIo, "the exchange failed ({})", why);
  }
}

std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params) { return Query(params); }

std::string QueryString(const std::multimap<std::string, std::string>& params) { return Query(params); }

bool HttpsSupported() {
  auto api = Curl();
  if (!api) return false;
  const curl_version_info_data* info = (*api)->version_info(CURLVERSION_NOW);
  return info != nullptr && (info->features & CURL_VERSION_SSL) != 0;
}

std::string HttpOrigin(std::string_view host, uint16_t port, bool https) {
  const bool v6 = host.find(':') != std::string_view::npos && !host.starts_with('[');
  return fmt::format("{}://{}{}{}:{}", https ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

}  // namespace ithbat::net
