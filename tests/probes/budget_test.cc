// The overhead budget for real (root, real eBPF; a kernel that refuses FAILS): the launch probes
// of a process over its budget are duty-cycled, the launch counts extrapolated, rare probes still
// exact, toggles bounded, gaps only from attached time, and back to exact when the rate falls.
//
// The workload is a fork of this test (no exec) that dlopens the fake libcuda/libnccl from a
// root-owned directory and launches at a steady pace, counting what it made in shared memory:
// the test reads the true count just before and just after each Collect. The cost per hit is
// overridden (20 us) so that a pace this machine keeps easily (2000 launches/s) is 5x what the
// duty cycle aims at (the 1% budget x the 0.8 margin): on-fraction 1/5, slices 1 s on / 4 s off.
//
// What is asserted holds by construction, whatever the machine's load does to the workload's
// pace: the reported count is the kernel's count plus each off interval x the rate the collector
// measured (read back through Processes()), so never below the kernel's count, and monotone;
// the kernel counts nothing while detached; the on-fraction is the aim over the added fraction
// the collector measured. How close the extrapolation comes to
// the true count depends on the pace holding, and is printed here and measured by the bench
// (probes_bench --budget), not asserted.
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <thread>

#include <dlfcn.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/probes_collector.h"
#include "core/time.h"
#include "fake_cuda/cuda_abi.h"
#include "testutil/fake_sink.h"
#include "probes/probe_test_util.h"
#include "testutil/testutil.h"

namespace ithbat::collect::probes {
namespace {

namespace fs = std::filesystem;
using testing::FakeSink;

constexpr double kRate = 2000;      // launches/s of the paced phase
constexpr double kCostNs = 20'000;  // --probe-cost-ns: 2000/s x 20 us = 4% = 5x the aim
constexpr double kBudget = 0.01;
constexpr double kMargin = 0.8;         // the duty cycle aims at 0.8%
constexpr int kSyncEvery = 100;         // a cuStreamSynchronize + ncclGroupStart/End pair per 100
constexpr uint64_t kSampledToggles = 5;  // entry detach, then two whole periods
constexpr double kSlowRate = 100;       // the under-budget phase: 100/s x 20 us = 0.2% of a core
// At most 300 launches in any window: even bunched into one 1 s window (a stalled workload
// catching up), 300 x 20 us = 0.6% < the 0.8% aim: the slow phase stays exact by construction.
constexpr uint64_t kSlowLaunches = 300;

// Shared with the forked workload (MAP_SHARED | MAP_ANONYMOUS before the fork).
struct Shared {
  std::atomic<int> phase{0};  // test -> child: 1 paced, 2 stop, 3 slow K launches, 4 exit
  std::atomic<int> state{0};  // child -> test: 1 ready (libraries mapped), 2 idle, 9 error
  std::atomic<uint64_t> launches{0}, syncs{0}, groups{0};
  std::atomic<int> slow_done{0};  // child -> test: the slow phase's launches are made
};

int64_t Mono() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// The workload (in the forked child; never returns).
[[noreturn]] void Workload(Shared* sh, const std::string& cuda_path, const std::string& nccl_path) {
  setenv("ITHBAT_FAKE_STATE", "", 1);  // a private in-process GPU
  auto fail = [&] {
    sh->state.store(9);
    _exit(1);
  };
  void* cu = dlopen(cuda_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cu == nullptr) fail();
  void* nccl = dlopen(nccl_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nccl == nullptr) fail();
#define SYM(lib, name) auto name = reinterpret_cast<name##_fn>(dlsym(lib, #name))
  SYM(cu, cuInit);
  SYM(cu, cuDeviceGet);
  SYM(cu, cuDevicePrimaryCtxRetain);
  SYM(cu, cuCtxSetCurrent);
  SYM(cu, cuModuleLoadData);
  SYM(cu, cuModuleGetFunction);
  SYM(cu, cuStreamCreate);
  SYM(cu, cuLaunchKernel);
  SYM(cu, cuStreamSynchronize);
  SYM(cu, ithbat_fake_cuda_get_costs);
  SYM(cu, ithbat_fake_cuda_set_costs);
#undef SYM
  using GroupFn = int (*)();
  auto group_start = reinterpret_cast<GroupFn>(dlsym(nccl, "ncclGroupStart"));
  auto group_end = reinterpret_cast<GroupFn>(dlsym(nccl, "ncclGroupEnd"));
  if (!cuInit || !cuDeviceGet || !cuDevicePrimaryCtxRetain || !cuCtxSetCurrent || !cuModuleLoadData ||
      !cuModuleGetFunction || !cuStreamCreate || !cuLaunchKernel || !cuStreamSynchronize ||
      !ithbat_fake_cuda_get_costs || !ithbat_fake_cuda_set_costs || !group_start || !group_end) {
    fail();
  }
  IthbatFakeCudaCosts costs{};
  ithbat_fake_cuda_get_costs(&costs);
  costs.kernel_ns = 0;  // the queue never fills: the pace is the program's alone
  costs.ns_per_block = 0;
  ithbat_fake_cuda_set_costs(&costs);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction k = nullptr;
  CUstream s = nullptr;
  static const char kImage[] = "fake";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS || cuModuleGetFunction(&k, mod, "k") != CUDA_SUCCESS ||
      cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    fail();
  }
  auto launch = [&] {
    if (cuLaunchKernel(k, 2, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr) != CUDA_SUCCESS) fail();
    const uint64_t n = sh->launches.load(std::memory_order_relaxed) + 1;
    sh->launches.store(n, std::memory_order_release);
    if (n % kSyncEvery == 0) {
      if (cuStreamSynchronize(s) != CUDA_SUCCESS) fail();
      sh->syncs.fetch_add(1);
      if (group_start() != 0 || group_end() != 0) fail();
      sh->groups.fetch_add(1);
    }
  };
  sh->state.store(1);
  for (;;) {
    const int phase = sh->phase.load();
    if (phase == 1) {
      // Steady pace: each launch at its slot (start + i / rate); a late one does not shift the rest.
      const int64_t period = static_cast<int64_t>(1e9 / kRate);
      int64_t next = Mono();
      while (sh->phase.load(std::memory_order_relaxed) == 1) {
        SleepUntil(next);
        next += period;
        launch();
      }
      continue;
    }
    if (phase == 2) {
      sh->state.store(2);
      SleepUntil(Mono() + 5'000'000);
      continue;
    }
    if (phase == 3) {
      const int64_t period = static_cast<int64_t>(1e9 / kSlowRate);
      int64_t next = Mono();
      for (uint64_t i = 0; i < kSlowLaunches; ++i) {
        SleepUntil(next);
        next += period;
        launch();
      }
      sh->slow_done.store(1);
      sh->phase.store(2);
      continue;
    }
    if (phase == 4) _exit(0);
    SleepUntil(Mono() + 1'000'000);
  }
}

using TrustedDir = test_util::TrustedDriverDir;

class ProbesBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the budget tests need root (uprobes, BPF)";
    ASSERT_FALSE(dir_.dir.empty()) << "cannot create a root-owned directory under /run";
    void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    sh_ = new (m) Shared();
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (collector_) collector_->Stop();
    if (sh_ != nullptr) munmap(sh_, sizeof(Shared));
  }
  void StartCollector(double cost_ns, std::function<Result<HitCost>(ProbeBpf&)> calibrate = nullptr,
                      TimeNs recalibrate_every = 0) {
    ProbesOptions o;
    o.tracked = &tracked_;
    o.rescan_ticks = 1;
    o.budget = kBudget;
    o.margin = kMargin;
    o.cost_ns = cost_ns;
    o.calibrate = std::move(calibrate);
    o.recalibrate_every = recalibrate_every;
    auto c = ProbesCollector::Create(std::move(o));
    ASSERT_TRUE(c) << c.error().message;
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_));
    ASSERT_TRUE(collector_->Start());
    ASSERT_EQ(collector_->Health().degraded, "") << "the kernel refused the probes";
  }
  // Forks the workload (before any collector thread exists) and waits until it mapped the libs.
  void StartWorkload() {
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      Workload(sh_, (dir_.dir / "libcuda.so.1").string(), (dir_.dir / "libnccl.so.2").string());
    }
    for (int i = 0; i < 3000 && sh_->state.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(sh_->state.load(), 1) << "the workload did not get ready";
    agent::TrackedProcesses::Process proc;
    proc.pid = child_;
    proc.identity.job = "budget";
    proc.identity.rank = 0;
    proc.source = "test";
    tracked_.Publish("test", {proc});
  }
  void Tick() {
    t_ = std::max(t_ + kNsPerSec, NowNs());
    ASSERT_TRUE(collector_->Collect(t_));
  }
  std::optional<double> Value(std::string_view metric, FakeSink::LabelSubset labels = {}) {
    labels["pid"] = std::to_string(child_);
    auto s = sink_.FindWith(metric, labels);
    if (!s || s->samples.empty()) return std::nullopt;
    return s->samples.back().second;
  }
  ProbesCollector::ProcessStatus Status() {
    auto ps = collector_->Processes();
    return ps.empty() ? ProbesCollector::ProcessStatus{} : ps[0];
  }

  TrustedDir dir_;
  Shared* sh_ = nullptr;
  pid_t child_ = -1;
  agent::TrackedProcesses tracked_;
  FakeSink sink_;
  std::unique_ptr<ProbesCollector> collector_;
  TimeNs t_ = 0;
};

// Self-calibration: a cost per hit is measured on the test's own binary, and the measurement
// leaves nothing of this process in the maps.
TEST(ProbesCalibration, MeasuresACostAndForgetsItsOwnKeys) {
  ASSERT_EQ(geteuid(), 0u) << "needs root (uprobes, BPF)";
  auto bpf = ProbeBpf::Load();
  ASSERT_TRUE(bpf) << "the kernel refused the probes: " << bpf.error().message;
  auto c = (*bpf)->MeasureHitCost();
  ASSERT_TRUE(c) << c.error().message;
  std::cout << fmt::format(
      "calibration: {:.0f} ns per hit ({:.1f} ns unprobed), attach {:.2f} ms, detach {:.2f} ms, "
      "{} calls x 5 rounds ({})\n",
      c->ns_per_hit, c->unprobed_ns, c->attach_ns / 1e6, c->detach_ns / 1e6, c->calls,
      (*bpf)->multi() ? "uprobe_multi" : "perf-event link");
  EXPECT_GT(c->ns_per_hit, 0) << "a probed call cost nothing: the probe did not fire";
  const auto keys = (*bpf)->CountKeys(static_cast<uint32_t>(getpid()));
  EXPECT_EQ(keys.stats, 0u);
  EXPECT_EQ(keys.last_launch, 0u);
}

TEST_F(ProbesBudget, CollectorExportsTheMeasuredCost) {
  StartCollector(0);
  // The measurement when plausible, else the fallback (and the error said so).
  EXPECT_GE(collector_->hit_cost_ns(), ProbesCollector::kMinCalibratedCostNs);
  if (auto c = collector_->calibration(); c) {
    EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), c->ns_per_hit);
  } else {
    EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), ProbesCollector::kFallbackCostNs);
    EXPECT_NE(collector_->Health().last_error.find("calibration"), std::string::npos);
  }
  Tick();
  auto s = sink_.FindWith("ithbat_probe_hit_cost_seconds", {});
  ASSERT_TRUE(s && !s->samples.empty()) << collector_->Health().last_error;
  EXPECT_DOUBLE_EQ(s->samples.back().second, collector_->hit_cost_ns() / 1e9);
}

// A calibration that measures (nearly) nothing would turn the budget off (added = rate x 0): it
// is refused, the fallback cost used, and the error reported.
TEST_F(ProbesBudget, ImplausibleCalibrationFallsBack) {
  for (const double measured : {0.0, 5.0, -3.0}) {
    collector_.reset();
    StartCollector(0, [&](ProbeBpf&) -> Result<HitCost> {
      HitCost h;
      h.ns_per_hit = measured;
      return h;
    });
    EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), ProbesCollector::kFallbackCostNs) << measured;
    EXPECT_FALSE(collector_->calibration().has_value());
    const auto h = collector_->Health();
    EXPECT_GE(h.errors, 1u);
    EXPECT_NE(h.last_error.find("calibration"), std::string::npos) << h.last_error;
    Tick();
    auto s = sink_.FindWith("ithbat_probe_hit_cost_seconds", {});
    ASSERT_TRUE(s && !s->samples.empty());
    EXPECT_DOUBLE_EQ(s->samples.back().second, ProbesCollector::kFallbackCostNs / 1e9);
    collector_->Stop();
  }
  collector_.reset();
  StartCollector(0, [](ProbeBpf&) -> Result<HitCost> { return MakeError(ErrorCode::kUnavailable, "refused"); });
  EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), ProbesCollector::kFallbackCostNs);
  EXPECT_NE(collector_->Health().last_error.find("refused"), std::string::npos);
}

// Re-calibration: each plausible measurement replaces the cost; an implausible one keeps it.
TEST_F(ProbesBudget, RecalibratesAndKeepsTheCostOnAnImplausibleMeasurement) {
  std::vector<double> results = {3000, 20, 4000};
  size_t calls = 0;
  StartCollector(
      0,
      [&](ProbeBpf&) -> Result<HitCost> {
        HitCost h;
        h.ns_per_hit = results[std::min(calls, results.size() - 1)];
        ++calls;
        return h;
      },
      /*recalibrate_every=*/1);
  EXPECT_EQ(calls, 1u);
  EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), 3000);
  const uint64_t errors = collector_->Health().errors;
  Tick();
  EXPECT_EQ(calls, 2u);
  EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), 3000) << "a 20 ns measurement replaced the cost";
  EXPECT_EQ(collector_->Health().errors, errors + 1);
  ASSERT_TRUE(collector_->calibration().has_value());
  EXPECT_DOUBLE_EQ(collector_->calibration()->ns_per_hit, 3000);
  Tick();
  EXPECT_EQ(calls, 3u);
  EXPECT_DOUBLE_EQ(collector_->hit_cost_ns(), 4000);
  EXPECT_DOUBLE_EQ(collector_->calibration()->ns_per_hit, 4000);
}

// The closer waits for one process's closes only, and runs closes side by side (bounded).
TEST(LinkCloser, WaitsForOneTicketAndBoundsItsThreads) {
  LinkCloser closer(3);
  std::vector<std::shared_ptr<const LinkCloser::Ticket>> tickets;
  for (int i = 0; i < 20; ++i) tickets.push_back(closer.Submit(std::make_unique<Attachment>()));
  closer.Wait(*tickets[7]);
  EXPECT_TRUE(tickets[7]->done.load());
  EXPECT_GT(tickets[7]->started_ns.load(), 0);
  closer.Drain();
  EXPECT_EQ(closer.pending(), 0u);
  for (const auto& t : tickets) EXPECT_TRUE(t->done.load());
  EXPECT_GE(closer.threads(), 1u);
  EXPECT_LE(closer.threads(), 3u);
}

// Schedule()'s on-fraction for a wanted fraction f (slices >= 1 s, period <= 60 s).
double Scheduled(double f) {
  f = std::clamp(f, 1.0 / 60, 59.0 / 60);
  double on = 1, off = 1;
  if (f <= 0.5) {
    off = std::min((1 - f) / f, 59.0);
  } else {
    on = std::min(f / (1 - f), 59.0);
  }
  return on / (on + off);
}

const ProbesCollector::ProcessStatus::Launch* FindLaunch(const ProbesCollector::ProcessStatus& st,
                                                          std::string_view api) {
  for (const auto& l : st.launch) {
    if (l.api == api) return &l;
  }
  return nullptr;
}

// The whole cycle on one process: exact → sampled (over the aim) → exact (rate fell) → exact
// counts under the budget.
TEST_F(ProbesBudget, DutyCyclesOverBudgetAndReturnsToExact) {
  StartWorkload();
  StartCollector(kCostNs);
  Tick();  // attaches
  ProbesCollector::ProcessStatus st = Status();
  ASSERT_EQ(st.state, "exact");
  ASSERT_EQ(st.libraries.size(), 2u) << "libcuda and libnccl";
  const int64_t t_begin = Mono();
  sh_->phase.store(1);
  const double aim = kBudget * kMargin;

  // Paced phase: until sampled and kSampledToggles toggles. After each Collect the collector's
  // own figures (kernel count, reported count, rates, detached time) are checked against each
  // other; the workload's true count (read just before and after the Collect) only bounds the
  // kernel's count from above and is printed against the extrapolation.
  int64_t sampled_at = 0;
  double worst_rel = 0, last_est = 0, last_truth_lo = 0, last_truth_hi = 0;
  double max_gap = 0;
  TimeNs min_off_ns = INT64_MAX;
  ProbesCollector::ProcessStatus prev, prev2;
  bool have_prev = false, have_prev2 = false;
  size_t checked_rates = 0, checked_detached = 0, checked_fraction = 0, checked_achieved = 0;
  for (int i = 0; i < 600 && (sampled_at == 0 || st.toggles < kSampledToggles); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double lo = static_cast<double>(sh_->launches.load(std::memory_order_acquire));
    Tick();
    const double hi = static_cast<double>(sh_->launches.load(std::memory_order_acquire));
    st = Status();
    const auto* l = FindLaunch(st, "cuLaunchKernel");
    ASSERT_NE(l, nullptr) << "no launch series after " << i + 1 << " ticks";
    const double est = Value("ithbat_probe_launches_total", {{"api", "cuLaunchKernel"}}).value_or(-1);
    EXPECT_DOUBLE_EQ(est, l->reported) << "the exported series is the reported count";
    // The kernel counts only launches that happened (one may be in flight at the read: +1).
    EXPECT_LE(static_cast<double>(l->counted), hi + 1);
    EXPECT_GE(l->reported, static_cast<double>(l->counted));
    if (have_prev) {
      const auto* pl = FindLaunch(prev, "cuLaunchKernel");
      ASSERT_NE(pl, nullptr);
      // reported = counted + off x rate, interval by interval (the rate the collector took for
      // this interval is the one it shows after it).
      const double d_rep = l->reported - pl->reported;
      const double d_cnt = static_cast<double>(l->counted - pl->counted);
      const double d_off = static_cast<double>(st.detached_ns - prev.detached_ns) / 1e9;
      EXPECT_GE(d_rep, 0) << "the reported launch count went down";
      EXPECT_GE(st.detached_ns, prev.detached_ns);
      EXPECT_NEAR(d_rep, d_cnt + l->rate_per_s * d_off, 1e-6 * std::max(1.0, l->reported));
      ++checked_rates;
      // Detached with its close finished before the previous read (prev2's snapshot follows
      // read i-2 and precedes read i-1), and not re-attached by then: the kernel counted
      // nothing between reads i-1 and i.
      if (have_prev2 && !prev2.launch_attached && !prev2.closing && !prev.launch_attached) {
        const auto* pl2 = FindLaunch(prev2, "cuLaunchKernel");
        ASSERT_NE(pl2, nullptr);
        EXPECT_EQ(l->counted, pl->counted) << "a launch counted while the launch probes were detached";
        ++checked_detached;
      }
    }
    max_gap = std::max(max_gap, Value("ithbat_probe_launch_gap_max_seconds").value_or(0));
    if (st.state == "sampled") {
      if (sampled_at == 0) sampled_at = Mono();
      min_off_ns = std::min(min_off_ns, st.off_ns);
      // The on-fraction is the aim over the added fraction the collector measured, and that is
      // its rates x the cost (a falling rate instead schedules the return to exact).
      double added = 0;
      for (const auto& x : st.launch) added += x.rate_per_s / 1e9 * kCostNs;
      EXPECT_NEAR(st.added, added, 1e-9 * added);
      if (st.added >= aim * 0.5) {
        EXPECT_NEAR(st.on_fraction, Scheduled(aim / st.added), 1e-9);
        ++checked_fraction;
      }
      // The series are appended before the tick's toggle: compared when that changed nothing.
      const bool steady = have_prev && prev.state == "sampled";
      if (steady) {
        EXPECT_NEAR(Value("ithbat_probe_launch_on_fraction").value_or(0), st.on_fraction, 1e-9);
      }
      // Once a period is complete, the added ratio is taken at the on-fraction achieved.
      if (steady && st.on_fraction_achieved > 0 && st.on_fraction_achieved == prev.on_fraction_achieved) {
        EXPECT_LE(st.on_fraction_achieved, 1.0);
        EXPECT_NEAR(Value("ithbat_probe_added_time_ratio").value_or(-1), st.added * st.on_fraction_achieved,
                    1e-12);
        ++checked_achieved;
      }
      const double rel = est > hi ? (est - hi) / hi : est < lo ? (lo - est) / lo : 0;
      worst_rel = std::max(worst_rel, rel);
      last_est = est;
      last_truth_lo = lo;
      last_truth_hi = hi;
    }
    prev2 = prev;
    have_prev2 = have_prev;
    prev = st;
    have_prev = true;
  }
  ASSERT_GT(sampled_at, 0) << "never duty-cycled: 2000 launches/s x 20 us is 5x the 0.8% aim";
  ASSERT_GE(st.toggles, kSampledToggles) << "stopped toggling";
  // The series are appended before a tick's toggle; one tick more (no toggle: < min_slice since
  // the last) brings them level with the status.
  Tick();
  st = Status();
  const double elapsed_s = static_cast<double>(Mono() - t_begin) / 1e9;
  std::cout << fmt::format(
      "sampled: on-fraction {:.3f} scheduled, {:.3f} achieved; slices {:.1f} s on / {:.1f} s off, {} toggles in "
      "{:.1f} s; at the last read {:.0f} extrapolated vs {:.0f}..{:.0f} made; worst relative error over the "
      "sampled reads {:.4f} (not asserted: the bench measures it); max gap {:.4f} s; checks: {} intervals, {} "
      "detached, {} fractions, {} achieved\n",
      st.on_fraction, st.on_fraction_achieved, static_cast<double>(st.on_ns) / 1e9,
      static_cast<double>(st.off_ns) / 1e9, st.toggles, elapsed_s, last_est, last_truth_lo, last_truth_hi, worst_rel,
      max_gap, checked_rates, checked_detached, checked_fraction, checked_achieved);
  EXPECT_EQ(Value("ithbat_probe_state", {{"state", "sampled"}}), 1);
  EXPECT_EQ(Value("ithbat_probe_state", {{"state", "exact"}}), 0);
  EXPECT_LT(st.on_fraction, 1);
  // Two whole periods were run: a detached interval and a complete period were seen.
  EXPECT_GT(checked_detached, 0u);
  EXPECT_GT(checked_achieved, 0u);
  EXPECT_GT(st.detached_ns, 0);
  // Detached time is never a gap: the workload's own gaps are 0.5 ms (a stall as long as an
  // off slice, >= 1 s, would be needed to reach it); a detached slice counted as a gap would.
  EXPECT_GT(min_off_ns, 0);
  EXPECT_LT(max_gap, static_cast<double>(min_off_ns) / 1e9) << "a detached slice was reported as a gap";
  // Toggles (attach or detach) at least 0.95 x min_slice (1 s) apart per process.
  const double toggles = Value("ithbat_probe_toggles_total").value_or(-1);
  EXPECT_EQ(toggles, static_cast<double>(st.toggles));
  EXPECT_LE(toggles, std::floor(elapsed_s / 0.95) + 1);
  // Attached and detached time add up to no more than the time it was probed (one tick of slack),
  // and the attached part is what tells a consumer which ticks' counts were made, not extrapolated.
  const double attached_s = Value("ithbat_probe_launch_attached_seconds_total").value_or(-1);
  EXPECT_GT(attached_s, 0);
  EXPECT_LE(attached_s + static_cast<double>(st.detached_ns) / 1e9, elapsed_s + 1.5);

  // The rate falls to 0: back to exact within a period (+ one slice, + tick granularity).
  sh_->phase.store(2);
  for (int i = 0; i < 600 && sh_->state.load() != 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(sh_->state.load(), 2);
  const int64_t stop_at = Mono();
  for (int i = 0; i < 200 && Status().state != "exact"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Tick();
  }
  Tick();
  ASSERT_EQ(Status().state, "exact") << "still sampled " << (Mono() - stop_at) / 1'000'000
                                     << " ms after the rate fell";
  EXPECT_EQ(Value("ithbat_probe_state", {{"state", "exact"}}), 1);
  EXPECT_EQ(Value("ithbat_probe_launch_on_fraction"), 1);
  {
    // Exact again: every second between two reads is attached.
    const double a0 = Value("ithbat_probe_launch_attached_seconds_total").value_or(-1);
    const int64_t m0 = Mono();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Tick();
    const double a1 = Value("ithbat_probe_launch_attached_seconds_total").value_or(-1);
    const double wall = static_cast<double>(Mono() - m0) / 1e9;
    EXPECT_GT(a1 - a0, 0.25);
    EXPECT_LE(a1 - a0, wall + 0.35);  // the read before the sleep may have come a little before m0
  }
  // Rare probes were never detached: every sync and NCCL group call counted, sampled or not.
  EXPECT_EQ(Value("ithbat_probe_calls_total", {{"api", "cuStreamSynchronize"}}),
            static_cast<double>(sh_->syncs.load()));
  EXPECT_EQ(Value("ithbat_probe_calls_total", {{"api", "ncclGroupStart"}}),
            static_cast<double>(sh_->groups.load()));
  EXPECT_EQ(Value("ithbat_probe_call_returns_total", {{"api", "ncclGroupEnd"}}),
            static_cast<double>(sh_->groups.load()));
  EXPECT_GT(sh_->syncs.load(), 100u);

  // Under the budget: N launches -> N counted, exactly.
  const double before = Value("ithbat_probe_launches_total", {{"api", "cuLaunchKernel"}}).value_or(-1);
  const double grid_before = Value("ithbat_probe_grid_blocks_total").value_or(-1);
  sh_->phase.store(3);
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    Tick();
    ASSERT_EQ(Status().state, "exact") << "went sampled at 100 launches/s (0.2% of the budget's 1%)";
    if (sh_->slow_done.load() == 1) break;
  }
  ASSERT_EQ(sh_->slow_done.load(), 1) << "the slow phase did not finish";
  Tick();
  EXPECT_EQ(Value("ithbat_probe_launches_total", {{"api", "cuLaunchKernel"}}), before + kSlowLaunches);
  EXPECT_EQ(Value("ithbat_probe_grid_blocks_total"), grid_before + 2 * kSlowLaunches);

  sh_->phase.store(4);
  waitpid(child_, nullptr, 0);
  child_ = -1;
  Tick();
  EXPECT_EQ(collector_->open_links(), 0u);
}

}  // namespace
}  // namespace ithbat::collect::probes
