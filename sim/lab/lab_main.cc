// ithbat-lab: runs scenario files through the fleet simulator with real agents and checks each
// against its `expect` block (sim/lab/README.md). Exit 0 when every scenario passed or was
// skipped for want of a check (printed as SKIP), 1 when one failed or could not run, 2 usage.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fmt/format.h>

#include "lab/lab.h"
#include "scenario/scenario.h"

int main(int argc, char** argv) {
  ithbat::sim::lab::LabOptions options;
  CLI::App app{"Run scenario files through the simulator and check the agents saw what they must"};
  app.add_option("files", options.files, "Scenario files (default: the four case files and the healthy control)");
  app.add_flag("--quick", options.quick, "Run each file's smaller CI configuration");
  uint64_t seed = 0;
  auto* seed_opt = app.add_option("--seed", seed, "Seed for every file (default: the file's, else a fresh one)");
  app.add_option("--root", options.root, "Directory for the run directories (default: a new one under /tmp)");
  options.sim_binary = ITHBAT_SIM_BINARY;
  app.add_option("--sim", options.sim_binary, "The simulator binary")->capture_default_str();
  app.add_option("--ithbat", options.ithbat_binary, "The agent binary ithbat-sim starts (default: its own)");
  app.add_flag("--json", options.json,
               "One JSON line per scenario, then one per diagnosis in schema v1 (docs/diagnoses.md)");
  app.add_flag("--require-diagnosis", options.require_diagnosis,
               "A scenario passes only when the diagnosis engine's verdicts match its expect block too");
  app.add_option("--probe-cost-ns", options.probe_cost_ns,
                 "The agents' cost per launch-probe hit instead of their calibration: reproduce a machine whose "
                 "traps cost that (e.g. 1000: cheap traps, probes exact; the lab's 2-core VMs measure ~16000)")
      ->check(CLI::PositiveNumber);
  app.add_option("--slowdown", options.slowdown,
                 "Run every world this many times slower than its time compression asks (a machine too slow for "
                 "them)")
      ->check(CLI::Range(1.0, 100.0));
  app.add_flag("--adapt", options.adapt,
               "Run a world this machine could not tell the story of (INVALID) once more, slower by what its pace "
               "says");
  app.add_flag("--keep", options.keep, "Keep the run directories of scenarios that passed (failed ones are kept)");
  app.add_option("--world", options.world_dir, "Check this finished run directory of FILE instead of running it");
  app.add_option("--magnitude", options.magnitude,
                 "Fault magnitude for every run: 0 none, 1 as written (docs/scenarios.md, \"Fault magnitude\")")
      ->check(CLI::Range(0.0, 4.0));
  std::string sweep;
  app.add_option("--sweep", sweep,
                 "The sweep: run every file at each of these magnitudes (e.g. --sweep 0.25,0.5,1) and print the "
                 "confusion matrix of expected vs shown causes");
  size_t pick = 0;
  app.add_option("--pick", pick,
                 "Run only N of the files, drawn at random (CI rotates through the look-alikes this way; the "
                 "draw's seed is printed)");
  uint64_t pick_seed = 0;
  auto* pick_seed_opt = app.add_option("--pick-seed", pick_seed, "Seed of the --pick draw (default: a fresh one)");
  std::string dump;
  app.add_option("--series", dump, "With --world: print the stored series matching this selector and exit");
  bool samples = false;
  app.add_flag("--samples", samples, "With --series: print every sample (unix seconds, value), not just the count");
  bool breakdown = false;
  app.add_flag("--breakdown", breakdown, "With --world: print each job's per-rank step breakdown and exit");
  CLI11_PARSE(app, argc, argv);
  if (seed_opt->count() > 0) options.seed = seed;
  // "0.25,0.5,1": split by hand (a multi-value option would swallow the files after it).
  for (size_t at = 0; !sweep.empty() && at <= sweep.size();) {
    const size_t comma = std::min(sweep.find(',', at), sweep.size());
    const std::string item = sweep.substr(at, comma - at);
    char* end = nullptr;
    const double m = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(m >= 0 && m <= 4)) {
      fmt::print(stderr, "ithbat-lab: --sweep takes magnitudes in [0, 4] separated by commas, not \"{}\"\n", item);
      return 2;
    }
    options.sweep.push_back(m);
    at = comma + 1;
  }
  if (!dump.empty()) {
    if (options.world_dir.empty()) {
      fmt::print(stderr, "ithbat-lab: --series needs --world DIR\n");
      return 2;
    }
    return ithbat::sim::lab::DumpSeries(options.world_dir, dump, stdout, samples);
  }
  if (breakdown) {
    if (options.world_dir.empty()) {
      fmt::print(stderr, "ithbat-lab: --breakdown needs --world DIR\n");
      return 2;
    }
    return ithbat::sim::lab::PrintBreakdowns(options.world_dir, stdout);
  }
  if (!options.world_dir.empty() && options.files.size() != 1) {
    fmt::print(stderr, "ithbat-lab: --world checks one run: give exactly the one scenario file it ran\n");
    return 2;
  }
  if (options.files.empty()) {
    for (const char* f : {"case01-roaming-straggler.yaml", "case02-checkpoint-stall.yaml",
                          "case03-inference-half-empty.yaml", "case04-fp8-divergence.yaml", "healthy-training.yaml"}) {
      options.files.push_back(fmt::format("{}/scenarios/{}", ITHBAT_SOURCE_DIR, f));
    }
  }
  if (pick > 0 && pick < options.files.size()) {
    // A partial Fisher-Yates shuffle from the printed seed: the same seed picks the same files.
    if (pick_seed_opt->count() == 0) pick_seed = ithbat::scenario::DrawSeed();
    std::mt19937_64 rng(pick_seed);
    for (size_t i = 0; i < pick; ++i) {
      std::uniform_int_distribution<size_t> d(i, options.files.size() - 1);
      std::swap(options.files[i], options.files[d(rng)]);
    }
    options.files.resize(pick);
    std::sort(options.files.begin(), options.files.end());
    fmt::print("picked {} file(s) with --pick-seed {}: {}\n", pick, pick_seed, fmt::join(options.files, " "));
  }
  if (!options.sweep.empty() && !options.world_dir.empty()) {
    fmt::print(stderr, "ithbat-lab: --sweep runs worlds; it does not take --world\n");
    return 2;
  }
  auto results = ithbat::sim::lab::RunLab(options, stdout);
  if (!options.sweep.empty()) {
    size_t errors = 0;
    for (const auto& r : results) errors += r.error.empty() ? 0 : 1;
    fmt::print("{} sweep run(s), {} could not run\n", results.size(), errors);
    return errors > 0 ? 1 : 0;
  }
  if (!options.json) {
    fmt::print("{}", ithbat::sim::lab::FormatDiagnosisTable(results));
    fmt::print("{}", ithbat::sim::lab::FormatSummary(results));
  }
  using ithbat::sim::lab::Outcome;
  std::map<Outcome, int> count;
  for (const auto& r : results) ++count[r.outcome()];
  fmt::print("{} scenario(s): {} PASS, {} MISSED, {} WRONG, {} INVALID{}{}\n", results.size(), count[Outcome::kPass],
             count[Outcome::kMissed], count[Outcome::kWrong], count[Outcome::kInvalid],
             count[Outcome::kSkip] > 0 ? fmt::format(", {} SKIP", count[Outcome::kSkip]) : "",
             count[Outcome::kError] > 0 ? fmt::format(", {} ERROR", count[Outcome::kError]) : "");
  const int failed = static_cast<int>(results.size()) - count[Outcome::kPass] - count[Outcome::kSkip];
  return failed > 0 ? 1 : 0;
}
