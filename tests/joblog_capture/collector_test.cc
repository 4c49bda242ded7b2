// JobLogCollector against a fake capture source: line assembly across writes, identities,
// descendants, opt-out, exit, bounds, step calibration, self-metrics. The real eBPF source is
// tested in ebpf_capture_test.cc.
#include <sys/stat.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "agent/tracked_processes.h"
#include "collect/joblog/joblog_collector.h"
#include "joblog_capture/capture_test_util.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"
#include "testutil/tfevents_writer.h"

namespace ithbat::collect::joblog {
namespace {

using testing::LossAt;
using testing::MegatronLine;
using testing::OfKind;

struct FakeState {
  std::deque<CaptureRecord> queue;
  std::map<int32_t, std::pair<int32_t, bool>> tracked;  // pid -> (root, inherit)
  CaptureCounters counters;
  bool started = false;
};

class FakeSource final : public CaptureSource {
 public:
  explicit FakeSource(std::shared_ptr<FakeState> s) : s_(std::move(s)) {}
  std::optional<Error> start_error;
  CaptureMode mode() const override { return CaptureMode::kEbpf; }
  std::string_view attachment() const override { return "fake"; }
  Status Start() override {
    if (start_error) return std::unexpected(*start_error);
    s_->started = true;
    return Ok();
  }
  void Stop() override { s_->started = false; }
  size_t Drain(std::vector<CaptureRecord>& out, size_t max) override {
    size_t n = 0;
    while (n < max && !s_->queue.empty()) {
      out.push_back(std::move(s_->queue.front()));
      s_->queue.pop_front();
      ++n;
    }
    return n;
  }
  Status Track(int32_t pid, int32_t root, bool inherit) override {
    s_->tracked[pid] = {root, inherit};
    return Ok();
  }
  Status Untrack(int32_t pid) override {
    s_->tracked.erase(pid);
    return Ok();
  }
  CaptureCounters Counters() const override { return s_->counters; }

 private:
  std::shared_ptr<FakeState> s_;
};

constexpr TimeNs kT0 = 1'800'000'000LL * kNsPerSec;

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override { state_ = std::make_shared<FakeState>(); }

  // A fake /proc entry: a directory (the process exists), optionally an environ and status.
  void AddProc(int32_t pid, std::string environ = "", int32_t ppid = 1,
               std::string cmdline = "python\0train.py") {
    proc_.WriteFile(fmt::format("{}/environ", pid), environ);
    proc_.WriteFile(fmt::format("{}/status", pid),
                    fmt::format("Name:\tpython\nPid:\t{}\nPPid:\t{}\n", pid, ppid));
    proc_.WriteFile(fmt::format("{}/cmdline", pid), cmdline);
  }

  void Make(JobLogOptions options = {}) {
    options.tracked = &tracked_;
    options.proc_root = proc_.path();
    auto st = state_;
    options.make_sources = [st]() -> Result<std::vector<std::unique_ptr<CaptureSource>>> {
      std::vector<std::unique_ptr<CaptureSource>> v;
      v.push_back(std::make_unique<FakeSource>(st));
      return v;
    };
    auto c = JobLogCollector::Create(std::move(options));
    ASSERT_TRUE(c.has_value()) << c.error().ToString();
    collector_ = std::move(*c);
    ASSERT_TRUE(collector_->Init(sink_).has_value());
    ASSERT_TRUE(collector_->Start().has_value());
  }

  void Publish(std::vector<std::pair<int32_t, Identity>> procs) {
    std::vector<agent::TrackedProcesses::Process> list;
    for (auto& [pid, id] : procs) list.push_back({pid, id, ""});
    tracked_.Publish("gpu", std::move(list));
  }

  static Identity Rank(std::string job, int32_t rank) {
    Identity id;
    id.job = std::move(job);
    id.rank = rank;
    return id;
  }

  void Data(int32_t pid, int stream, std::string bytes, TimeNs t, uint64_t offset = 0, uint64_t total = 0,
            int32_t tid = -1) {
    CaptureRecord r;
    r.type = CaptureRecord::Type::kData;
    r.pid = pid;
    r.tid = tid < 0 ? pid : tid;
    r.fd = stream;
    r.stream = static_cast<uint8_t>(stream);
    r.time = t;
    r.offset = offset;
    r.total_len = total ? total : bytes.size();
    r.data = std::move(bytes);
    state_->queue.push_back(std::move(r));
  }

  void Control(CaptureRecord::Type type, int32_t pid, int32_t parent = -1, int32_t root = -1) {
    CaptureRecord r;
    r.type = type;
    r.pid = pid;
    r.tid = parent;
    r.root = root;
    r.time = kT0;
    state_->queue.push_back(std::move(r));
  }

  void Tick(int n = 1) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(collector_->Collect(kT0 + (ticks_++) * kNsPerSec).has_value());
  }

  testing::TempDir proc_;
  testing::FakeSink sink_;
  agent::TrackedProcesses tracked_;
  std::shared_ptr<FakeState> state_;
  std::unique_ptr<JobLogCollector> collector_;
  int ticks_ = 0;
};

TEST_F(CollectorTest, LineSplitAcrossWritesAndChunksIsOneLineWithTheRightIdentity) {
  AddProc(100);
  Make();
  Publish({{100, Rank("job-7", 3)}});
  Tick();
  ASSERT_TRUE(state_->tracked.count(100)) << "the tracked process must be tracked in the source";
  EXPECT_EQ(state_->tracked[100], std::make_pair(int32_t{100}, true));

  const std::string line = MegatronLine(5, 2.5) + "\n";
  // One write() split into two chunks, then a second write with the rest.
  const size_t a = 40, b = 90;
  Data(100, 1, line.substr(0, a), kT0 + 1, 0, b);
  Data(100, 1, line.substr(a, b - a), kT0 + 1, a, b);
  Data(100, 1, line.substr(b), kT0 + 2 * kNsPerMs);
  Tick();

  auto events = sink_.events();
  const Event* loss = LossAt(events, 5);
  ASSERT_NE(loss, nullptr) << "no loss event for iteration 5; events: " << events.size();
  EXPECT_DOUBLE_EQ(loss->value, 2.5);
  EXPECT_EQ(loss->identity.pid, 100);
  EXPECT_EQ(loss->identity.rank, 3);
  EXPECT_EQ(loss->identity.job, "job-7");
  EXPECT_EQ(loss->source, "joblog");
  EXPECT_EQ(loss->time, kT0 + 2 * kNsPerMs) << "a line's time is the write that completed it";
  EXPECT_EQ(OfKind(events, EventKind::kStep).size(), 1u);
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_total", "{stream=\"stdout\"}"), 1.0);
  EXPECT_EQ(sink_.Last("ithbat_joblog_bytes_total"), static_cast<double>(line.size()));
  EXPECT_EQ(sink_.Last("ithbat_joblog_events_total", "{kind=\"loss\"}"), 1.0);
  EXPECT_EQ(sink_.Last("ithbat_joblog_tracked_processes"), 1.0);
  EXPECT_EQ(sink_.Last("ithbat_joblog_capture_mode", "{attachment=\"fake\",mode=\"ebpf\"}"), 1.0);
  // The raw line is kept on the node.
  auto raw = collector_->raw_ring().Read(kMinTime, kMaxTime);
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_EQ(raw[0].pid, 100);
  EXPECT_EQ(raw[0].text, line.substr(0, line.size() - 1));
}

// Records are handed to the parsers in batches (the vector between source and parsers stays a
// batch's size), and a tick still takes at most max_records_per_collect of them: the rest wait
// for the next tick, in order, none lost or repeated.
TEST_F(CollectorTest, ATickTakesItsRecordsInBatchesUpToItsBound) {
  AddProc(100);
  JobLogOptions options;
  options.max_records_per_collect = 2'500;
  Make(options);
  Publish({{100, Rank("j", 0)}});
  Tick();
  constexpr int kLines = 3'000;
  for (int i = 0; i < kLines; ++i) Data(100, 1, fmt::format("plain line {}\n", i), kT0 + kNsPerSec + i);
  Tick();
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_total", "{stream=\"stdout\"}"), 2'500.0);
  EXPECT_EQ(state_->queue.size(), 500u);
  Tick();
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_total", "{stream=\"stdout\"}"), 3'000.0);
  EXPECT_TRUE(state_->queue.empty());
  auto raw = collector_->raw_ring().Read(kMinTime, kMaxTime);
  ASSERT_FALSE(raw.empty());
  EXPECT_EQ(raw.back().text, fmt::format("plain line {}", kLines - 1));
  for (size_t i = 1; i < raw.size(); ++i) ASSERT_LT(raw[i - 1].time, raw[i].time) << "out of order at " << i;
}

TEST_F(CollectorTest, TwoProcessesInterleavedKeepTheirOwnLinesStreamsAndRanks) {
  AddProc(100);
  AddProc(200);
  Make();
  Publish({{100, Rank("j", 0)}, {200, Rank("j", 1)}});
  Tick();
  const std::string l0 = MegatronLine(1, 4.0) + "\n", l1 = MegatronLine(1, 5.0) + "\n";
  Data(100, 1, l0.substr(0, 30), kT0 + 10);
  Data(200, 2, l1.substr(0, 50), kT0 + 11);
  Data(100, 1, l0.substr(30), kT0 + 12);
  Data(200, 2, l1.substr(50), kT0 + 13);
  Tick();
  auto losses = OfKind(sink_.events(), EventKind::kLoss);
  ASSERT_EQ(losses.size(), 2u);
  std::map<int32_t, const Event*> by_pid;
  for (const auto& e : losses) by_pid[e.identity.pid] = &e;
  ASSERT_TRUE(by_pid.count(100) && by_pid.count(200));
  EXPECT_DOUBLE_EQ(by_pid[100]->value, 4.0);
  EXPECT_EQ(by_pid[100]->identity.rank, 0);
  EXPECT_DOUBLE_EQ(by_pid[200]->value, 5.0);
  EXPECT_EQ(by_pid[200]->identity.rank, 1);
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_total", "{stream=\"stdout\"}"), 1.0);
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_total", "{stream=\"stderr\"}"), 1.0);
}

TEST_F(CollectorTest, ForkedChildCarriesTheRootsRankWithItsOwnPid) {
  AddProc(100);
  AddProc(101, "", 100);
  Make();
  Publish({{100, Rank("j", 3)}});
  Tick();
  Control(CaptureRecord::Type::kFork, 101, 100, 100);
  Data(101, 2, MegatronLine(9, 1.5) + "\n", kT0 + 5);
  Tick();
  const Event* loss = LossAt(sink_.events(), 9);
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->identity.pid, 101);
  EXPECT_EQ(loss->identity.rank, 3);
  EXPECT_EQ(loss->identity.job, "j");
}

TEST_F(CollectorTest, ExistingChildrenAndLauncherAncestorAreFollowed) {
  // 50 = torchrun (launcher) -> 100 (the GPU process) -> 101 (a worker that existed before).
  AddProc(50, "", 1,
          std::string("/usr/bin/python3\0/usr/local/bin/torchrun\0--nproc-per-node=8\0train.py", 67));
  AddProc(100, "", 50);
  AddProc(101, "", 100);
  proc_.WriteFile("100/task/100/children", "101 ");
  Make();
  Publish({{100, Rank("j", 2)}});
  Tick();
  ASSERT_TRUE(state_->tracked.count(101)) << "an existing child must be tracked";
  EXPECT_EQ(state_->tracked[101], std::make_pair(int32_t{100}, true));
  ASSERT_TRUE(state_->tracked.count(50)) << "the torchrun launcher above must be tracked";
  EXPECT_EQ(state_->tracked[50], std::make_pair(int32_t{100}, false)) << "without inheritance";
  Data(50, 2, "[E ProcessGroupNCCL.cpp:1] something\n", kT0 + 1);
  Data(101, 1, MegatronLine(3, 2.0) + "\n", kT0 + 2);
  Tick();
  const Event* loss = LossAt(sink_.events(), 3);
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->identity.pid, 101);
  EXPECT_EQ(loss->identity.rank, 2);
  EXPECT_EQ(collector_->raw_ring().Read(kMinTime, kMaxTime, 50).size(), 1u)
      << "the launcher's line is captured";
  // The workers leave (they exited); the launcher is still followed for its failure summary,
  // with the job and no rank, until it exits itself.
  Publish({});
  Tick();
  EXPECT_FALSE(collector_->follows(101));
  EXPECT_TRUE(collector_->follows(50));
  EXPECT_TRUE(state_->tracked.count(50));
  Data(50, 2,
       "torch.distributed.elastic.multiprocessing.api.ChildFailedError: train.py FAILED\n"
       "[0]:\n  time      : 2026-11-30_03:51:38\n  host      : node-17\n  rank      : 2 (local_rank: 2)\n"
       "  exitcode  : 1 (pid: 100)\n",
       kT0 + 3);
  Tick();
  EXPECT_EQ(collector_->raw_ring().Read(kMinTime, kMaxTime, 50).size(), 7u);
  for (const auto& e : sink_.events()) {
    if (e.identity.pid != 50) continue;
    EXPECT_EQ(e.identity.job, "j");
  }
  Control(CaptureRecord::Type::kExit, 50);
  Tick();
  EXPECT_FALSE(collector_->follows(50));
}

TEST_F(CollectorTest, EnvironmentOptOutIsNotCapturedAndCounted) {
  AddProc(100, std::string("PATH=/bin\0ITHBAT_JOBLOG=off\0", 29));
  AddProc(200);
  Make();
  Publish({{100, Rank("j", 0)}, {200, Rank("j", 1)}});
  Tick();
  EXPECT_FALSE(state_->tracked.count(100)) << "an opted-out process must not be tracked in the kernel";
  EXPECT_TRUE(state_->tracked.count(200));
  Data(100, 1, MegatronLine(1, 9.0) + "\n", kT0 + 1);  // late data of the opted-out process
  Tick();
  EXPECT_EQ(LossAt(sink_.events(), 1), nullptr);
  EXPECT_EQ(collector_->opted_out_processes(), 1u);
  EXPECT_EQ(sink_.Last("ithbat_joblog_opted_out_processes"), 1.0);
}

TEST_F(CollectorTest, ConfiguredJobOptOut) {
  AddProc(100);
  AddProc(200);
  JobLogOptions o;
  auto list = ParseOptOutList("job:secret-job, user:nobody-here");
  ASSERT_TRUE(list.has_value());
  o.opt_out = *list;
  Make(std::move(o));
  Publish({{100, Rank("secret-job", 0)}, {200, Rank("open-job", 0)}});
  Tick();
  EXPECT_FALSE(state_->tracked.count(100));
  EXPECT_TRUE(state_->tracked.count(200));
  EXPECT_EQ(collector_->opted_out_processes(), 1u);
}

TEST_F(CollectorTest, ExitFlushesThePartialLineAndFreesTheState) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Data(100, 1, MegatronLine(4, 3.25), kT0 + 7);  // no newline: pending
  Tick();
  EXPECT_EQ(LossAt(sink_.events(), 4), nullptr);
  EXPECT_TRUE(collector_->follows(100));
  Control(CaptureRecord::Type::kExit, 100);
  Tick();
  EXPECT_NE(LossAt(sink_.events(), 4), nullptr) << "the last line without newline is emitted at exit";
  EXPECT_FALSE(collector_->follows(100));
  EXPECT_EQ(sink_.Last("ithbat_joblog_tracked_processes"), 0.0);
}

TEST_F(CollectorTest, LeavingTheTrackedSetUntracksAndFrees) {
  AddProc(100);
  AddProc(101, "", 100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Control(CaptureRecord::Type::kFork, 101, 100, 100);
  Tick();
  EXPECT_TRUE(collector_->follows(101));
  Publish({});
  Tick();
  EXPECT_FALSE(collector_->follows(100));
  EXPECT_FALSE(collector_->follows(101));
  EXPECT_FALSE(state_->tracked.count(100));
}

TEST_F(CollectorTest, ProcessBoundIsKeptAndCounted) {
  for (int pid : {100, 200, 300}) AddProc(pid);
  JobLogOptions o;
  o.max_processes = 2;
  Make(std::move(o));
  Publish({{100, Rank("j", 0)}, {200, Rank("j", 1)}, {300, Rank("j", 2)}});
  Tick();
  EXPECT_EQ(collector_->followed_processes(), 2u);
  EXPECT_EQ(state_->tracked.size(), 2u);
  EXPECT_EQ(sink_.Last("ithbat_joblog_processes_refused_total"), 1.0);
}

TEST_F(CollectorTest, LostChunkDoesNotGlueTwoLines) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  const std::string a = MegatronLine(1, 1.0) + "\n" + MegatronLine(2, 2.0);  // first chunk of a call
  Data(100, 1, a, kT0 + 1, 0, a.size() + 100);
  // The second chunk (offset a.size()) was lost; the next write starts a new call.
  Data(100, 1, MegatronLine(3, 3.0) + "\n", kT0 + 2);
  Tick();
  auto events = sink_.events();
  ASSERT_NE(LossAt(events, 1), nullptr);
  ASSERT_NE(LossAt(events, 3), nullptr) << "the line after the gap must parse on its own";
  EXPECT_DOUBLE_EQ(LossAt(events, 3)->value, 3.0);
}

TEST_F(CollectorTest, LoggedStepsCalibrateTheStepTimeline) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 4)}});
  Tick();
  Data(100, 1, MegatronLine(10, 2.0) + "\n", kT0 + 1 * kNsPerSec);
  Data(100, 1, MegatronLine(11, 1.9) + "\n", kT0 + 3 * kNsPerSec);
  Tick();
  auto steps = sink_.steps();
  ASSERT_FALSE(steps.empty());
  const auto& last = steps.back();
  EXPECT_EQ(last.job, "j");
  EXPECT_EQ(last.rank, 4);
  EXPECT_EQ(last.span.step, 11);
  EXPECT_EQ(last.span.start, kT0 + 1 * kNsPerSec) << "from the previous logged step";
  EXPECT_EQ(last.span.end, kT0 + 3 * kNsPerSec);
}

// Lines of one block-buffered write arrive together: no zero-length span from them. When only
// every 10th step is logged, the span of the logged step is a tenth of the interval.
TEST_F(CollectorTest, StepCalibrationSkipsSharedTimesAndSharesOutSkippedSteps) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Data(100, 1, MegatronLine(10, 2.0) + "\n", kT0 + 1 * kNsPerSec);
  Data(100, 1, MegatronLine(20, 1.9) + "\n", kT0 + 11 * kNsPerSec);
  const std::string block = MegatronLine(21, 1.8) + "\n" + MegatronLine(22, 1.7) + "\n";
  Data(100, 1, block, kT0 + 12 * kNsPerSec);
  Tick();
  std::map<int64_t, StepSpan> by_step;
  for (const auto& s : sink_.steps()) by_step[s.span.step] = s.span;
  ASSERT_TRUE(by_step.count(20));
  EXPECT_EQ(by_step[20].start, kT0 + 10 * kNsPerSec) << "(t20 - t10) / 10, ending at t20";
  EXPECT_EQ(by_step[20].end, kT0 + 11 * kNsPerSec);
  ASSERT_TRUE(by_step.count(21));
  EXPECT_EQ(by_step[21].start, kT0 + 11 * kNsPerSec);
  EXPECT_EQ(by_step[21].end, kT0 + 12 * kNsPerSec);
  for (const auto& [step, span] : by_step) EXPECT_LT(span.start, span.end) << "step " << step;
  if (by_step.count(22)) {
    EXPECT_NE(by_step[22].start, kT0 + 12 * kNsPerSec);
  }
}

// A whole lost write (the source marks the next record): the pending partial line ends there
// instead of being glued to the next write's bytes.
TEST_F(CollectorTest, GapBeforeARecordEndsThePendingPartialLine) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Data(100, 1, MegatronLine(1, 1.0) + "\n" + "partial line with no end", kT0 + 1);
  Data(100, 1, MegatronLine(2, 2.0) + "\n", kT0 + 2);
  state_->queue.back().gap_before = true;
  Tick();
  auto events = sink_.events();
  ASSERT_NE(LossAt(events, 1), nullptr);
  ASSERT_NE(LossAt(events, 2), nullptr) << "the line after the gap must parse on its own";
  EXPECT_DOUBLE_EQ(LossAt(events, 2)->value, 2.0);
  bool cut = false;
  for (const auto& l : collector_->raw_ring().Read(kMinTime, kMaxTime)) {
    // Bytes after it were lost: its unfinished last word is dropped (it could be half a secret).
    if (l.text == "partial line with no ") cut = true;
  }
  EXPECT_TRUE(cut);
}

TEST(SeqGapDetector, OnlyAJumpForwardOrADropIsAGap) {
  SeqGapDetector d;
  EXPECT_FALSE(d.Observe(7, 1));
  EXPECT_FALSE(d.Observe(7, 2));
  EXPECT_FALSE(d.Observe(7, 2));  // another chunk of the same call
  EXPECT_TRUE(d.Observe(7, 4));   // call 3 lost
  EXPECT_FALSE(d.Observe(7, 3));  // out of order (two CPUs): not a gap
  EXPECT_FALSE(d.Observe(7, 5));
  EXPECT_FALSE(d.Observe(8, 9));  // first seen: nothing to compare with
  d.Lost(8);                      // the queue dropped one of pid 8's records
  EXPECT_TRUE(d.Observe(8, 11));
  EXPECT_FALSE(d.Observe(8, 12));
  EXPECT_FALSE(d.Observe(7, 1));  // tracked again: numbering starts over
  EXPECT_FALSE(d.Observe(7, 2));
  d.Forget(7);
  EXPECT_FALSE(d.Observe(7, 40));
}

TEST_F(CollectorTest, RankPrefixInTheLineOverridesTheProcessRank) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Data(100, 2,
       "[rank5]:[E ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation timeout: "
       "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
       "milliseconds before timing out.\n",
       kT0 + 1);
  Tick();
  auto errors = OfKind(sink_.events(), EventKind::kError);
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].identity.rank, 5);
  EXPECT_EQ(errors[0].identity.pid, 100);
}

TEST_F(CollectorTest, JobOptOutLearnedLaterStopsTheCapture) {
  AddProc(100);
  JobLogOptions o;
  o.opt_out = {OptOut{OptOut::Kind::kJob, "late-job"}};
  Make(std::move(o));
  Publish({{100, Rank("", 0)}});  // the job id is not resolved yet
  Tick();
  EXPECT_TRUE(state_->tracked.count(100));
  Publish({{100, Rank("late-job", 0)}});
  Tick();
  EXPECT_FALSE(state_->tracked.count(100));
  EXPECT_FALSE(collector_->follows(100));
  EXPECT_EQ(collector_->opted_out_processes(), 1u);
}

TEST(JobLogCollectorDegraded, ASourceThatCannotStartDegradesWithItsReason) {
  auto state = std::make_shared<FakeState>();
  JobLogOptions o;
  o.make_sources = [state]() -> Result<std::vector<std::unique_ptr<CaptureSource>>> {
    auto s = std::make_unique<FakeSource>(state);
    s->start_error = Error{ErrorCode::kPermission, "BPF load failed: no CAP_BPF"};
    std::vector<std::unique_ptr<CaptureSource>> v;
    v.push_back(std::move(s));
    return v;
  };
  auto c = JobLogCollector::Create(std::move(o));
  ASSERT_TRUE(c.has_value());
  testing::FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value()) << "a capture that cannot start must not stop the agent";
  EXPECT_NE((*c)->Health().degraded.find("BPF load failed: no CAP_BPF"), std::string::npos)
      << (*c)->Health().degraded;
  EXPECT_TRUE((*c)->Collect(kT0).has_value());
}

TEST_F(CollectorTest, ErrorTextIsRedactedBeforeItIsStored) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  Data(100, 2,
       "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB; api_key=sk-abcdefghijklmnopqrstuvwx\n",
       kT0 + 1);
  Tick();
  auto errors = OfKind(sink_.events(), EventKind::kError);
  ASSERT_FALSE(errors.empty()) << "the OOM line must be an error event";
  for (const auto& e : errors)
    EXPECT_EQ(e.text.find("sk-abcdefghijklmnopqrstuvwx"), std::string::npos) << e.text;
  for (const auto& l : collector_->raw_ring().Read(kMinTime, kMaxTime)) {
    EXPECT_EQ(l.text.find("sk-abcdefghijklmnopqrstuvwx"), std::string::npos) << l.text;
  }
}

// A process printing per-step values faster than the value-line rate (20 lines/s beyond a burst
// of 64) has the extra lines counted, not stored; a line with news in it (a NaN loss, an error)
// is stored whatever the rate, and every line is still in the raw ring.
TEST_F(CollectorTest, AFloodOfValueLinesIsThinnedButNewsIsKept) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  for (int i = 1; i <= 1000; ++i) Data(100, 1, MegatronLine(i, 3.0) + "\n", kT0 + i * kNsPerMs);
  Data(100, 1, MegatronLine(1001, std::nan("")) + "\n", kT0 + 1001 * kNsPerMs);
  Data(100, 2, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n", kT0 + 1002 * kNsPerMs);
  Tick();
  auto events = sink_.events();
  // 64 at once, then 20 a second over the 0.999 s between the first line and the 1000th: 19.
  const auto steps = OfKind(events, EventKind::kStep);
  EXPECT_EQ(steps.size(), 64u + 19u + 1u) << "the NaN line's step comes with its loss";
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_thinned_total"), 1000.0 - 64 - 19);
  const Event* nan_loss = LossAt(events, 1001);
  ASSERT_NE(nan_loss, nullptr) << "a non-finite loss is stored whatever the rate";
  EXPECT_TRUE(std::isnan(nan_loss->value));
  EXPECT_FALSE(OfKind(events, EventKind::kError).empty()) << "an error line is never thinned";
  EXPECT_EQ(collector_->raw_ring().Read(kMinTime, kMaxTime, 100).size(), 1002u)
      << "the raw ring keeps every line";
  // The bucket refills: after 10 s of quiet a whole burst goes through again.
  for (int i = 0; i < 64; ++i) Data(100, 1, MegatronLine(2000 + i, 3.0) + "\n", kT0 + 12 * kNsPerSec + i);
  Tick();
  EXPECT_EQ(OfKind(sink_.events(), EventKind::kStep).size(), steps.size() + 64);
  EXPECT_EQ(sink_.Last("ithbat_joblog_lines_thinned_total"), 1000.0 - 64 - 19);
}

// Attribute values are free text too (the CUDA error's message here): redacted like the text.
TEST_F(CollectorTest, ErrorAttributesAreRedactedBeforeTheyAreStored) {
  AddProc(100);
  Make();
  Publish({{100, Rank("j", 0)}});
  Tick();
  const std::string secret = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
  Data(100, 2, "RuntimeError: CUDA error: an illegal memory access was encountered token=" + secret + "\n", kT0 + 1);
  Tick();
  auto errors = OfKind(sink_.events(), EventKind::kError);
  ASSERT_FALSE(errors.empty()) << "the CUDA error line must be an error event";
  size_t attrs = 0;
  for (const auto& e : errors) {
    EXPECT_EQ(e.text.find(secret), std::string::npos) << e.text;
    for (const auto& [k, v] : e.attrs) {
      ++attrs;
      EXPECT_EQ(v.find(secret), std::string::npos) << k << "=" << v;
    }
  }
  EXPECT_GT(attrs, 0u);
}

// TensorBoard files are found among the fds of followed processes (a fake /proc here: fd
// links to files). A FIFO with the file's name is skipped without hanging (a blocking open
// of a FIFO without a writer never returns); two processes' files are followed apart, each
// with its own identity, because a file is known by its inode, not its path.
TEST_F(CollectorTest, TensorboardFilesAreFollowedByInodeAndAFifoIsSkipped) {
  testing::TempDir files;
  const auto fifo = files.path() / "events.out.tfevents.1.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto a = files.path() / "a" / "events.out.tfevents.1.host.1.0";
  const auto b = files.path() / "b" / "events.out.tfevents.1.host.1.0";
  std::filesystem::create_directories(a.parent_path());
  std::filesystem::create_directories(b.parent_path());
  {
    testing::TfEventsWriter wa(a.string());
    ASSERT_TRUE(wa.WriteScalar(5, "train/loss", 1.5f, 1800000010.0));
    testing::TfEventsWriter wb(b.string());
    ASSERT_TRUE(wb.WriteScalar(5, "train/loss", 2.5f, std::nan("")));  // wall time unusable
  }
  AddProc(100);
  AddProc(200);
  std::filesystem::create_directories(proc_.path() / "100" / "fd");
  std::filesystem::create_directories(proc_.path() / "200" / "fd");
  std::filesystem::create_symlink(fifo, proc_.path() / "100" / "fd" / "3");
  std::filesystem::create_symlink(a, proc_.path() / "100" / "fd" / "4");
  std::filesystem::create_symlink(b, proc_.path() / "200" / "fd" / "4");
  Make();
  Publish({{100, Rank("j", 0)}, {200, Rank("j", 1)}});
  const TimeNs before = NowNs();
  Tick();
  const TimeNs after = NowNs();
  auto losses = OfKind(sink_.events(), EventKind::kLoss);
  ASSERT_EQ(losses.size(), 2u);
  std::map<int32_t, Event> by_rank;
  for (const auto& e : losses) by_rank[e.identity.rank] = e;
  ASSERT_TRUE(by_rank.count(0));
  ASSERT_TRUE(by_rank.count(1));
  EXPECT_DOUBLE_EQ(by_rank[0].value, 1.5);
  EXPECT_EQ(by_rank[0].time, 1800000010LL * kNsPerSec);
  EXPECT_DOUBLE_EQ(by_rank[1].value, 2.5);
  EXPECT_GE(by_rank[1].time, before) << "NaN wall time: the time it was read";
  EXPECT_LE(by_rank[1].time, after);
}

TEST(JobLogParse, OptOutListAndModes) {
  auto l = ParseOptOutList("job:1,user:alice user:1001");
  ASSERT_TRUE(l.has_value());
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0], (OptOut{OptOut::Kind::kJob, "1"}));
  EXPECT_EQ((*l)[2], (OptOut{OptOut::Kind::kUser, "1001"}));
  EXPECT_FALSE(ParseOptOutList("group:x").has_value());
  EXPECT_FALSE(ParseOptOutList("job:").has_value());
  EXPECT_EQ(ParseCaptureMode("tail").value(), CaptureMode::kTail);
  EXPECT_FALSE(ParseCaptureMode("kprobe").has_value());
  auto t = ParseTailSpec("/var/log/x.log?job=12&rank=3");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->path, "/var/log/x.log");
  EXPECT_EQ(t->identity.job, "12");
  EXPECT_EQ(t->identity.rank, 3);
  EXPECT_FALSE(ParseTailSpec("/x?rank=-1").has_value());
  EXPECT_FALSE(ParseTailSpec("/x?color=red").has_value());
  EXPECT_FALSE(ParseTailSpec("?job=1").has_value());
}

TEST(JobLogCollectorCreate, UnknownFormatIsRefused) {
  JobLogOptions o;
  o.format = "no-such-framework";
  EXPECT_FALSE(JobLogCollector::Create(std::move(o)).has_value());
}

}  // namespace
}  // namespace ithbat::collect::joblog
