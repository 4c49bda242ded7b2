#pragma once
// world.json: the ground truth of one simulated run, written by the runner (atomically: a temp
// file renamed over the old one) at every phase and at the end; the lab's checker reads it to
// know where each rank ran, which pids, where each agent listens, when each event happened.
// Schema: sim/runner/README.md ("world.json"); "format" is bumped on an incompatible change.
//
// Times are CLOCK_REALTIME ns of this machine (a skewed node's agent stamps its own samples with
// its skewed clock: the checker compares against these, not against the agent).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace ithbat::sim::runner {

inline constexpr int kWorldFormat = 1;

struct GpuRecord {
  int64_t index = 0;
  std::string uuid;
};
struct NicRecord {
  std::string name;
  int64_t port = 1;
  uint32_t slot = 0;
  std::vector<int64_t> gpus;
};
struct NodeRecord {
  std::string name;
  size_t index = 0;
  std::string agent_url;  // "" without an agent (--no-agents)
  int64_t agent_pid = 0;
  std::string agent_data_dir;  // the agent's --data-dir (its history on disk, readable after the run)
  std::string state, procfs, sysfs, kmsg;
  std::vector<GpuRecord> gpus;
  std::vector<NicRecord> nics;
  double clock_skew_ms = 0;
  double clock_drift_ppm = 0;
  bool clock_faked = false;  // the agent runs under faketime
};
struct RankRecord {
  int64_t rank = 0;
  int64_t local_rank = 0;
  std::string node;
  int64_t gpu = 0;
  std::string gpu_uuid;
  int64_t pid = 0;  // host pid (0 until the launcher reported it)
  std::optional<int64_t> exit_code;
};
struct StepRecord {
  int64_t step = 0;
  int64_t start_ns = 0;       // earliest rank start
  int64_t end_ns = 0;         // latest rank end
  int64_t slowest_rank = -1;  // the rank with the most tokens in the step (ties: the longer one)
  int64_t planned_ns = 0;     // the longest compute any rank planned for it (real ns): what the script asks
  int64_t ranks = 0;          // ranks that reported the step
};
struct SaveRecord {
  int64_t step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t bytes = 0;  // all ranks, real (scaled) bytes
};
// Why a job started later than its start_s: it waited for a checkpoint to resume from, or for
// GPUs another job still held (as Slurm holds a job whose GPUs are allocated).
struct JobHold {
  std::string reason;
  double real_s = 0;  // real seconds it waited for it
};
struct JobRecord {
  std::string id;
  int64_t scripted_start_ns = 0;  // world start + start_s / c: when the script starts it
  std::vector<JobHold> held;
  std::string launcher;
  std::string state = "pending";  // pending, running, ended
  uint64_t slurm_job_id = 0;      // srun and torchrun jobs
  int64_t started_ns = 0;
  int64_t ended_ns = 0;
  std::optional<int64_t> exit_code;  // first nonzero rank exit, else 0; unset while running
  int64_t steps_done = 0;
  std::vector<RankRecord> ranks;
  std::vector<StepRecord> steps;
  std::vector<SaveRecord> saves;
};
// An inference server (scenario `inference[]`), started at world time 0 as `vllm serve`.
struct ServerRecord {
  std::string id;
  std::string node;
  std::string url;  // http://127.0.0.1:<port> (/metrics and the API)
  int64_t port = 0;
  int64_t pid = 0;
  std::vector<int64_t> gpus;
  std::string state = "pending";  // pending, running, ended, stopped
  int64_t started_ns = 0;
  int64_t ended_ns = 0;
  std::optional<int64_t> exit_code;
};
struct EventRecord {
  std::string id;
  std::string kind;
  std::string node;
  int64_t gpu = -1;
  std::string nic;
  std::string mount;
  std::string job;
  int64_t rank = -1;
  int64_t started_ns = 0;            // 0 = not (yet) started
  int64_t ended_ns = 0;              // 0 = still active or never ended
  int64_t fired_step = -1;           // the step its job (`job`) had completed when it fired; -1 without one
  std::vector<std::string> effects;  // inject lines delivered, "<job>/rank<R>: <line>"
};
struct MountRecord {
  std::string name;
  std::string kind;
  std::map<std::string, std::string> nodes;  // node → where its ranks write
  std::vector<std::string> also_at;          // other mount points of the same file system
};
struct WorldRecord {
  std::string scenario;
  uint64_t seed = 0;
  bool quick = false;
  double magnitude = 1.0;  // fault magnitude the run used (1 = as written)
  double time_compression = 1;
  double byte_scale = 1;
  std::string root;
  std::string nccl_shm_dir;     // the fake NCCL's per-world directory (removed at the end)
  std::string phase = "setup";  // setup, running, stopping, ended, failed
  // duration, jobs_ended, story_told (past the duration, once the story was told), story_cap
  // (the cap reached with the story untold), signal, setup_failed
  std::string stop_reason;
  double duration_real_s = 0;   // the planned real duration
  double story_cap_real_s = 0;  // the longest it may run waiting for its story (0: no extension)
  std::vector<std::string> story_milestones;  // what the story had to reach (story.h)
  std::vector<std::string> story_untold;      // what it had not reached when the world ended
  int64_t started_ns = 0;
  int64_t ended_ns = 0;
  int64_t host_jitter_processes = 0;
  std::vector<NodeRecord> nodes;
  std::vector<JobRecord> jobs;
  std::vector<ServerRecord> servers;
  std::vector<EventRecord> events;
  std::vector<MountRecord> mounts;
};

std::string WorldToJson(const WorldRecord& world);
// Writes world.json under `path` atomically (path + ".tmp", fsync, rename).
Status WriteWorldJson(const std::filesystem::path& path, const WorldRecord& world);

// Reads jobs/<job>/rank<R>.truth.jsonl of every rank of `job` and fills steps, saves and
// steps_done. Missing files and malformed lines are skipped; each file is read up to
// kMaxTruthBytes.
inline constexpr size_t kMaxTruthBytes = 64u << 20;
// A truth line longer than this is skipped (a rank killed mid-write, a corrupt file).
inline constexpr size_t kMaxTruthLineBytes = 1u << 20;
void MergeTruth(const std::filesystem::path& job_dir, JobRecord& job);

}  // namespace ithbat::sim::runner
