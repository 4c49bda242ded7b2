// The probes for real: the BPF program loaded into this kernel, uprobes attached by the
// collector to workload processes that call the fake libcuda/libnccl through every calling
// path, counts compared with what the workloads say they called. Runs as root; a kernel that
// refuses the program FAILS the test with the reason (CI must not skip it silently).
//
// Workloads are started with tests/probes/start_gate.cc preloaded: the test attaches after the
// gate's constructor ran (every library mapped) and before the first call, and reads the last
// counts while the process waits in the gate's destructor.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/logged_steps.h"
#include "agent/tracked_processes.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/probes_collector.h"
#include "collect/probes/target_resolver.h"
#include "core/time.h"
#include "probes/probe_test_util.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::probes {
namespace {

namespace fs = std::filesystem;
using testing::FakeSink;

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

using test_util::GatedChild;
using test_util::Touch;
using test_util::WaitForFile;
using Child = GatedChild;

using test_util::TrustedDriverDir;

class ProbesEbpf : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the probe tests need root (uprobes, BPF)";
    ASSERT_FALSE(driver_.dir.empty()) << "cannot create a root-owned directory under /run";
    ProbesOptions o;
    o.tracked = &tracked_;
    o.logged_steps = &logged_;
    o.rescan_ticks = 1;
    auto c = ProbesCollector::Create(std::move(o));
    ASSERT_TRUE(c) << c.error().message;
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_));
    ASSERT_TRUE(collector_->Start());
    ASSERT_EQ(collector_->Health().degraded, "") << "the kernel refused the probes";
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
  }
  void Track(std::vector<pid_t> pids) {
    std::vector<agent::TrackedProcesses::Process> ps;
    for (pid_t p : pids) {
      agent::TrackedProcesses::Process proc;
      proc.pid = p;
      proc.identity.job = "job1";
      proc.identity.rank = static_cast<int32_t>(ps.size());
      proc.source = "test";
      ps.push_back(proc);
    }
    tracked_.Publish("test", std::move(ps));
  }
  void Tick() {
    t_ = std::max(t_ + kNsPerSec, NowNs());
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(collector_->Collect(t_));
    if (std::getenv("ITHBAT_PROBES_TEST_TIMING") != nullptr) {
      std::cerr << "tick: " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                << " s\n";
    }
  }
  std::optional<double> Value(std::string_view metric, FakeSink::LabelSubset labels) {
    auto s = sink_.FindWith(metric, labels);
    if (!s || s->samples.empty()) return std::nullopt;
    return s->samples.back().second;
  }
  std::vector<std::string> Env() { return {"LD_LIBRARY_PATH=" + driver_.dir.string(), "ITHBAT_FAKE_STATE="}; }
  std::string Lib() { return (driver_.dir / "libcuda.so.1").string(); }

  TrustedDriverDir driver_;
  testing::TempDir tmp_;
  agent::TrackedProcesses tracked_;
  agent::LoggedSteps logged_;
  FakeSink sink_;
  std::unique_ptr<ProbesCollector> collector_;
  TimeNs t_ = 0;
};

// N launches (and every other call the workload makes) counted per pid and probe, through each
// calling path, compared function by function with the workload's own counts.
TEST_F(ProbesEbpf, CountsEveryCallThroughEachCallingPath) {
  for (const char* path : {"direct", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    Child w;
    std::vector<std::string> argv = {
        ITHBAT_CUDA_WORKLOAD, "--launches", "3000",  "--path", path, "--sync-every", "100",
        "--launch-fn",        "mix",        "--lib", Lib()};
    w.Start(tmp_.path(), std::string("w_") + path, argv, Env());
    Track({w.pid});
    Tick();  // attaches
    auto procs = collector_->Processes();
    ASSERT_EQ(procs.size(), 1u);
    ASSERT_EQ(procs[0].state, "exact");
    ASSERT_FALSE(procs[0].libraries.empty());
    EXPECT_TRUE(procs[0].libraries[0].procaddr_used) << "the copy in " << Lib() << " should be trusted";
    w.Go();
    nlohmann::json r = w.Result();
    ASSERT_FALSE(r.is_null());
    Tick();
    const std::string pid = std::to_string(w.pid);
    size_t compared = 0;
    for (auto& [name, c] : r["calls"].items()) {
      const double expect = c["total"].get<double>();
      auto got = Value("ithbat_probe_calls_total", {{"pid", pid}, {"api", name}});
      ASSERT_TRUE(got) << name << " never counted";
      // The workload's teardown calls cuStreamSynchronize(other) directly, outside its counts.
      EXPECT_EQ(*got, expect + (name == "cuStreamSynchronize" ? 1 : 0)) << name;
      ++compared;
    }
    EXPECT_GE(compared, 15u);
    double launches = 0;
    for (const char* fn :
         {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch"}) {
      launches += Value("ithbat_probe_launches_total", {{"pid", pid}, {"api", fn}}).value_or(0);
    }
    EXPECT_EQ(launches, 3000);
    // Grid blocks: --grid 1 per launch, graph launches add none (3/4 of the mix).
    EXPECT_EQ(Value("ithbat_probe_grid_blocks_total", {{"pid", pid}}), 2250);
    EXPECT_EQ(Value("ithbat_probe_copy_bytes_total", {{"pid", pid}, {"direction", "h2d"}}),
              r["calls"]["cuMemcpyHtoDAsync_v2"]["total"].get<double>() * 4096);
    EXPECT_EQ(Value("ithbat_probe_state", {{"pid", pid}, {"state", "exact"}}), 1);
    EXPECT_EQ(Value("ithbat_probe_state", {{"pid", pid}, {"job_id", "job1"}, {"state", "degraded"}}), 0);
    w.LetExit();
    w.Wait();
    Tick();  // detaches
    EXPECT_EQ(collector_->open_links(), 0u);
  }
}

// The per-thread cuGetProcAddress triple of cuLaunchKernel gives a function that is no exported
// symbol: only a probe at the address cuGetProcAddress returned sees these calls.
TEST_F(ProbesEbpf, CountsLaunchesThroughTheNonExportedEntryPoint) {
  Child w;
  w.Start(tmp_.path(), "w_internal",
          {ITHBAT_CUDA_WORKLOAD, "--launches", "2000", "--path", "procaddr", "--per-thread", "--lib", Lib()},
          Env());
  Track({w.pid});
  Tick();
  w.Go();
  nlohmann::json r = w.Result();
  ASSERT_FALSE(r.is_null());
  ASSERT_EQ(r["procaddr_not_exported"], nlohmann::json::array({"cuLaunchKernel_ptsz"}));
  Tick();
  EXPECT_EQ(
      Value("ithbat_probe_launches_total", {{"pid", std::to_string(w.pid)}, {"api", "cuLaunchKernel_ptsz"}}),
      2000);
  w.LetExit();
  w.Wait();
}

// The same through classic perf-event uprobes (one link per target), the fallback for kernels
// without uprobe_multi.
class ProbesEbpfClassic : public ProbesEbpf {
 protected:
  void SetUp() override {
    setenv("ITHBAT_PROBES_NO_MULTI", "1", 1);
    ProbesEbpf::SetUp();
    unsetenv("ITHBAT_PROBES_NO_MULTI");
  }
};

TEST_F(ProbesEbpfClassic, CountsLaunchesThroughTheNonExportedEntryPoint) {
  Child w;
  w.Start(tmp_.path(), "w_internal_classic",
          {ITHBAT_CUDA_WORKLOAD, "--launches", "2000", "--path", "all", "--per-thread", "--lib", Lib()},
          Env());
  Track({w.pid});
  Tick();
  EXPECT_GT(collector_->open_links(), 30u) << "one link per target and direction";
  w.Go();
  nlohmann::json r = w.Result();
  ASSERT_FALSE(r.is_null());
  Tick();
  EXPECT_EQ(
      Value("ithbat_probe_launches_total", {{"pid", std::to_string(w.pid)}, {"api", "cuLaunchKernel_ptsz"}}),
      2000);
  w.LetExit();
  w.Wait();
  Tick();
  EXPECT_EQ(collector_->open_links(), 0u);
}

// Gaps and blocked time against the workload's own measurements, with checks that hold by
// construction whatever the machine's load (no assumption about how long a launch or a sync
// takes): the workload's 3 sleeps of >= 300 ms are each a gap >= 2^27 ns, and there are at most
// launches - 1 gaps; the longest gap lies between one sleep and the whole run; the probe's
// blocked time is measured inside the workload's own window around each sync (so never more
// than it, but for the syncs the workload makes outside that window), and every sync the
// workload timed entered and returned through the probe.
TEST_F(ProbesEbpf, GapsAndBlockedTimeMatchTheWorkload) {
  Child w;
  std::vector<std::string> env = Env();
  env.push_back("ITHBAT_FAKE_CUDA_KERNEL_NS=1000000");  // 1 ms kernels: syncs really block
  constexpr int kLaunches = 200;
  w.Start(tmp_.path(), "w_gaps",
          {ITHBAT_CUDA_WORKLOAD, "--launches", std::to_string(kLaunches), "--gap-every", "50", "--gap-ms",
           "300", "--sync-every", "10", "--lib", Lib()},
          env);
  Track({w.pid});
  Tick();
  w.Go();
  nlohmann::json r = w.Result();
  ASSERT_FALSE(r.is_null());
  Tick();
  const std::string pid = std::to_string(w.pid);
  const double gaps = r["gaps"].get<double>();
  ASSERT_EQ(gaps, 3);
  auto gaps_over = [&](const char* min) {
    return Value("ithbat_probe_launch_gaps_total", {{"pid", pid}, {"min", min}}).value_or(0);
  };
  EXPECT_GE(gaps_over("134ms"), gaps) << "each 300 ms sleep is a gap of at least 2^27 ns";
  EXPECT_LE(gaps_over("1ms"), kLaunches - 1) << "more gaps than intervals between launches";
  EXPECT_LE(gaps_over("8ms"), gaps_over("1ms"));
  EXPECT_LE(gaps_over("134ms"), gaps_over("8ms"));
  EXPECT_LE(gaps_over("1s"), gaps_over("134ms"));
  const double max_gap = Value("ithbat_probe_launch_gap_max_seconds", {{"pid", pid}}).value_or(-1);
  EXPECT_GE(max_gap, 0.300);
  EXPECT_LE(max_gap, r["elapsed_ns"].get<double>() / 1e9) << "a gap longer than the whole run";

  const double blocked = Value("ithbat_probe_sync_blocked_seconds_total", {{"pid", pid}}).value_or(-1);
  const double truth = r["sync_blocked_ns"].get<double>() / 1e9;
  EXPECT_GT(truth, 0) << "the workload did not block; the comparison would mean nothing";
  EXPECT_GT(blocked, 0);
  int checked = 0;
  double untimed = 0;  // probe time in functions the workload also called outside its window
  for (const char* api : {"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
                          "cuCtxSynchronize_v2", "cuMemcpyDtoH_v2"}) {
    if (!r["calls"].contains(api)) continue;
    ++checked;
    // The workload counts the syncs it timed; it may make more (untimed: its final drain).
    const double timed = r["calls"][api]["total"].get<double>();
    const double entries = Value("ithbat_probe_calls_total", {{"pid", pid}, {"api", api}}).value_or(-1);
    const double returns =
        Value("ithbat_probe_call_returns_total", {{"pid", pid}, {"api", api}}).value_or(-1);
    EXPECT_GE(entries, timed) << api;
    EXPECT_EQ(returns, entries) << api << ": every entry's return seen";
    if (entries > timed)
      untimed += Value("ithbat_probe_call_seconds_total", {{"pid", pid}, {"api", api}}).value_or(0);
    // The slow-call series are cumulative log2 buckets: each at most the one below, all <= returns.
    double below = returns;
    for (const char* min : {"1ms", "8ms", "134ms", "1s"}) {
      const double n =
          Value("ithbat_probe_call_slow_total", {{"pid", pid}, {"api", api}, {"min", min}}).value_or(0);
      EXPECT_LE(n, below) << api << " min=" << min;
      below = n;
    }
  }
  EXPECT_GE(checked, 2) << "the workload's syncs were not found in its own report";
  // Its final cuStreamSynchronize on another stream is not inside its window: bounded by the
  // probe's whole time in that function (a blocked time counted twice would still exceed this).
  EXPECT_LE(blocked, truth + untimed);
  w.LetExit();
  w.Wait();
}

// Two NCCL ranks: all-reduces counted per op and bytes, communicator init seen (rank, size),
// per-collective records numbered per communicator.
TEST_F(ProbesEbpf, NcclTwoRanksCountedPerOpAndBytes) {
  Child r0, r1;
  const std::string id = (tmp_.path() / "nccl.id").string();
  std::vector<std::string> env = Env();
  env.push_back("ITHBAT_FAKE_CUDA_DEVICES=2");
  const std::vector<std::string> common = {"--nranks",      "2",  "--id-file", id,
                                           "--collectives", "40", "--bytes",   "65536"};
  auto argv = [&](int rank) {
    std::vector<std::string> a = {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(rank)};
    a.insert(a.end(), common.begin(), common.end());
    return a;
  };
  r0.Start(tmp_.path(), "r0", argv(0), env);
  r1.Start(tmp_.path(), "r1", argv(1), env);
  Track({r0.pid, r1.pid});
  Tick();
  for (const auto& p : collector_->Processes()) {
    EXPECT_EQ(p.state, "exact") << p.pid;
    EXPECT_EQ(p.libraries.size(), 2u) << "libcuda and libnccl of pid " << p.pid;
  }
  r0.Go();
  r1.Go();
  nlohmann::json j0 = r0.Result(), j1 = r1.Result();
  ASSERT_FALSE(j0.is_null());
  ASSERT_FALSE(j1.is_null());
  Tick();
  for (auto* c : {&r0, &r1}) {
    nlohmann::json& j = c == &r0 ? j0 : j1;
    const std::string pid = std::to_string(c->pid);
    EXPECT_EQ(Value("ithbat_probe_nccl_ops_total", {{"pid", pid}, {"op", "all_reduce"}}),
              j["calls"]["ncclAllReduce"].get<double>());
    EXPECT_EQ(Value("ithbat_probe_nccl_bytes_total", {{"pid", pid}, {"op", "all_reduce"}}),
              j["allreduce_bytes"].get<double>());
    EXPECT_EQ(Value("ithbat_probe_calls_total", {{"pid", pid}, {"api", "ncclCommInitRank"}}), 1);
    auto recs = collector_->RecentCollectives(c->pid);
    uint64_t seq = 0;
    int inits = 0;
    for (const CollectiveRecord& rec : recs) {
      if (rec.op == "comm_init") {
        ++inits;
        EXPECT_EQ(rec.nranks, 2);
        EXPECT_EQ(rec.rank, j["rank"].get<int>());
        continue;
      }
      EXPECT_EQ(rec.op, "all_reduce");
      EXPECT_EQ(rec.seq, ++seq);
      EXPECT_EQ(rec.nranks, 2);
      EXPECT_EQ(rec.bytes, 65536u);
    }
    EXPECT_EQ(inits, 1);
    EXPECT_EQ(seq, 40u);
  }
  r0.LetExit();
  r1.LetExit();
  r0.Wait();
  r1.Wait();
}

// The collector end to end on a training-like job of two ranks that logs nothing: steps are
// inferred from each rank's collectives and syncs, numbered by ONE logged step of rank 0 (the
// HF Trainer's "every N steps, rank 0 only"), and recorded in the step timeline of both ranks
// within one step of the workload's own step starts; the two ranks' collectives are aligned
// (host enqueue order: exactly one last arrival per collective) and counted by size bucket.
TEST_F(ProbesEbpf, TrainingStepsInferredNumberedAndRanksAligned) {
  constexpr int kSteps = 30;
  constexpr int kLoggedStep = 20;
  Child r[2];
  const std::string id = (tmp_.path() / "train.id").string();
  std::vector<std::string> env = Env();
  env.push_back("ITHBAT_FAKE_CUDA_DEVICES=2");
  env.push_back("ITHBAT_FAKE_CUDA_COPY_GBPS=0.002");  // loss.item(): a 20 kB D2H copy blocks 10 ms
  fs::path steps_file[2];
  for (int rank = 0; rank < 2; ++rank) {
    steps_file[rank] = tmp_.path() / fmt::format("train{}.steps", rank);
    r[rank].Start(tmp_.path(), fmt::format("train{}", rank),
                  {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(rank), "--nranks", "2", "--id-file", id,
                   "--bytes", "1048576", "--train-steps", std::to_string(kSteps), "--layers", "3",
                   "--compute-ms", "20", "--layer-ms", "2", "--loss-bytes", "20000", "--steps-file",
                   steps_file[rank].string()},
                  env);
  }
  Track({r[0].pid, r[1].pid});
  Tick();
  r[0].Go();
  r[1].Go();
  nlohmann::json j[2];
  for (int rank = 0; rank < 2; ++rank) {
    j[rank] = r[rank].Result();
    ASSERT_FALSE(j[rank].is_null());
  }
  // Truth: the workload's own step starts (CLOCK_MONOTONIC), as realtime like the store's.
  const TimeNs mono_to_real = NowNs() - MonotonicNowNs();
  std::map<int64_t, TimeNs> truth[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(steps_file[rank]);
    int64_t step = 0;
    TimeNs mono = 0;
    while (in >> step >> mono) truth[rank][step] = mono + mono_to_real;
    ASSERT_EQ(truth[rank].size(), static_cast<size_t>(kSteps)) << "steps file of rank " << rank;
  }
  // Rank 0 "prints" step kLoggedStep when it ends (the next one starts).
  ASSERT_TRUE(truth[0].count(kLoggedStep + 1));
  logged_.Add("job1", 0, kLoggedStep, truth[0][kLoggedStep + 1]);
  // Collectives are aligned once they settled (1 s after the newest record of the communicator).
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Tick();
  Tick();

  const auto steps = sink_.steps();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(fmt::format("rank {}", rank));
    std::map<int64_t, StepSpan> got;
    for (const auto& s : steps) {
      if (s.job == "job1" && s.rank == rank) got[s.span.step] = s.span;  // the newest record wins
    }
    // Every step but the first (the attach) and the last (no later boundary) can be inferred.
    EXPECT_GE(got.size(), static_cast<size_t>(kSteps - 3));
    const auto& t = truth[rank];
    for (const auto& [step, span] : got) {
      auto it = t.find(step);
      ASSERT_NE(it, t.end()) << "step " << step << " is not one the workload ran";
      auto next = std::next(it);
      if (next == t.end()) continue;  // the last step's length is unknown
      const TimeNs len = next->second - it->second;
      EXPECT_LT(std::abs(span.start - it->second), len) << "step " << step << " starts more than a step off";
      EXPECT_LT(std::abs(span.end - next->second), len) << "step " << step << " ends more than a step off";
    }
    const std::string pid = std::to_string(r[rank].pid);
    EXPECT_GE(Value("ithbat_probe_steps_total", {{"pid", pid}}).value_or(0), kSteps - 3);
    EXPECT_GT(Value("ithbat_probe_step_seconds", {{"pid", pid}}).value_or(0), 0);
    // Every all-reduce of the run is counted under some size bucket.
    double by_size = 0;
    for (const auto& s : sink_.series()) {
      if (s.desc.name != "ithbat_probe_nccl_ops_by_size_total" || s.samples.empty()) continue;
      const std::string labels = s.labels.ToString();
      if (labels.find(fmt::format("pid=\"{}\"", pid)) == std::string::npos) continue;
      if (labels.find("op=\"all_reduce\"") == std::string::npos) continue;
      by_size += s.samples.back().second;
    }
    EXPECT_EQ(by_size, j[rank]["calls"]["ncclAllReduce"].get<double>());
    // Both ranks were attached before their communicator's init: every collective aligned.
    EXPECT_EQ(Value("ithbat_probe_nccl_aligned_total", {{"pid", pid}}), j[rank]["calls"]["ncclAllReduce"].get<double>());
  }
  // Exactly one of the two ranks is last at each aligned collective.
  const double last0 = Value("ithbat_probe_nccl_last_arrivals_total", {{"pid", std::to_string(r[0].pid)}}).value_or(-1);
  const double last1 = Value("ithbat_probe_nccl_last_arrivals_total", {{"pid", std::to_string(r[1].pid)}}).value_or(-1);
  EXPECT_EQ(last0 + last1, j[0]["calls"]["ncclAllReduce"].get<double>());
  for (auto& c : r) c.LetExit();
  for (auto& c : r) c.Wait();
}

// The agent attaches after the job has already run collectives: what it sees from then on is
// consistent (every record counted, sequence numbers from 1 since attachment, the
// communicator's size unknown because its init was missed) and exactly the collectives issued
// after it attached. No clock decides "mid-run": the gate holds both ranks before their
// (kBefore + 1)-th ncclAllReduce until the probes are attached.
TEST_F(ProbesEbpf, AttachingAfterCollectivesCountsFromThenOn) {
  Child r0, r1;
  constexpr int kTotal = 300;
  constexpr int kBefore = 100;
  const std::string id = (tmp_.path() / "late.id").string();
  const fs::path resume = tmp_.path() / "late.resume";
  auto env = [&](int rank) {
    std::vector<std::string> e = Env();
    e.push_back("ITHBAT_FAKE_CUDA_DEVICES=2");
    e.push_back("ITHBAT_GATE_NCCL_PAUSE_AT=" + std::to_string(kBefore));
    e.push_back("ITHBAT_GATE_PAUSED=" + (tmp_.path() / fmt::format("late{}.paused", rank)).string());
    e.push_back("ITHBAT_GATE_RESUME=" + resume.string());
    return e;
  };
  auto argv = [&](int rank) {
    return std::vector<std::string>{ITHBAT_NCCL_WORKLOAD,
                                    "--rank",
                                    std::to_string(rank),
                                    "--nranks",
                                    "2",
                                    "--id-file",
                                    id,
                                    "--collectives",
                                    std::to_string(kTotal),
                                    "--bytes",
                                    "4096"};
  };
  r0.Start(tmp_.path(), "late0", argv(0), env(0));
  r1.Start(tmp_.path(), "late1", argv(1), env(1));
  r0.Go();
  r1.Go();
  ASSERT_TRUE(WaitForFile(tmp_.path() / "late0.paused", 120))
      << "rank 0 never reached collective " << kBefore;
  ASSERT_TRUE(WaitForFile(tmp_.path() / "late1.paused", 120))
      << "rank 1 never reached collective " << kBefore;
  Track({r0.pid, r1.pid});
  Tick();
  Touch(resume);
  nlohmann::json j0 = r0.Result(), j1 = r1.Result();
  ASSERT_FALSE(j0.is_null());
  ASSERT_FALSE(j1.is_null());
  Tick();
  for (Child* c : {&r0, &r1}) {
    const std::string pid = std::to_string(c->pid);
    const double ops = Value("ithbat_probe_nccl_ops_total", {{"pid", pid}, {"op", "all_reduce"}}).value_or(0);
    EXPECT_EQ(ops, kTotal - kBefore) << "the collectives issued after attachment, no more, no fewer";
    auto recs = collector_->RecentCollectives(c->pid);
    ASSERT_EQ(recs.size(), static_cast<size_t>(ops));
    uint64_t seq = 0;
    for (const CollectiveRecord& rec : recs) {
      EXPECT_EQ(rec.seq, ++seq);
      EXPECT_EQ(rec.nranks, -1);
      EXPECT_EQ(rec.bytes, 4096u);
    }
    EXPECT_EQ(Value("ithbat_probe_nccl_bytes_total", {{"pid", pid}, {"op", "all_reduce"}}), ops * 4096);
  }
  r0.LetExit();
  r1.LetExit();
  r0.Wait();
  r1.Wait();
}

// A tracked process that maps libcuda only later is attached at a re-scan of its maps (every
// tick here: rescan_ticks = 1), and its calls from then on are counted.
TEST_F(ProbesEbpf, LibraryLoadedLateIsAttachedAtARescan) {
  const fs::path d = tmp_.path();
  auto f = [&](const char* n) { return (d / n).string(); };
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(ITHBAT_PROBE_LATE_LOADER, ITHBAT_PROBE_LATE_LOADER, f("ready").c_str(), f("go").c_str(),
          Lib().c_str(), f("loaded").c_str(), f("call").c_str(), "250", f("done").c_str(), f("exit").c_str(),
          nullptr);
    _exit(127);
  }
  ASSERT_TRUE(WaitForFile(d / "ready", 30));
  Track({pid});
  Tick();
  auto procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].state, "pending");
  EXPECT_TRUE(procs[0].libraries.empty());
  Touch(d / "go");
  ASSERT_TRUE(WaitForFile(d / "loaded", 30));
  Tick();
  procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].state, "exact");
  ASSERT_EQ(procs[0].libraries.size(), 1u);
  Touch(d / "call");
  ASSERT_TRUE(WaitForFile(d / "done", 30));
  Tick();
  EXPECT_EQ(Value("ithbat_probe_calls_total", {{"pid", std::to_string(pid)}, {"api", "cuMemAlloc_v2"}}), 250);
  Touch(d / "exit");
  waitpid(pid, nullptr, 0);
  Tick();
  EXPECT_EQ(collector_->open_links(), 0u);
}

// Per-thread state is keyed by (tgid, tid) and a detach forgets the process in EVERY map, not only
// its counters: a later process reusing the pid (or a thread reusing a tid), or a re-attach of
// the same process, cannot inherit a last-launch time (a false gap) or a group depth.
TEST_F(ProbesEbpf, DetachForgetsEveryMapEntryOfTheProcess) {
  auto bpf = ProbeBpf::Load();
  ASSERT_TRUE(bpf) << bpf.error().message;
  auto resolved = ResolveLibrary(Lib(), LibraryKind::kCuda, std::nullopt);
  ASSERT_TRUE(resolved) << resolved.error().message;
  Child w;
  w.Start(tmp_.path(), "w_forget",
          {ITHBAT_CUDA_WORKLOAD, "--launches", "100", "--sync-every", "10", "--lib", Lib()}, Env());
  auto a = (*bpf)->Attach(w.pid, Lib(), resolved->targets);
  ASSERT_TRUE(a) << a.error().message;
  w.Go();
  ASSERT_FALSE(w.Result().is_null());
  const auto tgid = static_cast<uint32_t>(w.pid);
  const ProbeBpf::KeyCounts before = (*bpf)->CountKeys(tgid);
  EXPECT_GT(before.stats, 0u);
  EXPECT_EQ(before.last_launch, 1u) << "one launching thread, keyed by (tgid, tid)";
  a->reset();  // links first: nothing can add entries after this
  (*bpf)->ForgetProcess(tgid);
  const ProbeBpf::KeyCounts after = (*bpf)->CountKeys(tgid);
  EXPECT_EQ(after.stats, 0u);
  EXPECT_EQ(after.last_launch, 0u);
  EXPECT_EQ(after.group_depth, 0u);
  EXPECT_EQ(after.entries, 0u);
  EXPECT_EQ(after.comms, 0u);
  w.LetExit();
  w.Wait();
}

// A mapped "libcuda" whose ELF is refused is not re-read at every rescan (a forged file in a
// container would otherwise cost a read per rescan forever): its (dev, inode) is remembered as
// failed. Shown by rewriting the file in place (same inode) into a valid library after the
// first failure: re-scans of the process must not attach to it.
TEST_F(ProbesEbpf, RefusedLibraryIsNotReReadAtEveryRescan) {
  const fs::path dir = tmp_.path() / "forged";
  fs::create_directories(dir);
  const fs::path lib = dir / "libcuda.so.1";
  { std::ofstream(lib, std::ios::binary) << std::string(4096, 'x'); }
  const fs::path ready = tmp_.path() / "forged.ready";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(lib.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) _exit(1);
    const int r = open(ready.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (r >= 0) close(r);
    for (;;) pause();
  }
  ASSERT_TRUE(WaitForFile(ready, 30));
  struct stat before {};
  ASSERT_EQ(stat(lib.c_str(), &before), 0);
  Track({pid});
  Tick();
  auto procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].state, "degraded");
  EXPECT_TRUE(procs[0].libraries.empty());
  // Same inode, now a library the collector could attach to if it read it again.
  {
    std::ifstream in(ITHBAT_FAKE_CUDA_PATH, std::ios::binary);
    std::ofstream out(lib, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  }
  struct stat after {};
  ASSERT_EQ(stat(lib.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  for (int i = 0; i < 3; ++i) Tick();  // rescan_ticks = 1: every tick re-reads the maps
  procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_TRUE(procs[0].libraries.empty()) << "the refused file was read again";
  EXPECT_EQ(collector_->open_links(), 0u);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  Tick();
}

// A process killed mid-run is detached at the next tick: no links left, no fds leaked.
TEST_F(ProbesEbpf, ProcessExitingMidRunIsDetachedWithoutLeaks) {
  Tick();  // the collector's own fds (BPF maps, ring buffer) exist from Start
  const size_t fds_before = OpenFds();
  for (int round = 0; round < 3; ++round) {
    Child w;
    w.Start(tmp_.path(), fmt::format("w_kill{}", round),
            {ITHBAT_CUDA_WORKLOAD, "--launches", "100000000", "--rate", "2000", "--lib", Lib()}, Env());
    Track({w.pid});
    Tick();
    EXPECT_GT(collector_->open_links(), 0u);
    EXPECT_GT(OpenFds(), fds_before);
    w.Go();
    // Until the probes have counted launches (no assumption about how soon that is; bounded).
    double launched = 0;
    for (int i = 0; i < 600 && launched == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Tick();
      launched =
          Value("ithbat_probe_launches_total", {{"pid", std::to_string(w.pid)}, {"api", "cuLaunchKernel"}})
              .value_or(0);
    }
    EXPECT_GT(launched, 0);
    kill(w.pid, SIGKILL);
    w.Wait();
    Tick();  // still tracked (the publisher has not noticed), but gone from /proc
    EXPECT_EQ(collector_->open_links(), 0u);
    EXPECT_TRUE(collector_->Processes().empty());
    EXPECT_EQ(OpenFds(), fds_before) << "round " << round;
  }
}

}  // namespace
}  // namespace ithbat::collect::probes
