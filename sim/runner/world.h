#pragma once
// One simulated world, from a scenario file to world.json (sim/runner/README.md): parse,
// resolve with the seed, create the run dir, the fabric state, one NodeWorld per node, the
// storage, one real `ithbat agent` per node, the jobs through their launchers at their start
// times, host-jitter processes, the timeline; then stop everything and leave world.json.
//
// Lifecycle: RunWorld blocks for the whole run. Everything it starts (agents, launchers and
// their ranks, burners, slowfs mounts) is stopped before it returns, whatever happened: on the
// planned end, on RequestStop() (the CLI's SIGINT/SIGTERM handler), on a setup failure half way.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runner/story.h"

namespace ithbat::sim::runner {

struct RunOptions {
  std::filesystem::path scenario_file;
  std::optional<uint64_t> seed;  // none: scenario's seed, else DrawSeed()
  bool quick = false;
  // The world runs this many times slower than its time compression asks (c / slowdown), for a
  // machine too slow for it (the lab's retry of a world the machine could not keep the pace of).
  double slowdown = 1.0;
  // Fault magnitude (src/scenario/magnitude.h): the timeline's graded faults scaled between none
  // (0) and as written (1); for the lab's sweep.
  double magnitude = 1.0;
  // "" = a fresh /tmp/ithbat-sim-XXXXXX. A given root must not exist or be an empty directory
  // (a reused one would mix an old world's files into this one); created with mode 0700.
  std::filesystem::path root;
  std::filesystem::path ithbat;    // the agent binary
  std::filesystem::path sim_dir;   // where ithbat-sim-train and lib/ are
  std::filesystem::path self_exe;  // ithbat-sim (launch and burn modes)
  // libfaketime's libfaketimeMT.so.1, preloaded into a skewed node's agent; "" = the Debian
  // package's (/usr/lib/<triplet>/faketime/). Missing: a WARNING, the agent runs unskewed.
  std::filesystem::path faketime;
  bool agents = true;
  double duration_s = 0;  // REAL seconds; 0 = the scenario's duration / c (and no story extension)
  // What the story must reach before the world may end (story.h): the caller's milestones, on top
  // of those the scenario implies. The world ends at the later of its duration and its story, and
  // never after story_cap_factor × its planned real duration.
  std::vector<StoryMilestone> milestones;
  double story_cap_factor = kStoryCapFactor;
  bool clean = false;     // remove the run dir at the end (only one this run created)
  // After the world ended: keep the agents up this many REAL seconds (or until SIGINT/SIGTERM)
  // with world.json complete (phase "holding"), so a checker can query them afterwards.
  double hold_agents_s = 0;
  double agent_wait_s = 120;  // bound on an agent's /healthz wait
  double grace_s = 5;         // SIGTERM → SIGKILL (launchers, burners)
  double agent_grace_s = 30;  // the same for agents: they flush their history to --data-dir
  // > 0: the agents' cost per launch-probe hit (ithbat agent --probe-cost-ns) instead of their own
  // calibration, which follows this machine's traps: the overhead budget then duty-cycles the
  // probes the way a machine with that cost does (exact where traps are cheap).
  double probe_cost_ns = 0;
  // Progress lines (default: stderr).
  std::function<void(std::string_view)> log;
};

// 0 = the world ran (jobs may have failed: that is the scenario), 1 = setup failed (the reason
// was logged).
int RunWorld(const RunOptions& options);

// Async-signal-safe: asks a running RunWorld to stop (reason "signal").
void RequestStop();

}  // namespace ithbat::sim::runner
