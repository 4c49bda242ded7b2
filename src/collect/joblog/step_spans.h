#pragma once
// The span of each logged step, from the step lines a job prints: what the agent records as a
// rank's step timeline (store RecordStep) and `ithbat replay` rebuilds from a log. Shared so the
// two cannot drift apart.
//
// A step's span runs from the previous logged step of the same rank to this one. When only every
// Nth step is logged, the N steps between two lines share the time evenly: this step's span is
// (t - prev_t) / N, ending at t. Lines of one buffered write share one arrival time: no span
// from those (it would be zero-length). The first step of a rank has a span only when the line
// printed its own duration (seconds per step).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/event.h"
#include "core/time.h"

namespace ithbat::collect::joblog {

class StepSpans {
 public:
  // Ranks remembered at most (a job printing from more is not followed for its newest ranks).
  static constexpr size_t kMaxRanks = 65536;

  // The span of `step` logged by (job, rank) at `t`; `seconds_per_step` is the duration the line
  // printed (NaN or ≤ 0 when none).
  std::optional<StepSpan> Next(const std::string& job, int32_t rank, int64_t step, double seconds_per_step,
                               TimeNs t);

 private:
  std::map<std::pair<std::string, int32_t>, std::pair<int64_t, TimeNs>> last_;  // (job, rank) → (step, time)
};

}  // namespace ithbat::collect::joblog
