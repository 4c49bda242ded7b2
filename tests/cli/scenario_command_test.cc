// `ithbat scenario check`: OK or every problem with FILE:LINE:COL, exit 1; --resolve prints
// the drawn values as JSON (same seed, same line).
#include "cli/scenario_command.h"

#include <cstdio>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using ::testing::HasSubstr;

struct Output {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

Output RunCheck(const ScenarioCheckOptions& options) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  Output o;
  o.rc = RunScenarioCheck(options, out, err);
  o.out = ReadAll(out);
  o.err = ReadAll(err);
  std::fclose(out);
  std::fclose(err);
  return o;
}

TEST(ScenarioCheckCommand, ShippedFilesAreOk) {
  std::string file = (testing::SourceDir() / "scenarios" / "case01-roaming-straggler.yaml").string();
  Output o = RunCheck({{file}, false, std::nullopt});
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, file + ": OK\n");
}

TEST(ScenarioCheckCommand, ReportsEveryProblemWithPlace) {
  testing::TempDir dir;
  dir.WriteFile("bad.yaml", "version: 1\nname: bad\nduration_s: -1\nnodez: []\n");
  std::string file = (dir.path() / "bad.yaml").string();
  Output o = RunCheck({{file}, false, std::nullopt});
  EXPECT_EQ(o.rc, 1);
  EXPECT_THAT(o.err, HasSubstr(file + ":3:13: duration_s: -1 is out of range"));
  EXPECT_THAT(o.err, HasSubstr(file + ":4:1: nodez: unknown key 'nodez' (did you mean nodes?)"));
  EXPECT_THAT(o.err, HasSubstr("2 problem(s)"));
}

// Keys echoed from a hostile file cannot drive the terminal.
TEST(ScenarioCheckCommand, ProblemsAreEscaped) {
  testing::TempDir dir;
  dir.WriteFile("esc.yaml", "version: 1\nname: esc\nduration_s: 5\n\"x\\e]0;owned\\a\": 1\n");
  std::string file = (dir.path() / "esc.yaml").string();
  Output o = RunCheck({{file}, false, std::nullopt});
  EXPECT_EQ(o.rc, 1);
  EXPECT_THAT(o.err, HasSubstr("x\\x1b]0;owned\\x07"));
  EXPECT_EQ(o.err.find('\x1b'), std::string::npos);
  EXPECT_EQ(o.err.find('\x07'), std::string::npos);
}

TEST(ScenarioCheckCommand, ResolveIsDeterministicPerSeed) {
  testing::TempDir dir;
  dir.WriteFile("s.yaml",
                "version: 1\nname: s\nduration_s: 60\n"
                "storage:\n  mounts: [{name: m, path: /m, write_gbps: [1.5, 2.5]}]\n"
                "expect: [{verdict: none}]\n");
  std::string file = (dir.path() / "s.yaml").string();
  Output a = RunCheck({{file}, true, 5});
  Output b = RunCheck({{file}, true, 5});
  Output c = RunCheck({{file}, true, 6});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  auto json = nlohmann::json::parse(a.out.substr(a.out.find('\n') + 1));
  EXPECT_EQ(json["seed"], 5);
  EXPECT_FALSE(json.contains("expect"));
  double w = json["storage"]["mounts"][0]["write_gbps"];
  EXPECT_GE(w, 1.5);
  EXPECT_LE(w, 2.5);
}

}  // namespace
}  // namespace ithbat::cli
