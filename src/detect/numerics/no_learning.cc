#include "detect/numerics/no_learning.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/numerics/divergence.h"

namespace ithbat::detect {
namespace {

double MeanOf(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : NAN;
}

}  // namespace

std::vector<Finding> DetectNoLearning(const DetectInput& in) {
  std::vector<Finding> out;
  for (const auto& job : in.jobs) {
    const auto losses = JobLosses(in.view, job, job.window.start, in.now);
    if (losses.size() < static_cast<size_t>(kNoLearningMinPoints)) continue;
    if (FirstDivergence(losses, kLossSpikeFactor)) continue;  // divergence's, not ours
    std::vector<double> v;
    bool non_finite = false;
    for (const auto& e : losses) {
      if (std::isfinite(e.value)) {
        v.push_back(e.value);
      } else {
        non_finite = true;
      }
    }
    if (non_finite || v.size() < static_cast<size_t>(kNoLearningMinPoints)) continue;
    const size_t n = v.size(), third = std::max<size_t>(1, n / 3);
    const double first = MeanOf(v, 0, third), last = MeanOf(v, n - third, n);
    const double drop = first > 0 ? (first - last) / first : 0;
    const int64_t span = losses.back().step - losses.front().step;
    const TimeNs t_first = losses.front().time, t_last = losses.back().time;

    // Learning rate and grad norm the job printed over the same stretch.
    store::EventQuery q;
    q.kinds = {EventKind::kTrainMetric};
    q.job = job.id;
    q.names = {"lr", "grad_norm"};
    q.from = t_first;
    q.to = t_last;
    q.limit = 200'000;
    int lr_points = 0, lr_zero = 0, gn_points = 0, gn_dead = 0;
    for (const auto& e : in.view.Events(q)) {
      if (e.name == "lr") {
        ++lr_points;
        if (e.value == 0) ++lr_zero;
      } else if (e.name == "grad_norm") {
        ++gn_points;
        if (!std::isfinite(e.value) || e.value == 0) ++gn_dead;
      }
    }
    const bool lr_is_zero = lr_points > 0 && lr_zero == lr_points;
    const bool all_zero_loss = std::all_of(v.begin(), v.end(), [](double x) { return x == 0; });
    const bool dead_grads = all_zero_loss && gn_points > 0 && gn_dead == gn_points;
    const bool fresh = losses.front().step <= kFreshRunMaxFirstStep;
    const bool flat =
        std::fabs(drop) < kNoLearningMaxDrop && (lr_is_zero || (fresh && span >= kNoLearningMinSpanSteps));
    const bool memorised = last < kMemorisedLoss && drop > kMemorisedDrop;
    if (!flat && !dead_grads && !memorised) continue;

    // The job reported no error (an erroring job is another detector's).
    store::EventQuery eq;
    eq.kinds = {EventKind::kError};
    eq.job = job.id;
    eq.from = job.window.start;
    eq.to = in.now;
    if (!in.view.Events(eq).empty()) continue;

    Finding f;
    f.detector = "no_learning";
    f.subjects.job = job.id;
    for (const auto& node : job.Nodes()) f.subjects.nodes.push_back(node);
    f.window = {t_first, t_last};
    {
      Evidence e;
      e.signal = "loss";
      e.collector = std::string(kCollectorJoblog);
      e.subject = job.id;
      e.observed = last;
      e.expected = first;
      e.note = memorised && !flat
                   ? fmt::format("the loss collapsed from {:.3g} to {:.3g} over steps {}-{}: memorising a repeated batch",
                                 first, last, losses.front().step, losses.back().step)
                   : fmt::format("the loss is {:.3g} over the last third of {} points against {:.3g} over the first "
                                 "({:.1f}% lower; under {:.0f}% is no learning), steps {}-{}",
                                 last, n, first, 100 * drop, 100 * kNoLearningMaxDrop, losses.front().step,
                                 losses.back().step);
      e.window = f.window;
      f.evidence.push_back(e);
    }
    if (lr_points > 0) {
      Evidence e;
      e.signal = "lr";
      e.collector = std::string(kCollectorJoblog);
      e.subject = job.id;
      e.observed = static_cast<double>(lr_zero);
      e.expected = 0;
      e.unit = "points at 0";
      e.note = fmt::format("{} of {} logged learning rates are 0", lr_zero, lr_points);
      e.window = f.window;
      f.evidence.push_back(e);
    }
    if (dead_grads) {
      Evidence e;
      e.signal = "grad_norm";
      e.collector = std::string(kCollectorJoblog);
      e.subject = job.id;
      e.observed = static_cast<double>(gn_dead);
      e.unit = "points 0 or NaN";
      e.note = fmt::format("the loss is printed as 0 and all {} grad norms are 0 or NaN", gn_points);
      e.window = f.window;
      f.evidence.push_back(e);
    }
    // The job is running: its launches or NCCL calls grow (probes), else its GPUs are busy.
    double calls = 0;
    for (const auto& node : job.Nodes()) {
      const std::string pids = job.PidRegex(node);
      for (const char* metric : {"ithbat_probe_launches_total", "ithbat_probe_nccl_ops_total"}) {
        for (const auto& sv : in.view.Increase(node, fmt::format("{}{{pid=~{}}}", metric, Quote(pids)), t_first, t_last,
                                                FleetView::Birth::kZero)) {
          calls += sv.value;
        }
      }
    }
    bool running = false;
    if (calls > 0) {
      running = true;
      Evidence e;
      e.signal = "ithbat_probe_launches_total+ithbat_probe_nccl_ops_total";
      e.collector = std::string(kCollectorProbes);
      e.subject = job.id;
      e.observed = calls;
      e.unit = "calls";
      e.note = fmt::format("the job kept launching work: {:.0f} kernel launches and NCCL calls over the flat stretch",
                           calls);
      e.window = f.window;
      f.evidence.push_back(e);
    } else {
      std::vector<double> util;
      std::set<std::pair<std::string, int32_t>> seen;
      for (const auto& p : job.processes) {
        if (p.gpu < 0 || !seen.insert({p.node, p.gpu}).second) continue;
        for (const auto& sv : in.view.Mean(
                 p.node, fmt::format("ithbat_gpu_utilization_ratio{{gpu={}}}", Quote(std::to_string(p.gpu))), t_first,
                 t_last)) {
          util.push_back(sv.value);
        }
      }
      const double u = util.empty() ? 0 : Mean(util);
      if (u >= kBusyUtil) {
        running = true;
        Evidence e;
        e.signal = "ithbat_gpu_utilization_ratio";
        e.collector = std::string(kCollectorGpu);
        e.subject = job.id;
        e.observed = u;
        e.expected = kBusyUtil;
        e.unit = "ratio";
        e.note = fmt::format("the job's {} GPUs were {:.0f}% busy over the flat stretch", util.size(), 100 * u);
        e.window = f.window;
        f.evidence.push_back(e);
      }
    }
    f.verdict = running ? Verdict::kJob : Verdict::kInconclusive;
    f.cause = running ? Cause::kNoLearning : Cause::kUnknown;
    f.confidence = running ? (lr_is_zero || dead_grads ? 0.9 : 0.7) : 0.3;
    f.provable_at = t_last;
    std::set<std::string> gpus;
    for (const auto& p : job.processes) gpus.insert(p.gpu_uuid.empty() ? fmt::format("{}:{}", p.node, p.gpu) : p.gpu_uuid);
    f.lost_gpu_seconds = static_cast<double>(gpus.size()) * static_cast<double>(t_last - t_first) / 1e9;
    f.baseline_origin = "every step of a run that learns nothing counts as lost";
    f.summary = fmt::format("job {} {} over steps {}-{} ({:.3g} → {:.3g}, {:.1f}% drop){}{} while it kept running", job.id,
                            memorised && !flat ? "memorises (loss collapses)" : "learns nothing",
                            losses.front().step, losses.back().step, first, last, 100 * drop,
                            lr_is_zero ? "; its learning rate is 0" : "",
                            dead_grads ? "; loss printed as 0 with zero/NaN grad norms" : "");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ithbat::detect
