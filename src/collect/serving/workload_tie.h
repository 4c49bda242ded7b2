#pragma once
// Whether an inference server found by its command line belongs to the node's workload (issue
// 20 item 2, second half). The listener check (listener.h) makes sure the agent scrapes the
// process that really answers on the port; this one decides whether the agent, as root, talks
// to that process at all. A server is tied when either holds:
//
//   GPU  one of its processes, or a descendant of one, is a GPU process: listed by the driver
//        (NVML's compute-process list, published by the GPU collector in TrackedProcesses).
//        A vLLM V1 API server holds no GPU itself: its EngineCore child (tp = 1) or the
//        Worker_TP grandchildren (tp > 1) do; SGLang's schedulers and TGI's shards are children
//        of the process whose command line names the server too.
//   job  its cgroup names a Slurm job (slurmd's cgroup plugin) or a Kubernetes pod (kubelet).
//        An unprivileged user cannot move a process into those cgroups. A job claimed only in
//        the environment (SLURM_JOB_ID, TORCHELASTIC_RUN_ID) is not enough: anyone can set it.
//
// Everything else named `vllm serve` (a user's experiment with no GPU, a squatter) is reported
// and left alone.
//
// Bounded: at most kMaxGpuProcessesWalked GPU processes looked at, kMaxTreeDepth ancestors each
// (read when the GPU process list changes, not per check), one 64 KiB cgroup file per server
// process.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::serving {

inline constexpr size_t kMaxGpuProcessesWalked = 1024;
// vLLM's deepest GPU process is a grandchild of the API server (API server → EngineCore →
// Worker_TP); a launcher (uv run, a shell, tini in a container) adds a level or two.
inline constexpr int kMaxTreeDepth = 8;

enum class TieKind : uint8_t { kNone, kGpu, kJob };

struct WorkloadTie {
  TieKind kind = TieKind::kNone;
  int32_t via_pid = -1;  // the GPU process (kGpu) or the server process whose cgroup names the job (kJob)
  std::string what;      // for logs: "GPU process 4711", "Slurm job 123", "Kubernetes pod <uid>"
};

// A GPU process and its ancestors, nearest first (at most kMaxTreeDepth; the walk stops at init,
// at a process that is gone and at a loop).
struct GpuProcessLine {
  int32_t pid = -1;
  std::vector<int32_t> ancestors;
};

// The lines of the first kMaxGpuProcessesWalked of `gpu_pids`, read from proc_root/<pid>/status.
// Process trees change far less often than servers are checked: the collector reads them when
// the GPU process list changes or at a rescan, not every tick. Never fails.
std::vector<GpuProcessLine> ReadGpuProcessLines(const std::filesystem::path& proc_root,
                                                std::span<const int32_t> gpu_pids);

// The GPU half: whether one of the GPU processes is one of `server_pids` or descends from one.
// Pure (no I/O).
WorkloadTie GpuTie(std::span<const int32_t> server_pids, std::span<const GpuProcessLine> lines);

// The job half: whether proc_root/<pid>/cgroup of one of `server_pids` names a Slurm job or a
// Kubernetes pod. Errors: kPermission when no cgroup file could be read and one was denied;
// a process that is gone counts as untied.
Result<WorkloadTie> JobTie(const std::filesystem::path& proc_root, std::span<const int32_t> server_pids);

}  // namespace ithbat::collect::serving
