#pragma once
// Per (job, rank): the training steps as time spans, so the step of any sample is a lookup
// (the step is never a series label). Thread-safe.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/event.h"
#include "core/result.h"

namespace ithbat::store {

struct StepRecord {
  std::string job;
  int32_t rank = -1;
  StepSpan span;
};

class StepTimelines {
 public:
  explicit StepTimelines(size_t max_steps_per_rank = 1'000'000);
  ~StepTimelines();
  StepTimelines(const StepTimelines&) = delete;  // owns its Impl
  StepTimelines& operator=(const StepTimelines&) = delete;
  // Steps arrive in increasing order per rank; a step already present is replaced (logged
  // steps calibrate inferred ones). A span with end < start is kInvalidArgument.
  Status Record(std::string_view job, int32_t rank, StepSpan span);
  // The step whose [start, end) holds t.
  std::optional<int64_t> StepAt(std::string_view job, int32_t rank, int64_t t) const;
  std::optional<StepSpan> Find(std::string_view job, int32_t rank, int64_t step) const;
  std::vector<StepSpan> Range(std::string_view job, int32_t rank, int64_t from, int64_t to) const;
  // Every (job, rank) holding at least one step, in (job, rank) order (evidence bundles copy them).
  std::vector<std::pair<std::string, int32_t>> Keys() const;
  std::vector<StepRecord> TakeUnflushed();
  void DropBefore(int64_t t);
  size_t size() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace ithbat::store
