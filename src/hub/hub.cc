#include "hub/hub.h"

#include <algorithm>
#include <exception>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "agent/logging.h"
#include "detect/detector.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::hub {
namespace {

constexpr uint16_t kDefaultAgentPort = 9479;
constexpr size_t kMaxAgents = 4096;

// Every node a diagnosis names: its node list, its ranks' and its GPUs' nodes.
std::set<std::string> NodesOf(const Diagnosis& d) {
  std::set<std::string> out(d.subjects.nodes.begin(), d.subjects.nodes.end());
  for (const RankRef& r : d.subjects.ranks) {
    if (!r.node.empty()) out.insert(r.node);
  }
  for (const GpuRef& g : d.subjects.gpus) {
    if (!g.node.empty()) out.insert(g.node);
  }
  return out;
}

}  // namespace

std::string AgentTarget::Address() const {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

Result<std::vector<AgentTarget>> ParseAgentTargets(const std::vector<std::string>& values) {
  if (values.size() > kMaxAgents) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "at most {} agents, got {}", kMaxAgents, values.size());
  }
  std::vector<AgentTarget> out;
  std::vector<bool> named;
  for (const std::string& v : values) {
    std::string_view text = v, node;
    // NODE=ADDR; a '=' cannot appear in a host or port.
    if (const size_t eq = text.find('='); eq != std::string_view::npos) {
      node = text.substr(0, eq);
      text.remove_prefix(eq + 1);
      if (node.empty() || node.size() > 253) {
        return MakeErrorF(ErrorCode::kInvalidArgument, "--agent '{}': empty node name before '='",
                          v.substr(0, 100));
      }
    }
    auto hp = remote::ParseHostPort(text, kDefaultAgentPort);
    if (!hp) return MakeErrorF(ErrorCode::kInvalidArgument, "--agent {}", hp.error().message);
    out.push_back(AgentTarget{std::string(node), hp->host, hp->port, !node.empty()});
    named.push_back(!node.empty());
  }
  std::map<std::string, int> per_host;
  for (const auto& a : out) ++per_host[a.host];
  std::set<std::string> nodes, addresses;
  for (size_t i = 0; i < out.size(); ++i) {
    AgentTarget& a = out[i];
    if (!named[i]) a.node = per_host[a.host] > 1 ? a.Address() : a.host;
    if (!addresses.insert(a.Address()).second) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "--agent {} is given twice", a.Address());
    }
    if (!nodes.insert(a.node).second) {
      return MakeErrorF(ErrorCode::kInvalidArgument,
                        "two agents are named node '{}'; name them NODE=HOST:PORT", a.node);
    }
  }
  return out;
}

struct Hub::Node {
  AgentTarget target;  // its node name changes only in its own pull, under Hub::mu_ (AdoptName)
  std::unique_ptr<store::Store> store;
  std::unique_ptr<remote::AgentClient> client;
  AgentState state;  // guarded by Hub::mu_ (written by the pull, read by the server)
  bool name_asked = false;  // unnamed targets: the agent answered /api/v1/version (after a pull)
};

Hub::Hub(HubOptions options) : options_(std::move(options)), investigator_(options_.investigate) {}

Result<std::unique_ptr<Hub>> Hub::Create(HubOptions options) {
  if (options.agents.empty())
    return MakeError(ErrorCode::kInvalidArgument, "the hub needs at least one agent (--agent HOST:PORT)");
  if (options.interval <= 0 || options.lookback <= 0 || options.pull_overlap < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "the hub's interval and lookback must be positive");
  }
  if (options.max_parallel_pulls == 0) options.max_parallel_pulls = 1;
  std::set<std::string> names;
  for (const auto& a : options.agents) {
    if (a.node.empty() || !names.insert(a.node).second) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "agent node names must be unique and non-empty ('{}')",
                        a.node);
    }
  }
  std::unique_ptr<Hub> hub(new Hub(std::move(options)));
  for (const AgentTarget& t : hub->options_.agents) {
    auto node = std::make_unique<Node>();
    node->target = t;
    store::StoreOptions so;
    // The engine looks back `lookback`; the pull overlap is re-read, not kept longer.
    so.retention = hub->options_.lookback;
    so.memory_budget_bytes = hub->options_.memory_budget_per_node;
    auto s = store::Store::Open(so);
    if (!s) return std::unexpected(s.error());
    node->store = std::move(*s);
    remote::AgentClientOptions co = hub->options_.client;
    co.host = t.host;
    co.port = t.port;
    co.bearer_token = hub->options_.agent_token;
    node->client = std::make_unique<remote::AgentClient>(co);
    node->state.target = t;
    hub->nodes_.push_back(std::move(node));
  }
  return hub;
}

Hub::~Hub() { Stop(); }

void Hub::SetObserver(std::function<void(const std::vector<Diagnosis>&)> observer) {
  observer_ = std::move(observer);
}

void Hub::PullOne(Node& node, TimeNs now) {
  AgentState before;
  {
    std::lock_guard lock(mu_);
    before = node.state;
  }
  // From where the last pull ended (less the overlap), never before the lookback.
  TimeNs from = now - options_.lookback;
  if (before.pulled_to > 0) from = std::max(from, std::min(before.pulled_to, now) - options_.pull_overlap);
  const TimeNs started = MonotonicNowNs();
  remote::PullStats stats;
  Status st = Ok();
  try {
    st = node.client->PullInto(*node.store, from, now, &stats);
    // Asked once the agent answers (an unreachable one must not cost its connect timeout twice
    // a round), before its data is named in this round's diagnoses. An agent that names no node,
    // or a name that is not one, keeps the host's.
    if (stats.reached && !node.target.named && !node.name_asked) {
      auto name = node.client->NodeName();
      if (name) {
        node.name_asked = true;
        AdoptName(node, *name);
      } else if (name.error().code == ErrorCode::kParse) {
        node.name_asked = true;
        agent::GetLogger("hub")->warn("agent {}: {}; its node stays '{}'", node.target.Address(),
                                      name.error().message, node.target.node);
      }
    }
  } catch (const std::exception& e) {
    st = MakeErrorF(ErrorCode::kInternal, "pull from {} threw: {}", node.target.Address(), e.what());
  }
  node.store->EnforceRetention(now);
  const double seconds = static_cast<double>(MonotonicNowNs() - started) / kNsPerSec;

  AgentState after = before;
  ++after.pulls;
  after.last_pull_seconds = seconds;
  after.last_pull = stats;
  after.up = stats.reached;
  after.last_error = st ? std::string() : st.error().message;
  if (!st) ++after.pull_errors;
  if (stats.reached) {
    after.last_success = now;
    after.pulled_to = now;
    after.stale = false;
  } else {
    after.stale = true;
  }
  auto log = agent::GetLogger("hub");
  // Logged once per change of state, not every round.
  if (after.up != before.up || before.pulls == 0) {
    if (after.up) {
      log->info("agent {} (node {}) is up{}", node.target.Address(), node.target.node,
                before.pulls == 0 ? "" : " again");
    } else {
      log->warn("agent {} (node {}) is down: {}; its node is stale, its diagnoses keep their last state",
                node.target.Address(), node.target.node, after.last_error);
    }
  } else if (after.up && !st && after.last_error != before.last_error) {
    log->warn("agent {} (node {}): {}", node.target.Address(), node.target.node, after.last_error);
  }
  after.target = node.target;  // renamed by AdoptName since `before` was taken
  std::lock_guard lock(mu_);
  node.state = std::move(after);
}

void Hub::PullAll(TimeNs now) {
  // Pulls run in parallel (an unreachable agent costs its connect timeout, not everyone's);
  // each thread touches only its own node's store and client.
  for (size_t i = 0; i < nodes_.size(); i += options_.max_parallel_pulls) {
    const size_t end = std::min(nodes_.size(), i + options_.max_parallel_pulls);
    std::vector<std::thread> threads;
    threads.reserve(end - i);
    for (size_t k = i; k < end; ++k) threads.emplace_back([this, k, now] { PullOne(*nodes_[k], now); });
    for (auto& t : threads) t.join();
  }
}

void Hub::AdoptName(Node& node, const std::string& reported) {
  if (reported.empty() || reported == node.target.node) return;
  auto log = agent::GetLogger("hub");
  std::lock_guard lock(mu_);
  // Other pulls rename only their own node, under mu_: the names read here are settled.
  const bool taken = std::any_of(nodes_.begin(), nodes_.end(),
                                 [&](const auto& o) { return o.get() != &node && o->target.node == reported; });
  if (taken) {
    log->warn("agent {} reports node '{}', which another agent's node is named already; it stays '{}' (name it with "
              "--agent NODE=HOST:PORT)",
              node.target.Address(), reported, node.target.node);
    return;
  }
  log->info("agent {} reports node '{}': its data is filed under it (was '{}')", node.target.Address(), reported,
            node.target.node);
  node.target.node = reported;  // PullOne copies it into the node's state with the pull's outcome
}

Status Hub::Round(TimeNs now) {
  const TimeNs started = MonotonicNowNs();
  PullAll(now);

  std::set<std::string> stale;
  std::map<std::string, const store::Store*> stores;
  {
    std::lock_guard lock(mu_);
    for (const auto& n : nodes_) {
      stores.emplace(n->target.node, n->store.get());
      if (n->state.stale) stale.insert(n->target.node);
    }
  }
  const TimeNs from = now - options_.lookback;
  auto round = investigator_.Round(detect::FleetView::Borrowing(stores), from, now);
  const std::string failure = round ? std::string() : round.error().message;
  std::vector<Diagnosis> result = round ? std::move(*round) : std::vector<Diagnosis>{};

  std::vector<Diagnosis> published;
  if (failure.empty()) {
    // A stale node's data stops at its last pull: what the engine now says about it is about a
    // hole, so every diagnosis naming it keeps its last published state.
    auto touches_stale = [&](const Diagnosis& d) {
      if (stale.empty()) return false;
      for (const auto& n : NodesOf(d)) {
        if (stale.contains(n)) return true;
      }
      return false;
    };
    std::set<std::string> ids;
    for (Diagnosis& d : result) {
      if (touches_stale(d)) {
        auto it = published_.find(d.id);
        if (it == published_.end()) continue;  // new while a node is stale: wait for its data
        published.push_back(it->second);
      } else {
        published.push_back(std::move(d));
      }
      ids.insert(published.back().id);
    }
    for (const auto& [id, d] : published_) {
      if (!ids.contains(id) && touches_stale(d)) published.push_back(d);
    }
    std::stable_sort(published.begin(), published.end(),
                     [](const Diagnosis& a, const Diagnosis& b) { return a.opened_at < b.opened_at; });
    published_.clear();
    for (const auto& d : published) published_.emplace(d.id, d);
  }

  const double seconds = static_cast<double>(MonotonicNowNs() - started) / kNsPerSec;
  {
    std::lock_guard lock(mu_);
    ++stats_.rounds;
    stats_.last_round_seconds = seconds;
    stats_.last_round_at = now;
    if (!failure.empty()) {
      ++stats_.round_errors;
    } else {
      current_ = published;
    }
  }
  if (!failure.empty()) return MakeError(ErrorCode::kInternal, "hub " + failure);
  if (observer_) observer_(published);
  return Ok();
}

void Hub::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(run_mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    auto log = agent::GetLogger("hub");
    while (true) {
      const TimeNs began = MonotonicNowNs();
      if (auto st = Round(NowNs()); !st) log->error("{}", st.error().message);
      const TimeNs spent = MonotonicNowNs() - began;
      std::unique_lock lock(run_mu_);
      // A round longer than the interval starts the next at once rather than piling up.
      const TimeNs wait = std::max<TimeNs>(0, options_.interval - spent);
      if (run_cv_.wait_for(lock, std::chrono::nanoseconds(wait), [&] { return stopping_; })) return;
    }
  });
}

void Hub::Stop() {
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<Diagnosis> Hub::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::vector<AgentState> Hub::Agents() const {
  std::lock_guard lock(mu_);
  std::vector<AgentState> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n->state);
  return out;
}

std::vector<std::string> Hub::StaleNodes() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& n : nodes_) {
    if (n->state.stale) out.push_back(n->target.node);
  }
  return out;
}

HubStats Hub::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace ithbat::hub
