#pragma once
// A sink that keeps nothing, for benchmarks of collectors whose series are not what is
// measured. Every registration gets a new ref; appends succeed.
#include <cstdint>
#include <string_view>

#include "core/sink.h"

namespace ithbat::bench {

class NullSink final : public Sink {
 public:
  Result<SeriesRef> RegisterSeries(const MetricDesc&, const LabelSet&) override { return next_++; }
  Status Append(SeriesRef, TimeNs, double) override { return Ok(); }
  Status AppendEvent(Event) override { return Ok(); }
  Status RecordStep(std::string_view, int32_t, StepSpan) override { return Ok(); }

 private:
  SeriesRef next_ = 1;
};

}  // namespace ithbat::bench
