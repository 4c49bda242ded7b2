#pragma once
// A Sink for tests: keeps every series, sample, event and step it is given, and holds the
// collectors to the store's contract (src/core/sink.h) so a collector that passes against it
// also passes against the real store: descs are validated and must agree per name, samples
// per series arrive in time order (a resend of the same sample is ignored, another value at
// the same time is a duplicate).
//
// Thread-safe: collectors append events from their own threads and the runtime runs each
// collector on a worker. Every query copies under the lock, so a test can read while a
// collector is still writing; nothing returned refers into the fake.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::testing {

class FakeSink : public Sink {
 public:
  struct Series {
    MetricDesc desc;
    LabelSet labels;
    std::vector<std::pair<TimeNs, double>> samples;  // accepted samples, oldest first
    // The thread of the first append, and whether another thread appended later: the runtime
    // promises one writer per series.
    std::thread::id writer;
    bool many_writers = false;
  };
  struct Step {
    std::string job;
    int32_t rank = 0;
    StepSpan span;
  };
  // Label name → value; a series matches when it carries every pair (and maybe more).
  using LabelSubset = std::map<std::string, std::string>;

  // ---- Sink ----
  Result<SeriesRef> RegisterSeries(const MetricDesc& desc, const LabelSet& labels) override;
  Status Append(SeriesRef ref, TimeNs t, double value) override;
  Status AppendEvent(Event event) override;
  Status RecordStep(std::string_view job, int32_t rank, StepSpan span) override;

  // ---- Knobs (set before or while a collector runs) ----
  // RegisterSeries of this metric name fails with kResourceExhausted, as a full store would.
  void RefuseRegistration(std::string name);
  // Registering a new series beyond this many fails with kResourceExhausted.
  void SetMaxSeries(size_t max_series);
  // Every Append fails with this code (nullopt: accept again).
  void RefuseAppends(std::optional<ErrorCode> code = ErrorCode::kUnavailable);

  // ---- Queries (copies) ----
  std::vector<Series> series() const;
  std::vector<Event> events() const;
  std::vector<Step> steps() const;
  size_t series_count() const;
  size_t event_count() const;

  // The series with this name and exactly these labels, in LabelSet::ToString form
  // ({a="x",b="y"}; "" for none).
  std::optional<Series> Find(std::string_view name, std::string_view labels = "") const;
  // The first series (in registration order) with this name whose labels include the subset.
  std::optional<Series> FindWith(std::string_view name, const LabelSubset& subset) const;
  // The newest value of Find(name, labels), if it has one.
  std::optional<double> Last(std::string_view name, std::string_view labels = "") const;
  // The value at t of a series with this name whose labels include the subset.
  std::optional<double> ValueAt(std::string_view name, const LabelSubset& subset, TimeNs t) const;

  size_t CountSeries(std::string_view name) const;                   // series of exactly this name
  size_t CountByPrefix(std::string_view name_prefix) const;          // series whose name starts so
  size_t CountWithSamples(std::string_view name_prefix = "") const;  // ... and have a sample

  // RegisterSeries calls, refused ones included.
  size_t registrations() const;
  // Samples accepted and stored.
  uint64_t appends() const;
  uint64_t out_of_order() const;  // refused: older than the series' newest sample
  uint64_t duplicates() const;    // refused: another value at the newest sample's time
  uint64_t repeats() const;       // accepted and ignored: the newest sample sent again
  // Appends whose time was not after the series' newest sample, whatever came of them.
  uint64_t appends_not_newer() const;

 private:
  mutable std::mutex mu_;
  std::vector<Series> series_;
  std::vector<Event> events_;
  std::vector<Step> steps_;
  std::set<std::string, std::less<>> refused_names_;
  std::optional<size_t> max_series_;
  std::optional<ErrorCode> refuse_appends_;
  size_t registrations_ = 0;
  uint64_t appends_ = 0;
  uint64_t out_of_order_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t repeats_ = 0;
};

}  // namespace ithbat::testing
