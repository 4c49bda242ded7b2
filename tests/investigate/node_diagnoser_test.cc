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

constexpr int kRanks = 4;
constexpr int kTicks = 60;

testutil::Labels RankLabels(int r) {
  return {{"job_id", "77"},
          {"rank", std::to_string(r)},
          {"local_rank", std::to_string(r)},
          {"world_size", "4"},
          {"pid", std::to_string(100 + r)},
          {"gpu", std::to_string(r)},
          {"gpu_uuid", "GPU-" + std::to_string(r)}};
}

// A rotating straggler whose lateness follows its extra work (the stragglers detector's
// data_imbalance shape, tests/detect/stragglers_test.cc): rank t % 4 arrives last in tick t and
// launches 1.5× the thread blocks; the others wait 0.4 s per tick. Ticks [0, ticks).
void RotatingStraggler(SyntheticFleet& f, const std::string& node, int ticks = kTicks) {
  for (int r = 0; r < kRanks; ++r) {
    std::vector<double> last(ticks), lag(ticks), aligned(ticks), grid(ticks), launches(ticks), util(ticks),
        clock(ticks), thermal(ticks);
    double l = 0, g = 0, lg = 0;
    for (int t = 0; t < ticks; ++t) {
      const bool is_last = t % kRanks == r;
      l += is_last ? 1 : 0;
      lg += is_last ? 0.4 : 0;
      g += is_last ? 1500 : 1000;
      last[t] = l;
      lag[t] = lg;
      aligned[t] = t + 1;
      grid[t] = g;
      launches[t] = 100.0 * (t + 1);
      util[t] = 0.8;
      clock[t] = 1980e6;
      thermal[t] = 0;
    }
    auto lab = RankLabels(r);
    f.Series(node, "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, lab, last);
    f.Series(node, "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, lab, lag);
    f.Series(node, "ithbat_probe_nccl_aligned_total", MetricType::kCounter, lab, aligned);
    f.Series(node, "ithbat_probe_grid_blocks_total", MetricType::kCounter, lab, grid);
    auto launch_labels = lab;
    launch_labels.emplace_back("api", "cuLaunchKernel");
    f.Series(node, "ithbat_probe_launches_total", MetricType::kCounter, launch_labels, launches);
    testutil::Labels gpu = {{"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}};
    f.Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge, gpu, util);
    auto sm = gpu;
    sm.emplace_back("clock", "sm");
    f.Series(node, "ithbat_gpu_clock_hertz", MetricType::kGauge, sm, clock);
    auto ev = gpu;
    ev.emplace_back("reason", "hw_thermal_slowdown");
    f.Series(node, "ithbat_gpu_clock_event_active", MetricType::kGauge, ev, thermal);
  }
}

constexpr TimeNs kEnd = kT0 + (kTicks - 1) * kS;

TEST(NodeDiagnoser, RotatingStragglerIsDataImbalanceAndKeepsItsId) {
  SyntheticFleet f;
  RotatingStraggler(f, "n1");
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
  RotatingStraggler(f, "store-key");
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
  RotatingStraggler(f, "n1");
  NodeDiagnoser nd;
  ASSERT_TRUE(nd.Round(f.Node("n1"), "n1", kEnd + 3600 * kS).has_value());
  EXPECT_TRUE(nd.Current().empty());
}

TEST(NodeDiagnoser, AResolvedIncidentIsReportedResolvedThenForgotten) {
  SyntheticFleet f;
  RotatingStraggler(f, "n1");
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
  RotatingStraggler(f, "n1");
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
