#pragma once
// The fake libnccl's side of the NCCL profiler-plugin interface (nccl_profiler/nccl_profiler_abi.h),
// included once, by fake_nccl.cc. What it reproduces of NCCL (plugins/profiler/README.md):
//   - loading: NCCL_PROFILER_PLUGIN unset -> "libnccl-profiler.so" when one is on the path;
//     "none" or "" -> none; a value with a '/' -> that path; else "libnccl-profiler-<value>.so",
//     then the value itself. Symbols tried newest first: ncclProfiler_v6, _v5, _v4 (older
//     versions are not supported by the fake: it then runs without a plugin, as NCCL would with
//     one it cannot use). Loaded once per process, at the first communicator init.
//   - init once per communicator after bootstrap, with (commId = a hash of the unique id, the
//     same on every rank; commName; nNodes = 1; nranks; rank; a logger). A failing init leaves
//     that communicator without a plugin; the job goes on.
//   - the activation mask is one int the plugin writes in init; events of a type not in it are
//     not sent. Sent: Coll (seqNumber counted per communicator and per function, as NCCL does)
//     and P2p at enqueue (start, then stop at once: stop means enqueued), KernelCh per channel
//     with parentObj = the Coll/P2p handle: startEvent with the start pTimer when the work item
//     reaches the head of its stream, recordEventState(KernelChStop, stop pTimer) and stopEvent
//     when it completes. pTimers are the simulated stream's times (CLOCK_REALTIME ns), channels
//     staggered by 1 ns inside [start, end] so the first start and last stop are the item's;
//     nChannels = $ITHBAT_FAKE_NCCL_CHANNELS (1..32, default 2). A real GPU's timer is its own
//     clock: $ITHBAT_FAKE_NCCL_GPU_TIMER_OFFSET_NS (signed, within a day; default 0) is added to
//     every pTimer of this process, as a GPU whose timer is off the host clock would report.
//   - the plugin's return values are ignored (NCCL ignores them too, except init's); a NULL
//     handle means "not tracked" and its children are not sent.
#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dlfcn.h>

#define ITHBAT_NCCL_RESULT_DEFINED 1                // nccl_abi.h has ncclResult_t
#include "../../nccl_profiler/nccl_profiler_abi.h"  // the ABI the plugin builds against

namespace ithbat::sim::nccl {

enum : int {
  kProfAllReduce = 0,
  kProfBroadcast,
  kProfReduce,
  kProfAllGather,
  kProfReduceScatter,
  kProfSend,
  kProfRecv,
  kProfFuncs,
};
constexpr int kProfMaxChannels = 32;

struct ProfOp {
  int func_index = -1;
  uint64_t seq_number = 0;
  size_t count = 0;
  int dtype = 0;
  int root_or_peer = -1;
  void* ctx = nullptr;
  void* handle = nullptr;  // the Coll/P2p event
  int channels = 0;
  void* ch[kProfMaxChannels] = {};
  int64_t start_ns = 0;
};

inline ProfOp MakeProfOp(int func, size_t count, int dtype, int root_or_peer) {
  ProfOp p;
  p.func_index = func;
  p.count = count;
  p.dtype = dtype;
  p.root_or_peer = root_or_peer;
  return p;
}

namespace prof_detail {

inline const char* FuncName(int f) {
  static const char* kNames[kProfFuncs] = {"AllReduce",     "Broadcast", "Reduce", "AllGather",
                                           "ReduceScatter", "Send",      "Recv"};
  return f >= 0 && f < kProfFuncs ? kNames[f] : "Unknown";
}

inline const char* TypeName(int t) {
  static const char* kNames[] = {"ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
                                 "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
                                 "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return t >= 0 && t < 12 ? kNames[t] : "ncclUnknown";
}

inline void Logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                   ...) {
  (void)flags;
  (void)file;
  (void)line;
  const char* dbg = std::getenv("NCCL_DEBUG");
  if (dbg == nullptr || level > 3 || (std::strcmp(dbg, "INFO") != 0 && std::strcmp(dbg, "TRACE") != 0))
    return;
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "fake NCCL INFO ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
}

struct Plugin {
  int version = 0;  // 0: none
  ncclProfiler_v4_t* v4 = nullptr;
  ncclProfiler_v5_t* v5 = nullptr;  // v5 and v6 share the table
  int mask = 0;                     // written by the plugin's init
};

inline void* OpenLibrary() {
  const char* env = std::getenv("NCCL_PROFILER_PLUGIN");
  if (env == nullptr) return dlopen("libnccl-profiler.so", RTLD_NOW | RTLD_LOCAL);
  if (*env == '\0' || std::strcmp(env, "none") == 0) return nullptr;
  if (std::strchr(env, '/') != nullptr) return dlopen(env, RTLD_NOW | RTLD_LOCAL);
  const std::string name = std::string("libnccl-profiler-") + env + ".so";
  if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return dlopen(env, RTLD_NOW | RTLD_LOCAL);
}

inline Plugin& Loaded() {
  static Plugin* p = [] {
    auto* pl = new Plugin();  // leaked with the library handle: events may race exit
    void* h = OpenLibrary();
    if (h == nullptr) return pl;
    if (void* s = dlsym(h, "ncclProfiler_v6")) {
      pl->version = 6;
      pl->v5 = static_cast<ncclProfiler_v5_t*>(s);
    } else if (void* s5 = dlsym(h, "ncclProfiler_v5")) {
      pl->version = 5;
      pl->v5 = static_cast<ncclProfiler_v5_t*>(s5);
    } else if (void* s4 = dlsym(h, "ncclProfiler_v4")) {
      pl->version = 4;
      pl->v4 = static_cast<ncclProfiler_v4_t*>(s4);
    }
    if (pl->version != 0) Logger(3, 0, __FILE__, __LINE__, "profiler plugin v%d loaded", pl->version);
    return pl;
  }();
  return *p;
}

inline int Mask() { return __atomic_load_n(&Loaded().mask, __ATOMIC_ACQUIRE); }

inline void* Start(void* ctx, uint64_t type, void* parent, int rank, const ProfOp& op, int channel,
                   uint64_t ptimer) {
  Plugin& pl = Loaded();
  void* handle = nullptr;
  const bool p2p = op.func_index == kProfSend || op.func_index == kProfRecv;
  if (pl.version == 4) {
    ncclProfilerEventDescr_v4_t d{};
    d.type = static_cast<uint8_t>(type);
    d.parentObj = parent;
    d.rank = rank;
    if (type == ncclProfileKernelCh) {
      d.kernelCh.channelId = static_cast<uint8_t>(channel);
      d.kernelCh.pTimer = ptimer;
    } else if (p2p) {
      d.p2p.func = FuncName(op.func_index);
      d.p2p.datatype = TypeName(op.dtype);
      d.p2p.count = op.count;
      d.p2p.peer = op.root_or_peer;
      d.p2p.nChannels = static_cast<uint8_t>(op.channels);
    } else {
      d.coll.seqNumber = op.seq_number;
      d.coll.func = FuncName(op.func_index);
      d.coll.count = op.count;
      d.coll.root = op.root_or_peer;
      d.coll.datatype = TypeName(op.dtype);
      d.coll.nChannels = static_cast<uint8_t>(op.channels);
      d.coll.nWarps = 16;
      d.coll.algo = "RING";
      d.coll.proto = "SIMPLE";
    }
    pl.v4->startEvent(ctx, &handle, &d);
  } else if (pl.version >= 5) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = type;
    d.parentObj = parent;
    d.rank = rank;
    if (type == ncclProfileKernelCh) {
      d.kernelCh.channelId = static_cast<uint8_t>(channel);
      d.kernelCh.pTimer = ptimer;
    } else if (p2p) {
      d.p2p.func = FuncName(op.func_index);
      d.p2p.datatype = TypeName(op.dtype);
      d.p2p.count = op.count;
      d.p2p.peer = op.root_or_peer;
      d.p2p.nChannels = static_cast<uint8_t>(op.channels);
    } else {
      d.coll.seqNumber = op.seq_number;
      d.coll.func = FuncName(op.func_index);
      d.coll.count = op.count;
      d.coll.root = op.root_or_peer;
      d.coll.datatype = TypeName(op.dtype);
      d.coll.nChannels = static_cast<uint8_t>(op.channels);
      d.coll.nWarps = 16;
      d.coll.algo = "RING";
      d.coll.proto = "SIMPLE";
    }
    pl.v5->startEvent(ctx, &handle, &d);
  }
  return handle;
}

inline void Stop(void* handle) {
  Plugin& pl = Loaded();
  if (handle == nullptr) return;
  if (pl.version == 4) pl.v4->stopEvent(handle);
  if (pl.version >= 5) pl.v5->stopEvent(handle);
}

inline void KernelChStopState(void* handle, uint64_t ptimer) {
  Plugin& pl = Loaded();
  if (handle == nullptr) return;
  ncclProfilerEventStateArgs_v4_t a{};
  a.kernelCh.pTimer = ptimer;
  if (pl.version == 4) pl.v4->recordEventState(handle, ncclProfilerKernelChStop, &a);
  if (pl.version >= 5) pl.v5->recordEventState(handle, ncclProfilerKernelChStop, &a);
}

inline int Channels() {
  static const int n = [] {
    const char* v = std::getenv("ITHBAT_FAKE_NCCL_CHANNELS");
    const int x = v != nullptr ? std::atoi(v) : 2;
    return x >= 1 && x <= kProfMaxChannels ? x : 2;
  }();
  return n;
}

// The simulated GPU timer's offset from the host clock.
inline int64_t TimerOffset() {
  static const int64_t off = [] {
    constexpr int64_t kDay = 86'400'000'000'000;
    const char* v = std::getenv("ITHBAT_FAKE_NCCL_GPU_TIMER_OFFSET_NS");
    const long long x = v != nullptr ? std::strtoll(v, nullptr, 10) : 0;
    return x >= -kDay && x <= kDay ? static_cast<int64_t>(x) : 0;
  }();
  return off;
}

}  // namespace prof_detail

// The plugin's context for a new communicator, or nullptr (no plugin, or its init failed).
inline void* ProfilerInitContext(uint64_t comm_hash, const char* name, int nranks, int rank) {
  prof_detail::Plugin& pl = prof_detail::Loaded();
  void* ctx = nullptr;
  int r = 1;
  if (pl.version == 4) {
    r = pl.v4->init(&ctx, &pl.mask, name, comm_hash, 1, nranks, rank, prof_detail::Logger);
  } else if (pl.version >= 5) {
    r = pl.v5->init(&ctx, comm_hash, &pl.mask, name, 1, nranks, rank, prof_detail::Logger);
  }
  if (r != 0) return nullptr;
  // A plugin may legitimately return a NULL context; the fake then sends events with NULL too.
  return ctx != nullptr ? ctx : reinterpret_cast<void*>(uintptr_t{1});
}

inline void* ProfilerContextArg(void* ctx) {
  return ctx == reinterpret_cast<void*>(uintptr_t{1}) ? nullptr : ctx;
}

inline void ProfilerFinalize(void* ctx) {
  if (ctx == nullptr) return;
  prof_detail::Plugin& pl = prof_detail::Loaded();
  if (pl.version == 4) pl.v4->finalize(ProfilerContextArg(ctx));
  if (pl.version >= 5) pl.v5->finalize(ProfilerContextArg(ctx));
}

// At enqueue (the work item exists, its address is stable): Coll/P2p start, then stop.
inline void ProfilerEnqueue(void* ctx, int rank, ProfOp* op) {
  if (ctx == nullptr || op->func_index < 0) return;
  const bool p2p = op->func_index == kProfSend || op->func_index == kProfRecv;
  const int mask = prof_detail::Mask();
  if ((mask & (p2p ? ncclProfileP2p : ncclProfileColl)) == 0) return;
  op->ctx = ctx;
  op->channels = prof_detail::Channels();
  op->handle = prof_detail::Start(ProfilerContextArg(ctx), p2p ? ncclProfileP2p : ncclProfileColl, nullptr,
                                  rank, *op, 0, 0);
  prof_detail::Stop(op->handle);  // enqueued
}

// The item reached the head of its stream: each channel's kernel starts.
inline void ProfilerKernelStart(void* ctx, ProfOp* op, int64_t start_ns) {
  if (ctx == nullptr || op->handle == nullptr || (prof_detail::Mask() & ncclProfileKernelCh) == 0) return;
  op->start_ns = start_ns;
  for (int c = 0; c < op->channels; ++c) {
    op->ch[c] = prof_detail::Start(ProfilerContextArg(ctx), ncclProfileKernelCh, op->handle, 0, *op, c,
                                   static_cast<uint64_t>(start_ns + c + prof_detail::TimerOffset()));
  }
}

// The item completed at end_ns: each channel stops, the last one at end_ns.
inline void ProfilerKernelStop(ProfOp* op, int64_t end_ns) {
  if (op->handle == nullptr) return;
  for (int c = 0; c < op->channels; ++c) {
    if (op->ch[c] == nullptr) continue;
    const int64_t stop = std::max(op->start_ns + c, end_ns - (op->channels - 1 - c));
    prof_detail::KernelChStopState(op->ch[c], static_cast<uint64_t>(stop + prof_detail::TimerOffset()));
    prof_detail::Stop(op->ch[c]);
    op->ch[c] = nullptr;
  }
}

}  // namespace ithbat::sim::nccl
