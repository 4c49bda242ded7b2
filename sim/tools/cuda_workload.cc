// ithbat-cuda-workload: calls a libcuda (the fake in CI, the real driver on a GPU node) at a
// controlled rate, with controlled gaps and synchronisations, through the three ways a program
// reaches the driver — calls bound by the dynamic linker ("direct": this binary links
// libcuda.so.1), dlsym() of the versioned names, and pointers from cuGetProcAddress_v2 with the
// (name, version, flags) triples libcudart uses — and prints what it called, per function and
// path, as one JSON object on stdout. A probe test runs it and compares the probe's counts with
// these; the program's own measurements (gaps it slept, time blocked in syncs) are the truth
// for gap and blocked-time checks.
//
// Usage: ithbat-cuda-workload [--launches N] [--rate PER_SEC] [--gap-every N --gap-ms M]
//          [--sync-every N] [--path direct|dlsym|procaddr|all] [--threads T] [--per-thread]
//          [--launch-fn cuLaunchKernel|cuLaunchKernelEx|cuLaunchCooperativeKernel|cuGraphLaunch|mix]
//          [--grid BLOCKS] [--device D] [--lib PATH]
//   --launches N      kernel launches per thread (default 1000)
//   --rate R          launches per second per thread (0 = as fast as possible; default 0)
//   --gap-every N --gap-ms M   after every N launches sleep M ms (a host gap a probe should see)
//   --sync-every N    every N launches: async copies (H2D, D2H, D2D, generic), an event record,
//                     a cross-stream wait, a synchronisation (stream, event, context in turn),
//                     a blocking D2H copy and a stream-ordered alloc/free (default 100; 0 = only
//                     at the end)
//   --path P          calling path; `all` rotates direct, dlsym, procaddr call by call
//   --per-thread      use the per-thread-default-stream variants (_ptsz/_ptds names; flags=2
//                     for cuGetProcAddress) on the thread's default stream
//   --launch-fn F     which launch API (`mix` rotates all four); cuGraphLaunch needs the fake
//                     (it launches an opaque handle, which a real driver would reject)
//   --lib PATH        the library dlsym/procaddr use (default libcuda.so.1)
// Exit: 0 done, 1 a CUDA call failed (named on stderr), 2 usage.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda/cuda_abi.h"

namespace {

enum Path { kDirect = 0, kDlsym = 1, kProcAddr = 2, kPaths = 3 };
const char* const kPathNames[kPaths] = {"direct", "dlsym", "procaddr"};

// The functions the workload calls, by the exported name a call means (the per-thread variants
// when --per-thread), with the cuGetProcAddress triple libcudart 13 asks for it
// (../shared/tools/gpu-check/cudart13_lookups.txt).
enum Fn {
  kLaunchKernel,
  kLaunchKernelEx,
  kLaunchCooperative,
  kGraphLaunch,
  kStreamSynchronize,
  kEventSynchronize,
  kCtxSynchronize,
  kStreamWaitEvent,
  kEventRecord,
  kMemcpyAsync,
  kMemcpyHtoDAsync,
  kMemcpyDtoHAsync,
  kMemcpyDtoDAsync,
  kMemcpyDtoH,
  kMemAlloc,
  kMemAllocAsync,
  kMemFree,
  kMemFreeAsync,
  kFnCount
};
struct FnSpec {
  const char* legacy_name;  // exported name, legacy default stream
  const char* pt_name;      // exported name, per-thread default stream
  const char* base;         // cuGetProcAddress name
  int version;              // ... and version (flags 0)
  int pt_version;           // ... and version with flags=2 (PER_THREAD_DEFAULT_STREAM)
};
const FnSpec kFns[kFnCount] = {
    {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernel", 4000, 7000},
    {"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchKernelEx", 11060, 11060},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernel", 9000, 9000},
    {"cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphLaunch", 10000, 10000},
    {"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuStreamSynchronize", 2000, 7000},
    {"cuEventSynchronize", "cuEventSynchronize", "cuEventSynchronize", 2000, 2000},
    {"cuCtxSynchronize", "cuCtxSynchronize", "cuCtxSynchronize", 2000, 2000},
    {"cuStreamWaitEvent", "cuStreamWaitEvent_ptsz", "cuStreamWaitEvent", 3020, 7000},
    {"cuEventRecord", "cuEventRecord_ptsz", "cuEventRecord", 2000, 7000},
    {"cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuMemcpyAsync", 4000, 7000},
    {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync", 3020, 7000},
    {"cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyDtoHAsync", 3020, 7000},
    {"cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz", "cuMemcpyDtoDAsync", 3020, 7000},
    {"cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoH", 3020, 7000},
    {"cuMemAlloc_v2", "cuMemAlloc_v2", "cuMemAlloc", 3020, 3020},
    {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, 11020},
    {"cuMemFree_v2", "cuMemFree_v2", "cuMemFree", 3020, 3020},
    {"cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, 11020},
};

// Resolved pointers per path (index Fn), typed at the call.
struct Api {
  void* fn[kFnCount] = {};
};

struct Options {
  long launches = 1000;
  double rate = 0;
  long gap_every = 0;
  long gap_ms = 0;
  long sync_every = 100;
  int path = kDirect;  // kPaths = all
  int threads = 1;
  bool per_thread = false;
  std::string launch_fn = "cuLaunchKernel";
  unsigned grid = 1;
  int device = 0;
  std::string lib = "libcuda.so.1";
};

struct Counts {
  uint64_t calls[kFnCount][kPaths] = {};
  uint64_t gaps = 0;
  int64_t gap_ns = 0;
  int64_t sync_blocked_ns = 0;
};

std::mutex g_out_mu;
Api g_api[kPaths];
bool g_internal[kPaths][kFnCount] = {};  // procaddr pointer is not an exported symbol

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t mono_ns) {
  timespec ts{static_cast<time_t>(mono_ns / 1'000'000'000), static_cast<long>(mono_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

[[noreturn]] void Die(const char* what, CUresult r) {
  std::lock_guard<std::mutex> lock(g_out_mu);
  std::fprintf(stderr, "ithbat-cuda-workload: %s failed: CUresult %d\n", what, r);
  std::exit(1);
}

#define CHECK(call)                         \
  do {                                      \
    const CUresult r_ = (call);             \
    if (r_ != CUDA_SUCCESS) Die(#call, r_); \
  } while (0)

bool ResolveDirect(bool pt, Api* api) {
  // The addresses the dynamic linker bound for this binary (what a call site's PLT jumps to).
#define D(idx, legacy, ptname) \
  api->fn[idx] = pt ? reinterpret_cast<void*>(&ptname) : reinterpret_cast<void*>(&legacy)
  D(kLaunchKernel, cuLaunchKernel, cuLaunchKernel_ptsz);
  D(kLaunchKernelEx, cuLaunchKernelEx, cuLaunchKernelEx_ptsz);
  D(kLaunchCooperative, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz);
  D(kGraphLaunch, cuGraphLaunch, cuGraphLaunch_ptsz);
  D(kStreamSynchronize, cuStreamSynchronize, cuStreamSynchronize_ptsz);
  D(kEventSynchronize, cuEventSynchronize, cuEventSynchronize);
  D(kCtxSynchronize, cuCtxSynchronize, cuCtxSynchronize);
  D(kStreamWaitEvent, cuStreamWaitEvent, cuStreamWaitEvent_ptsz);
  D(kEventRecord, cuEventRecord, cuEventRecord_ptsz);
  D(kMemcpyAsync, cuMemcpyAsync, cuMemcpyAsync_ptsz);
  D(kMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz);
  D(kMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz);
  D(kMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz);
  D(kMemcpyDtoH, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds);
  D(kMemAlloc, cuMemAlloc_v2, cuMemAlloc_v2);
  D(kMemAllocAsync, cuMemAllocAsync, cuMemAllocAsync_ptsz);
  D(kMemFree, cuMemFree_v2, cuMemFree_v2);
  D(kMemFreeAsync, cuMemFreeAsync, cuMemFreeAsync_ptsz);
#undef D
  return true;
}

bool ResolveDlsym(void* lib, bool pt, Api* api) {
  for (int i = 0; i < kFnCount; ++i) {
    const char* name = pt ? kFns[i].pt_name : kFns[i].legacy_name;
    api->fn[i] = dlsym(lib, name);
    if (api->fn[i] == nullptr) {
      std::fprintf(stderr, "ithbat-cuda-workload: dlsym(%s) failed\n", name);
      return false;
    }
  }
  return true;
}

bool ResolveProcAddr(void* lib, bool pt, Api* api) {
  auto gpa = reinterpret_cast<cuGetProcAddress_v2_fn>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) {
    std::fprintf(stderr, "ithbat-cuda-workload: no cuGetProcAddress_v2\n");
    return false;
  }
  for (int i = 0; i < kFnCount; ++i) {
    CUdriverProcAddressQueryResult status{};
    const int version = pt ? kFns[i].pt_version : kFns[i].version;
    const cuuint64_t flags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    const CUresult r = gpa(kFns[i].base, &api->fn[i], version, flags, &status);
    if (r != CUDA_SUCCESS || api->fn[i] == nullptr) {
      std::fprintf(stderr, "ithbat-cuda-workload: cuGetProcAddress(%s, %d, %llu) = %d\n", kFns[i].base,
                   version, static_cast<unsigned long long>(flags), r);
      return false;
    }
    Dl_info info{};
    g_internal[kProcAddr][i] = dladdr(api->fn[i], &info) == 0 || info.dli_saddr != api->fn[i];
  }
  return true;
}

// Launches one kernel through `path` with the configured launch API (`k` picks for mix).
void Launch(const Options& o, Counts& c, int path, long k, CUfunction f, CUstream s) {
  int which = kLaunchKernel;
  if (o.launch_fn == "cuLaunchKernelEx") which = kLaunchKernelEx;
  if (o.launch_fn == "cuLaunchCooperativeKernel") which = kLaunchCooperative;
  if (o.launch_fn == "cuGraphLaunch") which = kGraphLaunch;
  if (o.launch_fn == "mix") which = static_cast<int>(kLaunchKernel + k % 4);
  void* fn = g_api[path].fn[which];
  switch (which) {
    case kLaunchKernel:
      CHECK(reinterpret_cast<cuLaunchKernel_fn>(fn)(f, o.grid, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr));
      break;
    case kLaunchKernelEx: {
      CUlaunchConfig cfg{};
      cfg.gridDimX = o.grid;
      cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = 128;
      cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.hStream = s;
      CHECK(reinterpret_cast<cuLaunchKernelEx_fn>(fn)(&cfg, f, nullptr, nullptr));
      break;
    }
    case kLaunchCooperative:
      CHECK(reinterpret_cast<cuLaunchCooperativeKernel_fn>(fn)(f, o.grid, 1, 1, 128, 1, 1, 0, s, nullptr));
      break;
    case kGraphLaunch:
      CHECK(reinterpret_cast<cuGraphLaunch_fn>(fn)(reinterpret_cast<CUgraphExec>(f), s));
      break;
    default:
      break;
  }
  ++c.calls[which][path];
}

#define CALL(c, path, idx, type, ...) \
  (++(c).calls[idx][path], reinterpret_cast<type>(g_api[path].fn[idx])(__VA_ARGS__))

// The synchronisation point: copies, an event edge between the two streams, one sync (kind
// rotates), a blocking copy and a stream-ordered allocation.
void SyncPoint(Counts& c, int path, long n, CUstream s, CUstream other, CUevent ev, CUdeviceptr dbuf,
               std::vector<char>& host) {
  const size_t kBytes = 4096;
  CHECK(CALL(c, path, kMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_fn, dbuf, host.data(), kBytes, s));
  CHECK(CALL(c, path, kMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_fn, dbuf + kBytes, dbuf, kBytes, s));
  CHECK(CALL(c, path, kMemcpyAsync, cuMemcpyAsync_fn, dbuf + 2 * kBytes, dbuf, kBytes, s));
  CHECK(CALL(c, path, kMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_fn, host.data(), dbuf, kBytes, s));
  CHECK(CALL(c, path, kEventRecord, cuEventRecord_fn, ev, s));
  CHECK(CALL(c, path, kStreamWaitEvent, cuStreamWaitEvent_fn, other, ev, 0));
  const int64_t t0 = MonoNs();
  switch (n % 3) {
    case 0:
      CHECK(CALL(c, path, kStreamSynchronize, cuStreamSynchronize_fn, s));
      break;
    case 1:
      CHECK(CALL(c, path, kEventSynchronize, cuEventSynchronize_fn, ev));
      break;
    default:
      CHECK(CALL(c, path, kCtxSynchronize, cuCtxSynchronize_fn));
      break;
  }
  CHECK(CALL(c, path, kMemcpyDtoH, cuMemcpyDtoH_v2_fn, host.data(), dbuf, kBytes));
  c.sync_blocked_ns += MonoNs() - t0;
  CUdeviceptr tmp = 0;
  CHECK(CALL(c, path, kMemAllocAsync, cuMemAllocAsync_fn, &tmp, 1 << 20, s));
  CHECK(CALL(c, path, kMemFreeAsync, cuMemFreeAsync_fn, tmp, s));
}

// A PTX module with one empty kernel, so the same program runs on a real driver.
const char kPtx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry ithbat_empty()\n{\n\tret;\n}\n";

void Worker(const Options& o, int tid, Counts* out) {
  Counts& c = *out;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CHECK(cuDeviceGet(&dev, o.device));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod = nullptr;
  CUfunction f = nullptr;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&f, mod, "ithbat_empty"));
  CUstream own = nullptr, other = nullptr;
  CHECK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  // --per-thread: the thread's per-thread default stream (handle 0 with the _ptsz functions).
  CUstream s = o.per_thread ? nullptr : own;
  CUevent ev = nullptr;
  CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  std::vector<char> host(4096);
  CUdeviceptr dbuf = 0;
  const int alloc_path = o.path == kPaths ? tid % kPaths : o.path;
  CHECK(CALL(c, alloc_path, kMemAlloc, cuMemAlloc_v2_fn, &dbuf, 3 * 4096));
  const int64_t period = o.rate > 0 ? static_cast<int64_t>(1e9 / o.rate) : 0;
  int64_t next = MonoNs();
  long syncs = 0;
  for (long i = 0; i < o.launches; ++i) {
    if (period > 0) {
      SleepUntil(next);
      next += period;
    }
    const int path = o.path == kPaths ? static_cast<int>(i % kPaths) : o.path;
    Launch(o, c, path, i, f, s);
    if (o.sync_every > 0 && (i + 1) % o.sync_every == 0) {
      // With --path all, path and sync kind rotate independently (every pairing within 9 syncs).
      SyncPoint(c, o.path == kPaths ? static_cast<int>(syncs % kPaths) : o.path,
                o.path == kPaths ? syncs / kPaths : syncs, s, other, ev, dbuf, host);
      ++syncs;
    }
    if (o.gap_every > 0 && (i + 1) % o.gap_every == 0 && i + 1 < o.launches) {
      const int64_t t0 = MonoNs();
      SleepUntil(t0 + o.gap_ms * 1'000'000);
      const int64_t slept = MonoNs() - t0;
      ++c.gaps;
      c.gap_ns += slept;
      next += slept;
    }
  }
  // Drain, then free (a final sync so every launch has completed when the JSON is printed).
  SyncPoint(c, o.path == kPaths ? static_cast<int>(syncs % kPaths) : o.path, 0, s, other, ev, dbuf, host);
  CHECK(CALL(c, alloc_path, kMemFree, cuMemFree_v2_fn, dbuf));
  CHECK(cuStreamSynchronize(other));
  CHECK(cuEventDestroy_v2(ev));
  CHECK(cuStreamDestroy_v2(own));
  CHECK(cuStreamDestroy_v2(other));
  CHECK(cuModuleUnload(mod));
  CHECK(cuDevicePrimaryCtxRelease_v2(dev));
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "ithbat-cuda-workload: %s\n(see the comment at the top of sim/tools/cuda_workload.cc)\n", why);
  std::exit(2);
}

long ParseLong(const char* v, long lo, long hi, const char* opt) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) Usage(opt);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--launches")
      o.launches = ParseLong(value(), 0, 1'000'000'000, "--launches");
    else if (a == "--rate")
      o.rate = static_cast<double>(ParseLong(value(), 0, 100'000'000, "--rate"));
    else if (a == "--gap-every")
      o.gap_every = ParseLong(value(), 0, 1'000'000'000, "--gap-every");
    else if (a == "--gap-ms")
      o.gap_ms = ParseLong(value(), 0, 3'600'000, "--gap-ms");
    else if (a == "--sync-every")
      o.sync_every = ParseLong(value(), 0, 1'000'000'000, "--sync-every");
    else if (a == "--threads")
      o.threads = static_cast<int>(ParseLong(value(), 1, 256, "--threads"));
    else if (a == "--grid")
      o.grid = static_cast<unsigned>(ParseLong(value(), 1, 1 << 30, "--grid"));
    else if (a == "--device")
      o.device = static_cast<int>(ParseLong(value(), 0, 63, "--device"));
    else if (a == "--per-thread")
      o.per_thread = true;
    else if (a == "--lib")
      o.lib = value();
    else if (a == "--launch-fn") {
      o.launch_fn = value();
      if (o.launch_fn != "cuLaunchKernel" && o.launch_fn != "cuLaunchKernelEx" &&
          o.launch_fn != "cuLaunchCooperativeKernel" && o.launch_fn != "cuGraphLaunch" &&
          o.launch_fn != "mix") {
        Usage("--launch-fn: unknown function");
      }
    } else if (a == "--path") {
      const std::string p = value();
      if (p == "direct")
        o.path = kDirect;
      else if (p == "dlsym")
        o.path = kDlsym;
      else if (p == "procaddr")
        o.path = kProcAddr;
      else if (p == "all")
        o.path = kPaths;
      else
        Usage("--path: direct|dlsym|procaddr|all");
    } else {
      Usage(("unknown option " + a).c_str());
    }
  }
  if ((o.gap_every > 0) != (o.gap_ms > 0) && o.gap_ms > 0) Usage("--gap-ms needs --gap-every");

  CHECK(cuInit(0));
  ResolveDirect(o.per_thread, &g_api[kDirect]);
  if (o.path == kDlsym || o.path == kProcAddr || o.path == kPaths) {
    void* lib = dlopen(o.lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "ithbat-cuda-workload: dlopen(%s): %s\n", o.lib.c_str(), dlerror());
      return 1;
    }
    if (!ResolveDlsym(lib, o.per_thread, &g_api[kDlsym]) ||
        !ResolveProcAddr(lib, o.per_thread, &g_api[kProcAddr])) {
      return 1;
    }
  }

  std::vector<Counts> counts(static_cast<size_t>(o.threads));
  const int64_t t0 = MonoNs();
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back(Worker, std::cref(o), t, &counts[static_cast<size_t>(t)]);
  for (auto& t : threads) t.join();
  const int64_t elapsed = MonoNs() - t0;

  Counts total;
  for (const Counts& c : counts) {
    for (int f = 0; f < kFnCount; ++f) {
      for (int p = 0; p < kPaths; ++p) total.calls[f][p] += c.calls[f][p];
    }
    total.gaps += c.gaps;
    total.gap_ns += c.gap_ns;
    total.sync_blocked_ns += c.sync_blocked_ns;
  }
  // {"pid", "threads", "elapsed_ns", "gaps", "gap_ns", "sync_blocked_ns",
  //  "calls": {exported name: {"direct": n, "dlsym": n, "procaddr": n, "total": n}},
  //  "procaddr_not_exported": [exported names whose cuGetProcAddress pointer is no symbol]}
  std::printf(
      "{\"pid\":%d,\"threads\":%d,\"per_thread\":%s,\"elapsed_ns\":%lld,\"gaps\":%llu,\"gap_ns\":%lld,"
      "\"sync_blocked_ns\":%lld,\"calls\":{",
      static_cast<int>(getpid()), o.threads, o.per_thread ? "true" : "false", static_cast<long long>(elapsed),
      static_cast<unsigned long long>(total.gaps), static_cast<long long>(total.gap_ns),
      static_cast<long long>(total.sync_blocked_ns));
  bool first = true;
  for (int f = 0; f < kFnCount; ++f) {
    uint64_t sum = 0;
    for (int p = 0; p < kPaths; ++p) sum += total.calls[f][p];
    if (sum == 0) continue;
    std::printf("%s\"%s\":{", first ? "" : ",", o.per_thread ? kFns[f].pt_name : kFns[f].legacy_name);
    first = false;
    for (int p = 0; p < kPaths; ++p) {
      std::printf("\"%s\":%llu,", kPathNames[p], static_cast<unsigned long long>(total.calls[f][p]));
    }
    std::printf("\"total\":%llu}", static_cast<unsigned long long>(sum));
  }
  std::printf("},\"procaddr_not_exported\":[");
  first = true;
  for (int f = 0; f < kFnCount; ++f) {
    if (!g_internal[kProcAddr][f]) continue;
    std::printf("%s\"%s\"", first ? "" : ",", o.per_thread ? kFns[f].pt_name : kFns[f].legacy_name);
    first = false;
  }
  std::printf("]}\n");
  return 0;
}
