#include "lab/checks_gpu.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

#include "lab/check_util.h"

namespace ithbat::sim::lab {
namespace {

using scenario::ExpectedFinding;

// The clock-event reasons that mean heat or a power brake. Power capping (sw_power_cap) and idle
// are what every loaded or idle GPU shows: never evidence.
constexpr const char* kThermalReasons = "sw_thermal_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown|hw_slowdown";

struct SubjectGpu {
  std::string node;
  int64_t gpu = -1;
  bool operator<(const SubjectGpu& o) const { return std::tie(node, gpu) < std::tie(o.node, o.gpu); }
  bool operator==(const SubjectGpu& o) const = default;
};

std::string GpuName(const SubjectGpu& g) { return fmt::format("{}:{}", g.node, g.gpu); }
std::string GpuSel(int64_t gpu) { return fmt::format("gpu={}", Quote(std::to_string(gpu))); }

// The finding's subject GPUs: those it names, and those of the ranks it names.
std::set<SubjectGpu> SubjectGpus(const ExpectedFinding& f, const WorldJob* job) {
  std::set<SubjectGpu> out;
  for (const auto& g : f.gpus) out.insert({g.node, g.index});
  if (job != nullptr) {
    for (int64_t r : f.ranks) {
      for (const auto& wr : job->ranks) {
        if (wr.rank == r) out.insert({wr.node, wr.gpu});
      }
    }
  }
  return out;
}

// The job's ranks that run on a subject GPU, or that the finding names.
std::set<int64_t> SubjectRanks(const ExpectedFinding& f, const WorldJob& job) {
  std::set<int64_t> out(f.ranks.begin(), f.ranks.end());
  for (const auto& g : f.gpus) {
    for (const auto& wr : job.ranks) {
      if (wr.node == g.node && wr.gpu == g.index) out.insert(wr.rank);
    }
  }
  return out;
}

// A counter's first increase at or after `from` (sample times), and its total increase there.
struct Growth {
  double total = 0;
  std::optional<TimeNs> first;
};
Growth CounterGrowth(const Evidence& evidence, const std::string& node, const std::string& selector, TimeNs from,
                     TimeNs to) {
  Growth g;
  for (const auto& [v, samples] : evidence.Samples(node, selector, kMinTime, to)) {
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].t < from) continue;
      const double d = samples[i].v - samples[i - 1].v;
      const double grew = d >= 0 ? d : samples[i].v;  // a reset: the new value is growth
      if (grew <= 0) continue;
      g.total += grew;
      if (!g.first || samples[i].t < *g.first) g.first = samples[i].t;
    }
  }
  return g;
}

// Xid and uncorrectable ECC counted by the agent on one GPU in [from, to]: the counters, and the
// NVML Xid events (exactly timed) of that GPU in the node's store.
Growth HardwareFaults(const Evidence& evidence, const SubjectGpu& g, TimeNs from, TimeNs to) {
  Growth out = CounterGrowth(evidence, g.node, fmt::format("ithbat_gpu_xid_errors_total{{{}}}", GpuSel(g.gpu)), from, to);
  const Growth ecc = CounterGrowth(
      evidence, g.node,
      fmt::format("ithbat_gpu_ecc_errors_total{{{},type=\"uncorrected\",counter=\"volatile\"}}", GpuSel(g.gpu)), from, to);
  out.total += ecc.total;
  if (ecc.first && (!out.first || *ecc.first < *out.first)) out.first = ecc.first;
  if (const store::Store* s = evidence.StoreOf(g.node)) {
    store::EventQuery q;
    q.kinds = {EventKind::kXid};
    q.gpu = static_cast<int32_t>(g.gpu);
    q.from = from;
    q.to = to;
    for (const auto& e : s->Events(q)) {
      if (e.source != "nvml") continue;  // kernel-log Xids carry no reliable GPU index here
      if (!out.first || e.time < *out.first) out.first = e.time;
      if (out.total == 0) out.total = 1;
    }
  }
  return out;
}

// The job's logged losses (rank 0's output), in step order.
std::vector<Event> Losses(const Evidence& evidence, const WorldJob& job) {
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  q.pid = LoggingPid(job);
  auto events = evidence.Events(q);
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.step < b.step; });
  return events;
}

// One process's per-pid counter (summed over its other labels): the last value, when it first
// was above zero, and when it last grew.
struct Progress {
  double count = 0;
  std::optional<TimeNs> first;
  std::optional<TimeNs> last_growth;
};
Progress PidCounter(const Evidence& evidence, const std::string& metric, const WorldRank& r, TimeNs from, TimeNs to) {
  Progress p;
  for (const auto& [v, samples] :
       evidence.Samples(r.node, fmt::format("{}{{pid={}}}", metric, Quote(std::to_string(r.pid))), from, to)) {
    if (samples.empty()) continue;
    p.count += samples.back().v;
    double prev = 0;  // a per-process counter is born at its first event: its first value is growth
    for (const auto& s : samples) {
      if (s.v > 0 && (!p.first || s.t < *p.first)) p.first = s.t;
      if (s.v > prev && (!p.last_growth || s.t > *p.last_growth)) p.last_growth = s.t;
      prev = s.v;
    }
  }
  return p;
}

}  // namespace

double ThermalActiveShare(const Evidence& evidence, const std::string& node, int64_t gpu, TimeNs from, TimeNs to) {
  std::map<TimeNs, bool> active;
  for (const auto& [v, samples] : evidence.Samples(
           node, fmt::format("ithbat_gpu_clock_event_active{{{},reason=~\"{}\"}}", GpuSel(gpu), kThermalReasons), from,
           to)) {
    for (const auto& s : samples) active[s.t] = active[s.t] || s.v > 0.5;
  }
  int on = 0;
  for (const auto& [t, a] : active) on += a ? 1 : 0;
  return active.empty() ? 0.0 : static_cast<double>(on) / static_cast<double>(active.size());
}

FindingCheck CheckThermalPower(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                               const ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const std::set<SubjectGpu> subjects = SubjectGpus(f, job);
  if (subjects.empty()) {
    out.signals.push_back({"a subject GPU is named", false, "the finding names no GPU and no rank", std::nullopt});
    return out;
  }
  const TimeNs to = JobEnd(world, *job);
  const TimeNs from = std::max(job->started, BudgetStart(world, resolved, f.budget, job).value_or(job->started));

  // 1. The subject GPUs' clocks are held down by heat or a power brake.
  SignalResult reason{"the subject GPU reports a thermal/power-brake clock event", true, "", std::nullopt};
  std::vector<std::string> parts;
  TimeNs reason_seen = 0;
  for (const auto& g : subjects) {
    std::map<TimeNs, bool> active;  // any thermal reason at each sample time
    for (const auto& [v, samples] :
         evidence.Samples(g.node, fmt::format("ithbat_gpu_clock_event_active{{{},reason=~\"{}\"}}", GpuSel(g.gpu),
                                              kThermalReasons),
                          from, to)) {
      for (const auto& s : samples) active[s.t] = active[s.t] || s.v > 0.5;
    }
    int on = 0, streak = 0;
    std::optional<TimeNs> seen;
    for (const auto& [t, a] : active) {
      on += a ? 1 : 0;
      streak = a ? streak + 1 : 0;
      if (streak == kThermalDebounce && !seen) seen = t;
    }
    const double share = active.empty() ? 0 : static_cast<double>(on) / static_cast<double>(active.size());
    const bool ok = share >= kThermalActiveShare && seen.has_value();
    if (!ok) reason.ok = false;
    if (seen) reason_seen = std::max(reason_seen, *seen);
    parts.push_back(fmt::format("{}: thermal reason in {} of {} samples", GpuName(g), on, active.size()));
  }
  // The job's other GPUs, for the record (a hot room throttles them too; that is still heat).
  int others_hot = 0, others = 0;
  for (const auto& r : job->ranks) {
    if (subjects.count({r.node, r.gpu})) continue;
    ++others;
    for (const auto& v : evidence.Max(r.node,
                                      fmt::format("ithbat_gpu_clock_event_active{{{},reason=~\"{}\"}}", GpuSel(r.gpu),
                                                  kThermalReasons),
                                      from, to)) {
      if (v.value > 0.5) {
        ++others_hot;
        break;
      }
    }
  }
  reason.observed = fmt::format("{}; {} of the job's {} other GPUs ever showed one", fmt::join(parts, ", "), others_hot,
                                others);
  if (reason.ok && reason_seen > 0) reason.first_seen = reason_seen;
  out.signals.push_back(reason);

  // 2. Its SM clock sits below the job's other GPUs.
  SignalResult clock{"the subject GPU's SM clock is below the job's other GPUs", true, "", std::nullopt};
  std::vector<double> other_means;
  std::map<SubjectGpu, double> subject_means;
  for (const auto& r : job->ranks) {
    const SubjectGpu g{r.node, r.gpu};
    for (const auto& v :
         evidence.Mean(r.node, fmt::format("ithbat_gpu_clock_hertz{{{},clock=\"sm\"}}", GpuSel(r.gpu)), from, to)) {
      if (subjects.count(g)) {
        subject_means[g] = v.value;
      } else {
        other_means.push_back(v.value);
      }
    }
  }
  double median = 0;
  if (!other_means.empty()) {
    std::sort(other_means.begin(), other_means.end());
    median = other_means[other_means.size() / 2];
  }
  parts.clear();
  for (const auto& g : subjects) {
    auto it = subject_means.find(g);
    const double ratio = it != subject_means.end() && median > 0 ? it->second / median : 1;
    if (it == subject_means.end() || median <= 0 || ratio > kThermalClockRatio) clock.ok = false;
    parts.push_back(fmt::format("{}: {:.0f} MHz ({:.0f}% of the others' median)", GpuName(g),
                                it != subject_means.end() ? it->second / 1e6 : 0.0, 100 * ratio));
  }
  clock.observed = fmt::format("{}; median of {} other GPUs {:.0f} MHz", fmt::join(parts, ", "), other_means.size(),
                               median / 1e6);
  out.signals.push_back(clock);

  // 3. The same rank is the last to arrive, collective after collective (not a rotation).
  SignalResult persistent{"the subject rank is the last arrival persistently (not rotating)", true, "", std::nullopt};
  const std::set<int64_t> subject_ranks = SubjectRanks(f, *job);
  std::set<std::string> subject_nodes;
  for (const auto& g : subjects) subject_nodes.insert(g.node);
  parts.clear();
  TimeNs persist_seen = 0;
  for (const auto& node : subject_nodes) {
    std::set<std::string> subject_pids;
    size_t local = 0;
    for (const auto& r : job->ranks) {
      if (r.node != node) continue;
      ++local;
      if (subject_ranks.count(r.rank)) subject_pids.insert(std::to_string(r.pid));
    }
    if (local < 2 || subject_pids.empty()) {
      persistent.ok = false;
      parts.push_back(fmt::format("{}: {} rank(s) of the job, {} subject: no peers to arrive before it", node, local,
                                  subject_pids.size()));
      continue;
    }
    std::vector<std::pair<TimeNs, std::pair<double, bool>>> increments;  // (t, (count, subject))
    for (const auto& [v, samples] : evidence.Samples(
             node, fmt::format("ithbat_probe_nccl_last_arrivals_total{{{}}}", JobPids(*job, node)), job->started, to)) {
      const bool subject = subject_pids.count(Label(v.labels, "pid")) > 0;
      double prev = 0;
      for (const auto& s : samples) {
        const double d = s.v >= prev ? s.v - prev : s.v;
        prev = s.v;
        if (d > 0 && s.t > from) increments.push_back({s.t, {d, subject}});
      }
    }
    std::sort(increments.begin(), increments.end());
    // With few ranks on the node a fair share is already large: ask for 1.5 fair shares then,
    // the share data_imbalance's rotation test allows at most.
    const double fair = static_cast<double>(subject_pids.size()) / static_cast<double>(local);
    const double need = std::min(kPersistentMaxNeeded, std::max(kPersistentLastShare, 1.5 * fair));
    double total = 0, mine = 0;
    std::optional<TimeNs> seen;
    for (const auto& [t, inc] : increments) {
      total += inc.first;
      mine += inc.second ? inc.first : 0;
      if (!seen && total >= kPersistentMinAligned && mine >= need * total) seen = t;
    }
    const double share = total > 0 ? mine / total : 0;
    const bool ok = total >= kPersistentMinAligned && share >= need;
    if (!ok) persistent.ok = false;
    if (seen) persist_seen = std::max(persist_seen, *seen);
    parts.push_back(fmt::format("{}: subject rank(s) last in {:.0f} of {:.0f} aligned collectives ({:.0f}%, fair share "
                                "{:.0f}%, need {:.0f}%)",
                                node, mine, total, 100 * share, 100 * fair, 100 * need));
  }
  persistent.observed = fmt::format("{}", fmt::join(parts, "; "));
  if (persistent.ok && persist_seen > 0) persistent.first_seen = persist_seen;
  out.signals.push_back(persistent);

  std::optional<TimeNs> seen;
  if (reason.first_seen && persistent.first_seen) seen = std::max(*reason.first_seen, *persistent.first_seen);
  out.budget = Budget(world, resolved, f.budget, job, seen);
  return out;
}

FindingCheck CheckGpuHardware(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                              const ExpectedFinding& f) {
  const WorldJob* job = f.job.empty() ? nullptr : world.Job(f.job);
  if (!f.job.empty() && job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const std::set<SubjectGpu> subjects = SubjectGpus(f, job);
  if (subjects.empty()) {
    out.signals.push_back({"a subject GPU is named", false, "the finding names no GPU and no rank", std::nullopt});
    return out;
  }
  const TimeNs from = job != nullptr ? job->started : world.started;
  const TimeNs to = job != nullptr ? JobEnd(world, *job) : world.ended;

  // 1. The agent counted an Xid or an uncorrectable ECC error on the subject GPU while the job ran.
  SignalResult fault{"an Xid or uncorrectable ECC error on the subject GPU during the job", true, "", std::nullopt};
  std::vector<std::string> parts;
  std::optional<TimeNs> first;
  for (const auto& g : subjects) {
    const Growth h = HardwareFaults(evidence, g, from, to);
    if (h.total <= 0) fault.ok = false;
    if (h.first && (!first || *h.first < *first)) first = h.first;
    parts.push_back(fmt::format("{}: {:.0f} Xid + uncorrectable ECC", GpuName(g), h.total));
  }
  fault.observed = fmt::format("{}", fmt::join(parts, ", "));
  if (fault.ok) fault.first_seen = first;
  out.signals.push_back(fault);

  // 2. The fault comes first, then the job's loss goes bad (a recipe's loss goes bad on its own).
  if (job != nullptr) {
    SignalResult order{"the fault precedes the job's bad loss", false, "", std::nullopt};
    const auto d = Divergence(evidence, *job);
    if (!d) {
      order.ok = true;
      order.observed = "the job's loss never went bad: no effect to order";
    } else if (first) {
      order.ok = *first <= d->second + kSampleSlackNs;
      order.observed = fmt::format("fault seen {:+.1f} s from the first bad loss (step {})",
                                   static_cast<double>(*first - d->second) / 1e9, d->first);
    } else {
      order.observed = fmt::format("the loss went bad at step {} with no fault seen", d->first);
    }
    out.signals.push_back(order);
  }
  out.budget = Budget(world, resolved, f.budget, job, fault.first_seen);
  return out;
}

FindingCheck CheckSilentDataCorruption(const World& world, const Evidence& evidence,
                                       const scenario::ResolvedScenario& resolved, const ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);

  // 1. The loss diverges.
  SignalResult diverges{"the loss diverges in the job's output", false, "", std::nullopt};
  const auto d = Divergence(evidence, *job);
  if (d) {
    diverges.ok = true;
    diverges.first_seen = d->second;
    diverges.observed = fmt::format("first loss spike or NaN at step {}", d->first);
  } else {
    diverges.observed = "no loss above the spike factor and no NaN";
  }
  out.signals.push_back(diverges);

  // 2. Nothing on the job's GPUs says so: no Xid, no uncorrectable ECC.
  SignalResult clean{"the job's GPUs show no hardware fault over the run", true, "", std::nullopt};
  double faults = 0;
  for (const auto& r : job->ranks) {
    faults += HardwareFaults(evidence, {r.node, r.gpu}, job->started, JobEnd(world, *job)).total;
  }
  clean.ok = faults == 0;
  clean.observed = fmt::format("{:.0f} Xid + uncorrectable ECC over the job's {} GPUs", faults, job->ranks.size());
  out.signals.push_back(clean);

  // 3. The same recipe on other GPUs runs past that point and stays clean (a recipe's rerun
  //    diverges again at the same point).
  SignalResult rerun_clean{"the rerun on other GPUs runs past the divergence without diverging", false, "",
                           std::nullopt};
  std::optional<BudgetResult> confirm_budget;
  if (!f.confirm) {
    rerun_clean.observed = "no confirming rerun named: corruption cannot be told from the recipe without one";
  } else if (const WorldJob* rerun = world.Job(f.confirm->job); rerun == nullptr) {
    rerun_clean.observed = fmt::format("no job {} in world.json", f.confirm->job);
  } else if (!d) {
    rerun_clean.observed = "the original never diverged";
  } else {
    std::set<SubjectGpu> mine;
    for (const auto& r : job->ranks) mine.insert({r.node, r.gpu});
    size_t shared = 0;
    for (const auto& r : rerun->ranks) shared += mine.count({r.node, r.gpu});
    const auto again = Divergence(evidence, *rerun);
    const int64_t past = d->first + kSdcCleanPastSteps;
    std::optional<TimeNs> passed;
    int64_t last_step = -1;
    for (const auto& e : Losses(evidence, *rerun)) {
      last_step = std::max(last_step, e.step);
      if (!passed && e.step >= past && std::isfinite(e.value)) passed = e.time;
    }
    const bool diverged_before = again && again->first <= past;
    rerun_clean.ok = shared == 0 && passed.has_value() && !diverged_before;
    if (rerun_clean.ok) rerun_clean.first_seen = passed;
    rerun_clean.observed =
        fmt::format("rerun logged up to step {} (needs {}), {}; {} GPU(s) shared with the original", last_step, past,
                    again ? fmt::format("diverged at step {}", again->first) : std::string("never diverged"), shared);
    confirm_budget = Budget(world, resolved, f.confirm->budget, rerun, rerun_clean.first_seen);
  }
  out.signals.push_back(rerun_clean);
  // The confirmation within its own budget, counted in the rerun.
  if (confirm_budget) {
    SignalResult in_time{"the rerun confirms within its budget", confirm_budget->ok(), "", rerun_clean.first_seen};
    in_time.observed = confirm_budget->used
                           ? fmt::format("{:.0f} of {:.0f} {}", *confirm_budget->used, confirm_budget->allowed,
                                         confirm_budget->unit)
                           : fmt::format("not confirmed (budget {:.0f} {})", confirm_budget->allowed, confirm_budget->unit);
    out.signals.push_back(in_time);
  }
  // The first (provisional) verdict's budget: the divergence with clean counters.
  out.budget = Budget(world, resolved, f.budget, job, diverges.first_seen);
  return out;
}

FindingCheck CheckNoLearning(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                             const ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const auto losses = Losses(evidence, *job);
  std::vector<std::pair<double, TimeNs>> finite;
  int bad = 0;
  for (const auto& e : losses) {
    if (std::isfinite(e.value)) {
      finite.emplace_back(e.value, e.time);
    } else {
      ++bad;
    }
  }
  // The drop from the first third's mean to the last third's, over the first n points.
  auto drop = [&](size_t n) {
    const size_t third = std::max<size_t>(1, n / 3);
    double a = 0, b = 0;
    for (size_t i = 0; i < third; ++i) a += finite[i].first;
    for (size_t i = n - third; i < n; ++i) b += finite[i].first;
    a /= static_cast<double>(third);
    b /= static_cast<double>(third);
    return a > 0 ? (a - b) / a : 0.0;
  };

  // 1. The loss does not go down (and does not blow up: that is another cause).
  SignalResult flat{"the logged loss does not go down", false, "", std::nullopt};
  const size_t n = finite.size();
  const bool diverged = bad > 0 || Divergence(evidence, *job).has_value();
  if (n < static_cast<size_t>(kNoLearningMinPoints)) {
    flat.observed = fmt::format("{} finite loss points logged (need {})", n, kNoLearningMinPoints);
  } else {
    const double whole = drop(n);
    flat.ok = whole < kNoLearningMaxDrop && !diverged;
    // First evidence: the earliest prefix from which on the loss stayed flat.
    std::optional<TimeNs> seen;
    for (size_t k = n; k >= static_cast<size_t>(kNoLearningMinPoints); --k) {
      if (drop(k) >= kNoLearningMaxDrop) break;
      seen = finite[k - 1].second;
    }
    if (flat.ok) flat.first_seen = seen;
    flat.observed = fmt::format("{} loss points, {:.1f}% lower over the last third than the first (a drop under {:.0f}% "
                                "is no learning){}",
                                n, 100 * whole, 100 * kNoLearningMaxDrop,
                                diverged ? fmt::format("; the loss diverged ({} non-finite)", bad) : std::string());
  }
  out.signals.push_back(flat);

  // 2. The job ran normally: it kept stepping and reported no error. (The agent records no
  //    process exit codes: a clean exit cannot be proved from the stores, only the absence of an
  //    error in the job's output.)
  SignalResult normal{"the job kept stepping and reported no error", false, "", std::nullopt};
  size_t errors = 0;
  for (const auto& r : job->ranks) {
    store::EventQuery q;
    q.kinds = {EventKind::kError};
    q.pid = static_cast<int32_t>(r.pid);
    q.from = job->started;
    q.to = JobEnd(world, *job);
    errors += evidence.Events(q).size();
  }
  int64_t first_step = -1, last_step = -1;
  for (const auto& e : losses) {
    if (first_step < 0) first_step = e.step;
    last_step = std::max(last_step, e.step);
  }
  normal.ok = errors == 0 && last_step > first_step;
  normal.observed = fmt::format("loss logged from step {} to {}; {} error event(s) from the job's processes", first_step,
                                last_step, errors);
  out.signals.push_back(normal);
  out.budget = Budget(world, resolved, f.budget, job, flat.first_seen);
  return out;
}

FindingCheck CheckHang(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                       const ExpectedFinding& f) {
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  FindingCheck out;
  out.expected = Describe(f);
  const std::set<int64_t> hung = SubjectRanks(f, *job);
  if (hung.empty()) {
    out.signals.push_back({"a hung rank is named", false, "the finding names no rank and no GPU", std::nullopt});
    return out;
  }
  const TimeNs to = JobEnd(world, *job);

  // 1. The hung rank's collective count stopped while its peers are ahead.
  SignalResult behind{"the hung rank's NCCL calls stop while its peers are ahead", true, "", std::nullopt};
  double hung_max = 0, peer_min = INFINITY;
  TimeNs hung_first = 0, hung_last = 0;
  double hung_count = 0;
  std::vector<std::string> parts;
  // The job's last sign of progress: any rank's NCCL calls. Not launches: while the launch probes
  // are duty-cycled the agent extrapolates launches from the last measured rate, so a blocked
  // process's count can keep growing for a while (seen: ~26 s after a hang).
  TimeNs stop = 0;
  for (const auto& r : job->ranks) {
    const Progress ops = PidCounter(evidence, "ithbat_probe_nccl_ops_total", r, job->started, to);
    stop = std::max(stop, ops.last_growth.value_or(0));
    if (hung.count(r.rank)) {
      hung_max = std::max(hung_max, ops.count);
      parts.push_back(fmt::format("rank {}: {:.0f} calls", r.rank, ops.count));
      if (ops.first && ops.last_growth && ops.count > hung_count) {
        hung_count = ops.count;
        hung_first = *ops.first;
        hung_last = *ops.last_growth;
      }
    } else {
      peer_min = std::min(peer_min, ops.count);
    }
  }
  behind.ok = std::isfinite(peer_min) && peer_min > hung_max;
  behind.observed = fmt::format("{}; peers at least {:.0f}", fmt::join(parts, ", "),
                                std::isfinite(peer_min) ? peer_min : -1.0);
  out.signals.push_back(behind);

  // 2. The whole job stopped: no rank calls NCCL for many of its collective periods.
  SignalResult stalled{"the job's progress stops (no NCCL call on any rank)", false, "", std::nullopt};
  const double period = hung_count > 1 && hung_last > hung_first
                            ? static_cast<double>(hung_last - hung_first) / (hung_count - 1)
                            : 0;
  const double need = kHangMinStallPeriods * period;
  const double quiet = stop > 0 ? static_cast<double>(to - stop) : 0;
  stalled.ok = period > 0 && quiet >= need;
  if (stalled.ok) stalled.first_seen = stop + static_cast<TimeNs>(need);
  stalled.observed = fmt::format("quiet {:.1f} s before the end (need {:.0f} collective periods of {:.3f} s = {:.1f} s)",
                                 quiet / 1e9, kHangMinStallPeriods, period / 1e9, need / 1e9);
  out.signals.push_back(stalled);

  // 3. The peers' GPUs spin in the collective the hung rank never joins.
  SignalResult spin{"the peers' GPUs stay busy while the job is stopped", false, "", std::nullopt};
  double util = 0, hung_util = 0;
  int peers = 0, hung_gpus = 0;
  const TimeNs quiet_from = stop + kNsPerSec;  // the next sample on
  if (stop > 0 && quiet_from < to) {
    for (const auto& r : job->ranks) {
      for (const auto& v :
           evidence.Mean(r.node, fmt::format("ithbat_gpu_utilization_ratio{{{}}}", GpuSel(r.gpu)), quiet_from, to)) {
        if (hung.count(r.rank)) {
          hung_util += v.value;
          ++hung_gpus;
        } else {
          util += v.value;
          ++peers;
        }
      }
    }
  }
  const double mean = peers > 0 ? util / peers : 0;
  spin.ok = peers > 0 && mean >= kHangSpinUtil;
  spin.observed = fmt::format("peers' GPU utilisation {:.2f} over {} GPUs (hung rank's {:.2f}) while stopped", mean,
                              peers, hung_gpus > 0 ? hung_util / hung_gpus : 0.0);
  out.signals.push_back(spin);

  out.budget = Budget(world, resolved, f.budget, job, stalled.first_seen);
  return out;
}

}  // namespace ithbat::sim::lab
