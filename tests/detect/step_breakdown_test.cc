// The per-rank step breakdown on a synthetic node: shares of wall time from the counters, the
// collective wait estimated from arrival order or taken exact from the profiler plugin.
#include <gtest/gtest.h>

#include "detect/breakdown/step_breakdown.h"
#include "detect/jobs.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;

testutil::Labels Rank(int r) {
  return {{"job_id", "9"}, {"rank", std::to_string(r)}, {"local_rank", std::to_string(r)}, {"world_size", "2"},
          {"pid", std::to_string(10 + r)}, {"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}};
}

// 11 samples = 10 s. Rank 1 enqueues 0.3 s late every second; rank 0 waits for it.
testutil::SyntheticFleet Node(bool profiler) {
  testutil::SyntheticFleet f;
  for (int r = 0; r < 2; ++r) {
    std::vector<double> lag, steps, sync, io, grid, util(11, 0.9), offcpu;
    for (int t = 0; t <= 10; ++t) {
      lag.push_back(r == 1 ? 0.3 * t : 0);
      steps.push_back(t);
      sync.push_back(0.2 * t);
      io.push_back(r == 0 ? 0.1 * t : 0);
      grid.push_back((r == 1 ? 1500.0 : 1000.0) * t);
      offcpu.push_back(0.05 * t);
    }
    f.Series("n1", "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, Rank(r), lag);
    f.Series("n1", "ithbat_probe_steps_total", MetricType::kCounter, Rank(r), steps);
    f.Series("n1", "ithbat_probe_sync_blocked_seconds_total", MetricType::kCounter, Rank(r), sync);
    f.Series("n1", "ithbat_probe_grid_blocks_total", MetricType::kCounter, Rank(r), grid);
    auto launch = Rank(r);
    launch.emplace_back("api", "cuLaunchKernel");
    f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, launch, steps);
    auto io_labels = Rank(r);
    io_labels.emplace_back("op", "write");
    f.Series("n1", "ithbat_io_seconds_total", MetricType::kCounter, io_labels, io);
    auto sched = Rank(r);
    sched.emplace_back("scope", "main");
    sched.emplace_back("class", "runnable");
    f.Series("n1", "ithbat_sched_offcpu_seconds_total", MetricType::kCounter, sched, offcpu);
    auto lock = Rank(r);
    lock.emplace_back("scope", "main");
    lock.emplace_back("class", "lock");  // futex sleeps (waiting in a sync) are not host stalls
    f.Series("n1", "ithbat_sched_offcpu_seconds_total", MetricType::kCounter, lock, offcpu);
    f.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge,
             {{"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}}, util);
    if (profiler && r == 0) {
      std::vector<double> wait;
      for (int t = 0; t <= 10; ++t) wait.push_back(0.25 * t);
      f.Series("n1", "ithbat_nccl_wait_seconds_total", MetricType::kCounter, Rank(r), wait);
    }
  }
  return f;
}

TEST(StepBreakdown, SharesOfWallTimePerRank) {
  auto f = Node(false);
  FleetView v = f.TakeView();
  auto jobs = DiscoverJobs(v, kMinTime, kMaxTime);
  ASSERT_EQ(jobs.size(), 1u);
  auto rows = StepBreakdown(v, jobs[0], kT0, kT0 + 10 * kS);
  ASSERT_EQ(rows.size(), 2u);
  const RankBreakdown& r0 = rows[0];
  const RankBreakdown& r1 = rows[1];
  EXPECT_DOUBLE_EQ(r0.seconds, 10);
  EXPECT_DOUBLE_EQ(r0.steps, 10);
  EXPECT_DOUBLE_EQ(r0.step_seconds, 1);
  // Rank 0 waited 0.3 s a second for rank 1; rank 1 waited for nobody.
  EXPECT_NEAR(r0.collective_wait_share, 0.3, 1e-9);
  EXPECT_FALSE(r0.collective_wait_exact);
  EXPECT_NEAR(r1.collective_wait_share, 0, 1e-9);
  EXPECT_NEAR(r0.compute_share, 0.6, 1e-9);
  EXPECT_NEAR(r1.compute_share, 0.9, 1e-9);
  EXPECT_NEAR(r0.host_stall_share, 0.05, 1e-9);  // runnable only, not the futex sleeps
  EXPECT_NEAR(r0.sync_blocked_share, 0.2, 1e-9);
  EXPECT_NEAR(r0.io_share, 0.1, 1e-9);
  EXPECT_NEAR(r1.io_share, 0, 1e-9);
  EXPECT_NEAR(r1.work_per_step / r0.work_per_step, 1.5, 1e-9);
  EXPECT_NE(FormatBreakdown(rows).find("coll.wait"), std::string::npos);
}

TEST(StepBreakdown, TheProfilerPluginsWaitIsExactAndWins) {
  auto f = Node(true);
  FleetView v = f.TakeView();
  auto jobs = DiscoverJobs(v, kMinTime, kMaxTime);
  auto rows = StepBreakdown(v, jobs[0], kT0, kT0 + 10 * kS);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].collective_wait_exact);
  EXPECT_NEAR(rows[0].collective_wait_share, 0.25, 1e-9);
}

}  // namespace
}  // namespace ithbat::detect
