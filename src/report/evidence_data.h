#pragma once
// From one piece of evidence to what the report shows for it: a chart of the series or events
// behind its `signal`, or — when a chart makes no sense (composite error counters that barely
// move, an aggregate the detector computed, an event count) — a table row with the counter
// deltas found. Signals take the forms the detectors write (src/detect):
//   metric                      ithbat_gpu_utilization_ratio (a counter is drawn as its rate)
//   metric{matchers}            ithbat_gpu_clock_hertz{clock="sm"}
//   a/b{matchers}               ithbat_io_seconds_total/ithbat_io_calls_total{op="fsync"}: the
//                               ratio of the two (of their increases when counters), matchers on
//                               the last term apply to both
//   a+b+c                       summed counters (hardware innocence): a table of deltas
//   event kinds and job scalars checkpoint_begin/checkpoint_end (save durations), loss,
//                               loss_drift, grad_norm, lr (the job's printed scalars)
//   anything else               a table row (what the detector computed has no stored series)
#include <string>
#include <vector>

#include "core/finding.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"
#include "report/chart.h"

namespace ithbat::report {

// What the evidence charts of one diagnosis share.
struct EvidenceContext {
  const detect::FleetView* view = nullptr;
  const Diagnosis* diagnosis = nullptr;
  const std::vector<detect::JobView>* jobs = nullptr;  // discovered over the report's window
  const detect::JobView* job = nullptr;                // the diagnosis's job, when found
  TimeNs from = 0, to = 0;                             // the charts' time axis
  std::vector<ChartMark> marks;                        // the job's events, on every chart
};

struct EvidenceShown {
  bool charted = false;
  Chart chart;               // when charted
  std::string drawn;         // what the chart shows, in words (plain text)
  std::vector<std::string> deltas;  // when not charted: counter deltas found, one per series (plain text)
  std::string why_table;     // when not charted: why a row and not a chart (plain text)
};

// Most series one signal may select before the subject filter (a fleet-wide selector on a
// large view must not read every GPU of the cluster).
inline constexpr size_t kMaxSelectedSeries = 1024;
// Most deltas listed in one table row.
inline constexpr size_t kMaxDeltaRows = 16;

EvidenceShown ShowEvidence(const EvidenceContext& ctx, const Evidence& evidence);

}  // namespace ithbat::report
