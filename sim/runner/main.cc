// ithbat-sim: the fleet simulator's runner (sim/runner/README.md).
//   ithbat-sim run FILE [--seed N] [--quick] [--root DIR] [--ithbat PATH] [--no-agents]
//                       [--duration-s S] [--clean]
// and the modes it re-executes itself in: `launch --desc FILE` (a launcher), `burn ...` (a CPU
// burner for host jitter and contention).
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include "runner/process.h"
#include "runner/world.h"
#include "scenario/magnitude.h"

#ifndef ITHBAT_SIM_DEFAULT_ITHBAT
#define ITHBAT_SIM_DEFAULT_ITHBAT ""
#endif
#ifndef ITHBAT_SIM_DEFAULT_SIM_DIR
#define ITHBAT_SIM_DEFAULT_SIM_DIR ""
#endif

namespace {

namespace fs = std::filesystem;

void OnSignal(int) { ithbat::sim::runner::RequestStop(); }

fs::path SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return fs::path(std::string(buf, static_cast<size_t>(n)));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ithbat-sim: runs a scenario's simulated fleet with real agents (sim/runner/README.md)"};
  app.require_subcommand(1);

  ithbat::sim::runner::RunOptions ro;
  std::string file;
  uint64_t seed = 0;
  std::string root, ithbat_path;
  bool no_agents = false;
  auto* run = app.add_subcommand("run", "Run a scenario file");
  run->add_option("FILE", file, "Scenario file (docs/scenarios.md)")->required();
  auto* seed_opt = run->add_option("--seed", seed,
                                   "Seed for the scenario's ranges (default: the file's, else a fresh one)");
  run->add_flag("--quick", ro.quick, "The smaller CI configuration (quick.* values)");
  run->add_option("--slowdown", ro.slowdown,
                  "Run the world this many times slower than its time compression asks (a machine too slow for it)")
      ->check(CLI::Range(1.0, 100.0));
  run->add_option("--magnitude", ro.magnitude,
                  "Scale the timeline's graded faults: 0 none, 1 as written (docs/scenarios.md, \"Fault magnitude\")")
      ->check(CLI::Range(0.0, ithbat::scenario::kMaxMagnitude));
  run->add_option("--root", root, "Run directory: must not exist yet (or be empty); default a fresh /tmp/ithbat-sim-XXXXXX. Kept "
                  "afterwards");
  run->add_option("--ithbat,--agent", ithbat_path, "The agent binary")
      ->default_str(ITHBAT_SIM_DEFAULT_ITHBAT);
  run->add_flag("--no-agents", no_agents, "Start no agents (the world only)");
  run->add_option("--duration-s", ro.duration_s,
                  "Stop after this many REAL seconds (default: the scenario's duration / time compression)")
      ->check(CLI::PositiveNumber);
  std::vector<std::string> until;
  run->add_option("--until", until,
                  "A story milestone the world must reach before it ends (past its duration, up to the cap): "
                  "job=ID,step=N | event=ID,job=J,steps=N | event=ID,job=J,saves=N | event=ID,seconds=S | seconds=S")
      ->take_all();
  run->add_option("--story-cap-factor", ro.story_cap_factor,
                  "Never run longer than this many times the planned real duration waiting for the story")
      ->check(CLI::Range(1.0, 100.0));
  run->add_flag("--clean", ro.clean, "Remove the run directory at the end (only one this run created)");
  run->add_option(
         "--hold-agents-s", ro.hold_agents_s,
         "After the world ended, keep the agents up this many seconds (or until SIGINT/SIGTERM) with "
         "world.json complete (phase \"holding\"), for a checker to query")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--probe-cost-ns", ro.probe_cost_ns,
                  "The agents' cost per launch-probe hit instead of their calibration on this machine (a machine "
                  "whose traps cost that: its overhead budget duty-cycles the probes, or not)")
      ->check(CLI::PositiveNumber);
  bool keep = true;
  run->add_flag("--keep", keep, "Keep the run directory (the default; the lab reads it)");
  std::string faketime;
  run->add_option("--libfaketime,--faketime", faketime,
                  "libfaketimeMT.so.1, preloaded into the agent of a node with a clock skew (default: the "
                  "libfaketime package's, under /usr/lib/<triplet>/faketime/)");

  std::string desc;
  auto* launch = app.add_subcommand("launch", "(internal) a launcher: starts one node's ranks of a job");
  launch->add_option("--desc", desc, "Launch description")->required();
  launch->group("");

  double duty = 0.1, pmin = 20, pmax = 200;
  uint64_t burn_seed = 0;
  auto* burn = app.add_subcommand("burn", "(internal) a CPU burner with a duty cycle");
  burn->add_option("--duty", duty);
  burn->add_option("--period-min-ms", pmin);
  burn->add_option("--period-max-ms", pmax);
  burn->add_option("--seed", burn_seed);
  burn->group("");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  if (launch->parsed()) return ithbat::sim::runner::RunLauncherMode(desc);
  if (burn->parsed()) return ithbat::sim::runner::RunBurnMode(duty, pmin, pmax, burn_seed);

  for (const auto& u : until) {
    auto m = ithbat::sim::runner::ParseMilestone(u);
    if (!m) {
      fmt::print(stderr, "{}\n", m.error().message);
      return 2;
    }
    ro.milestones.push_back(std::move(*m));
  }
  ro.scenario_file = file;
  if (*seed_opt) ro.seed = seed;
  ro.root = root;
  ro.agents = !no_agents;
  ro.faketime = faketime;
  if (ro.clean && keep && run->count("--keep") > 0) {
    fmt::print(stderr, "--keep and --clean contradict each other\n");
    return 2;
  }
  ro.self_exe = SelfExe();
  // The rank program and the fakes sit next to this binary in the build (build/sim/); the
  // compiled-in build path is the fallback when the binary was copied elsewhere.
  ro.sim_dir = ro.self_exe.parent_path();
  if (!fs::exists(ro.sim_dir / "lib") && std::string(ITHBAT_SIM_DEFAULT_SIM_DIR) != "")
    ro.sim_dir = ITHBAT_SIM_DEFAULT_SIM_DIR;
  ro.ithbat = ithbat_path.empty() ? fs::path(ITHBAT_SIM_DEFAULT_ITHBAT) : fs::path(ithbat_path);
  if (ro.ithbat.empty()) ro.ithbat = ro.sim_dir.parent_path() / "ithbat";

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return ithbat::sim::runner::RunWorld(ro);
}
