// libnccl-profiler-ithbat.so driven through its ABI (v4, v5, v6) as NCCL drives it, in a child
// process each (the plugin keeps one ring per process); the parent reads the kept ring file with
// the agent's reader and checks what the plugin wrote and counted.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/nccl_profiler/ring_reader.h"
#include "ithbat_nccl_ring.h"
#include "nccl_profiler_abi.h"
#include "testutil/testutil.h"

namespace ithbat::collect::nccl_profiler {
namespace {

using testing::TempDir;

struct Api {
  ncclProfiler_v4_t* v4 = nullptr;
  ncclProfiler_v5_t* v5 = nullptr;
  ncclProfiler_v6_t* v6 = nullptr;
};

// Runs `body` in a child with the plugin loaded and the ring kept in `dir`; returns the child's
// exit status (the body returns nonzero on a failed check inside the child) and the ring path.
std::filesystem::path RunInChild(const TempDir& dir, const std::function<int(const Api&)>& body,
                                 uint32_t records = 0, uint32_t pool = 0) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("ITHBAT_NCCL_PROFILER_DIR", dir.path().c_str(), 1);
    setenv("ITHBAT_NCCL_PROFILER_KEEP", "1", 1);
    if (records != 0) setenv("ITHBAT_NCCL_PROFILER_RECORDS", std::to_string(records).c_str(), 1);
    if (pool != 0) setenv("ITHBAT_NCCL_PROFILER_POOL", std::to_string(pool).c_str(), 1);
    void* h = dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) _exit(100);
    Api api;
    api.v4 = static_cast<ncclProfiler_v4_t*>(dlsym(h, "ncclProfiler_v4"));
    api.v5 = static_cast<ncclProfiler_v5_t*>(dlsym(h, "ncclProfiler_v5"));
    api.v6 = static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6"));
    if (api.v4 == nullptr || api.v5 == nullptr || api.v6 == nullptr) _exit(101);
    _exit(body(api));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "child crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a check inside the child failed";
  return dir.path() / ("ithbat-ncclprof-" + std::to_string(pid) + ".ring");
}

std::vector<NcclRecord> ReadRing(const std::filesystem::path& p, RingReader** keep = nullptr,
                                 std::unique_ptr<RingReader>* holder = nullptr) {
  auto r = RingReader::Open(p, false);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  if (!r) return {};
  std::vector<NcclRecord> out;
  EXPECT_TRUE((*r)->Read(&out).has_value());
  if (holder != nullptr) {
    *holder = std::move(*r);
    if (keep != nullptr) *keep = holder->get();
  }
  return out;
}

constexpr uint64_t kComm = 0x1234abcd5678ef00ULL;
// pTimers as a GPU gives them: ns of the host's CLOCK_REALTIME (the plugin checks plausibility).
uint64_t RealtimeNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}
const uint64_t kT0 = RealtimeNow();

// One collective the NCCL way (v5/v6 descriptors): Coll start/stop at enqueue, then per channel
// KernelCh start (pTimer), KernelChStop state (pTimer), stop.
template <class Table, class Descr>
int OneCollective(Table* t, void* ctx, uint64_t seq, uint64_t start, uint64_t stop, int channels,
                  const char* func = "AllReduce", const char* dtype = "ncclFloat32", size_t count = 1024) {
  Descr d{};
  d.type = ncclProfileColl;
  d.rank = 0;
  d.coll.seqNumber = seq;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.datatype = dtype;
  d.coll.root = -1;
  d.coll.nChannels = static_cast<uint8_t>(channels);
  void* coll = nullptr;
  t->startEvent(ctx, &coll, &d);
  if (coll == nullptr) return 10;
  t->stopEvent(coll);
  std::vector<void*> ch(channels);
  for (int c = 0; c < channels; ++c) {
    Descr k{};
    k.type = ncclProfileKernelCh;
    k.parentObj = coll;
    k.kernelCh.channelId = static_cast<uint8_t>(c);
    k.kernelCh.pTimer = start + c * 10;  // channel 0 first
    t->startEvent(ctx, &ch[c], &k);
    if (ch[c] == nullptr) return 11;
  }
  for (int c = 0; c < channels; ++c) {
    ncclProfilerEventStateArgs_v4_t a{};
    a.kernelCh.pTimer = stop - (channels - 1 - c) * 10;  // the last channel last
    t->recordEventState(ch[c], ncclProfilerKernelChStop, &a);
    t->stopEvent(ch[c]);
  }
  return 0;
}

TEST(PluginTest, V6WritesOneRecordPerCollectiveWithFirstStartAndLastStop) {
  TempDir dir;
  const auto ring = RunInChild(dir, [](const Api& api) {
    void* ctx = nullptr;
    int mask = 0;
    if (api.v6->init(&ctx, kComm, &mask, "world", 1, 4, 2, nullptr) != 0 || ctx == nullptr) return 1;
    if (mask != (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh)) return 2;
    for (uint64_t i = 0; i < 10; ++i) {
      if (int r = OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(
              api.v6, ctx, i, kT0 + i * 1'000'000, kT0 + i * 1'000'000 + 250'000, 4);
          r != 0)
        return r;
    }
    return api.v6->finalize(ctx);
  });
  auto recs = ReadRing(ring);
  ASSERT_EQ(recs.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) {
    const NcclRecord& r = recs[i];
    EXPECT_EQ(r.comm_id, kComm);
    EXPECT_EQ(r.seq_number, i);
    EXPECT_EQ(r.op, "all_reduce");
    EXPECT_EQ(r.rank, 0);  // the descriptor's rank
    EXPECT_EQ(r.nranks, 4);
    EXPECT_EQ(r.count, 1024u);
    EXPECT_EQ(r.bytes, 4096u);
    EXPECT_EQ(r.channels, 4u);
    EXPECT_TRUE(r.timed);
    EXPECT_FALSE(r.evicted);
    EXPECT_EQ(r.gpu_stop_mono - r.gpu_start_mono, 250'000);  // first start .. last stop, exactly
  }
}

int64_t MonoNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Two GPUs whose timers run 3 s ahead of and 2 s behind the host clock, as one process's two
// communicators (one rank per GPU) see them. Every KernelCh callback comes after its GPU event,
// and the plugin samples at each operation's first channel stop, so a corrected time is never
// before the host instant of its event and late by at most this operation's stop-callback delay:
// exact bounds, whatever the skew.
TEST(PluginTest, EachGpuTimerIsMovedOntoTheHostClock) {
  TempDir dir;
  const auto ring_of = [&](pid_t pid) {
    return dir.path() / ("ithbat-ncclprof-" + std::to_string(pid) + ".ring");
  };
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("ITHBAT_NCCL_PROFILER_DIR", dir.path().c_str(), 1);
    setenv("ITHBAT_NCCL_PROFILER_KEEP", "1", 1);
    void* h = dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    auto* api = h != nullptr ? static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6")) : nullptr;
    if (api == nullptr) _exit(1);
    const int64_t skews[2] = {3'000'000'000, -2'000'000'000};
    void* ctx[2] = {};
    int mask = 0;
    for (int g = 0; g < 2; ++g) api->init(&ctx[g], kComm + g, &mask, "x", 1, 2, g, nullptr);
    // Realtime - monotonic, fixed for the test: the GPU timer = host instant + this + skew.
    const int64_t rtmm = static_cast<int64_t>(RealtimeNow()) - MonoNow();
    struct Bound {
      int64_t start_lo, start_hi, stop_lo, stop_hi;
    };
    std::vector<Bound> bounds[2];
    for (int i = 0; i < 20; ++i) {
      for (int g = 0; g < 2; ++g) {
        ncclProfilerEventDescr_v6_t d{};
        d.type = ncclProfileColl;
        d.coll.seqNumber = static_cast<uint64_t>(i);
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclFloat32";
        d.coll.count = 1;
        d.coll.nChannels = 1;
        void* coll = nullptr;
        api->startEvent(ctx[g], &coll, &d);
        api->stopEvent(coll);
        Bound b{};
        b.start_lo = MonoNow();
        ncclProfilerEventDescr_v6_t k{};
        k.type = ncclProfileKernelCh;
        k.parentObj = coll;
        k.kernelCh.pTimer = static_cast<uint64_t>(b.start_lo + rtmm + skews[g]);
        void* ch = nullptr;
        api->startEvent(ctx[g], &ch, &k);
        b.start_hi = MonoNow();
        b.stop_lo = MonoNow();
        ncclProfilerEventStateArgs_v6_t a{};
        a.kernelCh.pTimer = static_cast<uint64_t>(b.stop_lo + rtmm + skews[g]);
        api->recordEventState(ch, ncclProfilerKernelChStop, &a);
        api->stopEvent(ch);
        b.stop_hi = MonoNow();
        bounds[g].push_back(b);
      }
    }
    auto reader = RingReader::Open(ring_of(getpid()), false);
    if (!reader) _exit(2);
    std::vector<NcclRecord> recs;
    if (!(*reader)->Read(&recs) || recs.size() != 40) _exit(3);
    size_t next[2] = {0, 0};
    for (const NcclRecord& r : recs) {
      const int g = r.comm_id == kComm ? 0 : 1;
      const Bound& b = bounds[g][next[g]++];
      if (!r.timed) _exit(4);
      if (r.gpu_start_mono < b.start_lo || r.gpu_start_mono > b.start_lo + (b.stop_hi - b.stop_lo)) _exit(5);
      if (r.gpu_stop_mono < b.stop_lo || r.gpu_stop_mono > b.stop_hi) _exit(6);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no plugin, 2/3: ring unreadable, 4: untimed, 5: start "
                                       "outside its bounds, 6: stop outside its bounds";
}

TEST(PluginTest, V4AndV5LayoutsGiveTheSameRecords) {
  TempDir dir;
  const auto ring = RunInChild(dir, [](const Api& api) {
    void* c4 = nullptr;
    void* c5 = nullptr;
    int mask = 0;
    if (api.v4->init(&c4, &mask, "v4", kComm, 1, 2, 1, nullptr) != 0) return 1;
    if (api.v5->init(&c5, kComm + 1, &mask, "v5", 1, 2, 1, nullptr) != 0) return 2;
    // v4: uint8_t type; the Coll fields sit at other offsets than v5's.
    if (int r = OneCollective<ncclProfiler_v4_t, ncclProfilerEventDescr_v4_t>(
            api.v4, c4, 7, kT0, kT0 + 500, 2, "AllGather", "ncclBfloat16", 10);
        r != 0)
      return r;
    if (int r = OneCollective<ncclProfiler_v5_t, ncclProfilerEventDescr_v5_t>(
            api.v5, c5, 7, kT0, kT0 + 500, 2, "AllGather", "ncclBfloat16", 10);
        r != 0)
      return 20 + r;
    return 0;
  });
  auto recs = ReadRing(ring);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].comm_id, kComm);
  EXPECT_EQ(recs[1].comm_id, kComm + 1);
  for (const auto& r : recs) {
    EXPECT_EQ(r.op, "all_gather");
    EXPECT_EQ(r.seq_number, 7u);
    EXPECT_EQ(r.bytes, 10u * 2 * 2);  // count × bf16 × nranks
    EXPECT_EQ(r.gpu_stop_mono - r.gpu_start_mono, 500);
  }
}

TEST(PluginTest, P2pAndUntimedOperations) {
  TempDir dir;
  const auto ring = RunInChild(dir, [](const Api& api) {
    void* ctx = nullptr;
    int mask = 0;
    api.v5->init(&ctx, kComm, &mask, nullptr, 1, 2, 0, nullptr);
    ncclProfilerEventDescr_v5_t d{};
    d.type = ncclProfileP2p;
    d.p2p.func = "Send";
    d.p2p.datatype = "ncclInt64";
    d.p2p.count = 3;
    d.p2p.peer = 1;
    d.p2p.nChannels = 1;
    void* h = nullptr;
    api.v5->startEvent(ctx, &h, &d);
    api.v5->stopEvent(h);
    ncclProfilerEventDescr_v5_t k{};
    k.type = ncclProfileKernelCh;
    k.parentObj = h;
    k.kernelCh.pTimer = kT0;
    void* kh = nullptr;
    api.v5->startEvent(ctx, &kh, &k);
    ncclProfilerEventStateArgs_v5_t a{};
    a.kernelCh.pTimer = kT0 + 99;
    api.v5->recordEventState(kh, ncclProfilerKernelChStop, &a);
    api.v5->stopEvent(kh);
    // A collective with no channels (no kernel events at all): written untimed at its stop.
    d = {};
    d.type = ncclProfileColl;
    d.coll.func = "Broadcast";
    d.coll.datatype = "weirdType";
    d.coll.count = 5;
    d.coll.root = 1;
    d.coll.nChannels = 0;
    api.v5->startEvent(ctx, &h, &d);
    api.v5->stopEvent(h);
    return 0;
  });
  auto recs = ReadRing(ring);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_TRUE(recs[0].p2p);
  EXPECT_EQ(recs[0].op, "send");
  EXPECT_EQ(recs[0].peer_or_root, 1);
  EXPECT_EQ(recs[0].bytes, 24u);
  EXPECT_EQ(recs[0].gpu_stop_mono - recs[0].gpu_start_mono, 99);
  EXPECT_EQ(recs[1].op, "broadcast");
  EXPECT_FALSE(recs[1].timed);
  EXPECT_EQ(recs[1].bytes, 0u);  // unknown datatype: bytes unknown, not guessed
  EXPECT_EQ(recs[1].peer_or_root, 1);
}

TEST(PluginTest, BadAndStaleInputIsDroppedAndCountedNeverCrashes) {
  TempDir dir;
  const auto ring = RunInChild(dir, [](const Api& api) {
    void* ctx = nullptr;
    int mask = 0;
    api.v5->init(&ctx, kComm, &mask, "x", 1, 2, 0, nullptr);
    void* h = nullptr;
    api.v5->startEvent(ctx, &h, nullptr);             // NULL descriptor
    api.v5->startEvent(nullptr, &h, nullptr);         // NULL context
    api.v5->stopEvent(reinterpret_cast<void*>(0x7));  // a handle we never made
    api.v5->stopEvent(reinterpret_cast<void*>(0xdeadbeefULL << 8 | 1));
    api.v5->recordEventState(reinterpret_cast<void*>(0x6), ncclProfilerKernelChStop, nullptr);
    ncclProfilerEventDescr_v5_t k{};
    k.type = ncclProfileKernelCh;
    k.parentObj = reinterpret_cast<void*>(0x1000);  // parent not ours
    api.v5->startEvent(ctx, &h, &k);
    if (h != nullptr) return 1;
    ncclProfilerEventDescr_v5_t g{};
    g.type = ncclProfileGroup;  // not asked for: no handle
    api.v5->startEvent(ctx, &h, &g);
    if (h != nullptr) return 2;
    // A full collective, then its handles used again after it was written: stale.
    ncclProfilerEventDescr_v5_t d{};
    d.type = ncclProfileColl;
    d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32";
    d.coll.nChannels = 1;
    void* coll = nullptr;
    api.v5->startEvent(ctx, &coll, &d);
    api.v5->stopEvent(coll);
    k.parentObj = coll;
    k.kernelCh.pTimer = kT0;
    void* kh = nullptr;
    api.v5->startEvent(ctx, &kh, &k);
    ncclProfilerEventStateArgs_v5_t a{};
    a.kernelCh.pTimer = kT0 + 5;
    api.v5->recordEventState(kh, ncclProfilerKernelChStop, &a);
    api.v5->stopEvent(kh);            // written here
    api.v5->stopEvent(kh);            // stale
    api.v5->stopEvent(coll);          // stale
    api.v5->startEvent(ctx, &h, &k);  // a channel of a written collective: stale, no handle
    if (h != nullptr) return 3;
    // Channel id out of range.
    api.v5->startEvent(ctx, &coll, &d);
    k.parentObj = coll;
    k.kernelCh.channelId = 200;
    api.v5->startEvent(ctx, &h, &k);
    if (h != nullptr) return 4;
    return 0;
  });
  std::unique_ptr<RingReader> holder;
  RingReader* reader = nullptr;
  auto recs = ReadRing(ring, &reader, &holder);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(recs[0].timed);
  ASSERT_NE(reader, nullptr);
  EXPECT_GE(reader->writer().dropped_bad_input, 6u);
  EXPECT_EQ(reader->writer().dropped_stale, 3u);
}

TEST(PluginTest, CollectivesWhoseKernelsNeverFinishAreEvictedWhenThePoolWraps) {
  TempDir dir;
  const auto ring = RunInChild(
      dir,
      [](const Api& api) {
        void* ctx = nullptr;
        int mask = 0;
        api.v5->init(&ctx, kComm, &mask, "x", 1, 2, 0, nullptr);
        ncclProfilerEventDescr_v5_t d{};
        d.type = ncclProfileColl;
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclFloat32";
        d.coll.nChannels = 2;  // channels announced, never started (e.g. graph capture)
        for (uint64_t i = 0; i < 20; ++i) {
          d.coll.seqNumber = i;
          void* h = nullptr;
          api.v5->startEvent(ctx, &h, &d);
          if (h == nullptr) return 1;
          api.v5->stopEvent(h);
        }
        return api.v5->finalize(ctx);  // the 16 still open are written at finalize
      },
      0, 16);
  std::unique_ptr<RingReader> holder;
  RingReader* reader = nullptr;
  auto recs = ReadRing(ring, &reader, &holder);
  ASSERT_EQ(recs.size(), 20u);
  // 0..3 evicted when 16..19 took their slots, the rest at finalize in slot order.
  std::vector<uint64_t> seqs;
  for (const auto& r : recs) {
    seqs.push_back(r.seq_number);
    EXPECT_TRUE(r.evicted);
    EXPECT_FALSE(r.timed);
  }
  EXPECT_EQ(std::vector<uint64_t>(seqs.begin(), seqs.begin() + 4), (std::vector<uint64_t>{0, 1, 2, 3}));
  std::sort(seqs.begin(), seqs.end());
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(seqs[i], i);
  EXPECT_EQ(reader->writer().evicted, 20u);
}

TEST(PluginTest, NobodyReadingNeverBlocksAndOverwritesAreCountedByTheReader) {
  TempDir dir;
  const auto ring = RunInChild(
      dir,
      [](const Api& api) {
        void* ctx = nullptr;
        int mask = 0;
        api.v6->init(&ctx, kComm, &mask, "x", 1, 2, 0, nullptr);
        for (uint64_t i = 0; i < 1000; ++i) {
          if (OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api.v6, ctx, i, kT0 + i,
                                                                            kT0 + i + 1, 1) != 0)
            return 1;
        }
        return 0;
      },
      16);
  std::unique_ptr<RingReader> holder;
  RingReader* reader = nullptr;
  auto recs = ReadRing(ring, &reader, &holder);
  ASSERT_EQ(recs.size(), 16u);
  EXPECT_EQ(recs.front().seq_number, 984u);
  EXPECT_EQ(reader->losses().overrun, 984u);
  EXPECT_EQ(reader->writer().records_written, 1000u);
}

TEST(PluginTest, ManyCommunicatorsAndThreadsWriteEveryRecordOnce) {
  TempDir dir;
  constexpr int kThreads = 4;
  constexpr uint64_t kPer = 500;
  const auto ring = RunInChild(dir, [](const Api& api) {
    std::vector<void*> ctx(kThreads);
    int mask = 0;
    for (int t = 0; t < kThreads; ++t) api.v6->init(&ctx[t], kComm + t, &mask, "x", 1, kThreads, t, nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0; i < kPer; ++i) {
          if (OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api.v6, ctx[t], i, kT0 + i,
                                                                            kT0 + i + 100, 2) != 0)
            bad.fetch_add(1);
        }
      });
    }
    for (auto& th : threads) th.join();
    return bad.load();
  });
  auto recs = ReadRing(ring);
  ASSERT_EQ(recs.size(), kThreads * kPer);
  std::map<uint64_t, std::vector<uint64_t>> per_comm;
  for (const auto& r : recs) per_comm[r.comm_id].push_back(r.seq_number);
  ASSERT_EQ(per_comm.size(), static_cast<size_t>(kThreads));
  for (auto& [comm, seqs] : per_comm) {
    std::sort(seqs.begin(), seqs.end());
    ASSERT_EQ(seqs.size(), kPer);
    for (uint64_t i = 0; i < kPer; ++i) EXPECT_EQ(seqs[i], i);
  }
}

// A job that forks after NCCL init (a data-loader worker that then builds a communicator of its
// own): the child's records go to the child's ring, never into the parent's.
TEST(PluginTest, ForkedChildGetsItsOwnRing) {
  TempDir dir;
  RunInChild(dir, [](const Api& api) {
    void* a = nullptr;
    int mask = 0;
    api.v6->init(&a, kComm, &mask, "parent", 1, 2, 0, nullptr);
    OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api.v6, a, 0, kT0, kT0 + 10, 1);
    const pid_t child = fork();
    if (child == 0) {
      void* b = nullptr;
      api.v6->init(&b, kComm + 99, &mask, "child", 1, 2, 0, nullptr);
      for (uint64_t i = 0; i < 2; ++i)
        OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api.v6, b, i, kT0, kT0 + 10, 1);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api.v6, a, 1, kT0, kT0 + 10, 1);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  });
  std::map<uint64_t, size_t> per_comm;
  size_t rings = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++rings;
    std::set<uint64_t> comms;
    for (const auto& r : ReadRing(e.path())) {
      ++per_comm[r.comm_id];
      comms.insert(r.comm_id);
    }
    EXPECT_EQ(comms.size(), 1u) << "records of two processes in one ring";
  }
  EXPECT_EQ(rings, 2u);
  EXPECT_EQ(per_comm[kComm], 2u);
  EXPECT_EQ(per_comm[kComm + 99], 2u);
}

// NCCL dlcloses the plugin after the last communicator's finalize and dlopens it again for the
// next communicator. Linked with -z nodelete, the library stays: one ring for the whole process,
// records of every communicator in it, nothing leaked.
TEST(PluginTest, UnloadAndReloadBetweenCommunicatorsKeepsOneRing) {
  TempDir dir;
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("ITHBAT_NCCL_PROFILER_DIR", dir.path().c_str(), 1);
    setenv("ITHBAT_NCCL_PROFILER_KEEP", "1", 1);
    for (uint64_t round = 0; round < 3; ++round) {
      void* h = dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_LOCAL);
      auto* api = h != nullptr ? static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6")) : nullptr;
      if (api == nullptr) _exit(1);
      void* ctx = nullptr;
      int mask = 0;
      if (api->init(&ctx, kComm + round, &mask, "x", 1, 2, 0, nullptr) != 0) _exit(2);
      for (uint64_t i = 0; i < 2; ++i) {
        const uint64_t t = RealtimeNow();
        if (OneCollective<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t>(api, ctx, i, t, t + 100, 2) != 0)
          _exit(3);
      }
      api->finalize(ctx);
      if (dlclose(h) != 0) _exit(4);
      // Still mapped after the last handle went: nodelete.
      if (dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_NOLOAD) == nullptr) _exit(5);
      dlclose(h);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "1-3: plugin calls failed, 5: the library was unloaded";
  size_t rings = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++rings;
  }
  EXPECT_EQ(rings, 1u) << "a reload created a second ring";
  std::unique_ptr<RingReader> holder;
  RingReader* reader = nullptr;
  auto recs = ReadRing(dir.path() / ("ithbat-ncclprof-" + std::to_string(pid) + ".ring"), &reader, &holder);
  ASSERT_EQ(recs.size(), 6u);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].comm_id, kComm + i / 2);
    EXPECT_TRUE(recs[i].timed);
  }
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->writer().comms, 3u);
}

// Older NCCL: a P2p announces more channels than ever send KernelCh events, and a channel id
// NCCL gives beyond 63 is refused. Such an operation is written once a later operation of its
// communicator starts on a channel it used (every channel it started having stopped); a
// collective whose channels simply have not all started yet is not.
TEST(PluginTest, OperationsWhoseChannelsNeverAddUpAreClosedByTheNextOne) {
  TempDir dir;
  const auto ring = RunInChild(dir, [](const Api& api) {
    void* ctx = nullptr;
    int mask = 0;
    api.v6->init(&ctx, kComm, &mask, "x", 1, 2, 0, nullptr);
    auto op = [&](uint64_t type, uint64_t seq, int nch) {
      ncclProfilerEventDescr_v6_t d{};
      d.type = type;
      if (type == ncclProfileP2p) {
        d.p2p.func = "Send";
        d.p2p.datatype = "ncclInt8";
        d.p2p.count = 8;
        d.p2p.peer = 1;
        d.p2p.nChannels = static_cast<uint8_t>(nch);
      } else {
        d.coll.seqNumber = seq;
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclInt8";
        d.coll.count = 8;
        d.coll.root = -1;
        d.coll.nChannels = static_cast<uint8_t>(nch);
      }
      void* h = nullptr;
      api.v6->startEvent(ctx, &h, &d);
      api.v6->stopEvent(h);
      return h;
    };
    auto channel = [&](void* parent, int id, bool stop) {
      ncclProfilerEventDescr_v6_t k{};
      k.type = ncclProfileKernelCh;
      k.parentObj = parent;
      k.kernelCh.channelId = static_cast<uint8_t>(id);
      k.kernelCh.pTimer = RealtimeNow();
      void* ch = nullptr;
      api.v6->startEvent(ctx, &ch, &k);
      if (stop && ch != nullptr) {
        ncclProfilerEventStateArgs_v6_t a{};
        a.kernelCh.pTimer = RealtimeNow();
        api.v6->recordEventState(ch, ncclProfilerKernelChStop, &a);
        api.v6->stopEvent(ch);
      }
      return ch;
    };
    // 0: P2p announcing 4 channels, only channel 0 reports.
    void* p0 = op(ncclProfileP2p, 0, 4);
    channel(p0, 0, true);
    // 1: collective, channel 70 refused, channel 1 reports.
    void* c1 = op(ncclProfileColl, 0, 2);
    channel(c1, 70, false);
    channel(c1, 1, true);
    // 2: collective of 2 channels, channel 0 done, channel 1 not started yet.
    void* c2 = op(ncclProfileColl, 1, 2);
    channel(c2, 0, true);
    // 3: P2p on channel 0: closes 0 (channel 0 moved on), not 1 (channel 1 did not), not 2.
    void* p3 = op(ncclProfileP2p, 0, 1);
    channel(p3, 0, true);  // complete by itself (1 of 1)
    // 4: collective on channel 1: closes 1; 2 stays open until its channel 1 reports.
    void* c4 = op(ncclProfileColl, 2, 2);
    channel(c4, 1, true);
    channel(c2, 1, true);  // 2 completes normally
    channel(c4, 0, true);  // 4 completes normally
    return 0;
  });
  auto recs = ReadRing(ring);
  ASSERT_EQ(recs.size(), 5u);
  // Written in order: 0 (closed by 3), 3, 1 (closed by 4), 2, 4.
  EXPECT_TRUE(recs[0].p2p);
  EXPECT_TRUE(recs[0].closed_by_next);
  EXPECT_TRUE(recs[0].timed);
  EXPECT_EQ(recs[0].channels, 1u);
  EXPECT_TRUE(recs[1].p2p);
  EXPECT_FALSE(recs[1].closed_by_next);
  EXPECT_FALSE(recs[2].p2p);
  EXPECT_EQ(recs[2].seq_number, 0u);
  EXPECT_TRUE(recs[2].closed_by_next);
  EXPECT_TRUE(recs[2].timed);
  EXPECT_EQ(recs[3].seq_number, 1u);
  EXPECT_FALSE(recs[3].closed_by_next);
  EXPECT_EQ(recs[3].channels, 2u);
  EXPECT_EQ(recs[4].seq_number, 2u);
  EXPECT_FALSE(recs[4].closed_by_next);
  for (const auto& r : recs) EXPECT_FALSE(r.evicted);
}

// The descriptor and table layouts the plugin and the fake share, against NCCL's published ones
// (profiler_v4.h/v5.h/v6.h, x86-64): a mistake here would be in both sides and pass every other test.
TEST(PluginTest, AbiLayoutsMatchNccl) {
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, type) == 0 &&
                sizeof(ncclProfilerEventDescr_v4_t::type) == 1);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, parentObj) == 8);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, rank) == 16);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.seqNumber) == 24);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.func) == 32);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.count) == 56);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.root) == 64);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.datatype) == 72);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.nChannels) == 80);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.proto) == 96);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, p2p.count) == 48);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, p2p.peer) == 56);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, p2p.nChannels) == 60);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, kernelCh.channelId) == 24);
  static_assert(offsetof(ncclProfilerEventDescr_v4_t, kernelCh.pTimer) == 32);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, type) == 0 &&
                sizeof(ncclProfilerEventDescr_v5_t::type) == 8);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.seqNumber) == 24);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.datatype) == 72);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nChannels) == 80);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.parentGroup) == 104);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, p2p.parentGroup) == 64);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32);
  static_assert(offsetof(ncclProfilerEventDescr_v5_t, collApi.stream) == 56);
  static_assert(offsetof(ncclProfilerEventStateArgs_v4_t, kernelCh.pTimer) == 0);
  static_assert(offsetof(ncclProfiler_v4_t, init) == 8 && offsetof(ncclProfiler_v4_t, finalize) == 40);
  static_assert(offsetof(ncclProfiler_v5_t, startEvent) == 16 &&
                offsetof(ncclProfiler_v5_t, recordEventState) == 32);
  SUCCEED();
}

}  // namespace
}  // namespace ithbat::collect::nccl_profiler
