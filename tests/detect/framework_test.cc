// The detectors' common ground: the fleet view's queries and its horizon, and job discovery
// from the labels the agents attach.
#include <gtest/gtest.h>

#include "detect/detector.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

testutil::Labels RankLabels(const std::string& job, int rank, int pid, int gpu) {
  return {{"job_id", job},
          {"rank", std::to_string(rank)},
          {"local_rank", std::to_string(rank % 4)},
          {"world_size", "8"},
          {"pid", std::to_string(pid)},
          {"gpu", std::to_string(gpu)},
          {"gpu_uuid", "GPU-" + std::to_string(pid)},
          {"api", "cuLaunchKernel"}};
}

TEST(FleetView, IncreaseCountsResetsAndHonoursTheHorizon) {
  SyntheticFleet f;
  f.Series("n1", "c_total", MetricType::kCounter, {{"a", "x"}}, {10, 12, 15, 3, 5});
  FleetView v = f.TakeView();
  auto all = v.Increase("", "c_total", kT0, kT0 + 10 * kS);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_DOUBLE_EQ(all[0].value, 2 + 3 + 3 + 2);  // the reset to 3 counts 3
  // As of t0+2 s the view knows only 10, 12, 15.
  auto early = v.AsOf(kT0 + 2 * kS).Increase("", "c_total", kT0, kT0 + 10 * kS);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_DOUBLE_EQ(early[0].value, 5);
  // A birth at zero counts the first value as growth.
  auto zero = v.Increase("", "c_total", kT0, kT0 + 10 * kS, FleetView::Birth::kZero);
  EXPECT_DOUBLE_EQ(zero[0].value, 10 + 10);
}

TEST(FleetView, EventsAndStepsStopAtTheHorizon) {
  SyntheticFleet f;
  for (int i = 0; i < 5; ++i) f.Loss("n1", 100, i, 2.0 - 0.1 * i, kT0 + i * kS, "job-1");
  f.Step("n1", "job-1", 0, 1, kT0, kT0 + 2 * kS);
  f.Step("n1", "job-1", 0, 2, kT0 + 2 * kS, kT0 + 4 * kS);
  FleetView v = f.TakeView();
  store::EventQuery q;
  EXPECT_EQ(v.Events(q).size(), 5u);
  EXPECT_EQ(v.AsOf(kT0 + 2 * kS).Events(q).size(), 3u);
  EXPECT_EQ(v.Events(q).front().identity.node, "n1");  // filled from the store that held it
  EXPECT_EQ(v.Steps("n1", "job-1", 0, kMinTime, kMaxTime).size(), 2u);
  // Step 2 ends after the horizon: not known yet.
  EXPECT_EQ(v.AsOf(kT0 + 3 * kS).Steps("n1", "job-1", 0, kMinTime, kMaxTime).size(), 1u);
  // Clamping twice keeps the earlier horizon.
  EXPECT_EQ(v.AsOf(kT0 + 2 * kS).AsOf(kT0 + 10 * kS).horizon(), kT0 + 2 * kS);
}

TEST(DiscoverJobs, FindsRanksGpusAndNodesFromLabels) {
  SyntheticFleet f;
  for (int r = 0; r < 4; ++r) {
    f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, RankLabels("4242", r, 100 + r, r), {1, 2, 3});
    f.Series("n2", "ithbat_probe_launches_total", MetricType::kCounter, RankLabels("4242", r + 4, 200 + r, r), {1, 2, 3},
             kT0 + kS);
  }
  // A series without a job (an inference server, the agent itself) is no job.
  f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, {{"pid", "77"}}, {1, 2});
  f.Loss("n1", 100, 1, 2.5, kT0 + kS, "4242");
  FleetView v = f.TakeView();
  auto jobs = DiscoverJobs(v, kMinTime, kMaxTime);
  ASSERT_EQ(jobs.size(), 1u);
  const JobView& j = jobs[0];
  EXPECT_EQ(j.id, "4242");
  EXPECT_EQ(j.processes.size(), 8u);
  EXPECT_EQ(j.world_size, 8);
  EXPECT_EQ(j.Nodes(), (std::set<std::string>{"n1", "n2"}));
  EXPECT_EQ(j.Ranks().size(), 8u);
  EXPECT_EQ(j.window.start, kT0);
  EXPECT_EQ(j.window.end, kT0 + 3 * kS);
  ASSERT_NE(j.LoggingProcess(), nullptr);
  EXPECT_EQ(j.LoggingProcess()->pid, 100);
  const RankProcess* r5 = j.Process(5);
  ASSERT_NE(r5, nullptr);
  EXPECT_EQ(r5->node, "n2");
  EXPECT_EQ(r5->gpu, 1);
  EXPECT_EQ(r5->gpu_uuid, "GPU-201");
  EXPECT_EQ(j.PidRegex("n2"), "200|201|202|203");
  // Before n2's ranks started, only n1's are known.
  auto early = DiscoverJobs(v.AsOf(kT0 + kS / 2), kMinTime, kMaxTime);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_EQ(early[0].Nodes(), (std::set<std::string>{"n1"}));
}

TEST(DiscoverJobs, ARestartedRankIsASecondProcessAndTheNewestWins) {
  SyntheticFleet f;
  f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, RankLabels("j", 0, 100, 0), {1, 2});
  f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, RankLabels("j", 0, 150, 0), {1, 2}, kT0 + 10 * kS);
  auto jobs = DiscoverJobs(f.TakeView(), kMinTime, kMaxTime);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].processes.size(), 2u);
  EXPECT_EQ(jobs[0].Process(0)->pid, 150);
}

TEST(Statistics, MedianQuantileMean) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({0, 10}, 0.25), 2.5);
  EXPECT_TRUE(std::isnan(Median({})));
  EXPECT_DOUBLE_EQ(Mean({1, 2, 3}), 2);
}

}  // namespace
}  // namespace ithbat::detect

namespace ithbat::detect {
namespace {

TEST(DiscoverJobs, CompletesAGpuKnownOnlyByIndexFromTheNodeInventory) {
  SyntheticFleet f;
  f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter,
           {{"job_id", "j"}, {"rank", "0"}, {"pid", "100"}, {"gpu", "3"}}, {1, 2});
  f.Series("n1", "ithbat_gpu_info", MetricType::kGauge, {{"gpu", "3"}, {"gpu_uuid", "GPU-three"}}, {1, 1});
  f.Series("n2", "ithbat_gpu_info", MetricType::kGauge, {{"gpu", "3"}, {"gpu_uuid", "GPU-other-node"}}, {1, 1});
  auto jobs = DiscoverJobs(f.TakeView(), kMinTime, kMaxTime);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].processes[0].gpu_uuid, "GPU-three");
}

}  // namespace
}  // namespace ithbat::detect
