// `ithbat demo SCENARIO…`: scenario arguments become files, and the lab gets the options.
#include "cli/scenario_demo.h"

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

TEST(ScenarioDemo, NamesResolveInTheScenariosDirectory) {
  ithbat::testing::TempDir dir;
  const std::string file = (dir.path() / "mine.yaml").string();
  std::ofstream(file) << "version: 1\n";
  ASSERT_EQ(setenv("ITHBAT_SCENARIOS", dir.path().c_str(), 1), 0);
  auto by_name = ResolveScenarioArgument("mine");
  ASSERT_TRUE(by_name.has_value()) << by_name.error().message;
  EXPECT_EQ(*by_name, file);
  auto by_file_name = ResolveScenarioArgument("mine.yaml");
  ASSERT_TRUE(by_file_name.has_value()) << by_file_name.error().message;
  EXPECT_EQ(*by_file_name, file);
  auto by_path = ResolveScenarioArgument(file);  // a path is taken as it is
  ASSERT_TRUE(by_path.has_value()) << by_path.error().message;
  EXPECT_EQ(*by_path, file);
  EXPECT_FALSE(ResolveScenarioArgument("other").has_value());
  EXPECT_FALSE(ResolveScenarioArgument((dir.path() / "missing.yaml").string()).has_value());
  unsetenv("ITHBAT_SCENARIOS");
  // Without the variable: the source tree's scenarios/, which holds the case files.
  auto case01 = ResolveScenarioArgument("case01-roaming-straggler");
  ASSERT_TRUE(case01.has_value()) << case01.error().message;
  EXPECT_TRUE(case01->ends_with("scenarios/case01-roaming-straggler.yaml"));
}

TEST(ScenarioDemo, LabArgumentsCarryTheOptions) {
  ScenarioDemoOptions o;
  o.quick = true;
  o.json = true;
  o.seed = 42;
  o.slowdown = 2.5;
  // The demo judges the engine (diagnoses required) and reruns a world the machine could not keep
  // the pace of, slower.
  EXPECT_EQ(LabArguments("/x/ithbat-lab", o, {"a.yaml", "b.yaml"}),
            (std::vector<std::string>{"/x/ithbat-lab", "--require-diagnosis", "--adapt", "--quick", "--slowdown", "2.5",
                                      "--json", "--seed", "42", "a.yaml", "b.yaml"}));
  EXPECT_EQ(LabArguments("/x/ithbat-lab", ScenarioDemoOptions{}, {}),
            (std::vector<std::string>{"/x/ithbat-lab", "--require-diagnosis", "--adapt"}));
}

TEST(ScenarioDemo, AMissingLabIsAClearError) {
  ASSERT_EQ(setenv("ITHBAT_LAB", "/nonexistent/ithbat-lab", 1), 0);
  auto lab = FindLabBinary();
  unsetenv("ITHBAT_LAB");
  ASSERT_FALSE(lab.has_value());
  EXPECT_NE(lab.error().message.find("ITHBAT_LAB"), std::string::npos);
}

}  // namespace
}  // namespace ithbat::cli
