// ithbat_nvml_abi_check [LIBRARY]: checks a libnvidia-ml.so.1 against src/collect/gpu/nvml_abi.h.
//
// Why: the fake in sim/ is only as good as its likeness to the real library. This program runs
// the same probes against either: in CI against the fake (ctest sim.nvml_abi_check_fake), and
// on a GPU node against the real one (`ithbat_nvml_abi_check` with no argument loads
// "libnvidia-ml.so.1"), so a difference between fake and driver shows up as a diff of two
// outputs. It prints one "name: result" line per probe and exits non-zero only when the ABI as
// declared in nvml_abi.h does not hold (a required export missing, a versioned struct or the
// GPM request struct refused); behaviour that may legitimately differ (field support, GPM on
// older boards) is reported, not judged. It needs no GPU to build and links nothing but libdl.
#include <cstdio>
#include <string>

#include <dlfcn.h>
#include <unistd.h>

#include "collect/gpu/nvml_abi.h"

namespace nv = ::ithbat::nvml;

namespace {

void* g_lib = nullptr;
int g_failures = 0;

template <class F>
F Sym(const char* name) {
  return reinterpret_cast<F>(dlsym(g_lib, name));
}
#define NVML(fn) Sym<nv::fn##_fn>(#fn)

const char* Err(nv::nvmlReturn_t r) {
  auto fn = NVML(nvmlErrorString);
  return fn != nullptr ? fn(r) : "?";
}

void Fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  ++g_failures;
}

void ProbeDevice(unsigned index) {
  nv::nvmlDevice_t d = nullptr;
  nv::nvmlReturn_t r = NVML(nvmlDeviceGetHandleByIndex_v2)(index, &d);
  std::printf("gpu%u.handle: %d %s\n", index, r, Err(r));
  if (r != nv::NVML_SUCCESS) return;
  char name[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (auto fn = NVML(nvmlDeviceGetName)) fn(d, name, sizeof(name));
  unsigned arch = 0;
  if (auto fn = NVML(nvmlDeviceGetArchitecture)) fn(d, &arch);
  std::printf("gpu%u.name: %s arch=%u\n", index, name, arch);

  if (auto fn = NVML(nvmlDeviceGetMemoryInfo_v2)) {
    nv::nvmlMemory_v2_t m{};
    m.version = nv::nvmlMemory_v2;
    r = fn(d, &m);
    std::printf("gpu%u.memory_v2: %d total=%llu reserved=%llu used=%llu free=%llu\n", index, r, m.total,
                m.reserved, m.used, m.free);
    if (r == nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH) Fail("nvmlMemory_v2 version refused");
  }
  if (auto fn = NVML(nvmlDeviceGetTemperatureV)) {
    nv::nvmlTemperature_t t{};
    t.version = nv::nvmlTemperature_v1;
    t.sensorType = nv::NVML_TEMPERATURE_GPU;
    r = fn(d, &t);
    std::printf("gpu%u.temperature_v: %d %d C\n", index, r, t.temperature);
    if (r == nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH) Fail("nvmlTemperature_v1 version refused");
  }
  if (auto fn = NVML(nvmlDeviceGetComputeRunningProcesses_v3)) {
    unsigned n = 0;
    r = fn(d, &n, nullptr);
    std::printf("gpu%u.processes_count0: %d n=%u\n", index, r, n);
  }
  if (auto fn = NVML(nvmlDeviceGetSramEccErrorStatus)) {
    nv::nvmlEccSramErrorStatus_t s{};
    s.version = nv::nvmlEccSramErrorStatus_v1;
    r = fn(d, &s);
    std::printf("gpu%u.sram_ecc_status: %d\n", index, r);
    if (r == nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH) Fail("nvmlEccSramErrorStatus_v1 version refused");
  }
  if (auto fn = NVML(nvmlDeviceGetFieldValues)) {
    // The fields the collector reads, with the scopes it uses (UINT_MAX = all links).
    struct Probe {
      unsigned id;
      unsigned scope;
    };
    const Probe probes[] = {
        {nv::NVML_FI_DEV_MEMORY_TEMP, 0},
        {nv::NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0},
        {nv::NVML_FI_DEV_POWER_AVERAGE, 0},
        {nv::NVML_FI_DEV_POWER_INSTANT, 0},
        {nv::NVML_FI_DEV_NVLINK_LINK_COUNT, 0},
        {nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0},
        {nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1},
        {nv::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nv::NVML_NVLINK_SCOPE_ALL_LINKS},
        {nv::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 0},
        {nv::NVML_FI_DEV_NVLINK_GET_SPEED, 0},
        {nv::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0},
        {nv::NVML_FI_DEV_REMAPPED_PENDING, 0},
        {nv::NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0},
        {nv::NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0},
        {nv::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0},
        {nv::NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0},
        {nv::NVML_FI_MAX + 1000, 0},
    };
    constexpr int kN = sizeof(probes) / sizeof(probes[0]);
    nv::nvmlFieldValue_t v[kN] = {};
    for (int i = 0; i < kN; ++i) {
      v[i].fieldId = probes[i].id;
      v[i].scopeId = probes[i].scope;
    }
    r = fn(d, kN, v);
    std::printf("gpu%u.field_values: %d\n", index, r);
    for (int i = 0; i < kN; ++i) {
      std::printf("gpu%u.field.%u.scope%u: ret=%d type=%d ull=%llu ui=%u\n", index, v[i].fieldId,
                  v[i].scopeId, v[i].nvmlReturn, v[i].valueType, v[i].value.ullVal, v[i].value.uiVal);
    }
  }
  if (auto support_fn = NVML(nvmlGpmQueryDeviceSupport)) {
    nv::nvmlGpmSupport_t s{nv::NVML_GPM_SUPPORT_VERSION, 0};
    r = support_fn(d, &s);
    std::printf("gpu%u.gpm_support: %d supported=%u\n", index, r, s.isSupportedDevice);
    auto alloc = NVML(nvmlGpmSampleAlloc);
    auto get = NVML(nvmlGpmSampleGet);
    auto metrics = NVML(nvmlGpmMetricsGet);
    auto free_fn = NVML(nvmlGpmSampleFree);
    if (r == nv::NVML_SUCCESS && s.isSupportedDevice && alloc && get && metrics && free_fn) {
      nv::nvmlGpmSample_t a = nullptr, b = nullptr;
      alloc(&a);
      alloc(&b);
      get(d, a);
      usleep(200'000);
      get(d, b);
      // Our struct has NVML_GPM_METRICS_GET_CAPACITY entries, not the header's MAX: the driver
      // must read only numMetrics of them (§1.7 ABI hazard).
      nv::nvmlGpmMetricsGet_t m{};
      m.version = nv::NVML_GPM_METRICS_GET_VERSION;
      const int ids[] = {nv::NVML_GPM_METRIC_GRAPHICS_UTIL,    nv::NVML_GPM_METRIC_SM_UTIL,
                         nv::NVML_GPM_METRIC_SM_OCCUPANCY,     nv::NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                         nv::NVML_GPM_METRIC_HMMA_TENSOR_UTIL, nv::NVML_GPM_METRIC_DRAM_BW_UTIL,
                         nv::NVML_GPM_METRIC_PCIE_TX_PER_SEC,  nv::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC};
      m.numMetrics = sizeof(ids) / sizeof(ids[0]);
      m.sample1 = a;
      m.sample2 = b;
      for (unsigned i = 0; i < m.numMetrics; ++i) m.metrics[i].metricId = ids[i];
      r = metrics(&m);
      std::printf("gpu%u.gpm_metrics_get: %d %s\n", index, r, Err(r));
      if (r != nv::NVML_SUCCESS) Fail("nvmlGpmMetricsGet refused our nvmlGpmMetricsGet_t");
      for (unsigned i = 0; i < m.numMetrics; ++i) {
        std::printf("gpu%u.gpm.%u: ret=%d value=%.2f name=%s\n", index, m.metrics[i].metricId,
                    m.metrics[i].nvmlReturn, m.metrics[i].value,
                    m.metrics[i].metricInfo.shortName != nullptr ? m.metrics[i].metricInfo.shortName : "-");
      }
      free_fn(a);
      free_fn(b);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "libnvidia-ml.so.1";
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (g_lib == nullptr) {
    std::printf("FAIL dlopen %s: %s\n", path, dlerror());
    return 2;
  }
  std::printf("library: %s\n", path);
  for (const auto& s : nv::kSymbols) {
    const bool found = dlsym(g_lib, std::string(s.name).c_str()) != nullptr;
    std::printf("export.%s: %s\n", std::string(s.name).c_str(), found ? "yes" : "no");
    if (!found && s.required) Fail("required export " + std::string(s.name) + " missing");
  }
  // Plain (unversioned) names: the real library may keep legacy entry points under them; the
  // collector must never use them. Reported for comparison only.
  for (const char* plain :
       {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo",
        "nvmlEventSetWait", "nvmlDeviceGetComputeRunningProcesses"}) {
    std::printf("plain.%s: %s\n", plain, dlsym(g_lib, plain) != nullptr ? "yes" : "no");
  }
  if (g_failures > 0) return 1;

  nv::nvmlReturn_t r = NVML(nvmlInit_v2)();
  std::printf("init: %d %s\n", r, Err(r));
  if (r != nv::NVML_SUCCESS) return 1;
  char driver[nv::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (auto fn = NVML(nvmlSystemGetDriverVersion)) fn(driver, sizeof(driver));
  std::printf("driver: %s\n", driver);
  unsigned count = 0;
  r = NVML(nvmlDeviceGetCount_v2)(&count);
  std::printf("count: %d %u\n", r, count);
  for (unsigned i = 0; i < count && i < 16; ++i) ProbeDevice(i);

  if (auto create = NVML(nvmlEventSetCreate)) {
    nv::nvmlEventSet_t set = nullptr;
    r = create(&set);
    if (r == nv::NVML_SUCCESS && count > 0) {
      nv::nvmlDevice_t d = nullptr;
      NVML(nvmlDeviceGetHandleByIndex_v2)(0, &d);
      r = NVML(nvmlDeviceRegisterEvents)(d, nv::nvmlEventTypeXidCriticalError, set);
      std::printf("events.register_xid: %d\n", r);
      nv::nvmlEventData_t data{};
      r = NVML(nvmlEventSetWait_v2)(set, &data, 100);
      std::printf("events.wait_100ms: %d %s\n", r, Err(r));
      NVML(nvmlEventSetFree)(set);
    }
  }
  r = NVML(nvmlShutdown)();
  std::printf("shutdown: %d\n", r);
  std::printf("failures: %d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
