#include "core/identity.h"

namespace ithbat {

std::vector<std::pair<std::string, std::string>> Identity::ToLabelPairs() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!job.empty()) out.emplace_back("job_id", job);
  if (rank >= 0) out.emplace_back("rank", std::to_string(rank));
  if (local_rank >= 0) out.emplace_back("local_rank", std::to_string(local_rank));
  if (world_size >= 0) out.emplace_back("world_size", std::to_string(world_size));
  if (pid >= 0) out.emplace_back("pid", std::to_string(pid));
  if (gpu_index >= 0) out.emplace_back("gpu", std::to_string(gpu_index));
  if (!gpu_uuid.empty()) out.emplace_back("gpu_uuid", gpu_uuid);
  return out;
}

}  // namespace ithbat
