#include "collect/joblog/step_spans.h"

#include <cmath>

namespace ithbat::collect::joblog {

std::optional<StepSpan> StepSpans::Next(const std::string& job, int32_t rank, int64_t step,
                                        double seconds_per_step, TimeNs t) {
  auto key = std::make_pair(job, rank);
  auto it = last_.find(key);
  std::optional<StepSpan> span;
  if (it != last_.end() && it->second.first < step && it->second.second < t) {
    const int64_t steps = step - it->second.first;
    const TimeNs per_step = (t - it->second.second) / steps;
    if (per_step > 0) span = StepSpan{step, t - per_step, t};
  } else if (std::isfinite(seconds_per_step) && seconds_per_step > 0 && seconds_per_step < 86400) {
    span = StepSpan{step, t - static_cast<TimeNs>(seconds_per_step * kNsPerSec), t};
  }
  if (it == last_.end()) {
    if (last_.size() < kMaxRanks) last_.emplace(std::move(key), std::make_pair(step, t));
  } else {
    it->second = {step, t};
  }
  return span;
}

}  // namespace ithbat::collect::joblog
