#pragma once
// The series of one tracked process, tagged with its identity: what every per-process collector
// (collect/probes, collect/sched_io, collect/nccl_profiler) writes. A series is registered the
// first time a (metric, extra labels) pair is put and appended to by its ref afterwards, so the
// hot path is one map lookup.
//
// Labels: the identity's (Identity::ToLabelPairs: job_id, rank, local_rank, world_size, pid,
// gpu, gpu_uuid — the unknown ones left out), then the extra ones of the call. The identity is
// read only when a series is registered: a process keeps the labels it was first seen with.
// With an empty Identity the series carry only the extra labels: a collector's node-wide series.
//
// Not thread-safe (one per process, owned by its collector).
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/identity.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::agent {

// The label names a per-process metric declares: the identity's, then `extra`.
std::vector<std::string> ProcessLabelNames(std::initializer_list<std::string> extra = {});

class ProcessSeries {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Appends (t, v) to the series of `desc` with the identity's labels plus `extra`. Errors: the
  // sink's (registration refused, out of order, ...), returned for the collector to report.
  Status Put(Sink& sink, const Identity& identity, const MetricDesc& desc, const Labels& extra, TimeNs t,
             double v);

  size_t size() const { return refs_.size(); }

 private:
  std::map<std::string, SeriesRef, std::less<>> refs_;  // metric name + \x1f-separated label pairs
};

}  // namespace ithbat::agent
