#pragma once
// The cost of a diagnosis (docs/diagnoses.md, "Cost"): GPU-hours lost, the expected speedup with
// the fix, and the effective price — the list price divided by the productive share, where
// productive share = Σ over kept steps of min(step time, baseline step time) × GPUs ÷ allocated
// GPU-time. Steps after a divergence or in a run that learns nothing count zero. Never computed
// from utilisation.
#include <optional>
#include <string>

#include "core/finding.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::investigate {

struct StepBaseline {
  double seconds = 0;
  std::string origin;  // e.g. "median of 40 steps before the incident (rank 0's step timeline)"
  size_t steps = 0;
};

// The step times of a job's logging rank from its step timeline, [from, to].
std::vector<StepSpan> JobSteps(const detect::FleetView& view, const detect::JobView& job, TimeNs from, TimeNs to);

// The baseline step time: the median of the steps before `incident_start` when there are at
// least kMinBaselineSteps of them; else the job's 25th percentile step (its fast steps), said so.
std::optional<StepBaseline> BaselineStep(const std::vector<StepSpan>& steps, TimeNs incident_start);
inline constexpr size_t kMinBaselineSteps = 5;

// Fills diagnosis.impact from its findings' lost time and speedup and the job's steps.
void ComputeImpact(Diagnosis& d, const std::vector<Finding>& findings, const detect::FleetView& view,
                   const detect::JobView* job, double list_price_per_gpu_hour);

}  // namespace ithbat::investigate
