// The GPU-family signal checks (thermal_power, gpu_hardware, silent_data_corruption,
// no_learning, hang) on synthetic stores: each passes on the signal that proves its cause and
// fails on its look-alike twin without it (a roaming straggler, a recipe's NaN with clean
// counters, a rerun that diverges again, a decaying loss, a straggler that still progresses).
#include "lab/checks_gpu.h"

#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "sim_lab/synthetic_stores.h"

namespace ithbat::sim::lab {
namespace {

// One job "j1" of `ranks` ranks on node "n1" (rank r on GPU r, pid 100 + r), one step a second.
World OneJobWorld(int ranks, int seconds, const std::string& id = "j1", int pid_base = 100) {
  World w;
  w.started = kT0;
  w.ended = kT0 + seconds * kS;
  w.nodes.push_back({"n1", "", "", {}});
  WorldJob job;
  job.id = id;
  job.started = kT0;
  job.ended = w.ended;
  for (int r = 0; r < ranks; ++r) job.ranks.push_back({r, r, "n1", r, "", pid_base + r});
  for (int s = 0; s < seconds; ++s) job.steps.push_back({s, kT0 + s * kS, kT0 + (s + 1) * kS});
  w.jobs.push_back(job);
  return w;
}

scenario::ExpectedFinding Finding(scenario::Cause cause, std::vector<int64_t> ranks = {}) {
  scenario::ExpectedFinding f;
  f.verdict = scenario::Verdict::kInfrastructure;
  f.cause = cause;
  f.job = "j1";
  f.ranks = std::move(ranks);
  return f;
}

std::vector<double> Counter(int n, const std::function<double(int)>& per_s) {
  std::vector<double> v(static_cast<size_t>(n));
  double c = 0;
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (c += per_s(i));
  return v;
}
std::vector<double> Gauge(int n, const std::function<double(int)>& at) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = at(i);
  return v;
}
Labels GpuLabels(int gpu) { return {{"gpu", std::to_string(gpu)}, {"gpu_uuid", "GPU-" + std::to_string(gpu)}}; }
Labels RankLabels(int r) { return {{"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}}; }

const scenario::ResolvedScenario kResolved{};

// A 4-rank node. hot: GPU 2 reports the thermal reason and runs 30% slower from t=5; every
// loaded GPU reports the power-cap reason and clocks spread ±3%. persistent: rank 2 is the last
// arrival every second; else the last rank rotates.
Evidence ThermalStores(bool hot, bool persistent) {
  Stores st;
  const int n = 40;
  for (int g = 0; g < 4; ++g) {
    for (const char* reason : {"sw_power_cap", "sw_thermal_slowdown", "hw_slowdown"}) {
      Labels l = GpuLabels(g);
      l.emplace_back("reason", reason);
      const bool cap = std::string(reason) == "sw_power_cap";
      const bool thermal = std::string(reason) == "sw_thermal_slowdown" && hot && g == 2;
      st.Series("n1", "ithbat_gpu_clock_event_active", MetricType::kGauge, l,
                Gauge(n, [&](int i) { return cap || (thermal && i >= 5) ? 1.0 : 0.0; }));
    }
    Labels l = GpuLabels(g);
    l.emplace_back("clock", "sm");
    const double spread = 1.0 + 0.03 * (g - 1.5) / 1.5;
    st.Series("n1", "ithbat_gpu_clock_hertz", MetricType::kGauge, l,
              Gauge(n, [&](int i) { return 1.7e9 * spread * (hot && g == 2 && i >= 5 ? 0.7 : 1.0); }));
    st.Series("n1", "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, RankLabels(g),
              Counter(n, [&](int i) { return persistent ? (g == 2 ? 1.0 : 0.0) : (i % 4 == g ? 1.0 : 0.0); }));
  }
  return st.Take();
}

TEST(ChecksGpu, ThermalPowerNeedsTheReasonTheClockAndAPersistentStraggler) {
  const World w = OneJobWorld(4, 40);
  {
    const Evidence ev = ThermalStores(/*hot=*/true, /*persistent=*/true);
    const FindingCheck c = CheckThermalPower(w, ev, kResolved, Finding(scenario::Cause::kThermalPower, {2}));
    ASSERT_EQ(c.signals.size(), 3u);
    for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
    ASSERT_TRUE(c.signals[0].first_seen.has_value());
    EXPECT_EQ(*c.signals[0].first_seen, kT0 + (5 + kThermalDebounce - 1) * kS);  // the 3rd hot sample in a row
    ASSERT_TRUE(c.signals[2].first_seen.has_value());
    EXPECT_EQ(*c.signals[2].first_seen, kT0 + kPersistentMinAligned * kS);
    EXPECT_TRUE(c.ok());
  }
  {  // The twin: a hot GPU is not the story when the slowest rank rotates (case01).
    const Evidence ev = ThermalStores(/*hot=*/true, /*persistent=*/false);
    const FindingCheck c = CheckThermalPower(w, ev, kResolved, Finding(scenario::Cause::kThermalPower, {2}));
    EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;
    EXPECT_FALSE(c.ok());
  }
  {  // Background only: power capping everywhere and ±3% clock spread are not heat.
    const Evidence ev = ThermalStores(/*hot=*/false, /*persistent=*/true);
    const FindingCheck c = CheckThermalPower(w, ev, kResolved, Finding(scenario::Cause::kThermalPower, {2}));
    EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
    EXPECT_FALSE(c.ok());
  }
  {  // No subject named: nothing to judge.
    const Evidence ev = ThermalStores(true, true);
    EXPECT_FALSE(CheckThermalPower(w, ev, kResolved, Finding(scenario::Cause::kThermalPower)).ok());
  }
}

// GPU 2 of a 4-GPU node: an Xid at `fault_s` (-1: none); the job's loss NaN from `nan_s` on.
Evidence HardwareStores(int fault_s, int nan_s) {
  Stores st;
  const int n = 30;
  for (int g = 0; g < 4; ++g) {
    st.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, GpuLabels(g),
              Gauge(n, [&](int i) { return g == 2 && fault_s >= 0 && i >= fault_s ? 1.0 : 0.0; }));
    Labels l = GpuLabels(g);
    l.emplace_back("type", "uncorrected");
    l.emplace_back("counter", "volatile");
    st.Series("n1", "ithbat_gpu_ecc_errors_total", MetricType::kCounter, l,
              Gauge(n, [&](int i) { return g == 2 && fault_s >= 0 && i >= fault_s ? 2.0 : 0.0; }));
  }
  for (int s = 0; s < n; ++s) {
    st.Loss("n1", 100, s, s >= nan_s ? std::nan("") : 10.0 - 0.1 * s, kT0 + s * kS + kS / 2);
  }
  return st.Take();
}

TEST(ChecksGpu, GpuHardwareNeedsAFaultOnTheSubjectBeforeTheBadLoss) {
  const World w = OneJobWorld(4, 30);
  auto f = Finding(scenario::Cause::kGpuHardware);
  f.gpus = {{"n1", 2}};
  {
    const Evidence ev = HardwareStores(/*fault_s=*/10, /*nan_s=*/11);
    const FindingCheck c = CheckGpuHardware(w, ev, kResolved, f);
    ASSERT_EQ(c.signals.size(), 2u);
    EXPECT_TRUE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_TRUE(c.signals[1].ok) << c.signals[1].observed;
    ASSERT_TRUE(c.signals[0].first_seen.has_value());
    EXPECT_EQ(*c.signals[0].first_seen, kT0 + 10 * kS);
  }
  {  // The twin (case04): the loss goes NaN with clean counters.
    const Evidence ev = HardwareStores(/*fault_s=*/-1, /*nan_s=*/11);
    const FindingCheck c = CheckGpuHardware(w, ev, kResolved, f);
    EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
  }
  {  // A fault long after the loss went bad did not cause it.
    const Evidence ev = HardwareStores(/*fault_s=*/20, /*nan_s=*/11);
    const FindingCheck c = CheckGpuHardware(w, ev, kResolved, f);
    EXPECT_TRUE(c.signals[0].ok);
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
  }
  {  // A fault on another GPU of the node is not the subject's.
    auto other = f;
    other.gpus = {{"n1", 1}};
    const Evidence ev = HardwareStores(10, 11);
    EXPECT_FALSE(CheckGpuHardware(w, ev, kResolved, other).ok());
  }
}

// The original "j1" (pids 100..) spikes at step 15; the rerun "j2" (pids 200.., other GPUs)
// logs steps 0..`rerun_steps` and spikes at `rerun_spike` (-1: never).
struct SdcSetup {
  World world;
  Evidence evidence;
};
SdcSetup SdcStores(int rerun_steps, int rerun_spike, bool xid_on_original) {
  World w = OneJobWorld(2, 60);
  WorldJob rerun = w.jobs[0];
  rerun.id = "j2";
  for (auto& r : rerun.ranks) {
    r.pid += 100;
    r.gpu += 4;
  }
  w.jobs.push_back(rerun);
  Stores st;
  for (int s = 0; s < 30; ++s) st.Loss("n1", 100, s, s == 15 ? 40.0 : 10.0 - 0.1 * s, kT0 + s * kS);
  for (int s = 0; s <= rerun_steps; ++s)
    st.Loss("n1", 200, s, s == rerun_spike ? 40.0 : 10.0 - 0.1 * s, kT0 + (20 + s) * kS);
  for (int g = 0; g < 6; ++g) {
    st.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, GpuLabels(g),
              Gauge(60, [&](int i) { return xid_on_original && g == 1 && i >= 30 ? 1.0 : 0.0; }));
  }
  return {w, st.Take()};
}

TEST(ChecksGpu, SilentCorruptionNeedsACleanRerunPastThePoint) {
  auto f = Finding(scenario::Cause::kSilentDataCorruption);
  f.provisional = true;
  f.confirm = scenario::ExpectedConfirmation{"j2", {}};
  {
    const SdcSetup s = SdcStores(/*rerun_steps=*/40, /*rerun_spike=*/-1, false);
    const FindingCheck c = CheckSilentDataCorruption(s.world, s.evidence, kResolved, f);
    ASSERT_GE(c.signals.size(), 3u);
    for (const auto& x : c.signals) EXPECT_TRUE(x.ok) << x.name << ": " << x.observed;
    ASSERT_TRUE(c.signals[2].first_seen.has_value());
    EXPECT_EQ(*c.signals[2].first_seen, kT0 + (20 + 15 + kSdcCleanPastSteps) * kS);
  }
  {  // The twin (case04): the rerun diverges again at the same point — the recipe.
    const SdcSetup s = SdcStores(40, 16, false);
    const FindingCheck c = CheckSilentDataCorruption(s.world, s.evidence, kResolved, f);
    EXPECT_TRUE(c.signals[0].ok);
    EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;
    EXPECT_FALSE(c.ok());
  }
  {  // A rerun that stopped before passing the point confirms nothing.
    const SdcSetup s = SdcStores(20, -1, false);
    EXPECT_FALSE(CheckSilentDataCorruption(s.world, s.evidence, kResolved, f).ok());
  }
  {  // A counter that moved on the job's GPUs makes it visible hardware, not silent.
    const SdcSetup s = SdcStores(40, -1, true);
    const FindingCheck c = CheckSilentDataCorruption(s.world, s.evidence, kResolved, f);
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
  }
  {  // Without a rerun corruption cannot be told from the recipe.
    auto no_rerun = f;
    no_rerun.confirm.reset();
    const SdcSetup s = SdcStores(40, -1, false);
    EXPECT_FALSE(CheckSilentDataCorruption(s.world, s.evidence, kResolved, no_rerun).ok());
  }
}

Evidence LossStores(int points, const std::function<double(int)>& loss, bool error = false) {
  Stores st;
  for (int i = 0; i < points; ++i) st.Loss("n1", 100, 5 * (i + 1), loss(i), kT0 + (i + 1) * kS);
  if (error) {
    Event e;
    e.identity.pid = 101;
    e.time = kT0 + 3 * kS;
    e.kind = EventKind::kError;
    e.name = "nccl_timeout";
    EXPECT_TRUE(st.Node("n1").AppendEvent(e).has_value());
  }
  return st.Take();
}

TEST(ChecksGpu, NoLearningIsAFlatLossFromAJobThatRanNormally) {
  const World w = OneJobWorld(2, 40);
  auto f = Finding(scenario::Cause::kNoLearning);
  f.verdict = scenario::Verdict::kJob;
  const auto flat = [](int i) { return 2.4 * (1.0 + 0.02 * std::sin(i * 1.7)); };
  {
    const Evidence ev = LossStores(30, flat);
    const FindingCheck c = CheckNoLearning(w, ev, kResolved, f);
    ASSERT_EQ(c.signals.size(), 2u);
    EXPECT_TRUE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_TRUE(c.signals[1].ok) << c.signals[1].observed;
    ASSERT_TRUE(c.signals[0].first_seen.has_value());
    EXPECT_LE(*c.signals[0].first_seen, kT0 + 30 * kS);
  }
  {  // The twin (healthy-training): a decaying loss.
    const Evidence ev = LossStores(30, [](int i) { return 3.0 + 7.5 * std::exp(-i / 40.0); });
    const FindingCheck c = CheckNoLearning(w, ev, kResolved, f);
    EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;
  }
  {  // Too few points to call a trend.
    const Evidence ev = LossStores(kNoLearningMinPoints - 1, flat);
    EXPECT_FALSE(CheckNoLearning(w, ev, kResolved, f).ok());
  }
  {  // A NaN loss is divergence, not a run that learns nothing.
    const Evidence ev = LossStores(30, [&](int i) { return i == 20 ? std::nan("") : flat(i); });
    EXPECT_FALSE(CheckNoLearning(w, ev, kResolved, f).signals[0].ok);
  }
  {  // An error from the job: it did not run normally.
    const Evidence ev = LossStores(30, flat, /*error=*/true);
    const FindingCheck c = CheckNoLearning(w, ev, kResolved, f);
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
  }
}

// 4 ranks, one collective and 10 launches a second each. hung: rank 3 stops before its 20th
// collective at t=20; its peers enqueue it and stop too, their GPUs spinning. Else rank 3 is a
// straggler: one collective behind, but every rank keeps going.
Evidence HangStores(bool hung) {
  Stores st;
  const int n = 60;
  for (int r = 0; r < 4; ++r) {
    Labels ops = RankLabels(r);
    ops.emplace_back("op", "all_reduce");
    const auto count = [&](int i) {
      if (!hung) return static_cast<double>(std::max(0, r == 3 ? i - 1 : i));
      return static_cast<double>(std::min(i, r == 3 ? 19 : 20));
    };
    st.Series("n1", "ithbat_probe_nccl_ops_total", MetricType::kCounter, ops, Gauge(n, count));
    Labels l = RankLabels(r);
    l.emplace_back("api", "cuLaunchKernel");
    st.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, l,
              Gauge(n, [&](int i) { return 10.0 * count(i); }));
    st.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, GpuLabels(r),
              Gauge(n, [&](int i) { return hung && r == 3 && i > 20 ? 0.0 : 0.95; }));
  }
  return st.Take();
}

TEST(ChecksGpu, HangStopsTheJobWithTheRankBehindAndPeersSpinning) {
  const World w = OneJobWorld(4, 60);
  auto f = Finding(scenario::Cause::kHang, {3});
  f.verdict = scenario::Verdict::kJob;
  {
    const Evidence ev = HangStores(true);
    const FindingCheck c = CheckHang(w, ev, kResolved, f);
    ASSERT_EQ(c.signals.size(), 3u);
    for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
    ASSERT_TRUE(c.signals[1].first_seen.has_value());
    // Last progress at t=20 (the peers' 20th call), then 20 periods of 1 s.
    EXPECT_EQ(*c.signals[1].first_seen, kT0 + (20 + static_cast<int>(kHangMinStallPeriods)) * kS);
  }
  {  // The twin: a straggler is behind but the job keeps going.
    const Evidence ev = HangStores(false);
    const FindingCheck c = CheckHang(w, ev, kResolved, f);
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
    EXPECT_FALSE(c.ok());
  }
}

}  // namespace
}  // namespace ithbat::sim::lab
