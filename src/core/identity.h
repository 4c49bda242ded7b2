#pragma once
// Who a signal belongs to, attached when it is collected: cluster · node · job · rank · pid ·
// gpu. The training step is identity too, but it is never a label: the store keeps a step
// timeline per (job, rank) and maps any time to its step by a lookup.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ithbat {

struct Identity {
  std::string cluster;
  std::string node;
  std::string job;        // scheduler job id (Slurm), run id (torchelastic) or pod UID
  int32_t rank = -1;      // global rank; -1 = unknown
  int32_t local_rank = -1;
  int32_t world_size = -1;
  int32_t pid = -1;       // as the host sees it
  int32_t gpu_index = -1; // NVML index on this node
  std::string gpu_uuid;

  // The labels this identity contributes to a series: job, rank, local_rank, world_size, pid,
  // gpu, gpu_uuid (unknown parts are left out). cluster and node are not series labels: they
  // are the same for every series of an agent and Prometheus adds them as target labels.
  std::vector<std::pair<std::string, std::string>> ToLabelPairs() const;

  friend bool operator==(const Identity&, const Identity&) = default;
};

}  // namespace ithbat
