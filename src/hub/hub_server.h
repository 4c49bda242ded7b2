#pragma once
// The hub's HTTP endpoint (serve::HttpBase, on libmicrohttpd): GET /api/v1/diagnoses (the same schema v1 document as
// an agent's), /healthz (the agents, up or not, and the stale nodes; never needs a token),
// /metrics (the hub's self-metrics), /api/v1/version. Binds 127.0.0.1 unless told otherwise; an
// optional bearer token (compared in constant time) guards every path but /healthz. Errors are
// the agent's JSON error bodies (docs/http-api.md); requests are bounded in size and time.
//
// A server of its own rather than serve::HttpServer: that one serves a store (series, events,
// steps) and collector health, the hub serves neither. The HTTP machinery (binding, threads,
// limits, the token check, 405s, JSON error bodies) is serve::HttpBase, the agent's, shared; the
// answers themselves (the diagnoses document, the error bodies) are serve's, reused.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "core/time.h"
#include "hub/hub.h"

namespace ithbat::hub {

inline constexpr uint16_t kDefaultHubPort = 9480;

struct HubServerOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = kDefaultHubPort;  // 0 = any free port
  std::string bearer_token;         // "" = no auth
  size_t max_request_bytes = 16 * 1024;  // request line + headers + body (serve/http_base.h)
  TimeNs request_timeout = 10 * kNsPerSec;
  int threads = 4;
};

class HubServer {
 public:
  // `notify` (may be empty) gives the webhook counters for /metrics. Both must outlive the
  // server. Errors: kUnavailable when the address cannot be bound.
  static Result<std::unique_ptr<HubServer>> Start(const Hub& hub, std::function<NotifyCounters()> notify,
                                                  HubServerOptions options);
  ~HubServer();
  void Stop();
  uint16_t port() const;
  // Replaces the bearer token (empty: none) from the next request on. Thread-safe.
  void SetBearerToken(std::string token);

 private:
  HubServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GET /healthz's body: {"status":"ok","agents":[...],"stale":[nodes],"rounds":N,"last_round":T}.
std::string RenderHubHealth(const Hub& hub);

}  // namespace ithbat::hub
