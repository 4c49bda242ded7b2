#pragma once
// Pure parsers for the per-process sources of identity (/proc/<pid>/{environ,cgroup,status,stat}
// and `scontrol show job -o`). No I/O here, so every rule is tested on strings; the resolver
// (identity_resolver.h) does the reading. Every input is untrusted: sizes are bounded, malformed
// text is skipped or reported with QuoteForError, never a crash.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::identity {

// The only environment variables Ithbat ever keeps. Everything else in a process's environment
// (tokens, passwords, keys) is never stored, logged or returned: see README.md, "Security".
enum class EnvKey : uint8_t {
  kSlurmJobId,
  kSlurmStepId,
  kSlurmProcId,
  kSlurmLocalId,
  kSlurmNtasks,
  kRank,
  kLocalRank,
  kWorldSize,
  kTorchelasticRunId,
  kMasterAddr,
  kOmpiRank,
  kOmpiSize,
  kOmpiLocalRank,
  kPmiRank,
  kPmiSize,
  kCudaVisibleDevices,
  kNvidiaVisibleDevices,
  // The job's own opt-out from output capture (ITHBAT_JOBLOG=off): read so the job-output
  // collector can honour it; holds no secret.
  kIthbatJoblog,
  kCount,
};
inline constexpr size_t kEnvKeyCount = static_cast<size_t>(EnvKey::kCount);
std::string_view EnvKeyName(EnvKey key);

// A value longer than this is dropped (no allow-listed variable is legitimately longer: 8 MIG
// UUIDs in CUDA_VISIBLE_DEVICES are ~400 bytes).
inline constexpr size_t kMaxEnvValueBytes = 4096;

struct AllowedEnv {
  std::array<std::optional<std::string>, kEnvKeyCount> values;

  const std::optional<std::string>& Get(EnvKey key) const {
    return values[static_cast<size_t>(key)];
  }
  bool empty() const;
  friend bool operator==(const AllowedEnv&, const AllowedEnv&) = default;
};

// /proc/<pid>/environ: NUL-separated KEY=VALUE entries. Only allow-listed keys are copied out;
// entries without '=' and over-long values are skipped. Never fails.
AllowedEnv ParseEnviron(std::string_view environ);

// What the cgroup paths of a process say about who owns it (all empty when nothing matched).
struct CgroupIdentity {
  std::string slurm_job;     // from .../job_<id>/...
  std::string slurm_step;    // from .../step_<id>/... ("0", "batch", "extern", ...)
  std::string pod_uid;       // Kubernetes pod UID, dashed form
  std::string container_id;  // 64-hex container id (docker, containerd, cri-o)
  friend bool operator==(const CgroupIdentity&, const CgroupIdentity&) = default;
};

// /proc/<pid>/cgroup, v1 ("<id>:<controllers>:<path>") and v2 ("0::<path>") lines. The first
// line that yields a field wins for that field. Malformed lines are skipped.
CgroupIdentity ParseCgroup(std::string_view cgroup);

struct ProcStatus {
  int32_t ppid = -1;
  // NSpid: the pid in each PID namespace the process is in, outermost (the namespace of the
  // /proc that was read) first, innermost (what the process sees as its own pid) last.
  std::vector<int32_t> nspid;
};

// /proc/<pid>/status. Errors: kParse when there is no PPid line.
Result<ProcStatus> ParseStatus(std::string_view status);

// Field 22 (starttime, clock ticks after boot) of /proc/<pid>/stat, counted after the last ')'
// so that a comm with spaces or parentheses cannot shift fields. Errors: kParse.
Result<uint64_t> ParseStatStartTime(std::string_view stat);

// A device named by CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES: an index or a UUID
// ("GPU-...", "MIG-...", "MIG-GPU-.../x/y").
struct GpuRef {
  int32_t index = -1;
  std::string uuid;
  bool known() const { return index >= 0 || !uuid.empty(); }
  friend bool operator==(const GpuRef&, const GpuRef&) = default;
};

// The device a process uses, from its visible-devices list and local rank:
//   one visible device           -> that device
//   several, 0 <= local_rank < n -> entry[local_rank] (the torchrun/srun convention: worker k
//                                   calls set_device(k) on the devices it can see)
//   list absent, local_rank >= 0 -> index = local_rank (all devices visible)
// "all", "none", "void", "" and unparsable entries give nothing.
GpuRef ResolveGpu(const std::optional<std::string>& visible_devices, int32_t local_rank);

// `scontrol show job -o <id>` (first line; one job per line with -o).
struct SlurmJobInfo {
  std::string job_id;
  std::string name;
  std::string user;  // "root" from "UserId=root(0)"
  std::string partition;
  std::string node_list;
  int32_t num_nodes = -1;
  std::string state;
  friend bool operator==(const SlurmJobInfo&, const SlurmJobInfo&) = default;
};
// Errors: kParse when there is no JobId= field.
Result<SlurmJobInfo> ParseScontrolJob(std::string_view text);

}  // namespace ithbat::collect::identity
