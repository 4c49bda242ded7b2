// The stalls, inference-efficiency and network detectors on synthetic stores: each threshold
// at its edge, and the look-alike twins that must not fire.
#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "detect/detector.h"
#include "detect/fleet_view.h"
#include "detect/inference/efficiency.h"
#include "detect/jobs.h"
#include "detect/network/network.h"
#include "detect/stalls/stalls.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

// ---- helpers --------------------------------------------------------------------------------

testutil::Labels RankLabels(const std::string& job, int rank, int pid, int gpu, int world = 2) {
  return {{"job_id", job},
          {"rank", std::to_string(rank)},
          {"local_rank", std::to_string(rank)},
          {"world_size", std::to_string(world)},
          {"pid", std::to_string(pid)},
          {"gpu", std::to_string(gpu)},
          {"gpu_uuid", "GPU-" + std::to_string(gpu)}};
}
testutil::Labels With(testutil::Labels l, const testutil::Labels& more) {
  l.insert(l.end(), more.begin(), more.end());
  return l;
}

std::vector<Finding> RunDetector(FleetView view, std::vector<Finding> (*fn)(const DetectInput&), TimeNs now) {
  const FleetView clamped = view.AsOf(now);
  const auto jobs = DiscoverJobs(clamped, kT0, now);
  DetectInput in{clamped, jobs, kT0, now};
  return fn(in);
}

size_t CountCause(const std::vector<Finding>& f, Cause c) {
  return static_cast<size_t>(std::count_if(f.begin(), f.end(), [&](const Finding& x) { return x.cause == c; }));
}

std::set<std::string> Collectors(const Finding& f) {
  std::set<std::string> out;
  for (const auto& e : f.evidence) out.insert(e.collector);
  return out;
}

// ---- stalls ---------------------------------------------------------------------------------

// A 2-rank job on one node, one sample a second for `seconds`: GPUs busy `util` except in the
// stall seconds (idle), saves logged at [begin, end) with one write + one fsync + one close per
// rank on `mount`, each save's fsync taking the given latency.
struct SaveSpec {
  int begin = 0, end = 0;
  double fsync_s = 0.2;
};
struct TrainSpec {
  int seconds = 120;
  double util = 0.9;
  std::vector<std::pair<int, int>> stalls;  // (first second, length)
  std::vector<SaveSpec> saves;
  std::string mount = "/mnt/projects";
  std::string fstype = "nfs4";
  double on_fraction = 0.2;   // launch probes duty-cycled: launch counts are not exact
  bool util_series = true;
  // input pipeline
  double main_sleep_share = 0.0;
  double loader_cores = 0.02;
  // A second node of the same job: its ranks and pids start here, its agent ticks this late.
  int rank_base = 0;
  TimeNs offset = 0;
};

void AddTrainingJob(SyntheticFleet& f, const TrainSpec& spec, const std::string& job = "j1",
                    const std::string& node = "n1") {
  for (int r = 0; r < 2; ++r) {
    const int pid = 100 + spec.rank_base + r, gpu = r;
    const auto id = RankLabels(job, spec.rank_base + r, pid, gpu, spec.rank_base + 2);
    std::vector<double> util, launches, on, sleep, children, zeros;
    double l = 0, sl = 0, ch = 0;
    for (int i = 0; i < spec.seconds; ++i) {
      bool stalled = false;
      for (const auto& [a, n] : spec.stalls) stalled = stalled || (i >= a && i < a + n);
      util.push_back(stalled ? 0.0 : spec.util);
      l += stalled ? 0 : 500;
      launches.push_back(l);
      on.push_back(spec.on_fraction);
      sl += spec.main_sleep_share;
      sleep.push_back(sl);
      ch += spec.loader_cores;
      children.push_back(ch);
    }
    if (spec.util_series) {
      f.Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge,
               {{"gpu", std::to_string(gpu)}, {"gpu_uuid", "GPU-" + std::to_string(gpu)}}, util, kT0 + spec.offset);
    }
    f.Series(node, "ithbat_probe_launches_total", MetricType::kCounter, With(id, {{"api", "cuLaunchKernel"}}), launches,
             kT0 + spec.offset);
    f.Series(node, "ithbat_probe_launch_on_fraction", MetricType::kGauge, id, on, kT0 + spec.offset);
    f.Series(node, "ithbat_sched_offcpu_seconds_total", MetricType::kCounter,
             With(id, {{"scope", "main"}, {"class", "sleep"}}), sleep);
    f.Series(node, "ithbat_sched_oncpu_seconds_total", MetricType::kCounter, With(id, {{"scope", "children"}}),
             children);
    if (spec.saves.empty()) continue;
    // I/O counters: one write (10 ms), one fsync, one close (1 ms) per save, counted at its end.
    for (const auto& [op, fixed] : std::vector<std::pair<std::string, double>>{{"write", 0.01}, {"fsync", -1}, {"close", 0.001}}) {
      std::vector<double> secs, calls;
      double sv = 0, cv = 0;
      for (int i = 0; i < spec.seconds; ++i) {
        for (const auto& sv_spec : spec.saves) {
          if (i == sv_spec.end) {
            sv += fixed >= 0 ? fixed : sv_spec.fsync_s;
            cv += 1;
          }
        }
        secs.push_back(sv);
        calls.push_back(cv);
      }
      const auto io = With(id, {{"op", op}, {"mount", spec.mount}, {"fstype", spec.fstype}});
      f.Series(node, "ithbat_io_seconds_total", MetricType::kCounter, io, secs);
      f.Series(node, "ithbat_io_calls_total", MetricType::kCounter, io, calls);
    }
  }
  for (const auto& sv : spec.rank_base == 0 ? spec.saves : std::vector<SaveSpec>{}) {
    for (EventKind k : {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd}) {
      Event e;
      e.identity.job = job;
      e.identity.rank = 0;
      e.identity.pid = 100;
      e.time = kT0 + (k == EventKind::kCheckpointBegin ? sv.begin : sv.end) * kS;
      e.kind = k;
      e.source = "joblog";
      e.step = sv.begin;
      f.AddEvent(node, e);
    }
  }
}

// Saves every 20 s from 20 s: the first two healthy (fsync 0.2 s, 1 s stall), the later ones with
// the given fsync latency and stall length.
TrainSpec CheckpointJob(double slow_fsync, int slow_stall, const std::string& fstype = "nfs4") {
  TrainSpec s;
  s.fstype = fstype;
  for (int k = 0; k < 5; ++k) {
    const int begin = 20 + 20 * k;
    const bool slow = k >= 2;
    const int stall = slow ? slow_stall : 1;
    s.stalls.push_back({begin, stall});
    s.saves.push_back({begin, begin + stall, slow ? slow_fsync : 0.2});
  }
  return s;
}

TEST(Stalls, SlowFsyncOnSharedMountIsStorage) {
  SyntheticFleet f;
  AddTrainingJob(f, CheckpointJob(0.2 * 3.1, 4));  // just above kStorageLatencyFactor
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  ASSERT_EQ(CountCause(out, Cause::kStorage), 1u);
  const Finding& x = out.front();
  EXPECT_EQ(x.verdict, Verdict::kInfrastructure);
  EXPECT_EQ(x.subjects.job, "j1");
  EXPECT_EQ(x.subjects.resource, "/mnt/projects");
  EXPECT_EQ(x.subjects.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(x.subjects.ranks.size(), 2u);
  EXPECT_GE(Collectors(x).size(), 2u);
  EXPECT_TRUE(Collectors(x).contains("sched_io"));
  EXPECT_TRUE(Collectors(x).contains("joblog"));
  // Provable once the first slow save (at 60 s) has ended and its stall closed.
  EXPECT_LE(x.provable_at, kT0 + 70 * kS);
  EXPECT_GT(x.lost_gpu_seconds, 0);
  EXPECT_GT(x.speedup_with_fix, 1.0);
}

TEST(Stalls, LatencyJustBelowTheFactorIsNotStorage) {
  SyntheticFleet f;
  AddTrainingJob(f, CheckpointJob(0.2 * 2.9, 4));
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  EXPECT_EQ(CountCause(out, Cause::kStorage), 0u);
  // Stalls of 4 s every 20 s are 20% of wall time: under kCheckpointStallShare, nothing.
  EXPECT_TRUE(out.empty());
}

TEST(Stalls, ASaveJustShortOfTheFactorDoesNotRaiseTheBaseline) {
  // fsync 0.2 s in two healthy saves, then 2.9x (not slow, training barely stalls), then 3.5x
  // with the job stopping. A pooled mean would take the 2.9x save into the baseline (0.33 s)
  // and call the 3.5x saves 2.1x; the median of the earlier saves stays at 0.2 s.
  SyntheticFleet f;
  TrainSpec s;
  s.fstype = "nfs4";
  const double fsync[] = {0.2, 0.2, 0.2 * 2.9, 0.2 * 3.5, 0.2 * 3.5};
  for (int k = 0; k < 5; ++k) {
    const int begin = 20 + 20 * k;
    const int stall = k >= 3 ? 4 : 1;
    s.stalls.push_back({begin, stall});
    s.saves.push_back({begin, begin + stall, fsync[k]});
  }
  AddTrainingJob(f, s);
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  ASSERT_EQ(CountCause(out, Cause::kStorage), 1u);
  EXPECT_EQ(out.front().subjects.resource, "/mnt/projects");
}

TEST(Stalls, SlowLocalDiskIsNotSharedStorage) {
  SyntheticFleet f;
  AddTrainingJob(f, CheckpointJob(2.0, 4, "ext4"));
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  EXPECT_EQ(CountCause(out, Cause::kStorage), 0u);
  EXPECT_TRUE(IsSharedFsType("nfs4"));
  EXPECT_TRUE(IsSharedFsType("fuse.slowfs"));
  EXPECT_TRUE(IsSharedFsType("lustre"));
  EXPECT_FALSE(IsSharedFsType("ext4"));
  EXPECT_FALSE(IsSharedFsType("xfs"));
}

TEST(Stalls, SlowSaveWithoutAStallIsNotStorage) {
  // The save is slow but training goes on (one idle tick is not a stall): not this detector's.
  SyntheticFleet f;
  AddTrainingJob(f, CheckpointJob(2.0, kMinStallTicks - 1));
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  EXPECT_EQ(CountCause(out, Cause::kStorage), 0u);
}

// Saves every 10 s with a healthy, constant latency and a stall of `stall` s each.
TrainSpec SteadySaves(int stall, int seconds = 120) {
  TrainSpec s;
  s.seconds = seconds;
  s.mount = "/local/nvme";
  s.fstype = "fuse.slowfs";
  for (int begin = 10; begin + stall < seconds - 2; begin += 10) {
    s.stalls.push_back({begin, stall});
    s.saves.push_back({begin, begin + stall, 0.01});
  }
  return s;
}

// Saves at 10, 20, ... with the given stall lengths, healthy latency.
TrainSpec SavesOf(const std::vector<int>& stalls) {
  TrainSpec s;
  s.mount = "/local/nvme";
  s.fstype = "ext4";
  int begin = 10;
  for (int len : stalls) {
    s.stalls.push_back({begin, len});
    s.saves.push_back({begin, begin + len, 0.01});
    begin += std::max(10, len + 5);
  }
  return s;
}

TEST(Stalls, CheckpointStallShareEdge) {
  // Wall time 119 s from the first running tick: 30 s of stalls is 25.2%, 29 s is 24.4%.
  std::vector<int> over(10, 3), under(9, 3);
  under.push_back(2);
  for (const auto& [stalls, fires] : {std::pair{over, true}, std::pair{under, false}}) {
    SyntheticFleet f;
    AddTrainingJob(f, SavesOf(stalls));
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kCheckpointStrategy), fires ? 1u : 0u) << stalls.size();
  }
}

TEST(Stalls, OneLongSaveIsNotAStrategy) {
  // kMinCheckpointStalls: one 40 s save is a third of the run but a single event.
  for (const auto& [stalls, fires] : {std::pair{std::vector<int>{40}, false}, std::pair{std::vector<int>{20, 20}, true}}) {
    SyntheticFleet f;
    AddTrainingJob(f, SavesOf(stalls));
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kCheckpointStrategy), fires ? 1u : 0u) << stalls.size();
  }
}

TEST(Stalls, IdleUtilEdge) {
  // A GPU at kStallIdleUtil is stopped; just above it is working.
  for (double util : {kStallIdleUtil, kStallIdleUtil + 0.01}) {
    SyntheticFleet f;
    TrainSpec s = SavesOf(std::vector<int>(10, 4));
    s.util_series = false;
    AddTrainingJob(f, s);
    for (int gpu = 0; gpu < 2; ++gpu) {
      std::vector<double> v;
      for (int i = 0; i < s.seconds; ++i) {
        bool stalled = false;
        for (const auto& [a, n] : s.stalls) stalled = stalled || (i >= a && i < a + n);
        v.push_back(stalled ? util : 0.9);
      }
      f.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge,
               {{"gpu", std::to_string(gpu)}, {"gpu_uuid", "GPU-" + std::to_string(gpu)}}, v);
    }
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kCheckpointStrategy), util <= kStallIdleUtil ? 1u : 0u) << util;
  }
}

TEST(Stalls, TinyLatencyRiseIsNotStorage) {
  // fsync 1 ms -> 4 ms is 4x but only 3 ms a call: under kMinLatencyRiseSeconds.
  for (const auto& [base, slow, fires] : {std::tuple{0.001, 0.004, false}, std::tuple{0.003, 0.003 + kMinLatencyRiseSeconds + 0.004, true}}) {
    SyntheticFleet f;
    TrainSpec s = CheckpointJob(slow, 4);
    for (auto& sv : s.saves) {
      if (sv.fsync_s == 0.2) sv.fsync_s = base;
    }
    AddTrainingJob(f, s);
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kStorage), fires ? 1u : 0u) << base;
  }
}

TEST(Stalls, HugeSynchronousSavesOnHealthyStorageAreCheckpointStrategy) {
  SyntheticFleet f;
  AddTrainingJob(f, SteadySaves(3));  // 3 s of every 10: 30% > kCheckpointStallShare
  auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kCheckpointStrategy);
  EXPECT_EQ(out[0].verdict, Verdict::kJob);
  EXPECT_EQ(CountCause(out, Cause::kStorage), 0u);
  EXPECT_GE(Collectors(out[0]).size(), 2u);
  EXPECT_GT(out[0].speedup_with_fix, 1.3);
}

TEST(Stalls, HeavyButCheapCheckpointsGiveNothing) {
  // control-checkpoint-heavy-nvme: 2 s stalls every 10 s is 20% < 25%; 1 s is no stall at all.
  for (int stall : {1, 2}) {
    SyntheticFleet f;
    AddTrainingJob(f, SteadySaves(stall));
    EXPECT_TRUE(RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS).empty()) << stall;
  }
}

TEST(Stalls, ProbeOffSlicesNeverMakeAStall) {
  // No GPU series: only the launch counts can show a stop. Duty-cycled (on-fraction < 1), a flat
  // count is an extrapolation and proves nothing; attached the whole tick, it is a stop.
  for (double on : {0.2, 1.0}) {
    SyntheticFleet f;
    TrainSpec s = SteadySaves(4);
    s.util_series = false;
    s.on_fraction = on;
    AddTrainingJob(f, s);
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kCheckpointStrategy), on < 1 ? 0u : 1u) << on;
    if (on == 1.0 && !out.empty()) {
      EXPECT_TRUE(Collectors(out[0]).contains("probes"));
    }
  }
}

TEST(Stalls, EveryNodeStallsAtItsOwnTickOffset) {
  // Two nodes whose agents tick half a second apart: a 4 s stop on both is one job stall (of
  // 3.5 s: where both were stopped); the same stop on one node only is not (the other node's
  // ranks kept running).
  for (bool both : {true, false}) {
    SyntheticFleet f;
    TrainSpec a = SteadySaves(4);
    AddTrainingJob(f, a, "j1", "n1");
    TrainSpec b = both ? SteadySaves(4) : TrainSpec{};
    b.rank_base = 2;
    b.offset = kS / 2;
    AddTrainingJob(f, b, "j1", "n2");
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    EXPECT_EQ(CountCause(out, Cause::kCheckpointStrategy), both ? 1u : 0u) << both;
    if (both && !out.empty()) {
      EXPECT_EQ(out[0].subjects.nodes, (std::vector<std::string>{"n1", "n2"}));
      EXPECT_EQ(out[0].subjects.ranks.size(), 4u);
    }
  }
}

TEST(Stalls, LoaderBoundJobIsInputPipeline) {
  auto spec = [](double util, double sleep, double cores) {
    TrainSpec s;
    s.util = util;
    s.main_sleep_share = sleep;
    s.loader_cores = cores;
    return s;
  };
  {
    SyntheticFleet f;
    AddTrainingJob(f, spec(0.4, kInputWaitShare + 0.01, kLoaderBusyCores + 0.01));
    auto out = RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].cause, Cause::kInputPipeline);
    EXPECT_EQ(out[0].verdict, Verdict::kJob);
    EXPECT_GE(Collectors(out[0]).size(), 2u);
  }
  // Each condition just on the other side of its edge: nothing.
  for (const auto& s : {spec(kInputMaxUtil + 0.05, 0.5, 0.5), spec(0.4, kInputWaitShare - 0.01, 0.5),
                        spec(0.4, 0.5, kLoaderBusyCores - 0.01)}) {
    SyntheticFleet f;
    AddTrainingJob(f, s);
    EXPECT_TRUE(RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS).empty());
  }
}

TEST(Stalls, HealthyTrainingGivesNothing) {
  SyntheticFleet f;
  AddTrainingJob(f, TrainSpec{});
  EXPECT_TRUE(RunDetector(f.TakeView(), &DetectStalls, kT0 + 119 * kS).empty());
}

// ---- inference efficiency -------------------------------------------------------------------

using ServeSpec = SyntheticFleet::ServeShape;

std::vector<Finding> RunServer(const ServeSpec& s) {
  SyntheticFleet f;
  f.InferenceServer("inf", s);
  return RunDetector(f.TakeView(), &DetectInferenceEfficiency, kT0 + (s.scrapes - 1) * kS);
}

TEST(InferenceEfficiency, RequestsWaitingWithFreeSlotsIsServingConfig) {
  auto out = RunServer(ServeSpec{});
  ASSERT_EQ(out.size(), 1u);
  const Finding& x = out[0];
  EXPECT_EQ(x.cause, Cause::kServingConfig);
  EXPECT_EQ(x.verdict, Verdict::kJob);
  EXPECT_EQ(x.subjects.job, "vllm:8000");  // no job id tagged: engine:port
  EXPECT_EQ(x.subjects.nodes, std::vector<std::string>{"inf"});
  ASSERT_EQ(x.subjects.ranks.size(), 1u);
  EXPECT_EQ(x.subjects.ranks[0].pid, 500);
  EXPECT_EQ(x.subjects.gpus.size(), 2u);
  EXPECT_EQ(Collectors(x), (std::set<std::string>{"serving", "gpu"}));
  // Debounced: the kServingDebounce-th scrape in a row.
  EXPECT_EQ(x.provable_at, kT0 + (kServingDebounce - 1) * kS);
  // Prefill share 0.2 / 1.0.
  bool prefill = false;
  for (const auto& e : x.evidence) prefill = prefill || (e.signal.starts_with("ithbat_serving_prefill") && std::abs(e.observed - 0.2) < 1e-9);
  EXPECT_TRUE(prefill);
}

TEST(InferenceEfficiency, FreeSlotEdge) {
  ServeSpec at;
  at.running = [](int) { return kServingFreeSlotShare * 32; };
  EXPECT_EQ(CountCause(RunServer(at), Cause::kServingConfig), 1u);
  ServeSpec above;
  above.running = [](int) { return kServingFreeSlotShare * 32 + 1; };
  EXPECT_EQ(CountCause(RunServer(above), Cause::kServingConfig), 0u);
}

TEST(InferenceEfficiency, DebounceEdge) {
  // Waiting in runs of kServingDebounce - 1 scrapes, then one empty: never a pattern.
  ServeSpec flapping;
  flapping.waiting = [](int i) { return i % kServingDebounce == kServingDebounce - 1 ? 0.0 : 2.0; };
  EXPECT_EQ(CountCause(RunServer(flapping), Cause::kServingConfig), 0u);
  ServeSpec steady;
  steady.waiting = [](int i) { return i % (kServingDebounce + 1) == kServingDebounce ? 0.0 : 2.0; };
  EXPECT_EQ(CountCause(RunServer(steady), Cause::kServingConfig), 1u);
}

TEST(InferenceEfficiency, WaitingShareEdge) {
  // A queue in the first half of the scrapes only: at kServingWaitingShare it fires, below not.
  for (const auto& [queued, fires] : {std::pair{30, true}, std::pair{29, false}}) {
    ServeSpec s;
    s.waiting = [q = queued](int i) { return i < q ? 2.0 : 0.0; };
    EXPECT_EQ(CountCause(RunServer(s), Cause::kServingConfig), fires ? 1u : 0u) << queued;
  }
}

TEST(InferenceEfficiency, QueueBehindAFullKvCacheIsNotServingConfig) {
  ServeSpec s;
  s.kv = kServingKvFull;
  EXPECT_EQ(CountCause(RunServer(s), Cause::kServingConfig), 0u);
}

TEST(InferenceEfficiency, HealthyServerGivesNothing) {
  // healthy-inference: 1-3 of 64 slots running per replica, nothing waiting, GPUs ~0.8 busy.
  ServeSpec s;
  s.slots = 64;
  s.running = [](int i) { return 1.0 + i % 3; };
  s.waiting = [](int i) { return i == 30 ? 1.0 : 0.0; };
  EXPECT_TRUE(RunServer(s).empty());
}

TEST(InferenceEfficiency, IdleServerIsOverProvisioned) {
  ServeSpec s;
  s.engines = 4;
  s.slots = 64;
  s.running = [](int) { return 1.0; };
  s.waiting = [](int) { return 0.0; };
  s.util = kOverProvisionedMaxUtil - 0.1;
  auto out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kOverProvisioned);
  EXPECT_GE(Collectors(out[0]).size(), 2u);
  // Busy GPUs (over the edge): the same occupancy is not over-provisioning.
  s.util = kOverProvisionedMaxUtil + 0.01;
  EXPECT_TRUE(RunServer(s).empty());
  // Too few scrapes to claim a steady state.
  s.util = 0.2;
  s.scrapes = kOverProvisionedMinScrapes - 1;
  EXPECT_TRUE(RunServer(s).empty());
}

TEST(InferenceEfficiency, QueueBehindAFullKvCacheIsUnderProvisioned) {
  ServeSpec s;
  s.kv = kServingKvFull;
  auto out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kUnderProvisioned);
  EXPECT_EQ(out[0].verdict, Verdict::kJob);
  EXPECT_EQ(Collectors(out[0]), (std::set<std::string>{"serving", "gpu"}));
  EXPECT_EQ(out[0].provable_at, kT0 + (kServingDebounce - 1) * kS);
  EXPECT_NE(out[0].summary.find("KV cache was 90% full"), std::string::npos) << out[0].summary;
  // Just below full, with free slots, it is the configuration again.
  s.kv = kServingKvFull - 0.01;
  out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kServingConfig);
}

TEST(InferenceEfficiency, EverySlotBusyBesideAnEmptyKvCacheIsTheSlotLimit) {
  // Four slots, all running, a queue, the KV cache 3% full: the slot limit caps the server.
  ServeSpec s;
  s.slots = 4;
  s.running = [](int) { return 4.0; };
  s.waiting = [](int) { return 20.0; };
  s.kv = 0.03;
  auto out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kServingConfig);
  EXPECT_EQ(out[0].verdict, Verdict::kJob);
  EXPECT_NE(out[0].summary.find("slot limit"), std::string::npos) << out[0].summary;
  // At kSlotCapKvShare the cache has no room for twice the batch: capacity, not the limit.
  s.kv = kSlotCapKvShare;
  out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kUnderProvisioned);
  // A server without a KV gauge: the cache cannot be told empty, so no slot-limit claim.
  s.kv = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(RunServer(s).empty());
  // One slot free: neither (the engine is admitting; free-slot serving_config needs half free).
  s.kv = 0.03;
  s.running = [](int) { return 3.0; };
  EXPECT_TRUE(RunServer(s).empty());
}

TEST(InferenceEfficiency, WithoutASlotLimitAQueueIsInconclusiveUnlessTheKvCacheIsFull) {
  ServeSpec s;
  s.slots = 0;  // the server exposes none
  auto out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kServingConfig);
  EXPECT_EQ(out[0].verdict, Verdict::kInconclusive);
  EXPECT_NE(out[0].summary.find("missing: the slot limit"), std::string::npos) << out[0].summary;
  s.kv = 0.95;
  out = RunServer(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kUnderProvisioned);
  EXPECT_EQ(out[0].verdict, Verdict::kJob);
  // No queue: nothing, whatever the cache.
  s.waiting = [](int) { return 0.0; };
  EXPECT_TRUE(RunServer(s).empty());
}

TEST(InferenceEfficiency, MaterialShorterThanAPatternIsInconclusive) {
  ServeSpec s;
  s.kv = 0.95;
  for (int n = 1; n < kServingDebounce; ++n) {
    s.scrapes = n;
    auto out = RunServer(s);
    ASSERT_EQ(out.size(), 1u) << n;
    EXPECT_EQ(out[0].cause, Cause::kUnderProvisioned);
    EXPECT_EQ(out[0].verdict, Verdict::kInconclusive);
    EXPECT_NE(out[0].summary.find("a pattern needs"), std::string::npos) << out[0].summary;
  }
  // One scrape of the short material without a queue: not every scrape shows it, nothing.
  s.scrapes = kServingDebounce - 1;
  s.waiting = [](int i) { return i == 0 ? 0.0 : 3.0; };
  EXPECT_TRUE(RunServer(s).empty());
}

// A server known only by its stats lines (kServingMetric events), as a captured vLLM prints them.
void LogStats(SyntheticFleet& f, const std::string& node, int lines, double running, double waiting,
              double kv, std::string_view engine = "vllm_v1") {
  for (int i = 0; i < lines; ++i) {
    for (const auto& [name, v] :
         {std::pair{"running_requests", running}, std::pair{"waiting_requests", waiting},
          std::pair{"kv_cache_usage_ratio", kv}}) {
      Event e;
      e.time = kT0 + i * 5 * kS;
      e.kind = EventKind::kServingMetric;
      e.identity.node = node;
      e.identity.job = "chat";
      e.identity.pid = 700;
      e.name = name;
      e.value = v;
      e.attrs = {{"engine", std::string(engine)}, {"engine_index", "0"}};
      f.AddEvent(node, std::move(e));
    }
  }
}

TEST(InferenceEfficiency, StatsLinesAloneShowAFullKvCache) {
  SyntheticFleet f;
  LogStats(f, "inf", 12, 16, 11, 0.97);
  auto out = RunDetector(f.TakeView(), &DetectInferenceEfficiency, kT0 + 60 * kS);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kUnderProvisioned);
  EXPECT_EQ(out[0].subjects.job, "chat");
  EXPECT_EQ(Collectors(out[0]), (std::set<std::string>{"joblog"}));
  EXPECT_EQ(out[0].verdict, Verdict::kInconclusive);  // no GPU counters: a slow GPU is not ruled out
  EXPECT_NE(out[0].summary.find("12 of 12 stats lines"), std::string::npos) << out[0].summary;
  // A line cut before its KV field is no scrape: 12 lines without one say nothing.
  SyntheticFleet cut;
  LogStats(cut, "inf", 12, 16, 11, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(RunDetector(cut.TakeView(), &DetectInferenceEfficiency, kT0 + 60 * kS).empty());
}

TEST(InferenceEfficiency, StatsLinesOfAScrapedNodeAreNotASecondServer) {
  SyntheticFleet f;
  ServeSpec s;
  s.kv = 0.95;
  f.InferenceServer("inf", s);
  LogStats(f, "inf", 12, 16, 11, 0.97);
  auto out = RunDetector(f.TakeView(), &DetectInferenceEfficiency, kT0 + 59 * kS);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Collectors(out[0]), (std::set<std::string>{"serving", "gpu"}));
}

// ---- network --------------------------------------------------------------------------------

// Two nodes; GPU 0 talks through mlx5_0, GPU 2 through mlx5_1; a 4-rank job with ranks on GPUs 0
// and 2 of each node, 2 steps/s until `onset`, then 2 / slowdown. Per port: symbol errors at
// `errors_per_s` after the onset on `bad` ("" none), xmit wait at `wait_per_s` after the onset on
// every port (0: none).
struct NetSpec {
  int seconds = 90;
  int onset = 50;
  double slowdown = 1.5;
  std::string bad;  // "n1/mlx5_1"
  double errors_per_s = 2;
  double wait_per_s = 0;
  double downs = 0;
  double history_errors_per_s = 0;  // on the bad port from the start
  double history_wait_per_s = 0;    // on every port from the start (replaced by wait_per_s after the onset)
  double rate_share = 1.0;          // the bad port's rate after the onset
  int steps_from = 0;               // the job's first step (the counter is 0 before)
  int lone_error_at = -1;           // one background error on the bad port at this second
};

void AddNet(SyntheticFleet& f, const NetSpec& s) {
  const std::vector<std::string> nodes = {"n1", "n2"};
  const std::vector<std::pair<int, std::string>> gpus = {{0, "mlx5_0"}, {2, "mlx5_1"}};
  int rank = 0;
  for (const auto& node : nodes) {
    const auto n = static_cast<size_t>(s.seconds);
    for (const auto& [g, nic] : gpus) {
      const std::string bus = fmt::format("0000:{:02x}:00.0", 0x18 + g);
      f.Series(node, "ithbat_gpu_info", MetricType::kGauge,
               {{"gpu", std::to_string(g)}, {"gpu_uuid", "GPU-" + node + std::to_string(g)}, {"pci_bus_id", "0000" + bus}},
               std::vector<double>(n, 1));
      f.Series(node, "ithbat_topology_gpu_nic_info", MetricType::kGauge,
               {{"gpu_pci_bus_id", bus}, {"nic", nic}, {"closest", "1"}}, std::vector<double>(n, 1));
      const int pid = 200 + rank;
      std::vector<double> steps, launches;
      double st = 0;
      for (int i = 0; i < s.seconds; ++i) {
        if (i >= s.steps_from) st += i < s.onset ? 2.0 : 2.0 / s.slowdown;
        steps.push_back(st);
        launches.push_back(100.0 * i);
      }
      auto id = RankLabels("big", rank, pid, g, 4);
      f.Series(node, "ithbat_probe_steps_total", MetricType::kCounter, id, steps);
      f.Series(node, "ithbat_probe_launches_total", MetricType::kCounter, With(id, {{"api", "cuLaunchKernel"}}), launches);
      ++rank;
    }
    for (const std::string nic : {"mlx5_0", "mlx5_1"}) {
      const bool bad = s.bad == node + "/" + nic;
      std::vector<double> errors, wait, downed, state, rate, tx;
      double e = 0, w = 0, d = 0;
      for (int i = 0; i < s.seconds; ++i) {
        if (i == 5) e += 1;  // background
        if (bad && i == s.lone_error_at) e += 1;
        if (bad && i >= s.onset) e += s.errors_per_s;
        if (bad) e += s.history_errors_per_s;
        if (bad && i == s.onset + 2) d += s.downs;
        w += i >= s.onset ? s.wait_per_s : s.history_wait_per_s;
        errors.push_back(e);
        wait.push_back(w);
        downed.push_back(d);
        state.push_back(4);
        rate.push_back(bad && i >= s.onset ? 5e10 * s.rate_share : 5e10);
        tx.push_back(1e9 * i);
      }
      const testutil::Labels port = {{"device", nic}, {"port", "1"}};
      f.Series(node, "ithbat_ib_symbol_errors_total", MetricType::kCounter, port, errors);
      f.Series(node, "ithbat_ib_transmit_wait_total", MetricType::kCounter, port, wait);
      f.Series(node, "ithbat_ib_link_downed_total", MetricType::kCounter, port, downed);
      f.Series(node, "ithbat_ib_port_state", MetricType::kGauge, With(port, {{"state", "ACTIVE"}}), state);
      f.Series(node, "ithbat_ib_port_rate_bytes_per_second", MetricType::kGauge, port, rate);
      f.Series(node, "ithbat_ib_transmit_bytes_total", MetricType::kCounter, port, tx);
    }
  }
}

std::vector<Finding> RunNet(const NetSpec& s) {
  SyntheticFleet f;
  AddNet(f, s);
  return RunDetector(f.TakeView(), &DetectNetwork, kT0 + (s.seconds - 1) * kS);
}

TEST(Network, LinkErrorsOnTheSlowRanksNicIsALinkFault) {
  NetSpec s;
  s.bad = "n1/mlx5_1";
  s.wait_per_s = 1e5;  // the fake libnccl raises xmit wait on every port of the job
  auto out = RunNet(s);
  ASSERT_EQ(out.size(), 1u);
  const Finding& x = out[0];
  EXPECT_EQ(x.verdict, Verdict::kInfrastructure);
  EXPECT_EQ(x.cause, Cause::kNetwork);
  EXPECT_EQ(x.subjects.resource, "n1/mlx5_1");
  EXPECT_EQ(x.subjects.nodes, std::vector<std::string>{"n1"});
  ASSERT_EQ(x.subjects.ranks.size(), 1u);
  EXPECT_EQ(x.subjects.ranks[0].rank, 1);  // GPU 2 of n1 talks through mlx5_1
  EXPECT_EQ(Collectors(x), (std::set<std::string>{"node", "probes"}));
  // Errors evident within the window, the slowdown after kMinRateSpan.
  EXPECT_LE(x.provable_at, kT0 + (s.onset + 10) * kS);
}

// A lone background error shortly before a link starts to fail is not its onset: counted from
// it, the job (whose first steps came 2 s before it) had no step rate before the onset to compare
// with, and the lab's degrading-link world got no verdict.
TEST(Network, ALoneErrorBeforeTheRiseIsNotItsOnset) {
  NetSpec s;
  s.bad = "n1/mlx5_1";
  s.steps_from = 30;
  s.lone_error_at = 32;
  s.onset = 45;
  s.seconds = 75;
  auto out = RunNet(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].subjects.resource, "n1/mlx5_1");
  EXPECT_GE(out[0].window.start, kT0 + s.onset * kS);
}

TEST(Network, LinkErrorEdge) {
  // kMinLinkErrors in the trailing window: just under never fires, just over does.
  const double window_s = static_cast<double>(kNetWindow) / 1e9;
  NetSpec under;
  under.bad = "n1/mlx5_1";
  under.errors_per_s = (kMinLinkErrors - 1) / window_s;
  under.seconds = under.onset + static_cast<int>(window_s);
  EXPECT_TRUE(RunNet(under).empty());
  NetSpec over = under;
  over.errors_per_s = (kMinLinkErrors + 1) / window_s;
  EXPECT_EQ(RunNet(over).size(), 1u);
}

TEST(Network, ALinkDownIsAFaultAndASmallSlowdownIsNot) {
  NetSpec down;
  down.bad = "n2/mlx5_0";
  down.errors_per_s = 0;
  down.downs = 1;
  auto out = RunNet(down);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].subjects.resource, "n2/mlx5_0");
  NetSpec mild = down;
  mild.slowdown = kCollectiveSlowdownFactor - 0.05;
  EXPECT_TRUE(RunNet(mild).empty());
}

TEST(Network, LinkErrorRateFactorEdge) {
  // A port that always had errors at ~1/s (and one background error) is not degrading at 4.7/s,
  // it is at 5.3/s.
  for (const auto& [after, fires] : {std::pair{kLinkErrorRateFactor - 0.3, false}, std::pair{kLinkErrorRateFactor + 0.3, true}}) {
    NetSpec s;
    s.bad = "n1/mlx5_1";
    s.errors_per_s = after - 1;  // on top of the 1/s history below
    s.history_errors_per_s = 1;
    EXPECT_EQ(RunNet(s).size(), fires ? 1u : 0u) << after;
  }
}

TEST(Network, DowntrainedRateEdge) {
  for (const auto& [share, fires] : {std::pair{kDowntrainedShare + 0.01, false}, std::pair{kDowntrainedShare - 0.01, true}}) {
    NetSpec s;
    s.bad = "n2/mlx5_1";
    s.errors_per_s = 0;
    s.rate_share = share;
    EXPECT_EQ(RunNet(s).size(), fires ? 1u : 0u) << share;
  }
}

TEST(Network, XmitWaitFactorEdge) {
  // Ports that always waited 1000/s: 4.9x that is the usual mess, 5.1x is congestion.
  for (const auto& [factor, fires] : {std::pair{kXmitWaitFactor - 0.1, false}, std::pair{kXmitWaitFactor + 0.1, true}}) {
    NetSpec s;
    s.history_wait_per_s = 1000;
    s.wait_per_s = 1000 * factor;
    EXPECT_EQ(RunNet(s).size(), fires ? 1u : 0u) << factor;
  }
}

TEST(Network, XmitWaitOnCleanPortsIsCongestion) {
  NetSpec s;
  s.wait_per_s = 1e5;
  auto out = RunNet(s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cause, Cause::kNetwork);
  EXPECT_TRUE(out[0].subjects.resource.starts_with("fabric via ")) << out[0].subjects.resource;
  EXPECT_EQ(out[0].subjects.ranks.size(), 4u);
  EXPECT_EQ(Collectors(out[0]), (std::set<std::string>{"node", "probes"}));
  // Too little wait to be congestion.
  s.wait_per_s = (kMinXmitWaitTicks - 1) / (static_cast<double>(kNetWindow) / 1e9);
  EXPECT_TRUE(RunNet(s).empty());
}

TEST(Network, CleanFabricGivesNothing) {
  EXPECT_TRUE(RunNet(NetSpec{}).empty());  // slowed steps, no port evidence: not the network
  NetSpec flat;
  flat.slowdown = 1.0;
  flat.wait_per_s = 1e5;  // waits rising but nobody slowed
  EXPECT_TRUE(RunNet(flat).empty());
}

}  // namespace
}  // namespace ithbat::detect
