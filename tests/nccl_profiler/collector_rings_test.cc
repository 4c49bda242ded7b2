// The collector against processes that hold the plugin in ways a plain job does not: two copies
// of the plugin (a reload without -z nodelete) leave two rings; one process holds two ranks of a
// communicator; two jobs use the same communicator id; a ring refused once is looked at again.
// Each process is a fork of this test that drives the plugin's ABI itself and then parks.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/tracked_processes.h"
#include "collect/nccl_profiler/nccl_profiler_collector.h"
#include "ithbat_nccl_ring.h"
#include "nccl_profiler/workload.h"
#include "nccl_profiler_abi.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::nccl_profiler {
namespace {

using testing::FakeSink;
using testing::TempDir;

uint64_t RealtimeNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

ncclProfiler_v6_t* LoadPlugin(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  return h != nullptr ? static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6")) : nullptr;
}

// One collective of `rank` on `ctx`, one channel, its kernel starting now.
void Collective(ncclProfiler_v6_t* api, void* ctx, int rank, uint64_t seq) {
  ncclProfilerEventDescr_v6_t d{};
  d.type = ncclProfileColl;
  d.rank = rank;
  d.coll.seqNumber = seq;
  d.coll.func = "AllReduce";
  d.coll.datatype = "ncclFloat32";
  d.coll.count = 1;
  d.coll.root = -1;
  d.coll.nChannels = 1;
  void* coll = nullptr;
  api->startEvent(ctx, &coll, &d);
  api->stopEvent(coll);
  ncclProfilerEventDescr_v6_t k{};
  k.type = ncclProfileKernelCh;
  k.parentObj = coll;
  k.kernelCh.pTimer = RealtimeNow();
  void* ch = nullptr;
  api->startEvent(ctx, &ch, &k);
  ncclProfilerEventStateArgs_v6_t a{};
  a.kernelCh.pTimer = RealtimeNow() + 1000;
  api->recordEventState(ch, ncclProfilerKernelChStop, &a);
  api->stopEvent(ch);
}

// A forked process that runs `steps` in order: before each step after the first it waits for a
// byte on its `go` pipe; after each it writes one byte to `ready`. It parks at the end.
struct Proc {
  pid_t pid = -1;
  int go = -1;     // write end
  int ready = -1;  // read end
  ~Proc() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (go >= 0) close(go);
    if (ready >= 0) close(ready);
  }
  bool WaitReady() {
    char c = 0;
    return read(ready, &c, 1) == 1;
  }
  bool Next() { return write(go, "g", 1) == 1 && WaitReady(); }
};

void StartProc(const TempDir& dir, Proc* p, std::vector<std::function<void()>> steps) {
  int go[2], ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  p->pid = fork();
  if (p->pid == 0) {
    setenv("ITHBAT_NCCL_PROFILER_DIR", dir.path().c_str(), 1);
    for (size_t i = 0; i < steps.size(); ++i) {
      char c = 0;
      if (i > 0 && read(go[0], &c, 1) != 1) _exit(1);
      steps[i]();
      if (write(ready[1], "r", 1) != 1) _exit(2);
    }
    for (;;) pause();
  }
  close(go[0]);
  close(ready[1]);
  p->go = go[1];
  p->ready = ready[0];
  ASSERT_TRUE(p->WaitReady());
}

struct Fixture {
  agent::TrackedProcesses tracked;
  FakeSink sink;
  std::unique_ptr<NcclProfilerCollector> collector;
  TimeNs t = 1'000'000'000'000;

  void Make(NcclProfilerOptions opts) {
    opts.tracked = &tracked;
    auto c = NcclProfilerCollector::Create(opts);
    ASSERT_TRUE(c.has_value());
    collector = std::move(*c);
    ASSERT_TRUE(collector->Init(sink).has_value());
    ASSERT_TRUE(collector->Start().has_value());
  }
  void Track(const std::vector<std::pair<pid_t, std::string>>& procs) {
    std::vector<agent::TrackedProcesses::Process> v;
    for (const auto& [pid, job] : procs) {
      agent::TrackedProcesses::Process p;
      p.pid = pid;
      p.identity.job = job;
      p.source = "test";
      v.push_back(p);
    }
    tracked.Publish("test", v);
  }
  void Tick(int n = 1) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(collector->Collect(t += 1'000'000'000).has_value());
  }
};

// A plugin loaded twice as two libraries (or reloaded without nodelete) starts a second ring in
// the same process. The collector first reads the ring that exists; when its head stops moving it
// looks again, drains the old ring and follows the newer one. A collector that starts afterwards
// takes the newest ring at once.
TEST(NcclProfilerCollectorRingsTest, NewerRingOfAReloadedPluginIsFollowed) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root: the rings are reached through /proc/<pid>/map_files";
  TempDir dir;
  const std::string copy = (dir.path() / "libnccl-profiler-copy.so").string();
  std::filesystem::copy_file(ITHBAT_NCCL_PROFILER_PLUGIN, copy);
  Proc p;
  ncclProfiler_v6_t* api = nullptr;
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_NO_FATAL_FAILURE(
      StartProc(dir, &p,
                {[&] {
                   api = LoadPlugin(ITHBAT_NCCL_PROFILER_PLUGIN);
                   if (api == nullptr || api->init(&ctx, 0x11, &mask, "a", 1, 1, 0, nullptr) != 0) _exit(3);
                   for (uint64_t i = 0; i < 3; ++i) Collective(api, ctx, 0, i);
                 },
                 [&] {
                   api = LoadPlugin(copy);
                   if (api == nullptr || api->init(&ctx, 0x22, &mask, "b", 1, 1, 0, nullptr) != 0) _exit(4);
                   for (uint64_t i = 0; i < 4; ++i) Collective(api, ctx, 0, i);
                 }}));
  Fixture f;
  NcclProfilerOptions opts;
  opts.rescan_ticks = 1;
  opts.stall_ticks = 3;
  ASSERT_NO_FATAL_FAILURE(f.Make(opts));
  f.Track({{p.pid, "job"}});
  ASSERT_NO_FATAL_FAILURE(f.Tick());
  ASSERT_EQ(f.collector->RecentCollectives(p.pid).size(), 3u);
  ASSERT_TRUE(p.Next());  // the second ring exists now
  ASSERT_NO_FATAL_FAILURE(f.Tick(opts.stall_ticks + 1));
  const auto recs = f.collector->RecentCollectives(p.pid);
  ASSERT_EQ(recs.size(), 7u);
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i].record.comm_id, i < 3 ? 0x11u : 0x22u);
  ASSERT_EQ(f.collector->Processes().size(), 1u);
  EXPECT_EQ(f.collector->Processes()[0].state, "reading");

  Fixture late;
  ASSERT_NO_FATAL_FAILURE(late.Make(opts));
  late.Track({{p.pid, "job"}});
  ASSERT_NO_FATAL_FAILURE(late.Tick());
  const auto newest = late.collector->RecentCollectives(p.pid);
  ASSERT_EQ(newest.size(), 4u);
  for (const auto& r : newest) EXPECT_EQ(r.record.comm_id, 0x22u);
}

// One process holding both ranks of a communicator (one thread per GPU): each rank's record gets
// its own wait. Rank 0's kernel starts first, so rank 0 waited and rank 1 did not.
TEST(NcclProfilerCollectorRingsTest, OneProcessWithTwoRanksGetsAWaitPerRank) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  TempDir dir;
  Proc p;
  ASSERT_NO_FATAL_FAILURE(StartProc(dir, &p, {[&] {
                                      auto* api = LoadPlugin(ITHBAT_NCCL_PROFILER_PLUGIN);
                                      void* ctx[2] = {};
                                      int mask = 0;
                                      for (int r = 0; r < 2; ++r) {
                                        if (api == nullptr ||
                                            api->init(&ctx[r], 0x33, &mask, "w", 1, 2, r, nullptr) != 0)
                                          _exit(3);
                                      }
                                      for (uint64_t i = 0; i < 3; ++i) {
                                        Collective(api, ctx[0], 0, i);
                                        usleep(20000);
                                        Collective(api, ctx[1], 1, i);
                                      }
                                    }}));
  Fixture f;
  NcclProfilerOptions opts;
  opts.join_ticks = 1000;
  ASSERT_NO_FATAL_FAILURE(f.Make(opts));
  f.Track({{p.pid, "job"}});
  ASSERT_NO_FATAL_FAILURE(f.Tick());
  const auto recs = f.collector->RecentCollectives(p.pid);
  ASSERT_EQ(recs.size(), 6u);
  for (const auto& r : recs) {
    ASSERT_TRUE(r.record.timed);
    if (r.record.rank == 0) {
      EXPECT_GT(r.wait_ns, 0) << "seq " << r.record.seq_number;
    } else {
      EXPECT_EQ(r.wait_ns, 0) << "seq " << r.record.seq_number;
    }
  }
}

// Two jobs on one node whose communicators happen to share an id (or one that copies a victim's):
// their records never form one group, so neither job's wait depends on the other.
TEST(NcclProfilerCollectorRingsTest, SameCommunicatorIdInAnotherJobIsNotJoined) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  for (const bool same_job : {true, false}) {
    TempDir dir;
    Proc a, b;
    auto rank = [&](int r) {
      return [r] {
        auto* api = LoadPlugin(ITHBAT_NCCL_PROFILER_PLUGIN);
        void* ctx = nullptr;
        int mask = 0;
        if (api == nullptr || api->init(&ctx, 0x44, &mask, "j", 1, 2, r, nullptr) != 0) _exit(3);
        Collective(api, ctx, r, 0);
      };
    };
    ASSERT_NO_FATAL_FAILURE(StartProc(dir, &a, {rank(0)}));
    usleep(20000);
    ASSERT_NO_FATAL_FAILURE(StartProc(dir, &b, {rank(1)}));
    Fixture f;
    NcclProfilerOptions opts;
    opts.join_ticks = 1;
    ASSERT_NO_FATAL_FAILURE(f.Make(opts));
    f.Track({{a.pid, "job-a"}, {b.pid, same_job ? "job-a" : "job-b"}});
    ASSERT_NO_FATAL_FAILURE(f.Tick(3));
    const auto ra = f.collector->RecentCollectives(a.pid);
    const auto rb = f.collector->RecentCollectives(b.pid);
    ASSERT_EQ(ra.size(), 1u);
    ASSERT_EQ(rb.size(), 1u);
    if (same_job) {
      EXPECT_GT(ra[0].wait_ns, 0) << "rank 0 started first and waited for rank 1";
    } else {
      EXPECT_EQ(ra[0].wait_ns, 0) << "joined with another job's record";
    }
    EXPECT_EQ(rb[0].wait_ns, 0);
  }
}

// A ring refused once (bad header) is looked at again later: a process that fixed it, or a pid
// whose new process maps a good one, is read then.
TEST(NcclProfilerCollectorRingsTest, RefusedRingIsScannedAgainLater) {
  if (geteuid() != 0) GTEST_FAIL() << "needs root";
  TempDir dir;
  Proc p;
  int fd = -1;
  ASSERT_NO_FATAL_FAILURE(
      StartProc(dir, &p,
                {[&] {
                   const std::string path =
                       (dir.path() / ("ithbat-ncclprof-" + std::to_string(getpid()) + ".ring")).string();
                   fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
                   const size_t size = sizeof(IthbatNcclRingHeader) + 16 * sizeof(IthbatNcclRecord);
                   if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) _exit(3);
                   if (mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) _exit(4);
                 },
                 [&] {
                   IthbatNcclRingHeader h{};
                   h.magic = ITHBAT_NCCL_RING_MAGIC;
                   h.version = ITHBAT_NCCL_RING_VERSION;
                   h.header_size = sizeof(IthbatNcclRingHeader);
                   h.record_size = sizeof(IthbatNcclRecord);
                   h.capacity = 16;
                   h.pid = static_cast<uint32_t>(getpid());
                   if (pwrite(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) _exit(5);
                 }}));
  Fixture f;
  NcclProfilerOptions opts;
  opts.bad_rescan_ticks = 3;
  ASSERT_NO_FATAL_FAILURE(f.Make(opts));
  f.Track({{p.pid, "job"}});
  ASSERT_NO_FATAL_FAILURE(f.Tick());
  ASSERT_EQ(f.collector->Processes().size(), 1u);
  EXPECT_EQ(f.collector->Processes()[0].state, "bad_ring");
  ASSERT_TRUE(p.Next());
  ASSERT_NO_FATAL_FAILURE(f.Tick(opts.bad_rescan_ticks));
  EXPECT_EQ(f.collector->Processes()[0].state, "reading") << f.collector->Processes()[0].detail;
  EXPECT_TRUE(f.collector->Health().degraded.empty()) << f.collector->Health().degraded;
}

// A ring file as the plugin writes it, with `n` committed collectives of communicator `comm`.
void WriteRing(const std::filesystem::path& p, uint64_t comm, int n, uint64_t created_mono) {
  IthbatNcclRingHeader h{};
  h.magic = ITHBAT_NCCL_RING_MAGIC;
  h.version = ITHBAT_NCCL_RING_VERSION;
  h.header_size = sizeof(h);
  h.record_size = sizeof(IthbatNcclRecord);
  h.capacity = 16;
  h.created_monotonic_ns = created_mono;
  h.head = static_cast<uint64_t>(n);
  timespec m{}, r{};
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  const int64_t off = (int64_t{r.tv_sec} - m.tv_sec) * 1'000'000'000 + (r.tv_nsec - m.tv_nsec);
  std::vector<IthbatNcclRecord> recs(16);
  for (int i = 0; i < n; ++i) {
    IthbatNcclRecord& x = recs[static_cast<size_t>(i)];
    x.seq = 2 * static_cast<uint64_t>(i) + 2;
    x.comm_id = comm;
    x.seq_number = static_cast<uint64_t>(i);
    x.enqueue_mono_ns = 1'000'000'000;
    x.realtime_minus_monotonic_ns = off;
    x.rank = 0;
    x.nranks = 1;
    x.peer_or_root = -1;
    std::strcpy(x.func, "AllReduce");
    std::strcpy(x.datatype, "ncclInt8");
  }
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&h), sizeof(h));
  out.write(reinterpret_cast<const char*>(recs.data()),
            static_cast<std::streamsize>(recs.size() * sizeof(recs[0])));
}

// /proc/<pid> of a process that maps `ring` (a procfs laid out by hand: maps, stat, status and a
// map_files link), started at `start_time` ticks after boot.
void FakeProc(const std::filesystem::path& procfs, int pid, const std::filesystem::path& ring,
              uint64_t start_time) {
  const auto d = procfs / std::to_string(pid);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d / "map_files");
  struct stat st {};
  ASSERT_EQ(stat(ring.c_str(), &st), 0);
  std::ofstream(d / "maps") << fmt::format(
      "7f0000000000-7f0000010000 r--s 00000000 {:02x}:{:02x} {} "
      "/dev/shm/ithbat-ncclprof-{}.ring (deleted)\n",
      major(st.st_dev), minor(st.st_dev), st.st_ino, pid);
  std::ofstream(d / "status") << "Name:\tpython\nNSpid:\t" << pid << "\n";
  // Field 22 is the start time; the command holds a space and a parenthesis.
  std::ofstream(d / "stat") << pid << " (py thon) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start_time
                            << " 0 0\n";
  std::filesystem::create_symlink(ring, d / "map_files" / "7f0000000000-7f0000010000");
}

// A pid reused by another process: the reader of the old process's ring is dropped (not kept on
// because the pid matches), and the new process's ring is read from its start.
TEST(NcclProfilerCollectorRingsTest, ReusedPidStartsOver) {
  TempDir dir;
  const auto procfs = dir.path() / "proc";
  constexpr int kPid = 4242;
  WriteRing(dir.path() / "a.ring", 0xaa, 3, 2000);
  WriteRing(dir.path() / "b.ring", 0xbb, 2, 1000);  // older creation time: only the pid check helps
  ASSERT_NO_FATAL_FAILURE(FakeProc(procfs, kPid, dir.path() / "a.ring", 100));
  Fixture f;
  NcclProfilerOptions opts;
  opts.procfs = procfs.string();
  ASSERT_NO_FATAL_FAILURE(f.Make(opts));
  f.Track({{kPid, "job"}});
  ASSERT_NO_FATAL_FAILURE(f.Tick());
  ASSERT_EQ(f.collector->RecentCollectives(kPid).size(), 3u);
  ASSERT_NO_FATAL_FAILURE(FakeProc(procfs, kPid, dir.path() / "b.ring", 900));
  f.Track({{kPid, "job2"}});
  ASSERT_NO_FATAL_FAILURE(f.Tick());
  const auto recs = f.collector->RecentCollectives(kPid);
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) EXPECT_EQ(r.record.comm_id, 0xbbu);
}

}  // namespace
}  // namespace ithbat::collect::nccl_profiler
