// The out-of-memory detector: a rank's CUDA OOM error with its GPU full or the rank stopping is
// the job's out_of_memory; a caught OOM (the rank goes on) and the job's word alone are not.
#include <gtest/gtest.h>

#include "detect/detector.h"
#include "detect/memory/out_of_memory.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

constexpr int kTicks = 60;
constexpr TimeNs kOomAt = kT0 + 30 * kS;
constexpr double kTotal = 80e9;

struct Shape {
  double memory_share = 0.97;  // GPU memory used ÷ total before the error
  int launches_until = 30;     // the rank's launch counter grows until this tick
  bool probes = true;          // the rank's launches were probed at all
  bool oom = true;
  bool gpu_memory = true;  // NVML's memory of the GPU was sampled
};

FleetView Build(const Shape& s) {
  SyntheticFleet f;
  testutil::Labels rank = {{"job_id", "77"}, {"rank", "3"},  {"local_rank", "3"},       {"world_size", "8"},
                           {"pid", "103"},   {"gpu", "3"},   {"gpu_uuid", "GPU-3"}};
  std::vector<double> launches(kTicks), used(kTicks), total(kTicks, kTotal);
  for (int t = 0; t < kTicks; ++t) {
    launches[t] = 100.0 * std::min(t, s.launches_until);
    used[t] = t < 31 ? s.memory_share * kTotal : 0;  // the dead process's memory is freed
  }
  auto launch_labels = rank;
  launch_labels.emplace_back("api", "cuLaunchKernel");
  if (s.probes) {
    f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, launch_labels, launches);
  } else {
    f.Series("n1", "ithbat_sched_oncpu_seconds_total", MetricType::kCounter, rank, launches);
  }
  testutil::Labels gpu = {{"gpu", "3"}, {"gpu_uuid", "GPU-3"}};
  if (s.gpu_memory) {
    f.Series("n1", "ithbat_gpu_memory_used_bytes", MetricType::kGauge, gpu, used);
    f.Series("n1", "ithbat_gpu_memory_total_bytes", MetricType::kGauge, gpu, total);
  }
  if (s.oom) {
    Event e;
    e.time = kOomAt;
    e.kind = EventKind::kError;
    e.source = "joblog";
    e.name = "cuda_oom";
    e.identity.job = "77";
    e.identity.rank = 3;
    e.identity.pid = 103;
    e.attrs = {{"tried_bytes", "2147483648"}, {"free_bytes", "104857600"}};
    f.AddEvent("n1", e);
  }
  return f.TakeView();
}

std::vector<Finding> Detect(const Shape& s, TimeNs now = kT0 + (kTicks - 1) * kS) {
  FleetView v = Build(s);
  return RunDetectors(v, kMinTime, now);
}

TEST(OutOfMemory, AnOomOnAFullGpuThatStopsTheRankIsTheJobs) {
  auto f = Detect(Shape{});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kOutOfMemory);
  EXPECT_EQ(f[0].verdict, Verdict::kJob);
  EXPECT_EQ(f[0].subjects.job, "77");
  ASSERT_EQ(f[0].subjects.ranks.size(), 1u);
  EXPECT_EQ(f[0].subjects.ranks[0].rank, 3);
  ASSERT_EQ(f[0].subjects.gpus.size(), 1u);
  EXPECT_EQ(f[0].subjects.gpus[0].uuid, "GPU-3");
  std::set<std::string> collectors;
  for (const auto& e : f[0].evidence) collectors.insert(e.collector);
  EXPECT_EQ(collectors, (std::set<std::string>{"joblog", "gpu", "probes"}));
  EXPECT_EQ(f[0].provable_at, kOomAt + kOomStopNs);
}

TEST(OutOfMemory, TheVerdictWaitsToSeeWhetherTheRankGoesOn) {
  EXPECT_TRUE(Detect(Shape{}, kOomAt + kOomStopNs - kS).empty());
  EXPECT_EQ(Detect(Shape{}, kOomAt + kOomStopNs).size(), 1u);
}

TEST(OutOfMemory, ACaughtOomIsNotOne) {
  Shape s;
  s.launches_until = kTicks;  // it kept launching: the framework retried with a smaller batch
  EXPECT_TRUE(Detect(s).empty());
}

TEST(OutOfMemory, MemoryShareAtItsEdgeWithoutProbes) {
  // Without probes, the GPU's memory is the second collector: just below the share, no finding.
  Shape s;
  s.probes = false;
  s.memory_share = kOomMemoryShare - 0.01;
  EXPECT_TRUE(Detect(s).empty());
  s.memory_share = kOomMemoryShare + 0.01;
  EXPECT_EQ(Detect(s).size(), 1u);
}

TEST(OutOfMemory, AStoppedRankWithRoomLeftStillCountsAndNoErrorIsNothing) {
  Shape s;
  s.memory_share = 0.5;  // fragmentation: NVML shows room, the allocator found none; the rank died
  EXPECT_EQ(Detect(s).size(), 1u);
  Shape quiet;
  quiet.oom = false;
  EXPECT_TRUE(Detect(quiet).empty());
}

}  // namespace
}  // namespace ithbat::detect

namespace ithbat::detect {
namespace {

TEST(OutOfMemory, TheJobsWordAloneWhereNoCollectorCouldTellIsReportedAsOneCollector) {
  // No GPU memory sample and no launch probe (an offline replay, a node without them): the error
  // is reported with joblog evidence only, which the investigator keeps inconclusive.
  Shape s;
  s.probes = false;
  s.gpu_memory = false;
  auto f = Detect(s);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kOutOfMemory);
  ASSERT_EQ(f[0].evidence.size(), 1u);
  EXPECT_EQ(f[0].evidence[0].collector, "joblog");
  EXPECT_NE(f[0].evidence[0].note.find("whether it was fatal is unknown"), std::string::npos);
  // Where NVML sampled the GPU and it had room, the word alone is a caught OOM: nothing.
  s.gpu_memory = true;
  s.memory_share = 0.5;
  EXPECT_TRUE(Detect(s).empty());
}

}  // namespace
}  // namespace ithbat::detect
