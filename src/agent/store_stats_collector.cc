#include "agent/store_stats_collector.h"

namespace ithbat::agent {

StoreStatsCollector::StoreStatsCollector(const store::Store& store) : Collector("store"), store_(store) {}

// The order here is the order of the values in CollectImpl.
std::vector<MetricDesc> StoreStatsCollector::Describe() const {
  return {
      {"ithbat_store_series", "Series held by the store", "", MetricType::kGauge, {}},
      {"ithbat_store_samples_appended_total", "Samples the store accepted", "", MetricType::kCounter, {}},
      {"ithbat_store_samples_rejected_total",
       "Samples the store refused (out of order, duplicate, unknown series)",
       "",
       MetricType::kCounter,
       {}},
      {"ithbat_store_sample_bytes",
       "Encoded size of the samples held in memory",
       "bytes",
       MetricType::kGauge,
       {}},
      {"ithbat_store_chunks_dropped_total",
       "Sample chunks dropped by retention or the memory budget",
       "",
       MetricType::kCounter,
       {}},
      {"ithbat_store_events", "Events held in the event log", "", MetricType::kGauge, {}},
      {"ithbat_store_event_bytes",
       "Approximate memory the events held in the event log take",
       "bytes",
       MetricType::kGauge,
       {}},
      {"ithbat_store_events_dropped_total",
       "Events dropped from memory by retention, the event limit or the memory budget (still on disk when "
       "flushed before)",
       "",
       MetricType::kCounter,
       {}},
      {"ithbat_store_disk_bytes",
       "Bytes the store's segments use in the data directory",
       "bytes",
       MetricType::kGauge,
       {}},
      {"ithbat_store_flushes_total",
       "Flushes of the store to its data directory",
       "",
       MetricType::kCounter,
       {}},
      {"ithbat_store_flush_errors_total", "Flushes of the store that failed", "", MetricType::kCounter, {}},
      {"ithbat_store_corrupt_segments_total",
       "Segments of the data directory that failed their checksum or format and were set aside (the newest 8 "
       "kept as .corrupt files)",
       "",
       MetricType::kCounter,
       {}},
  };
}

Status StoreStatsCollector::InitImpl(Sink& sink) {
  const std::vector<MetricDesc> descs = Describe();
  static_assert(kMetricCount == 12);
  if (descs.size() != kMetricCount) return MakeError(ErrorCode::kInternal, "store metric count mismatch");
  for (size_t i = 0; i < kMetricCount; ++i) {
    auto ref = sink.RegisterSeries(descs[i], LabelSet());
    if (!ref) return std::unexpected(ref.error());
    refs_[i] = *ref;
  }
  sink_ = &sink;
  return Ok();
}

Status StoreStatsCollector::CollectImpl(TimeNs tick_time) {
  const store::StoreStats s = store_.Stats();
  const double values[kMetricCount] = {
      static_cast<double>(s.series),
      static_cast<double>(s.samples_appended),
      static_cast<double>(s.samples_rejected),
      static_cast<double>(s.sample_bytes_in_memory),
      static_cast<double>(s.chunks_dropped),
      static_cast<double>(s.events),
      static_cast<double>(s.event_bytes_in_memory),
      static_cast<double>(s.events_dropped),
      static_cast<double>(s.bytes_on_disk),
      static_cast<double>(s.flushes),
      static_cast<double>(s.flush_errors),
      static_cast<double>(s.corrupt_segments),
  };
  for (size_t i = 0; i < kMetricCount; ++i) {
    // One refused sample (a clock step back) must not hide the others.
    if (auto st = sink_->Append(refs_[i], tick_time, values[i]); !st) ReportError(st.error());
  }
  return Ok();
}

}  // namespace ithbat::agent
