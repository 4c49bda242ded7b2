#include "lab/checks_host_fabric.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>

#include "lab/check_util.h"

namespace ithbat::sim::lab {
namespace {

using detect::CounterGrowth;
using detect::SampleAt;

using Samples = std::vector<store::Sample>;

// The samples of the one series `selector` names on `node` (the first, when several match).
Samples OneSeries(const Evidence& ev, const std::string& node, const std::string& selector, TimeNs from, TimeNs to) {
  auto all = ev.Samples(node, selector, from, to);
  return all.empty() ? Samples{} : std::move(all.front().second);
}

// ---- the fabric ---------------------------------------------------------------------------

struct Port {
  std::string node;
  std::string nic;
  int64_t port = 1;
  std::vector<int64_t> gpus;  // GPUs that talk through it (empty: unknown, all of the node's)
  std::string Sel(const char* metric) const {
    return fmt::format("{}{{device={},port={}}}", metric, Quote(nic), Quote(std::to_string(port)));
  }
  std::string Name() const { return node + "/" + nic; }
};

// What a port's own counters say after the onset.
struct LinkState {
  double errors_before = 0, errors_after = 0;
  double before_s = 0, after_s = 0;
  double downed_after = 0;
  double rate_before = 0, rate_after_min = 0;
  std::optional<TimeNs> fault_seen;  // first sample at which the link fault was evident
  bool faulty() const { return fault_seen.has_value(); }
  std::string Text() const {
    return fmt::format("{:.0f} symbol errors in {:.0f} s before the onset, {:.0f} in {:.0f} s after; link downed {:.0f}x; "
                       "rate {:.1f} -> min {:.1f} Gb/s",
                       errors_before, before_s, errors_after, after_s, downed_after, rate_before * 8 / 1e9,
                       rate_after_min * 8 / 1e9);
  }
};

LinkState JudgeLink(const Evidence& ev, const Port& p, TimeNs from, TimeNs onset, TimeNs to) {
  LinkState st;
  st.before_s = static_cast<double>(onset - from) / 1e9;
  st.after_s = static_cast<double>(to - onset) / 1e9;
  const Samples errors = OneSeries(ev, p.node, p.Sel("ithbat_ib_symbol_errors_total"), from, to);
  st.errors_before = CounterGrowth(errors, from, onset);
  st.errors_after = CounterGrowth(errors, onset, to);
  const double before_rate = st.before_s > 0 ? st.errors_before / st.before_s : 0;
  // First sample after the onset where the errors since the onset are enough and come faster.
  for (const auto& x : errors) {
    if (x.t <= onset) continue;
    const double n = CounterGrowth(errors, onset, x.t);
    const double secs = static_cast<double>(x.t - onset) / 1e9;
    if (n >= kMinLinkErrors && secs > 0 && n / secs >= kLinkErrorRateFactor * before_rate) {
      st.fault_seen = x.t;
      break;
    }
  }
  const Samples downed = OneSeries(ev, p.node, p.Sel("ithbat_ib_link_downed_total"), from, to);
  st.downed_after = CounterGrowth(downed, onset, to);
  for (const auto& x : downed) {
    if (x.t > onset && CounterGrowth(downed, onset, x.t) > 0) {
      if (!st.fault_seen || x.t < *st.fault_seen) st.fault_seen = x.t;
      break;
    }
  }
  const Samples rate = OneSeries(ev, p.node, p.Sel("ithbat_ib_port_rate_bytes_per_second"), from, to);
  st.rate_after_min = INFINITY;
  for (const auto& x : rate) {
    if (x.t < onset) {
      st.rate_before = std::max(st.rate_before, x.v);
    } else {
      st.rate_after_min = std::min(st.rate_after_min, x.v);
      if (st.rate_before > 0 && x.v < kDowntrainedShare * st.rate_before) {
        if (!st.fault_seen || x.t < *st.fault_seen) st.fault_seen = x.t;
      }
    }
  }
  if (!std::isfinite(st.rate_after_min)) st.rate_after_min = 0;
  return st;
}

// Steps per second of the job's ranks on `node` (those in `gpus`, or all when empty) before and
// after the onset, from the probes' inferred steps. The "before" window starts when the rank's
// first step was inferred (the pattern needs a few steps to lock).
struct StepRates {
  double before = 0, after = 0;
  int ranks = 0;
};
StepRates JobStepRates(const Evidence& ev, const WorldJob& job, const std::string& node,
                       const std::vector<int64_t>& gpus, TimeNs onset, TimeNs to) {
  StepRates out;
  double sum_b = 0, sum_a = 0;
  for (const auto& r : job.ranks) {
    if (r.node != node || (!gpus.empty() && std::find(gpus.begin(), gpus.end(), r.gpu) == gpus.end())) continue;
    const Samples s = OneSeries(ev, node, fmt::format("ithbat_probe_steps_total{{pid={}}}", Quote(std::to_string(r.pid))),
                                job.started, to);
    TimeNs first = 0;
    for (const auto& x : s) {
      if (x.v > 0) {
        first = x.t;
        break;
      }
    }
    if (first == 0 || first >= onset || s.back().t <= onset) continue;
    const double b = CounterGrowth(s, first, onset) / (static_cast<double>(onset - first) / 1e9);
    const double a = CounterGrowth(s, onset, to) / (static_cast<double>(s.back().t - onset) / 1e9);
    sum_b += b;
    sum_a += a;
    ++out.ranks;
  }
  if (out.ranks > 0) {
    out.before = sum_b / out.ranks;
    out.after = sum_a / out.ranks;
  }
  return out;
}

// The ports a congestion finding watches: the job's nodes' NICs on the switch the resource
// (a tenant, another job, or a switch) shares with the job; all the job's NICs when the file
// says no switch.
std::vector<Port> JobPorts(const scenario::ResolvedScenario& resolved, const WorldJob& job,
                           const std::set<std::string>& switches) {
  std::vector<Port> out;
  const auto nodes = JobNodes(job);
  for (const auto& n : resolved.nodes) {
    if (!nodes.contains(n.name)) continue;
    for (const auto& nic : n.nics) {
      if (!switches.empty() && !switches.contains(nic.switch_name)) continue;
      out.push_back({n.name, nic.name, nic.port, nic.gpus});
    }
  }
  return out;
}

// ---- the host -----------------------------------------------------------------------------

struct WaitShare {
  double lag = 0, rank_seconds = 0, share = 0;
};
// Summed NCCL arrival lag of the job's ranks over their rank-time (as CheckDataImbalance).
WaitShare ArrivalWait(const Evidence& ev, const World& world, const WorldJob& job) {
  WaitShare w;
  const TimeNs from = job.started, to = JobEnd(world, job);
  for (const auto& node : JobNodes(job)) {
    for (const auto& v : ev.Increase(node, fmt::format("ithbat_probe_nccl_arrival_lag_seconds_total{{{}}}", JobPids(job, node)),
                                     from, to, Evidence::Birth::kZero)) {
      w.lag += v.value;
    }
  }
  w.rank_seconds = static_cast<double>(to - from) / 1e9 * static_cast<double>(job.ranks.size());
  w.share = w.rank_seconds > 0 ? w.lag / w.rank_seconds : 0;
  return w;
}

// Mean CPU pressure (PSI some avg10) on the job's nodes: reported, not judged — in the lab every
// simulated node mirrors the one machine's pressure.
double MeanPsi(const Evidence& ev, const WorldJob& job, TimeNs from, TimeNs to) {
  double sum = 0;
  int n = 0;
  for (const auto& node : JobNodes(job)) {
    for (const auto& v : ev.Mean(node, "ithbat_host_pressure_cpu_some_avg10_ratio", from, to)) {
      sum += v.value;
      ++n;
    }
  }
  return n > 0 ? sum / n : 0;
}

// The job's GPUs' utilisation in steady training (after its first step), per node, per agent
// tick (samples of one tick share a bucket of kTickBucket), per rank.
constexpr TimeNs kTickBucket = kNsPerSec / 2;
using UtilGrid = std::map<std::string, std::map<TimeNs, std::map<int64_t, double>>>;
UtilGrid JobUtil(const Evidence& ev, const WorldJob& job, TimeNs from, TimeNs to) {
  UtilGrid out;
  const TimeNs steady = job.steps.empty() ? from : std::max(from, job.steps.front().end);
  for (const auto& node : JobNodes(job)) {
    std::map<int64_t, int64_t> rank_of_gpu;
    for (const auto& r : job.ranks) {
      if (r.node == node) rank_of_gpu[r.gpu] = r.rank;
    }
    for (const auto& [v, samples] : ev.Samples(node, "ithbat_gpu_utilization_ratio", steady, to)) {
      const std::string g = Label(v.labels, "gpu");
      int64_t gpu = -1;
      if (std::from_chars(g.data(), g.data() + g.size(), gpu).ec != std::errc()) continue;
      auto it = rank_of_gpu.find(gpu);
      if (it == rank_of_gpu.end()) continue;
      for (const auto& s : samples) {
        if (s.t < steady) continue;
        out[node][(s.t + kTickBucket / 2) / kTickBucket * kTickBucket][it->second] = s.v;
      }
    }
  }
  return out;
}

std::map<int64_t, double> MeanUtilPerRank(const UtilGrid& grid) {
  std::map<int64_t, std::pair<double, int>> acc;
  for (const auto& [node, rows] : grid) {
    for (const auto& [t, per_rank] : rows) {
      for (const auto& [r, v] : per_rank) {
        acc[r].first += v;
        acc[r].second++;
      }
    }
  }
  std::map<int64_t, double> out;
  for (const auto& [r, p] : acc) out[r] = p.first / p.second;
  return out;
}

}  // namespace

LaunchStarvation CountLaunchStarvation(const Evidence& evidence, const WorldJob& job, TimeNs from, TimeNs to) {
  const UtilGrid grid = JobUtil(evidence, job, from, to);
  LaunchStarvation out;
  int& n = out.samples;
  int& followed = out.followed_by_last;
  std::set<int64_t>& ranks_hit = out.ranks;
  std::vector<std::string>& firsts = out.firsts;
  for (const auto& [node, rows] : grid) {
    for (const auto& [t, per_rank] : rows) {
      if (per_rank.size() < 2) continue;
      for (const auto& [rank, v] : per_rank) {
        std::vector<double> others;
        for (const auto& [r2, v2] : per_rank) {
          if (r2 != rank) others.push_back(v2);
        }
        std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
        if (v > kStarvedUtil || others[others.size() / 2] < kPeerBusyUtil) continue;
        ++n;
        ranks_hit.insert(rank);
        if (n == kMinStarvedSamples) out.first_seen = t;
        if (firsts.size() < 4) firsts.push_back(fmt::format("rank {} at +{:.0f}s", rank, (t - from) / 1e9));
        const WorldRank* wr = nullptr;
        for (const auto& r : job.ranks) {
          if (r.rank == rank) wr = &r;
        }
        if (wr == nullptr) continue;
        const Samples last = OneSeries(
            evidence, node, fmt::format("ithbat_probe_nccl_last_arrivals_total{{pid={}}}", Quote(std::to_string(wr->pid))),
            from, to);
        if (CounterGrowth(last, t - kNsPerSec, t + static_cast<TimeNs>(kStarvedLateWindowS * 1e9)) > 0) ++followed;
      }
    }
  }
  return out;
}

FindingCheck CheckNetwork(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const scenario::ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const TimeNs to = JobEnd(world, *job);
  const auto onset_opt = BudgetStart(world, resolved, f.budget, job);
  if (!onset_opt || *onset_opt <= job->started || *onset_opt >= to) {
    out.signals.push_back({"an onset inside the job to compare before and after", false,
                           "the budget's start is not inside the job's run", std::nullopt});
    return out;
  }
  const TimeNs onset = *onset_opt;
  const TimeNs from = job->started;

  // What the resource is decides what must be seen: a NIC (NODE/NIC) is a link fault on that
  // port; a tenant, another job or a switch is congestion on the job's ports toward it.
  const auto slash = f.resource.find('/');
  std::vector<Port> ports;
  bool link_mode = false;
  const scenario::TenantT<scenario::Plain>* tenant = nullptr;
  const WorldJob* other_job = nullptr;
  if (slash != std::string::npos) {
    link_mode = true;
    const std::string node = f.resource.substr(0, slash), nic = f.resource.substr(slash + 1);
    for (const auto& n : resolved.nodes) {
      if (n.name != node) continue;
      for (const auto& x : n.nics) {
        if (x.name == nic) ports.push_back({node, nic, x.port, x.gpus});
      }
    }
  } else {
    std::set<std::string> switches;
    for (const auto& t : resolved.tenants) {
      if (t.id == f.resource) tenant = &t;
    }
    if (tenant != nullptr && !tenant->switch_name.empty()) switches.insert(tenant->switch_name);
    other_job = world.Job(f.resource);
    if (other_job != nullptr) {
      const auto other_nodes = JobNodes(*other_job);
      for (const auto& n : resolved.nodes) {
        if (!other_nodes.contains(n.name)) continue;
        for (const auto& nic : n.nics) {
          if (!nic.switch_name.empty()) switches.insert(nic.switch_name);
        }
      }
    }
    for (const auto& s : resolved.fabric.switches) {
      if (s.name == f.resource) switches.insert(s.name);
    }
    ports = JobPorts(resolved, *job, switches);
  }
  if (ports.empty()) {
    out.signals.push_back({"the job's ports toward the resource", false,
                           fmt::format("no NIC of the job's nodes goes with {}", f.resource), std::nullopt});
    return out;
  }

  std::optional<TimeNs> first;
  // The nodes (and their GPUs) whose ranks' traffic crosses the ports that show the cause.
  std::map<std::string, std::vector<int64_t>> crossing;
  auto add_crossing = [&](const Port& p) {
    auto& g = crossing[p.node];
    if (p.gpus.empty()) {
      g.clear();
      g.push_back(-1);  // marker: every rank of the node
    } else if (g.empty() || g.front() != -1) {
      g.insert(g.end(), p.gpus.begin(), p.gpus.end());
    }
  };

  if (link_mode) {
    const Port& p = ports.front();
    const LinkState st = JudgeLink(evidence, p, from, onset, to);
    SignalResult fault{fmt::format("the link {} is failing after the onset (symbol errors rising, rate trained down "
                                   "or link down)",
                                   p.Name()),
                       st.faulty(), st.Text(), st.fault_seen};
    out.signals.push_back(fault);
    first = st.fault_seen;
    add_crossing(p);
  } else {
    // Congestion: the ports' xmit wait rises, the links are clean, and someone else's bytes
    // share them.
    SignalResult wait{"port_xmit_wait rises after the onset on the job's ports toward the shared fabric", false, "",
                      std::nullopt};
    SignalResult clean{"those links are clean (no error rise, full rate, never down)", true, "", std::nullopt};
    std::vector<std::string> wait_parts, clean_parts;
    std::vector<const Port*> waiting;
    for (const auto& p : ports) {
      const Samples w = OneSeries(evidence, p.node, p.Sel("ithbat_ib_transmit_wait_total"), from, to);
      const double before = CounterGrowth(w, from, onset);
      const double after = CounterGrowth(w, onset, to);
      const double before_rate = before / (static_cast<double>(onset - from) / 1e9);
      const double after_rate = after / (static_cast<double>(to - onset) / 1e9);
      const bool rises = after > 0 && after_rate >= kXmitWaitFactor * before_rate;
      wait_parts.push_back(fmt::format("{} {:.0f} -> {:.0f} ticks/s", p.Name(), before_rate, after_rate));
      if (!rises) continue;
      waiting.push_back(&p);
      for (const auto& x : w) {
        if (x.t > onset && CounterGrowth(w, onset, x.t) > 0) {
          if (!wait.first_seen || x.t < *wait.first_seen) wait.first_seen = x.t;
          break;
        }
      }
      const LinkState st = JudgeLink(evidence, p, from, onset, to);
      clean_parts.push_back(fmt::format("{}: {}", p.Name(), st.Text()));
      if (st.faulty()) clean.ok = false;
    }
    wait.ok = !waiting.empty();
    wait.observed = fmt::format("{}", fmt::join(wait_parts, "; "));
    out.signals.push_back(wait);
    if (waiting.empty()) {
      clean.ok = false;
      clean_parts.push_back("no port with a rising xmit wait");
    }
    clean.observed = fmt::format("{}", fmt::join(clean_parts, "; "));
    out.signals.push_back(clean);
    first = wait.first_seen;

    // Someone else's traffic: another job of the world transmits on its own ports of the shared
    // switch after the onset, or the waiting ports carry more bytes per step of the job than
    // before (the job's own bytes per step are fixed by its collectives).
    SignalResult foreign{fmt::format("other traffic shares the fabric ({})", f.resource), false, "", std::nullopt};
    std::vector<std::string> parts;
    if (other_job != nullptr) {
      double bytes = 0;
      for (const auto& node : JobNodes(*other_job)) {
        for (const auto& v : evidence.Increase(node, "ithbat_ib_transmit_bytes_total", onset, to)) bytes += v.value;
      }
      foreign.ok = bytes > 0;
      parts.push_back(fmt::format("job {} sent {:.2f} GB through its ports after the onset", other_job->id, bytes / 1e9));
    }
    for (const Port* p : waiting) {
      const Samples tx = OneSeries(evidence, p->node, p->Sel("ithbat_ib_transmit_bytes_total"), from, to);
      // Steps of one rank behind this port (its collectives set the job's own bytes).
      const WorldRank* rank = nullptr;
      for (const auto& r : job->ranks) {
        if (r.node == p->node && (p->gpus.empty() || std::find(p->gpus.begin(), p->gpus.end(), r.gpu) != p->gpus.end())) {
          rank = &r;
          break;
        }
      }
      if (rank == nullptr) continue;
      const Samples steps = OneSeries(
          evidence, p->node, fmt::format("ithbat_probe_steps_total{{pid={}}}", Quote(std::to_string(rank->pid))), from, to);
      TimeNs begin = 0;
      for (const auto& x : steps) {
        if (x.v > 0) {
          begin = x.t;
          break;
        }
      }
      if (begin == 0 || begin >= onset) continue;
      const double sb = CounterGrowth(steps, begin, onset), sa = CounterGrowth(steps, onset, to);
      const double bb = CounterGrowth(tx, begin, onset), ba = CounterGrowth(tx, onset, to);
      if (sb <= 0 || sa <= 0) continue;
      const double per_b = bb / sb, per_a = ba / sa;
      parts.push_back(fmt::format("{}: {:.2f} GB per step before, {:.2f} after", p->Name(), per_b / 1e9, per_a / 1e9));
      if (per_b > 0 && per_a >= kForeignTrafficFactor * per_b) foreign.ok = true;
    }
    if (tenant == nullptr && other_job == nullptr) parts.push_back(fmt::format("{} is a switch", f.resource));
    foreign.observed = parts.empty() ? std::string("no step counts to compare") : fmt::format("{}", fmt::join(parts, "; "));
    if (foreign.ok) foreign.first_seen = first;
    out.signals.push_back(foreign);
    for (const Port* p : waiting) add_crossing(*p);
  }

  // The job's collectives got slower: the ranks behind the ports make fewer steps a second.
  SignalResult slower{"the job's steps (its cross-node collectives) got slower after the onset", false, "",
                      std::nullopt};
  double sum_b = 0, sum_a = 0;
  int ranks = 0;
  for (const auto& [node, gpus] : crossing) {
    std::vector<int64_t> g = gpus;
    if (!g.empty() && g.front() == -1) g.clear();
    const StepRates r = JobStepRates(evidence, *job, node, g, onset, to);
    sum_b += r.before * r.ranks;
    sum_a += r.after * r.ranks;
    ranks += r.ranks;
  }
  const double rb = ranks > 0 ? sum_b / ranks : 0, ra = ranks > 0 ? sum_a / ranks : 0;
  slower.ok = ranks > 0 && ra > 0 && rb >= kCollectiveSlowdownFactor * ra;
  slower.observed = fmt::format("{:.2f} steps/s before, {:.2f} after, over {} rank(s) behind the port(s)", rb, ra, ranks);
  if (slower.ok) slower.first_seen = first;
  out.signals.push_back(slower);

  out.budget = Budget(world, resolved, f.budget, job, first);
  return out;
}

FindingCheck CheckHostBottleneck(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                                 const scenario::ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const TimeNs from = job->started, to = JobEnd(world, *job);

  // 1. A straggler: ranks wait for a late peer at the collectives.
  const WaitShare wait = ArrivalWait(evidence, world, *job);
  SignalResult late{"ranks wait for a late peer (NCCL arrival lag)", wait.share >= kMinWaitShare, "", std::nullopt};
  late.observed = fmt::format("{:.1f} s of arrival lag over {:.0f} rank-seconds ({:.1f}%); host CPU pressure (PSI some) "
                              "mean {:.2f}",
                              wait.lag, wait.rank_seconds, 100 * wait.share, MeanPsi(evidence, *job, from, to));
  out.signals.push_back(late);

  // 2. The late rank's GPU is starved of launches: idle while its peers are busy, and then it is
  // the last at the collective. Its host, not its work, made it late.
  SignalResult starved{"the late rank's GPU idles while its peers are busy (launch-starved by its host)", false, "",
                       std::nullopt};
  const UtilGrid grid = JobUtil(evidence, *job, from, to);
  const LaunchStarvation st = CountLaunchStarvation(evidence, *job, from, to);
  const int n = st.samples, followed = st.followed_by_last;
  const auto& ranks_hit = st.ranks;
  const auto& firsts = st.firsts;
  starved.first_seen = st.first_seen;
  const double share = n > 0 ? static_cast<double>(followed) / n : 0;
  starved.ok = n >= kMinStarvedSamples && share >= kStarvedLateShare;
  if (!starved.ok) starved.first_seen.reset();
  starved.observed = fmt::format("{} samples of a starved GPU among busy peers, on {} rank(s) ({}{}); the starved rank "
                                 "was last at the next collective in {} of them",
                                 n, ranks_hit.size(), fmt::join(firsts, ", "), n > 4 ? ", ..." : "", followed);
  out.signals.push_back(starved);

  // 3. Not an input-bound job: outside the stalls its GPUs are busy.
  SignalResult busy{"the job's GPUs are busy outside the stalls (not input-bound)", false, "", std::nullopt};
  const auto means = MeanUtilPerRank(grid);
  double lo = means.empty() ? 0 : 1, sum = 0;
  for (const auto& [r, m] : means) {
    lo = std::min(lo, m);
    sum += m;
  }
  const double mean = means.empty() ? 0 : sum / static_cast<double>(means.size());
  busy.ok = !means.empty() && mean > kInputMaxUtil;
  busy.observed = fmt::format("mean GPU utilisation {:.2f} over {} GPUs (lowest {:.2f})", mean, means.size(), lo);
  out.signals.push_back(busy);

  out.budget = Budget(world, resolved, f.budget, job, starved.first_seen);
  return out;
}

FindingCheck CheckInputPipeline(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                                const scenario::ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const TimeNs from = job->started, to = JobEnd(world, *job);

  // Steady training: from the first step on (model loading is not the loader's fault).
  const TimeNs steady = job->steps.empty() ? from : std::max(from, job->steps.front().start);
  const double steady_s = static_cast<double>(to - steady) / 1e9;

  // 1. The job's GPUs idle a large share of the time.
  SignalResult idle{"the job's GPUs idle a large share of the time", false, "", std::nullopt};
  const UtilGrid grid = JobUtil(evidence, *job, from, to);
  const auto means = MeanUtilPerRank(grid);
  double lo = 1, hi = 0, sum = 0;
  for (const auto& [r, m] : means) {
    lo = std::min(lo, m);
    hi = std::max(hi, m);
    sum += m;
  }
  const double job_mean = means.empty() ? 1 : sum / static_cast<double>(means.size());
  idle.ok = means.size() == job->ranks.size() && !means.empty() && job_mean <= kInputMaxUtil;
  idle.observed = means.empty() ? std::string("no utilisation of the job's GPUs")
                                : fmt::format("mean GPU utilisation {:.2f} (per rank {:.2f}..{:.2f}) over {} of {} GPUs",
                                              job_mean, lo, hi, means.size(), job->ranks.size());
  // First evidence: the first tick (after a few: one sample of a 1/6 s window says little) at
  // which the job's mean so far is low.
  if (idle.ok) {
    std::map<TimeNs, std::vector<std::pair<int64_t, double>>> by_time;
    for (const auto& [node, rows] : grid) {
      for (const auto& [t, per_rank] : rows) {
        for (const auto& [r, v] : per_rank) by_time[t].emplace_back(r, v);
      }
    }
    std::map<int64_t, std::pair<double, int>> run;
    int ticks = 0;
    for (const auto& [t, vals] : by_time) {
      for (const auto& [r, v] : vals) {
        run[r].first += v;
        run[r].second++;
      }
      double run_sum = 0;
      for (const auto& [r, p] : run) run_sum += p.first / p.second;
      if (++ticks >= kMinStarvedSamples && run.size() == means.size() &&
          run_sum / static_cast<double>(run.size()) <= kInputMaxUtil) {
        idle.first_seen = t;
        break;
      }
    }
  }
  out.signals.push_back(idle);

  // 2. The ranks wait for their data: their main threads sleep outside CUDA, on most ranks.
  SignalResult waits{"most ranks' main threads wait for their data (asleep outside CUDA), not for a peer", false, "",
                     std::nullopt};
  double least = INFINITY, most = 0, sync_sum = 0;
  int ranks_seen = 0, waiting = 0;
  for (const auto& r : job->ranks) {
    const std::string pid = Quote(std::to_string(r.pid));
    double asleep = 0, synced = 0;
    for (const auto& v : evidence.Increase(
             r.node, fmt::format("ithbat_sched_offcpu_seconds_total{{pid={},scope=\"main\",class=\"sleep\"}}", pid), steady,
             to, Evidence::Birth::kZero)) {
      asleep += v.value;
    }
    for (const auto& v : evidence.Increase(r.node, fmt::format("ithbat_probe_sync_blocked_seconds_total{{pid={}}}", pid),
                                           steady, to, Evidence::Birth::kZero)) {
      synced += v.value;
    }
    const double share = steady_s > 0 ? asleep / steady_s : 0;
    waiting += share >= kInputWaitShare ? 1 : 0;
    least = std::min(least, share);
    most = std::max(most, share);
    sync_sum += steady_s > 0 ? synced / steady_s : 0;
    ++ranks_seen;
  }
  if (ranks_seen == 0) least = 0;
  waits.ok = ranks_seen > 0 && 2 * waiting >= ranks_seen;
  waits.observed = fmt::format("{} of {} ranks' main threads asleep outside CUDA at least {:.0f}% of the time ({:.0f}%..{:.0f}% "
                               "per rank; CUDA syncs {:.0f}% on average)",
                               waiting, ranks_seen, 100 * kInputWaitShare, 100 * least, 100 * most,
                               ranks_seen ? 100 * sync_sum / ranks_seen : 0.0);
  if (waits.ok) waits.first_seen = idle.first_seen;
  out.signals.push_back(waits);

  // 3. The loader is CPU-busy: the ranks' worker processes run on a CPU much of the time.
  SignalResult loader{"the data loader's workers are CPU-busy", false, "", std::nullopt};
  double loader_s = 0;
  for (const auto& node : JobNodes(*job)) {
    for (const auto& v : evidence.Increase(node,
                                           fmt::format("ithbat_sched_oncpu_seconds_total{{{},scope=\"children\"}}",
                                                       JobPids(*job, node)),
                                           steady, to, Evidence::Birth::kZero)) {
      loader_s += v.value;
    }
  }
  const double rank_s = steady_s * static_cast<double>(job->ranks.size());
  const double cores = rank_s > 0 ? loader_s / rank_s : 0;
  loader.ok = cores >= kLoaderBusyCores;
  loader.observed = fmt::format("the ranks' worker processes ran {:.1f} CPU-seconds: {:.2f} cores per rank", loader_s, cores);
  out.signals.push_back(loader);

  out.budget = Budget(world, resolved, f.budget, job, idle.first_seen);
  return out;
}

}  // namespace ithbat::sim::lab
