#include "scenario/script.h"

#include <algorithm>

namespace ithbat::scenario {

int64_t FirstStep(const ResolvedJob& job) { return job.resume_from ? job.resume_from->step + 1 : 1; }
int64_t LastStep(const ResolvedJob& job) { return job.steps; }

bool ScriptedToEnd(const ResolvedScenario& s, const ResolvedJob& job) {
  const double steps = static_cast<double>(std::max<int64_t>(0, LastStep(job) - FirstStep(job) + 1));
  const double end_s = job.start_s + job.startup_s + steps * job.work.compute_ms / 1000.0;
  return end_s <= s.duration_s;
}

std::vector<ScriptedStep> ScriptedLossSteps(const ResolvedJob& job) {
  std::vector<ScriptedStep> out;
  auto add = [&](int64_t step, const char* what, const char* word) {
    if (step >= FirstStep(job) && step <= LastStep(job)) out.push_back({step, what, word});
  };
  switch (job.loss.model) {
    case LossModel::kDriftExplode:
      add(job.loss.drift_start_step, "the loss starts to drift", "drift");
      add(job.loss.explode_step, "the loss explodes", "explosion");
      add(job.loss.explode_step + kNanStepsAfterExplosion, "the loss turns NaN", "NaN");
      break;
    case LossModel::kNan:
      add(job.loss.nan_step, "the loss turns NaN", "NaN");
      break;
    default:
      break;
  }
  return out;
}

std::string ScriptedHostLoad(const ResolvedScenario& s) {
  if (std::any_of(s.timeline.begin(), s.timeline.end(),
                  [](const auto& e) { return e.kind == EventKind::kHostCpuContention; }))
    return "a host_cpu_contention event";
  if (s.background.enabled && s.background.host_jitter_burst_ms > 0 && s.background.host_jitter_bursts_per_min > 0)
    return "host jitter bursts that stall ranks' threads";
  for (const auto& job : s.jobs) {
    const double loader_ms = job.data_loader.workers > 0
                                 ? job.data_loader.cpu_ms_per_batch / static_cast<double>(job.data_loader.workers)
                                 : job.data_loader.cpu_ms_per_batch;
    if (loader_ms > job.work.compute_ms) return "job " + job.id + "'s data loader, slower than its GPU";
  }
  return "";
}

}  // namespace ithbat::scenario
