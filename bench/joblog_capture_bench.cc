// Cost of the eBPF job-output capture per write() of a process printing 100k lines/s.
//
// One process, three phases in one run, so the ratios compare like with like:
//   off        no BPF program loaded
//   untracked  the capture loaded and attached (another process, a sleeping child, is
//              tracked), this process not tracked: what every other process on the node pays
//              while a job is tracked (with tp_btf/raw_tp every syscall runs the filter; with
//              nothing tracked at all the programs are detached and cost nothing)
//   tracked    this process tracked: each write is copied into the ring buffer and drained by
//              a consumer thread, as the agent does
// Each phase writes 100-byte lines to fd 1 (pointed at /dev/null for the phase) paced at
// 100k lines/s, and times each write() call alone (manual time), so the numbers are the cost
// of the syscall as the writer sees it. Printed at the end: the mean ns per write of each
// phase and the ratios to "off". Needs root (CAP_BPF) and kernel BTF. ITHBAT_BENCH_ATTACH=raw_tp
// (or tp_btf, fexit) measures one attachment instead of the one the probe picks.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/joblog/ebpf_source.h"

namespace {

using ithbat::collect::joblog::CaptureRecord;
using ithbat::collect::joblog::EbpfCaptureSource;
using ithbat::collect::joblog::EbpfSourceOptions;

constexpr int64_t kLinesPerSecond = 100'000;
constexpr int64_t kIterations = 300'000;  // 3 s per phase

std::unique_ptr<EbpfCaptureSource> g_source;
std::string g_load_error;

enum class Phase { kOff, kUntracked, kTracked };

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void BM_Write(benchmark::State& state, Phase phase) {
  if (phase != Phase::kOff && !g_source) {
    EbpfSourceOptions options;
    if (const char* a = getenv("ITHBAT_BENCH_ATTACH")) options.attach = a;  // fexit, tp_btf, raw_tp
    auto s = EbpfCaptureSource::Create(options);
    if (!s) {
      g_load_error = s.error().message;
      state.SkipWithError(g_load_error.c_str());
      return;
    }
    g_source = std::move(*s);
    (void)g_source->Start();
  }
  // Something must be tracked for the programs to be attached at all (lazy attach).
  pid_t sleeper = -1;
  if (phase == Phase::kUntracked) {
    sleeper = fork();
    if (sleeper == 0) {
      pause();
      _exit(0);
    }
    (void)g_source->Track(sleeper, sleeper, false);
  }
  if (phase == Phase::kTracked) (void)g_source->Track(getpid(), getpid(), false);
  if (phase != Phase::kOff && !g_source->attached()) {
    state.SkipWithError("the capture is not attached");
    return;
  }

  // The consumer: drains what the ring delivers, as the collector's tick does.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> drained{0};
  std::thread consumer;
  if (phase != Phase::kOff) {
    consumer = std::thread([&] {
      std::vector<CaptureRecord> recs;
      while (!stop.load()) {
        recs.clear();
        g_source->Drain(recs, 1'000'000);
        drained += recs.size();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      recs.clear();
      g_source->Drain(recs, 1'000'000);
      drained += recs.size();
    });
  }

  const int saved = dup(1);
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  dup2(null_fd, 1);
  std::string line(99, 'x');
  line += '\n';
  const uint64_t period = 1'000'000'000 / kLinesPerSecond;
  uint64_t next = NowNs();
  for (auto _ : state) {
    while (NowNs() < next) {
    }
    next += period;
    const uint64_t t0 = NowNs();
    ssize_t n = write(1, line.data(), line.size());
    const uint64_t t1 = NowNs();
    benchmark::DoNotOptimize(n);
    state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
  }
  dup2(saved, 1);
  close(saved);
  close(null_fd);

  if (phase != Phase::kOff) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the ring empty
    stop = true;
    consumer.join();
    auto c = g_source->Counters();
    state.counters["records_drained"] = static_cast<double>(drained.load());
    state.counters["lost_records"] = static_cast<double>(c.lost_records);
    state.SetLabel(std::string(g_source->attachment()));
  }
  if (phase == Phase::kTracked) (void)g_source->Untrack(getpid());
  if (sleeper > 0) {
    (void)g_source->Untrack(sleeper);
    kill(sleeper, SIGKILL);
    waitpid(sleeper, nullptr, 0);
  }
}

// Keeps the mean time per write of each phase for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.iterations > 0 && r.run_type == Run::RT_Iteration) {
        mean_ns[r.benchmark_name()] = r.real_accumulated_time * 1e9 / static_cast<double>(r.iterations);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> mean_ns;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (auto [name, phase] :
       {std::pair{"BM_Write/off", Phase::kOff}, std::pair{"BM_Write/untracked", Phase::kUntracked},
        std::pair{"BM_Write/tracked", Phase::kTracked}}) {
    benchmark::RegisterBenchmark(name, BM_Write, phase)
        ->UseManualTime()
        ->Iterations(kIterations)
        ->Unit(benchmark::kNanosecond);
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  auto get = [&](const char* n) {
    for (const auto& [k, v] : reporter.mean_ns) {
      if (k.rfind(n, 0) == 0) return v;
    }
    return 0.0;
  };
  const double off = get("BM_Write/off"), untracked = get("BM_Write/untracked"),
               tracked = get("BM_Write/tracked");
  if (off > 0 && untracked > 0 && tracked > 0) {
    std::printf(
        "\nper write() at %lld lines/s: off %.0f ns, untracked %.0f ns (x%.2f), tracked %.0f ns (x%.2f)\n",
        static_cast<long long>(kLinesPerSecond), off, untracked, untracked / off, tracked, tracked / off);
  } else if (!g_load_error.empty()) {
    std::printf("\nthe capture could not load: %s\n", g_load_error.c_str());
    return 1;
  }
  g_source.reset();
  return 0;
}
