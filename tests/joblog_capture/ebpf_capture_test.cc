// End to end through the real eBPF capture: real child processes print a training log to a
// pipe and to a terminal (pty), on fd 1, fd 2 and a dup of fd 1, and the collector, tracking
// the child published in TrackedProcesses (the interface the GPU collector feeds), produces
// the right events with the right pid and rank. Needs root (CAP_BPF) and kernel BTF, which CI
// has: a capture that cannot load FAILS these tests with the reason, it does not skip them.
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/joblog/ebpf_source.h"
#include "collect/joblog/joblog_collector.h"
#include "core/file_util.h"
#include "joblog_capture/capture_test_util.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

using testing::LossAt;
using testing::MegatronLine;

// A child process that waits on a pipe before exec'ing /bin/sh -c SCRIPT (or another
// program), so the test can publish its pid and let the collector track it before it prints.
class Child {
 public:
  enum class Output { kPipes, kPty };

  Child(std::vector<std::string> argv, std::vector<std::string> env, Output output) {
    // Everything the child needs is prepared before fork: after fork, a multithreaded parent's
    // child may only make async-signal-safe calls (read, dup2, execve, _exit).
    argv_ = std::move(argv);
    env_ = std::move(env);
    for (auto& a : argv_) argv_ptrs_.push_back(a.data());
    argv_ptrs_.push_back(nullptr);
    for (auto& e : env_) env_ptrs_.push_back(e.data());
    env_ptrs_.push_back(nullptr);
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) return;
    if (output == Output::kPty) {
      int master = -1;
      pid_ = forkpty(&master, nullptr, nullptr, nullptr);
      if (pid_ == 0) ExecAfterGo(go[0]);
      fds_.push_back(master);
    } else {
      int out[2], err[2];
      if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
      pid_ = fork();
      if (pid_ == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        ExecAfterGo(go[0]);
      }
      close(out[1]);
      close(err[1]);
      fds_.push_back(out[0]);
      fds_.push_back(err[0]);
    }
    close(go[0]);
    go_ = go[1];
  }

  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) close(fd);
    if (go_ >= 0) close(go_);
  }

  pid_t pid() const { return pid_; }
  bool ok() const { return pid_ > 0 && go_ >= 0; }

  void Go() {
    char c = 'g';
    (void)!write(go_, &c, 1);
    close(go_);
    go_ = -1;
  }

  // Reads the child's output until every fd is at its end and the child has exited (bounded).
  std::string Finish(std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<bool> open(fds_.size(), true);
    auto any_open = [&] {
      for (bool b : open) {
        if (b) return true;
      }
      return false;
    };
    char buf[4096];
    while (any_open() && std::chrono::steady_clock::now() < deadline) {
      std::vector<pollfd> p;
      for (size_t i = 0; i < fds_.size(); ++i) p.push_back({open[i] ? fds_[i] : -1, POLLIN, 0});
      if (poll(p.data(), p.size(), 100) < 0) break;
      for (size_t i = 0; i < fds_.size(); ++i) {
        if (!open[i] || p[i].revents == 0) continue;
        ssize_t n = read(fds_[i], buf, sizeof(buf));
        if (n <= 0) {
          open[i] = false;  // EOF (pipe) or EIO (pty: the slave side closed)
        } else {
          output_.append(buf, static_cast<size_t>(n));
        }
      }
    }
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) reaped_ = true;
    exit_status_ = status;
    return output_;
  }

  int exit_status() const { return exit_status_; }

 private:
  [[noreturn]] void ExecAfterGo(int go_read) {
    char c;
    while (read(go_read, &c, 1) < 0 && errno == EINTR) {
    }
    execve(argv_ptrs_[0], argv_ptrs_.data(), env_ptrs_.data());
    _exit(127);
  }

  std::vector<std::string> argv_, env_;
  std::vector<char*> argv_ptrs_, env_ptrs_;
  pid_t pid_ = -1;
  int go_ = -1;
  std::vector<int> fds_;
  std::string output_;
  bool reaped_ = false;
  int exit_status_ = -1;
};

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// The training "job" of the main tests is this test binary itself, re-executed with
// ITHBAT_JOBLOG_TEST_CHILD=1: a shell cannot write to fd 2 without first dup2'ing it onto fd 1
// (dash's `>&2`), and these tests want each syscall exactly. It writes
//   iteration 1  write(1)
//   iteration 2  write(2)
//   iteration 3  write(5), fd 5 = dup(1)
//   iteration 4  a forked child: write(1) of "grandchild <pid>" then the line
//   iteration 5  writev(1) of three pieces (the newline in the last)
// then "done", and exits 0.
constexpr std::string_view kChildEnv = "ITHBAT_JOBLOG_TEST_CHILD";

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);
    done += static_cast<size_t>(n);
  }
}

void RunTrainingChild() {
  WriteAll(1, MegatronLine(1, 6.5) + "\n");
  WriteAll(2, MegatronLine(2, 6.25) + "\n");
  int fd5 = dup2(1, 5);
  if (fd5 != 5) _exit(4);
  WriteAll(5, MegatronLine(3, 6.0) + "\n");
  const std::string l4 = MegatronLine(4, 5.75) + "\n";
  pid_t pid = fork();
  if (pid == 0) {
    WriteAll(1, fmt::format("grandchild {}\n", getpid()));
    WriteAll(1, l4);
    _exit(0);
  }
  if (pid < 0 || waitpid(pid, nullptr, 0) != pid) _exit(5);
  const std::string l5 = MegatronLine(5, 5.5);
  const std::string a = l5.substr(0, 20), b = l5.substr(20), c = "\n";
  iovec iov[3] = {{const_cast<char*>(a.data()), a.size()},
                  {const_cast<char*>(b.data()), b.size()},
                  {const_cast<char*>(c.data()), c.size()}};
  if (writev(1, iov, 3) != static_cast<ssize_t>(l5.size() + 1)) _exit(6);
  WriteAll(1, "done\n");
  _exit(0);
}

// Runs before main() in the re-executed child; a no-op in the test process.
// One write of 100 000 bytes (one line): more than the 64 KiB copied per call.
void RunBigWriteChild() {
  std::string big(100'000, 'x');
  big.back() = '\n';
  WriteAll(1, big);
  _exit(0);
}

const bool kIsChild = [] {
  const char* v = getenv(std::string(kChildEnv).c_str());
  if (v != nullptr && std::string_view(v) == "1") RunTrainingChild();
  if (v != nullptr && std::string_view(v) == "big") RunBigWriteChild();
  return false;
}();

std::vector<std::string> SelfExe() { return {"/proc/self/exe"}; }

class EbpfCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobLogOptions o;
    o.mode = CaptureMode::kEbpf;
    o.tracked = &tracked_;
    auto c = JobLogCollector::Create(std::move(o));
    ASSERT_TRUE(c.has_value()) << c.error().ToString();
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_).has_value());
    ASSERT_TRUE(collector_->Start().has_value());
    // Not a skip: CI runs as root on a kernel with BTF, so a load failure is a real failure.
    ASSERT_EQ(collector_->Health().degraded, "")
        << "the eBPF capture could not load (these tests need root and kernel BTF): "
        << collector_->Health().degraded;
    ASSERT_EQ(collector_->effective_mode(), CaptureMode::kEbpf);
    ebpf_ = dynamic_cast<EbpfCaptureSource*>(collector_->source());
    ASSERT_NE(ebpf_, nullptr);
  }

  void TearDown() override {
    if (collector_) collector_->Stop();
  }

  void Publish(const std::map<pid_t, int32_t>& ranks) {
    std::vector<agent::TrackedProcesses::Process> list;
    for (auto [pid, rank] : ranks) {
      Identity id;
      id.job = "e2e-job";
      id.rank = rank;
      list.push_back({pid, id, ""});
    }
    tracked_.Publish("test", std::move(list));
  }

  void Tick() { ASSERT_TRUE(collector_->Collect(NowNs()).has_value()); }

  // Ticks until pred holds (bounded wait, not a timing assertion: the pred is what is tested).
  bool TickUntil(const std::function<bool()>& pred, std::chrono::seconds limit = std::chrono::seconds(15)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      if (!collector_->Collect(NowNs()).has_value()) return false;
      if (pred()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::vector<std::string> Env(std::vector<std::string> extra) {
    extra.push_back("PATH=/usr/bin:/bin");
    extra.push_back("RANK=3");
    extra.push_back("LOCAL_RANK=3");
    return extra;
  }

  std::vector<std::string> TrainingEnv() { return Env({std::string(kChildEnv) + "=1"}); }

  void CheckTrainingEvents(Child& child, const std::string& output) {
    // The grandchild's pid, as it printed it.
    pid_t grandchild = -1;
    size_t at = output.find("grandchild ");
    ASSERT_NE(at, std::string::npos) << "the child's output: " << output;
    grandchild = std::atoi(output.c_str() + at + 11);
    ASSERT_GT(grandchild, 0);
    ASSERT_NE(grandchild, child.pid());

    ASSERT_TRUE(TickUntil([&] {
      auto ev = sink_.events();
      return LossAt(ev, 1) && LossAt(ev, 2) && LossAt(ev, 3) && LossAt(ev, 4) && LossAt(ev, 5);
    })) << "not every loss line became an event; events: "
        << sink_.event_count() << ", lines: " << collector_->raw_ring().Read(kMinTime, kMaxTime).size();
    auto events = sink_.events();
    const std::map<int64_t, double> loss = {{1, 6.5}, {2, 6.25}, {3, 6.0}, {4, 5.75}, {5, 5.5}};
    for (auto [step, value] : loss) {
      const Event* e = LossAt(events, step);
      ASSERT_NE(e, nullptr);
      EXPECT_DOUBLE_EQ(e->value, value) << "step " << step;
      EXPECT_EQ(e->identity.rank, 3) << "step " << step;
      EXPECT_EQ(e->identity.job, "e2e-job") << "step " << step;
      EXPECT_EQ(e->identity.pid, step == 4 ? grandchild : child.pid()) << "step " << step;
      EXPECT_EQ(e->source, "joblog");
    }
    // Steps too, one per iteration line.
    int steps = 0;
    for (const auto& e : events) steps += e.kind == EventKind::kStep ? 1 : 0;
    EXPECT_EQ(steps, 5);
    // Streams: iteration 2 went to stderr, iteration 3 to a dup of stdout.
    auto raw = collector_->raw_ring().Read(kMinTime, kMaxTime, child.pid());
    std::map<std::string, int> stream_of;
    for (const auto& l : raw) stream_of[l.text] = l.fd;
    EXPECT_EQ(stream_of[MegatronLine(1, 6.5)], 1);
    EXPECT_EQ(stream_of[MegatronLine(2, 6.25)], 2);
    EXPECT_EQ(stream_of[MegatronLine(3, 6.0)], 1) << "a dup of fd 1 is stdout";
    EXPECT_EQ(stream_of[MegatronLine(5, 5.5)], 1) << "writev";
    // Nothing lost at this rate; the process's state is freed once it exited.
    CaptureCounters c = collector_->counters();
    EXPECT_EQ(c.lost_records, 0u);
    EXPECT_EQ(c.lost_bytes, 0u);
    EXPECT_EQ(c.truncated_writes, 0u);
    EXPECT_TRUE(TickUntil([&] {
      return !collector_->follows(child.pid()) && !collector_->follows(grandchild);
    })) << "state of exited processes must be freed";
    EXPECT_FALSE(ebpf_->KernelTracks(child.pid())) << "the kernel entry of an exited process must be removed";
  }

  testing::FakeSink sink_;
  agent::TrackedProcesses tracked_;
  std::unique_ptr<JobLogCollector> collector_;
  EbpfCaptureSource* ebpf_ = nullptr;
};

TEST_F(EbpfCaptureTest, TrainingLogThroughPipesWithDupAndForkedChild) {
  Child child(SelfExe(), TrainingEnv(), Child::Output::kPipes);
  ASSERT_TRUE(child.ok());
  // An untracked process printing at the same time: never captured.
  Child stranger(Sh("printf '%s\\n' \"$L\"; printf '%s\\n' \"$L\" >&2"),
                 Env({"L=" + MegatronLine(77, 0.125)}), Child::Output::kPipes);
  ASSERT_TRUE(stranger.ok());
  Publish({{child.pid(), 3}});
  Tick();
  ASSERT_TRUE(ebpf_->KernelTracks(child.pid()));
  child.Go();
  stranger.Go();
  std::string out = child.Finish();
  stranger.Finish();
  ASSERT_EQ(child.exit_status(), 0) << out;
  CheckTrainingEvents(child, out);
  EXPECT_EQ(LossAt(sink_.events(), 77), nullptr) << "an untracked process's output was captured";
  EXPECT_TRUE(collector_->raw_ring().Read(kMinTime, kMaxTime, stranger.pid()).empty());
}

TEST_F(EbpfCaptureTest, TrainingLogThroughATerminal) {
  Child child(SelfExe(), TrainingEnv(), Child::Output::kPty);
  ASSERT_TRUE(child.ok());
  Publish({{child.pid(), 3}});
  Tick();
  child.Go();
  std::string out = child.Finish();
  ASSERT_EQ(child.exit_status(), 0) << out;
  CheckTrainingEvents(child, out);
}

TEST_F(EbpfCaptureTest, EnvironmentOptOutIsNeverCaptured) {
  // The child execs at once and then waits for a file to appear before printing: by then its
  // /proc/<pid>/environ is its own (with the opt-out), and the collector has decided.
  testing::TempDir dir;
  const std::string go2 = (dir.path() / "go").string();
  Child child(Sh("while [ ! -e \"$GO2\" ]; do sleep 0.01; done; printf '%s\\n' \"$L\""),
              Env({"L=" + MegatronLine(55, 0.5), "ITHBAT_JOBLOG=off", "GO2=" + go2}), Child::Output::kPipes);
  ASSERT_TRUE(child.ok());
  child.Go();
  bool exec_seen = false;
  for (int i = 0; i < 400 && !exec_seen; ++i) {
    if (auto e = ReadFileBounded(fmt::format("/proc/{}/environ", child.pid()), 1 << 20); e) {
      exec_seen = e->find("ITHBAT_JOBLOG=off") != std::string::npos;
    }
    if (!exec_seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(exec_seen) << "the child did not exec";
  Publish({{child.pid(), 0}});
  Tick();
  EXPECT_FALSE(ebpf_->KernelTracks(child.pid()));
  EXPECT_EQ(collector_->opted_out_processes(), 1u);
  dir.WriteFile("go", "");
  std::string out = child.Finish();
  ASSERT_NE(out.find("iteration"), std::string::npos) << "the child did not print: " << out;
  for (int i = 0; i < 5; ++i) Tick();
  EXPECT_EQ(LossAt(sink_.events(), 55), nullptr);
  EXPECT_TRUE(collector_->raw_ring().Read(kMinTime, kMaxTime, child.pid()).empty());
}

TEST_F(EbpfCaptureTest, WriteLargerThanTheBoundIsCutAndCounted) {
  Child child(SelfExe(), Env({std::string(kChildEnv) + "=big"}), Child::Output::kPipes);
  ASSERT_TRUE(child.ok());
  Publish({{child.pid(), 0}});
  Tick();
  child.Go();
  std::string out = child.Finish();
  ASSERT_EQ(out.size(), 100'000u);
  ASSERT_TRUE(TickUntil([&] { return !collector_->follows(child.pid()); }));
  CaptureCounters c = collector_->counters();
  EXPECT_EQ(c.truncated_writes, 1u);
  EXPECT_EQ(c.truncated_bytes, 100'000u - 16 * 4096u);
  EXPECT_EQ(c.lost_records, 0u);
  // The one line (64 KiB of it arrived, no newline) is cut at the line bound when it is emitted.
  EXPECT_GE(sink_.Last("ithbat_joblog_truncated_lines_total").value_or(0), 1.0);
}

TEST_F(EbpfCaptureTest, TensorBoardFileWrittenByAChild) {
  const auto writer = testing::IthbatBinary().parent_path() / "sim" / "ithbat-tfevents-writer";
  ASSERT_EQ(access(writer.c_str(), X_OK), 0)
      << writer << " is missing: build the ithbat_tfevents_writer target (sim/CMakeLists.txt)";
  testing::TempDir dir;
  Child child({writer.string(), "--logdir", dir.path().string(), "--tag", "train/loss", "--steps", "5",
               "--interval-ms", "20", "--value", "4", "--delta", "-0.5", "--linger-ms", "20000"},
              Env({}), Child::Output::kPipes);
  ASSERT_TRUE(child.ok());
  Publish({{child.pid(), 3}});
  Tick();
  child.Go();
  auto tb_loss = [&](int64_t step) -> const Event* {
    static thread_local std::vector<Event> events;
    events = sink_.events();
    for (const auto& e : events) {
      if (e.kind != EventKind::kLoss || e.step != step) continue;
      for (const auto& [k, v] : e.attrs) {
        if (k == "framework" && v == "tensorboard") return &e;
      }
    }
    return nullptr;
  };
  ASSERT_TRUE(TickUntil([&] { return tb_loss(5) != nullptr; }))
      << "no TensorBoard loss at step 5; files followed: "
      << sink_.Last("ithbat_joblog_tensorboard_files").value_or(-1);
  for (int64_t step = 1; step <= 5; ++step) {
    const Event* e = tb_loss(step);
    ASSERT_NE(e, nullptr) << "step " << step;
    EXPECT_DOUBLE_EQ(e->value, 4 - 0.5 * static_cast<double>(step - 1)) << "step " << step;
    EXPECT_EQ(e->identity.pid, child.pid());
    EXPECT_EQ(e->identity.rank, 3);
    EXPECT_GT(e->time, 0);
  }
  EXPECT_EQ(sink_.Last("ithbat_joblog_tensorboard_errors_total").value_or(-1), 0.0);
}

// Each fallback attachment works on its own (CI's kernel has no BPF trampolines, so "auto"
// picks tp_btf there; raw_tp must work too for kernels without tp_btf).
class AttachmentTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AttachmentTest, CapturesAChildsWrite) {
  EbpfSourceOptions o;
  o.attach = GetParam();
  auto src = EbpfCaptureSource::Create(o);
  ASSERT_TRUE(src.has_value()) << src.error().ToString();
  EXPECT_EQ((*src)->attachment(), GetParam());
  EXPECT_FALSE((*src)->attached()) << "nothing is tracked yet: the programs must not run";
  ASSERT_TRUE((*src)->Start().has_value());
  Child child(Sh("printf 'hello %s\\n' attach"), {"PATH=/usr/bin:/bin"}, Child::Output::kPipes);
  ASSERT_TRUE(child.ok());
  ASSERT_TRUE((*src)->Track(child.pid(), child.pid(), true).has_value());
  EXPECT_TRUE((*src)->attached());
  child.Go();
  ASSERT_EQ(child.Finish(), "hello attach\n");
  std::string got;
  bool exited = false;
  for (int i = 0; i < 300 && !exited; ++i) {
    std::vector<CaptureRecord> recs;
    (*src)->Drain(recs, 1000);
    for (const auto& r : recs) {
      if (r.pid != child.pid()) continue;
      if (r.type == CaptureRecord::Type::kData) {
        got += r.data;
        EXPECT_EQ(r.stream, 1);
        EXPECT_GT(r.time, NowNs() - 60 * kNsPerSec) << "realtime, not boot time";
        EXPECT_LE(r.time, NowNs());
      }
      exited = exited || r.type == CaptureRecord::Type::kExit;
    }
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(got, "hello attach\n");
  EXPECT_TRUE(exited) << "no exit record";
  EXPECT_FALSE((*src)->KernelTracks(child.pid()));
  // Nothing tracked any more: detached after idle_detach_ticks maintenance calls.
  for (int i = 0; i < EbpfSourceOptions{}.idle_detach_ticks; ++i) (*src)->Maintain();
  EXPECT_FALSE((*src)->attached());
  (*src)->Stop();
}

INSTANTIATE_TEST_SUITE_P(Fallbacks, AttachmentTest, ::testing::Values("tp_btf", "raw_tp"));

TEST(EbpfSourceErrors, AFailedAttachmentIsNamedWithItsReason) {
  EbpfSourceOptions o;
  o.attach = "fexit";
  auto src = EbpfCaptureSource::Create(o);
  if (!src) {  // kernels without BPF trampolines (CI's): the error says which try failed and why
    EXPECT_EQ(src.error().message.rfind("BPF load failed: fexit: ", 0), 0u) << src.error().message;
    EXPECT_NE(src.error().message.find("errno"), std::string::npos) << src.error().message;
  }
  o.attach = "kprobe";
  auto bad = EbpfCaptureSource::Create(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ithbat::collect::joblog
