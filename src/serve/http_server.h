#pragma once
// The agent's HTTP endpoint (http_base.h, on libmicrohttpd): /metrics (Prometheus text format 0.0.4),
// /api/v1/series, /api/v1/events, /api/v1/steps, /api/v1/diagnoses, /healthz, /api/v1/version. Documented in
// docs/http-api.md. Binds 127.0.0.1 unless configured; an optional bearer token guards every
// path except /healthz. Requests, connections and their memory are bounded (http_base.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/runtime.h"
#include "core/finding.h"
#include "core/result.h"
#include "serve/exposition.h"
#include "store/store.h"

namespace ithbat::serve {

inline constexpr uint16_t kDefaultPort = 9479;

struct ServerOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = kDefaultPort;               // 0 = pick a free port (tests)
  std::string bearer_token;                   // empty = no auth
  size_t max_request_bytes = 16 * 1024;       // request line + headers + body (http_base.h)
  TimeNs request_timeout = 10 * kNsPerSec;    // a connection idle this long is closed
  TimeNs stale_after = 5 * 60 * kNsPerSec;    // /metrics leaves out series silent this long
  size_t max_series_per_query = 10'000;
  size_t max_samples_per_query = 5'000'000;
  int threads = 4;
  std::string node;  // the node name /api/v1/version reports (empty: none)
  ExpositionOptions exposition;  // /metrics: target labels, dcgm-exporter names
};

// What the server reads besides the store. All are optional (may be empty functions). Each is
// called from the server's threads, so it must be thread-safe.
struct ServerSources {
  std::function<std::vector<agent::CollectorStatus>()> collectors;  // /healthz and self-metrics
  std::function<std::vector<MetricDesc>()> metric_descs;            // HELP text for metrics not yet stored
  // /api/v1/diagnoses: the node's current diagnoses (empty function: diagnosis is off, 503).
  std::function<std::vector<Diagnosis>()> diagnoses;
};

class HttpServer {
 public:
  // Binds (errors: kUnavailable with the OS reason when the address is taken or invalid) and
  // starts serving on its own threads.
  static Result<std::unique_ptr<HttpServer>> Start(const store::Store& store, ServerSources sources,
                                                   ServerOptions options);
  ~HttpServer();  // stops
  void Stop();
  uint16_t port() const;  // the bound port (useful with port 0)
  // Replaces the bearer token (empty: none) from the next request on. Thread-safe.
  void SetBearerToken(std::string token);

 private:
  HttpServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ithbat::serve
