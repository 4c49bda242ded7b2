// The sweep's report (sim/lab/sweep.h): the confusion matrix counts every (expected, shown)
// pair per run, per magnitude and over all, and each run's line names what it missed and what
// it showed beyond the expected causes.
#include "lab/sweep.h"

#include "lab/signal_checks.h"

#include <gtest/gtest.h>

namespace ithbat::sim::lab {
namespace {

SweepRun MakeRun(std::string name, double m, std::set<std::string> expected, std::set<std::string> shown) {
  SweepRun r;
  r.scenario = std::move(name);
  r.seed = 1;
  r.magnitude = m;
  r.ran = true;
  r.expected = std::move(expected);
  r.shown = std::move(shown);
  return r;
}

TEST(Sweep, MatrixCountsPairsPerMagnitudeAndOverAll) {
  std::vector<SweepRun> runs = {
      MakeRun("straggler", 1, {"thermal_power"}, {"thermal_power"}),
      MakeRun("straggler", 0.25, {"thermal_power"}, {"none"}),
      MakeRun("roaming", 1, {"data_imbalance"}, {"data_imbalance", "host_bottleneck"}),
      MakeRun("roaming", 0.25, {"data_imbalance"}, {"data_imbalance"}),
      MakeRun("control", 1, {"none"}, {"none"}),
  };
  const std::string out = FormatSweep(runs);
  // Columns in the checkable order, "none" last.
  EXPECT_NE(out.find("columns: 1=data_imbalance, 2=host_bottleneck, 3=thermal_power, 4=none"), std::string::npos)
      << out;
  EXPECT_NE(out.find("magnitude 0.25 — 2 run(s), 1 with exactly the expected causes shown"), std::string::npos) << out;
  EXPECT_NE(out.find("magnitude 1 — 3 run(s), 2 with exactly the expected causes shown"), std::string::npos) << out;
  EXPECT_NE(out.find("all magnitudes — 5 run(s), 3 with exactly the expected causes shown"), std::string::npos) << out;
  // Over all: data_imbalance row = 2 × data_imbalance, 1 × host_bottleneck; thermal 1 × itself, 1 × none.
  EXPECT_NE(out.find("          data_imbalance |   2   1   .   .\n"), std::string::npos) << out;
  EXPECT_NE(out.find("           thermal_power |   .   .   1   1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("                    none |   .   .   .   1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("roaming m=1 seed 1: expected {data_imbalance} shown {data_imbalance,host_bottleneck} extra "
                     "{host_bottleneck}"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("straggler m=0.25 seed 1: expected {thermal_power} shown {none} missed {thermal_power} extra {none}"),
            std::string::npos)
      << out;
}

TEST(Sweep, ARunThatCouldNotRunIsListedNotCounted) {
  std::vector<SweepRun> runs = {MakeRun("a", 1, {"storage"}, {"storage"})};
  SweepRun bad;
  bad.scenario = "b";
  bad.magnitude = 1;
  bad.error = "ithbat-sim exited with 3";
  runs.push_back(bad);
  const std::string out = FormatSweep(runs);
  EXPECT_NE(out.find("all magnitudes — 1 run(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("b m=1 seed 0: ERROR ithbat-sim exited with 3"), std::string::npos) << out;
}

TEST(Sweep, ControlsWithNoJobShowNothing) {
  World w;
  w.started = 1;
  w.ended = 2;
  auto evidence = Evidence::FromStores({});
  scenario::ResolvedScenario resolved;
  scenario::Expectations expect;
  expect.expects_nothing = true;
  EXPECT_TRUE(ShownCauses(w, evidence, resolved, expect).empty());
}

TEST(Sweep, EveryCheckableCauseHasACheck) {
  // A cause listed as checkable must not SKIP for want of a check.
  World w;
  auto evidence = Evidence::FromStores({});
  scenario::ResolvedScenario resolved;
  for (auto c : CheckableCauses()) {
    scenario::ExpectedFinding f;
    f.cause = c;
    f.job = "nobody";
    const auto check = CheckFinding(w, evidence, resolved, f);
    EXPECT_FALSE(check.skipped && check.skip_reason.find("no signal check") != std::string::npos)
        << scenario::CauseName(c);
  }
}

}  // namespace
}  // namespace ithbat::sim::lab
