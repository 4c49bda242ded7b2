#pragma once
// pid -> Identity (job, rank, local rank, world size, GPU) for the processes of this node, from
// the agent's REAL /proc (the namespace its pids live in; never the --procfs statistics root).
//
// Sources, per process: the allow-listed environment (identity_parse.h, EnvKey), the cgroup
// paths (Slurm job/step, Kubernetes pod, container), status (PPid, NSpid) and stat (start
// time). A process that lacks job information inherits it from its nearest ancestor that has
// it (a torchrun worker under srun), but rank, local rank and world size are always its own.
// Precedence is documented in README.md.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collect/identity/identity_parse.h"
#include "core/identity.h"
#include "core/result.h"

namespace ithbat::collect::identity {

// Everything resolved about one process. `identity` is what series are labelled with; the rest
// explains it (debugging, the JSON API).
struct ProcessIdentity {
  Identity identity;              // pid = host pid (the /proc entry); node/cluster left empty
  int32_t ns_pid = -1;            // the pid the process sees itself as (innermost NSpid)
  std::vector<int32_t> nspid;     // outermost first
  int32_t ppid = -1;
  uint64_t start_time = 0;        // clock ticks after boot (stat field 22)
  std::string slurm_job;
  std::string slurm_step;
  std::string torchelastic_run_id;
  std::string master_addr;
  std::string pod_uid;
  std::string container_id;
  std::string job_source;         // "env", "cgroup", "ancestor-env:<pid>", ... ("" = no job)
  std::string gpu_source;         // "nvml", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                                  // "LOCAL_RANK" or ""
  bool environ_truncated = false; // environ was larger than the read bound
  std::string environ_error;      // why the environment could not be read ("" = it was)

  // Extra attributes (pod_uid, container_id, slurm_step, torchelastic_run_id), unknown left out.
  std::vector<std::pair<std::string, std::string>> Attributes() const;
  // One line for logs and tests. Contains only the fields above (never raw environment).
  std::string DebugString() const;
};

class IdentityResolver {
 public:
  struct Options {
    // Only tests change this (a fixture tree); the agent always resolves through /proc.
    std::filesystem::path proc_root = "/proc";
    size_t environ_max_bytes = 256 * 1024;
    int max_depth = 64;  // ancestors walked for inherited job information
    size_t max_cached = 65536;  // the cache is cleared when it would grow past this
  };

  IdentityResolver() : IdentityResolver(Options{}) {}
  explicit IdentityResolver(Options options);

  // Resolves one process. Cached per pid and start time: a second call re-reads only stat,
  // unless the start time changed (pid reuse), in which case everything is re-read.
  // `gpus` is the caller's pid -> GPU map (the NVML process list); when it holds the pid, it
  // wins over the environment. Errors: kNotFound when the process does not exist (or exited
  // while being read); kParse when its stat/status is malformed; kPermission when stat/status
  // cannot be read. An unreadable environment (another user's process without CAP_SYS_PTRACE)
  // is not an error: the identity comes from the other sources and environ_error says why.
  // Thread-safe.
  Result<ProcessIdentity> Resolve(int32_t pid,
                                  const std::unordered_map<int32_t, GpuRef>* gpus = nullptr);

  // Drops what is cached for a pid (call on process exit).
  void Forget(int32_t pid);
  size_t cached() const;

 private:
  // What one process's own files say; ancestry is combined at Resolve time.
  struct Record {
    uint64_t start_time = 0;
    ProcStatus status;
    AllowedEnv env;
    CgroupIdentity cgroup;
    bool environ_truncated = false;
    std::string environ_error;
  };

  Result<uint64_t> ReadStartTime(int32_t pid) const;
  Result<Record> ReadRecord(int32_t pid, uint64_t start_time) const;
  // The cached record if its start time still matches, else a fresh one. Called with mu_ held.
  Result<const Record*> Load(int32_t pid);

  Options options_;
  mutable std::mutex mu_;
  std::unordered_map<int32_t, Record> cache_;
};

// Reads at most max_bytes of /proc/<pid>/environ into a fixed buffer, hands the allow-listed
// variables out, and zeroes the buffer before returning, so no other part of the environment
// outlives the call. *truncated says whether the file was longer (the last, cut entry is
// dropped). Errors as ReadFileBounded (kNotFound, kPermission, kIo).
Result<AllowedEnv> ReadAllowedEnviron(const std::filesystem::path& path, size_t max_bytes,
                                      bool* truncated);

// Slurm job metadata from `scontrol show job -o <id>`, cached per job id.
class SlurmJobCache {
 public:
  struct Options {
    std::string scontrol = "scontrol";  // looked up in PATH when it has no '/'
    std::chrono::milliseconds timeout{2000};
    size_t max_output_bytes = 64 * 1024;
    std::chrono::seconds ttl{60};
  };
  SlurmJobCache() : SlurmJobCache(Options{}) {}
  explicit SlurmJobCache(Options options) : options_(std::move(options)) {}

  // Errors: kNotFound when scontrol is not installed (decided once: later calls return it
  // without running anything) or the job is unknown (cached for the TTL like a success);
  // kTimeout when scontrol hung (killed); kResourceExhausted on oversized output; kParse.
  // Thread-safe; calls for different jobs run scontrol one at a time.
  Result<SlurmJobInfo> Get(const std::string& job_id);
  // How many times scontrol was started (tests check caching with it).
  int runs() const;

 private:
  struct Entry {
    std::chrono::steady_clock::time_point at;
    Result<SlurmJobInfo> info;
  };
  Options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> cache_;
  bool scontrol_missing_ = false;
  int runs_ = 0;
};

// Runs argv[0] (PATH lookup) with stdin from /dev/null, stdout captured (at most max_bytes),
// stderr discarded; killed with SIGKILL after `timeout`. Returns stdout when it exits 0.
// Errors: kNotFound (cannot be executed: ENOENT/EACCES), kTimeout, kResourceExhausted (more
// output than max_bytes; killed), kUnavailable (non-zero exit; message holds the status), kIo.
Result<std::string> RunCommandBounded(const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout, size_t max_bytes);

}  // namespace ithbat::collect::identity
