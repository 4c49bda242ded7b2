// The agent's cost to drain the probes: CPU time of ProbesCollector::Collect per tick, with the
// workloads' kernel launches aggregated in the kernel (bpf/cuda_probes.bpf.c), so that what the
// agent reads each tick is a map whose size depends on how many processes and functions were
// seen, not on how fast they call. Shown two ways:
//   idle N      N processes (1, 8, 64 by default) attached, each after a burst of calls (launches,
//               syncs, copies, allocations: the map entries of a process that has run), then idle
//               while the ticks are measured: the cost per process per tick (the slope in N).
//   load R      8 processes launching at a paced R launches/s each (5k, 20k, 40k by default:
//               up to 8 ranks x 40k/s), with a stream sync every 1,000 launches, during the
//               measured ticks: the cost must not grow with R. The rate each reached is printed
//               (a 2-core host cannot keep 8 x 40k/s with a trap per launch; it prints what it
//               kept).
// Each tick: Collect at 1 s intervals on this thread, timed by the thread's CPU clock (what the
// agent's worker pays; waiting for a CPU does not count) and by the wall clock; the collector
// appends into a real in-memory store (store::Store), as in the agent. The first tick of each
// phase (attachment) and the last (detach: RCU-tasks grace periods, wall time only) are not
// measured.
//
// Usage (root): probes_drain_bench [--ticks N] [--idle 1,8,64] [--rates 5000,20000,40000]
//                                  [--procs 8] [--budget F] [--fake-libcuda PATH]
//   --budget F   the collector's overhead budget (default: its own, 1%: over it the launch probes
//                are duty-cycled, as in the agent); 0 keeps every launch probe attached, so every
//                launch traps (the workloads then reach less on a small host)
//   --fake-libcuda PATH  the fake libcuda to copy (default: the one this build made, whose path is
//                compiled in; a bundle carried to another machine names its own copy)
// The workload processes are this binary re-executed (--child ...), calling a trusted copy of
// the fake libcuda (sim/) under /run; they inherit LD_LIBRARY_PATH (where a carried bundle's
// libraries are). Exit 1 when the probes cannot be loaded or a workload fails. Method and
// figures: docs/performance.md.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/probes/probes_collector.h"
#include "core/time.h"
#include "fake_cuda/cuda_abi.h"
#include "store/store.h"

namespace {

namespace fs = std::filesystem;
using ithbat::agent::TrackedProcesses;
using ithbat::collect::probes::ProbesCollector;
using ithbat::collect::probes::ProbesOptions;

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t mono_ns) {
  timespec ts{static_cast<time_t>(mono_ns / 1'000'000'000), static_cast<long>(mono_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// ---- The workload child: argv = --child LIB RATE SECONDS BURST ----------------------------------
// Sets up the fake libcuda at LIB, writes a ready byte to fd 3, waits for a go byte on fd 0, makes
// BURST launches with a sync, copies and an allocation every 100, then launches at RATE per second
// (paced per millisecond, catching up) for SECONDS with a stream sync every 1,000, writes its
// launch count (8 bytes) to fd 4, and stays alive (idle, attached) until fd 5 reaches EOF (a pipe
// of its own: go bytes left on fd 0 belong to the children that have not read theirs yet).
int ChildMain(int argc, char** argv) {
  if (argc != 6) return 2;
  const char* lib = argv[2];
  const double rate = std::atof(argv[3]);
  const double seconds = std::atof(argv[4]);
  const long burst = std::atol(argv[5]);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return 1;
#define ITHBAT_SYM(name)                                              \
  auto name = reinterpret_cast<name##_fn>(dlsym(h, #name));           \
  if (name == nullptr) {                                              \
    std::fprintf(stderr, "probes_drain_bench child: no %s\n", #name); \
    return 1;                                                         \
  }
  ITHBAT_SYM(cuInit);
  ITHBAT_SYM(cuDeviceGet);
  ITHBAT_SYM(cuDevicePrimaryCtxRetain);
  ITHBAT_SYM(cuCtxSetCurrent);
  ITHBAT_SYM(cuModuleLoadData);
  ITHBAT_SYM(cuModuleGetFunction);
  ITHBAT_SYM(cuStreamCreate);
  ITHBAT_SYM(cuLaunchKernel);
  ITHBAT_SYM(cuStreamSynchronize);
  ITHBAT_SYM(cuCtxSynchronize);
  ITHBAT_SYM(cuMemAlloc_v2);
  ITHBAT_SYM(cuMemFree_v2);
  ITHBAT_SYM(cuMemcpyHtoDAsync_v2);
  ITHBAT_SYM(cuMemcpyDtoH_v2);
  ITHBAT_SYM(cuEventCreate);
  ITHBAT_SYM(cuEventRecord);
#undef ITHBAT_SYM
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction f = nullptr;
  CUstream s = nullptr;
  CUevent ev = nullptr;
  CUdeviceptr buf = 0;
  static const char kImage[] = "fake";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS || cuModuleGetFunction(&f, mod, "k") != CUDA_SUCCESS ||
      cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cuEventCreate(&ev, 0) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&buf, 1 << 16) != CUDA_SUCCESS) {
    return 1;
  }
  const char r = 'r';
  if (write(3, &r, 1) != 1) return 1;
  char go = 0;
  if (read(0, &go, 1) != 1) return 3;

  uint64_t launches = 0;
  std::vector<char> host(4096);
  for (long i = 0; i < burst; ++i) {
    if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr) != CUDA_SUCCESS) return 1;
    ++launches;
    if ((i + 1) % 100 == 0) {
      CUdeviceptr tmp = 0;
      if (cuMemcpyHtoDAsync_v2(buf, host.data(), host.size(), s) != CUDA_SUCCESS ||
          cuEventRecord(ev, s) != CUDA_SUCCESS || cuStreamSynchronize(s) != CUDA_SUCCESS ||
          cuMemcpyDtoH_v2(host.data(), buf, host.size()) != CUDA_SUCCESS ||
          cuMemAlloc_v2(&tmp, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(tmp) != CUDA_SUCCESS ||
          cuCtxSynchronize() != CUDA_SUCCESS) {
        return 1;
      }
    }
  }
  if (rate > 0 && seconds > 0) {
    const int64_t t0 = MonoNs();
    const int64_t end = t0 + static_cast<int64_t>(seconds * 1e9);
    uint64_t paced = 0;
    for (int64_t now = t0; now < end; now = MonoNs()) {
      const auto due = static_cast<uint64_t>(static_cast<double>(now - t0) * rate / 1e9);
      while (paced < due) {
        if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr) != CUDA_SUCCESS) return 1;
        ++paced;
        if (paced % 1000 == 0 && cuStreamSynchronize(s) != CUDA_SUCCESS) return 1;
      }
      SleepUntil(now + 1'000'000);
    }
    launches += paced;
  }
  if (write(4, &launches, sizeof(launches)) != sizeof(launches)) return 1;
  while (read(5, &go, 1) > 0) {
  }
  return 0;
}

// ---- The agent side -----------------------------------------------------------------------------

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      // Above the fds the children get (0, 3, 4, 5): posix_spawn's dup2 actions run in order, so a
      // pipe end sitting at a later action's target would be overwritten before it is copied.
      r = fcntl(fds[0], F_DUPFD_CLOEXEC, 10);
      w = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
      close(fds[0]);
      close(fds[1]);
    }
  }
  void CloseRead() {
    if (r >= 0) close(r);
    r = -1;
  }
  void CloseWrite() {
    if (w >= 0) close(w);
    w = -1;
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
};

bool ReadFully(int fd, void* buf, size_t n, int timeout_ms) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  const int64_t deadline = MonoNs() + int64_t{timeout_ms} * 1'000'000;
  while (got < n) {
    const int64_t left = (deadline - MonoNs()) / 1'000'000;
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t k = read(fd, p + got, n - got);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

struct Stats {
  double median = 0, p90 = 0, max = 0;
};
Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.p90 = v[std::min(v.size() - 1, v.size() * 9 / 10)];
  s.max = v.back();
  return s;
}

struct Result {
  std::string name;
  size_t procs = 0;
  double rate_target = 0;   // launches/s per process (0: idle)
  double rate_reached = 0;  // launches/s, all processes, from their own counts
  Stats cpu_us, wall_us;
  double samples_per_tick = 0;  // store appends per tick
  std::string states;           // the processes' probe states after the measured ticks
};

class Bench {
 public:
  Bench(std::string self, std::string lib, int ticks, std::optional<double> budget)
      : self_(std::move(self)), lib_(std::move(lib)), ticks_(ticks), budget_(budget) {}

  std::string Start() {
    auto st = ithbat::store::Store::Open(ithbat::store::StoreOptions{});  // in memory: no data dir
    if (!st) return st.error().message;
    store_ = std::move(*st);
    ProbesOptions o;
    o.tracked = &tracked_;
    if (budget_) o.budget = *budget_;
    std::printf("probes budget: %g of each process's time (%s)\n", o.budget,
                o.budget == 0 ? "launch probes always attached" : "launch probes duty-cycled over it");
    auto c = ProbesCollector::Create(std::move(o));
    if (!c) return c.error().message;
    collector_ = std::move(*c);
    if (auto s = collector_->Init(*store_); !s) return s.error().message;
    if (auto s = collector_->Start(); !s) return s.error().message;
    if (!collector_->Health().degraded.empty())
      return "the kernel refused the probes: " + collector_->Health().degraded;
    return "";
  }
  void Stop() { collector_->Stop(); }

  // One phase: n children, each a burst then `rate` launches/s during the measured ticks.
  std::optional<Result> Run(const std::string& name, size_t n, double rate, long burst) {
    Result res;
    res.name = name;
    res.procs = n;
    res.rate_target = rate;
    Pipe ready, go, counts, hold;
    const double seconds = rate > 0 ? ticks_ + 1.5 : 0;
    std::vector<pid_t> pids;
    std::vector<std::string> env = {"ITHBAT_FAKE_STATE=", "ITHBAT_FAKE_CUDA_KERNEL_NS=0",
                                    "PATH=/usr/bin:/bin"};
    // The child is this binary: where its shared libraries come from a bundle, it needs the path.
    if (const char* ld = std::getenv("LD_LIBRARY_PATH"); ld != nullptr)
      env.push_back(std::string("LD_LIBRARY_PATH=") + ld);
    for (size_t i = 0; i < n; ++i) {
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_adddup2(&fa, go.r, 0);
      posix_spawn_file_actions_adddup2(&fa, ready.w, 3);
      posix_spawn_file_actions_adddup2(&fa, counts.w, 4);
      posix_spawn_file_actions_adddup2(&fa, hold.r, 5);
      std::vector<std::string> args = {
          self_, "--child", lib_, fmt::format("{}", rate), fmt::format("{}", seconds), std::to_string(burst)};
      std::vector<char*> argv, envp;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      std::vector<std::string> env_copy = env;
      for (auto& e : env_copy) envp.push_back(e.data());
      envp.push_back(nullptr);
      pid_t pid = -1;
      const int rc = posix_spawn(&pid, self_.c_str(), &fa, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
      if (rc != 0) {
        std::fprintf(stderr, "posix_spawn: %s\n", std::strerror(rc));
        KillAll(pids);
        return std::nullopt;
      }
      pids.push_back(pid);
    }
    ready.CloseWrite();
    counts.CloseWrite();
    go.CloseRead();
    hold.CloseRead();
    std::vector<char> bytes(n);
    if (!ReadFully(ready.r, bytes.data(), n, 60'000)) {
      std::fprintf(stderr, "%s: a workload never became ready\n", name.c_str());
      KillAll(pids);
      return std::nullopt;
    }
    std::vector<TrackedProcesses::Process> ps;
    for (pid_t p : pids) {
      TrackedProcesses::Process proc;
      proc.pid = p;
      proc.identity.job = "drain";
      proc.identity.rank = static_cast<int32_t>(ps.size());
      proc.source = "bench";
      ps.push_back(proc);
    }
    tracked_.Publish("bench", std::move(ps));
    Tick(nullptr);  // attaches (not measured)
    for (const auto& p : collector_->Processes()) {
      if (p.state != "exact") {  // a cost measured without the probes in place would mean nothing
        std::fprintf(stderr, "%s: pid %d is %s, not exact\n", name.c_str(), p.pid, p.state.c_str());
        KillAll(pids);
        return std::nullopt;
      }
    }
    const std::string start(n, 'g');
    if (write(go.w, start.data(), n) != static_cast<ssize_t>(n)) {
      KillAll(pids);
      return std::nullopt;
    }
    std::vector<uint64_t> launched(n);
    if (rate == 0) {  // idle: after the burst
      if (!ReadFully(counts.r, launched.data(), n * sizeof(uint64_t), 120'000)) {
        std::fprintf(stderr, "%s: a workload failed its burst\n", name.c_str());
        KillAll(pids);
        return std::nullopt;
      }
    }
    Tick(nullptr);  // the first read after the burst / the start (series registered: not measured)
    std::vector<double> cpu, wall;
    const uint64_t appended0 = store_->Stats().samples_appended;
    int64_t next = MonoNs();
    for (int i = 0; i < ticks_; ++i) {
      next += 1'000'000'000;
      SleepUntil(next);
      double c = 0, w = 0;
      Tick(&c, &w);
      cpu.push_back(c);
      wall.push_back(w);
    }
    res.samples_per_tick = static_cast<double>(store_->Stats().samples_appended - appended0) / ticks_;
    std::map<std::string, int> states;
    for (const auto& p : collector_->Processes()) ++states[p.state];
    for (const auto& [state, count] : states)
      res.states += fmt::format("{}{} {}", res.states.empty() ? "" : ", ", count, state);
    if (rate > 0) {
      if (!ReadFully(counts.r, launched.data(), n * sizeof(uint64_t), 120'000)) {
        std::fprintf(stderr, "%s: a workload failed\n", name.c_str());
        KillAll(pids);
        return std::nullopt;
      }
      uint64_t total = 0;
      for (uint64_t l : launched) total += l - static_cast<uint64_t>(burst);
      res.rate_reached = static_cast<double>(total) / seconds;
    }
    res.cpu_us = Summarize(cpu);
    res.wall_us = Summarize(wall);
    hold.CloseWrite();  // EOF: the children exit
    bool ok = Reap(pids);
    tracked_.Publish("bench", {});
    Tick(nullptr);  // detaches
    if (!ok) {
      std::fprintf(stderr, "%s: a workload exited with an error\n", name.c_str());
      return std::nullopt;
    }
    return res;
  }

 private:
  void Tick(double* cpu_us, double* wall_us = nullptr) {
    t_ = std::max(t_ + ithbat::kNsPerSec, ithbat::NowNs());
    const int64_t c0 = ThreadCpuNs(), w0 = MonoNs();
    if (auto s = collector_->Collect(t_); !s)
      std::fprintf(stderr, "Collect: %s\n", s.error().message.c_str());
    if (cpu_us != nullptr) *cpu_us = static_cast<double>(ThreadCpuNs() - c0) / 1e3;
    if (wall_us != nullptr) *wall_us = static_cast<double>(MonoNs() - w0) / 1e3;
  }
  // Error paths: the children may be blocked on their go pipe.
  static void KillAll(const std::vector<pid_t>& pids) {
    for (pid_t p : pids) kill(p, SIGKILL);
    Reap(pids);
  }
  static bool Reap(const std::vector<pid_t>& pids) {
    bool ok = true;
    for (pid_t p : pids) {
      int status = 0;
      if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = false;
    }
    return ok;
  }

  std::string self_, lib_;
  int ticks_;
  std::optional<double> budget_;
  TrackedProcesses tracked_;
  std::unique_ptr<ithbat::store::Store> store_;
  std::unique_ptr<ProbesCollector> collector_;
  ithbat::TimeNs t_ = 0;
};

std::vector<double> ParseList(const char* s) {
  std::vector<double> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(std::atof(cur.c_str()));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

// Stopped by a signal (a time limit: `timeout` sends SIGTERM), the copy under /run goes too. Only
// async-signal-safe calls: the paths are fixed before the handler is installed. The children see
// their pipes close and exit; the kernel drops the probes with this process.
char g_cleanup_lib[256];
char g_cleanup_dir[256];

extern "C" void RemoveCopyAndDie(int sig) {
  unlink(g_cleanup_lib);
  rmdir(g_cleanup_dir);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) return ChildMain(argc, argv);
  int ticks = 10;
  size_t procs = 8;
  std::vector<double> idle = {1, 8, 64}, rates = {5000, 20000, 40000};
  std::optional<double> budget;
  std::string fake_libcuda = ITHBAT_FAKE_CUDA_PATH;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ticks")
      ticks = std::clamp(std::atoi(argv[i + 1]), 2, 600);
    else if (a == "--idle")
      idle = ParseList(argv[i + 1]);
    else if (a == "--rates")
      rates = ParseList(argv[i + 1]);
    else if (a == "--budget")
      budget = std::clamp(std::atof(argv[i + 1]), 0.0, 1.0);
    else if (a == "--procs")
      procs = static_cast<size_t>(std::clamp(std::atoi(argv[i + 1]), 1, 256));
    else if (a == "--fake-libcuda")
      fake_libcuda = argv[i + 1];
    else {
      std::fprintf(
          stderr,
          "usage: %s [--ticks N] [--idle 1,8,64] [--rates 5000,20000,40000] [--procs 8] [--budget F] "
          "[--fake-libcuda PATH]\n",
          argv[0]);
      return 2;
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "probes_drain_bench needs root (uprobes, BPF)\n");
    return 1;
  }
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  char tmpl[] = "/run/ithbat-probes-drain-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "cannot create a directory under /run\n");
    return 1;
  }
  const fs::path dir = tmpl;
  chmod(dir.c_str(), 0755);
  const std::string lib = (dir / "libcuda.so.1").string();
  fs::copy_file(fake_libcuda, lib, ec);
  if (ec) {
    std::fprintf(stderr, "cannot copy the fake libcuda %s: %s (--fake-libcuda names another)\n",
                 fake_libcuda.c_str(), ec.message().c_str());
    fs::remove_all(dir, ec);
    return 1;
  }
  chmod(lib.c_str(), 0755);
  if (lib.size() < sizeof(g_cleanup_lib)) {
    std::snprintf(g_cleanup_lib, sizeof(g_cleanup_lib), "%s", lib.c_str());
    std::snprintf(g_cleanup_dir, sizeof(g_cleanup_dir), "%s", dir.c_str());
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, RemoveCopyAndDie);
  }
  int rc = 0;
  {
    Bench bench(self, lib, ticks, budget);
    if (std::string err = bench.Start(); !err.empty()) {
      std::fprintf(stderr, "%s\n", err.c_str());
      fs::remove_all(dir, ec);
      return 1;
    }
    std::vector<Result> results;
    for (double n : idle) {
      auto r = bench.Run(fmt::format("idle {}", n), static_cast<size_t>(n), 0, 1000);
      if (!r)
        rc = 1;
      else
        results.push_back(*r);
    }
    for (double rate : rates) {
      if (rate <= 0) continue;
      auto r = bench.Run(fmt::format("load {}x{}/s", procs, rate), procs, rate, 1000);
      if (!r)
        rc = 1;
      else
        results.push_back(*r);
    }
    bench.Stop();

    std::printf(
        "\nprobes drain: ProbesCollector::Collect per 1 s tick, %d ticks per phase (thread CPU; wall)\n",
        ticks);
    std::printf("%-20s %6s %14s %14s %12s %12s %12s %12s %10s  %s\n", "phase", "procs", "target/s",
                "reached/s", "cpu_us_med", "cpu_us_p90", "cpu_us_max", "wall_us_med", "samples",
                "probe states");
    for (const Result& r : results) {
      std::printf("%-20s %6zu %14.0f %14.0f %12.1f %12.1f %12.1f %12.1f %10.0f  %s\n", r.name.c_str(),
                  r.procs, r.rate_target * static_cast<double>(r.procs), r.rate_reached, r.cpu_us.median,
                  r.cpu_us.p90, r.cpu_us.max, r.wall_us.median, r.samples_per_tick, r.states.c_str());
    }
    // Per process per tick: the slope between the smallest and the largest idle phase.
    const Result* lo = nullptr;
    const Result* hi = nullptr;
    for (const Result& r : results) {
      if (r.rate_target != 0) continue;
      if (lo == nullptr || r.procs < lo->procs) lo = &r;
      if (hi == nullptr || r.procs > hi->procs) hi = &r;
    }
    if (lo != nullptr && hi != nullptr && hi->procs > lo->procs) {
      const double per_proc =
          (hi->cpu_us.median - lo->cpu_us.median) / static_cast<double>(hi->procs - lo->procs);
      const double fixed = lo->cpu_us.median - per_proc * static_cast<double>(lo->procs);
      std::printf(
          "\nper process per tick: %.1f us CPU (fixed part %.1f us); projected at 8 ranks, 1 s ticks: "
          "%.3f%% of a core (target <= 1%%)\n",
          per_proc, fixed, (fixed + 8 * per_proc) / 1e6 * 100);
    }
    // Against the idle phase with as many processes: the same map entries, no calls.
    const Result* same_idle = nullptr;
    for (const Result& r : results) {
      if (r.rate_target == 0 && r.procs == procs) same_idle = &r;
    }
    for (const Result& r : results) {
      if (r.rate_target > 0) {
        std::printf("%s: %.3f%% of a core at %.0f launches/s reached", r.name.c_str(),
                    r.cpu_us.median / 1e6 * 100, r.rate_reached);
        if (same_idle != nullptr && same_idle->cpu_us.median > 0)
          std::printf(" (%.2fx the idle %zu-process tick)", r.cpu_us.median / same_idle->cpu_us.median,
                      procs);
        std::printf("\n");
      }
    }
  }
  fs::remove_all(dir, ec);
  return rc;
}
