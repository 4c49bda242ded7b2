#pragma once
// The hub: the diagnosis engine over every agent's data at once. Each round it pulls what is new
// from every configured agent (remote::AgentClient::PullInto, incrementally, into one in-memory
// store per node that keeps `lookback` of data), then runs the same engine the agents run —
// detect::DiscoverJobs, detect::RunDetectors, an investigate::Investigator kept across rounds —
// over a FleetView of ALL nodes clamped to now. So job-wide and cross-job findings that need
// several nodes (a multi-node job's stall or stragglers, one mount hurting jobs on different
// nodes: blast radius) appear here though no agent alone can see them.
//
// An agent that cannot be reached does not stop the hub: its node is "stale" until a pull
// succeeds again; the change is logged once per change of state; its data stays in its store
// (ending at the last pull) and every diagnosis naming a stale node keeps the state it had
// before the node went stale (a hole in the data must neither open nor resolve an incident).
// A diagnosis first found while one of its nodes is stale waits until the node is back.
//
// Thread safety: Round runs on one thread at a time (Start's thread, or the caller's in
// --once); Current, Agents, Stats may be called from any thread (the HTTP server's).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"
#include "investigate/investigator.h"
#include "remote/agent_client.h"
#include "store/store.h"

namespace ithbat::hub {

// One agent to pull: where it is and the node name its data is filed under (diagnoses name
// nodes by it).
struct AgentTarget {
  std::string node;
  std::string host;
  uint16_t port = 0;
  // Named with NODE=: kept. Otherwise the hub asks the agent for the node name its own
  // diagnoses use (/api/v1/version) on first contact and takes it when no other agent has it.
  bool named = false;
  std::string Address() const;  // host:port
};

// `--agent` values: "HOST:PORT", "HOST" (port 9479), "[V6]:PORT", or "NODE=HOST:PORT" to name the
// node. Unnamed agents are named by their host, or by host:port when several agents share a host
// (several agents on one machine, as in tests), until they report their node name. Errors: kInvalidArgument for a bad value, a
// node named twice, or the same address twice.
Result<std::vector<AgentTarget>> ParseAgentTargets(const std::vector<std::string>& values);

struct HubOptions {
  std::vector<AgentTarget> agents;
  std::string agent_token;                // bearer token sent to every agent ("" = none)
  TimeNs interval = 10 * kNsPerSec;       // one round this often
  TimeNs lookback = 15 * 60 * kNsPerSec;  // data kept per node, and each round's window
  // Each pull starts this long before the previous one ended: samples and events an agent stored
  // late (a collector's tick finishing after the pull) are still copied; nothing is copied twice.
  TimeNs pull_overlap = 30 * kNsPerSec;
  uint64_t memory_budget_per_node = 256ull << 20;
  size_t max_parallel_pulls = 8;
  remote::AgentClientOptions client;  // timeouts and bounds (host, port, token set per agent)
  investigate::InvestigateOptions investigate;
};

struct AgentState {
  AgentTarget target;
  bool up = false;    // the last pull reached the agent
  bool stale = true;  // its node's data ends at an earlier round (down, or never pulled)
  uint64_t pulls = 0;
  uint64_t pull_errors = 0;  // pulls that failed or were partial
  TimeNs last_success = 0;   // `now` of the last pull that reached it (0: never)
  TimeNs pulled_to = 0;      // its store holds data up to here
  std::string last_error;    // of the last pull ("" when it was complete)
  double last_pull_seconds = 0;
  remote::PullStats last_pull;  // what the last pull copied
};

struct HubStats {
  uint64_t rounds = 0;
  uint64_t round_errors = 0;      // engine rounds that threw (the previous diagnoses stay)
  double last_round_seconds = 0;  // pulls and engine
  TimeNs last_round_at = 0;       // the `now` of the last round (0: none yet)
};

class Hub {
 public:
  // Errors: kInvalidArgument for no agents, a duplicate node or bad intervals.
  static Result<std::unique_ptr<Hub>> Create(HubOptions options);
  ~Hub();  // Stop()
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  // Called after every round with that round's diagnoses (the notifier). Set before Start.
  void SetObserver(std::function<void(const std::vector<Diagnosis>&)> observer);

  // One round judged at `now`: pull every agent, run the engine. Returns an error only when the
  // engine failed (agents that cannot be reached are state, not errors).
  Status Round(TimeNs now);

  // Rounds every `interval` on a thread of its own until Stop.
  void Start();
  void Stop();

  std::vector<Diagnosis> Current() const;
  std::vector<AgentState> Agents() const;
  std::vector<std::string> StaleNodes() const;
  HubStats Stats() const;
  const HubOptions& options() const { return options_; }

 private:
  explicit Hub(HubOptions options);
  struct Node;
  void PullAll(TimeNs now);
  void PullOne(Node& node, TimeNs now);
  // Files `node`'s data under the node name its agent reported, unless another node has it.
  void AdoptName(Node& node, const std::string& reported);

  const HubOptions options_;
  std::vector<std::unique_ptr<Node>> nodes_;    // one per agent; its store only its pull touches
  investigate::Investigator investigator_;      // touched by Round only
  std::map<std::string, Diagnosis> published_;  // Round only: the last published state per id
  std::function<void(const std::vector<Diagnosis>&)> observer_;

  mutable std::mutex mu_;  // guards current_, stats_ and every Node's state
  std::vector<Diagnosis> current_;
  HubStats stats_;

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// The Prometheus text of the hub's self-metrics (docs/hub.md): rounds, round seconds, agent up,
// pull errors, diagnoses active by verdict/cause/job, and the notifier's counters when given.
struct NotifyCounters {
  bool enabled = false;
  uint64_t sent = 0, failed = 0, dropped = 0, retries = 0;
  size_t queued = 0;
};
std::string RenderHubMetrics(const Hub& hub, const NotifyCounters& notify);

}  // namespace ithbat::hub
