#include "cli/scenario_command.h"

#include <fstream>

#include <fmt/core.h>

#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::cli {

int RunScenarioCheck(const ScenarioCheckOptions& options, std::FILE* out, std::FILE* err) {
  int rc = 0;
  for (const auto& file : options.files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      fmt::print(err, "{}: cannot open\n", file);
      rc = 1;
      continue;
    }
    std::string text(scenario::kMaxFileBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    scenario::ParsedScenario parsed = scenario::ParseScenarioText(text);
    std::vector<scenario::Issue> issues = parsed.issues;
    if (parsed.scenario) {
      // A file without an expect block is a valid scenario (`ithbat demo FILE`); a block
      // that is there must be right.
      auto x = scenario::ParseExpectationsText(text, &*parsed.scenario);
      if (x.present) issues.insert(issues.end(), x.issues.begin(), x.issues.end());
    }
    if (!issues.empty()) {
      for (const auto& i : issues) fmt::print(err, "{}\n", i.ToString(file));
      fmt::print(err, "{}: {} problem(s)\n", file, issues.size());
      rc = 1;
      continue;
    }
    fmt::print(out, "{}: OK\n", file);
    if (options.resolve) {
      uint64_t seed = options.seed ? *options.seed : parsed.scenario->seed ? *parsed.scenario->seed : scenario::DrawSeed();
      auto r = scenario::Resolve(*parsed.scenario, seed);
      if (!r) {
        fmt::print(err, "{}: seed {}: {}\n", file, seed, r.error().message);
        rc = 1;
        continue;
      }
      fmt::print(out, "{}\n", scenario::ResolvedToJson(*r));
    }
  }
  std::fflush(out);
  return rc;
}

}  // namespace ithbat::cli
