// End to end: two ranks of the fake NCCL workload run libnccl-profiler-ithbat.so; the collector
// follows them through TrackedProcesses, finds each ring in /proc/<pid>/maps (unlinked, so only
// /proc/<pid>/map_files reaches it: root), and publishes exact counts, GPU kernel time and the
// wait of the rank whose peer is late. The workloads park at --hang-at K after K collectives so
// their rings stay mapped while the collector reads; they are killed at the end.
#include <filesystem>
#include <map>
#include <thread>

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/nccl_profiler/nccl_profiler_collector.h"
#include "nccl_profiler/workload.h"
#include "nccl_profiler_abi.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::nccl_profiler {
namespace {

using testing::Child;
using testing::FakeSink;
using testing::TempDir;

constexpr int kCollectives = 6;
constexpr int64_t kDelayNs = 30'000'000;

struct Job {
  std::vector<Child> ranks;
  ~Job() {
    for (const Child& c : ranks) testing::Kill(c);
  }
};

// Rank 1 sleeps 30 ms before every collective: rank 0's kernels wait for it.
void StartJob(const TempDir& dir, Job* job, const std::map<std::string, std::string>& extra = {},
              const std::map<std::string, std::string>& rank1_extra = {}) {
  std::map<std::string, std::string> env = {{"NCCL_PROFILER_PLUGIN", ITHBAT_NCCL_PROFILER_PLUGIN},
                                            {"ITHBAT_NCCL_PROFILER_DIR", dir.path().string()},
                                            {"ITHBAT_FAKE_NCCL_SHM_DIR", dir.path().string()},
                                            {"ITHBAT_FAKE_NCCL_LATENCY_NS", "0"}};
  for (const auto& [k, v] : extra) env[k] = v;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {ITHBAT_NCCL_WORKLOAD,
                                     "--rank",
                                     std::to_string(r),
                                     "--nranks",
                                     "2",
                                     "--id-file",
                                     (dir.path() / "id").string(),
                                     "--collectives",
                                     "1000",
                                     "--bytes",
                                     "4",
                                     "--sync-every",
                                     "0",
                                     "--hang-at",
                                     std::to_string(kCollectives)};
    auto rank_env = env;
    if (r == 1) {
      argv.push_back("--delay-ms");
      argv.push_back(std::to_string(kDelayNs / 1'000'000));
      for (const auto& [k, v] : rank1_extra) rank_env[k] = v;
    }
    job->ranks.push_back(testing::Spawn(argv, rank_env, dir.path(), "rank" + std::to_string(r)));
  }
  for (const Child& c : job->ranks)
    ASSERT_TRUE(testing::WaitForText(c.err, "hang at", std::chrono::seconds(60))) << testing::ReadAll(c.err);
}

void Track(agent::TrackedProcesses& tracked, const Job& job) {
  std::vector<agent::TrackedProcesses::Process> procs;
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    agent::TrackedProcesses::Process p;
    p.pid = job.ranks[r].pid;
    p.identity.job = "job1";
    p.identity.rank = static_cast<int32_t>(r);
    p.source = "test";
    procs.push_back(p);
  }
  tracked.Publish("test", procs);
}

// Ticks until every tracked process has `n` records with waits computed (bounded).
void TickUntil(NcclProfilerCollector& c, const Job& job, size_t n, TimeNs* t) {
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(c.Collect(*t += 1'000'000'000).has_value());
    bool done = true;
    for (const Child& ch : job.ranks) {
      auto recs = c.RecentCollectives(ch.pid);
      done = done && recs.size() >= n &&
             std::all_of(recs.begin(), recs.end(), [](const CollectiveTiming& r) { return r.wait_ns >= 0; });
    }
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "records did not arrive";
}

// Rank 1 sleeps before every collective; `rank1_env` is added to rank 1's environment.
void CheckCountsKernelTimeAndWait(const std::map<std::string, std::string>& rank1_env) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root: the rings are reached through /proc/<pid>/map_files";
  TempDir dir;
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(dir, &job, {}, rank1_env));
  // Unlinked at once by the plugin: nothing is left in the directory.
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("ithbat-ncclprof-"), std::string::npos) << e.path();

  agent::TrackedProcesses tracked;
  Track(tracked, job);
  NcclProfilerOptions opts;
  opts.tracked = &tracked;
  opts.join_ticks = 1000;  // both ranks' records always arrive: never close a group early
  auto c = NcclProfilerCollector::Create(opts);
  ASSERT_TRUE(c.has_value());
  FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value());
  TimeNs t = 1'000'000'000'000;
  ASSERT_NO_FATAL_FAILURE(TickUntil(**c, job, kCollectives, &t));
  ASSERT_TRUE((*c)->Collect(t += 1'000'000'000).has_value());

  const auto r0 = (*c)->RecentCollectives(job.ranks[0].pid);
  const auto r1 = (*c)->RecentCollectives(job.ranks[1].pid);
  ASSERT_EQ(r0.size(), static_cast<size_t>(kCollectives));
  ASSERT_EQ(r1.size(), static_cast<size_t>(kCollectives));
  int64_t late0_sum = 0;
  for (int k = 0; k < kCollectives; ++k) {
    EXPECT_EQ(r0[k].record.seq_number, static_cast<uint64_t>(k));
    EXPECT_EQ(r1[k].record.seq_number, r0[k].record.seq_number);
    EXPECT_EQ(r0[k].record.comm_id, r1[k].record.comm_id);
    EXPECT_EQ(r0[k].record.rank, 0);
    EXPECT_EQ(r1[k].record.rank, 1);
    EXPECT_TRUE(r0[k].record.timed);
    EXPECT_EQ(r0[k].record.op, "all_reduce");
    // The first also absorbs the ranks' bootstrap skew (which rank arrives last is not fixed).
    if (k == 0) continue;
    EXPECT_EQ(r1[k].wait_ns, 0) << "the late rank waits for nobody";
    const int64_t kernel0 = r0[k].record.gpu_stop_mono - r0[k].record.gpu_start_mono;
    EXPECT_GE(kernel0, kDelayNs) << "collective " << k;
    // Rank 0's fake GPU timer is the host clock itself, so how far the correction moved its times
    // is exactly their error: late, never early, by the smallest delivery delay the plugin saw.
    // Rank 1's times are late the same way, so rank 0's wait is short by at most its own error.
    const int64_t late0 =
        r0[k].record.gpu_to_mono_ns + (r0[k].record.gpu_start - r0[k].record.gpu_start_mono);
    EXPECT_GE(late0, 0) << "collective " << k;
    EXPECT_GE(r0[k].wait_ns, kDelayNs - late0) << "collective " << k;
    late0_sum += late0;
  }
  for (size_t r = 0; r < 2; ++r) {
    const FakeSink::LabelSubset pid = {{"pid", std::to_string(job.ranks[r].pid)}, {"op", "all_reduce"}};
    auto n = sink.FindWith("ithbat_nccl_collectives_total", pid);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->samples.back().second, kCollectives);
    auto bytes = sink.FindWith("ithbat_nccl_bytes_total", pid);
    ASSERT_TRUE(bytes.has_value());
    EXPECT_EQ(bytes->samples.back().second, 4.0 * kCollectives);
    auto ks = sink.FindWith("ithbat_nccl_kernel_seconds_total", pid);
    ASSERT_TRUE(ks.has_value());
    double sum = 0;
    for (const auto& rec : (r == 0 ? r0 : r1))
      sum += static_cast<double>(rec.record.gpu_stop_mono - rec.record.gpu_start_mono) / 1e9;
    EXPECT_DOUBLE_EQ(ks->samples.back().second, sum);
  }
  auto w0 = sink.FindWith("ithbat_nccl_wait_seconds_total", {{"pid", std::to_string(job.ranks[0].pid)}});
  ASSERT_TRUE(w0.has_value());
  EXPECT_GE(w0->samples.back().second, ((kCollectives - 1) * kDelayNs - late0_sum) / 1e9);
  auto w1 = sink.FindWith("ithbat_nccl_wait_seconds_total", {{"pid", std::to_string(job.ranks[1].pid)}});
  ASSERT_TRUE(w1.has_value());
  EXPECT_DOUBLE_EQ(w1->samples.back().second, static_cast<double>(r1[0].wait_ns) / 1e9);
  EXPECT_TRUE((*c)->Health().degraded.empty()) << (*c)->Health().degraded;
  for (const auto& p : (*c)->Processes()) {
    EXPECT_EQ(p.state, "reading");
    EXPECT_EQ(p.losses.overrun + p.losses.torn + p.losses.invalid, 0u);
  }
}

TEST(NcclProfilerCollectorE2ETest, ExactCountsKernelTimeAndWaitOfTheRankWithALatePeer) {
  CheckCountsKernelTimeAndWait({});
}

// Rank 1's GPU timer runs 5 s behind the host clock (rank 0's is on it). Uncorrected, rank 1 would
// look 5 s early and rank 0 late: rank 1 would be credited ~5 s of wait per collective and rank 0
// none. With the plugin's per-communicator correction the result is the same as without skew.
TEST(NcclProfilerCollectorE2ETest, GpuTimerSkewBetweenRanksDoesNotBecomeWait) {
  CheckCountsKernelTimeAndWait({{"ITHBAT_FAKE_NCCL_GPU_TIMER_OFFSET_NS", "-5000000000"}});
}

TEST(NcclProfilerCollectorE2ETest, ProcessWithoutThePluginIsFollowedQuietly) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  TempDir dir;
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(dir, &job, {{"NCCL_PROFILER_PLUGIN", "none"}}));
  agent::TrackedProcesses tracked;
  Track(tracked, job);
  NcclProfilerOptions opts;
  opts.tracked = &tracked;
  auto c = NcclProfilerCollector::Create(opts);
  ASSERT_TRUE(c.has_value());
  FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value());
  TimeNs t = 1'000'000'000'000;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->Collect(t += 1'000'000'000).has_value());
  for (const auto& p : (*c)->Processes()) EXPECT_EQ(p.state, "no_ring");
  EXPECT_EQ(sink.series_count(), 0u);
  EXPECT_TRUE((*c)->Health().degraded.empty());
}

// A process that maps a file named like a ring but holding garbage: the collector says why in its
// degraded reason, keeps running, and publishes nothing for it.
TEST(NcclProfilerCollectorE2ETest, HostileRingMakesTheCollectorDegradedNotDown) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string path =
        (dir.path() / ("ithbat-ncclprof-" + std::to_string(getpid()) + ".ring")).string();
    const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
    std::string junk(1 << 16, '\x5a');
    if (fd < 0 || write(fd, junk.data(), junk.size()) != static_cast<ssize_t>(junk.size())) _exit(1);
    void* m = mmap(nullptr, junk.size(), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) _exit(2);
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  Job job;
  job.ranks.push_back(Child{pid, {}, {}});
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  agent::TrackedProcesses tracked;
  Track(tracked, job);
  NcclProfilerOptions opts;
  opts.tracked = &tracked;
  auto col = NcclProfilerCollector::Create(opts);
  ASSERT_TRUE(col.has_value());
  FakeSink sink;
  ASSERT_TRUE((*col)->Init(sink).has_value());
  ASSERT_TRUE((*col)->Start().has_value());
  ASSERT_TRUE((*col)->Collect(1'000'000'000'000).has_value());
  const auto health = (*col)->Health();
  EXPECT_NE(health.degraded.find("bad magic"), std::string::npos) << health.degraded;
  EXPECT_NE(health.degraded.find(std::to_string(pid)), std::string::npos) << health.degraded;
  ASSERT_EQ((*col)->Processes().size(), 1u);
  EXPECT_EQ((*col)->Processes()[0].state, "bad_ring");
  EXPECT_EQ(sink.series_count(), 0u);
  EXPECT_TRUE((*col)->Collect(2'000'000'000'000).has_value());  // and goes on
}

// A rank that forks a worker after its NCCL init: the worker maps its parent's ring (inherited)
// and, once it builds a communicator of its own, its own ring. Both tracked: each ring is read
// once, by its writer's process.
TEST(NcclProfilerCollectorE2ETest, ForkedWorkerReadsItsOwnRingNotItsParents) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t parent = fork();
  if (parent == 0) {
    setenv("ITHBAT_NCCL_PROFILER_DIR", dir.path().c_str(), 1);
    void* h = dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    auto* api = h != nullptr ? static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6")) : nullptr;
    if (api == nullptr) _exit(1);
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t t0 = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
    auto collectives = [&](void* ctx, int n) {
      for (int i = 0; i < n; ++i) {
        ncclProfilerEventDescr_v6_t d{};
        d.type = ncclProfileColl;
        d.coll.seqNumber = static_cast<uint64_t>(i);
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclFloat32";
        d.coll.count = 1;
        d.coll.nChannels = 1;
        void* coll = nullptr;
        api->startEvent(ctx, &coll, &d);
        api->stopEvent(coll);
        ncclProfilerEventDescr_v6_t k{};
        k.type = ncclProfileKernelCh;
        k.parentObj = coll;
        k.kernelCh.pTimer = t0;
        void* ch = nullptr;
        api->startEvent(ctx, &ch, &k);
        ncclProfilerEventStateArgs_v6_t a{};
        a.kernelCh.pTimer = t0 + 1000;
        api->recordEventState(ch, ncclProfilerKernelChStop, &a);
        api->stopEvent(ch);
      }
    };
    void* ctx = nullptr;
    int mask = 0;
    api->init(&ctx, 0xaaaa, &mask, "parent", 1, 1, 0, nullptr);
    collectives(ctx, 3);
    const pid_t worker = fork();
    if (worker == 0) {
      void* wctx = nullptr;
      api->init(&wctx, 0xbbbb, &mask, "worker", 1, 1, 0, nullptr);
      collectives(wctx, 2);
      const int32_t me = getpid();
      (void)!write(ready[1], &me, sizeof(me));
      for (;;) pause();
    }
    const int32_t me = getpid();
    (void)!write(ready[1], &me, sizeof(me));
    for (;;) pause();
  }
  Job job;
  int32_t pids[2] = {0, 0};
  ASSERT_EQ(read(ready[0], &pids[0], sizeof(int32_t)), static_cast<ssize_t>(sizeof(int32_t)));
  ASSERT_EQ(read(ready[0], &pids[1], sizeof(int32_t)), static_cast<ssize_t>(sizeof(int32_t)));
  close(ready[0]);
  close(ready[1]);
  const int32_t worker = pids[0] == parent ? pids[1] : pids[0];
  job.ranks.push_back(Child{worker, {}, {}});  // killed first (its parent would reap it)
  job.ranks.push_back(Child{parent, {}, {}});
  agent::TrackedProcesses tracked;
  // The worker first, so a naive scan would give it the parent's ring.
  std::vector<agent::TrackedProcesses::Process> procs(2);
  procs[0].pid = worker;
  procs[1].pid = parent;
  tracked.Publish("test", procs);
  NcclProfilerOptions opts;
  opts.tracked = &tracked;
  auto c = NcclProfilerCollector::Create(opts);
  ASSERT_TRUE(c.has_value());
  FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value());
  ASSERT_TRUE((*c)->Collect(1'000'000'000'000).has_value());
  const auto from_parent = (*c)->RecentCollectives(parent);
  const auto from_worker = (*c)->RecentCollectives(worker);
  ASSERT_EQ(from_parent.size(), 3u);
  ASSERT_EQ(from_worker.size(), 2u);
  for (const auto& r : from_parent) EXPECT_EQ(r.record.comm_id, 0xaaaau);
  for (const auto& r : from_worker) EXPECT_EQ(r.record.comm_id, 0xbbbbu);
  EXPECT_TRUE((*c)->Health().degraded.empty()) << (*c)->Health().degraded;
}

// A job that runs with the plugin and no agent: nothing blocks, the ring overwrites, and a reader
// that comes later counts what it missed.
TEST(NcclProfilerCollectorE2ETest, NoReaderCostsNothingVisibleAndOverwritesAreCounted) {
  TempDir dir;
  std::map<std::string, std::string> env = {{"NCCL_PROFILER_PLUGIN", ITHBAT_NCCL_PROFILER_PLUGIN},
                                            {"ITHBAT_NCCL_PROFILER_DIR", dir.path().string()},
                                            {"ITHBAT_NCCL_PROFILER_KEEP", "1"},
                                            {"ITHBAT_NCCL_PROFILER_RECORDS", "16"},
                                            {"ITHBAT_FAKE_NCCL_SHM_DIR", dir.path().string()}};
  std::vector<Child> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(testing::Spawn(
        {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(r), "--nranks", "2", "--id-file",
         (dir.path() / "id").string(), "--collectives", "300", "--bytes", "64", "--sync-every", "8"},
        env, dir.path(), "rank" + std::to_string(r)));
  }
  for (const Child& ch : ranks) {
    ASSERT_EQ(testing::WaitExit(ch, std::chrono::seconds(60)), 0) << testing::ReadAll(ch.err);
    EXPECT_NE(testing::ReadAll(ch.out).find("\"ncclAllReduce\":300"), std::string::npos);
    auto r = RingReader::Open((dir.path() / ("ithbat-ncclprof-" + std::to_string(ch.pid) + ".ring")).string(),
                              false);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    std::vector<NcclRecord> out;
    ASSERT_TRUE((*r)->Read(&out).has_value());
    EXPECT_EQ(out.size(), 16u);
    EXPECT_EQ((*r)->losses().overrun, 300u - 16u);
    EXPECT_EQ((*r)->writer().records_written, 300u);
    EXPECT_EQ(out.back().seq_number, 299u);
  }
}

}  // namespace
}  // namespace ithbat::collect::nccl_profiler
