#pragma once
// Where collectors put what they collect. The store implements it; tests use a fake. A series
// is registered once (cold path: validates, interns, allocates) and then appended to by
// SeriesRef on every tick (hot path: no allocation).
#include <cstdint>
#include <string_view>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/time.h"

namespace ithbat {

using SeriesRef = uint32_t;

class Sink {
 public:
  virtual ~Sink() = default;

  // Finds or creates the series (desc.name, labels). Errors: kInvalidArgument for a desc that
  // breaks the naming rules or conflicts with an earlier desc of the same name (other type,
  // unit or help); kResourceExhausted when the series limit is reached.
  virtual Result<SeriesRef> RegisterSeries(const MetricDesc& desc, const LabelSet& labels) = 0;

  // One writer per series. Errors: kOutOfOrder (t older than the newest sample), kDuplicate
  // (same t, different value; the same t with the same value is accepted and ignored),
  // kNotFound (unknown ref).
  virtual Status Append(SeriesRef ref, TimeNs t, double value) = 0;

  // Events may come from any thread; text beyond the store's bound is cut and marked.
  virtual Status AppendEvent(Event event) = 0;

  // A step of (job, rank) with its time span. Steps arrive in order per rank; a step already
  // known is updated (logged steps calibrate inferred ones).
  virtual Status RecordStep(std::string_view job, int32_t rank, StepSpan span) = 0;
};

}  // namespace ithbat
