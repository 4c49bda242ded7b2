// The agent's node-local engine: one node's store, rounds that keep incident ids, an empty store
// that gives nothing, Current() read while rounds run.
#include "investigate/node_diagnoser.h"

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "investigate/diagnosis_json.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::investigate {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

constexpr int kTicks = 60;

constexpr TimeNs kEnd = kT0 + (kTicks - 1) * kS;

TEST(NodeDiagnoser, RotatingStragglerIsDataImbalanceAndKeepsItsId) {
  SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  NodeDiagnoser nd;
  EXPECT_TRUE(nd.Current().empty());
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd).has_value());
  auto first = nd.Current();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].cause, Cause::kDataImbalance);
  EXPECT_EQ(first[0].verdict, Verdict::kJob);
  EXPECT_EQ(first[0].subjects.job, "77");
  EXPECT_EQ(first[0].subjects.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(first[0].state, DiagnosisState::kOpen);
  EXPECT_TRUE(ValidateDiagnosisJson(ToJson(first[0])).has_value());

  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd + kS).has_value());
  auto second = nd.Current();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].id, first[0].id);
  EXPECT_NE(second[0].state, DiagnosisState::kResolved);

  const NodeDiagnoserStats st = nd.Stats();
  EXPECT_EQ(st.rounds, 2u);
  EXPECT_EQ(st.errors, 0u);
  EXPECT_GT(st.last_round_duration, 0);
  EXPECT_EQ(st.last_round_at, kEnd + kS);
}

TEST(NodeDiagnoser, TheNodeNameIsTheOneGiven) {
  SyntheticFleet f;
  f.RotatingStraggler("store-key", kTicks);
  NodeDiagnoser nd;
  ASSERT_TRUE(nd.Round(f.Node("store-key"), "gpu-node-7", kEnd).has_value());
  auto ds = nd.Current();
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].subjects.nodes, std::vector<std::string>{"gpu-node-7"});
}

TEST(NodeDiagnoser, AnEmptyStoreGivesNone) {
  SyntheticFleet f;
  NodeDiagnoser nd;
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd).has_value());
  EXPECT_TRUE(nd.Current().empty());
  EXPECT_EQ(nd.Stats().rounds, 1u);
}

TEST(NodeDiagnoser, OnlyTheLookbackIsRead) {
  // The straggler ended an hour before `now`: a 15-minute lookback no longer sees it.
  SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  NodeDiagnoser nd;
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd + 3600 * kS).has_value());
  EXPECT_TRUE(nd.Current().empty());
}

TEST(NodeDiagnoser, AResolvedIncidentIsReportedResolvedThenForgotten) {
  SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  NodeDiagnoserOptions o;
  o.lookback = 60 * kS;
  o.investigate.resolve_after = 120 * kS;
  NodeDiagnoser nd(o);
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd).has_value());
  ASSERT_EQ(nd.Current().size(), 1u);
  const std::string id = nd.Current()[0].id;
  // Past the lookback nothing supports it; the investigator resolves it after resolve_after.
  bool resolved = false;
  for (TimeNs t = kEnd + 120 * kS; t <= kEnd + 600 * kS && !resolved; t += 30 * kS) {
    ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", t).has_value());
    for (const auto& d : nd.Current()) resolved |= d.id == id && d.state == DiagnosisState::kResolved;
  }
  EXPECT_TRUE(resolved);
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd + 3600 * kS).has_value());
  EXPECT_TRUE(nd.Current().empty());
}

TEST(NodeDiagnoser, CurrentIsSafeWhileRoundsRun) {
  SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  NodeDiagnoser nd;
  std::atomic<bool> done{false};
  std::atomic<size_t> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      while (!done.load()) {
        auto ds = nd.Current();
        EXPECT_LE(ds.size(), 1u);
        (void)nd.Stats();
        ++reads;
      }
    });
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd + i * kS).has_value());
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(nd.Stats().rounds, 5u);
  EXPECT_EQ(nd.Current().size(), 1u);
}

}  // namespace
}  // namespace ithbat::investigate
