#pragma once
// The agent's memory: compressed series, the event log, per-rank step timelines, and (with a
// data directory) their history on disk. One writer per series, any number of readers.
//
// Lifecycle: Open() loads what the data directory holds; collectors Append through the Sink
// interface; the agent calls Flush() every flush interval and EnforceRetention() every tick
// or so; destruction flushes. A killed agent loses at most what arrived since the last Flush.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"
#include "store/chunk.h"

namespace ithbat::store {

struct StoreOptions {
  TimeNs retention = 24 * 3600 * kNsPerSec;    // samples and events older than now - retention go
  uint64_t memory_budget_bytes = 256ull << 20;  // compressed samples + events; the oldest go first
  size_t max_series = 200'000;
  size_t max_events = 1'000'000;
  size_t max_event_text_bytes = 4096;
  size_t samples_per_chunk = 512;               // a chunk seals at this many samples
  std::string data_dir;                         // empty: memory only
  uint64_t disk_budget_bytes = 2ull << 30;      // oldest segments go first
};

struct LabelMatcher {
  enum class Op { kEq, kNe, kRe, kNre };
  std::string name;
  Op op = Op::kEq;
  std::string value;  // for kRe/kNre an RE2 pattern, fully anchored as in PromQL
};

// A PromQL-style series selector: metric{label="v",other=~"re.*"}. The metric name may be
// absent if at least one matcher is given ({__name__=~"gpu_.*"} works too).
struct SeriesSelector {
  std::string metric;
  std::vector<LabelMatcher> matchers;
  // Errors name the position and the problem. Bounded: at most 1 KiB, 16 matchers.
  static Result<SeriesSelector> Parse(std::string_view text);
};

struct SeriesInfo {
  SeriesRef ref = 0;
  const MetricDesc* desc = nullptr;  // owned by the store, valid for its lifetime
  LabelSet labels;
};

struct SeriesData {
  SeriesInfo info;
  std::vector<Sample> samples;  // in time order, within the asked window
};

struct EventQuery {
  std::vector<EventKind> kinds;  // empty: all kinds
  std::string job;               // empty: any
  // Event names wanted (exact); empty: any. A detector that wants two metrics of a job asks for
  // those, not for every metric of the window: a job printing 20 lines a second has ~100,000
  // metric events in 15 minutes, ~40 MB as Event objects.
  std::vector<std::string> names;
  int32_t rank = -1;             // -1: any
  int32_t pid = -1;
  int32_t gpu = -1;
  TimeNs from = kMinTime;        // inclusive
  TimeNs to = kMaxTime;          // inclusive
  size_t limit = 10'000;         // newest events win when more match
};

struct StoreStats {
  size_t series = 0;
  uint64_t samples_appended = 0;
  uint64_t samples_rejected = 0;    // out of order, duplicates, unknown ref
  uint64_t samples_in_memory = 0;
  uint64_t sample_bytes_in_memory = 0;  // encoded bytes (sealed + open chunks)
  uint64_t chunks_dropped = 0;      // by retention or memory budget
  size_t events = 0;
  uint64_t event_bytes_in_memory = 0;  // approximate (EventLog::bytes)
  uint64_t events_dropped = 0;         // by retention, the event limit or the memory budget
  uint64_t bytes_on_disk = 0;
  uint64_t corrupt_segments = 0;  // set aside since the data directory was opened (DiskStats)
  uint64_t flushes = 0;
  uint64_t flush_errors = 0;
  TimeNs last_flush = 0;
};

class EventLog;
class StepTimelines;
class DiskStore;
struct SeriesState;

class Store final : public Sink {
 public:
  static Result<std::unique_ptr<Store>> Open(StoreOptions options);
  ~Store() override;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sink
  Result<SeriesRef> RegisterSeries(const MetricDesc& desc, const LabelSet& labels) override;
  Status Append(SeriesRef ref, TimeNs t, double value) override;
  Status AppendEvent(Event event) override;
  Status RecordStep(std::string_view job, int32_t rank, StepSpan span) override;

  // Series whose samples fall in [from, to] (inclusive), in (metric, labels) order.
  Result<std::vector<SeriesData>> Select(const SeriesSelector& selector, TimeNs from, TimeNs to) const;
  std::vector<SeriesInfo> ListSeries(const SeriesSelector& selector) const;
  std::optional<Sample> Latest(SeriesRef ref) const;
  // Every metric with its series' newest samples, metrics in name order, for /metrics.
  // Series whose newest sample is older than stale_before are left out.
  void ForEachLatest(TimeNs stale_before,
                     const std::function<void(const MetricDesc&, const LabelSet&, Sample)>& fn) const;
  std::vector<MetricDesc> Metrics() const;

  std::vector<Event> Events(const EventQuery& query) const;
  std::optional<int64_t> StepAt(std::string_view job, int32_t rank, TimeNs t) const;
  std::optional<StepSpan> FindStep(std::string_view job, int32_t rank, int64_t step) const;
  std::vector<StepSpan> Steps(std::string_view job, int32_t rank, TimeNs from, TimeNs to) const;
  // Every (job, rank) with a step timeline, in (job, rank) order.
  std::vector<std::pair<std::string, int32_t>> StepKeys() const;

  // Writes what arrived since the last flush as one crash-safe segment (no-op in memory mode).
  Status Flush();
  // Merges small on-disk segments into larger ones (better compression, fewer files); the
  // agent calls it from maintenance. No-op in memory mode.
  Status Compact();
  // Drops chunks and events older than now - retention, then the oldest chunks until the memory
  // budget holds; on disk, segments by retention and disk budget.
  void EnforceRetention(TimeNs now);
  StoreStats Stats() const;
  const StoreOptions& options() const { return options_; }

 private:
  explicit Store(StoreOptions options);
  struct Impl;
  StoreOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ithbat::store
