// Loads the built fake libcuda.so.1 with dlopen (as a probe target is loaded by a job) and checks
// the ABI behaviour the probes rely on: the §5 exports, cuGetProcAddress (exported addresses,
// and the one documented non-exported entry), blocking semantics of syncs and of the launch
// queue, and busy time reaching the fake state (so the fake NVML sees utilisation). And the
// virtual GPU's realism: kernel time stretching with the SM clock the fake state derives (cap,
// thermal, power), tensor/DRAM shares from kernel names, grids chosen for a target duration. Also reads
// the ELF dynamic symbol tables of the fakes and, where they exist on the machine, of a real
// CUDA stub libcuda.so and libnccl.so.2, and reports which probe targets each has.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda/cuda_abi.h"
#include "fake_state/fake_state_api.h"
#include "testutil/testutil.h"

namespace ithbat::sim {
namespace {

// nvidia-abi.md §5: the libcuda symbols of the 32 core attachments (entry and return probes
// share a symbol, so 22 names).
const char* const kCudaTargets[] = {
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
    "cuEventSynchronize",
    "cuCtxSynchronize",
    "cuCtxSynchronize_v2",
    "cuStreamWaitEvent",
    "cuEventRecord",
    "cuMemcpyAsync",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemFree_v2",
};
// §5's libnccl targets (14 attachments on 10 names).
const char* const kNcclTargets[] = {"ncclAllReduce",
                                    "ncclAllGather",
                                    "ncclReduceScatter",
                                    "ncclBroadcast",
                                    "ncclReduce",
                                    "ncclSend",
                                    "ncclRecv",
                                    "ncclGroupStart",
                                    "ncclGroupEnd",
                                    "ncclCommInitRank",
                                    "ncclCommInitRankConfig"};

void* Lib() {
  static void* handle = dlopen(ITHBAT_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  return handle;
}

template <class F>
F Sym(const char* name) {
  return reinterpret_cast<F>(dlsym(Lib(), name));
}
#define CU(fn) Sym<fn##_fn>(#fn)

// One fake state and one cuInit for the whole test process (the driver initialises once per
// process). Two H100s: device 1 is kept for the utilisation test.
class Driver {
 public:
  static Driver& Get() {
    static Driver* d = new Driver();
    return *d;
  }
  FakeState& state() { return *state_; }
  bool ok() const { return ok_; }

 private:
  Driver() {
    auto state =
        FakeState::Create((dir_.path() / "state").string(), {GpuModel::kH100Sxm, GpuModel::kH100Sxm}, "cuda");
    if (!state) return;
    state_ = std::move(*state);
    state_->layout().header.cuda_driver_version = 13000;  // a CUDA 13 driver (nothing reads it yet)
    setenv("ITHBAT_FAKE_STATE", (dir_.path() / "state").c_str(), 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ok_ = Lib() != nullptr && CU(cuInit)(0) == CUDA_SUCCESS;
    unsetenv("ITHBAT_FAKE_STATE");  // read once at cuInit; other tests set their own
  }
  testing::TempDir dir_;
  std::unique_ptr<FakeState> state_;
  bool ok_ = false;
};

// A gate: external work on a stream that holds everything behind it until opened.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<int64_t> open_ns{0};
  std::atomic<bool> completed{false};
  void Open() {
    open_ns.store(RealtimeNs());
    open.store(true);
  }
  static int Poll(void* ctx, int64_t* ready) {
    auto* g = static_cast<Gate*>(ctx);
    if (!g->open.load()) return 0;
    *ready = std::max(*ready, g->open_ns.load());
    return 1;
  }
  static void Done(void* ctx, int64_t) { static_cast<Gate*>(ctx)->completed.store(true); }
  CUresult Enqueue(CUstream s) {
    IthbatFakeCudaExternalWork w{};
    w.size = sizeof(w);
    w.ctx = this;
    w.poll = Poll;
    w.on_complete = Done;
    return CU(ithbat_fake_cuda_enqueue_external)(s, &w);
  }
};

IthbatFakeCudaStats Stats() {
  IthbatFakeCudaStats s{};
  CU(ithbat_fake_cuda_get_stats)(&s);
  return s;
}

// Polls `pred` for up to 20 s (a state the code under test must reach; the bound only keeps a
// broken build from hanging the suite).
template <class Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 20000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Lib(), nullptr) << dlerror();
    ASSERT_TRUE(Driver::Get().ok());
    CU(ithbat_fake_cuda_get_costs)(&saved_costs_);
    ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuModuleLoadData)(&module_, "image"), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuModuleGetFunction)(&fn_, module_, "kernel"), CUDA_SUCCESS);
    ASSERT_EQ(CU(cuStreamCreate)(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    CU(cuCtxSynchronize)();
    CU(cuStreamDestroy_v2)(stream_);
    CU(ithbat_fake_cuda_set_costs)(&saved_costs_);
  }
  void SetKernelNs(int64_t ns) {
    IthbatFakeCudaCosts c = saved_costs_;
    c.kernel_ns = ns;
    c.ns_per_block = 0;
    CU(ithbat_fake_cuda_set_costs)(&c);
  }
  CUresult Launch(CUstream s, unsigned blocks = 1) {
    return CU(cuLaunchKernel)(fn_, blocks, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr);
  }

  IthbatFakeCudaCosts saved_costs_{};
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST(FakeCudaExports, EveryProbeTargetAndSupportingCall) {
  ASSERT_NE(Lib(), nullptr) << dlerror();
  for (const char* name : kCudaTargets) EXPECT_NE(dlsym(Lib(), name), nullptr) << name;
#define CHECK_EXPORT(name, params) EXPECT_NE(dlsym(Lib(), #name), nullptr) << #name;
  ITHBAT_CUDA_EXPORTS(CHECK_EXPORT)
#undef CHECK_EXPORT
  // Modern code never reaches the legacy 32-bit ABI names; the fake does not have them, so a
  // probe set that names them fails here rather than silently counting nothing on a node.
  EXPECT_EQ(dlsym(Lib(), "cuMemAlloc"), nullptr);
  EXPECT_EQ(dlsym(Lib(), "cuMemcpyDtoH"), nullptr);
  // The state code linked into the fake stays private.
  EXPECT_EQ(dlsym(Lib(), "_ZN6ithbat3sim14AppendIntervalERNS0_7GpuSlotERKNS0_12BusyIntervalE"), nullptr);
}

// (name, version, flags) triples libcudart 13 asks for (../shared/tools/gpu-check), with the
// export each must return.
struct Triple {
  const char* name;
  int version;
  cuuint64_t flags;
  const char* expect;
};
const Triple kTriples[] = {
    {"cuLaunchKernel", 4000, 0, "cuLaunchKernel"},
    {"cuLaunchKernelEx", 11060, 0, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 11060, 2, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 9000, 0, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 9000, 2, "cuLaunchCooperativeKernel_ptsz"},
    {"cuGraphLaunch", 10000, 1, "cuGraphLaunch"},
    {"cuGraphLaunch", 10000, 2, "cuGraphLaunch_ptsz"},
    {"cuStreamSynchronize", 2000, 0, "cuStreamSynchronize"},
    {"cuStreamSynchronize", 7000, 2, "cuStreamSynchronize_ptsz"},
    {"cuEventSynchronize", 2000, 0, "cuEventSynchronize"},
    {"cuEventSynchronize", 2000, 2, "cuEventSynchronize"},  // no per-thread variant: the plain one
    {"cuCtxSynchronize", 2000, 0, "cuCtxSynchronize"},
    {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
    {"cuStreamWaitEvent", 3020, 0, "cuStreamWaitEvent"},
    {"cuStreamWaitEvent", 7000, 2, "cuStreamWaitEvent_ptsz"},
    {"cuEventRecord", 2000, 0, "cuEventRecord"},
    {"cuEventRecord", 7000, 2, "cuEventRecord_ptsz"},
    {"cuMemcpyAsync", 4000, 0, "cuMemcpyAsync"},
    {"cuMemcpyHtoDAsync", 3020, 0, "cuMemcpyHtoDAsync_v2"},
    {"cuMemcpyHtoDAsync", 7000, 2, "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoHAsync", 3020, 0, "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyDtoDAsync", 3020, 0, "cuMemcpyDtoDAsync_v2"},
    {"cuMemcpyDtoH", 3020, 0, "cuMemcpyDtoH_v2"},
    {"cuMemcpyDtoH", 7000, 2, "cuMemcpyDtoH_v2_ptds"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemFree", 3020, 0, "cuMemFree_v2"},
    {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
};

TEST(FakeCudaProcAddress, ReturnsTheExportedVersionedFunction) {
  ASSERT_TRUE(Driver::Get().ok());
  auto gpa = CU(cuGetProcAddress_v2);
  for (const Triple& t : kTriples) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    ASSERT_EQ(gpa(t.name, &pfn, t.version, t.flags, &st), CUDA_SUCCESS) << t.name << " " << t.version;
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(pfn, dlsym(Lib(), t.expect))
        << t.name << " v" << t.version << " f" << t.flags << " -> " << t.expect;
    Dl_info info{};
    ASSERT_NE(dladdr(pfn, &info), 0);
    EXPECT_EQ(info.dli_saddr, pfn);
    EXPECT_STREQ(info.dli_sname, t.expect);
  }
}

TEST(FakeCudaProcAddress, DocumentedTripleIsNotAnExportedSymbol) {
  ASSERT_TRUE(Driver::Get().ok());
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult st{};
  ASSERT_EQ(CU(cuGetProcAddress_v2)(cuda::kNonExportedProcAddressName, &pfn, 12000,
                                    cuda::kNonExportedProcAddressFlags, &st),
            CUDA_SUCCESS);
  ASSERT_NE(pfn, nullptr);
  EXPECT_NE(pfn, dlsym(Lib(), "cuLaunchKernel_ptsz"));
  EXPECT_NE(pfn, dlsym(Lib(), "cuLaunchKernel"));
  // dladdr finds only exported (dynamic) symbols: the pointer is inside the library but starts
  // none of them, which is what a resolver that maps addresses back to names must cope with.
  Dl_info info{};
  ASSERT_NE(dladdr(pfn, &info), 0);
  EXPECT_EQ(info.dli_fbase, [] {
    Dl_info own{};
    dladdr(dlsym(Lib(), "cuInit"), &own);
    return own.dli_fbase;
  }());
  EXPECT_NE(info.dli_saddr, pfn);
  // Below the documented version, the plain export.
  void* old = nullptr;
  ASSERT_EQ(
      CU(cuGetProcAddress)(cuda::kNonExportedProcAddressName, &old, 4000, cuda::kNonExportedProcAddressFlags),
      CUDA_SUCCESS);
  EXPECT_EQ(old, dlsym(Lib(), "cuLaunchKernel"));
}

TEST(FakeCudaProcAddress, UnknownNamesAndOldVersions) {
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult st{};
  EXPECT_EQ(CU(cuGetProcAddress_v2)("cuNoSuchFunction", &pfn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
  // cuMemAlloc at 2000 is the legacy 32-bit ABI, which the fake does not implement.
  EXPECT_EQ(CU(cuGetProcAddress_v2)("cuMemAlloc", &pfn, 2000, 0, &st), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(CU(cuGetProcAddress_v2)("cuLaunchKernel", &pfn, 4000, 3, &st), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaTest, InternalEntryLaunchesLikeThePtszExport) {
  void* pfn = nullptr;
  ASSERT_EQ(CU(cuGetProcAddress)("cuLaunchKernel", &pfn, 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            CUDA_SUCCESS);
  const uint64_t before = Stats().internal_launch_calls;
  const uint64_t enqueued = Stats().items_enqueued;
  ASSERT_EQ(reinterpret_cast<cuLaunchKernel_fn>(pfn)(fn_, 4, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(Stats().internal_launch_calls, before + 1);
  EXPECT_EQ(Stats().items_enqueued, enqueued + 1);
  // NULL is the per-thread default stream for it, as for cuLaunchKernel_ptsz.
  EXPECT_EQ(CU(cuStreamSynchronize_ptsz)(nullptr), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, SyncBlocksUntilTheSimulatedWorkIsDone) {
  constexpr int64_t kKernelNs = 50'000'000;
  SetKernelNs(kKernelNs);
  CUevent before = nullptr, after = nullptr;
  ASSERT_EQ(CU(cuEventCreate)(&before, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventCreate)(&after, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  Gate gate;
  ASSERT_EQ(gate.Enqueue(stream_), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventRecord)(before, stream_), CUDA_SUCCESS);
  ASSERT_EQ(Launch(stream_), CUDA_SUCCESS);  // returns at once: launches are asynchronous
  ASSERT_EQ(CU(cuEventRecord)(after, stream_), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamQuery)(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(CU(cuEventQuery)(after), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(CU(cuEventElapsedTime)(&ms, before, after), CUDA_ERROR_NOT_READY);

  std::atomic<bool> returned{false};
  std::atomic<int64_t> returned_ns{0};
  std::thread syncer([&] {
    CU(cuCtxSetCurrent)(ctx_);
    EXPECT_EQ(CU(cuStreamSynchronize)(stream_), CUDA_SUCCESS);
    returned_ns.store(RealtimeNs());
    returned.store(true);
  });
  ASSERT_TRUE(Eventually([] { return Stats().syncs_waiting == 1; }));
  EXPECT_FALSE(returned.load());  // the gate holds the stream: the sync cannot have returned
  gate.Open();
  syncer.join();
  EXPECT_TRUE(gate.completed.load());
  // The kernel ran after the gate opened and took its simulated time; the sync returned after.
  EXPECT_GE(returned_ns.load() - gate.open_ns.load(), kKernelNs);
  EXPECT_EQ(CU(cuEventQuery)(after), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventElapsedTime)(&ms, before, after), CUDA_SUCCESS);
  EXPECT_NEAR(ms, kKernelNs / 1e6, 1e-3);  // simulated times: exactly the kernel
  CU(cuEventDestroy_v2)(before);
  CU(cuEventDestroy_v2)(after);
}

TEST_F(FakeCudaTest, EventSyncAndCrossStreamWait) {
  SetKernelNs(1000);
  CUstream other = nullptr;
  ASSERT_EQ(CU(cuStreamCreate)(&other, 0), CUDA_SUCCESS);
  CUevent ev = nullptr;
  ASSERT_EQ(CU(cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  Gate gate;
  ASSERT_EQ(gate.Enqueue(stream_), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuEventRecord)(ev, stream_), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuStreamWaitEvent)(other, ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(other), CUDA_SUCCESS);
  // `other` now depends on the gated stream (a GPU-side edge; the host did not block).
  EXPECT_EQ(CU(cuStreamQuery)(other), CUDA_ERROR_NOT_READY);
  std::atomic<bool> returned{false};
  std::thread syncer([&] {
    CU(cuCtxSetCurrent)(ctx_);
    EXPECT_EQ(CU(cuEventSynchronize)(ev), CUDA_SUCCESS);
    returned.store(true);
  });
  ASSERT_TRUE(Eventually([] { return Stats().syncs_waiting == 1; }));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(CU(cuStreamQuery)(other), CUDA_ERROR_NOT_READY);
  gate.Open();
  syncer.join();
  EXPECT_EQ(CU(cuStreamSynchronize)(other), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuEventQuery)(ev), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(CU(cuEventElapsedTime)(&ms, ev, ev), CUDA_ERROR_INVALID_HANDLE);  // timing disabled
  CU(cuEventDestroy_v2)(ev);
  CU(cuStreamDestroy_v2)(other);
}

TEST_F(FakeCudaTest, FullLaunchQueueBlocksTheLauncher) {
  SetKernelNs(1000);
  Gate gate;
  ASSERT_EQ(gate.Enqueue(stream_), CUDA_SUCCESS);
  constexpr int kLaunches = ITHBAT_FAKE_CUDA_QUEUE_DEPTH + 76;
  std::atomic<int> returned{0};
  std::thread launcher([&] {
    CU(cuCtxSetCurrent)(ctx_);
    for (int i = 0; i < kLaunches; ++i) {
      EXPECT_EQ(Launch(stream_), CUDA_SUCCESS);
      returned.fetch_add(1);
    }
  });
  ASSERT_TRUE(Eventually([] { return Stats().launches_blocked == 1; }));
  // The gate plus 1023 kernels fill the device's 1024 entries; launch 1024 waits for space.
  EXPECT_EQ(returned.load(), ITHBAT_FAKE_CUDA_QUEUE_DEPTH - 1);
  EXPECT_EQ(Stats().pending[0], static_cast<uint32_t>(ITHBAT_FAKE_CUDA_QUEUE_DEPTH));
  gate.Open();
  launcher.join();
  EXPECT_EQ(returned.load(), kLaunches);
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Stats().pending[0], 0u);
  EXPECT_LE(Stats().pending_max, static_cast<uint64_t>(ITHBAT_FAKE_CUDA_QUEUE_DEPTH));
}

TEST_F(FakeCudaTest, BusyTimeReachesTheStateAndUtilisationRises) {
  // Device 1 is used by this test only.
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx1, 1), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuCtxSetCurrent)(ctx1), CUDA_SUCCESS);
  constexpr int64_t kKernelNs = 10'000'000;
  constexpr int kKernels = 30;
  SetKernelNs(kKernelNs);
  FakeState& state = Driver::Get().state();
  const GpuSlot& slot = state.layout().gpus[1];
  auto config = state.Config(1);
  ASSERT_TRUE(config);
  // The process has a context on GPU 1: NVML lists it.
  bool listed = false;
  for (uint32_t i = 0; i < config->process_count; ++i)
    listed |= config->processes[i].pid == static_cast<uint32_t>(getpid());
  EXPECT_TRUE(listed);

  const int64_t t0 = RealtimeNs();
  Derived idle;
  ASSERT_TRUE(ComputeDerived(state.layout(), slot, *config, t0, &idle));
  for (int i = 0; i < kKernels; ++i) ASSERT_EQ(Launch(nullptr, 132), CUDA_SUCCESS);  // a full grid
  ASSERT_EQ(CU(cuCtxSynchronize)(), CUDA_SUCCESS);
  const int64_t t1 = RealtimeNs();
  // Synchronised means idle, and an idle device has written its busy stretch.
  WindowSums sums;
  ASSERT_TRUE(SumWindow(slot, *config, t0, t1, static_cast<uint32_t>(getpid()), &sums));
  EXPECT_GE(sums.busy_ns, 0.99 * kKernels * kKernelNs);
  EXPECT_LE(sums.busy_ns, 1.01 * kKernels * kKernelNs);
  EXPECT_GT(sums.sm_ns, 0.9 * sums.busy_ns);  // 132 blocks fill the SMs
  // Utilisation as NVML reports it at the moment the work ended (the end of the last interval
  // written), so a slow test machine cannot move the window off the work.
  const uint64_t head = slot.timeline.head;
  ASSERT_GT(head, 0u);
  const int64_t work_end = slot.timeline.entries[(head - 1) % kTimelineCapacity].end_ns;
  EXPECT_LE(work_end, t1);
  Derived busy;
  ASSERT_TRUE(ComputeDerived(state.layout(), slot, *config, work_end, &busy));
  EXPECT_LT(idle.util_busy, 0.5);
  EXPECT_GT(busy.util_busy, 0.5);
  EXPECT_GT(busy.power_instant_mw, idle.power_instant_mw);
  ASSERT_EQ(CU(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
}

// The simulated time between two events around one launch (ms), with a refreshed clock. A gate
// holds the stream until all three are queued, so host time between the calls does not count.
double KernelMs(CUstream s, CUfunction f, unsigned gx = 1, unsigned gy = 1) {
  CU(ithbat_fake_cuda_refresh_clocks)();
  CUevent a = nullptr, b = nullptr;
  CU(cuEventCreate)(&a, CU_EVENT_DEFAULT);
  CU(cuEventCreate)(&b, CU_EVENT_DEFAULT);
  Gate gate;
  EXPECT_EQ(gate.Enqueue(s), CUDA_SUCCESS);
  CU(cuEventRecord)(a, s);
  EXPECT_EQ(CU(cuLaunchKernel)(f, gx, gy, 1, 128, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  CU(cuEventRecord)(b, s);
  gate.Open();
  EXPECT_EQ(CU(cuStreamSynchronize)(s), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(CU(cuEventElapsedTime)(&ms, a, b), CUDA_SUCCESS);
  CU(cuEventDestroy_v2)(a);
  CU(cuEventDestroy_v2)(b);
  return ms;
}

// Puts GPU 0's clock cap and temperature offset back, whatever the test did.
struct RestoreClock {
  ~RestoreClock() {
    (void)Driver::Get().state().Modify(0, [](GpuConfig& c) {
      c.clock_cap_mhz = 0;
      c.temp_offset_c = 0;
      c.power_limit_mw = FindModel(static_cast<GpuModel>(c.model))->power_limit_mw;
    });
    CU(ithbat_fake_cuda_refresh_clocks)();
  }
};

TEST_F(FakeCudaTest, KernelTimeStretchesWithTheSmClock) {
  RestoreClock restore;
  constexpr int64_t kKernelNs = 4'000'000;
  SetKernelNs(kKernelNs);
  FakeState& state = Driver::Get().state();
  auto config = state.Config(0);
  ASSERT_TRUE(config);
  const double max_mhz = config->max_clock_mhz[1];  // NVML_CLOCK_SM
  ASSERT_GT(max_mhz, 0);
  EXPECT_NEAR(KernelMs(stream_, fn_), kKernelNs / 1e6, 1e-3);  // full clock: the cost as set

  // A clock cap at half the maximum: twice the time (simulated, so exactly).
  ASSERT_TRUE(state.Modify(0, [&](GpuConfig& c) { c.clock_cap_mhz = static_cast<uint32_t>(max_mhz / 2); }));
  EXPECT_NEAR(KernelMs(stream_, fn_), 2 * kKernelNs / 1e6, 1e-3);

  // Software thermal slowdown (temperature between the SW and HW thresholds): 85 % clock.
  ASSERT_TRUE(state.Modify(0, [](GpuConfig& c) { c.clock_cap_mhz = 0; }));
  Derived now;
  ASSERT_TRUE(ComputeDerived(state.layout(), state.layout().gpus[0], *config, RealtimeNs(), &now));
  const double target_c = (config->sw_thermal_slowdown_c + config->hw_thermal_slowdown_c) / 2.0;
  ASSERT_TRUE(state.SetTemperatureOffset(0, static_cast<int32_t>(std::lround(target_c - now.temperature_c))));
  const double expected_mhz = std::lround(max_mhz * 0.85);
  EXPECT_NEAR(KernelMs(stream_, fn_), kKernelNs / 1e6 * max_mhz / expected_mhz, 1e-3);

  // Power capping: heavy work just now under a power limit far below what it asks for; the
  // fake state clamps the clock at half the maximum.
  ASSERT_TRUE(state.SetTemperatureOffset(0, 0));
  const uint32_t idle_mw = config->idle_power_mw;
  ASSERT_TRUE(state.SetPowerLimit(0, idle_mw + (config->power_limit_mw - idle_mw) / 3));
  const int64_t t = RealtimeNs();
  // (A mix that stays under the model's normal limit: the check after this one runs uncapped.)
  ASSERT_TRUE(state.AddBusyInterval(0, t - 150'000'000, t, 1.0, 0.5, 0.5));
  EXPECT_NEAR(KernelMs(stream_, fn_), 2 * kKernelNs / 1e6, 1e-3);

  // Back to normal: the cost as set again.
  ASSERT_TRUE(state.SetPowerLimit(0, config->power_limit_mw));
  EXPECT_NEAR(KernelMs(stream_, fn_), kKernelNs / 1e6, 1e-3);
}

TEST_F(FakeCudaTest, ClockIsReadAtMostEvery100Ms) {
  SetKernelNs(1000);
  CU(ithbat_fake_cuda_refresh_clocks)();
  const uint64_t before = Stats().clock_refreshes;
  const int64_t t0 = RealtimeNs();
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(Launch(stream_), CUDA_SUCCESS);
  const int64_t t1 = RealtimeNs();
  ASSERT_EQ(CU(cuStreamSynchronize)(stream_), CUDA_SUCCESS);
  const uint64_t refreshes = Stats().clock_refreshes - before;
  EXPECT_GE(refreshes, 1u);  // the first launch after the refresh request
  EXPECT_LE(refreshes, static_cast<uint64_t>(1 + (t1 - t0) / 100'000'000 + 1));
}

TEST(FakeCudaKernelNames, ClassesLikeRealKernels) {
  using ithbat::sim::cuda::ClassifyKernel;
  EXPECT_STREQ(
      ClassifyKernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
                     "execute_segment_k_off_kernel__5x_cublas")
          .kind,
      "gemm");
  EXPECT_STREQ(ClassifyKernel("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn").kind, "gemm");
  EXPECT_STREQ(ClassifyKernel("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8").kind,
               "gemm");
  EXPECT_STREQ(ClassifyKernel("volta_fp16_hmma_s884_nt").kind, "gemm");
  EXPECT_STREQ(ClassifyKernel("_Z16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4EEEv").kind,
               "attention");
  EXPECT_STREQ(ClassifyKernel("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel").kind, "attention");
  EXPECT_STREQ(
      ClassifyKernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
                     "at::detail::Array<char*, 1>)")
          .kind,
      "memory");
  EXPECT_STREQ(
      ClassifyKernel("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_9func_wrapper_t").kind,
      "memory");
  EXPECT_STREQ(ClassifyKernel("cunn_SoftMaxForward").kind, "memory");
  // cuBLAS's split-K epilogue is a reduction, not a GEMM; vLLM's fused norm is memory-bound.
  EXPECT_STREQ(
      ClassifyKernel("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EifN3c108BFloat16EfS2_Lb0ELb0ELb0EEEv").kind,
      "memory");
  EXPECT_STREQ(
      ClassifyKernel("_ZN4vllm24fused_add_rms_norm_kernelIN3c108BFloat16ELi8EEEvPT_S4_PKS3_fii").kind,
      "memory");
  EXPECT_STREQ(ClassifyKernel("flash_fwd_splitkv_kernel").kind, "attention");
  EXPECT_STREQ(ClassifyKernel("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel").kind,
               "memory");
  EXPECT_STREQ(ClassifyKernel("kernel").kind, "other");
  EXPECT_STREQ(ClassifyKernel(nullptr).kind, "other");
  for (const char* gemm : {"sm90_xmma_gemm_x", "flash_fwd_kernel"}) {
    EXPECT_GE(ClassifyKernel(gemm).tensor, 0.7f);
    EXPECT_LE(ClassifyKernel(gemm).tensor, 0.9f);
  }
  EXPECT_EQ(ClassifyKernel("reduce_kernel").tensor, 0.0f);
  EXPECT_GT(ClassifyKernel("reduce_kernel").dram, ClassifyKernel("sm90_xmma_gemm_x").dram);
}

// What the name says reaches the fake state's timeline: NVML's tensor activity follows the mix.
TEST_F(FakeCudaTest, TensorShareByNameReachesTheTimeline) {
  constexpr int64_t kKernelNs = 2'000'000;
  constexpr int kKernels = 10;
  SetKernelNs(kKernelNs);
  FakeState& state = Driver::Get().state();
  const GpuSlot& slot = state.layout().gpus[0];
  auto config = state.Config(0);
  ASSERT_TRUE(config);
  const char* names[] = {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "flash_fwd_kernel",
                         "void at::native::vectorized_elementwise_kernel<4>", "kernel"};
  for (const char* name : names) {
    CUfunction f = nullptr;
    ASSERT_EQ(CU(cuModuleGetFunction)(&f, module_, name), CUDA_SUCCESS);
    const int64_t t0 = RealtimeNs();
    for (int i = 0; i < kKernels; ++i) {
      ASSERT_EQ(CU(cuLaunchKernel)(f, 132, 1, 1, 128, 1, 1, 0, stream_, nullptr, nullptr), CUDA_SUCCESS);
    }
    ASSERT_EQ(CU(cuStreamSynchronize)(stream_), CUDA_SUCCESS);  // idle: the stretch is written
    const int64_t t1 = RealtimeNs();
    WindowSums sums;
    ASSERT_TRUE(SumWindow(slot, *config, t0, t1, static_cast<uint32_t>(getpid()), &sums));
    ASSERT_GT(sums.busy_ns, 0.99 * kKernels * kKernelNs) << name;
    const auto mix = ithbat::sim::cuda::ClassifyKernel(name);
    EXPECT_NEAR(sums.sm_ns / sums.busy_ns, 1.0, 1e-3) << name;  // 132 blocks: every SM
    EXPECT_NEAR(sums.tensor_ns / sums.busy_ns, mix.tensor, 1e-3) << name;
    EXPECT_NEAR(sums.dram_ns / sums.busy_ns, mix.dram, 1e-3) << name;
  }
}

// A workload picks the grid for a kernel of a given length from the costs it reads.
TEST_F(FakeCudaTest, GridForDurationGivesThatDuration) {
  IthbatFakeCudaCosts costs = saved_costs_;
  costs.kernel_ns = 5000;
  costs.ns_per_block = 1000;
  CU(ithbat_fake_cuda_set_costs)(&costs);
  IthbatFakeCudaCosts read{};
  CU(ithbat_fake_cuda_get_costs)(&read);
  unsigned grid[3];
  for (int64_t target : {2'500'000LL, 12'345'678LL}) {
    const int64_t got = ithbat::sim::cuda::GridForDuration(read, target, grid);
    EXPECT_LE(std::abs(got - target), read.ns_per_block / 2) << target;
    EXPECT_NEAR(KernelMs(stream_, fn_, grid[0], grid[1]), got / 1e6, 1e-3) << target;
  }
  EXPECT_EQ(ithbat::sim::cuda::GridForDuration(read, 100, grid), 6000);  // one block: the shortest
  // More blocks than gridDimX holds spill into y.
  const int64_t huge = ithbat::sim::cuda::GridForDuration(read, 5'000'000'000'000LL, grid);
  EXPECT_GT(grid[1], 1u);
  EXPECT_LE(std::abs(huge - 5'000'000'000'000LL), 5'000'000'000'000LL / 1000);
  IthbatFakeCudaCosts flat = read;
  flat.ns_per_block = 0;
  EXPECT_EQ(ithbat::sim::cuda::GridForDuration(flat, 2'000'000, grid), -1);  // must set ns_per_block
  EXPECT_EQ(ithbat::sim::cuda::GridForDuration(flat, flat.kernel_ns, grid), flat.kernel_ns);
}

TEST_F(FakeCudaTest, MemoryAllocationsAndCopies) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(CU(cuMemAlloc_v2)(&a, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(CU(cuMemAllocAsync)(&b, 1 << 20, stream_), CUDA_SUCCESS);
  EXPECT_NE(a, b);
  std::vector<char> host(1 << 20);
  EXPECT_EQ(CU(cuMemcpyHtoD_v2)(a, host.data(), host.size()), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoDAsync_v2)(b, a, host.size(), stream_), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemcpyDtoH_v2)(host.data(), b, host.size()), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFreeAsync)(b, stream_), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFree_v2)(a), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuMemFree_v2)(a), CUDA_ERROR_INVALID_VALUE);  // double free
  size_t total = 0;
  ASSERT_EQ(CU(cuDeviceTotalMem_v2)(&total, 0), CUDA_SUCCESS);
  CUdeviceptr huge = 0;
  EXPECT_EQ(CU(cuMemAlloc_v2)(&huge, total), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(FakeCudaTest, DevicesComeFromTheState) {
  int count = 0;
  ASSERT_EQ(CU(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  char name[128];
  ASSERT_EQ(CU(cuDeviceGetName)(name, sizeof(name), 0), CUDA_SUCCESS);
  auto config = Driver::Get().state().Config(0);
  ASSERT_TRUE(config);
  EXPECT_STREQ(name, config->name);
  CUuuid uuid{};
  ASSERT_EQ(CU(cuDeviceGetUuid_v2)(&uuid, 0), CUDA_SUCCESS);
  char hex[8];
  std::snprintf(hex, sizeof(hex), "%02x%02x", static_cast<unsigned char>(uuid.bytes[0]),
                static_cast<unsigned char>(uuid.bytes[1]));
  EXPECT_EQ(std::string(config->uuid).substr(4, 4), hex);  // "GPU-" + the same bytes
  const char* s = nullptr;
  EXPECT_EQ(CU(cuGetErrorName)(CUDA_ERROR_NOT_READY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NOT_READY");
  CUdevice d = 0;
  EXPECT_EQ(CU(cuDeviceGet)(&d, 2), CUDA_ERROR_INVALID_DEVICE);
}

// ---------------------------------------------------------------------------------------------
// The workload program: its own counts per path, which the probe tests will compare with.

nlohmann::json RunWorkload(const std::string& args) {
  const std::string cmd =
      std::string("env -u ITHBAT_FAKE_STATE -u CUDA_VISIBLE_DEVICES ITHBAT_FAKE_CUDA_DEVICES=1 ") +
      ITHBAT_CUDA_WORKLOAD + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return {};
  try {
    return nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception&) {
    return {};
  }
}

TEST(FakeCudaWorkload, CountsEveryCallByPath) {
  const auto j = RunWorkload("--launches 300 --path all --sync-every 30 --threads 2");
  ASSERT_TRUE(j.is_object());
  auto count = [&](const char* fn, const char* path) {
    return j["calls"].contains(fn) ? j["calls"][fn][path].get<int>() : 0;
  };
  EXPECT_EQ(count("cuLaunchKernel", "total"), 600);
  EXPECT_EQ(count("cuLaunchKernel", "direct"), 200);
  EXPECT_EQ(count("cuLaunchKernel", "dlsym"), 200);
  EXPECT_EQ(count("cuLaunchKernel", "procaddr"), 200);
  // 10 sync points per thread + the final one; each has one event record and one sync, whose
  // kind (stream, event, context) rotates independently of the path.
  EXPECT_EQ(count("cuEventRecord", "total"), 22);
  EXPECT_EQ(count("cuStreamSynchronize", "total") + count("cuEventSynchronize", "total") +
                count("cuCtxSynchronize", "total"),
            22);
  for (const char* fn : {"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize"}) {
    EXPECT_GT(count(fn, "total"), 0) << fn;
  }
  EXPECT_EQ(count("cuMemAlloc_v2", "total"), 2);
  EXPECT_TRUE(j["procaddr_not_exported"].empty());
}

TEST(FakeCudaWorkload, PerThreadProcAddressReachesTheInternalEntry) {
  const auto j = RunWorkload("--launches 100 --path procaddr --per-thread --gap-every 50 --gap-ms 5");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["calls"]["cuLaunchKernel_ptsz"]["procaddr"], 100);
  EXPECT_EQ(j["gaps"], 1);
  EXPECT_GE(j["gap_ns"].get<int64_t>(), 5'000'000);
  ASSERT_EQ(j["procaddr_not_exported"].size(), 1u);
  EXPECT_EQ(j["procaddr_not_exported"][0], "cuLaunchKernel_ptsz");
}

// ---------------------------------------------------------------------------------------------
// ELF dynamic symbol tables: what a resolver that must not load a file sees.

struct ElfSym {
  uint64_t value;
  unsigned bind;
};

// Defined dynamic symbols of an ELF64 file, or nullopt when it is not one (bounded by the file).
std::optional<std::map<std::string, ElfSym>> DynamicSymbols(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    close(fd);
    return std::nullopt;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  const auto* base = static_cast<const uint8_t*>(map);
  std::optional<std::map<std::string, ElfSym>> out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  auto in = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      in(eh->e_shoff, static_cast<uint64_t>(eh->e_shnum) * sizeof(Elf64_Shdr))) {
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sh[sh[i].sh_link];
      if (!in(sh[i].sh_offset, sh[i].sh_size) || !in(strtab.sh_offset, strtab.sh_size)) break;
      out.emplace();
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const char* names = reinterpret_cast<const char*>(base + strtab.sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
        if (syms[k].st_shndx == SHN_UNDEF || syms[k].st_name >= strtab.sh_size) continue;
        const char* name = names + syms[k].st_name;
        (*out)[std::string(name, strnlen(name, strtab.sh_size - syms[k].st_name))] =
            ElfSym{syms[k].st_value, ELF64_ST_BIND(syms[k].st_info)};
      }
      break;
    }
  }
  munmap(map, size);
  return out;
}

// Checks (and prints) the §5 targets of one libcuda/libnccl file; `optional` names may be absent.
void CheckTargets(const std::string& path, bool nccl) {
  auto syms = DynamicSymbols(path);
  ASSERT_TRUE(syms) << path << " is not a readable ELF64 file with a .dynsym";
  std::vector<std::string> missing;
  int present = 0;
  auto check = [&](const char* name) {
    auto it = syms->find(name);
    if (it == syms->end()) {
      missing.push_back(name);
      return;
    }
    ++present;
    if (nccl) {
      // One probe per address: the weak public name and the strong p-name coincide.
      auto p = syms->find(std::string("p") + name);
      ASSERT_NE(p, syms->end()) << path << ": no p" << name;
      EXPECT_EQ(p->second.value, it->second.value) << name;
      EXPECT_EQ(it->second.bind, static_cast<unsigned>(STB_WEAK)) << name;
      EXPECT_EQ(p->second.bind, static_cast<unsigned>(STB_GLOBAL)) << name;
    }
  };
  if (nccl) {
    for (const char* n : kNcclTargets) check(n);
  } else {
    for (const char* n : kCudaTargets) check(n);
  }
  std::string report = path + ": " + std::to_string(present) + " targets present";
  for (const auto& m : missing) report += ", missing " + m;
  std::printf("%s\n", report.c_str());
  ::testing::Test::RecordProperty("targets_" + path, report);
  // cuCtxSynchronize_v2 is new in CUDA 13 (§5: optional); everything else must be there.
  for (const auto& m : missing) EXPECT_EQ(m, "cuCtxSynchronize_v2") << path;
}

TEST(ProbeTargetsElf, FakeLibrariesHaveEveryTarget) {
  CheckTargets(ITHBAT_FAKE_CUDA_PATH, false);
  CheckTargets(ITHBAT_FAKE_NCCL_PATH, true);
}

// Real NVIDIA files (the CUDA stub libcuda.so, libnccl.so.2) are checked by the production ELF
// reader in tests/probes/resolve_test.cc (RealLibraries.*), which never skips.

}  // namespace

// The driver is initialised once per process; the NCCL tests in this binary share it.
bool EnsureFakeCudaForTests() { return Driver::Get().ok(); }

}  // namespace ithbat::sim
