// ithbat-lab: runs scenario files through the fleet simulator with real agents and checks each
// against its `expect` block (sim/lab/README.md). Exit 0 when every scenario passed or was
// skipped for want of a check (printed as SKIP), 1 when one failed or could not run, 2 usage.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "lab/lab.h"

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
  app.add_flag("--json", options.json, "One JSON line per scenario");
  app.add_flag("--keep", options.keep, "Keep the run directories of scenarios that passed (failed ones are kept)");
  app.add_option("--world", options.world_dir, "Check this finished run directory of FILE instead of running it");
  std::string dump;
  app.add_option("--series", dump, "With --world: print the stored series matching this selector and exit");
  CLI11_PARSE(app, argc, argv);
  if (seed_opt->count() > 0) options.seed = seed;
  if (!dump.empty()) {
    if (options.world_dir.empty()) {
      fmt::print(stderr, "ithbat-lab: --series needs --world DIR\n");
      return 2;
    }
    return ithbat::sim::lab::DumpSeries(options.world_dir, dump, stdout);
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
  auto results = ithbat::sim::lab::RunLab(options, stdout);
  int failed = 0, skipped = 0;
  for (const auto& r : results) {
    failed += r.ok() || r.skipped() ? 0 : 1;
    skipped += r.skipped() ? 1 : 0;
  }
  fmt::print("{} scenario(s): {} passed, {} failed, {} skipped\n", results.size(),
             results.size() - static_cast<size_t>(failed + skipped), failed, skipped);
  return failed > 0 ? 1 : 0;
}
