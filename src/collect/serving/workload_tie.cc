#include "collect/serving/workload_tie.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "collect/identity/identity_parse.h"
#include "collect/proc/proc_tree.h"
#include "core/file_util.h"

namespace ithbat::collect::serving {

std::vector<GpuProcessLine> ReadGpuProcessLines(const std::filesystem::path& proc_root,
                                                std::span<const int32_t> gpu_pids) {
  std::vector<GpuProcessLine> lines;
  const size_t n = std::min(gpu_pids.size(), kMaxGpuProcessesWalked);
  lines.reserve(n);
  for (size_t i = 0; i < n; i++) {
    GpuProcessLine line{gpu_pids[i], {}};
    int32_t cur = gpu_pids[i];
    for (int depth = 0; depth < kMaxTreeDepth; depth++) {
      std::optional<int32_t> parent = proc::ReadPpid(proc_root, cur);
      if (!parent || *parent <= 1) break;  // gone, init, or the kernel's own
      // A loop (a racing or forged tree): the process itself, or an ancestor already seen.
      if (*parent == line.pid ||
          std::find(line.ancestors.begin(), line.ancestors.end(), *parent) != line.ancestors.end()) {
        break;
      }
      line.ancestors.push_back(*parent);
      cur = *parent;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

WorkloadTie GpuTie(std::span<const int32_t> server_pids, std::span<const GpuProcessLine> lines) {
  auto is_server = [&](int32_t pid) {
    return std::find(server_pids.begin(), server_pids.end(), pid) != server_pids.end();
  };
  for (const GpuProcessLine& line : lines) {
    if (is_server(line.pid)) return WorkloadTie{TieKind::kGpu, line.pid, fmt::format("GPU process {}", line.pid)};
  }
  for (const GpuProcessLine& line : lines) {
    for (int32_t ancestor : line.ancestors) {
      if (is_server(ancestor)) {
        return WorkloadTie{TieKind::kGpu, line.pid,
                           fmt::format("GPU process {} (descends from server process {})", line.pid, ancestor)};
      }
    }
  }
  return WorkloadTie{};
}

Result<WorkloadTie> JobTie(const std::filesystem::path& proc_root, std::span<const int32_t> server_pids) {
  std::optional<Error> denied;
  bool read_one = false;
  for (int32_t pid : server_pids) {
    auto text = ReadFileBounded(proc_root / std::to_string(pid) / "cgroup", 64 * 1024);
    if (!text) {
      if (text.error().code == ErrorCode::kPermission && !denied) denied = text.error();
      continue;  // gone (kNotFound) or unreadable: the next process may say
    }
    read_one = true;
    const identity::CgroupIdentity cgroup = identity::ParseCgroup(*text);
    if (!cgroup.slurm_job.empty()) {
      return WorkloadTie{TieKind::kJob, pid,
                         fmt::format("Slurm job {} (cgroup of process {})", cgroup.slurm_job, pid)};
    }
    if (!cgroup.pod_uid.empty()) {
      return WorkloadTie{TieKind::kJob, pid,
                         fmt::format("Kubernetes pod {} (cgroup of process {})", cgroup.pod_uid, pid)};
    }
  }
  if (denied && !read_one) return std::unexpected(*denied);
  return WorkloadTie{};
}

}  // namespace ithbat::collect::serving
