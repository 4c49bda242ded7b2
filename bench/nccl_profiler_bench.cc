// Cost of libnccl-profiler-ithbat.so per NCCL operation, as NCCL would call it: Coll start+stop at
// enqueue, then per channel KernelCh start, recordEventState(KernelChStop), stop; the last stop
// writes the 128-byte record into the ring. Nobody reads the ring (the job-side cost is the same
// with or without an agent). Reported: ns per collective (items = collectives).
//
//   ninja -C build-d nccl_profiler_bench && build-d/bench/nccl_profiler_bench
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"

namespace {

ncclProfiler_v6_t* Plugin() {
  static ncclProfiler_v6_t* p = [] {
    setenv("ITHBAT_NCCL_PROFILER_DIR", "/dev/shm", 0);  // unlinked at once by the plugin
    void* h = dlopen(ITHBAT_NCCL_PROFILER_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    return h != nullptr ? static_cast<ncclProfiler_v6_t*>(dlsym(h, "ncclProfiler_v6")) : nullptr;
  }();
  return p;
}

uint64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

void BM_Collective(benchmark::State& state) {
  ncclProfiler_v6_t* p = Plugin();
  if (p == nullptr) {
    state.SkipWithError("plugin not loadable");
    return;
  }
  const int channels = static_cast<int>(state.range(0));
  void* ctx = nullptr;
  int mask = 0;
  if (p->init(&ctx, 0x1234 + state.thread_index(), &mask, "bench", 1, 8, state.thread_index(), nullptr) !=
      0) {
    state.SkipWithError("init failed");
    return;
  }
  const uint64_t t0 = RealtimeNs();
  ncclProfilerEventDescr_v6_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.count = 1 << 20;
  coll.coll.nChannels = static_cast<uint8_t>(channels);
  ncclProfilerEventDescr_v6_t k{};
  k.type = ncclProfileKernelCh;
  ncclProfilerEventStateArgs_v6_t args{};
  std::vector<void*> ch(channels);
  uint64_t seq = 0;
  for (auto _ : state) {
    coll.coll.seqNumber = seq++;
    void* h = nullptr;
    p->startEvent(ctx, &h, &coll);
    p->stopEvent(h);
    k.parentObj = h;
    for (int c = 0; c < channels; ++c) {
      k.kernelCh.channelId = static_cast<uint8_t>(c);
      k.kernelCh.pTimer = t0 + seq * 1000;
      p->startEvent(ctx, &ch[c], &k);
    }
    for (int c = 0; c < channels; ++c) {
      args.kernelCh.pTimer = t0 + seq * 1000 + 500;
      p->recordEventState(ch[c], ncclProfilerKernelChStop, &args);
      p->stopEvent(ch[c]);
    }
  }
  p->finalize(ctx);
  state.SetItemsProcessed(state.iterations());
  state.counters["ns_per_collective"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Collective)->Arg(1)->Arg(2)->Arg(8)->Arg(32);

// What the enqueuing (user) thread pays: Coll start + stop. With no channels announced the stop
// also writes the record, so this is the upper bound of the caller-side cost; KernelCh events
// come from NCCL's proxy thread, off the caller's path.
void BM_EnqueueOnly(benchmark::State& state) {
  ncclProfiler_v6_t* p = Plugin();
  if (p == nullptr) {
    state.SkipWithError("plugin not loadable");
    return;
  }
  void* ctx = nullptr;
  int mask = 0;
  p->init(&ctx, 0x9999, &mask, "bench", 1, 8, 0, nullptr);
  ncclProfilerEventDescr_v6_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.nChannels = 0;
  uint64_t seq = 0;
  for (auto _ : state) {
    coll.coll.seqNumber = seq++;
    void* h = nullptr;
    p->startEvent(ctx, &h, &coll);
    p->stopEvent(h);
  }
  p->finalize(ctx);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EnqueueOnly);
BENCHMARK(BM_Collective)->Arg(2)->Threads(4)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
