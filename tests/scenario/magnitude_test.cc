// Fault magnitude (src/scenario/magnitude.h): 1 leaves the file as written, 0 removes every
// graded fault, values in between interpolate, discrete faults never change.
#include "scenario/magnitude.h"

#include <cmath>

#include <gtest/gtest.h>

namespace ithbat::scenario {
namespace {

ResolvedScenario World() {
  ResolvedScenario s;
  NodeT<Plain> n;
  n.name = "n1";
  n.gpus.model = GpuModel::kH100Sxm;
  s.nodes.push_back(n);
  MountT<Plain> mount;
  mount.name = "projects";
  mount.fsync_ms = 5;
  s.mounts.push_back(mount);
  EventT<Plain> e;
  e.kind = EventKind::kThermalThrottle;
  e.node = "n1";
  e.clock_factor = 0.6;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kPowerCap;
  e.node = "n1";
  e.power_limit_w = 400;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kStorageSlowdown;
  e.mount = "projects";
  e.bandwidth_factor = 0.2;
  e.fsync_ms = 2005;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kIbLinkDegrade;
  e.bandwidth_factor = 0.5;
  e.symbol_errors_per_s = 10;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kHostCpuContention;
  e.cpu_share = 0.8;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kEccUncorrectable;
  e.count = 3;
  s.timeline.push_back(e);
  e = {};
  e.kind = EventKind::kEccCorrected;
  e.count = 10;
  s.timeline.push_back(e);
  return s;
}

TEST(FaultMagnitude, OneIsTheFileAsWritten) {
  auto s = World();
  ASSERT_TRUE(ScaleFaultMagnitude(s, 1.0).has_value());
  EXPECT_DOUBLE_EQ(s.timeline[0].clock_factor, 0.6);
  EXPECT_DOUBLE_EQ(s.timeline[1].power_limit_w, 400);
  EXPECT_DOUBLE_EQ(s.timeline[2].fsync_ms, 2005);
  EXPECT_EQ(s.timeline[6].count, 10);
}

TEST(FaultMagnitude, HalfInterpolatesTowardNoFault) {
  auto s = World();
  ASSERT_TRUE(ScaleFaultMagnitude(s, 0.5).has_value());
  EXPECT_DOUBLE_EQ(s.timeline[0].clock_factor, 0.8);
  EXPECT_DOUBLE_EQ(s.timeline[1].power_limit_w, 700 - 150);  // H100 SXM: 700 W
  EXPECT_DOUBLE_EQ(s.timeline[2].bandwidth_factor, 0.6);
  EXPECT_DOUBLE_EQ(s.timeline[2].fsync_ms, 5 + 1000);  // from the mount's healthy 5 ms
  EXPECT_DOUBLE_EQ(s.timeline[3].bandwidth_factor, 0.75);
  EXPECT_DOUBLE_EQ(s.timeline[3].symbol_errors_per_s, 5);
  EXPECT_DOUBLE_EQ(s.timeline[4].cpu_share, 0.4);
  EXPECT_EQ(s.timeline[5].count, 3);  // discrete: unchanged
  EXPECT_EQ(s.timeline[6].count, 5);
}

TEST(FaultMagnitude, ZeroRemovesGradedFaultsAndAboveOneIsClamped) {
  auto s = World();
  ASSERT_TRUE(ScaleFaultMagnitude(s, 0.0).has_value());
  EXPECT_DOUBLE_EQ(s.timeline[0].clock_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.timeline[1].power_limit_w, 700);
  EXPECT_DOUBLE_EQ(s.timeline[2].bandwidth_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.timeline[2].fsync_ms, 5);
  EXPECT_DOUBLE_EQ(s.timeline[4].cpu_share, 0.0);
  auto worse = World();
  ASSERT_TRUE(ScaleFaultMagnitude(worse, 4.0).has_value());
  EXPECT_DOUBLE_EQ(worse.timeline[0].clock_factor, 0.01);  // never 0
  EXPECT_GE(worse.timeline[1].power_limit_w, ModelSpec(GpuModel::kH100Sxm).min_power_limit_w);
  EXPECT_DOUBLE_EQ(worse.timeline[4].cpu_share, 1.0);
}

TEST(FaultMagnitude, RefusesOutOfRange) {
  auto s = World();
  EXPECT_FALSE(ScaleFaultMagnitude(s, -0.1).has_value());
  EXPECT_FALSE(ScaleFaultMagnitude(s, 4.5).has_value());
  EXPECT_FALSE(ScaleFaultMagnitude(s, std::nan("")).has_value());
}

}  // namespace
}  // namespace ithbat::scenario
