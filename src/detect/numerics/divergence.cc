#include "detect/numerics/divergence.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/gpu/hardware_faults.h"

namespace ithbat::detect {
namespace {

struct JobGpu {
  GpuRef ref;
  std::string key;  // UUID, or node:index where the UUID is unknown
};

std::vector<JobGpu> GpusOf(const JobView& job) {
  std::map<std::string, JobGpu> out;
  for (const auto& p : job.processes) {
    if (p.gpu < 0 && p.gpu_uuid.empty()) continue;
    JobGpu g{{p.node, p.gpu, p.gpu_uuid}, p.gpu_uuid.empty() ? fmt::format("{}:{}", p.node, p.gpu) : p.gpu_uuid};
    out.emplace(g.key, g);
  }
  std::vector<JobGpu> v;
  for (auto& [k, g] : out) v.push_back(std::move(g));
  return v;
}

int32_t WorldSize(const JobView& job) {
  if (job.world_size > 0) return job.world_size;
  return static_cast<int32_t>(job.Ranks().size());
}

// Median relative difference of the two runs' losses over their common steps below `below`,
// and how many steps they share there.
std::pair<double, int> LossMatch(const std::vector<Event>& a, const std::vector<Event>& b, int64_t below) {
  std::map<int64_t, double> bm;
  for (const auto& e : b) {
    if (e.step < below && std::isfinite(e.value)) bm[e.step] = e.value;
  }
  std::vector<double> rel;
  for (const auto& e : a) {
    if (e.step >= below || !std::isfinite(e.value)) continue;
    auto it = bm.find(e.step);
    if (it == bm.end()) continue;
    const double scale = std::max(std::fabs(e.value), 1e-9);
    rel.push_back(std::fabs(e.value - it->second) / scale);
  }
  return {rel.empty() ? INFINITY : Median(rel), static_cast<int>(rel.size())};
}

// The step a job resumed from: its first logged step − 1 (0 for a run from scratch).
int64_t ResumedFrom(const std::vector<Event>& losses) {
  return losses.empty() ? 0 : std::max<int64_t>(0, losses.front().step - 1);
}

// Whether `writer` logged a finished checkpoint at `step` (± 1: a save is logged at the step it
// follows or the one it precedes), before `before`.
bool WroteCheckpointAt(const FleetView& view, const JobView& writer, const std::vector<Event>& writer_losses,
                       int64_t step, TimeNs before) {
  store::EventQuery q;
  q.kinds = {EventKind::kCheckpointEnd, EventKind::kCheckpointBegin};
  q.job = writer.id;
  q.from = writer.window.start;
  q.to = before;
  for (const auto& e : view.Events(q)) {
    int64_t s = e.step;
    if (s < 0) {  // map its time onto the writer's logged steps
      for (const auto& l : writer_losses) {
        if (l.time <= e.time) s = l.step;
      }
    }
    if (s >= 0 && std::llabs(s - step) <= 1) return true;
  }
  return false;
}

std::string GpuList(const std::vector<JobGpu>& gpus) {
  std::vector<std::string> s;
  for (const auto& g : gpus) s.push_back(fmt::format("{}:{}", g.ref.node, g.ref.index));
  return fmt::format("{}", fmt::join(s, ","));
}

}  // namespace

std::vector<Event> JobLosses(const FleetView& view, const JobView& job, TimeNs from, TimeNs to) {
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  q.job = job.id;
  q.from = from;
  q.to = to;
  q.limit = 200'000;
  auto events = view.Events(q);
  // A step whose loss the framework dropped because it was not finite (Megatron omits `lm loss`
  // then: the parsers' loss_missing) is a NaN point of the curve, where no loss was logged for it.
  q.kinds = {EventKind::kError};
  for (auto& e : view.Events(q)) {
    if (e.name != "loss_missing" || e.step < 0) continue;
    e.kind = EventKind::kLoss;
    e.value = std::nan("");
    events.push_back(std::move(e));
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.time < b.time; });
  const RankProcess* logger = job.LoggingProcess();
  std::map<int64_t, Event> by_step;
  for (int pass = 0; pass < 2 && by_step.empty(); ++pass) {
    for (const auto& e : events) {
      if (e.step < 0) continue;
      if (pass == 0 && logger != nullptr && e.identity.rank != logger->rank) continue;
      // In time order: the last logged wins; a dropped loss only where no loss was logged.
      if (e.name == "loss_missing" && by_step.count(e.step) > 0) continue;
      by_step[e.step] = e;
    }
  }
  std::vector<Event> out;
  out.reserve(by_step.size());
  for (auto& [s, e] : by_step) out.push_back(std::move(e));
  return out;
}

std::optional<LossBreak> FirstDivergence(const std::vector<Event>& losses, double factor) {
  double low = INFINITY;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double v = losses[i].value;
    // A lowest of 0 (some loops print 0 before the first accumulation) makes any loss a
    // "spike": the factor test needs a positive lowest.
    auto bad = [&](double x) { return !std::isfinite(x) || (std::isfinite(low) && low > 0 && x > factor * low); };
    if (bad(v)) {
      LossBreak b{losses[i].step, losses[i].time, losses[i].time, v, low, i};
      if (!std::isfinite(v)) return b;
      if (i + 1 >= losses.size()) return std::nullopt;  // not confirmed yet
      const double next = losses[i + 1].value;
      if (!std::isfinite(next) || next > kSpikeHoldFactor * low) {
        b.confirmed = losses[i + 1].time;
        return b;
      }
      continue;  // a single noisy point: not a divergence, and not the new lowest
    }
    if (std::isfinite(v)) low = std::min(low, v);
  }
  return std::nullopt;
}

std::vector<Finding> DetectDivergence(const DetectInput& in) {
  std::vector<Finding> out;
  // Losses of every job, once (reruns are compared against each other).
  std::map<std::string, std::vector<Event>> losses;
  std::map<std::string, std::optional<LossBreak>> breaks;
  for (const auto& job : in.jobs) {
    losses[job.id] = JobLosses(in.view, job, job.window.start, in.now);
    breaks[job.id] = FirstDivergence(losses[job.id], kLossSpikeFactor);
  }
  for (const auto& job : in.jobs) {
    const auto& b = breaks[job.id];
    if (!b) continue;
    const auto& mine = losses[job.id];
    const std::vector<JobGpu> gpus = GpusOf(job);
    // No GPU known for its ranks (a replayed log, a job the GPU collector never tied): the
    // divergence is still reported, and innocence cannot be judged: inconclusive below.

    // 2. Hardware innocence: deltas over the run up to the confirmed spike (a later fault did not
    //    cause it).
    const TimeNs hw_to = std::min(in.now, b->confirmed + kSameIncidentNs);
    std::vector<std::string> hard, soft;
    int counted = 0;
    double thermal = 0, nvlink = 0;
    for (const auto& g : gpus) {
      const GpuDeltas d = GpuDeltasOf(in.view, g.ref, job.window.start, hw_to);
      ++counted;
      if (d.HardFault()) hard.push_back(fmt::format("{}:{}", g.ref.node, g.ref.index));
      if (d.SoftSigns()) soft.push_back(fmt::format("{}:{}", g.ref.node, g.ref.index));
      thermal += d.thermal_samples;
      nvlink += d.nvlink_errors;
    }
    if (!hard.empty()) continue;  // hardware_faults' finding; it lists this loss as a consequence
    // Do the GPUs' counters exist at all? Innocence needs the GPU collector to have watched.
    int watched = 0;
    std::vector<std::string> history;
    for (const auto& g : gpus) {
      const std::string sel = fmt::format("ithbat_gpu_xid_errors_total{{gpu={}}}", Quote(std::to_string(g.ref.index)));
      if (!in.view.Max(g.ref.node, sel, job.window.start, hw_to).empty()) ++watched;
      for (const auto& v : in.view.Max(
               g.ref.node,
               fmt::format("ithbat_gpu_remapped_rows{{gpu={}}}", Quote(std::to_string(g.ref.index))),
               job.window.start, hw_to)) {
        if (v.value > 0) history.push_back(fmt::format("{}:{} ({:.0f} rows)", g.ref.node, g.ref.index, v.value));
      }
    }

    // 3. Reruns of the same recipe.
    const JobView* confirming = nullptr;
    const JobView* pending = nullptr;
    bool confirmed_recipe = false, confirmed_sdc = false, later_of_pair = false;
    TimeNs confirm_time = 0;
    std::string rerun_note;
    std::set<std::string> my_keys;
    for (const auto& g : gpus) my_keys.insert(g.key);
    for (const auto& other : in.jobs) {
      if (other.id == job.id || WorldSize(other) != WorldSize(job)) continue;
      const std::vector<JobGpu> og = GpusOf(other);
      bool shared = false;
      for (const auto& g : og) shared = shared || my_keys.count(g.key) > 0;
      if (shared || og.empty()) continue;
      const auto& theirs = losses[other.id];
      const auto [diff, common] = LossMatch(mine, theirs, b->step - kDivergenceAlignSteps);
      if (common < kMinMatchPoints || diff > kLossMatchTolerance) continue;
      const auto& ob = breaks[other.id];
      // The later of two runs that diverge together is the other's confirmation.
      if (ob && std::llabs(ob->step - b->step) <= kDivergenceAlignSteps && other.window.start < job.window.start) {
        later_of_pair = true;
        break;
      }
      // A rerun resumed from a checkpoint the suspect run wrote carries the suspect's state.
      const int64_t resumed = ResumedFrom(theirs);
      if (resumed > 0 && !theirs.empty() && WroteCheckpointAt(in.view, job, mine, resumed, theirs.front().time)) continue;
      if (ob && std::llabs(ob->step - b->step) <= kDivergenceAlignSteps) {
        confirming = &other;
        confirmed_recipe = true;
        confirm_time = ob->confirmed;
        rerun_note = fmt::format("rerun {} on other GPUs diverged at step {} (original {}), losses matched within {:.1f}% "
                                 "over {} common steps before",
                                 other.id, ob->step, b->step, 100 * diff, common);
        break;
      }
      const int64_t past = b->step + kSdcCleanPastSteps;
      std::optional<TimeNs> passed;
      for (const auto& e : theirs) {
        if (ob && e.step >= ob->step) break;
        if (e.step >= past && std::isfinite(e.value)) {
          passed = e.time;
          break;
        }
      }
      if (passed) {
        confirming = &other;
        confirmed_sdc = true;
        confirm_time = *passed;
        rerun_note = fmt::format("rerun {} of the same recipe on other GPUs ran clean to step {} (original diverged at {}), "
                                 "losses matched within {:.1f}% over {} common steps before",
                                 other.id, past, b->step, 100 * diff, common);
        break;
      }
      if (!ob) {
        pending = &other;
        rerun_note = fmt::format("rerun {} of the same recipe on other GPUs has not reached step {} yet", other.id, past);
      }
    }
    if (later_of_pair) continue;

    Finding f;
    f.detector = "divergence";
    f.subjects.job = job.id;
    for (const auto& n : job.Nodes()) f.subjects.nodes.push_back(n);
    TimeNs start = b->time;
    // Drift before the spike: the last finite loss before it over the lowest.
    double before = NAN;
    int64_t low_step = -1;
    {
      double low = INFINITY;
      for (size_t i = 0; i < b->index; ++i) {
        if (!std::isfinite(mine[i].value)) continue;
        if (mine[i].value <= low) {
          low = mine[i].value;
          low_step = mine[i].step;
          start = mine[i].time;
        }
        before = mine[i].value;
      }
      if (low_step < 0) start = b->time;
    }
    f.window = {start, b->confirmed};
    {
      Evidence e;
      e.signal = "loss";
      e.collector = std::string(kCollectorJoblog);
      e.subject = job.id;
      e.observed = b->value;
      e.expected = b->lowest;
      e.note = fmt::format(
          "the loss is {} at step {} {} (spike factor {:.0f})",
          std::isfinite(b->value) ? fmt::format("{:.3g}", b->value) : std::string("non-finite"), b->step,
          std::isfinite(b->lowest) ? fmt::format("against a lowest of {:.3g} before it", b->lowest)
                                   : std::string("with no finite loss logged before it"),
          kLossSpikeFactor);
      e.window = {b->time, b->confirmed};
      f.evidence.push_back(e);
    }
    if (std::isfinite(before) && std::isfinite(b->lowest) && b->lowest > 0) {
      Evidence e;
      e.signal = "loss_drift";
      e.collector = std::string(kCollectorJoblog);
      e.subject = job.id;
      e.observed = before;
      e.expected = b->lowest;
      e.note = before > kDriftFactor * b->lowest
                   ? fmt::format("before the spike the loss had drifted up to {:.3g}, {:+.1f}% from its lowest (step {})",
                                 before, 100 * (before / b->lowest - 1), low_step)
                   : fmt::format("no drift before the spike: the loss was {:.3g}, {:+.1f}% from its lowest (step {}) — "
                                 "a sudden break",
                                 before, 100 * (before / b->lowest - 1), low_step);
      e.window = {start, b->time};
      f.evidence.push_back(e);
    }
    // Grad-norm growth before the spike.
    {
      store::EventQuery q;
      q.kinds = {EventKind::kTrainMetric};
      q.job = job.id;
      q.names = {"grad_norm"};
      q.from = job.window.start;
      q.to = b->time;
      q.limit = 200'000;
      std::vector<double> gn;
      for (const auto& e : in.view.Events(q)) {
        if (e.name == "grad_norm" && std::isfinite(e.value) && (e.step < 0 || e.step < b->step)) gn.push_back(e.value);
      }
      if (gn.size() >= 2 * static_cast<size_t>(kGradTailPoints)) {
        const std::vector<double> head(gn.begin(), gn.end() - kGradTailPoints);
        const std::vector<double> tail(gn.end() - kGradTailPoints, gn.end());
        const double h = Median(head), t = Median(tail);
        Evidence e;
        e.signal = "grad_norm";
        e.collector = std::string(kCollectorJoblog);
        e.subject = job.id;
        e.observed = t;
        e.expected = h;
        e.note = fmt::format("grad norm over the last {} points before the spike {:.3g} vs {:.3g} before ({:.1f}×)",
                             kGradTailPoints, t, h, h > 0 ? t / h : 0.0);
        f.evidence.push_back(e);
      }
    }
    // Hardware innocence.
    if (!gpus.empty()) {
      Evidence e;
      e.signal = "ithbat_gpu_xid_errors_total+ithbat_gpu_ecc_errors_total+ithbat_gpu_remapped_rows";
      e.collector = std::string(kCollectorGpu);
      e.subject = GpuList(gpus);
      e.observed = static_cast<double>(soft.size());
      e.expected = 0;
      e.unit = "GPUs with moving counters";
      e.note = fmt::format("Xid, uncorrectable ECC, row remaps and GPU-lost deltas are zero on the job's {} GPUs over the "
                           "run ({} watched by NVML){}{}",
                           counted, watched,
                           soft.empty() ? std::string("; no NVLink errors or thermal/power-brake events")
                                        : fmt::format("; but {:.0f} NVLink errors and {:.0f} thermal/power-brake samples "
                                                      "on {}",
                                                      nvlink, thermal, fmt::join(soft, ",")),
                           history.empty() ? std::string()
                                           : fmt::format("; pre-existing remapped rows, constant (history, not cause): {}",
                                                         fmt::join(history, ", ")));
      e.window = {job.window.start, hw_to};
      f.evidence.push_back(e);
    }
    f.provable_at = b->confirmed;
    // "4.2 vs lowest 1.3", or what is known when no finite loss came before the break.
    const auto spike_text =
        (std::isfinite(b->value) ? fmt::format("{:.3g}", b->value) : std::string("non-finite")) +
        (std::isfinite(b->lowest) ? fmt::format(" vs lowest {:.3g}", b->lowest)
                                  : std::string(", no finite loss logged before it"));
    if (watched == 0 || !soft.empty()) {
      f.verdict = Verdict::kInconclusive;
      f.cause = Cause::kUnknown;
      f.confidence = 0.3;
      f.summary = fmt::format(
          "job {}'s loss diverged at step {} ({}); the hardware is not proven "
          "innocent ({})",
          job.id, b->step, spike_text,
          gpus.empty()   ? "no GPU is known for its ranks"
          : watched == 0 ? "no NVML counters for its GPUs"
                         : "NVLink/thermal signs on its GPUs");
    } else if (confirmed_sdc) {
      f.verdict = Verdict::kInfrastructure;
      f.cause = Cause::kSilentDataCorruption;
      f.provisional = false;
      f.confidence = 0.85;
      for (const auto& g : gpus) f.subjects.gpus.push_back(g.ref);
      f.provable_at = std::max(b->confirmed, confirm_time);
      f.summary = fmt::format(
          "job {}'s loss diverged at step {} ({}) with clean hardware counters, and "
          "the same recipe on other GPUs ({}) ran clean past step {}: silent data corruption on {}",
          job.id, b->step, spike_text, confirming->id, b->step + kSdcCleanPastSteps, GpuList(gpus));
    } else {
      f.verdict = Verdict::kJob;
      f.cause = Cause::kRecipeNumerics;
      f.provisional = !confirmed_recipe;
      f.confidence = confirmed_recipe ? 0.9 : 0.6;
      if (confirmed_recipe) f.provable_at = std::max(b->confirmed, confirm_time);
      f.summary = fmt::format(
          "job {}'s loss diverged at step {} ({}) with zero hardware counter deltas "
          "on its {} GPUs: {}",
          job.id, b->step, spike_text, counted,
          confirmed_recipe ? fmt::format("the recipe — rerun {} diverged at the same point", confirming->id)
                           : std::string("recipe suspected until a rerun on other GPUs"));
    }
    if (!rerun_note.empty() && (confirming != nullptr || pending != nullptr)) {
      const JobView* r = confirming != nullptr ? confirming : pending;
      Evidence e;
      e.signal = "loss";
      e.collector = std::string(kCollectorJoblog);
      e.subject = r->id;
      e.note = rerun_note;
      e.window = {r->window.start, confirm_time != 0 ? confirm_time : in.now};
      f.evidence.push_back(e);
    }
    // GPU time from the spike on is wasted (rolled back).
    const TimeNs end = std::min(in.now, std::max(job.window.end, b->time));
    f.lost_gpu_seconds = static_cast<double>(gpus.size()) * static_cast<double>(end - b->time) / 1e9;
    f.baseline_origin = "the job's GPU time after the divergence";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ithbat::detect
