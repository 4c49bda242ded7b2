#pragma once
// The JSON API's request handling, apart from HTTP: each Serve* function takes the parsed query
// parameters and returns the status and body to send. http_server.cc only routes, checks auth
// and copies the result into the HTTP response, so these are testable without sockets.
//
// Errors never escape as exceptions: bad input gives a 4xx ApiResponse with the documented error
// body (docs/http-api.md). The caller still wraps each call, because nlohmann::json and the
// standard library may throw (bad_alloc).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime.h"
#include "core/finding.h"
#include "core/metric.h"
#include "core/time.h"
#include "serve/http_server.h"
#include "store/store.h"

namespace ithbat::serve {

// A query's parameters, decoded, in the order given (a name may repeat).
using QueryParams = std::multimap<std::string, std::string>;

inline constexpr TimeNs kDefaultQueryWindow = 3600 * kNsPerSec;
inline constexpr size_t kDefaultEventLimit = 1'000;
inline constexpr size_t kMaxEventLimit = 10'000;
inline constexpr size_t kMaxStepsPerQuery = 100'000;

inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

struct ApiResponse {
  int status = 200;
  std::string content_type = std::string(kJsonContentType);
  std::string body;
  // Sent instead of `body` when set: one answer shared by many requests (the agent's /metrics,
  // rendered at most once a second), made with HttpBase::TrackedBody so its bytes count once.
  std::shared_ptr<const std::string> shared_body;
};

// {"status":"error","error":{"code":code,"message":message}}
ApiResponse ErrorResponse(int status, std::string_view code, std::string_view message);
// The error code used for an HTTP status ("bad_request", "not_found", ...).
std::string_view ErrorCodeForStatus(int status);

ApiResponse ServeSeries(const store::Store& store, const QueryParams& params, const ServerOptions& options,
                        TimeNs now);
ApiResponse ServeEvents(const store::Store& store, const QueryParams& params);
ApiResponse ServeSteps(const store::Store& store, const QueryParams& params, TimeNs now);
ApiResponse ServeMetricList(const store::Store& store, const std::vector<MetricDesc>& declared);
ApiResponse ServeHealth(const std::vector<agent::CollectorStatus>& collectors);
// {"api":"v1","version":…,"node":…}: `node` is the node name the agent was started with (its
// diagnoses name it; the hub and `ithbat record` name the agent's data by it), left out when empty.
ApiResponse ServeVersion(std::string_view node = {});
// {"schema":"ithbat.diagnosis/v1","diagnoses":[schema v1 objects]}; `enabled` false (the agent
// runs no diagnosis) gives 503, so "nothing found" and "not looking" never look the same.
ApiResponse ServeDiagnoses(bool enabled, const std::vector<Diagnosis>& diagnoses);

std::string_view CollectorStateName(agent::CollectorState state);

}  // namespace ithbat::serve
