#pragma once
// `ithbat demo [SCENARIO…]`: the scenario lab on this machine, the README's main command on a
// machine without GPUs. The simulator and the lab are test-side programs (sim/): nothing in
// src/ links them, so the demo runs the lab binary (`ithbat-lab`) as a child and passes its
// output through. SCENARIO is a file path or the name of a file in the scenarios directory.
// The demo judges the engine: a world passes only when its story happened and the diagnoses
// match (--require-diagnosis), and a world this machine could not tell the story of is run once
// more, slower (--adapt; sim/lab/lab.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace ithbat::cli {

struct ScenarioDemoOptions {
  std::vector<std::string> scenarios;  // empty: the lab's default (the four case files + healthy control)
  bool quick = false;
  bool json = false;
  std::optional<uint64_t> seed;
  double slowdown = 1.0;  // every world this many times slower than its compression
};

// Where the lab binary is: $ITHBAT_LAB, else next to this executable (`sim/ithbat-lab` in a build
// tree, `ithbat-lab` in an install), else the build tree this binary was compiled for.
Result<std::string> FindLabBinary();
// A scenario argument as a path: an existing file as is; a bare name (no '/') as
// <scenarios dir>/<name>.yaml, the scenarios directory being $ITHBAT_SCENARIOS, else the source
// tree's scenarios/.
Result<std::string> ResolveScenarioArgument(const std::string& arg);
// The lab's argv for these options (argv[0] = lab).
std::vector<std::string> LabArguments(const std::string& lab, const ScenarioDemoOptions& options,
                                      const std::vector<std::string>& files);

// Runs the lab; returns its exit code (1 when it cannot be found or started).
int RunScenarioDemo(const ScenarioDemoOptions& options);

}  // namespace ithbat::cli
