// The watchdog reader: NCCL watchdog timeouts of a job read together name the ranks the material
// points at (desync, the rank behind, the silent rank). That the finding alone is an inconclusive
// diagnosis (one collector) is checked on real logs by tests/cli/replay_command_test.cc.
#include "detect/hang/watchdog.h"

#include <set>

#include <gtest/gtest.h>

#include "detect/detector.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

struct Timeout {
  int32_t rank;
  int64_t seq;
  std::string op;
};

FleetView Build(const std::vector<Timeout>& timeouts, int32_t world_size, bool extra_copy = false) {
  SyntheticFleet f;
  for (size_t i = 0; i < timeouts.size(); ++i) {
    const auto& t = timeouts[i];
    for (int copy = 0; copy < (extra_copy ? 2 : 1); ++copy) {
      Event e;
      e.time = kT0 + 700 * kS + static_cast<TimeNs>(i + copy) * kS;
      e.kind = EventKind::kError;
      e.source = "joblog";
      e.name = "nccl_timeout";
      e.identity.job = "9";
      e.identity.rank = t.rank;
      e.identity.world_size = world_size;
      e.identity.pid = 100 + t.rank;
      e.attrs = {{"seq", std::to_string(t.seq + copy)},
                 {"op_type", t.op},
                 {"timeout_ms", "600000"},
                 {"ran_ms", "600061"}};
      f.AddEvent("n1", e);
    }
  }
  return f.TakeView();
}

// One error event of job 9's rank 0 at kT0.
FleetView OneError(const std::string& name, std::vector<std::pair<std::string, std::string>> attrs) {
  SyntheticFleet f;
  Event e;
  e.time = kT0;
  e.kind = EventKind::kError;
  e.name = name;
  e.identity.job = "9";
  e.identity.rank = 0;
  e.identity.pid = 1;
  e.attrs = std::move(attrs);
  f.AddEvent("n1", e);
  return f.TakeView();
}

std::vector<Finding> Detect(const FleetView& v) {
  std::vector<Finding> out;
  for (auto& f : RunDetectors(v, kMinTime, kT0 + 800 * kS))
    if (f.detector == "watchdog") out.push_back(std::move(f));
  return out;
}

std::set<int32_t> Ranks(const Finding& f) {
  std::set<int32_t> r;
  for (const auto& x : f.subjects.ranks) r.insert(x.rank);
  return r;
}

TEST(Watchdog, OneCollectiveNamesTheRanksThatPrintedNoTimeout) {
  auto f = Detect(Build({{0, 7753, "ALLREDUCE"}, {1, 7753, "ALLREDUCE"}, {3, 7753, "ALLREDUCE"}}, 4));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kHang);
  EXPECT_EQ(f[0].subjects.job, "9");
  EXPECT_EQ(Ranks(f[0]), (std::set<int32_t>{2}));
  EXPECT_NE(f[0].summary.find("rank 2 of 4 printed no timeout"), std::string::npos) << f[0].summary;
  ASSERT_EQ(f[0].evidence.size(), 3u);
  EXPECT_EQ(f[0].evidence[0].collector, "joblog");
  EXPECT_DOUBLE_EQ(f[0].evidence[0].observed, 600.061);
  EXPECT_DOUBLE_EQ(f[0].evidence[0].expected, 600);
  // The collective began ran_ms before the line.
  EXPECT_EQ(f[0].window.start, kT0 + 700 * kS - 600'061'000'000LL);
}

TEST(Watchdog, UnknownWorldSizeNamesNobody) {
  auto f = Detect(Build({{0, 7753, "_REDUCE_SCATTER_BASE"}, {4, 7753, "_REDUCE_SCATTER_BASE"}}, -1));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].subjects.ranks.empty());
  EXPECT_NE(f[0].summary.find("world size is unknown"), std::string::npos) << f[0].summary;
}

TEST(Watchdog, SameCollectiveDifferentOperationsIsADesync) {
  auto f = Detect(Build({{0, 12, "ALLREDUCE"}, {1, 12, "ALLREDUCE"}, {3, 12, "BROADCAST"}}, 4));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("desynchronised"), std::string::npos) << f[0].summary;
  EXPECT_NE(f[0].summary.find("rank 3 in BROADCAST"), std::string::npos) << f[0].summary;
  EXPECT_EQ(Ranks(f[0]), (std::set<int32_t>{0, 1, 3}));
}

TEST(Watchdog, AnOperationCutOffTheLineIsNoDesync) {
  // Rank 1's line was cut before its OpType: no evidence of another operation.
  auto f = Detect(Build({{0, 12, "ALLREDUCE"}, {1, 12, ""}, {3, 12, "ALLREDUCE"}}, 4));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].summary.find("desynchronised"), std::string::npos) << f[0].summary;
  EXPECT_EQ(Ranks(f[0]), (std::set<int32_t>{2}));
  // Two named operations still are, the unnamed one said as such.
  auto g = Detect(Build({{0, 12, "ALLREDUCE"}, {1, 12, ""}, {3, 12, "BROADCAST"}}, 4));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].summary.find("desynchronised"), std::string::npos) << g[0].summary;
  EXPECT_NE(g[0].summary.find("rank 1 in an unnamed operation"), std::string::npos) << g[0].summary;
}

TEST(Watchdog, DifferentCollectiveNumbersNameTheFurthestBehind) {
  // Without a world size, the ranks at the lowest number are the furthest behind the material shows.
  auto f = Detect(Build({{0, 96120, "ALLREDUCE"}, {1, 96117, "ALLREDUCE"}, {2, 96125, "ALLREDUCE"}}, -1));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(Ranks(f[0]), (std::set<int32_t>{1}));
  EXPECT_NE(f[0].summary.find("#96117 to #96125"), std::string::npos) << f[0].summary;
  // With one, the ranks that printed nothing.
  auto g = Detect(Build({{0, 96120, "ALLREDUCE"}, {1, 96117, "ALLREDUCE"}, {2, 96125, "ALLREDUCE"}}, 4));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(Ranks(g[0]), (std::set<int32_t>{3}));
}

TEST(Watchdog, ARanksLaterTimeoutsAreNotMoreReports) {
  // Each rank's second line names the next collective: only its first counts (no false "behind").
  auto f = Detect(Build({{0, 50, "ALLREDUCE"}, {1, 50, "ALLREDUCE"}}, 2, /*extra_copy=*/true));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].summary.find("every reporting rank waited in collective #50"), std::string::npos)
      << f[0].summary;
  EXPECT_TRUE(f[0].subjects.ranks.empty());
}

TEST(Watchdog, ManyRanksGiveBoundedEvidence) {
  std::vector<Timeout> t;
  for (int32_t r = 0; r < 100; ++r) t.push_back({r, 8, "ALLGATHER"});
  auto f = Detect(Build(t, 128));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].evidence.size(), kWatchdogMaxEvidence + 1);
  EXPECT_EQ(f[0].subjects.ranks.size(), 28u);
}

TEST(Watchdog, EveryRankInOneCollectivePointsBelowTheCalls) {
  auto f = Detect(Build({{0, 9, "ALLREDUCE"}, {1, 9, "ALLREDUCE"}}, 2));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].subjects.ranks.empty());
  EXPECT_NE(f[0].summary.find("every rank of the 2 printed a timeout"), std::string::npos) << f[0].summary;
  EXPECT_EQ(f[0].summary.find("unknown"), std::string::npos) << f[0].summary;
}

TEST(Watchdog, AnAbsurdWaitIsIgnoredNotOverflowed) {
  auto f = Detect(
      OneError("nccl_timeout", {{"seq", "3"}, {"op_type", "ALLREDUCE"}, {"ran_ms", "999999999999999999"}}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].window.start, kT0);
}

TEST(Watchdog, NoTimeoutNoFinding) { EXPECT_TRUE(Detect(OneError("nccl_error", {})).empty()); }

}  // namespace
}  // namespace ithbat::detect
