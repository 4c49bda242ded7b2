// Loads the built fake libnvidia-ml.so.1 with dlopen, exactly as the agent does, and checks the
// ABI behaviour a collector relies on. The state is driven through sim/fake_state's API.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/gpu/nvml_abi.h"
#include "fake_state/fake_state_api.h"
#include "testutil/testutil.h"

namespace ithbat::sim {
namespace {

namespace nv = ::ithbat::nvml;

constexpr uint64_t kGiB = 1ULL << 30;

// The fake stays loaded for the whole test program (like NVML in the agent); each test inits and
// shuts it down, and the last shutdown drops its mapping, so tests do not share state.
void* Library() {
  static void* handle = dlopen(ITHBAT_FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
  return handle;
}

template <class F>
F Sym(const char* name) {
  return reinterpret_cast<F>(dlsym(Library(), name));
}

#define NVML(fn) Sym<nv::fn##_fn>(#fn)

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Library(), nullptr) << dlerror();
    state_path_ = (dir_.path() / "state").string();
    auto state =
        FakeState::Create(state_path_,
                          {GpuModel::kH100Sxm, GpuModel::kH100Sxm, GpuModel::kH100Sxm, GpuModel::kH100Sxm,
                           GpuModel::kH100Sxm, GpuModel::kH100Sxm, GpuModel::kH200Sxm, GpuModel::kA100Sxm},
                          "test-node");
    ASSERT_TRUE(state) << state.error().ToString();
    state_ = std::move(*state);
    setenv("ITHBAT_FAKE_STATE", state_path_.c_str(), 1);
    ASSERT_EQ(NVML(nvmlInit_v2)(), nv::NVML_SUCCESS);
  }
  void TearDown() override {
    NVML(nvmlShutdown)();
    unsetenv("ITHBAT_FAKE_STATE");
  }

  nv::nvmlDevice_t Handle(unsigned i) {
    nv::nvmlDevice_t d = nullptr;
    EXPECT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(i, &d), nv::NVML_SUCCESS);
    return d;
  }

  testing::TempDir dir_;
  std::string state_path_;
  std::unique_ptr<FakeState> state_;
};

TEST(FakeNvmlExports, VersionedNamesOnly) {
  ASSERT_NE(Library(), nullptr) << dlerror();
  for (const auto& s : nv::kSymbols) {
    EXPECT_NE(dlsym(Library(), std::string(s.name).c_str()), nullptr) << s.name;
  }
  // Only the versioned names (§1.1): a real driver may keep legacy v1 entry points under the plain
  // names (older structs), so a collector that dlsyms one must fail here, not on a node.
  for (const char* plain :
       {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo",
        "nvmlEventSetWait", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetNvLinkRemotePciInfo"}) {
    EXPECT_EQ(dlsym(Library(), plain), nullptr) << plain;
  }
  // Nothing of the state code leaks out of the library.
  EXPECT_EQ(dlsym(Library(), "_ZN6ithbat3sim10ReadConfigERKNS0_7GpuSlotEPNS0_9GpuConfigE"), nullptr);
}

TEST(FakeNvmlInit, RequiredAndRefCounted) {
  ASSERT_NE(Library(), nullptr) << dlerror();
  unsetenv("ITHBAT_FAKE_STATE");
  unsigned count = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetCount_v2)(&count), nv::NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(NVML(nvmlShutdown)(), nv::NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(NVML(nvmlInit_v2)(), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlInitWithFlags)(0), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlShutdown)(), nv::NVML_SUCCESS);
  // One reference left: still usable. Without a state file: eight idle H100 SXM.
  ASSERT_EQ(NVML(nvmlDeviceGetCount_v2)(&count), nv::NVML_SUCCESS);
  EXPECT_EQ(count, 8u);
  std::set<std::string> uuids;
  for (unsigned i = 0; i < count; ++i) {
    nv::nvmlDevice_t d = nullptr;
    ASSERT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(i, &d), nv::NVML_SUCCESS);
    char uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    ASSERT_EQ(NVML(nvmlDeviceGetUUID)(d, uuid, sizeof(uuid)), nv::NVML_SUCCESS);
    ASSERT_EQ(NVML(nvmlDeviceGetName)(d, name, sizeof(name)), nv::NVML_SUCCESS);
    EXPECT_EQ(std::string(name), "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(std::string(uuid).rfind("GPU-", 0), 0u) << uuid;
    uuids.insert(uuid);
    unsigned arch = 0;
    ASSERT_EQ(NVML(nvmlDeviceGetArchitecture)(d, &arch), nv::NVML_SUCCESS);
    EXPECT_EQ(arch, nv::NVML_DEVICE_ARCH_HOPPER);
  }
  EXPECT_EQ(uuids.size(), 8u);
  ASSERT_EQ(NVML(nvmlShutdown)(), nv::NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlDeviceGetCount_v2)(&count), nv::NVML_ERROR_UNINITIALIZED);
  EXPECT_STREQ(NVML(nvmlErrorString)(nv::NVML_ERROR_GPU_IS_LOST), "GPU is lost");
}

TEST(FakeNvmlInit, RefusesStateOfAnotherLayoutVersion) {
  ASSERT_NE(Library(), nullptr) << dlerror();
  testing::TempDir dir;
  const std::string path = (dir.path() / "state").string();
  {
    auto state = FakeState::CreateDefault(path);
    ASSERT_TRUE(state);
    (*state)->layout().header.layout_version = kFakeStateLayoutVersion + 1;
  }
  setenv("ITHBAT_FAKE_STATE", path.c_str(), 1);
  EXPECT_EQ(NVML(nvmlInit_v2)(), nv::NVML_ERROR_LIB_RM_VERSION_MISMATCH);
  unsetenv("ITHBAT_FAKE_STATE");
}

TEST_F(FakeNvmlTest, IdentityFromState) {
  unsigned count = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetCount_v2)(&count), nv::NVML_SUCCESS);
  EXPECT_EQ(count, 8u);
  auto config = state_->Config(6);
  ASSERT_TRUE(config);
  char name[96];
  ASSERT_EQ(NVML(nvmlDeviceGetName)(Handle(6), name, sizeof(name)), nv::NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H200");
  nv::nvmlDevice_t by_uuid = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetHandleByUUID)(config->uuid, &by_uuid), nv::NVML_SUCCESS);
  EXPECT_EQ(by_uuid, Handle(6));
  nv::nvmlPciInfo_t pci{};
  ASSERT_EQ(NVML(nvmlDeviceGetPciInfo_v3)(Handle(6), &pci), nv::NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, config->pci_bus_id);
  nv::nvmlDevice_t by_bus = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetHandleByPciBusId_v2)(pci.busIdLegacy, &by_bus), nv::NVML_SUCCESS);
  EXPECT_EQ(by_bus, Handle(6));
  // Too small a buffer is INSUFFICIENT_SIZE, not a truncated string.
  char tiny[8];
  EXPECT_EQ(NVML(nvmlDeviceGetUUID)(Handle(0), tiny, sizeof(tiny)), nv::NVML_ERROR_INSUFFICIENT_SIZE);
  nv::nvmlDevice_t bad = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(8, &bad), nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(nvmlDeviceGetHandleByUUID)("GPU-nope", &bad), nv::NVML_ERROR_NOT_FOUND);
}

TEST_F(FakeNvmlTest, VersionedStructsAreChecked) {
  nv::nvmlMemory_v2_t mem{};
  mem.version = nv::NvmlStructVersion(sizeof(mem), 1);  // right size, wrong version
  EXPECT_EQ(NVML(nvmlDeviceGetMemoryInfo_v2)(Handle(0), &mem), nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  mem.version = nv::nvmlMemory_v2;
  ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo_v2)(Handle(0), &mem), nv::NVML_SUCCESS);
  EXPECT_EQ(mem.total, 85520809984ULL);
  EXPECT_EQ(mem.used, 0u);
  EXPECT_EQ(mem.free + mem.reserved + mem.used, mem.total);

  nv::nvmlTemperature_t temp{};
  temp.version = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetTemperatureV)(Handle(0), &temp), nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  temp.version = nv::nvmlTemperature_v1;
  temp.sensorType = nv::NVML_TEMPERATURE_GPU;
  ASSERT_EQ(NVML(nvmlDeviceGetTemperatureV)(Handle(0), &temp), nv::NVML_SUCCESS);
  EXPECT_EQ(temp.temperature, 32);  // idle H100

  nv::nvmlGpmSupport_t support{};
  support.version = 2;
  EXPECT_EQ(NVML(nvmlGpmQueryDeviceSupport)(Handle(0), &support), nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

TEST_F(FakeNvmlTest, ProcessListFollowsInsufficientSizeProtocol) {
  ASSERT_TRUE(state_->AddProcess(2, 1234, 1 * kGiB));
  ASSERT_TRUE(state_->AddProcess(2, 5678, 2 * kGiB));
  unsigned n = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(Handle(2), &n, nullptr),
            nv::NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(n, 2u);
  nv::nvmlProcessInfo_t infos[2];
  ASSERT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(Handle(2), &n, infos), nv::NVML_SUCCESS);
  std::set<unsigned> pids = {infos[0].pid, infos[1].pid};
  EXPECT_EQ(pids, (std::set<unsigned>{1234, 5678}));
  EXPECT_EQ(infos[0].usedGpuMemory + infos[1].usedGpuMemory, 3 * kGiB);
  EXPECT_EQ(infos[0].gpuInstanceId, nv::NVML_INVALID_INSTANCE_ID);
  nv::nvmlMemory_v2_t mem{};
  mem.version = nv::nvmlMemory_v2;
  ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo_v2)(Handle(2), &mem), nv::NVML_SUCCESS);
  EXPECT_EQ(mem.used, 3 * kGiB);
  // A GPU without processes: count 0 is enough.
  n = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(Handle(3), &n, nullptr), nv::NVML_SUCCESS);
  EXPECT_EQ(n, 0u);
}

TEST_F(FakeNvmlTest, NotSupportedInjectionPerFunctionAndGpu) {
  unsigned mw = 0;
  ASSERT_TRUE(state_->SetNotSupported(1, "nvmlDeviceGetPowerUsage", true));
  EXPECT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(1), &mw), nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(0), &mw), nv::NVML_SUCCESS);
  EXPECT_EQ(mw, 70000u);  // idle
  unsigned limit = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetEnforcedPowerLimit)(Handle(1), &limit), nv::NVML_SUCCESS);
  ASSERT_TRUE(state_->SetNotSupported(1, "nvmlDeviceGetPowerUsage", false));
  EXPECT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(1), &mw), nv::NVML_SUCCESS);
  EXPECT_FALSE(state_->SetNotSupported(1, "nvmlNoSuchFunction", true));
}

TEST_F(FakeNvmlTest, ModelLimitsAreNotSupported) {
  // The A100 (index 7) has no GPM; MIG queries need MIG.
  nv::nvmlGpmSupport_t support{nv::NVML_GPM_SUPPORT_VERSION, 1};
  ASSERT_EQ(NVML(nvmlGpmQueryDeviceSupport)(Handle(7), &support), nv::NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 0u);
  nv::nvmlGpmSample_t s = nullptr;
  ASSERT_EQ(NVML(nvmlGpmSampleAlloc)(&s), nv::NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlGpmSampleGet)(Handle(7), s), nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(nvmlGpmMigSampleGet)(Handle(0), 0, s), nv::NVML_ERROR_NOT_SUPPORTED);
  ASSERT_TRUE(state_->SetMigMode(0, true));
  EXPECT_EQ(NVML(nvmlGpmMigSampleGet)(Handle(0), 0, s), nv::NVML_SUCCESS);
  unsigned a = 0, b = 0, c = 0, d = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetRemappedRows)(Handle(0), &a, &b, &c, &d), nv::NVML_ERROR_NOT_SUPPORTED);
  nv::nvmlUtilization_t util{};
  EXPECT_EQ(NVML(nvmlDeviceGetUtilizationRates)(Handle(0), &util), nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(nvmlGpmSampleFree)(s), nv::NVML_SUCCESS);
  unsigned long long rx = 0, tx = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetNvLinkUtilizationCounter)(Handle(1), 0, 0, &rx, &tx),
            nv::NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(FakeNvmlTest, LostGpuFailsItsCallsOnly) {
  nv::nvmlDevice_t d2 = Handle(2);
  ASSERT_TRUE(state_->SetLost(2, true));
  char uuid[96];
  EXPECT_EQ(NVML(nvmlDeviceGetUUID)(d2, uuid, sizeof(uuid)), nv::NVML_ERROR_GPU_IS_LOST);
  nv::nvmlDevice_t again = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(2, &again), nv::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(NVML(nvmlDeviceGetUUID)(Handle(3), uuid, sizeof(uuid)), nv::NVML_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetCount_v2)(&count), nv::NVML_SUCCESS);
  EXPECT_EQ(count, 8u);  // a lost GPU is still enumerated
  ASSERT_TRUE(state_->SetLost(2, false));
  EXPECT_EQ(NVML(nvmlDeviceGetUUID)(d2, uuid, sizeof(uuid)), nv::NVML_SUCCESS);
}

TEST_F(FakeNvmlTest, SlowCallSleepsFirst) {
  ASSERT_TRUE(state_->SetSlowCall(4, 200'000));
  unsigned mw = 0;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(4), &mw), nv::NVML_SUCCESS);
  // A lower bound only: the fake sleeps at least this long before answering.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
}

TEST_F(FakeNvmlTest, HangBlocksUntilReleasedByAnotherThread) {
  nv::nvmlDevice_t d = Handle(5);
  ASSERT_TRUE(state_->SetHang(5, true));
  std::atomic<bool> returned{false};
  std::atomic<int> result{-1};
  std::thread caller([&] {
    unsigned mw = 0;
    result = NVML(nvmlDeviceGetPowerUsage)(d, &mw);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load());  // cannot return while the hang flag is set
  ASSERT_TRUE(state_->SetHang(5, false));
  caller.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(result.load(), nv::NVML_SUCCESS);
}

TEST_F(FakeNvmlTest, XidEventsAreDeliveredWithTimeout) {
  nv::nvmlEventSet_t set = nullptr;
  ASSERT_EQ(NVML(nvmlEventSetCreate)(&set), nv::NVML_SUCCESS);
  unsigned long long supported = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetSupportedEventTypes)(Handle(3), &supported), nv::NVML_SUCCESS);
  EXPECT_TRUE(supported & nv::nvmlEventTypeXidCriticalError);
  // An unsupported bit fails the call, but the supported ones stay registered.
  EXPECT_EQ(NVML(nvmlDeviceRegisterEvents)(Handle(3), nv::nvmlEventTypeXidCriticalError | (1ULL << 40), set),
            nv::NVML_ERROR_NOT_SUPPORTED);
  nv::nvmlEventData_t data{};
  EXPECT_EQ(NVML(nvmlEventSetWait_v2)(set, &data, 20), nv::NVML_ERROR_TIMEOUT);

  ASSERT_TRUE(state_->InjectXid(4, 48));  // GPU 4 is not registered
  ASSERT_TRUE(state_->InjectXid(3, 79));
  ASSERT_EQ(NVML(nvmlEventSetWait_v2)(set, &data, 1000), nv::NVML_SUCCESS);
  EXPECT_EQ(data.device, Handle(3));
  EXPECT_EQ(data.eventType, nv::nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_EQ(NVML(nvmlEventSetWait_v2)(set, &data, 20), nv::NVML_ERROR_TIMEOUT);

  // An event that arrives while a waiter blocks wakes it.
  std::thread injector([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(state_->InjectXid(3, 94));
  });
  ASSERT_EQ(NVML(nvmlEventSetWait_v2)(set, &data, 10'000), nv::NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 94u);
  injector.join();
  EXPECT_EQ(NVML(nvmlEventSetFree)(set), nv::NVML_SUCCESS);
}

TEST_F(FakeNvmlTest, GpmMetricsComeFromTheBusyTimeline) {
  nv::nvmlDevice_t d = Handle(1);
  nv::nvmlGpmSupport_t support{nv::NVML_GPM_SUPPORT_VERSION, 0};
  ASSERT_EQ(NVML(nvmlGpmQueryDeviceSupport)(d, &support), nv::NVML_SUCCESS);
  ASSERT_EQ(support.isSupportedDevice, 1u);
  nv::nvmlGpmSample_t a = nullptr, b = nullptr;
  ASSERT_EQ(NVML(nvmlGpmSampleAlloc)(&a), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlGpmSampleAlloc)(&b), nv::NVML_SUCCESS);
  const int64_t before = RealtimeNs();
  ASSERT_EQ(NVML(nvmlGpmSampleGet)(d, a), nv::NVML_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(NVML(nvmlGpmSampleGet)(d, b), nv::NVML_SUCCESS);
  const int64_t after = RealtimeNs();
  // 50 % duty cycle (1 ms on, 1 ms off) covering both samples; metrics are computed when asked,
  // so the timeline may be written after the samples were taken.
  for (int64_t t = before - 10'000'000; t < after + 10'000'000; t += 2'000'000) {
    ASSERT_TRUE(state_->AddBusyInterval(1, t, t + 1'000'000, 1.0, 0.6, 0.4, 4321));
  }
  ASSERT_TRUE(state_->AddNvLinkTraffic(1, 0, 0, 0));

  nv::nvmlGpmMetricsGet_t m{};
  m.version = 2;
  m.numMetrics = 4;
  m.sample1 = a;
  m.sample2 = b;
  m.metrics[0].metricId = nv::NVML_GPM_METRIC_GRAPHICS_UTIL;
  m.metrics[1].metricId = nv::NVML_GPM_METRIC_SM_UTIL;
  m.metrics[2].metricId = nv::NVML_GPM_METRIC_ANY_TENSOR_UTIL;
  m.metrics[3].metricId = nv::NVML_GPM_METRIC_DRAM_BW_UTIL;
  EXPECT_EQ(NVML(nvmlGpmMetricsGet)(&m), nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m.version = nv::NVML_GPM_METRICS_GET_VERSION;
  ASSERT_EQ(NVML(nvmlGpmMetricsGet)(&m), nv::NVML_SUCCESS);
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(m.metrics[i].nvmlReturn, nv::NVML_SUCCESS) << i;
  // Edges cut at most one 1 ms pulse of a >= 300 ms window.
  EXPECT_NEAR(m.metrics[0].value, 50.0, 1.0);
  EXPECT_NEAR(m.metrics[1].value, 50.0, 1.0);
  EXPECT_NEAR(m.metrics[2].value, 30.0, 1.0);
  EXPECT_NEAR(m.metrics[3].value, 20.0, 1.0);
  // Samples in the wrong order are refused.
  m.sample1 = b;
  m.sample2 = a;
  EXPECT_EQ(NVML(nvmlGpmMetricsGet)(&m), nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(nvmlGpmSampleFree)(a), nv::NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlGpmSampleFree)(b), nv::NVML_SUCCESS);
}

TEST_F(FakeNvmlTest, UtilisationPowerAndTemperatureAreDerived) {
  const int64_t now = RealtimeNs();
  // GPU 0 fully busy for the last 5 s and the next minute; GPU 1 idle.
  ASSERT_TRUE(state_->AddBusyInterval(0, now - 5'000'000'000, now + 60'000'000'000, 1.0, 1.0, 1.0));
  nv::nvmlUtilization_t busy{}, idle{};
  ASSERT_EQ(NVML(nvmlDeviceGetUtilizationRates)(Handle(0), &busy), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetUtilizationRates)(Handle(1), &idle), nv::NVML_SUCCESS);
  EXPECT_EQ(busy.gpu, 100u);
  EXPECT_EQ(busy.memory, 100u);
  EXPECT_EQ(idle.gpu, 0u);
  unsigned p_busy = 0, p_idle = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(0), &p_busy), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetPowerUsage)(Handle(1), &p_idle), nv::NVML_SUCCESS);
  EXPECT_EQ(p_busy, 700000u);  // clamped at the limit
  EXPECT_EQ(p_idle, 70000u);
  unsigned long long r_busy = 0, r_idle = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetCurrentClocksEventReasons)(Handle(0), &r_busy), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetCurrentClocksEventReasons)(Handle(1), &r_idle), nv::NVML_SUCCESS);
  EXPECT_TRUE(r_busy & nv::nvmlClocksEventReasonSwPowerCap);
  EXPECT_FALSE(r_busy & nv::nvmlClocksEventReasonGpuIdle);
  EXPECT_EQ(r_idle, nv::nvmlClocksEventReasonGpuIdle);
  unsigned t_busy = 0, t_idle = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetTemperature)(Handle(0), nv::NVML_TEMPERATURE_GPU, &t_busy), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetTemperature)(Handle(1), nv::NVML_TEMPERATURE_GPU, &t_idle), nv::NVML_SUCCESS);
  EXPECT_GT(t_busy, t_idle);  // drifting up toward the level the power sets
  unsigned sm_busy = 0, sm_idle = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetClockInfo)(Handle(0), nv::NVML_CLOCK_SM, &sm_busy), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetClockInfo)(Handle(1), nv::NVML_CLOCK_SM, &sm_idle), nv::NVML_SUCCESS);
  EXPECT_GT(sm_busy, sm_idle);
  unsigned long long e1 = 0, e2 = 0, e_idle = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetTotalEnergyConsumption)(Handle(0), &e1), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceGetTotalEnergyConsumption)(Handle(1), &e_idle), nv::NVML_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(NVML(nvmlDeviceGetTotalEnergyConsumption)(Handle(0), &e2), nv::NVML_SUCCESS);
  EXPECT_GT(e2, e1);
  EXPECT_GT(e1, e_idle);
}

TEST_F(FakeNvmlTest, FieldValuesFillPerEntryResults) {
  ASSERT_TRUE(state_->AddNvLinkErrors(0, 3, nv::NVML_NVLINK_ERROR_DL_REPLAY, 5));
  ASSERT_TRUE(state_->AddNvLinkErrors(0, 4, nv::NVML_NVLINK_ERROR_DL_REPLAY, 2));
  ASSERT_TRUE(state_->SetNvLinkActive(0, 4, false));
  ASSERT_TRUE(state_->SetRemappedRows(0, 3, 1, true, false));
  ASSERT_TRUE(
      state_->AddEccErrors(0, nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv::NVML_MEMORY_LOCATION_DRAM, 2));
  nv::nvmlFieldValue_t v[10] = {};
  v[0].fieldId = nv::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY;
  v[0].scopeId = 3;
  v[1].fieldId = nv::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY;
  v[1].scopeId = 4;
  v[2].fieldId = nv::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL;
  v[3].fieldId = nv::NVML_FI_DEV_NVLINK_GET_STATE;
  v[3].scopeId = 4;
  v[4].fieldId = nv::NVML_FI_DEV_NVLINK_LINK_COUNT;
  v[5].fieldId = nv::NVML_FI_DEV_REMAPPED_PENDING;
  v[6].fieldId = nv::NVML_FI_DEV_ECC_DBE_VOL_DEV;
  v[7].fieldId = nv::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY;
  v[7].scopeId = 40;  // no such link
  v[8].fieldId = 7;   // a field the fake does not model
  v[9].fieldId = 9999;
  ASSERT_EQ(NVML(nvmlDeviceGetFieldValues)(Handle(0), 10, v), nv::NVML_SUCCESS);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(v[i].nvmlReturn, nv::NVML_SUCCESS) << i;
    EXPECT_GT(v[i].timestamp, 0) << i;
  }
  EXPECT_EQ(v[0].valueType, nv::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
  EXPECT_EQ(v[0].value.ullVal, 5u);
  EXPECT_EQ(v[1].value.ullVal, 2u);
  EXPECT_EQ(v[2].value.ullVal, 7u);
  EXPECT_EQ(v[3].value.uiVal, 0u);
  EXPECT_EQ(v[4].value.uiVal, 18u);
  EXPECT_EQ(v[5].value.uiVal, 1u);
  EXPECT_EQ(v[6].value.ullVal, 2u);
  EXPECT_EQ(v[7].nvmlReturn, nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(v[8].nvmlReturn, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(v[9].nvmlReturn, nv::NVML_ERROR_INVALID_ARGUMENT);
  // Throughput counters: per link by scopeId, or summed over all links.
  ASSERT_TRUE(state_->AddNvLinkTraffic(0, 1, 100, 10));
  ASSERT_TRUE(state_->AddNvLinkTraffic(0, 2, 50, 5));
  nv::nvmlFieldValue_t tp[3] = {};
  tp[0].fieldId = nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  tp[0].scopeId = 1;
  tp[1].fieldId = nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  tp[1].scopeId = nv::NVML_NVLINK_SCOPE_ALL_LINKS;
  tp[2].fieldId = nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
  tp[2].scopeId = nv::NVML_NVLINK_SCOPE_ALL_LINKS;
  ASSERT_EQ(NVML(nvmlDeviceGetFieldValues)(Handle(0), 3, tp), nv::NVML_SUCCESS);
  EXPECT_EQ(tp[0].value.ullVal, 100u);
  EXPECT_EQ(tp[1].value.ullVal, 150u);
  EXPECT_EQ(tp[2].value.ullVal, 15u);
  // The 1 s power average does not exist on GA100.
  nv::nvmlFieldValue_t power[2] = {};
  power[0].fieldId = nv::NVML_FI_DEV_POWER_AVERAGE;
  power[1].fieldId = nv::NVML_FI_DEV_POWER_INSTANT;
  ASSERT_EQ(NVML(nvmlDeviceGetFieldValues)(Handle(7), 2, power), nv::NVML_SUCCESS);
  EXPECT_EQ(power[0].nvmlReturn, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(power[1].nvmlReturn, nv::NVML_SUCCESS);
  EXPECT_EQ(power[1].value.uiVal, 55000u);
  // Retired pages follow the INSUFFICIENT_SIZE protocol; the recovery action is a field.
  ASSERT_TRUE(state_->AddRetiredPage(0, nv::NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, 0xabc000, true));
  ASSERT_TRUE(state_->SetRecoveryAction(0, nv::NVML_GPU_RECOVERY_ACTION_GPU_RESET));
  unsigned pages = 0;
  EXPECT_EQ(NVML(nvmlDeviceGetRetiredPages_v2)(Handle(0), nv::NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                                               &pages, nullptr, nullptr),
            nv::NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(pages, 1u);
  unsigned long long address = 0, when = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetRetiredPages_v2)(Handle(0), nv::NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                                               &pages, &address, &when),
            nv::NVML_SUCCESS);
  EXPECT_EQ(address, 0xabc000u);
  nv::nvmlFieldValue_t action{};
  action.fieldId = nv::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
  ASSERT_EQ(NVML(nvmlDeviceGetFieldValues)(Handle(0), 1, &action), nv::NVML_SUCCESS);
  EXPECT_EQ(action.value.uiVal, nv::NVML_GPU_RECOVERY_ACTION_GPU_RESET);
  // The same counters through the dedicated calls.
  unsigned long long replay = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetNvLinkErrorCounter)(Handle(0), 3, nv::NVML_NVLINK_ERROR_DL_REPLAY, &replay),
            nv::NVML_SUCCESS);
  EXPECT_EQ(replay, 5u);
  unsigned long long dbe = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetTotalEccErrors)(Handle(0), nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                              nv::NVML_VOLATILE_ECC, &dbe),
            nv::NVML_SUCCESS);
  EXPECT_EQ(dbe, 2u);
}

TEST_F(FakeNvmlTest, MigDevicesLikeTheRealLibrary) {
  nv::nvmlDevice_t gpu0 = Handle(0);
  // MIG off: no MIG devices, the enumeration call is NOT_SUPPORTED.
  unsigned max_count = 99;
  ASSERT_EQ(NVML(nvmlDeviceGetMaxMigDeviceCount)(gpu0, &max_count), nv::NVML_SUCCESS);
  EXPECT_EQ(max_count, 0u);
  nv::nvmlDevice_t mig = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu0, 0, &mig), nv::NVML_ERROR_NOT_SUPPORTED);

  ASSERT_TRUE(state_->SetMigMode(0, true));
  ASSERT_TRUE(state_->Modify(0, [](GpuConfig& c) {
    c.mig_instance_count = 2;
    c.mig[0] = MigInstance{1, 0, 4, 0};
    c.mig[1] = MigInstance{5, 2, 1, 0};
    c.process_count = 2;
    c.processes[0] = ProcessEntry{700, 1, 0, 0, 2 * kGiB};
    c.processes[1] = ProcessEntry{701, 5, 2, 0, 1 * kGiB};
  }));
  ASSERT_EQ(NVML(nvmlDeviceGetMaxMigDeviceCount)(gpu0, &max_count), nv::NVML_SUCCESS);
  EXPECT_EQ(max_count, kMaxMigInstances);
  EXPECT_EQ(NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu0, 2, &mig), nv::NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu0, max_count, &mig), nv::NVML_ERROR_INVALID_ARGUMENT);

  const uint64_t total = state_->Config(0)->memory_total_bytes;
  char parent_uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  ASSERT_EQ(NVML(nvmlDeviceGetUUID)(gpu0, parent_uuid, sizeof(parent_uuid)), nv::NVML_SUCCESS);
  std::set<std::string> uuids{parent_uuid};
  const unsigned expect_gi[] = {1, 5}, expect_ci[] = {0, 2}, slices[] = {4, 1};
  const uint64_t used[] = {2 * kGiB, 1 * kGiB};
  const unsigned pids[] = {700, 701};
  for (unsigned i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu0, i, &mig), nv::NVML_SUCCESS);
    EXPECT_NE(mig, gpu0);
    unsigned is_mig = 0, gi = 0, ci = 0;
    ASSERT_EQ(NVML(nvmlDeviceIsMigDeviceHandle)(mig, &is_mig), nv::NVML_SUCCESS);
    EXPECT_EQ(is_mig, 1u);
    ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceId)(mig, &gi), nv::NVML_SUCCESS);
    ASSERT_EQ(NVML(nvmlDeviceGetComputeInstanceId)(mig, &ci), nv::NVML_SUCCESS);
    EXPECT_EQ(gi, expect_gi[i]);
    EXPECT_EQ(ci, expect_ci[i]);
    nv::nvmlDevice_t parent = nullptr;
    ASSERT_EQ(NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(mig, &parent), nv::NVML_SUCCESS);
    EXPECT_EQ(parent, gpu0);
    char uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    ASSERT_EQ(NVML(nvmlDeviceGetUUID)(mig, uuid, sizeof(uuid)), nv::NVML_SUCCESS);
    EXPECT_EQ(std::string(uuid).rfind("MIG-", 0), 0u) << uuid;
    uuids.insert(uuid);
    nv::nvmlMemory_t m{};
    ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo)(mig, &m), nv::NVML_SUCCESS);
    EXPECT_EQ(m.total, total / 7 * slices[i]);
    EXPECT_EQ(m.used, used[i]);
    EXPECT_EQ(m.free, m.total - m.used);
    nv::nvmlUtilization_t u{};
    EXPECT_EQ(NVML(nvmlDeviceGetUtilizationRates)(mig, &u), nv::NVML_ERROR_NOT_SUPPORTED);
    nv::nvmlProcessInfo_t infos[4];
    unsigned n = 4;
    ASSERT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(mig, &n, infos), nv::NVML_SUCCESS);
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(infos[0].pid, pids[i]);
    // Calls the MIG device does not answer reject its handle.
    unsigned mw = 0;
    EXPECT_NE(NVML(nvmlDeviceGetPowerUsage)(mig, &mw), nv::NVML_SUCCESS);
  }
  EXPECT_EQ(uuids.size(), 3u);
  // The parent is not a MIG device and has no instance ids.
  unsigned is_mig = 1, id = 0;
  ASSERT_EQ(NVML(nvmlDeviceIsMigDeviceHandle)(gpu0, &is_mig), nv::NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0u);
  EXPECT_EQ(NVML(nvmlDeviceGetGpuInstanceId)(gpu0, &id), nv::NVML_ERROR_NOT_SUPPORTED);
  nv::nvmlDevice_t parent = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(gpu0, &parent), nv::NVML_ERROR_INVALID_ARGUMENT);
  // Another GPU's MIG devices are distinct handles; MIG off again makes the old handle stale.
  ASSERT_TRUE(state_->SetMigMode(1, true));
  nv::nvmlDevice_t mig1 = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetMigDeviceHandleByIndex)(Handle(1), 0, &mig1), nv::NVML_SUCCESS);
  EXPECT_NE(mig1, mig);
  ASSERT_TRUE(state_->SetMigMode(0, false));
  nv::nvmlMemory_t m{};
  EXPECT_EQ(NVML(nvmlDeviceGetMemoryInfo)(mig, &m), nv::NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(FakeNvmlTest, AnotherProcessWritesWhatThisOneReads) {
  // An event set sees events pushed after it was created: create it before the writer starts.
  nv::nvmlEventSet_t set = nullptr;
  ASSERT_EQ(NVML(nvmlEventSetCreate)(&set), nv::NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceRegisterEvents)(Handle(5), nv::nvmlEventTypeXidCriticalError, set),
            nv::NVML_SUCCESS);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The writer opens the state file on its own, as the simulator would.
    auto state = FakeState::Open(state_path_);
    if (!state) _exit(2);
    if (!(*state)->AddProcess(5, 4242, 5 * kGiB)) _exit(3);
    if (!(*state)->SetLost(6, true)) _exit(4);
    if (!(*state)->InjectXid(5, 31)) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  unsigned n = 1;
  nv::nvmlProcessInfo_t info{};
  ASSERT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(Handle(5), &n, &info), nv::NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(info.pid, 4242u);
  EXPECT_EQ(info.usedGpuMemory, 5 * kGiB);
  char uuid[96];
  EXPECT_EQ(NVML(nvmlDeviceGetUUID)(Handle(7), uuid, sizeof(uuid)), nv::NVML_SUCCESS);
  nv::nvmlDevice_t lost = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(6, &lost), nv::NVML_ERROR_GPU_IS_LOST);
  nv::nvmlEventData_t data{};
  ASSERT_EQ(NVML(nvmlEventSetWait_v2)(set, &data, 1000), nv::NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 31u);
  EXPECT_EQ(NVML(nvmlEventSetFree)(set), nv::NVML_SUCCESS);
}

}  // namespace
}  // namespace ithbat::sim
