#pragma once
// History on disk: a directory of immutable, checksummed segment files plus an append-only
// series table. Crash safety comes from write-to-temp + fsync + rename: a segment is either
// whole or absent, and a torn tail record of the series table is detected and cut on open.
//
// Segment = everything that arrived in one flush interval: per series the new samples in a
// columnar block codec (timestamps delta-of-delta, values as decimal mantissa deltas, then
// zstd), the new events, and the new step spans. Compaction merges small segments into larger
// ones (better compression, fewer files). The format is documented in docs/storage.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "store/chunk.h"
#include "store/step_timeline.h"

namespace ithbat::store {

struct SeriesBatch {
  SeriesRef ref = 0;
  std::vector<Sample> samples;  // strictly increasing t
};

struct SegmentContents {
  std::vector<SeriesBatch> series;
  std::vector<Event> events;
  std::vector<StepRecord> steps;
};

struct SeriesDefinition {
  SeriesRef ref = 0;
  MetricDesc desc;
  LabelSet labels;
};

struct DiskStats {
  uint64_t bytes = 0;
  size_t segments = 0;
  uint64_t segments_deleted = 0;
  uint64_t corrupt_segments = 0;  // skipped on load (checksum or format)
};

class DiskStore {
 public:
  // Creates the directory if needed; takes an exclusive lock file (a second agent on the
  // same directory gets kUnavailable); cuts a torn series-table tail.
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, uint64_t disk_budget_bytes);
  ~DiskStore();

  // Appends a series definition; durable no later than the next WriteSegment.
  Status DefineSeries(const SeriesDefinition& def);
  // Writes one segment atomically (temp file, fsync, rename, fsync dir).
  Status WriteSegment(const SegmentContents& contents);
  // Replays history: every series definition first, then the segments oldest first. Corrupt
  // segments are skipped and counted, never fatal.
  Status Load(const std::function<void(const SeriesDefinition&)>& on_series,
              const std::function<void(const SegmentContents&)>& on_segment);
  // Merges closed time windows of small segments into larger ones (two tiers: 5 min, then
  // 1 h; see docs/storage.md). Cheap when there is nothing to merge: the agent calls it from
  // maintenance. Deleting old segments is EnforceRetention's job.
  Status Compact();
  // Deletes segments wholly older than `before`, then the oldest until the disk budget holds.
  void EnforceRetention(TimeNs before);
  DiskStats Stats() const;

 private:
  DiskStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ithbat::store
