// Detectors of the GPU, numerics and hang families on synthetic stores: hardware faults (Xid
// classes, ECC and remap deltas, the first fault across GPUs), divergence (spike, hardware
// innocence, the rerun's confirmation), no learning, and hangs — each threshold at its edge and
// each look-alike that must not fire.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/core.h>

#include "core/metric.h"
#include "detect/detector.h"
#include "detect/gpu/hardware_faults.h"
#include "detect/hang/hang.h"
#include "detect/numerics/divergence.h"
#include "detect/numerics/no_learning.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

std::string Uuid(const std::string& node, int gpu) { return fmt::format("GPU-{}-{}", node, gpu); }

testutil::Labels RankLabels(const std::string& job, int rank, int pid, const std::string& node, int gpu, int world) {
  return {{"job_id", job},
          {"rank", std::to_string(rank)},
          {"local_rank", std::to_string(gpu)},
          {"world_size", std::to_string(world)},
          {"pid", std::to_string(pid)},
          {"gpu", std::to_string(gpu)},
          {"gpu_uuid", Uuid(node, gpu)}};
}

testutil::Labels GpuLabels(const std::string& node, int gpu) {
  return {{"gpu", std::to_string(gpu)}, {"gpu_uuid", Uuid(node, gpu)}};
}

testutil::Labels With(testutil::Labels l, const std::string& k, const std::string& v) {
  l.emplace_back(k, v);
  return l;
}

std::vector<double> Ramp(int n, double from, double step) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(from + step * i);
  return v;
}
std::vector<double> Const(int n, double x) { return std::vector<double>(n, x); }

// One job: `ranks` processes on `node` (GPU i = rank i, pid = pid0 + i), launches and NCCL
// calls growing every second for `secs` seconds from `start`, GPU telemetry of each GPU clean.
struct JobSpec {
  std::string id = "job-a";
  std::string node = "n1";
  int ranks = 4;
  int pid0 = 100;
  int gpu0 = 0;
  int world = -1;
  int secs = 120;
  TimeNs start = kT0;
};

void AddJob(SyntheticFleet& f, const JobSpec& s) {
  const int world = s.world > 0 ? s.world : s.ranks;
  for (int r = 0; r < s.ranks; ++r) {
    const int gpu = s.gpu0 + r;
    auto l = RankLabels(s.id, r, s.pid0 + r, s.node, gpu, world);
    f.Series(s.node, "ithbat_probe_launches_total", MetricType::kCounter, With(l, "api", "cuLaunchKernel"),
             Ramp(s.secs, 100, 100), s.start);
    f.Series(s.node, "ithbat_probe_nccl_ops_total", MetricType::kCounter, With(l, "op", "all_reduce"),
             Ramp(s.secs, 1, 1), s.start);
  }
}

// Clean NVML telemetry for GPUs [gpu0, gpu0 + n) of `node` over [start, start + secs).
void AddGpus(SyntheticFleet& f, const std::string& node, int gpu0, int n, int secs, TimeNs start = kT0,
             double remapped = 0) {
  for (int g = gpu0; g < gpu0 + n; ++g) {
    const auto l = GpuLabels(node, g);
    f.Series(node, "ithbat_gpu_info", MetricType::kGauge,
             With(With(l, "model", "H100"), "pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x10 + g)), Const(secs, 1),
             start);
    f.Series(node, "ithbat_gpu_xid_errors_total", MetricType::kCounter, l, Const(secs, 0), start);
    f.Series(node, "ithbat_gpu_ecc_errors_total", MetricType::kCounter,
             With(With(l, "type", "uncorrected"), "counter", "volatile"), Const(secs, 0), start);
    f.Series(node, "ithbat_gpu_remapped_rows", MetricType::kGauge, With(l, "kind", "uncorrected"),
             Const(secs, remapped), start);
    f.Series(node, "ithbat_gpu_row_remap_pending", MetricType::kGauge, l, Const(secs, 0), start);
    f.Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge, l, Const(secs, 0.9), start);
  }
}

// Logged losses of rank 0 of `job` (pid) at one step per second from `t0`, first step `step0`.
void AddLosses(SyntheticFleet& f, const std::string& node, const std::string& job, int pid,
               const std::vector<double>& losses, int64_t step0 = 1, TimeNs t0 = kT0) {
  for (size_t i = 0; i < losses.size(); ++i) {
    f.Loss(node, pid, step0 + static_cast<int64_t>(i), losses[i], t0 + static_cast<TimeNs>(i) * kS, job, 0);
  }
}

void AddMetric(SyntheticFleet& f, const std::string& node, const std::string& job, int pid, const std::string& name,
               const std::vector<double>& values, int64_t step0 = 1, TimeNs t0 = kT0) {
  for (size_t i = 0; i < values.size(); ++i) {
    Event e;
    e.time = t0 + static_cast<TimeNs>(i) * kS;
    e.kind = EventKind::kTrainMetric;
    e.identity.job = job;
    e.identity.pid = pid;
    e.identity.rank = 0;
    e.source = "joblog";
    e.step = step0 + static_cast<int64_t>(i);
    e.name = name;
    e.value = values[i];
    f.AddEvent(node, std::move(e));
  }
}

// A healthy decaying loss: 10 → ~3.
std::vector<double> Decay(int n, double initial = 10, double final_loss = 3, double tau = 40) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(final_loss + (initial - final_loss) * std::exp(-i / tau));
  return v;
}

struct Run {
  std::vector<Finding> findings;
  std::vector<Finding> Of(Cause c) const {
    std::vector<Finding> out;
    for (const auto& f : findings) {
      if (f.cause == c) out.push_back(f);
    }
    return out;
  }
};

Run RunOne(FleetView& v, DetectorFn fn, TimeNs now, TimeNs from = kT0 - 60 * kS) {
  const FleetView clamped = v.AsOf(now);
  const auto jobs = DiscoverJobs(clamped, from, now);
  DetectInput in{clamped, jobs, from, now};
  return {fn(in)};
}

std::vector<Finding> RunAll(FleetView& v, TimeNs now) {
  std::vector<Finding> all;
  for (DetectorFn fn : {&DetectHardwareFaults, &DetectDivergence, &DetectNoLearning, &DetectHang}) {
    auto r = RunOne(v, fn, now);
    all.insert(all.end(), r.findings.begin(), r.findings.end());
  }
  return all;
}

// ---------------------------------------------------------------- hardware faults

// An 8-GPU job; GPU `bad` takes an uncorrectable ECC error + Xid `code` at t0 + `at` s.
FleetView HardwareWorld(int code, int bad = 5, int at = 60, bool kmsg = true, bool nan_loss = true,
                        bool peers_timeout = true) {
  SyntheticFleet f;
  JobSpec s;
  s.ranks = 8;
  AddJob(f, s);
  for (int g = 0; g < 8; ++g) {
    const auto l = GpuLabels("n1", g);
    const bool hit = g == bad;
    std::vector<double> xid(120, 0), ecc(120, 0);
    for (int i = at; i < 120 && hit; ++i) xid[i] = 1;
    const bool hw = ClassifyXid(code) == XidClass::kHardware;
    for (int i = at; i < 120 && hit && hw; ++i) ecc[i] = 1;
    f.Series("n1", "ithbat_gpu_info", MetricType::kGauge,
             With(With(l, "model", "H100"), "pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x10 + g)), Const(120, 1));
    f.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, l, xid);
    f.Series("n1", "ithbat_gpu_ecc_errors_total", MetricType::kCounter,
             With(With(l, "type", "uncorrected"), "counter", "volatile"), ecc);
  }
  Event x;
  x.time = kT0 + at * kS;
  x.kind = EventKind::kXid;
  x.source = "nvml";
  x.identity.gpu_index = bad;
  x.name = "xid";
  x.value = code;
  f.AddEvent("n1", x);
  if (kmsg) {
    Event k;
    k.time = kT0 + at * kS + kS / 2;
    k.kind = EventKind::kXid;
    k.source = "kmsg";
    k.value = code;
    k.attrs = {{"pci", fmt::format("00000000:{:02x}:00.0", 0x10 + bad)}};
    f.AddEvent("n1", k);
  }
  std::vector<double> loss = Decay(100);
  if (nan_loss) {
    for (int i = at + 1; i < 100; ++i) loss[i] = NAN;
  }
  AddLosses(f, "n1", "job-a", 100, loss);
  if (peers_timeout) {
    for (int r = 1; r < 8; ++r) {
      Event e;
      e.time = kT0 + (at + 30) * kS;
      e.kind = EventKind::kError;
      e.name = "nccl_timeout";
      e.identity.job = "job-a";
      e.identity.rank = r;
      e.identity.pid = 100 + r;
      e.source = "joblog";
      f.AddEvent("n1", e);
    }
  }
  return f.TakeView();
}

TEST(HardwareFaults, XidClassesFollowTheCatalog) {
  for (int c : {13, 31, 43}) EXPECT_EQ(ClassifyXid(c), XidClass::kJob) << c;
  for (int c : {48, 63, 64, 74, 79, 92, 94, 95}) EXPECT_EQ(ClassifyXid(c), XidClass::kHardware) << c;
  for (int c : {119, 120}) EXPECT_EQ(ClassifyXid(c), XidClass::kDriver) << c;
  for (int c : {45, 154, 999}) EXPECT_EQ(ClassifyXid(c), XidClass::kUnknown) << c;
}

TEST(HardwareFaults, UncorrectableEccAndXid48OnOneGpuIsGpuHardwareWithConsequences) {
  FleetView v = HardwareWorld(48);
  auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.verdict, Verdict::kInfrastructure);
  EXPECT_EQ(f.cause, Cause::kGpuHardware);
  EXPECT_EQ(f.subjects.job, "job-a");
  ASSERT_EQ(f.subjects.gpus.size(), 1u);
  EXPECT_EQ(f.subjects.gpus[0].index, 5);
  EXPECT_EQ(f.subjects.gpus[0].uuid, Uuid("n1", 5));
  ASSERT_EQ(f.subjects.ranks.size(), 1u);
  EXPECT_EQ(f.subjects.ranks[0].rank, 5);
  std::set<std::string> collectors, signals;
  for (const auto& e : f.evidence) {
    collectors.insert(e.collector);
    signals.insert(e.signal);
  }
  EXPECT_TRUE(collectors.count("gpu") && collectors.count("kmsg") && collectors.count("joblog"));
  EXPECT_TRUE(signals.count("nccl_timeout"));  // the peers' timeouts are evidence, not findings
  EXPECT_EQ(f.window.start, kT0 + 60 * kS);
  EXPECT_LE(f.provable_at, kT0 + 62 * kS);  // within seconds of the fault
  EXPECT_GT(f.lost_gpu_seconds, 0);
  EXPECT_NE(f.summary.find("uncorrectable ECC"), std::string::npos) << f.summary;
  // Divergence leaves a loss that goes NaN with moving counters to the fault.
  EXPECT_TRUE(RunOne(v, &DetectDivergence, kT0 + 119 * kS).findings.empty());
  // A window open since the beginning of time reads the same (no overflow looking back).
  auto all_time = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS, kMinTime);
  ASSERT_EQ(all_time.findings.size(), 1u);
  EXPECT_NE(all_time.findings[0].summary.find("uncorrectable ECC"), std::string::npos) << all_time.findings[0].summary;
}

TEST(HardwareFaults, NvmlAloneIsInconclusive) {
  FleetView v = HardwareWorld(48, 5, 60, /*kmsg=*/false, /*nan_loss=*/false, /*peers_timeout=*/false);
  auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].verdict, Verdict::kInconclusive);
}

TEST(HardwareFaults, JobClassXidIsNotHardware) {
  for (int code : {13, 31, 43}) {
    FleetView v = HardwareWorld(code);
    EXPECT_TRUE(RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS).findings.empty()) << code;
  }
}

TEST(HardwareFaults, DriverXidIsDriver) {
  FleetView v = HardwareWorld(119);
  auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].cause, Cause::kDriver);
  EXPECT_EQ(r.findings[0].verdict, Verdict::kInfrastructure);
}

TEST(HardwareFaults, ThePreExistingRemapIsHistoryAndANewOneIsAFault) {
  {
    SyntheticFleet f;
    AddJob(f, {});
    AddGpus(f, "n1", 0, 4, 120, kT0, /*remapped=*/1);  // constant from the first sample
    f.Series("n1", "ithbat_gpu_row_remap_failure", MetricType::kGauge, GpuLabels("n1", 2), Const(120, 1));
    AddLosses(f, "n1", "job-a", 100, Decay(100));
    FleetView v = f.TakeView();
    EXPECT_TRUE(RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS).findings.empty());
    EXPECT_TRUE(RunAll(v, kT0 + 119 * kS).empty());
  }
  {
    SyntheticFleet f;
    AddJob(f, {});
    AddGpus(f, "n1", 0, 2, 120);
    std::vector<double> pending(120, 0);
    for (int i = 50; i < 120; ++i) pending[i] = 1;
    f.Series("n1", "ithbat_gpu_row_remap_pending", MetricType::kGauge, GpuLabels("n1", 3), pending);
    std::vector<double> loss = Decay(100);
    for (int i = 52; i < 100; ++i) loss[i] = NAN;
    AddLosses(f, "n1", "job-a", 100, loss);
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].cause, Cause::kGpuHardware);
    EXPECT_EQ(r.findings[0].verdict, Verdict::kInfrastructure);  // NVML + the job's NaN loss
    ASSERT_EQ(r.findings[0].subjects.gpus.size(), 1u);
    EXPECT_EQ(r.findings[0].subjects.gpus[0].index, 3);
  }
}

TEST(HardwareFaults, TheFirstFaultAcrossNodesIsTheCauseAndLaterOnesConsequences) {
  SyntheticFleet f;
  AddJob(f, {.node = "n1", .ranks = 2, .pid0 = 100, .world = 4});
  AddJob(f, {.node = "n2", .ranks = 2, .pid0 = 200, .world = 4});
  // Ranks 0-1 on n1 and 2-3 on n2: re-label the n2 job's ranks.
  for (const std::string node : {"n1", "n2"}) {
    for (int g = 0; g < 2; ++g) {
      std::vector<double> xid(120, 0);
      const int at = node == "n2" && g == 1 ? 40 : (node == "n1" && g == 0 ? 50 : -1);
      for (int i = std::max(at, 0); i < 120 && at >= 0; ++i) xid[i] = 1;
      f.Series(node, "ithbat_gpu_xid_errors_total", MetricType::kCounter, GpuLabels(node, g), xid);
      if (at >= 0) {
        Event x;
        x.time = kT0 + at * kS;
        x.kind = EventKind::kXid;
        x.source = "nvml";
        x.identity.gpu_index = g;
        x.value = at == 40 ? 79 : 45;  // n2:1 fell off the bus; n1:0 cleaned up after it
        f.AddEvent(node, x);
        Event k = x;
        k.source = "kmsg";
        k.identity.gpu_index = g;
        f.AddEvent(node, k);
      }
    }
  }
  FleetView v = f.TakeView();
  auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  ASSERT_EQ(r.findings[0].subjects.gpus.size(), 1u);
  EXPECT_EQ(r.findings[0].subjects.gpus[0].node, "n2");
  EXPECT_EQ(r.findings[0].subjects.gpus[0].index, 1);
  EXPECT_EQ(r.findings[0].cause, Cause::kGpuHardware);
}

TEST(HardwareFaults, TheJobsOutputCountsAsConsequenceWithinItsWindow) {
  // NVML saw Xid 48 on GPU 1 (no kernel log); the job's first NCCL timeout comes kConsequenceNs
  // after it (a consequence: infrastructure) or a second later (unrelated: NVML alone).
  for (int late : {0, 1}) {
    SyntheticFleet f;
    const int secs = static_cast<int>(kConsequenceNs / kS) + 100;
    AddJob(f, {.secs = secs});
    std::vector<double> xid(secs, 0);
    for (int i = 50; i < secs; ++i) xid[i] = 1;
    f.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, GpuLabels("n1", 1), xid);
    Event x;
    x.time = kT0 + 50 * kS;
    x.kind = EventKind::kXid;
    x.source = "nvml";
    x.identity.gpu_index = 1;
    x.value = 48;
    f.AddEvent("n1", x);
    Event e;
    e.time = kT0 + 50 * kS + kConsequenceNs + late * kS;
    e.kind = EventKind::kError;
    e.name = "nccl_timeout";
    e.identity.job = "job-a";
    e.identity.rank = 0;
    e.identity.pid = 100;
    f.AddEvent("n1", e);
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectHardwareFaults, kT0 + (secs - 1) * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].verdict, late == 0 ? Verdict::kInfrastructure : Verdict::kInconclusive) << late;
  }
}

TEST(HardwareFaults, AGpuLostUnderNoJobIsStillAFinding) {
  // GPU 2 falls off the bus (NVML: lost; kernel log: Xid 79 with its PCI address), no job on it.
  SyntheticFleet f;
  AddJob(f, {.ranks = 2});
  AddGpus(f, "n1", 0, 4, 120);
  std::vector<double> lost(120, 0);
  for (int i = 70; i < 120; ++i) lost[i] = 1;
  f.Series("n1", "ithbat_gpu_lost", MetricType::kGauge, GpuLabels("n1", 2), lost);
  Event k;
  k.time = kT0 + 70 * kS;
  k.kind = EventKind::kXid;
  k.source = "kmsg";
  k.value = 79;
  k.attrs = {{"pci", "00000000:12:00.0"}};  // AddGpus: GPU 2 at bus 0x12
  f.AddEvent("n1", k);
  FleetView v = f.TakeView();
  auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].subjects.job, "");
  EXPECT_EQ(r.findings[0].verdict, Verdict::kInfrastructure);
  EXPECT_EQ(r.findings[0].cause, Cause::kGpuHardware);
  ASSERT_EQ(r.findings[0].subjects.gpus.size(), 1u);
  EXPECT_EQ(r.findings[0].subjects.gpus[0].index, 2);
  EXPECT_EQ(r.findings[0].subjects.gpus[0].uuid, Uuid("n1", 2));
  EXPECT_NE(r.findings[0].summary.find("GPU lost"), std::string::npos);
}

TEST(HardwareFaults, SameIncidentEdge) {
  // Two GPUs faulting kSameIncidentNs apart are one cause; one second more and the later one is
  // a consequence.
  for (int gap : {2, 3}) {
    SyntheticFleet f;
    AddJob(f, {});
    for (int g = 0; g < 4; ++g) {
      std::vector<double> xid(120, 0);
      const int at = g == 0 ? 50 : (g == 1 ? 50 + gap : -1);
      for (int i = std::max(at, 0); i < 120 && at >= 0; ++i) xid[i] = 1;
      f.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, GpuLabels("n1", g), xid);
      if (at >= 0) {
        Event k;
        k.time = kT0 + at * kS;
        k.kind = EventKind::kXid;
        k.source = "kmsg";
        k.identity.gpu_index = g;
        k.value = 48;
        f.AddEvent("n1", k);
      }
    }
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectHardwareFaults, kT0 + 119 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].subjects.gpus.size(), gap * kS <= kSameIncidentNs ? 2u : 1u) << gap;
  }
}

// ---------------------------------------------------------------- divergence

// Losses: decay, then drift from `drift` and a spike to `spike_value` at step `spike` (both 1-based
// steps from `step0`); `n` points.
std::vector<double> Diverging(int n, int spike, double spike_value = NAN, int drift = -1) {
  std::vector<double> v = Decay(n);
  if (drift > 0) {
    for (int i = drift; i < spike && i < n; ++i) v[i] = v[drift - 1] * (1 + 0.01 * (i - drift + 1));
  }
  for (int i = spike - 1; i < n; ++i) v[i] = spike_value;
  return v;
}

TEST(Divergence, SpikeWithCleanCountersIsRecipeSuspected) {
  SyntheticFleet f;
  AddJob(f, {.secs = 150});
  AddGpus(f, "n1", 0, 4, 150, kT0, /*remapped=*/2);  // an old remap, constant: history
  AddLosses(f, "n1", "job-a", 100, Diverging(120, 100, NAN, 80));
  AddMetric(f, "n1", "job-a", 100, "grad_norm", Ramp(99, 1.0, 0.05));
  FleetView v = f.TakeView();
  auto r = RunOne(v, &DetectDivergence, kT0 + 149 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  const Finding& x = r.findings[0];
  EXPECT_EQ(x.verdict, Verdict::kJob);
  EXPECT_EQ(x.cause, Cause::kRecipeNumerics);
  EXPECT_TRUE(x.provisional);
  EXPECT_EQ(x.provable_at, kT0 + 99 * kS);  // at the spike
  std::set<std::string> collectors, signals;
  for (const auto& e : x.evidence) {
    collectors.insert(e.collector);
    signals.insert(e.signal);
  }
  EXPECT_TRUE(collectors.count("gpu") && collectors.count("joblog"));
  EXPECT_TRUE(signals.count("loss_drift") && signals.count("grad_norm"));
  // Nobody else fires on it.
  EXPECT_TRUE(RunOne(v, &DetectHardwareFaults, kT0 + 149 * kS).findings.empty());
  EXPECT_TRUE(RunOne(v, &DetectNoLearning, kT0 + 149 * kS).findings.empty());
}

TEST(Divergence, SpikeFactorEdgeAndDebounce) {
  // The lowest before the spike is Decay's value at step 99; exactly 3× is not a spike, just
  // above is, and the next point holds it (the spike level continues here).
  const std::vector<double> base = Decay(98);
  const double low = base.back();
  for (double factor : {kLossSpikeFactor, kLossSpikeFactor * 1.01}) {
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddGpus(f, "n1", 0, 4, 150);
    std::vector<double> l = base;
    for (int i = 0; i < 10; ++i) l.push_back(low * factor);
    AddLosses(f, "n1", "job-a", 100, l);
    FleetView v = f.TakeView();
    EXPECT_EQ(RunOne(v, &DetectDivergence, kT0 + 149 * kS).findings.size(), factor > kLossSpikeFactor ? 1u : 0u)
        << factor;
  }
  // A first loss printed as 0 is no lowest to spike from.
  {
    std::vector<Event> l;
    for (int i = 0; i < 20; ++i) {
      Event e;
      e.step = i + 1;
      e.value = i == 0 ? 0.0 : 5.0 - 0.01 * i;
      l.push_back(e);
    }
    EXPECT_FALSE(FirstDivergence(l, kLossSpikeFactor).has_value());
  }
  // A spike that decays over several steps (a damaged state recovering) is a divergence: the
  // next point must still be above kSpikeHoldFactor × the lowest.
  for (double hold : {kSpikeHoldFactor, kSpikeHoldFactor * 1.02}) {
    SyntheticFleet g;
    AddJob(g, {.secs = 150});
    AddGpus(g, "n1", 0, 4, 150);
    std::vector<double> l = Decay(120);
    const double lowest = l[99];
    l[100] = lowest * 3.5;
    l[101] = lowest * hold;
    for (int i = 102; i < 120; ++i) l[i] = lowest;
    AddLosses(g, "n1", "job-a", 100, l);
    FleetView v = g.TakeView();
    auto r = RunOne(v, &DetectDivergence, kT0 + 149 * kS);
    EXPECT_EQ(r.findings.size(), hold > kSpikeHoldFactor ? 1u : 0u) << hold;
    if (!r.findings.empty()) {
      EXPECT_EQ(r.findings[0].provable_at, kT0 + 101 * kS);  // confirmed by the next point
    }
    // Before the next point is logged it is not confirmed yet.
    EXPECT_TRUE(RunOne(v, &DetectDivergence, kT0 + 100 * kS).findings.empty());
  }
  // One spiking point that recovers is noise.
  SyntheticFleet f;
  AddJob(f, {.secs = 150});
  AddGpus(f, "n1", 0, 4, 150);
  std::vector<double> l = Decay(120);
  l[100] = l[99] * 5;
  AddLosses(f, "n1", "job-a", 100, l);
  FleetView v = f.TakeView();
  EXPECT_TRUE(RunOne(v, &DetectDivergence, kT0 + 149 * kS).findings.empty());
}

TEST(Divergence, MovingSoftCountersMakeItInconclusiveAndHardOnesLeaveItToTheFault) {
  {  // NVLink errors on one GPU over the run: not innocent, not guilty
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddGpus(f, "n1", 0, 4, 150);
    f.Series("n1", "ithbat_gpu_nvlink_errors_total", MetricType::kCounter, With(GpuLabels("n1", 1), "counter", "replay"),
             Ramp(150, 0, 1));
    AddLosses(f, "n1", "job-a", 100, Diverging(120, 100));
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectDivergence, kT0 + 149 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].verdict, Verdict::kInconclusive);
    EXPECT_NE(r.findings[0].cause, Cause::kRecipeNumerics);
  }
  {  // uncorrectable ECC moving: hardware_faults' finding, not ours
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddGpus(f, "n1", 0, 3, 150);
    const auto l = GpuLabels("n1", 3);
    std::vector<double> ecc(150, 0);
    for (int i = 98; i < 150; ++i) ecc[i] = 2;
    f.Series("n1", "ithbat_gpu_ecc_errors_total", MetricType::kCounter,
             With(With(l, "type", "uncorrected"), "counter", "volatile"), ecc);
    f.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, l, Const(150, 0));
    AddLosses(f, "n1", "job-a", 100, Diverging(120, 100));
    FleetView v = f.TakeView();
    EXPECT_TRUE(RunOne(v, &DetectDivergence, kT0 + 149 * kS).Of(Cause::kRecipeNumerics).empty());
    auto hw = RunOne(v, &DetectHardwareFaults, kT0 + 149 * kS);
    ASSERT_EQ(hw.findings.size(), 1u);
    EXPECT_EQ(hw.findings[0].cause, Cause::kGpuHardware);
    EXPECT_EQ(hw.findings[0].verdict, Verdict::kInfrastructure);  // NVML + the NaN loss
  }
}

// The original on n1 GPUs 0-3 from step 101; a rerun on n2 from `rerun_step0`, diverging at
// `rerun_spike` (or never: -1), `rerun_points` points.
FleetView RerunWorld(int rerun_spike, int rerun_points, double rerun_scale = 1.0, const std::string& rerun_node = "n2",
                     int rerun_gpu0 = 0, bool original_saved_resume_point = false, int64_t rerun_first_step = 101) {
  SyntheticFleet f;
  const TimeNs t_orig = kT0, t_rerun = kT0 + 200 * kS;
  AddJob(f, {.id = "orig", .node = "n1", .ranks = 4, .pid0 = 100, .secs = 150, .start = t_orig});
  AddGpus(f, "n1", 0, 4, 500, t_orig);
  AddJob(f, {.id = "rerun", .node = rerun_node, .ranks = 4, .pid0 = 300, .gpu0 = rerun_gpu0, .secs = 150, .start = t_rerun});
  if (rerun_node != "n1") AddGpus(f, rerun_node, rerun_gpu0, 4, 300, t_rerun);
  // Original: resumed at step 101 (from a checkpoint at 100), diverges at step 201 (index 100).
  std::vector<double> o = Decay(130);
  for (int i = 100; i < 130; ++i) o[i] = NAN;
  AddLosses(f, "n1", "orig", 100, o, 101, t_orig);
  if (original_saved_resume_point) {
    Event c;
    c.time = t_orig + 20 * kS;
    c.kind = EventKind::kCheckpointEnd;
    c.identity.job = "orig";
    c.identity.pid = 100;
    c.identity.rank = 0;
    c.step = 120;
    f.AddEvent("n1", c);
  }
  std::vector<double> r = Decay(rerun_points);
  for (auto& x : r) x *= rerun_scale;
  const int64_t r_step0 = original_saved_resume_point ? 121 : rerun_first_step;
  r.erase(r.begin(), r.begin() + (r_step0 - 101));
  for (int i = 0; i < static_cast<int>(r.size()); ++i) {
    if (rerun_spike > 0 && r_step0 + i >= rerun_spike) r[i] = NAN;
  }
  AddLosses(f, rerun_node, "rerun", 300, r, r_step0, t_rerun);
  return f.TakeView();
}

TEST(Divergence, RerunDivergingAtTheSamePointConfirmsTheRecipe) {
  for (int spike : {201 + static_cast<int>(kDivergenceAlignSteps), 201 + static_cast<int>(kDivergenceAlignSteps) + 1}) {
    FleetView v = RerunWorld(spike, 140);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    auto recipe = r.Of(Cause::kRecipeNumerics);
    ASSERT_EQ(recipe.size(), spike <= 201 + kDivergenceAlignSteps ? 1u : 2u) << spike;
    EXPECT_EQ(recipe[0].subjects.job, "orig");
    // Within the align steps: confirmed, and the rerun is its evidence, not a second finding.
    EXPECT_EQ(recipe[0].provisional, spike > 201 + kDivergenceAlignSteps) << spike;
  }
}

TEST(Divergence, CleanRerunPastThePointIsSilentDataCorruption) {
  // The rerun's loss must reach step 201 + kSdcCleanPastSteps: one point short stays provisional.
  for (int points : {100 + static_cast<int>(kSdcCleanPastSteps), 101 + static_cast<int>(kSdcCleanPastSteps)}) {
    FleetView v = RerunWorld(-1, points);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u) << points;
    const Finding& x = r.findings[0];
    if (101 + points - 1 >= 201 + kSdcCleanPastSteps) {
      EXPECT_EQ(x.cause, Cause::kSilentDataCorruption) << points;
      EXPECT_EQ(x.verdict, Verdict::kInfrastructure);
      EXPECT_FALSE(x.provisional);
      EXPECT_EQ(x.subjects.gpus.size(), 4u);
      for (const auto& g : x.subjects.gpus) EXPECT_EQ(g.node, "n1");
    } else {
      EXPECT_EQ(x.cause, Cause::kRecipeNumerics) << points;
      EXPECT_TRUE(x.provisional);
    }
  }
}

TEST(Divergence, ARerunThatIsNotTheSameRecipeOrNotOnOtherGpusConfirmsNothing) {
  // Loss curve off by more than the tolerance: another recipe.
  {
    FleetView v = RerunWorld(-1, 160, 1 + kLossMatchTolerance * 1.5);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].cause, Cause::kRecipeNumerics);
    EXPECT_TRUE(r.findings[0].provisional);
  }
  // Within the tolerance: the same recipe.
  {
    FleetView v = RerunWorld(-1, 160, 1 + kLossMatchTolerance * 0.5);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].cause, Cause::kSilentDataCorruption);
  }
  // The rerun shares a GPU with the original: no confirmation.
  {
    FleetView v = RerunWorld(-1, 160, 1.0, "n1", 3);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_TRUE(r.findings[0].provisional);
  }
  // The rerun resumed from the suspect run's own checkpoint: no confirmation.
  {
    FleetView v = RerunWorld(-1, 160, 1.0, "n2", 0, /*original_saved_resume_point=*/true);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_TRUE(r.findings[0].provisional);
  }
}

TEST(Divergence, TheRecipeMatchNeedsEnoughCommonSteps) {
  // The original diverges at step 201: its steps below 201 − kDivergenceAlignSteps are compared.
  // A rerun from step 191 − kMinMatchPoints shares exactly kMinMatchPoints of them.
  const int64_t edge = 201 - kDivergenceAlignSteps - kMinMatchPoints;
  for (int64_t first : {edge, edge + 1}) {
    FleetView v = RerunWorld(-1, 160, 1.0, "n2", 0, false, first);
    auto r = RunOne(v, &DetectDivergence, kT0 + 499 * kS);
    ASSERT_EQ(r.findings.size(), 1u) << first;
    EXPECT_EQ(r.findings[0].cause, first == edge ? Cause::kSilentDataCorruption : Cause::kRecipeNumerics) << first;
  }
}

TEST(Divergence, ThermalSignsCountFromTheDebounce) {
  for (int hot : {static_cast<int>(kSoftThermalSamples) - 1, static_cast<int>(kSoftThermalSamples)}) {
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddGpus(f, "n1", 0, 4, 150);
    std::vector<double> active(150, 0);
    for (int i = 0; i < hot; ++i) active[20 + i] = 1;
    f.Series("n1", "ithbat_gpu_clock_event_active", MetricType::kGauge,
             With(GpuLabels("n1", 2), "reason", "hw_thermal_slowdown"), active);
    // The power cap is what every loaded GPU shows: never a sign.
    f.Series("n1", "ithbat_gpu_clock_event_active", MetricType::kGauge, With(GpuLabels("n1", 1), "reason", "sw_power_cap"),
             Const(150, 1));
    AddLosses(f, "n1", "job-a", 100, Diverging(120, 100));
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectDivergence, kT0 + 149 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].verdict, hot >= kSoftThermalSamples ? Verdict::kInconclusive : Verdict::kJob) << hot;
  }
}

// ---------------------------------------------------------------- no learning

TEST(NoLearning, FlatLossWithZeroLrWhileRunning) {
  SyntheticFleet f;
  AddJob(f, {.secs = 150});
  AddGpus(f, "n1", 0, 4, 150);
  std::vector<double> l;
  for (int i = 0; i < 40; ++i) l.push_back(2.3 + 0.02 * ((i * 7) % 5 - 2));
  AddLosses(f, "n1", "job-a", 100, l);
  AddMetric(f, "n1", "job-a", 100, "lr", Const(40, 0));
  FleetView v = f.TakeView();
  auto r = RunOne(v, &DetectNoLearning, kT0 + 149 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].verdict, Verdict::kJob);
  EXPECT_EQ(r.findings[0].cause, Cause::kNoLearning);
  std::set<std::string> collectors;
  for (const auto& e : r.findings[0].evidence) collectors.insert(e.collector);
  EXPECT_TRUE(collectors.count("joblog") && collectors.count("probes"));
  // Seven points cannot show a trend.
  auto early = RunOne(v, &DetectNoLearning, kT0 + 6 * kS);
  EXPECT_TRUE(early.findings.empty());
  auto eight = RunOne(v, &DetectNoLearning, kT0 + 7 * kS);
  EXPECT_EQ(eight.findings.size(), 1u);
}

TEST(NoLearning, DropEdgeAndSpanWithoutLr) {
  // No lr logged: a flat loss must span kNoLearningMinSpanSteps; the drop edge at 5%.
  auto world = [](double drop, int points) {
    SyntheticFleet f;
    AddJob(f, {.secs = 200});
    std::vector<double> l;
    const int third = points / 3;
    for (int i = 0; i < points; ++i) l.push_back(i < points - third ? 3.0 : 3.0 * (1 - drop));
    // First third at 3.0, last third at 3 × (1 − drop).
    AddLosses(f, "n1", "job-a", 100, l);
    return f.TakeView();
  };
  {
    FleetView v = world(kNoLearningMaxDrop * 0.9, 150);
    EXPECT_EQ(RunOne(v, &DetectNoLearning, kT0 + 199 * kS).findings.size(), 1u);
  }
  {
    FleetView v = world(kNoLearningMaxDrop * 1.1, 150);
    EXPECT_TRUE(RunOne(v, &DetectNoLearning, kT0 + 199 * kS).findings.empty());
  }
  {  // flat, but only kNoLearningMinSpanSteps − 1 steps: a warm-up may look like that
    FleetView v = world(0, static_cast<int>(kNoLearningMinSpanSteps));
    EXPECT_TRUE(RunOne(v, &DetectNoLearning, kT0 + 199 * kS).findings.empty());
    FleetView w = world(0, static_cast<int>(kNoLearningMinSpanSteps) + 1);
    EXPECT_EQ(RunOne(w, &DetectNoLearning, kT0 + 199 * kS).findings.size(), 1u);
  }
}

TEST(NoLearning, AResumedConvergingRunAndADriftingLossAreNotNoLearning) {
  // Resumed at step 501 near convergence: its loss falls ~1% over 300 steps with a live lr.
  auto resumed = [](int64_t step0, double lr) {
    SyntheticFleet f;
    AddJob(f, {.secs = 400});
    std::vector<double> l;
    for (int i = 0; i < 300; ++i) l.push_back(3.0 - 0.0001 * i);
    AddLosses(f, "n1", "job-a", 100, l, step0);
    AddMetric(f, "n1", "job-a", 100, "lr", Const(300, lr), step0);
    return f.TakeView();
  };
  {
    FleetView v = resumed(501, 1e-4);
    EXPECT_TRUE(RunOne(v, &DetectNoLearning, kT0 + 399 * kS).findings.empty());
  }
  {  // the fresh-start edge: first logged step kFreshRunMaxFirstStep fires, one more does not
    FleetView v = resumed(kFreshRunMaxFirstStep, 1e-4);
    EXPECT_EQ(RunOne(v, &DetectNoLearning, kT0 + 399 * kS).findings.size(), 1u);
    FleetView w = resumed(kFreshRunMaxFirstStep + 1, 1e-4);
    EXPECT_TRUE(RunOne(w, &DetectNoLearning, kT0 + 399 * kS).findings.empty());
  }
  {  // resumed with lr 0: no update reaches the weights, whatever the step
    FleetView v = resumed(501, 0);
    EXPECT_EQ(RunOne(v, &DetectNoLearning, kT0 + 399 * kS).findings.size(), 1u);
  }
  {  // a loss creeping up 20% (drift before a divergence) is not flat
    SyntheticFleet f;
    AddJob(f, {.secs = 400});
    AddLosses(f, "n1", "job-a", 100, Ramp(150, 3.0, 0.004));
    AddMetric(f, "n1", "job-a", 100, "lr", Const(150, 0));
    FleetView v = f.TakeView();
    EXPECT_TRUE(RunOne(v, &DetectNoLearning, kT0 + 399 * kS).findings.empty());
  }
}

TEST(NoLearning, ZeroLossWithDeadGradsAndMemorisation) {
  {
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddLosses(f, "n1", "job-a", 100, Const(20, 0));
    AddMetric(f, "n1", "job-a", 100, "grad_norm", Const(20, NAN));
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectNoLearning, kT0 + 149 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].cause, Cause::kNoLearning);
  }
  {
    SyntheticFleet f;
    AddJob(f, {.secs = 150});
    AddLosses(f, "n1", "job-a", 100, Decay(60, 2.5, 0.001, 5));
    FleetView v = f.TakeView();
    auto r = RunOne(v, &DetectNoLearning, kT0 + 149 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_NE(r.findings[0].summary.find("memoris"), std::string::npos);
  }
}

TEST(NoLearning, HealthyAndSlowButLearningRunsDoNotFire) {
  for (double tau : {40.0, 400.0}) {  // healthy; slow (~20% over 150 steps)
    SyntheticFleet f;
    AddJob(f, {.secs = 200});
    AddGpus(f, "n1", 0, 4, 200);
    AddLosses(f, "n1", "job-a", 100, Decay(150, 10, 3, tau));
    AddMetric(f, "n1", "job-a", 100, "lr", Const(150, 3e-4));
    FleetView v = f.TakeView();
    for (TimeNs now : {kT0 + 10 * kS, kT0 + 60 * kS, kT0 + 199 * kS}) {
      EXPECT_TRUE(RunAll(v, now).empty()) << tau << " at " << (now - kT0) / kS;
    }
  }
}

// ---------------------------------------------------------------- hang

// 8 ranks on two nodes, one NCCL call per second; rank `hung` stops at `stop_s` one call short,
// the others one call later; everything stays sampled to `secs`; peers' GPUs at `peer_util`.
FleetView HangWorld(int hung, int stop_s, int secs, double peer_util = 0.95, bool straggler = false) {
  SyntheticFleet f;
  for (int r = 0; r < 8; ++r) {
    const std::string node = r < 4 ? "n1" : "n2";
    const int gpu = r % 4;
    auto l = RankLabels("job-h", r, 100 + r, node, gpu, 8);
    std::vector<double> ops, util;
    for (int i = 0; i < secs; ++i) {
      double c = std::min(i, stop_s) + 1.0;
      if (straggler) c = r == hung ? std::max(0, i - 1) + 1.0 : i + 1.0;  // one behind, still moving
      else if (r == hung) c = std::min(i, stop_s - 1) + 1.0;
      ops.push_back(c);
      util.push_back(i > stop_s && !straggler ? (r == hung ? 0.0 : peer_util) : 0.9);
    }
    f.Series(node, "ithbat_probe_nccl_ops_total", MetricType::kCounter, With(l, "op", "all_reduce"), ops);
    f.Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge, GpuLabels(node, gpu), util);
    if (r == hung) {
      std::vector<double> lock;
      for (int i = 0; i < secs; ++i) lock.push_back(i > stop_s ? (i - stop_s) * 0.98 : 0);
      f.Series(node, "ithbat_sched_offcpu_seconds_total", MetricType::kCounter,
               With(With(l, "scope", "main"), "class", "lock"), lock);
    }
  }
  return f.TakeView();
}

TEST(Hang, NamesTheRankThatNeverEnteredTheCollective) {
  FleetView v = HangWorld(5, 40, 100);
  // Period 1 s: evident kHangMinStallPeriods (20 s) after the last call at t0+40 s.
  auto early = RunOne(v, &DetectHang, kT0 + 59 * kS);
  EXPECT_TRUE(early.findings.empty());
  auto r = RunOne(v, &DetectHang, kT0 + 61 * kS);
  ASSERT_EQ(r.findings.size(), 1u);
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.verdict, Verdict::kJob);
  EXPECT_EQ(f.cause, Cause::kHang);
  ASSERT_EQ(f.subjects.ranks.size(), 1u);
  EXPECT_EQ(f.subjects.ranks[0].rank, 5);
  EXPECT_EQ(f.subjects.nodes, std::vector<std::string>{"n2"});
  EXPECT_EQ(f.provable_at, kT0 + 60 * kS);
  bool sched = false;
  for (const auto& e : f.evidence) sched = sched || (e.collector == "sched_io" && e.note.find("futex") != std::string::npos);
  EXPECT_TRUE(sched);
}

TEST(Hang, AHangOlderThanTheWindowIsStillAHang) {
  FleetView v = HangWorld(5, 40, 200);
  // The window opens after the last NCCL call: no growth inside it.
  const TimeNs now = kT0 + 199 * kS;
  const FleetView c = v.AsOf(now);
  const TimeNs from = kT0 + 100 * kS;
  const auto jobs = DiscoverJobs(c, from, now);
  DetectInput in{c, jobs, from, now};
  auto r = DetectHang(in);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].cause, Cause::kHang);
  EXPECT_EQ(r[0].subjects.ranks[0].rank, 5);
}

TEST(Hang, FrequentCollectivesStillNeedTheMinimumQuiet) {
  // Five collectives a second: 20 periods are 4 s, but the stall must last kHangMinQuietNs.
  SyntheticFleet f;
  for (int r = 0; r < 4; ++r) {
    auto l = RankLabels("job-q", r, 100 + r, "n1", r, 4);
    std::vector<double> ops, util;
    for (int i = 0; i < 80; ++i) {
      ops.push_back(std::min(i, r == 2 ? 29 : 30) * 5.0 + (r == 2 ? 4 : 5));
      util.push_back(0.95);
    }
    f.Series("n1", "ithbat_probe_nccl_ops_total", MetricType::kCounter, With(l, "op", "all_reduce"), ops);
    f.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, GpuLabels("n1", r), util);
  }
  FleetView v = f.TakeView();
  const TimeNs stop = kT0 + 30 * kS;
  EXPECT_TRUE(RunOne(v, &DetectHang, stop + kHangMinQuietNs - kS).findings.empty());
  auto r = RunOne(v, &DetectHang, stop + kHangMinQuietNs);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].subjects.ranks[0].rank, 2);
}

TEST(Hang, IdlePeersAreNotSpinningAndASlowRankIsNoHang) {
  {
    FleetView v = HangWorld(5, 40, 100, kHangSpinUtil * 0.9);
    auto r = RunOne(v, &DetectHang, kT0 + 99 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].verdict, Verdict::kInconclusive);
  }
  {
    FleetView v = HangWorld(5, 40, 100, kHangSpinUtil * 1.1);
    auto r = RunOne(v, &DetectHang, kT0 + 99 * kS);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].verdict, Verdict::kJob);
  }
  {  // a straggler one call behind but moving
    FleetView v = HangWorld(5, 40, 100, 0.95, /*straggler=*/true);
    EXPECT_TRUE(RunOne(v, &DetectHang, kT0 + 99 * kS).findings.empty());
  }
  {  // the job ended: its series stop, no hang afterwards
    FleetView v = HangWorld(5, 40, 60);
    EXPECT_TRUE(RunOne(v, &DetectHang, kT0 + 59 * kS + kHangAliveNs + kS).findings.empty());
  }
}

}  // namespace
}  // namespace ithbat::detect
