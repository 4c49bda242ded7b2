#include "investigate/impact.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/core.h>

#include "detect/detector.h"
#include "investigate/causes.h"

namespace ithbat::investigate {

std::vector<StepSpan> JobSteps(const detect::FleetView& view, const detect::JobView& job, TimeNs from, TimeNs to) {
  const detect::RankProcess* p = job.LoggingProcess();
  if (p == nullptr) return {};
  return view.Steps(p->node, job.id, p->rank, from, to);
}

std::optional<StepBaseline> BaselineStep(const std::vector<StepSpan>& steps, TimeNs incident_start) {
  std::vector<double> before;
  std::vector<double> all;
  for (const auto& s : steps) {
    const double secs = static_cast<double>(s.end - s.start) / kNsPerSec;
    if (secs <= 0) continue;
    all.push_back(secs);
    if (s.end <= incident_start) before.push_back(secs);
  }
  if (before.size() >= kMinBaselineSteps) {
    return StepBaseline{detect::Median(before),
                        fmt::format("median of the {} steps before the incident (the logging rank's step timeline)",
                                    before.size()),
                        before.size()};
  }
  if (all.size() >= kMinBaselineSteps) {
    return StepBaseline{detect::Quantile(all, 0.25),
                        fmt::format("25th percentile of the job's {} steps (fewer than {} steps before the incident)",
                                    all.size(), kMinBaselineSteps),
                        all.size()};
  }
  return std::nullopt;
}

void ComputeImpact(Diagnosis& d, const std::vector<Finding>& findings, const detect::FleetView& view,
                   const detect::JobView* job, double list_price_per_gpu_hour) {
  Impact& im = d.impact;
  for (const auto& f : findings) {
    im.gpu_hours_lost = std::max(im.gpu_hours_lost, f.lost_gpu_seconds / 3600.0);
    im.expected_speedup = std::max(im.expected_speedup, f.speedup_with_fix);
    if (im.speedup_origin.empty()) im.speedup_origin = f.baseline_origin;
  }
  if (job == nullptr) return;
  std::set<std::string> gpus;
  for (const auto& p : job->processes) gpus.insert(p.gpu_uuid.empty() ? p.node + "/" + std::to_string(p.pid) : p.gpu_uuid);
  const double n_gpus = static_cast<double>(gpus.size());
  const double allocated = n_gpus * static_cast<double>(job->window.end - job->window.start) / kNsPerSec;
  if (allocated <= 0) return;
  std::vector<StepSpan> steps = JobSteps(view, *job, job->window.start, job->window.end);
  auto baseline = BaselineStep(steps, d.window.start);
  if (!baseline) return;
  // A step number seen again later was rolled back (the job resumed from an earlier checkpoint):
  // only its last run is kept.
  std::map<int64_t, size_t> last_of;
  for (size_t i = 0; i < steps.size(); ++i) last_of[steps[i].step] = i;
  const bool wasted_after_onset = InfoOf(d.cause).wastes_steps_after_onset;
  double productive = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (last_of[steps[i].step] != i) continue;
    if (wasted_after_onset && steps[i].start >= d.window.start) continue;
    const double secs = static_cast<double>(steps[i].end - steps[i].start) / kNsPerSec;
    productive += std::min(secs, baseline->seconds) * n_gpus;
  }
  im.productive_share = std::clamp(productive / allocated, 0.0, 1.0);
  im.baseline_origin = baseline->origin;
  if (list_price_per_gpu_hour > 0 && im.productive_share > 0) {
    im.effective_price_per_gpu_hour = list_price_per_gpu_hour / im.productive_share;
  }
}

}  // namespace ithbat::investigate
