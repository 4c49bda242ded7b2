#pragma once
// world.json, the simulator's record of what it really did (sim/runner writes it; format in
// sim/runner/README.md): nodes with their agents' data directories, jobs with their ranks'
// pids and GPUs, the steps and saves the ranks really made, the events as they really
// happened. The lab's checker reads it to know WHERE to look in the agents' stores (which
// job, which GPUs, which window) and to count budgets in steps and saves; whether a signal is
// there is decided from the stores alone.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/time.h"

namespace ithbat::sim::lab {

struct WorldGpu {
  int64_t index = -1;
  std::string uuid;
};

struct WorldNode {
  std::string name;
  std::string agent_url;
  std::string data_dir;  // the agent's --data-dir (its store on disk)
  std::vector<WorldGpu> gpus;
};

struct WorldRank {
  int64_t rank = -1;
  int64_t local_rank = -1;
  std::string node;
  int64_t gpu = -1;
  std::string gpu_uuid;
  int64_t pid = -1;
};

struct WorldStep {
  int64_t step = -1;
  TimeNs start = 0;
  TimeNs end = 0;
  int64_t planned_ns = 0;  // the longest compute a rank planned for it (real ns); 0 = not recorded
};

struct WorldSave {
  int64_t step = -1;
  TimeNs start = 0;
  TimeNs end = 0;
};

struct WorldJob {
  std::string id;
  TimeNs scripted_start = 0;  // when the script starts it (0 = not recorded)
  std::vector<std::pair<std::string, double>> held;  // what it waited for past its start, real seconds
  TimeNs started = 0;
  TimeNs ended = 0;  // 0 = still running when the world stopped
  std::optional<int64_t> exit_code;
  std::vector<WorldRank> ranks;
  std::vector<WorldStep> steps;  // rank 0's steps, in order
  std::vector<WorldSave> saves;  // rank 0's saves, in order

  // The step rank 0 was in (or had last finished) at t; -1 before the first.
  int64_t StepAt(TimeNs t) const;
  // Steps that started in [from, to).
  int64_t StepsBetween(TimeNs from, TimeNs to) const;
};

struct WorldServer {  // an inference server (scenario `inference`)
  std::string id;
  std::string node;
  int64_t pid = -1;
  TimeNs started = 0;
  TimeNs ended = 0;
};

struct WorldEvent {
  std::string id;
  std::string kind;
  std::string node;
  int64_t gpu = -1;
  std::string nic;
  std::string mount;
  std::string job;
  TimeNs started = 0;
  TimeNs ended = 0;  // 0 = never ended
  int64_t fired_step = -1;  // the step its job had completed when it fired (-1: no job, or not recorded)
};

struct WorldMount {
  std::string name;
  std::string kind;
  std::vector<std::pair<std::string, std::string>> node_paths;  // node -> where its ranks write
  std::vector<std::string> also_at;  // other mount points of the same file system
};

struct World {
  std::string scenario;
  uint64_t seed = 0;
  bool quick = false;
  double magnitude = 1.0;
  double time_compression = 1;
  double byte_scale = 1;
  std::string root;
  TimeNs started = 0;
  TimeNs ended = 0;
  std::string stop_reason;     // duration, jobs_ended, story_told, story_cap, signal, ...
  double duration_real_s = 0;  // the planned real duration
  std::vector<std::string> story_untold;  // what the story had not reached when the world stopped
  std::vector<WorldNode> nodes;
  std::vector<WorldJob> jobs;
  std::vector<WorldServer> servers;
  std::vector<WorldEvent> events;
  std::vector<WorldMount> mounts;

  const WorldJob* Job(std::string_view id) const;
  const WorldServer* Server(std::string_view id) const;
  const WorldNode* Node(std::string_view name) const;
  const WorldEvent* Event(std::string_view id) const;
  const WorldMount* Mount(std::string_view name) const;
};

// The longest world the lab judges: a day of real time (the longest lab world runs minutes; a
// longer span is a clock that was not the run's).
inline constexpr TimeNs kMaxWorldSpanNs = 24 * 3600 * kNsPerSec;
// Parses world.json text. Bounded: at most 64 MiB, and every list is checked as it is read.
// Errors where the text is not a world.json or its world never ran (started_ns unset, ended_ns
// before it, or a span over kMaxWorldSpanNs): there is nothing to judge.
Result<World> ParseWorld(std::string_view json);
Result<World> ReadWorld(const std::string& path);

}  // namespace ithbat::sim::lab
