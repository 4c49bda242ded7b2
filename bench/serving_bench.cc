// The serving collector's discovery per tick over a proc root of N processes, none of them a
// server (so no scrape: only the readdir and the cmdline reads are timed). Three phases:
//   steady    every pid seen before: one readdir, no cmdline read (the common tick);
//   rescan    every cmdline read again (rescan_every_ticks = 1: the cost of tick 0, of every
//             rescan, and of each exec-grace tick after start-up, when every pid is new);
//   churn     steady, plus 8 new pids a tick that are each read on arrival and on their next
//             exec_grace_ticks ticks (a launcher's child caught before its exec).
// The proc root is a fixture tree in /tmp (cmdlines of realistic length), so the figures are
// tmpfs/ext4 reads, not procfs's; compare the phases' ratios, not absolute times.
//
// Run: build/bench/serving_bench
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/null_sink.h"
#include "collect/serving/listener.h"
#include "collect/serving/serving_collector.h"
#include "collect/serving/workload_tie.h"

namespace {

using ithbat::collect::ServingCollector;
using ithbat::collect::ServingOptions;

using ithbat::bench::NullSink;

// A proc root with pids 1000.. holding a python training cmdline each.
class ProcTree {
 public:
  explicit ProcTree(int pids) {
    char tmpl[] = "/tmp/ithbat-serving-bench-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    for (int i = 0; i < pids; i++) Add(1000 + i);
  }
  ~ProcTree() { std::filesystem::remove_all(root_); }
  void Add(int pid) {
    std::filesystem::create_directories(root_ / std::to_string(pid));
    static constexpr char kCmdline[] = "/usr/bin/python3\0-u\0train.py\0--config\0configs/llama-8b.yaml";
    std::ofstream(root_ / std::to_string(pid) / "cmdline", std::ios::binary)
        .write(kCmdline, sizeof(kCmdline));
  }
  void Remove(int pid) { std::filesystem::remove_all(root_ / std::to_string(pid)); }
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
};

void Run(benchmark::State& state, uint32_t rescan_every_ticks, int new_per_tick) {
  ProcTree proc(static_cast<int>(state.range(0)));
  ServingOptions options;
  options.procfs = proc.root();
  options.rescan_every_ticks = rescan_every_ticks;
  NullSink sink;
  auto collector = ServingCollector::Create(options);
  if (!collector->Init(sink) || !collector->Start()) {
    state.SkipWithError("collector did not start");
    return;
  }
  int64_t t = 1;
  for (int i = 0; i < 4; i++) benchmark::DoNotOptimize(collector->Collect(t++));  // past tick 0 and its grace
  int next_pid = 1000000;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < new_per_tick; i++) {
      proc.Remove(next_pid - 3 * new_per_tick);  // short-lived: three ticks each
      proc.Add(next_pid++);
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(collector->Collect(t++));
  }
  state.counters["pids"] = static_cast<double>(state.range(0));
}

void BM_Steady(benchmark::State& state) { Run(state, 1u << 30, 0); }
void BM_Rescan(benchmark::State& state) { Run(state, 1, 0); }
void BM_Churn(benchmark::State& state) { Run(state, 1u << 30, 8); }

// The check that a server's process holds its listening socket (listener.h): the kernel asked
// for the sockets listening on the port (netlink), then this process's descriptors read under
// the real /proc. It listens on a loopback port and holds N other descriptors (a vLLM server
// holds a few hundred to a few thousand). It runs when a server is found and again each tick
// until it passes; a passed check is cached until the next rescan.
void BM_ListenerCheck(benchmark::State& state) {
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd, 1) != 0 ||
      ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    state.SkipWithError("cannot listen");
    return;
  }
  std::vector<int> others;
  for (int64_t i = 0; i < state.range(0); i++) others.push_back(::open("/dev/null", O_RDONLY));
  const uint16_t port = ntohs(addr.sin_port);
  for (auto _ : state) {
    auto inodes = ithbat::collect::serving::ListeningInodes(port);
    auto held = inodes ? ithbat::collect::serving::HoldsSocket("/proc", ::getpid(), *inodes)
                       : ithbat::Result<bool>(false);
    if (!held || !*held) state.SkipWithError("the listener was not found");
    benchmark::DoNotOptimize(held);
  }
  for (int fd : others) ::close(fd);
  ::close(listen_fd);
  state.counters["fds"] = static_cast<double>(state.range(0));
}

// The real processes of this machine other than this one, at most n: GPU processes for the tie
// benchmarks (none descends from this process, the "server").
std::vector<int32_t> OtherPids(int64_t n) {
  std::vector<int32_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int32_t pid = std::stoi(name);
    if (pid != ::getpid()) pids.push_back(pid);
    if (static_cast<int64_t>(pids.size()) == n) break;
  }
  return pids;
}

// Reading the GPU processes' ancestors: done when the GPU process list changes or at a rescan.
void BM_GpuProcessLines(benchmark::State& state) {
  const std::vector<int32_t> gpu_pids = OtherPids(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(ithbat::collect::serving::ReadGpuProcessLines("/proc", gpu_pids));
  state.counters["gpu_processes"] = static_cast<double>(gpu_pids.size());
}

// What an untied server costs a tick (a tied one is cached until the next rescan): the GPU half
// over the lines read before, then the job half reads the server's cgroup.
void BM_WorkloadTie(benchmark::State& state) {
  const auto lines = ithbat::collect::serving::ReadGpuProcessLines("/proc", OtherPids(state.range(0)));
  const std::vector<int32_t> server = {::getpid()};
  for (auto _ : state) {
    auto gpu = ithbat::collect::serving::GpuTie(server, lines);
    auto job = ithbat::collect::serving::JobTie("/proc", server);
    benchmark::DoNotOptimize(gpu);
    benchmark::DoNotOptimize(job);
  }
  state.counters["gpu_processes"] = static_cast<double>(lines.size());
}

BENCHMARK(BM_Steady)->Arg(500)->Arg(2000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Rescan)->Arg(500)->Arg(2000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Churn)->Arg(500)->Arg(2000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ListenerCheck)->Arg(10)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GpuProcessLines)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WorkloadTie)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
