#pragma once
// The subset of the CUDA driver API (libcuda.so.1, CUDA 13 `cuda.h`) that the fake libcuda
// exports and that Ithbat's probes target (../shared/design/nvidia-abi.md §3, §5), declared by
// hand so nothing here needs the CUDA toolkit. Names, argument lists and types are NVIDIA's;
// handles are opaque pointers; CUresult is an int (0 = CUDA_SUCCESS).
//
// Besides the driver API, the fake exports a few `ithbat_fake_cuda_*` helpers (bottom of this
// file) through which the fake libnccl puts collectives on a stream and tests observe the
// engine. A real libcuda has none of them: a caller must look them up with dlsym and cope with
// their absence.
//
// cuGetProcAddress (what the fake answers; see also sim/README.md):
//   * a (name, cudaVersion, flags) triple gives the exported function of the versioned name the
//     real cuda.h maps to at that version — e.g. ("cuMemAlloc", 3020) -> cuMemAlloc_v2,
//     ("cuCtxSynchronize", 13000) -> cuCtxSynchronize_v2, ("cuStreamSynchronize", ≥7000,
//     PER_THREAD_DEFAULT_STREAM) -> cuStreamSynchronize_ptsz, ("cuMemcpyDtoH", ≥7000, PER_THREAD)
//     -> cuMemcpyDtoH_v2_ptds;
//   * EXCEPT ("cuLaunchKernel", version >= 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM):
//     like a driver that hands out an internal entry point, the fake returns a function that is
//     NOT an exported symbol (kNonExportedProcAddress* at the end of this file). It behaves exactly like
//     cuLaunchKernel_ptsz, but a uprobe attached by name to cuLaunchKernel_ptsz does not see
//     calls through it; only a probe attached at the returned address does;
//   * names the fake does not implement, and versions older than the first version the fake
//     implements (the legacy 32-bit v1 ABIs such as cuMemAlloc at 2000), return
//     CUDA_ERROR_NOT_FOUND with *symbolStatus SYMBOL_NOT_FOUND / VERSION_NOT_SUFFICIENT.
#include <cstddef>
#include <cstdint>

extern "C" {

// NOLINTBEGIN(readability-identifier-naming) — NVIDIA's names.
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

// Special stream handles (cuda.h): the legacy default stream and the per-thread default stream.
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

enum : unsigned { CU_STREAM_DEFAULT = 0x0, CU_STREAM_NON_BLOCKING = 0x1 };
enum : unsigned { CU_EVENT_DEFAULT = 0x0, CU_EVENT_BLOCKING_SYNC = 0x1, CU_EVENT_DISABLE_TIMING = 0x2 };

// cuGetProcAddress flags and symbol status.
enum : cuuint64_t {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1,
};
typedef enum CUdriverProcAddressQueryResult_enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

typedef enum CUdevice_attribute_enum {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
} CUdevice_attribute;

// cuLaunchKernelEx's launch attribute (72 bytes: id, padding, a 64-byte value union). The fake
// reads no attribute; the layout is here so a caller's array is walked with the right stride.
typedef struct CUlaunchAttribute_st {
  int id;  // CUlaunchAttributeID
  char pad[8 - sizeof(int)];
  union {
    char pad[64];
  } value;
} CUlaunchAttribute;
static_assert(sizeof(CUlaunchAttribute) == 72);

typedef struct CUlaunchConfig_st {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;
// The offsets the probes read (nvidia-abi.md §3.2).
static_assert(sizeof(CUlaunchConfig) == 56);
static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 24);
static_assert(offsetof(CUlaunchConfig, hStream) == 32);
static_assert(offsetof(CUlaunchConfig, attrs) == 40);
static_assert(offsetof(CUlaunchConfig, numAttrs) == 48);

// cuCtxCreate_v4's parameters (CUDA 12.5+); the fake accepts NULL and ignores the contents.
typedef struct CUctxCreateParams_st {
  void* execAffinityParams;
  int numExecAffinityParams;
  void* cigParams;
} CUctxCreateParams;

// One X-macro list of every driver export: (return, name, parameter list, argument names).
// The fake defines each; tests and the workload program use the typedefs `name##_fn`.
#define ITHBAT_CUDA_LAUNCH_ARGS                                                                         \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,                   \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, \
   CUstream hStream, void** kernelParams, void** extra)
#define ITHBAT_CUDA_COOP_ARGS                                                                           \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,                   \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, \
   CUstream hStream, void** kernelParams)

#define ITHBAT_CUDA_EXPORTS(X)                                                                              \
  X(cuInit, (unsigned int Flags))                                                                           \
  X(cuDriverGetVersion, (int* driverVersion))                                                               \
  X(cuGetErrorString, (CUresult error, const char** pStr))                                                  \
  X(cuGetErrorName, (CUresult error, const char** pStr))                                                    \
  X(cuDeviceGet, (CUdevice * device, int ordinal))                                                          \
  X(cuDeviceGetCount, (int* count))                                                                         \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev))                                                   \
  X(cuDeviceGetUuid, (CUuuid * uuid, CUdevice dev))                                                         \
  X(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev))                                                      \
  X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                                                    \
  X(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev))                               \
  X(cuDeviceGetPCIBusId, (char* pciBusId, int len, CUdevice dev))                                           \
  X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                                             \
  X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                                              \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                                           \
  X(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev))                                   \
  X(cuCtxCreate_v4,                                                                                         \
    (CUcontext * pctx, CUctxCreateParams * ctxCreateParams, unsigned int flags, CUdevice dev))              \
  X(cuCtxDestroy_v2, (CUcontext ctx))                                                                       \
  X(cuCtxSetCurrent, (CUcontext ctx))                                                                       \
  X(cuCtxGetCurrent, (CUcontext * pctx))                                                                    \
  X(cuCtxPushCurrent_v2, (CUcontext ctx))                                                                   \
  X(cuCtxPopCurrent_v2, (CUcontext * pctx))                                                                 \
  X(cuCtxGetDevice, (CUdevice * device))                                                                    \
  X(cuCtxSynchronize, (void))                                                                               \
  X(cuCtxSynchronize_v2, (CUcontext ctx))                                                                   \
  X(cuModuleLoadData, (CUmodule * module, const void* image))                                               \
  X(cuModuleUnload, (CUmodule hmod))                                                                        \
  X(cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char* name))                             \
  X(cuStreamCreate, (CUstream * phStream, unsigned int Flags))                                              \
  X(cuStreamDestroy_v2, (CUstream hStream))                                                                 \
  X(cuStreamSynchronize, (CUstream hStream))                                                                \
  X(cuStreamSynchronize_ptsz, (CUstream hStream))                                                           \
  X(cuStreamQuery, (CUstream hStream))                                                                      \
  X(cuStreamQuery_ptsz, (CUstream hStream))                                                                 \
  X(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags))                              \
  X(cuStreamWaitEvent_ptsz, (CUstream hStream, CUevent hEvent, unsigned int Flags))                         \
  X(cuEventCreate, (CUevent * phEvent, unsigned int Flags))                                                 \
  X(cuEventRecord, (CUevent hEvent, CUstream hStream))                                                      \
  X(cuEventRecord_ptsz, (CUevent hEvent, CUstream hStream))                                                 \
  X(cuEventQuery, (CUevent hEvent))                                                                         \
  X(cuEventSynchronize, (CUevent hEvent))                                                                   \
  X(cuEventElapsedTime, (float* pMilliseconds, CUevent hStart, CUevent hEnd))                               \
  X(cuEventElapsedTime_v2, (float* pMilliseconds, CUevent hStart, CUevent hEnd))                            \
  X(cuEventDestroy_v2, (CUevent hEvent))                                                                    \
  X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize))                                                   \
  X(cuMemFree_v2, (CUdeviceptr dptr))                                                                       \
  X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                               \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                          \
  X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream))                                                   \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream))                                              \
  X(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount))                        \
  X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount))                   \
  X(cuMemcpyDtoH_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount))                              \
  X(cuMemcpyDtoH_v2_ptds, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount))                         \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))                      \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))                 \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))                  \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream))             \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream)) \
  X(cuMemcpyHtoDAsync_v2_ptsz,                                                                              \
    (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream))                       \
  X(cuMemcpyDtoHAsync_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))       \
  X(cuMemcpyDtoHAsync_v2_ptsz, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))  \
  X(cuMemcpyDtoDAsync_v2,                                                                                   \
    (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                     \
  X(cuMemcpyDtoDAsync_v2_ptsz,                                                                              \
    (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                     \
  X(cuLaunchKernel, ITHBAT_CUDA_LAUNCH_ARGS)                                                                \
  X(cuLaunchKernel_ptsz, ITHBAT_CUDA_LAUNCH_ARGS)                                                           \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra))      \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra)) \
  X(cuLaunchCooperativeKernel, ITHBAT_CUDA_COOP_ARGS)                                                       \
  X(cuLaunchCooperativeKernel_ptsz, ITHBAT_CUDA_COOP_ARGS)                                                  \
  X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream))                                              \
  X(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream))                                         \
  X(cuGetProcAddress, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags))                  \
  X(cuGetProcAddress_v2, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,                \
                          CUdriverProcAddressQueryResult* symbolStatus))

#define ITHBAT_CUDA_DECLARE(name, params) \
  CUresult name params;                   \
  typedef CUresult(*name##_fn) params;
ITHBAT_CUDA_EXPORTS(ITHBAT_CUDA_DECLARE)
#undef ITHBAT_CUDA_DECLARE

// ---------------------------------------------------------------------------------------------
// Fake-only helpers (exported by the fake, absent from a real driver: look them up with dlsym).

// Work that is not a kernel of the caller's — an NCCL collective, a test's gate — put on a
// stream. The fake calls these under its lock (from its engine thread, or from a thread that
// waits in a sync and advances the engine itself); they must not block or call the fake:
//   on_reach(ctx, reach_ns)   once, when the item reaches the head of its stream (all earlier
//                             work there is complete): the GPU "arrives" at it;
//   poll(ctx, &ready_ns)      until it returns 1 with the time from which the item may run
//                             (every dependency met); 0 while waiting;
//   on_complete(ctx, end_ns)  once, when it is done (ready + duration_ns); ctx is not used after.
// While waiting the item occupies its stream (later work there waits) and counts against the
// device's launch queue. From reach to end it shows on the GPU's timeline as busy with the
// given shares (an NCCL kernel spins while it waits for peers, so a stuck collective looks busy).
typedef struct IthbatFakeCudaExternalWork {
  uint32_t size;  // sizeof(IthbatFakeCudaExternalWork)
  uint32_t reserved;
  void* ctx;
  void (*on_reach)(void* ctx, int64_t reach_ns);
  int (*poll)(void* ctx, int64_t* ready_ns);
  void (*on_complete)(void* ctx, int64_t end_ns);
  int64_t duration_ns;
  float sm;
  float tensor;
  float dram;
  float pad;
  // Optional (NULL: duration_ns as given): called once, under the same rules, when the item
  // starts (poll said ready; start_ns = max(reach, ready)); returns the item's duration from
  // start_ns, so work whose time depends on conditions at its start (a network transfer over a
  // link that degraded while the item waited) is timed then. A negative value keeps duration_ns.
  int64_t (*on_start)(void* ctx, int64_t start_ns);
} IthbatFakeCudaExternalWork;
// Callers built before on_start existed pass the shorter size; the fake accepts both.
#define ITHBAT_FAKE_CUDA_EXTERNAL_WORK_V1_SIZE 64
static_assert(offsetof(IthbatFakeCudaExternalWork, on_start) == ITHBAT_FAKE_CUDA_EXTERNAL_WORK_V1_SIZE);
// `stream` as in the driver API (NULL = the current context's legacy default stream,
// CU_STREAM_PER_THREAD = the calling thread's). Blocks while the device's launch queue is full.
CUresult ithbat_fake_cuda_enqueue_external(CUstream stream, const IthbatFakeCudaExternalWork* work);
typedef CUresult (*ithbat_fake_cuda_enqueue_external_fn)(CUstream, const IthbatFakeCudaExternalWork*);

// Kernel and copy costs (defaults from ITHBAT_FAKE_CUDA_KERNEL_NS, ITHBAT_FAKE_CUDA_NS_PER_BLOCK,
// ITHBAT_FAKE_CUDA_COPY_GBPS, ITHBAT_FAKE_CUDA_D2D_GBPS, ITHBAT_FAKE_CUDA_GRAPH_NS). Costs are
// process-wide and apply to launches made after the change. At the GPU's maximum SM clock:
//   kernel        kernel_ns + ns_per_block × gridX·gridY·gridZ
//   graph launch  graph_ns (the whole graph: one launch, many kernels' worth of time)
//   copy          bytes / bandwidth (not clock dependent)
// Kernels and graphs stretch by max SM clock / current SM clock of the device (the fake state's
// derived clock: clock cap, power capping, thermal slowdown; sampled at most every 100 ms per
// device, see ithbat_fake_cuda_refresh_clocks). A workload that wants a kernel of a given
// duration picks its grid from these costs: ithbat::sim::cuda::GridForDuration below.
typedef struct IthbatFakeCudaCosts {
  int64_t kernel_ns;
  int64_t ns_per_block;
  int64_t graph_ns;
  double copy_gbps;  // host <-> device, GB/s (1e9 B/s)
  double d2d_gbps;
} IthbatFakeCudaCosts;
void ithbat_fake_cuda_get_costs(IthbatFakeCudaCosts* costs);
void ithbat_fake_cuda_set_costs(const IthbatFakeCudaCosts* costs);
typedef void (*ithbat_fake_cuda_get_costs_fn)(IthbatFakeCudaCosts*);
typedef void (*ithbat_fake_cuda_set_costs_fn)(const IthbatFakeCudaCosts*);

// A snapshot of the engine (process-wide), for tests.
typedef struct IthbatFakeCudaStats {
  uint64_t items_enqueued;  // work items ever enqueued (kernels, copies, markers, waits, external)
  uint64_t items_completed;
  uint64_t pending_max;             // most items pending on one device at any time
  uint32_t pending[16];             // items pending now, per device ordinal
  uint32_t launches_blocked;        // threads blocked now because their device's queue is full
  uint32_t syncs_waiting;           // threads blocked now in a synchronising call
  uint64_t launches_blocked_total;  // launches that had to wait for queue space
  uint64_t intervals_written;       // busy intervals appended to the fake state's timelines
  uint64_t internal_launch_calls;   // calls through the non-exported cuGetProcAddress entry
  uint64_t clock_refreshes;         // times a device's SM clock was re-read from the fake state
} IthbatFakeCudaStats;
void ithbat_fake_cuda_get_stats(IthbatFakeCudaStats* stats);
typedef void (*ithbat_fake_cuda_get_stats_fn)(IthbatFakeCudaStats*);

// Drops every device's cached SM clock so the next launch re-reads it from the fake state
// (tests that change a clock cap and want the very next kernel to see it; a workload never needs
// it: the cache refreshes itself at most 100 ms after a change).
void ithbat_fake_cuda_refresh_clocks(void);
typedef void (*ithbat_fake_cuda_refresh_clocks_fn)(void);

// The per-device launch queue bound (the real driver's pushbuffer holds about this many launches).
#define ITHBAT_FAKE_CUDA_QUEUE_DEPTH 1024

// NOLINTEND(readability-identifier-naming)
}  // extern "C"

namespace ithbat::sim::cuda {

// What a kernel does with the GPU, from its NAME, as profilers see real kernels: the mix the fake
// writes to the fake state's timeline (NVML utilisation, GPM/prof tensor and DRAM activity follow
// it). Shares are of the kernel's SM share (min(1, blocks / 132)):
//
//   class        name contains (case-insensitive; first row that matches wins)      tensor  dram
//   gemm         gemm, xmma, hmma, wgmma, cutlass, nvjet                             0.85    0.35
//   attention    flash_fwd, flash_bwd, flash_attn, fmha                               0.75    0.30
//   memory       elementwise, vectorized, reduce, softmax, layer_norm, layernorm,     0       0.80
//                rms_norm, rmsnorm, copy, fill, dropout, embedding, adam,
//                multi_tensor, index, cat_, gather, scatter
//   other        (anything else, e.g. "kernel")                                       0.50    0.30
//
// Tensor-core kernels are checked first: a GEMM's name often carries its epilogue
// ("..._gemm_..._relu"), never the reverse. So sm90_xmma_gemm_bf16bf16_*, ampere_*gemm*,
// cutlass_80_tensorop_*, flash_fwd_kernel<...> (mangled or not) and *_hmma_* use tensor pipes;
// at::native::vectorized_elementwise_kernel<...>, reduce_kernel<...>, cunn_SoftMaxForward,
// layer_norm kernels do not.
struct KernelMix {
  const char* kind;  // "gemm", "attention", "memory", "other"
  float tensor;      // share of the kernel's SM share
  float dram;
};
inline bool NameContains(const char* name, const char* needle) {
  for (const char* p = name; *p != '\0'; ++p) {
    const char* a = p;
    const char* b = needle;
    while (*a != '\0' && *b != '\0' && ((*a >= 'A' && *a <= 'Z') ? *a - 'A' + 'a' : *a) == *b) {
      ++a;
      ++b;
    }
    if (*b == '\0') return true;
  }
  return false;
}
inline KernelMix ClassifyKernel(const char* name) {
  static constexpr const char* kGemm[] = {"gemm", "xmma", "hmma", "wgmma", "cutlass", "nvjet"};
  static constexpr const char* kAttention[] = {"flash_fwd", "flash_bwd", "flash_attn", "fmha"};
  static constexpr const char* kMemory[] = {
      "elementwise", "vectorized",   "reduce", "softmax", "layer_norm", "layernorm",
      "rms_norm",    "rmsnorm",      "copy",   "fill",    "dropout",    "embedding",
      "adam",        "multi_tensor", "index",  "cat_",    "gather",     "scatter"};
  if (name == nullptr) return {"other", 0.5f, 0.3f};
  for (const char* k : kGemm)
    if (NameContains(name, k)) return {"gemm", 0.85f, 0.35f};
  for (const char* k : kAttention)
    if (NameContains(name, k)) return {"attention", 0.75f, 0.30f};
  for (const char* k : kMemory)
    if (NameContains(name, k)) return {"memory", 0.0f, 0.80f};
  return {"other", 0.5f, 0.3f};
}

// A grid whose kernel takes `target_ns` at full clock under `costs` (what
// ithbat_fake_cuda_get_costs returns): blocks = round((target − kernel_ns) / ns_per_block), spread
// over x (≤ 2^31−1) then y (≤ 65535). Returns the duration the grid gives (within ns_per_block / 2
// of the target when target > kernel_ns; one block, the shortest kernel, below that), or −1 when the costs
// cannot express it (ns_per_block 0 and target ≠ kernel_ns: the workload must set ns_per_block first, e.g.
// 1000 ns, process-wide). The grid also sets the kernel's SM share (blocks / 132, capped at 1): ≥ 132 blocks
// fill the GPU.
inline int64_t GridForDuration(const IthbatFakeCudaCosts& costs, int64_t target_ns, unsigned grid[3]) {
  grid[0] = grid[1] = grid[2] = 1;
  const int64_t extra = target_ns - costs.kernel_ns;
  if (costs.ns_per_block <= 0) return extra == 0 ? costs.kernel_ns : -1;
  if (extra <= 0) return costs.kernel_ns + costs.ns_per_block;  // one block: the shortest kernel
  uint64_t blocks = static_cast<uint64_t>((extra + costs.ns_per_block / 2) / costs.ns_per_block);
  if (blocks == 0) blocks = 1;
  constexpr uint64_t kMaxX = 0x7fffffffULL;
  if (blocks > kMaxX * 65535ULL) return -1;
  if (blocks <= kMaxX) {
    grid[0] = static_cast<unsigned>(blocks);
  } else {
    grid[1] = static_cast<unsigned>((blocks + kMaxX - 1) / kMaxX);
    grid[0] = static_cast<unsigned>(blocks / grid[1]);
    blocks = static_cast<uint64_t>(grid[0]) * grid[1];
  }
  return costs.kernel_ns + costs.ns_per_block * static_cast<int64_t>(blocks);
}
// The cuGetProcAddress triple answered with a non-exported function (see the top of this file).
inline constexpr const char* kNonExportedProcAddressName = "cuLaunchKernel";
inline constexpr int kNonExportedProcAddressMinVersion = 7000;
inline constexpr cuuint64_t kNonExportedProcAddressFlags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
}  // namespace ithbat::sim::cuda
