// The probes at scale: 10,000 short-lived CUDA processes, all tracked while the collector
// ticks, and afterwards nothing left of them — no kernel link, no entry in any of the BPF
// program's per-process maps, no fd of the agent process, no per-process state in the
// collector — with exact counts for every process that lived across a tick. Plus two processes
// on one library inode, one of which exits while the other keeps calling. Real eBPF, as root;
// a kernel that refuses the program FAILS (the collector must not report degraded).
//
// Which counts are guaranteed (the collector attaches a pid at the first tick that sees it and
// detaches it at the tick that finds its /proc entry gone, after reading its last counts):
//   * a process that is tracked, has libcuda mapped when a tick runs, and stays tracked until a
//     later tick finds it gone: every call it makes after that first tick is counted, exactly,
//     per pid and function (class "across": K launches, K counted);
//   * a process that exits before any tick sees it is never attached: nothing is counted and
//     nothing is left of it (class "shorter");
//   * a process whose calls race with the attaching tick: only the calls after its attachment
//     are counted — never more than it made (class "racing").
// Only "across" processes cost kernel attach/detach work, and a detach waits for an RCU-tasks
// grace period per uprobe_multi link (tens of ms here, see probe_bpf.h): attaching all 10,000
// would take ~25 minutes of grace periods, so each wave of kWave processes has kAcross +
// kRacing that live across a tick and the rest shorter than one — as on a node, where most
// short-lived CUDA processes (nvidia-smi, `python -c "import torch"` probes) live well under a
// tick.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <bpf/bpf.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/probes/probes_collector.h"
#include "core/time.h"
#include "testutil/fake_sink.h"
#include "probes/probe_test_util.h"
#include "testutil/testutil.h"

extern char** environ;

namespace ithbat::collect::probes {
namespace {

namespace fs = std::filesystem;
using testing::FakeSink;

// What /proc/self/fd holds: all fds, and the kernel objects the probes are made of.
struct FdCensus {
  size_t total = 0;
  size_t bpf_links = 0;    // uprobe_multi links
  size_t perf_events = 0;  // classic uprobe links
};
FdCensus TakeFdCensus() {
  FdCensus c;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    ++c.total;
    std::error_code ec;
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (target == "anon_inode:bpf_link") ++c.bpf_links;
    if (target == "anon_inode:[perf_event]") ++c.perf_events;
  }
  return c;
}

// The BPF program's per-process maps, walked through the map fds this process holds (the
// collector's skeleton is the only BPF object loaded in this test): keys in all, and keys whose
// first field — the tgid, in every per-process map (cuda_probes_abi.h) — is one of `pids`.
struct MapKeys {
  size_t total = 0;
  size_t ours = 0;
};
std::map<std::string, MapKeys> WalkProcessMaps(const std::unordered_set<uint32_t>& pids) {
  static const std::set<std::string> kPerProcess = {"stats", "last_launch", "group_depth", "entries",
                                                    "comms"};
  std::map<std::string, MapKeys> out;
  std::vector<int> fds;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == "anon_inode:bpf-map")
      fds.push_back(std::stoi(e.path().filename().string()));
  }
  for (int fd : fds) {
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    const std::string name(info.name, strnlen(info.name, sizeof(info.name)));
    if (!kPerProcess.contains(name) || info.key_size < sizeof(uint32_t)) continue;
    MapKeys& k = out[name];
    std::vector<uint8_t> key(info.key_size), next(info.key_size);
    const void* prev = nullptr;
    // Bounded: a hash map holds at most max_entries keys.
    for (uint64_t i = 0; i <= info.max_entries && bpf_map_get_next_key(fd, prev, next.data()) == 0; ++i) {
      uint32_t tgid = 0;
      std::memcpy(&tgid, next.data(), sizeof(tgid));
      ++k.total;
      if (pids.contains(tgid)) ++k.ours;
      key.swap(next);
      prev = key.data();
    }
  }
  return out;
}

size_t RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

// A root-owned copy of the fake libcuda (no libnccl: these processes load only libcuda).
struct TrustedDriverDir : test_util::TrustedDriverDir {
  TrustedDriverDir() : test_util::TrustedDriverDir(/*with_nccl=*/false) {}
};

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      // Above the fds the children get (0, 3): posix_spawn's dup2 actions run in order, so a
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

// Writes n go bytes (each child of the pipe reads one).
bool Release(Pipe& go, size_t n) {
  const std::string bytes(n, 'g');
  size_t done = 0;
  while (done < n) {
    const ssize_t k = write(go.w, bytes.data() + done, n - done);
    if (k <= 0) return false;
    done += static_cast<size_t>(k);
  }
  return true;
}

// Reads n ready bytes, at most `seconds` in all.
bool AwaitReady(Pipe& ready, size_t n, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  size_t got = 0;
  char buf[256];
  while (got < n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    if (left <= 0) return false;
    pollfd p{ready.r, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t k = read(ready.r, buf, std::min(sizeof(buf), n - got));
    if (k <= 0) return false;  // every writer gone: a child died before it was ready
    got += static_cast<size_t>(k);
  }
  return true;
}

// The helper processes of one test; whatever is still running at the end is killed and reaped.
class Children {
 public:
  ~Children() {
    for (pid_t p : live_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  // ithbat_probe_short_lived with `phases`, stdin from `go`, fd 3 to `ready`, stdout to /dev/null.
  pid_t Spawn(const std::vector<long>& phases, Pipe& go, Pipe& ready, const std::vector<std::string>& env) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, go.r, 0);
    posix_spawn_file_actions_adddup2(&fa, ready.w, 3);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> args = {ITHBAT_PROBE_SHORT_LIVED};
    for (long k : phases) args.push_back(std::to_string(k));
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_copy = env;
    for (auto& e : env_copy) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    live_.insert(pid);
    return pid;
  }
  // The child's exit status (waitpid's), -1 if it is not ours.
  int Reap(pid_t pid) {
    if (!live_.erase(pid)) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }
  void Kill(pid_t pid) { kill(pid, SIGKILL); }

 private:
  std::set<pid_t> live_;
};

class ProbesScale : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the probe tests need root (uprobes, BPF)";
    ASSERT_FALSE(driver_.dir.empty()) << "cannot create a root-owned directory under /run";
    ProbesOptions o;
    o.tracked = &tracked_;
    auto c = ProbesCollector::Create(std::move(o));
    ASSERT_TRUE(c) << c.error().message;
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_));
    ASSERT_TRUE(collector_->Start());
    ASSERT_EQ(collector_->Health().degraded, "") << "the kernel refused the probes";
    env_ = {"LD_LIBRARY_PATH=" + driver_.dir.string(), "ITHBAT_FAKE_STATE=", "PATH=/usr/bin:/bin"};
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
  }
  void Track(const std::vector<pid_t>& pids) {
    std::vector<agent::TrackedProcesses::Process> ps;
    for (pid_t p : pids) {
      agent::TrackedProcesses::Process proc;
      proc.pid = p;
      proc.identity.job = "scale";
      proc.identity.rank = static_cast<int32_t>(ps.size());
      proc.source = "test";
      ps.push_back(proc);
    }
    tracked_.Publish("test", std::move(ps));
  }
  void Tick() {
    t_ = std::max(t_ + kNsPerSec, NowNs());
    ASSERT_TRUE(collector_->Collect(t_));
  }
  std::optional<double> Value(std::string_view metric, FakeSink::LabelSubset labels) {
    auto s = sink_.FindWith(metric, labels);
    if (!s || s->samples.empty()) return std::nullopt;
    return s->samples.back().second;
  }

  TrustedDriverDir driver_;
  agent::TrackedProcesses tracked_;
  FakeSink sink_;
  std::unique_ptr<ProbesCollector> collector_;
  std::vector<std::string> env_;
  TimeNs t_ = 0;
};

TEST_F(ProbesScale, TenThousandShortLivedProcessesLeaveNothingBehind) {
  constexpr size_t kProcesses = 10'000;
  constexpr size_t kWave = 100;  // started together, tracked together
  constexpr size_t kAcross = 2;  // per wave: attached at a tick before their first call
  constexpr size_t kRacing = 1;  // per wave: released just before the attaching tick
  static_assert(kProcesses % kWave == 0 && kAcross + kRacing < kWave);
  const auto started = std::chrono::steady_clock::now();

  Tick();  // the collector's own fds (maps, ring buffer) exist from Start
  const FdCensus fds_before = TakeFdCensus();
  const size_t rss_before = RssKiB();

  enum Class { kAcrossTick, kRacingTick, kShorter };
  struct Expect {
    Class cls;
    long launches;
  };
  // Counts, per pid, from the series whose last sample is newer than `since`. Accounting is per
  // wave: 10k spawns can wrap pid_max (32768 on small hosts), so a pid may come back in a later
  // wave and its earlier series (same pid label) stay in the sink. A wave's pids are unique (all
  // of a wave are alive together before any is released), and the series of an earlier wave's
  // process stopped at that wave's last tick, before `since`.
  struct Got {
    double launches = -1, launch_calls = -1, syncs = -1, sync_returns = -1;
  };
  auto read_counts = [this](TimeNs since) {
    std::map<pid_t, Got> got;
    for (const FakeSink::Series& s : sink_.series()) {
      auto pid_label = s.labels.Get("pid");
      if (!pid_label || s.samples.empty() || s.samples.back().first <= since) continue;
      Got& g = got[static_cast<pid_t>(std::stol(std::string(*pid_label)))];
      const double v = s.samples.back().second;
      const auto api = s.labels.Get("api");
      if (!api) continue;
      if (s.desc.name == "ithbat_probe_launches_total" && *api == "cuLaunchKernel") g.launches = v;
      if (s.desc.name == "ithbat_probe_calls_total" && *api == "cuLaunchKernel") g.launch_calls = v;
      if (s.desc.name == "ithbat_probe_calls_total" && *api == "cuStreamSynchronize") g.syncs = v;
      if (s.desc.name == "ithbat_probe_call_returns_total" && *api == "cuStreamSynchronize")
        g.sync_returns = v;
    }
    return got;
  };
  std::unordered_set<uint32_t> all_pids;
  Children children;
  size_t spawned = 0, reused_pids = 0;
  size_t across = 0, racing_seen = 0, shorter_seen = 0;
  double across_expected = 0, across_counted = 0, racing_made = 0, racing_counted = 0;

  for (size_t wave = 0; wave < kProcesses / kWave; ++wave) {
    SCOPED_TRACE(fmt::format("wave {}", wave));
    const TimeNs since = t_;         // the last tick before this wave's processes existed
    std::map<pid_t, Expect> expect;  // this wave's processes
    Pipe ready, go[3];
    ASSERT_GE(ready.r, 0);
    std::vector<pid_t> pids, by_class[3];
    for (size_t i = 0; i < kWave; ++i) {
      const Class cls = i < kAcross ? kAcrossTick : i < kAcross + kRacing ? kRacingTick : kShorter;
      // Varied, so no two neighbours agree; racing ones call long enough (the fake's default 5 us
      // kernels behind a 1024-deep queue: ~25 ms) for the tick to find most of them mid-run.
      const long launches = (cls == kRacingTick ? 5000 : 1) + static_cast<long>(spawned % 7);
      const pid_t pid = children.Spawn({launches}, go[cls], ready, env_);
      ASSERT_GT(pid, 0) << "posix_spawn failed";
      ++spawned;
      pids.push_back(pid);
      by_class[cls].push_back(pid);
      ASSERT_TRUE(expect.emplace(pid, Expect{cls, launches}).second) << "pid " << pid << " twice in one wave";
      if (!all_pids.insert(static_cast<uint32_t>(pid)).second) ++reused_pids;
    }
    ready.CloseWrite();
    for (Pipe& g : go) g.CloseRead();
    ASSERT_TRUE(AwaitReady(ready, kWave, 60)) << "a child never mapped libcuda";
    Track(pids);  // every process of the wave is tracked while alive

    // Shorter than a tick: run and gone before the tick that would attach them.
    ASSERT_TRUE(Release(go[kShorter], by_class[kShorter].size()));
    for (pid_t p : by_class[kShorter]) ASSERT_EQ(children.Reap(p), 0) << "pid " << p;
    // Racing: released, then the tick attaches whatever is still there.
    ASSERT_TRUE(Release(go[kRacingTick], by_class[kRacingTick].size()));
    Tick();
    for (const auto& proc : collector_->Processes()) {
      if (expect.at(proc.pid).cls == kAcrossTick) {
        EXPECT_EQ(proc.state, "exact") << "pid " << proc.pid;
      }
    }
    // Across a tick: attached before their first call.
    ASSERT_TRUE(Release(go[kAcrossTick], by_class[kAcrossTick].size()));
    for (Class c : {kAcrossTick, kRacingTick}) {
      for (pid_t p : by_class[c]) ASSERT_EQ(children.Reap(p), 0) << "pid " << p;
    }
    Tick();  // reads their last counts, finds them gone, detaches
    ASSERT_TRUE(collector_->Processes().empty()) << "exited processes still held by the collector";
    ASSERT_EQ(collector_->open_links(), 0u);

    const std::map<pid_t, Got> got = read_counts(since);
    for (const auto& [pid, e] : expect) {
      auto it = got.find(pid);
      switch (e.cls) {
        case kAcrossTick:
          ++across;
          across_expected += static_cast<double>(e.launches);
          ASSERT_NE(it, got.end()) << "pid " << pid << " lived across a tick but has no series";
          across_counted += it->second.launches;
          EXPECT_EQ(it->second.launches, e.launches) << "pid " << pid;
          EXPECT_EQ(it->second.launch_calls, e.launches) << "pid " << pid;
          EXPECT_EQ(it->second.syncs, 1) << "pid " << pid;
          EXPECT_EQ(it->second.sync_returns, 1) << "pid " << pid;
          break;
        case kRacingTick:
          racing_made += static_cast<double>(e.launches);
          if (it == got.end()) break;
          ++racing_seen;
          racing_counted += std::max(0.0, it->second.launches);
          EXPECT_LE(it->second.launches, e.launches) << "pid " << pid << ": more counted than made";
          EXPECT_LE(it->second.syncs, 1) << "pid " << pid;
          EXPECT_LE(it->second.sync_returns, std::max(0.0, it->second.syncs)) << "pid " << pid;
          break;
        case kShorter:
          if (it != got.end()) ++shorter_seen;
          break;
      }
    }
  }
  Track({});
  Tick();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(shorter_seen, 0u) << "a process that exited before any tick saw it has series";
  EXPECT_EQ(across, kProcesses / kWave * kAcross);
  EXPECT_EQ(across_counted, across_expected) << "the counts of the processes that lived across a tick";

  // Nothing left: links (the collector's count and the kernel objects among our fds), fds, map
  // entries, per-process state.
  EXPECT_EQ(collector_->open_links(), 0u);
  EXPECT_TRUE(collector_->Processes().empty());
  const FdCensus fds_after = TakeFdCensus();
  EXPECT_EQ(fds_after.total, fds_before.total) << "fds leaked";
  EXPECT_EQ(fds_after.bpf_links, 0u);
  EXPECT_EQ(fds_after.perf_events, 0u);
  const auto maps = WalkProcessMaps(all_pids);
  EXPECT_EQ(maps.size(), 5u) << "the per-process maps were not all found among the fds";
  for (const auto& [name, k] : maps) {
    EXPECT_EQ(k.ours, 0u) << "entries of exited processes left in map " << name;
    EXPECT_EQ(k.total, 0u) << "entries left in map " << name << " with nothing tracked";
  }
  EXPECT_EQ(collector_->Health().degraded, "");
  std::cerr << fmt::format(
      "scale: {} processes ({} across a tick, {} racing of which {} attached, {} shorter) in {:.1f} s; "
      "across: {} launches counted of {}; racing: {} counted of {}; fds {} -> {}; RSS {} -> {} KiB; "
      "collector errors {}; pids reused across waves {}\n",
      spawned, across, kProcesses / kWave * kRacing, racing_seen,
      spawned - across - kProcesses / kWave * kRacing, seconds, across_counted, across_expected,
      racing_counted, racing_made, fds_before.total, fds_after.total, rss_before, RssKiB(),
      collector_->Health().errors, reused_pids);
}

// Two processes mapping one libcuda inode (one resolution, uprobes on the same file): one exits
// while the other is between two phases of calls; its detach removes only its own links and map
// entries, and the survivor's calls before and after are all counted.
TEST_F(ProbesScale, TwoProcessesOnOneInodeOneExitingMidRun) {
  Children children;
  Pipe ready_s, go_s, ready_d, go_d;
  constexpr long kPhase = 1000;
  const pid_t s = children.Spawn({kPhase, kPhase}, go_s, ready_s, env_);
  const pid_t d = children.Spawn({1'000'000'000}, go_d, ready_d, env_);  // runs until killed
  ASSERT_GT(s, 0);
  ASSERT_GT(d, 0);
  ready_s.CloseWrite();
  ready_d.CloseWrite();
  go_s.CloseRead();
  go_d.CloseRead();
  ASSERT_TRUE(AwaitReady(ready_s, 1, 60));
  ASSERT_TRUE(AwaitReady(ready_d, 1, 60));
  Track({s, d});
  Tick();
  auto procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 2u);
  for (const auto& p : procs) {
    EXPECT_EQ(p.state, "exact") << p.pid;
    ASSERT_EQ(p.libraries.size(), 1u) << p.pid;
    EXPECT_GT(p.libraries[0].links, 0u);
  }
  std::set<std::pair<dev_t, ino_t>> files;
  for (const auto& p : procs) {
    struct stat st {};
    ASSERT_EQ(stat(fmt::format("/proc/{}/root{}", p.pid, p.libraries[0].path).c_str(), &st), 0);
    files.emplace(st.st_dev, st.st_ino);
  }
  ASSERT_EQ(files.size(), 1u) << "the two processes should map one file";

  ASSERT_TRUE(Release(go_s, 1));
  ASSERT_TRUE(Release(go_d, 1));
  ASSERT_TRUE(AwaitReady(ready_s, 1, 60)) << "the survivor never finished its first phase";
  const std::string dpid = std::to_string(d), spid = std::to_string(s);
  double d_launches = 0;
  for (int i = 0; i < 600 && d_launches == 0; ++i) {  // until d is seen calling (bounded)
    Tick();
    d_launches = Value("ithbat_probe_launches_total", {{"pid", dpid}, {"api", "cuLaunchKernel"}}).value_or(0);
    if (d_launches == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(d_launches, 0);
  EXPECT_EQ(Value("ithbat_probe_launches_total", {{"pid", spid}, {"api", "cuLaunchKernel"}}), kPhase);

  children.Kill(d);  // mid-run: wherever it is, a launch or between two
  children.Reap(d);
  Tick();
  procs = collector_->Processes();
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].pid, s);
  ASSERT_EQ(procs[0].libraries.size(), 1u);
  EXPECT_EQ(collector_->open_links(), procs[0].libraries[0].links) << "only the survivor's links remain";
  EXPECT_EQ(TakeFdCensus().bpf_links + TakeFdCensus().perf_events, collector_->open_links());
  for (const auto& [name, k] : WalkProcessMaps({static_cast<uint32_t>(d)})) {
    EXPECT_EQ(k.ours, 0u) << "entries of the exited process left in map " << name;
  }
  const auto survivor = WalkProcessMaps({static_cast<uint32_t>(s)});
  ASSERT_TRUE(survivor.contains("stats"));
  EXPECT_GT(survivor.at("stats").ours, 0u) << "the survivor's counters went with the other's detach";

  ASSERT_TRUE(Release(go_s, 1));  // second phase, after the other's detach
  ASSERT_EQ(children.Reap(s), 0);
  Tick();
  EXPECT_EQ(Value("ithbat_probe_launches_total", {{"pid", spid}, {"api", "cuLaunchKernel"}}), 2 * kPhase);
  EXPECT_EQ(Value("ithbat_probe_calls_total", {{"pid", spid}, {"api", "cuStreamSynchronize"}}), 2);
  EXPECT_EQ(Value("ithbat_probe_call_returns_total", {{"pid", spid}, {"api", "cuStreamSynchronize"}}), 2);
  EXPECT_EQ(collector_->open_links(), 0u);
  EXPECT_TRUE(collector_->Processes().empty());
  for (const auto& [name, k] : WalkProcessMaps({static_cast<uint32_t>(s), static_cast<uint32_t>(d)})) {
    EXPECT_EQ(k.total, 0u) << name;
  }
}

}  // namespace
}  // namespace ithbat::collect::probes
