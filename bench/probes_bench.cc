// Cost of the CUDA/NCCL probes per cuLaunchKernel call, and whether every call is counted.
//
// One process, one run, so the ratios compare like with like. The fake libcuda (sim/) is copied
// into a root-owned directory under /run (the collector dlopens only a trusted host driver; the
// probe tests do the same), dlopened from there, and its cuLaunchKernel is called through the
// function pointer in a tight loop: a trivial kernel (the fake's kernel cost set to 0 through
// ithbat_fake_cuda_set_costs, so what the fake does per call — a lock and a queue push — is
// small and the same in every phase) on one stream, in batches of kBatch launches; each batch is
// timed alone (manual time) and the stream is synchronised after it, outside the timed region,
// so the launch queue never fills. Phases:
//   unprobed       nothing attached
//   empty_uprobe   bpf/empty_uprobe.bpf.c (returns 0) on cuLaunchKernel, classic perf-event
//                  uprobe via libbpf: the price of the trap alone
//   empty_uprobe_push  the same program on the fake's internal LaunchImpl (every cuLaunchKernel
//                  tail-jumps there), found in the file's .symtab: its first instruction is a
//                  `push`, which the kernel emulates, while cuLaunchKernel's (`mov 0x18(%rsp)`)
//                  must be single-stepped out of line (a second exception). Shows how much of
//                  the cost is that step; not a phase the ratios use
//   probes         the collector's programs (bpf/cuda_probes.bpf.c) attached the collector's way:
//                  ReadMappedLibraries → AgentPathFor → TrustedHostPath → ResolveLibrary (ELF +
//                  cuGetProcAddress) → ProbeBpf::Attach of every target; uprobe_multi links
//                  when the kernel has them
//   probes_classic the same with ProbeBpf loaded in its fallback mode (ITHBAT_PROBES_NO_MULTI=1:
//                  one perf-event link per target), the same attachment kind as empty_uprobe
// The phases run in kRounds interleaved rounds (the machine's load drifts); the summary takes
// each phase's median over the rounds. After each probed phase the kernel's count of
// cuLaunchKernel calls for this process is compared with the calls made.
//
// Then the loss check: kRateCheckSeconds of launches paced at kRate per second on one thread
// with the probes attached (the default mode), and the in-kernel count, stats_full and
// ring_dropped compared with what was made (a host where a probed call costs more than 1/kRate
// cannot keep the pace; the check then says what rate it reached).
//
// With --budget[=SECONDS] only the overhead-budget section runs instead (see BudgetBench): the
// max unprobed rate, the cost of one toggle, and the job's slowdown with the agent's duty cycle at
// paced 40k, 200k and 1M launches/s against no agent, same run.
//
// Each batch is timed by the wall clock (manual time: what the caller waits) and by the thread's
// CPU clock (the trap and the BPF program run in the caller's context; waiting for a CPU on a
// loaded host does not count); the summary prints both. Exit status 1 when a count differs.
// Needs root (uprobes, BPF) and kernel BTF. Method and figures: docs/performance.md.
#include <dlfcn.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <bpf/libbpf.h>

#include "agent/tracked_processes.h"
#include "bench/null_sink.h"
#include "collect/probes/elf_reader.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/probe_table.h"
#include "collect/probes/probes_collector.h"
#include "collect/probes/proc_maps.h"
#include "collect/probes/target_resolver.h"
#include "empty_uprobe.skel.h"
#include "fake_cuda/cuda_abi.h"

namespace {

namespace fs = std::filesystem;
using ithbat::collect::probes::Attachment;
using ithbat::collect::probes::LibraryKind;
using ithbat::collect::probes::ProbeBpf;
using ithbat::collect::probes::ResolvedLibrary;

constexpr int kBatch = 256;              // launches per timed batch (one sync after each)
constexpr int64_t kBatches = 2'000;      // batches per phase and round: 512k launches
constexpr int kRounds = 3;
constexpr int64_t kRate = 200'000;       // launches/s of the loss check
constexpr double kRateCheckSeconds = 1.5;
constexpr uint16_t kLaunchProbe = 0;     // probe_table.cc: cuLaunchKernel

// This thread's CPU time (user + system: the trap and the BPF program run in the caller's
// context): unlike wall time, it leaves out the time the thread waits for a CPU on a loaded host.
uint64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The fake libcuda, loaded from a trusted copy, with one context, stream and kernel.
struct FakeCuda {
  fs::path dir;
  std::string lib_path;
  void* handle = nullptr;
  cuLaunchKernel_fn launch = nullptr;
  cuStreamSynchronize_fn sync = nullptr;
  CUfunction kernel = nullptr;
  CUstream stream = nullptr;

  std::string Setup() {
    char tmpl[] = "/run/ithbat-probes-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return "cannot create a directory under /run (run as root)";
    dir = tmpl;
    chmod(dir.c_str(), 0755);
    lib_path = (dir / "libcuda.so.1").string();
    std::error_code ec;
    fs::copy_file(ITHBAT_FAKE_CUDA_PATH, lib_path, ec);
    if (ec) return "cannot copy the fake libcuda: " + ec.message();
    chmod(lib_path.c_str(), 0755);
    setenv("ITHBAT_FAKE_STATE", "", 1);  // a private in-process GPU, no state file
    handle = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return std::string("dlopen: ") + dlerror();
#define ITHBAT_SYM(name) auto name = reinterpret_cast<name##_fn>(dlsym(handle, #name))
    ITHBAT_SYM(cuInit);
    ITHBAT_SYM(cuDeviceGet);
    ITHBAT_SYM(cuDevicePrimaryCtxRetain);
    ITHBAT_SYM(cuCtxSetCurrent);
    ITHBAT_SYM(cuModuleLoadData);
    ITHBAT_SYM(cuModuleGetFunction);
    ITHBAT_SYM(cuStreamCreate);
    ITHBAT_SYM(ithbat_fake_cuda_get_costs);
    ITHBAT_SYM(ithbat_fake_cuda_set_costs);
#undef ITHBAT_SYM
    launch = reinterpret_cast<cuLaunchKernel_fn>(dlsym(handle, "cuLaunchKernel"));
    sync = reinterpret_cast<cuStreamSynchronize_fn>(dlsym(handle, "cuStreamSynchronize"));
    if (!cuInit || !cuDeviceGet || !cuDevicePrimaryCtxRetain || !cuCtxSetCurrent || !cuModuleLoadData ||
        !cuModuleGetFunction || !cuStreamCreate || !ithbat_fake_cuda_get_costs || !ithbat_fake_cuda_set_costs ||
        !launch || !sync) {
      return "a symbol is missing from the fake libcuda";
    }
    IthbatFakeCudaCosts costs{};
    ithbat_fake_cuda_get_costs(&costs);
    costs.kernel_ns = 0;
    costs.ns_per_block = 0;
    ithbat_fake_cuda_set_costs(&costs);
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUmodule mod = nullptr;
    static const char kImage[] = "fake";
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS || cuModuleGetFunction(&kernel, mod, "k") != CUDA_SUCCESS ||
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      return "the fake libcuda refused the setup";
    }
    return "";
  }
  CUresult Launch() { return launch(kernel, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr); }
  ~FakeCuda() {
    std::error_code ec;
    // The library stays mapped (never dlclose'd: the fake's engine thread runs until exit); the
    // directory entry can go.
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

FakeCuda g_cuda;

// This process's libcuda as the collector sees it, and its resolution.
struct Resolution {
  std::string agent_path;
  ResolvedLibrary resolved;
  uint64_t launch_offset = 0;
  uint64_t impl_offset = 0;  // the fake's LaunchImpl (0: not found)
};
Resolution g_res;

std::string Resolve() {
  auto libs = ithbat::collect::probes::ReadMappedLibraries("/proc", getpid());
  if (!libs) return "maps: " + libs.error().message;
  for (const auto& lib : *libs) {
    if (lib.kind != LibraryKind::kCuda) continue;
    auto agent_path = ithbat::collect::probes::AgentPathFor("/proc", getpid(), lib);
    if (!agent_path) return agent_path.error().message;
    auto trusted = ithbat::collect::probes::TrustedHostPath("/proc", getpid(), lib,
                                                            ithbat::collect::probes::DefaultDriverDirs());
    if (!trusted) return "the copy is not trusted: " + trusted.error().message;
    auto r = ithbat::collect::probes::ResolveLibrary(*agent_path, LibraryKind::kCuda, *trusted);
    if (!r) return r.error().message;
    g_res.agent_path = *agent_path;
    g_res.resolved = std::move(*r);
    for (const auto& t : g_res.resolved.targets) {
      if (t.probe == kLaunchProbe && t.from_symbol) g_res.launch_offset = t.offset;
    }
    if (g_res.launch_offset == 0) return "no cuLaunchKernel target";
    if (auto elf = ithbat::collect::probes::ReadElf(*agent_path)) {
      for (const auto& [name, sym] : elf->functions) {
        // The function itself, not a split-off `.cold` part.
        if (name.find("10LaunchImplEP9CUfunc_st") == std::string::npos || !name.ends_with("_stb")) continue;
        if (auto off = elf->SymbolOffset(name)) g_res.impl_offset = *off;
      }
    }
    return "";
  }
  return "no libcuda in this process's maps";
}

enum class Phase { kUnprobed, kEmpty, kEmptyPush, kProbes, kProbesClassic };

std::unique_ptr<ProbeBpf> g_bpf;          // default mode (uprobe_multi where the kernel has it)
std::unique_ptr<ProbeBpf> g_bpf_classic;  // perf-event links
empty_uprobe_bpf* g_empty = nullptr;
std::string g_error;

uint64_t KernelLaunchCount(const ProbeBpf& bpf) {
  std::vector<ProbeBpf::StatEntry> stats;
  (void)bpf.ReadStats(&stats);
  for (const auto& e : stats) {
    if (e.key.tgid == static_cast<uint32_t>(getpid()) && e.key.probe == kLaunchProbe &&
        e.key.slot == CUDA_SLOT_CALLS) {
      return e.value.count;
    }
  }
  return 0;
}

void BM_Launch(benchmark::State& state, Phase phase) {
  if (!g_error.empty()) {
    state.SkipWithError(g_error.c_str());
    return;
  }
  bpf_link* empty_link = nullptr;
  std::unique_ptr<Attachment> attachment;
  ProbeBpf* bpf = phase == Phase::kProbes ? g_bpf.get() : phase == Phase::kProbesClassic ? g_bpf_classic.get() : nullptr;
  if (phase == Phase::kEmptyPush && g_res.impl_offset == 0) {
    state.SkipWithError("LaunchImpl not found in the fake's symbol table");
    return;
  }
  if (phase == Phase::kEmpty || phase == Phase::kEmptyPush) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts);
    empty_link = bpf_program__attach_uprobe_opts(g_empty->progs.empty_uprobe, getpid(), g_res.agent_path.c_str(),
                                                 phase == Phase::kEmpty ? g_res.launch_offset : g_res.impl_offset,
                                                 &opts);
    if (empty_link == nullptr) {
      state.SkipWithError("cannot attach the empty uprobe");
      return;
    }
  }
  if (bpf != nullptr) {
    auto a = bpf->Attach(getpid(), g_res.agent_path, g_res.resolved.targets);
    if (!a) {
      state.SkipWithError(a.error().message.c_str());
      return;
    }
    attachment = std::move(*a);
    if (attachment->failed() > 0) {
      state.SkipWithError(attachment->first_error().c_str());
      return;
    }
  }
  uint64_t made = 0;
  uint64_t cpu_ns = 0;
  for (auto _ : state) {
    const uint64_t c0 = ThreadCpuNs();
    const uint64_t t0 = NowNs();
    for (int i = 0; i < kBatch; ++i) {
      CUresult r = g_cuda.Launch();
      benchmark::DoNotOptimize(r);
    }
    const uint64_t t1 = NowNs();
    cpu_ns += ThreadCpuNs() - c0;
    made += kBatch;
    state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
    g_cuda.sync(g_cuda.stream);  // outside the timed region: the launch queue never fills
  }
  state.counters["calls"] = static_cast<double>(made);
  state.counters["cpu_ns_per_call"] = static_cast<double>(cpu_ns) / static_cast<double>(made);
  if (bpf != nullptr) {
    state.counters["counted"] = static_cast<double>(KernelLaunchCount(*bpf));
    state.SetLabel(bpf->multi() ? "uprobe_multi" : "perf-event links");
    attachment.reset();
    bpf->ForgetProcess(static_cast<uint32_t>(getpid()));
  }
  if (empty_link != nullptr) bpf_link__destroy(empty_link);
}

// Keeps each run's mean ns per call and counts for the summary.
class Reporter : public benchmark::ConsoleReporter {
 public:
  struct Row {
    double ns_per_call = 0;
    double calls = 0;
    double counted = -1;
    double cpu_ns_per_call = 0;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.iterations > 0 && r.run_type == Run::RT_Iteration && !r.error_occurred) {
        Row row;
        row.ns_per_call = r.real_accumulated_time * 1e9 / static_cast<double>(r.iterations * kBatch);
        if (auto it = r.counters.find("calls"); it != r.counters.end()) row.calls = it->second;
        if (auto it = r.counters.find("counted"); it != r.counters.end()) row.counted = it->second;
        if (auto it = r.counters.find("cpu_ns_per_call"); it != r.counters.end()) row.cpu_ns_per_call = it->second;
        rows[r.benchmark_name()] = row;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, Row> rows;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// kRate launches/s on this thread for kRateCheckSeconds with the probes attached (default mode):
// the kernel's count against the calls made, and the loss counters.
int RateCheck() {
  auto a = g_bpf->Attach(getpid(), g_res.agent_path, g_res.resolved.targets);
  if (!a) {
    std::printf("loss check: cannot attach: %s\n", a.error().message.c_str());
    return 1;
  }
  const auto before = g_bpf->Globals();
  const uint64_t calls = static_cast<uint64_t>(kRate * kRateCheckSeconds);
  const uint64_t period = 1'000'000'000 / kRate;
  uint64_t failed = 0;
  // A host too slow to keep the pace (each probed call costs more than 1/kRate) makes every call
  // as fast as it can; the run stops at twice the planned time and says what rate it reached.
  const uint64_t start = NowNs();
  const uint64_t deadline = start + static_cast<uint64_t>(2e9 * kRateCheckSeconds);
  uint64_t next = start;
  uint64_t made = 0;
  for (; made < calls; ++made) {
    uint64_t now = NowNs();
    while (now < next) now = NowNs();
    if (now > deadline) break;
    next += period;
    if (g_cuda.Launch() != CUDA_SUCCESS) ++failed;
  }
  const uint64_t elapsed = NowNs() - start;
  g_cuda.sync(g_cuda.stream);
  const uint64_t counted = KernelLaunchCount(*g_bpf);
  const auto after = g_bpf->Globals();
  a->reset();
  g_bpf->ForgetProcess(static_cast<uint32_t>(getpid()));
  const uint64_t stats_full = after.stats_full - before.stats_full;
  const uint64_t ring_dropped = after.ring_dropped - before.ring_dropped;
  const bool ok = counted == made && stats_full == 0 && ring_dropped == 0 && failed == 0;
  std::printf(
      "loss check (%s, paced at %lld/s): %llu launches made in %.3f s (%.0f/s reached, one thread), %llu counted "
      "in the kernel, stats_full %llu, ring_dropped %llu, failed calls %llu: %s\n",
      g_bpf->multi() ? "uprobe_multi" : "perf-event links", static_cast<long long>(kRate),
      static_cast<unsigned long long>(made), static_cast<double>(elapsed) * 1e-9,
      static_cast<double>(made) / (static_cast<double>(elapsed) * 1e-9),
      static_cast<unsigned long long>(counted), static_cast<unsigned long long>(stats_full),
      static_cast<unsigned long long>(ring_dropped), static_cast<unsigned long long>(failed),
      ok ? "no loss" : "LOSS");
  return ok ? 0 : 1;
}


// ---- The overhead budget (--budget): the job's slowdown with the agent's duty cycle.
//
// The job is this process's main thread calling cuLaunchKernel of the fake paced at a rate R
// (1 ms slots, see Paced). What the probes add is CPU time of the launching thread (the trap
// runs on the caller), so the slowdown is
//   added fraction = (thread CPU in launches with the agent - launches x CPU per launch
//                     without) / wall time
// i.e. the share of the launching thread's time the agent took. "Agent" = a ProbesCollector in
// this process (budget 1%, cost self-calibrated at Start, ticking every second on its own
// thread) tracking this very process, so attach and detach take this process's mmap lock as
// they would the job's. Steady state: from the tick that entered `sampled`, over whole periods.

struct Bucket {
  uint64_t calls = 0;
  uint64_t in_call_ns = 0;
};
constexpr int64_t kBucketNs = 100'000'000;  // 100 ms buckets of the job's in-call time
// Launches made so far by Paced (read by the agent's ticker to compare the collector's
// extrapolated count with the truth).
std::atomic<uint64_t> g_made{0};

struct PacedResult {
  uint64_t made = 0;
  uint64_t in_call_ns = 0;
  uint64_t max_call_ns = 0;
  uint64_t wall_ns = 0;
  std::vector<Bucket> buckets;
  uint64_t start_ns = 0;
};

// Launches paced at `rate` for `seconds` (or until *stop), in 1 ms slots: each slot's share of
// launches back to back, then a sleep to the next slot (a late slot does not move the later
// ones). Each slot is timed by the thread's CPU clock (what the launches and their traps cost
// the thread; preemption by other load on a shared host does not count) and each call by the
// wall clock (its longest: a stall).
PacedResult Paced(double rate, double seconds, const std::atomic<bool>* stop = nullptr) {
  PacedResult r;
  constexpr uint64_t kSlotNs = 1'000'000;
  const double per_slot = rate * 1e-3;
  const uint64_t start = NowNs();
  const uint64_t end = start + static_cast<uint64_t>(seconds * 1e9);
  r.start_ns = start;
  r.buckets.resize(static_cast<size_t>(seconds * 1e9 / kBucketNs) + 2);
  uint64_t since_sync = 0;
  double owed = 0;
  for (uint64_t slot = 0;; ++slot) {
    const uint64_t slot_start = start + slot * kSlotNs;
    uint64_t now = NowNs();
    if (now < slot_start) {
      timespec ts{static_cast<time_t>((slot_start - now) / 1'000'000'000),
                  static_cast<long>((slot_start - now) % 1'000'000'000)};
      nanosleep(&ts, nullptr);
      now = NowNs();
    }
    if (now >= end || (stop != nullptr && stop->load(std::memory_order_relaxed))) break;
    owed += per_slot;
    const uint64_t n = static_cast<uint64_t>(owed);
    owed -= static_cast<double>(n);
    const uint64_t c0 = ThreadCpuNs();
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t t0 = NowNs();
      CUresult res = g_cuda.Launch();
      r.max_call_ns = std::max(r.max_call_ns, NowNs() - t0);
      benchmark::DoNotOptimize(res);
      if (++since_sync == 4096) {  // the fake's queue is bounded; kernels cost 0 (Setup)
        g_cuda.sync(g_cuda.stream);
        since_sync = 0;
      }
    }
    const uint64_t cpu = ThreadCpuNs() - c0;
    r.in_call_ns += cpu;
    r.made += n;
    g_made.fetch_add(n, std::memory_order_relaxed);
    Bucket& b = r.buckets[std::min<size_t>((now - start) / kBucketNs, r.buckets.size() - 1)];
    b.calls += n;
    b.in_call_ns += cpu;
  }
  r.wall_ns = NowNs() - start;
  g_cuda.sync(g_cuda.stream);
  return r;
}

using ithbat::bench::NullSink;

int BudgetBench(double max_seconds, const std::vector<double>& rates) {
  using ithbat::collect::probes::ProbesCollector;
  using ithbat::collect::probes::ProbesOptions;
  // Max unprobed rate: launches back to back.
  {
    const uint64_t n = 400'000;
    const uint64_t t0 = NowNs();
    for (uint64_t i = 0; i < n; ++i) {
      benchmark::DoNotOptimize(g_cuda.Launch());
      if (i % 4096 == 4095) g_cuda.sync(g_cuda.stream);
    }
    const double s = static_cast<double>(NowNs() - t0) * 1e-9;
    std::printf("max unprobed rate (one thread, back to back, the fake's cuLaunchKernel): %.0f launches/s\n",
                static_cast<double>(n) / s);
  }
  // One toggle: attach + close of the launch probes' link on this process, while the job runs
  // paced at 40k/s on the main thread; the job's longest call then vs in a window without.
  {
    std::vector<ithbat::collect::probes::Target> launch;
    for (const auto& t : g_res.resolved.targets) {
      const auto* spec = ithbat::collect::probes::FindProbe(t.probe);
      if (spec != nullptr && (spec->flags & CUDA_PROBE_F_LAUNCH) != 0) launch.push_back(t);
    }
    const PacedResult quiet = Paced(40'000, 2.0);
    std::atomic<bool> stop{false};
    std::vector<double> attach_ms, close_ms;
    std::thread toggler([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (int i = 0; i < 8; ++i) {
        const uint64_t a0 = NowNs();
        auto a = g_bpf->Attach(getpid(), g_res.agent_path, launch);
        const uint64_t a1 = NowNs();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const uint64_t c0 = NowNs();
        if (a) a->reset();
        const uint64_t c1 = NowNs();
        attach_ms.push_back(static_cast<double>(a1 - a0) / 1e6);
        close_ms.push_back(static_cast<double>(c1 - c0) / 1e6);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      stop = true;
    });
    const PacedResult busy = Paced(40'000, 30.0, &stop);
    toggler.join();
    g_bpf->ForgetProcess(static_cast<uint32_t>(getpid()));
    std::printf(
        "one toggle (%zu launch targets, %s): attach %.2f ms (median of %zu), close %.1f ms (median; the RCU grace "
        "period, on the agent's closer thread in the collector); the job's longest cuLaunchKernel call: %.1f us "
        "with toggles vs %.1f us without (paced 40k/s)\n",
        launch.size(), g_bpf->multi() ? "one uprobe_multi link" : "perf-event links", Median(attach_ms),
        attach_ms.size(), Median(close_ms), static_cast<double>(busy.max_call_ns) / 1e3,
        static_cast<double>(quiet.max_call_ns) / 1e3);
  }
  const double base_seconds = 4.0;
  std::printf("\njob slowdown with the budget (1%%, aimed at 1%% x %.2f margin), paced on one thread; agent ticking "
              "every 1 s:\n", ProbesOptions{}.margin);
  std::printf("  %-8s %10s %12s %12s %10s %10s %8s %10s %12s %12s %12s\n", "rate/s", "reached/s", "cpu ns none",
              "cpu ns agent", "on-frac", "period s", "toggles", "tick max", "added all", "added steady",
              "vs own off");
  int rc = 0;
  for (const double rate : rates) {
    // No agent before and after the agent run (the machine's load drifts): their mean.
    const PacedResult none = Paced(rate, base_seconds);

    ithbat::agent::TrackedProcesses tracked;
    NullSink sink;
    ProbesOptions o;
    o.tracked = &tracked;
    o.budget = 0.01;
    auto c = ProbesCollector::Create(std::move(o));
    if (!c || !(*c)->Init(sink) || !(*c)->Start() || !(*c)->Health().degraded.empty()) {
      std::printf("  cannot start the collector\n");
      return 1;
    }
    std::unique_ptr<ProbesCollector> col = std::move(*c);
    ithbat::agent::TrackedProcesses::Process self;
    self.pid = getpid();
    self.identity.job = "bench";
    self.source = "bench";
    tracked.Publish("bench", {self});
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> sampled_at{0};
    std::atomic<uint64_t> stopped_at{0};
    std::atomic<uint64_t> entered_at{0};
    std::atomic<uint64_t> detached_at{0};  // toggle 3: the end of the period's on-slice
    std::atomic<uint64_t> tick_max_ns{0};
    // The collector's cuLaunchKernel count (counted + extrapolated) and the launches made, at the
    // ticks that open and close the measured period.
    double rep_from = 0, rep_to = 0;
    uint64_t made_from = 0, made_to = 0;
    auto reported = [](const ProbesCollector::ProcessStatus& st) {
      for (const auto& l : st.launch) {
        if (l.api == "cuLaunchKernel") return l.reported;
      }
      return 0.0;
    };
    ProbesCollector::ProcessStatus last;
    std::mutex last_mu;
    std::thread ticker([&] {
      uint64_t next = NowNs();
      while (!stop) {
        const uint64_t t0 = NowNs();
        (void)col->Collect(static_cast<ithbat::TimeNs>(t0));
        const uint64_t d = NowNs() - t0;
        if (d > tick_max_ns) tick_max_ns = d;
        auto ps = col->Processes();
        if (!ps.empty()) {
          std::lock_guard lock(last_mu);
          last = ps[0];
          // One whole period of the duty cycle: from the first re-attach (toggle 2: the entry
          // detach is toggle 1) to the next (toggle 4); the off slice of a period is sized on
          // that period's on-slice (ProbesCollector::FitOffSlice).
          if (last.toggles >= 1 && entered_at == 0) entered_at = NowNs();
          if (last.toggles >= 3 && detached_at == 0) detached_at = NowNs();
          if (last.toggles >= 2 && sampled_at == 0) {
            sampled_at = NowNs();
            rep_from = reported(last);
            made_from = g_made.load();
          }
          if (sampled_at != 0 && last.toggles >= 4) {
            stopped_at = NowNs();
            rep_to = reported(last);
            made_to = g_made.load();
            stop = true;
          }
        }
        next += 1'000'000'000;
        while (!stop && NowNs() < next) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    const PacedResult agent = Paced(rate, max_seconds, &stop);
    stop = true;
    ticker.join();
    col->Stop();
    const PacedResult none_after = Paced(rate, base_seconds);
    const double none_per_call = static_cast<double>(none.in_call_ns + none_after.in_call_ns) /
                                 static_cast<double>(none.made + none_after.made);
    const double agent_per_call = static_cast<double>(agent.in_call_ns) / static_cast<double>(agent.made);
    const double added_all = (static_cast<double>(agent.in_call_ns) - none_per_call * static_cast<double>(agent.made)) /
                             static_cast<double>(agent.wall_ns);
    // Steady state over one whole period [toggle 2, toggle 4): vs the no-agent runs, and vs the
    // period's own off slice (same run, agent running: only the traps differ), which leaves out
    // the drift of the fake's own cost per launch between runs on a loaded VM.
    double added_steady = -1, added_within = -1;
    double period_s = 0;
    if (sampled_at != 0 && stopped_at != 0 && detached_at != 0) {
      auto sum = [&](uint64_t from_ns, uint64_t to_ns, uint64_t skip_ns) {
        Bucket b;
        for (uint64_t i = (from_ns - agent.start_ns + skip_ns) / kBucketNs;
             i < (to_ns - agent.start_ns) / kBucketNs && i < agent.buckets.size(); ++i) {
          b.calls += agent.buckets[i].calls;
          b.in_call_ns += agent.buckets[i].in_call_ns;
        }
        return b;
      };
      const uint64_t period_ns = stopped_at - sampled_at;
      period_s = static_cast<double>(period_ns) / 1e9;
      const Bucket all = sum(sampled_at, stopped_at, 0);
      added_steady = (static_cast<double>(all.in_call_ns) - none_per_call * static_cast<double>(all.calls)) /
                     static_cast<double>(period_ns);
      // The off slice's CPU per launch, its first 200 ms left out (the close in progress).
      const Bucket off = sum(detached_at, stopped_at, 200'000'000);
      if (off.calls > 0) {
        const double off_per_call = static_cast<double>(off.in_call_ns) / static_cast<double>(off.calls);
        added_within = (static_cast<double>(all.in_call_ns) - off_per_call * static_cast<double>(all.calls)) /
                       static_cast<double>(period_ns);
      }
    }
    std::printf("  %-8.0f %10.0f %12.1f %12.1f %10.4f %10.1f %8llu %8.1fms %11.2f%% %11.2f%% %11.2f%%\n", rate,
                static_cast<double>(agent.made) / (static_cast<double>(agent.wall_ns) * 1e-9), none_per_call,
                agent_per_call, last.on_fraction, period_s,
                static_cast<unsigned long long>(last.toggles), static_cast<double>(tick_max_ns) / 1e6,
                added_all * 100, added_steady * 100, added_within * 100);
    std::printf("  (cost per hit self-calibrated at Start: %.0f ns; on-fraction achieved over the last period %.4f; "
                "extrapolated launches over the period %.0f vs %llu made: %+.2f%%)\n",
                col->hit_cost_ns(), last.on_fraction_achieved, rep_to - rep_from,
                static_cast<unsigned long long>(made_to - made_from),
                made_to > made_from ? ((rep_to - rep_from) / static_cast<double>(made_to - made_from) - 1) * 100 : 0.0);
    if (entered_at == 0 || stopped_at == 0) rc = 1;
  }
  std::printf("  added all: over the whole agent run (includes the first 1 s window, always attached); added steady: "
              "one whole period of the duty cycle (re-attach to re-attach) against the no-agent runs; vs own off: the same "
              "period against its own off slice's CPU per launch\n");
  return rc;
}
}  // namespace

int main(int argc, char** argv) {
  // --budget[=SECONDS]: only the overhead-budget section (the agent run per rate stops after
  // one whole period of the duty cycle, or at SECONDS, default 200). --budget-rates=R1,R2,...:
  // the paced rates of that section (default 40000,200000,1000000).
  double budget_seconds = 0;
  std::vector<double> budget_rates = {40'000.0, 200'000.0, 1'000'000.0};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--budget-rates=", 15) == 0) {
      budget_rates.clear();
      for (const char* c = argv[i] + 15; *c != '\0';) {
        char* end = nullptr;
        const double r = std::strtod(c, &end);
        if (end == c) break;
        if (r > 0 && r <= 1e7 && budget_rates.size() < 16) budget_rates.push_back(r);
        c = *end == ',' ? end + 1 : end;
      }
      if (budget_rates.empty()) budget_rates = {40'000.0};
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      --i;
      continue;
    }
    if (std::strncmp(argv[i], "--budget", 8) == 0) {
      budget_seconds = argv[i][8] == '=' ? std::atof(argv[i] + 9) : 200;
      if (budget_seconds <= 0) budget_seconds = 200;
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      --i;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "probes_bench needs root (uprobes, BPF)\n");
    return 1;
  }
  g_error = g_cuda.Setup();
  if (g_error.empty()) g_error = Resolve();
  if (g_error.empty()) {
    auto b = ProbeBpf::Load();
    if (b) {
      g_bpf = std::move(*b);
    } else {
      g_error = b.error().message;
    }
  }
  if (g_error.empty()) {
    setenv("ITHBAT_PROBES_NO_MULTI", "1", 1);
    auto b = ProbeBpf::Load();
    unsetenv("ITHBAT_PROBES_NO_MULTI");
    if (b) {
      g_bpf_classic = std::move(*b);
    } else {
      g_error = b.error().message;
    }
  }
  if (g_error.empty()) {
    g_empty = empty_uprobe_bpf__open_and_load();
    if (g_empty == nullptr) g_error = "the kernel refused the empty uprobe program";
  }
  if (!g_error.empty()) std::fprintf(stderr, "probes_bench: %s\n", g_error.c_str());
  std::printf("libcuda: %s (%zu targets, cuGetProcAddress asked: %s), cuLaunchKernel at file offset %#llx\n",
              g_res.agent_path.c_str(), g_res.resolved.targets.size(), g_res.resolved.procaddr_used ? "yes" : "no",
              static_cast<unsigned long long>(g_res.launch_offset));

  if (budget_seconds > 0) {
    if (!g_error.empty()) return 1;
    const int rc = BudgetBench(budget_seconds, budget_rates);
    if (g_empty != nullptr) empty_uprobe_bpf__destroy(g_empty);
    return rc;
  }
  const std::vector<std::pair<const char*, Phase>> phases = {{"unprobed", Phase::kUnprobed},
                                                             {"empty_uprobe", Phase::kEmpty},
                                                             {"empty_uprobe_push", Phase::kEmptyPush},
                                                             {"probes", Phase::kProbes},
                                                             {"probes_classic", Phase::kProbesClassic}};
  for (int round = 0; round < kRounds; ++round) {
    for (const auto& [name, phase] : phases) {
      benchmark::RegisterBenchmark(("BM_Launch/" + std::string(name) + "/round:" + std::to_string(round)).c_str(),
                                   BM_Launch, phase)
          ->UseManualTime()
          ->Iterations(kBatches)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (!g_error.empty()) return 1;

  // Wall time is what the caller waits; thread CPU time leaves out preemption by other load on
  // a shared host. Both are printed; the ratios are given for each.
  std::map<std::string, double> wall, cpu;
  std::printf("\nns per cuLaunchKernel call (batches of %d, %lld launches per phase and round), median of %d rounds:\n",
              kBatch, static_cast<long long>(kBatch * kBatches), kRounds);
  std::printf("  %-18s %9s %9s   %s\n", "phase", "wall", "cpu", "rounds wall/cpu");
  bool counts_ok = true;
  for (const auto& [name, phase] : phases) {
    std::vector<double> w, c;
    std::string rounds;
    for (const auto& [k, row] : reporter.rows) {
      if (k.rfind("BM_Launch/" + std::string(name) + "/", 0) != 0) continue;
      w.push_back(row.ns_per_call);
      c.push_back(row.cpu_ns_per_call);
      rounds += " " + std::to_string(static_cast<int>(row.ns_per_call + 0.5)) + "/" +
                std::to_string(static_cast<int>(row.cpu_ns_per_call + 0.5));
      if (row.counted >= 0 && row.counted != row.calls) counts_ok = false;
    }
    wall[name] = Median(w);
    cpu[name] = Median(c);
    std::printf("  %-18s %9.1f %9.1f  %s\n", name, wall[name], cpu[name], rounds.c_str());
  }
  for (auto* m : {&wall, &cpu}) {
    const double a = (*m)["unprobed"], b = (*m)["empty_uprobe"], c = (*m)["probes"], c2 = (*m)["probes_classic"];
    if (a <= 0 || b <= 0 || c <= 0 || c2 <= 0) continue;
    std::printf("  %s: probes/empty_uprobe %.2fx (target <= 1.2x), probes_classic/empty_uprobe %.2fx (same link kind), "
                "probes/unprobed %.1fx; added per call: empty %.0f ns, probes %.0f ns, probes_classic %.0f ns\n",
                m == &wall ? "wall" : "cpu ", c / b, c2 / b, c / a, b - a, c - a, c2 - a);
  }
  std::printf("  counted == calls in every probed run: %s\n", counts_ok ? "yes" : "NO");
  const int rc = RateCheck();
  if (g_empty != nullptr) empty_uprobe_bpf__destroy(g_empty);
  return (counts_ok && rc == 0) ? 0 : 1;
}
