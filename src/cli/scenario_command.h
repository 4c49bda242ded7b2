#pragma once
// `ithbat scenario check FILE… [--resolve] [--seed N]`: validates scenario files (format v1,
// docs/scenarios.md) and their expect blocks, printing OK or every problem as
// FILE:LINE:COL: PATH: MESSAGE. With --resolve, also one JSON line per valid file: the values
// one run draws (seed from --seed, else the file's seed, else a fresh one, printed).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace ithbat::cli {

struct ScenarioCheckOptions {
  std::vector<std::string> files;
  bool resolve = false;
  std::optional<uint64_t> seed;
};

// Returns 0 when every file is valid, 1 when any is not (all files are still checked).
int RunScenarioCheck(const ScenarioCheckOptions& options, std::FILE* out, std::FILE* err);

}  // namespace ithbat::cli
