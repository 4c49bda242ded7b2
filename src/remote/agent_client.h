#pragma once
// A client of one agent's JSON API (docs/http-api.md): its current diagnoses, and a copy of
// what its store holds — series with their metric descriptors, events, step spans — into
// another store. `ithbat hub` pulls every agent with it each round, `ithbat diagnose --agent`
// reads diagnoses with it, `ithbat record --agent` copies an agent's window into a bundle.
//
// Bounds (net::HttpClient): every request has a connect timeout and a deadline for the whole
// answer, its headers are bounded, and an answer body larger than `max_body_bytes` is cut off and
// refused (a query that would need more is split, see PullInto); a pull makes at most
// `max_requests_per_pull` requests. Answers are never decompressed or redirected.
//
// Thread safety: one AgentClient per thread (a pull keeps one connection alive while it runs and
// closes it at the end, so no idle connection delays an agent's shutdown). Different
// clients, and pulls into different stores, may run in parallel.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"
#include "store/store.h"

namespace ithbat::remote {

// One answer of an agent: its HTTP status and body.
struct AgentAnswer {
  int status = 0;
  std::string body;
};

struct AgentClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 9479;
  std::string bearer_token;  // empty: no Authorization header
  TimeNs connect_timeout = 2 * kNsPerSec;
  TimeNs request_deadline = 60 * kNsPerSec;  // one whole answer, however slowly it drips
  size_t max_body_bytes = 64ull << 20;       // an answer larger than this is refused
  size_t max_requests_per_pull = 20'000;     // series queries, event pages, steps, splits
  // A window is not split below this (a 422 or an oversized answer for a window this short
  // fails the metric rather than recursing).
  TimeNs min_split_window = kNsPerSec;
  // Replaces the network when set: given the request's path and query ("/api/v1/series?..."),
  // returns the agent's answer or a transport error. For the answer-parsing fuzzer
  // (fuzz/agent_client_fuzz.cc), which must not pay a socket per answer; the bounds on headers,
  // body size and time are then the caller's.
  std::function<Result<AgentAnswer>(const std::string& target)> transport;
};

// What one PullInto copied (and what it could not).
struct PullStats {
  bool reached = false;  // the agent answered its metric list (it is up)
  size_t requests = 0;
  size_t metrics = 0;  // metrics with stored series on the agent
  size_t series = 0;   // series with samples in the window
  size_t samples_appended = 0;
  size_t samples_skipped = 0;  // already in the destination (at or before its newest sample)
  size_t events_appended = 0;
  size_t events_skipped = 0;  // already in the destination
  size_t steps_recorded = 0;
  size_t rank_timelines = 0;        // (job, rank) pairs whose steps were asked for
  size_t window_splits = 0;         // queries split because the agent answered 422 or too much
  std::vector<std::string> errors;  // per-metric / per-timeline failures (the rest was copied)
};

class AgentClient {
 public:
  explicit AgentClient(AgentClientOptions options);
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  // "host:port" as given, for messages.
  std::string Address() const;

  // GET /api/v1/diagnoses: the agent's current diagnoses (schema v1). Errors: kUnavailable when
  // the agent cannot be reached or answers 503 (diagnosis off there: the message says so),
  // kPermission for 401, kParse for an answer that is not schema v1, kResourceExhausted for an
  // answer over max_body_bytes.
  Result<std::vector<Diagnosis>> Diagnoses();

  // GET /healthz's body parsed as JSON text (liveness; never needs a token).
  Result<std::string> Health();
  // GET /api/v1/version's `node`: the node name the agent's own diagnoses use; "" from an agent
  // that reports none. Errors: as Diagnoses(), and kParse for a name that is not one (empty is
  // allowed; over 253 bytes, control characters or spaces are not).
  Result<std::string> NodeName();

  // Copies into `store` what the agent holds in [from, to]: every stored metric's series with
  // the agent's descriptors (name, type, unit, help, label names) and labels, every event, and
  // the step spans of every (job, rank) its series (labels job_id/rank) and events name.
  // Incremental: a sample at or before the destination series' newest is skipped, an event
  // equal to one the destination already holds is skipped, a step already known is replaced —
  // so pulling overlapping windows copies each thing once (the hub pulls with an overlap so
  // that samples an agent stored late are not lost).
  // A query the agent refuses with 422 or that answers more than max_body_bytes is split into
  // halves of its time window (down to min_split_window). Events are paged backwards from `to`
  // when a page holds the agent's 10 000-event maximum.
  // Errors: the agent unreachable, 401, or a malformed answer to /api/v1/metrics fail the whole
  // pull before anything is copied (stats->reached stays false). A failure of one metric, one
  // event page or one timeline is recorded in stats->errors and the rest is still copied; the
  // call then returns kUnavailable naming how many parts failed and the first reason.
  Status PullInto(store::Store& store, TimeNs from, TimeNs to, PullStats* stats = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "host:port", "[v6]:port" or "host" (port 9479). Errors: kInvalidArgument.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Result<HostPort> ParseHostPort(std::string_view text, uint16_t default_port);

// A sample value as the agent writes it ("70.5", "NaN", "+Inf", "-Inf"). Errors: kParse.
Result<double> ParseSampleValue(std::string_view text);

}  // namespace ithbat::remote
