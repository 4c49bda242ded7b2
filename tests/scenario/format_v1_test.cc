// Format v1 is frozen (docs/scenarios.md, "Versioning"): fields may be added, never removed or
// renamed. Every field path the shipped scenario files resolve to (ResolvedToJson: every field
// of every block a file writes, defaults included; list indexes written as []) is recorded in
// format_v1_fields.txt beside this test. A path that disappears is a breaking change (version
// 2); a new path must be added to the list on purpose, with docs/scenarios.md.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "scenario/scenario.h"
#include "testutil/testutil.h"

namespace ithbat::scenario {
namespace {

void Paths(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) Paths(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_array()) {
    if (j.empty()) out.insert(prefix + "[]");
    for (const auto& e : j) Paths(e, prefix + "[]", out);
  } else {
    out.insert(prefix);
  }
}

// A path and the paths above it (a list that is empty in every file still names its key).
std::set<std::string> ShippedPaths() {
  std::set<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(testing::SourceDir() / "scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    auto parsed = ParseScenarioFile(entry.path().string());
    EXPECT_TRUE(parsed.scenario.has_value()) << entry.path();
    if (!parsed.scenario) continue;
    for (const auto& variant : {*parsed.scenario, QuickVariant(*parsed.scenario)}) {
      auto resolved = Resolve(variant, 1);
      EXPECT_TRUE(resolved.has_value()) << entry.path();
      if (!resolved) continue;
      Paths(nlohmann::json::parse(ResolvedToJson(*resolved)), "", paths);
    }
  }
  return paths;
}

TEST(FormatV1, NoFieldOfTheFrozenFormatDisappears) {
  const auto golden_file = testing::SourceDir() / "tests/scenario/format_v1_fields.txt";
  std::ifstream in(golden_file);
  ASSERT_TRUE(in.good()) << golden_file;
  std::set<std::string> golden;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') golden.insert(line);
  }
  ASSERT_GT(golden.size(), 100u);
  const auto shipped = ShippedPaths();
  for (const auto& p : golden) {
    // The empty-list form and the element form of a list are the same field.
    const bool found = shipped.count(p) > 0 ||
                       std::any_of(shipped.begin(), shipped.end(), [&](const std::string& s) {
                         return s.rfind(p.substr(0, p.size() - 2), 0) == 0 && p.ends_with("[]");
                       });
    EXPECT_TRUE(found) << "field " << p << " of format v1 is gone: a removal or rename is version 2";
  }
  for (const auto& p : shipped) {
    const bool listed = golden.count(p) > 0 ||
                        std::any_of(golden.begin(), golden.end(), [&](const std::string& g) {
                          // A list empty everywhere names only itself; an empty list in one file
                          // is the same field as its elements in another.
                          return (g.ends_with("[]") && p.rfind(g, 0) == 0) ||
                                 (p.ends_with("[]") && g.rfind(p + ".", 0) == 0);
                        });
    EXPECT_TRUE(listed) << "new field " << p
                        << ": v1 may only grow on purpose — add it to tests/scenario/format_v1_fields.txt "
                           "and document it in docs/scenarios.md";
  }
}

}  // namespace
}  // namespace ithbat::scenario
