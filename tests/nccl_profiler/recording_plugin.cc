// A test profiler plugin that exports only ncclProfiler_v4 (so a loader must fall back from v6/v5)
// and appends one line per call to $ITHBAT_TEST_PROFILER_LOG.<pid>:
//   init <commHash hex> <nNodes> <nranks> <rank> <name|->
//   start <type> <handle> <parent> <fields...>     (Coll: seq func count datatype nChannels root;
//                                                  P2p: func count datatype peer nChannels;
//                                                  KernelCh: channel pTimer)
//   state <handle> <state> <pTimer>
//   stop <handle>
//   finalize
// Handles are small integers (1, 2, ...) so the test can check parentObj against them. The
// requested mask comes from $ITHBAT_TEST_PROFILER_MASK (default Coll|P2p|KernelCh).
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <unistd.h>

#include "nccl_profiler_abi.h"

namespace {

std::mutex g_mu;
FILE* g_log = nullptr;
std::atomic<uintptr_t> g_next{1};

void Line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Line(const char* fmt, ...) {
  std::lock_guard lock(g_mu);
  if (g_log == nullptr) {
    const char* base = std::getenv("ITHBAT_TEST_PROFILER_LOG");
    if (base == nullptr) return;
    const std::string path = std::string(base) + "." + std::to_string(getpid());
    g_log = std::fopen(path.c_str(), "a");
    if (g_log == nullptr) return;
  }
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(g_log, fmt, ap);
  va_end(ap);
  std::fputc('\n', g_log);
  std::fflush(g_log);
}

ncclResult_t Init(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank,
                  ncclDebugLogger_t) {
  const char* m = std::getenv("ITHBAT_TEST_PROFILER_MASK");
  *mask = m != nullptr ? std::atoi(m) : (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh);
  *ctx = reinterpret_cast<void*>(g_next.fetch_add(1));
  Line("init %" PRIx64 " %d %d %d %s", hash, nnodes, nranks, rank, name != nullptr ? name : "-");
  return 0;
}

ncclResult_t Start(void*, void** handle, ncclProfilerEventDescr_v4_t* d) {
  const uintptr_t h = g_next.fetch_add(1);
  *handle = reinterpret_cast<void*>(h);
  const auto parent = reinterpret_cast<uintptr_t>(d->parentObj);
  switch (d->type) {
    case ncclProfileColl:
      Line("start coll %" PRIuPTR " %" PRIuPTR " %" PRIu64 " %s %zu %s %u %d", h, parent, d->coll.seqNumber,
           d->coll.func, d->coll.count, d->coll.datatype, d->coll.nChannels, d->coll.root);
      break;
    case ncclProfileP2p:
      Line("start p2p %" PRIuPTR " %" PRIuPTR " %s %zu %s %d %u", h, parent, d->p2p.func, d->p2p.count,
           d->p2p.datatype, d->p2p.peer, d->p2p.nChannels);
      break;
    case ncclProfileKernelCh:
      Line("start kernelch %" PRIuPTR " %" PRIuPTR " %u %" PRIu64, h, parent, d->kernelCh.channelId,
           d->kernelCh.pTimer);
      break;
    default:
      Line("start other %" PRIuPTR " %" PRIuPTR " %u", h, parent, d->type);
      break;
  }
  return 0;
}

ncclResult_t Stop(void* handle) {
  Line("stop %" PRIuPTR, reinterpret_cast<uintptr_t>(handle));
  return 0;
}

ncclResult_t State(void* handle, ncclProfilerEventState_t s, ncclProfilerEventStateArgs_v4_t* a) {
  Line("state %" PRIuPTR " %d %" PRIu64, reinterpret_cast<uintptr_t>(handle), s,
       a != nullptr ? a->kernelCh.pTimer : 0);
  return 0;
}

ncclResult_t Finalize(void*) {
  Line("finalize");
  return 0;
}

}  // namespace

extern "C" {
__attribute__((visibility("default")))
ncclProfiler_v4_t ncclProfiler_v4 = {"recording", Init, Start, Stop, State, Finalize};
}
