// The sched_io collector against a real program (sched_io_workload.cc) on a real FUSE mount
// (ithbat-slowfs), with the real BPF programs: runs as root and FAILS when the kernel refuses
// them (the collector reports degraded). Every assertion is a lower bound or an exact count
// that holds by construction of the program, whatever the load of the machine.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <set>
#include <string_view>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "agent/tracked_processes.h"
#include "collect/sched_io/mountinfo.h"
#include "collect/sched_io/sched_io_collector.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::sched_io {
namespace {

using ithbat::testing::FakeSink;
using ithbat::testing::TempDir;

constexpr int kSleeps = 5, kSleepMs = 40, kHoldMs = 300, kWrites = 8, kFsyncs = 3, kSpinMs = 150,
              kChildMs = 250;
constexpr int kFsyncDelayMs = 60, kFlushDelayMs = 40;

// A child process with a pipe on its stdin (the gate) and one on its stdout (key=value lines).
class Child {
 public:
  Child(const std::vector<std::string>& argv, bool pipes) {
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipes && (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)) return;
    pid_ = fork();
    if (pid_ == 0) {
      if (pipes) {
        dup2(in[0], 0);
        dup2(out[1], 1);
      }
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    if (pipes) {
      close(in[0]);
      close(out[1]);
      gate_ = in[1];
      out_ = out[0];
    }
  }
  ~Child() {
    if (gate_ >= 0) close(gate_);
    if (out_ >= 0) close(out_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Gate() { ASSERT_EQ(write(gate_, "g", 1), 1); }
  // Reads lines until `key` appears (or EOF); returns every key=value seen so far.
  std::map<std::string, long long> ReadUntil(const std::string& key) {
    while (!values_.contains(key)) {
      char buf[4096];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) break;
      pending_.append(buf, static_cast<size_t>(n));
      size_t eol;
      while ((eol = pending_.find('\n')) != std::string::npos) {
        std::string line = pending_.substr(0, eol);
        pending_.erase(0, eol + 1);
        size_t eq = line.find('=');
        if (eq != std::string::npos) values_[line.substr(0, eq)] = std::atoll(line.c_str() + eq + 1);
      }
    }
    return values_;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int gate_ = -1, out_ = -1;
  bool reaped_ = false;
  std::string pending_;
  std::map<std::string, long long> values_;
};

dev_t DevOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_dev : 0;
}

// ithbat-slowfs mounted on a temporary directory for the test's life.
class SlowFs {
 public:
  SlowFs() : mount_(mnt_dir_.path().string()) {
    if (std::string_view(ITHBAT_SLOWFS).empty()) {
      why_ = "ithbat-slowfs was not built: libfuse3 (pkg-config fuse3, package libfuse3-dev) was missing when "
             "CMake configured; install it and reconfigure";
      return;
    }
    child_.emplace(std::vector<std::string>{ITHBAT_SLOWFS, "--foreground", "--fsync-delay-ms",
                                            std::to_string(kFsyncDelayMs), "--flush-delay-ms",
                                            std::to_string(kFlushDelayMs), backing_.path().string(), mount_},
                   false);
    const dev_t before = DevOf(backing_.path().string());
    for (int i = 0; i < 500 && !mounted_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      mounted_ = DevOf(mount_) != before && DevOf(mount_) != 0;
    }
    if (!mounted_) why_ = "ithbat-slowfs did not mount (needs /dev/fuse and root)";
  }
  ~SlowFs() {
    if (mounted_) umount2(mount_.c_str(), MNT_DETACH);
    child_.reset();
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& mount() const { return mount_; }

 private:
  TempDir backing_, mnt_dir_;
  std::string mount_;
  std::optional<Child> child_;
  bool mounted_ = false;
  std::string why_;
};

double Last(const FakeSink& sink, std::string_view name, const FakeSink::LabelSubset& subset) {
  auto s = sink.FindWith(name, subset);
  if (!s || s->samples.empty()) {
    ADD_FAILURE() << "no sample of " << name;
    return -1;
  }
  return s->samples.back().second;
}

// CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Every second a scope's threads were seen: on CPU plus off CPU in every class.
double ScopeSeconds(const FakeSink& sink, const std::string& pid, const std::string& scope) {
  double sum = Last(sink, "ithbat_sched_oncpu_seconds_total", {{"pid", pid}, {"scope", scope}});
  for (const char* cls : {"runnable", "lock", "io", "sleep"}) {
    sum += Last(sink, "ithbat_sched_offcpu_seconds_total", {{"pid", pid}, {"scope", scope}, {"class", cls}});
  }
  return sum;
}

// The sum of a metric's last samples over every series of the process.
double SumLast(const FakeSink& sink, std::string_view name, const std::string& pid) {
  double sum = 0;
  for (const auto& s : sink.series()) {
    if (s.desc.name != name || s.samples.empty()) continue;
    if (s.labels.ToString().find("pid=\"" + pid + "\"") == std::string::npos) continue;
    sum += s.samples.back().second;
  }
  return sum;
}

double MaxLast(const FakeSink& sink, std::string_view name, const std::string& pid) {
  double m = 0;
  for (const auto& s : sink.series()) {
    if (s.desc.name != name || s.samples.empty()) continue;
    if (s.labels.ToString().find("pid=\"" + pid + "\"") == std::string::npos) continue;
    m = std::max(m, s.samples.back().second);
  }
  return m;
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

class SchedIoLive : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedIoOptions o = options_;
    o.tracked = &tracked_;
    auto c = SchedIoCollector::Create(o);
    ASSERT_TRUE(c.has_value()) << c.error().message;
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_).has_value());
    ASSERT_TRUE(collector_->Start().has_value());
    // Never a skip: CI runs this as root on a kernel with BTF; a refusal is a failure.
    ASSERT_EQ(collector_->Health().degraded, "") << "sched_io BPF programs did not load";
    ASSERT_NE(collector_->bpf(), nullptr);
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
  }
  void Tick() {
    t_ += 1'000'000'000;
    auto s = collector_->Collect(t_);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    ASSERT_EQ(collector_->Health().degraded, "");
  }

  SchedIoOptions options_;  // a derived fixture may change it in its constructor
  agent::TrackedProcesses tracked_;
  FakeSink sink_;
  std::unique_ptr<SchedIoCollector> collector_;
  TimeNs t_ = 1'700'000'000'000'000'000;
};

TEST(SchedIoCollector, DescribesValidUniqueMetricsAndNeedsATrackedSet) {
  agent::TrackedProcesses tracked;
  SchedIoOptions o;
  o.tracked = &tracked;
  auto c = SchedIoCollector::Create(o);
  ASSERT_TRUE(c.has_value());
  std::set<std::string> names;
  for (const auto& d : (*c)->Describe()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_FALSE(d.help.empty()) << d.name;
  }
  EXPECT_FALSE(SchedIoCollector::Create(SchedIoOptions{}).has_value());
}

TEST_F(SchedIoLive, CountsWhatTheProgramDidAndNothingElse) {
  SlowFs slow;
  ASSERT_TRUE(slow.mounted()) << slow.why();
  TempDir local;
  const std::vector<std::string> argv = {ITHBAT_SCHED_IO_WORKLOAD, slow.mount(), local.path().string(),
                                         std::to_string(kSleeps),  std::to_string(kSleepMs),
                                         std::to_string(kHoldMs),  std::to_string(kWrites),
                                         std::to_string(kFsyncs),  std::to_string(kSpinMs),
                                         std::to_string(kChildMs)};
  Child tracked_proc(argv, true);
  Child other(argv, true);  // the same work, never tracked
  ASSERT_GT(tracked_proc.pid(), 0);
  ASSERT_GT(other.pid(), 0);
  ASSERT_TRUE(tracked_proc.ReadUntil("ready").contains("ready"));
  ASSERT_TRUE(other.ReadUntil("ready").contains("ready"));

  Identity id;
  id.job = "j1";
  id.rank = 3;
  tracked_.Publish("test", {{tracked_proc.pid(), id, "test"}});
  Tick();
  ASSERT_EQ(collector_->Roots(), std::vector<int32_t>{tracked_proc.pid()});
  tracked_proc.Gate();
  other.Gate();
  auto v = tracked_proc.ReadUntil("done");
  auto ov = other.ReadUntil("done");
  ASSERT_TRUE(v.contains("done")) << "the workload failed";
  ASSERT_TRUE(ov.contains("done")) << "the untracked workload failed";
  // A spinner's last slice is counted at its TASK_DEAD switch, which can come after join
  // returned in the workload: wait for it (the thread's state goes there), then read.
  for (int i = 0; i < 500 && (collector_->bpf()->HasThread(static_cast<uint32_t>(v["tid_spin0"])) ||
                              collector_->bpf()->HasThread(static_cast<uint32_t>(v["tid_spin1"])));
       ++i) {
    SleepMs(10);
  }
  Tick();

  const std::string pid = std::to_string(tracked_proc.pid());
  // What the kernel counted next to what the program measured, for whoever reads the log.
  for (const auto& s : sink_.series()) {
    if (s.samples.empty() || s.labels.ToString().find("pid=\"" + pid + "\"") == std::string::npos) continue;
    std::printf("  %s%s %g\n", s.desc.name.c_str(), s.labels.ToString().c_str(), s.samples.back().second);
  }
  for (const auto& [k, val] : v) std::printf("  program: %s=%lld\n", k.c_str(), val);
  auto sched = [&](std::string scope, std::string cls) {
    return Last(sink_, "ithbat_sched_offcpu_seconds_total",
                {{"pid", pid}, {"job_id", "j1"}, {"rank", "3"}, {"scope", scope}, {"class", cls}});
  };
  auto oncpu = [&](std::string scope) {
    return Last(sink_, "ithbat_sched_oncpu_seconds_total", {{"pid", pid}, {"scope", scope}});
  };
  const double ms = 1e-3, ns = 1e-9;

  // sleep: N sleeps of D on the main thread (each interval ends at the timer, set before the
  // switch-out: at most a few µs short of D).
  EXPECT_GE(sched("main", "sleep"), kSleeps * (kSleepMs - 1) * ms);
  // The holder slept H while holding the mutex.
  EXPECT_GE(sched("threads", "sleep"), (kHoldMs - 1) * ms);
  // lock: the main thread's wait in lock() was futex sleep, or runnable/on-CPU time.
  const double lock_wait = v["lock_wait_ns"] * ns;
  EXPECT_GT(sched("main", "lock"), 0);
  EXPECT_GE(sched("main", "lock") + sched("main", "runnable") + oncpu("main"), lock_wait);
  // The lock wait is in lock, never in sleep: the main thread's sleep excludes it. (The sleeps,
  // the gate reads and waitpid are the main thread's only other voluntary sleeps.)
  // spin: two threads on one CPU that never sleep while spinning: every instant of each one's
  // spin is on CPU or runnable (the kernel's on-CPU wall time also covers the CPU time the
  // thread was charged). Whichever is not running waits for the other: while the first one to
  // finish ran its S ms, the other was runnable for most of it (half, allowing for the start
  // barrier's skew).
  const double spin_cpu = (v["spin0_cpu_ns"] + v["spin1_cpu_ns"]) * ns;
  const double spin_wall = (v["spin0_wall_ns"] + v["spin1_wall_ns"]) * ns;
  EXPECT_GE(oncpu("threads"), spin_cpu);
  EXPECT_GE(oncpu("threads") + sched("threads", "runnable"), spin_wall - 1 * ms);
  EXPECT_GE(sched("threads", "runnable"), 0.5 * kSpinMs * ms);
  // child: its sleep is under children, not main.
  EXPECT_GE(sched("children", "sleep"), (kChildMs - 1) * ms);
  EXPECT_GT(oncpu("children"), 0);

  // I/O on the slow mount: exact counts, kernel latency within what the program measured
  // around each call, and at least the configured delays.
  const std::string slow_mount = slow.mount();
  auto io = [&](std::string metric, std::string op, std::string mount) {
    return Last(sink_, metric, {{"pid", pid}, {"op", op}, {"mount", mount}});
  };
  EXPECT_EQ(io("ithbat_io_calls_total", "fsync", slow_mount), kFsyncs);
  EXPECT_EQ(io("ithbat_io_calls_total", "write", slow_mount), kWrites);
  EXPECT_EQ(io("ithbat_io_calls_total", "close", slow_mount), 1);
  EXPECT_GE(io("ithbat_io_seconds_total", "fsync", slow_mount), kFsyncs * kFsyncDelayMs * ms);
  EXPECT_LE(io("ithbat_io_seconds_total", "fsync", slow_mount), v["slow_fsync_ns"] * ns);
  EXPECT_GE(io("ithbat_io_seconds_total", "close", slow_mount), kFlushDelayMs * ms);
  EXPECT_LE(io("ithbat_io_seconds_total", "close", slow_mount), v["slow_close_ns"] * ns);
  EXPECT_GE(io("ithbat_io_latency_max_seconds", "fsync", slow_mount), kFsyncDelayMs * ms);
  EXPECT_LE(io("ithbat_io_latency_max_seconds", "fsync", slow_mount), v["slow_fsync_max_ns"] * ns);
  EXPECT_EQ(Last(sink_, "ithbat_io_slow_total", {{"pid", pid}, {"op", "fsync"}, {"mount", slow_mount}, {"min", "8ms"}}),
            kFsyncs);
  EXPECT_EQ(Last(sink_, "ithbat_io_bytes_total", {{"pid", pid}, {"mount", slow_mount}}), kWrites * 4096.0);
  auto slow_series = sink_.FindWith("ithbat_io_calls_total", {{"pid", pid}, {"mount", slow_mount}});
  ASSERT_TRUE(slow_series.has_value());
  EXPECT_EQ(slow_series->labels.ToString().find("fstype=\"fuse.slowfs\"") != std::string::npos, true)
      << slow_series->labels.ToString();

  // I/O on the local disk: under the mount that holds the directory, as the process sees it.
  const dev_t ldev = DevOf(local.path().string());
  auto mounts = ReadMountinfo("/proc", tracked_proc.pid());
  const MountEntry* lm = FindMount(mounts, major(ldev), minor(ldev));
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(io("ithbat_io_calls_total", "fsync", lm->mount_point), kFsyncs);
  EXPECT_EQ(io("ithbat_io_calls_total", "write", lm->mount_point), kWrites);
  EXPECT_EQ(io("ithbat_io_calls_total", "close", lm->mount_point), 1);
  EXPECT_LE(io("ithbat_io_seconds_total", "fsync", lm->mount_point), v["local_fsync_ns"] * ns);

  // The untracked twin did the same work at the same time: none of it is counted, and it has no
  // kernel state.
  SchedIoBpf* bpf = collector_->bpf();
  const auto ktracked = bpf->Tracked();
  EXPECT_FALSE(ktracked.contains(static_cast<uint32_t>(other.pid())));
  EXPECT_FALSE(ktracked.contains(static_cast<uint32_t>(ov["child_pid"])));
  EXPECT_FALSE(bpf->ReadSched().contains(static_cast<uint32_t>(other.pid())));
  for (const auto& e : bpf->ReadIo()) EXPECT_NE(e.key.root, static_cast<uint32_t>(other.pid()));
  EXPECT_FALSE(bpf->HasThread(static_cast<uint32_t>(ov["tid_main"])));
  EXPECT_EQ(sink_.FindWith("ithbat_sched_oncpu_seconds_total", {{"pid", std::to_string(other.pid())}}),
            std::nullopt);
  // The tracked one's fork child left the filter when it exited.
  EXPECT_FALSE(ktracked.contains(static_cast<uint32_t>(v["child_pid"])));
  EXPECT_TRUE(ktracked.contains(static_cast<uint32_t>(tracked_proc.pid())));

  // Exit: every kernel entry of the process goes (filter, threads, calls, aggregates).
  tracked_proc.Gate();
  other.Gate();
  EXPECT_EQ(tracked_proc.Wait(), 0);
  EXPECT_EQ(other.Wait(), 0);
  Tick();
  EXPECT_TRUE(collector_->Roots().empty());
  EXPECT_TRUE(bpf->Tracked().empty());
  EXPECT_TRUE(bpf->ReadSched().empty());
  EXPECT_TRUE(bpf->ReadIo().empty());
  // A thread's state goes at its last context switch, which can come after the parent's
  // waitpid returned: wait for that event (bounded), then check.
  const char* const kTids[] = {"tid_main", "tid_holder", "tid_spin0", "tid_spin1", "child_pid"};
  auto any_thread_left = [&] {
    for (const char* k : kTids) {
      if (bpf->HasThread(static_cast<uint32_t>(v[k]))) return true;
    }
    return false;
  };
  for (int i = 0; i < 500 && any_thread_left(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (const char* k : kTids) EXPECT_FALSE(bpf->HasThread(static_cast<uint32_t>(v[k]))) << k;
  // ... and that last switch did not bring the root's aggregates back.
  EXPECT_TRUE(bpf->ReadSched().empty());
  const auto g = bpf->Globals();
  EXPECT_EQ(g.track_full + g.roots_full + g.threads_full + g.io_full + g.inflight_full, 0u);
}

TEST_F(SchedIoLive, ExistingDescendantsAreAddedAndLeaveWithTheRoot) {
  // sh starts a sleeping child before the agent sees it; the child is followed as `children`.
  Child sh({"/bin/sh", "-c", "sleep 30 & echo ready=1; head -c1 >/dev/null; kill $!; wait"}, true);
  ASSERT_TRUE(sh.ReadUntil("ready").contains("ready"));
  tracked_.Publish("test", {{sh.pid(), Identity{}, "test"}});
  Tick();
  const auto k = collector_->bpf()->Tracked();
  EXPECT_GE(k.size(), 2u);  // sh and its sleep (and head, if it started already)
  for (const auto& [tgid, root] : k) EXPECT_EQ(root, static_cast<uint32_t>(sh.pid())) << tgid;
  // Leaving the tracked set removes the whole tree and the root's aggregates.
  tracked_.Publish("test", {});
  Tick();
  EXPECT_TRUE(collector_->bpf()->Tracked().empty());
  EXPECT_FALSE(collector_->bpf()->ReadSched().contains(static_cast<uint32_t>(sh.pid())));
  sh.Gate();
  EXPECT_EQ(sh.Wait(), 0);
}

// Threads of a process that leaves the tracked set keep running unseen. When it is tracked
// again, none of its threads' state from before (a sleep that began before, a slice that was
// running, a call in flight) may be counted: each thread's counted intervals lie between the
// new tracking and the read, so each scope's total is at most that time × its threads.
TEST_F(SchedIoLive, TrackedAgainCountsOnlyTimeSinceTheNewTracking) {
  SlowFs slow;  // fdatasync there takes kFsyncDelayMs: a call is likely in flight at each change
  ASSERT_TRUE(slow.mounted()) << slow.why();
  Child w({ITHBAT_SCHED_IO_WORKLOAD, "--loop", slow.mount()}, true);
  ASSERT_TRUE(w.ReadUntil("ready").contains("ready"));
  const std::string pid = std::to_string(w.pid());
  tracked_.Publish("test", {{w.pid(), Identity{}, "test"}});
  Tick();
  ASSERT_EQ(collector_->Roots(), std::vector<int32_t>{w.pid()});
  SleepMs(200);
  Tick();
  EXPECT_GT(ScopeSeconds(sink_, pid, "main"), 0);  // it was counting
  EXPECT_GT(ScopeSeconds(sink_, pid, "threads"), 0);

  tracked_.Publish("test", {});
  Tick();
  ASSERT_TRUE(collector_->Roots().empty());
  SleepMs(600);  // unseen: with stale state, the first switch after re-tracking would add this

  const int64_t t0 = MonotonicNs();
  tracked_.Publish("test", {{w.pid(), Identity{}, "test"}});
  Tick();
  ASSERT_EQ(collector_->Roots(), std::vector<int32_t>{w.pid()});
  SleepMs(300);
  Tick();
  const double elapsed = static_cast<double>(MonotonicNs() - t0) / 1e9;
  std::printf("  since re-tracking %.3f s: main %.3f s, threads %.3f s, io %.3f s (max %.3f s), %g calls\n", elapsed,
              ScopeSeconds(sink_, pid, "main"), ScopeSeconds(sink_, pid, "threads"),
              SumLast(sink_, "ithbat_io_seconds_total", pid), MaxLast(sink_, "ithbat_io_latency_max_seconds", pid),
              SumLast(sink_, "ithbat_io_calls_total", pid));
  EXPECT_LE(ScopeSeconds(sink_, pid, "main"), elapsed * 1);
  EXPECT_LE(ScopeSeconds(sink_, pid, "threads"), elapsed * 2);  // the spinner and the writer
  EXPECT_EQ(ScopeSeconds(sink_, pid, "children"), 0);
  EXPECT_GT(ScopeSeconds(sink_, pid, "main"), 0);
  // One thread makes the calls, one at a time.
  EXPECT_GT(SumLast(sink_, "ithbat_io_calls_total", pid), 0);
  EXPECT_LE(SumLast(sink_, "ithbat_io_seconds_total", pid), elapsed);
  EXPECT_LE(MaxLast(sink_, "ithbat_io_latency_max_seconds", pid), elapsed);
  w.Gate();
  EXPECT_EQ(w.Wait(), 0);
}

// A 32-bit (ia32) process makes compat syscalls, numbered from another table: its write, fsync,
// read and close of a regular file are not file I/O here (x86-64's close is i386's read), and its
// futex wait (i386 240) is lock time.
TEST_F(SchedIoLive, CompatTasksAreReadWithTheirOwnSyscallNumbers) {
  if (std::string_view(ITHBAT_COMPAT32_WORKLOAD).empty()) {
    GTEST_SKIP() << "no ia32 program: not x86-64, or the C compiler cannot target i386 (-m32)";
  }
  TempDir dir;
  Child w({ITHBAT_COMPAT32_WORKLOAD, (dir.path() / "compat32-file").string()}, true);
  if (!w.ReadUntil("ready").contains("ready")) {
    const int status = w.Wait();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127) << "the ia32 program failed: " << status;
    GTEST_SKIP() << "this kernel runs no ia32 programs (no IA32 emulation): no compat task can exist";
  }
  const std::string pid = std::to_string(w.pid());
  tracked_.Publish("test", {{w.pid(), Identity{}, "test"}});
  Tick();
  w.Gate();
  ASSERT_TRUE(w.ReadUntil("done").contains("done")) << "the ia32 program failed";
  Tick();
  for (const auto& s : sink_.series()) {
    if (s.samples.empty() || s.labels.ToString().find("pid=\"" + pid + "\"") == std::string::npos) continue;
    std::printf("  %s%s %g\n", s.desc.name.c_str(), s.labels.ToString().c_str(), s.samples.back().second);
  }
  EXPECT_EQ(sink_.FindWith("ithbat_io_calls_total", {{"pid", pid}}), std::nullopt) << "a compat syscall read as I/O";
  EXPECT_GE(Last(sink_, "ithbat_sched_offcpu_seconds_total", {{"pid", pid}, {"scope", "main"}, {"class", "lock"}}),
            0.099);
  w.Gate();
  EXPECT_EQ(w.Wait(), 0);
}

class SchedIoIdle : public SchedIoLive {
 protected:
  SchedIoIdle() { options_.idle_detach_ticks = 2; }
};

// The kernel maps follow roots_: entries of a root nobody follows leave the filter and their
// aggregates go (whatever race left them); an idle detach leaves nothing behind.
TEST_F(SchedIoIdle, KernelMapsFollowTheRootsAndAreEmptiedAtIdleDetach) {
  TempDir dir;
  Child followed({ITHBAT_SCHED_IO_WORKLOAD, "--loop", dir.path().string()}, true);
  Child stray({ITHBAT_SCHED_IO_WORKLOAD, "--loop", dir.path().string()}, true);
  ASSERT_TRUE(followed.ReadUntil("ready").contains("ready"));
  auto sv = stray.ReadUntil("ready");
  ASSERT_TRUE(sv.contains("ready"));
  tracked_.Publish("test", {{followed.pid(), Identity{}, "test"}});
  Tick();
  ASSERT_EQ(collector_->Roots(), std::vector<int32_t>{followed.pid()});
  SchedIoBpf* bpf = collector_->bpf();
  ASSERT_TRUE(bpf->attached());

  // What a race leaves: a process in the filter under a root nobody follows, with aggregates.
  const uint32_t stray_pid = static_cast<uint32_t>(stray.pid());
  ASSERT_TRUE(bpf->Track(stray.pid(), stray.pid()).has_value());
  auto stray_io = [&] {
    for (const auto& e : bpf->ReadIo()) {
      if (e.key.root == stray_pid) return true;
    }
    return false;
  };
  for (int i = 0; i < 500 && !stray_io(); ++i) SleepMs(10);
  ASSERT_TRUE(stray_io()) << "the stray process made no call";
  ASSERT_TRUE(bpf->ReadSched().contains(stray_pid));
  Tick();
  EXPECT_FALSE(bpf->Tracked().contains(stray_pid));
  // Untracked, its calls and switches create nothing again (an event that passed the filter
  // before the reconciliation can leave an aggregate once; the next tick deletes it).
  SleepMs(100);
  Tick();
  EXPECT_FALSE(stray_io());
  EXPECT_FALSE(bpf->ReadSched().contains(stray_pid));
  EXPECT_EQ(sink_.FindWith("ithbat_sched_oncpu_seconds_total", {{"pid", std::to_string(stray.pid())}}),
            std::nullopt);
  EXPECT_TRUE(bpf->Tracked().contains(static_cast<uint32_t>(followed.pid())));

  // Nothing followed: after idle_detach_ticks ticks the programs detach and every map is empty
  // (the untracked threads' states too: no program would ever remove them).
  tracked_.Publish("test", {});
  Tick();
  EXPECT_TRUE(bpf->attached());
  Tick();
  EXPECT_FALSE(bpf->attached());
  EXPECT_TRUE(bpf->Tracked().empty());
  EXPECT_EQ(bpf->ThreadEntries(), 0u);
  EXPECT_TRUE(bpf->ReadSched().empty());
  EXPECT_TRUE(bpf->ReadIo().empty());

  // Followed again after the detach: attached, and only time since then is counted.
  SleepMs(300);
  const int64_t t0 = MonotonicNs();
  tracked_.Publish("test", {{followed.pid(), Identity{}, "test"}});
  Tick();
  EXPECT_TRUE(bpf->attached());
  SleepMs(200);
  Tick();
  const double elapsed = static_cast<double>(MonotonicNs() - t0) / 1e9;
  const std::string pid = std::to_string(followed.pid());
  EXPECT_GT(ScopeSeconds(sink_, pid, "main"), 0);
  EXPECT_LE(ScopeSeconds(sink_, pid, "main"), elapsed * 1);
  EXPECT_LE(ScopeSeconds(sink_, pid, "threads"), elapsed * 2);
  followed.Gate();
  stray.Gate();
  EXPECT_EQ(followed.Wait(), 0);
  EXPECT_EQ(stray.Wait(), 0);
}

}  // namespace
}  // namespace ithbat::collect::sched_io
