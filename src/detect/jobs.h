#pragma once
// The jobs the stores know about, found from what the agents tagged at collection time: every
// series and event carrying a job id (scheduler job, torchelastic run, pod) and a rank. A
// detector starts from these, never from a list it was handed: subjects are found, not told.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/time.h"
#include "detect/fleet_view.h"

namespace ithbat::detect {

// One process of a job: a rank as one agent saw it. A restarted rank is a second process.
struct RankProcess {
  std::string node;
  int32_t rank = -1;
  int32_t local_rank = -1;
  int32_t world_size = -1;
  int32_t pid = -1;
  int32_t gpu = -1;         // NVML index on the node, -1 unknown
  std::string gpu_uuid;
  TimeNs first_seen = 0;    // first sample of any of its series
  TimeNs last_seen = 0;     // newest sample

  RankRef Ref() const { return RankRef{rank, local_rank, node, pid}; }
  GpuRef Gpu() const { return GpuRef{node, gpu, gpu_uuid}; }
};

struct JobView {
  std::string id;
  std::vector<RankProcess> processes;  // ordered by (rank, first_seen)
  TimeWindow window;                   // first to last sample of any process
  int32_t world_size = -1;             // the largest world size its processes reported

  std::set<std::string> Nodes() const;
  std::set<int32_t> Ranks() const;
  // `pid=~"1|2"`: the job's processes on `node` ("" = every node) as a selector value.
  std::string PidRegex(const std::string& node = "") const;
  // The process that logs (rank 0, else the lowest rank): its loss and step lines.
  const RankProcess* LoggingProcess() const;
  // The newest process of `rank` on `node` ("" = any node).
  const RankProcess* Process(int32_t rank, const std::string& node = "") const;
};

// Jobs with at least one process seen in [from, to], in id order. Sources: the probe and
// scheduling series (labels job_id, rank, pid, gpu, gpu_uuid) and the job-output events; a GPU
// known only by index (or only by UUID) is completed from the node's ithbat_gpu_info.
std::vector<JobView> DiscoverJobs(const FleetView& view, TimeNs from, TimeNs to);

// A label's value, or "" when absent.
std::string Label(const LabelSet& labels, std::string_view name);
// A label's (or any decimal) integer text as a number, or `fallback` when it is not one whole.
int32_t ParseInt(std::string_view s, int32_t fallback = -1);
// A label value quoted for a selector: "a\"b".
std::string Quote(std::string_view v);

}  // namespace ithbat::detect
