// A fake libnvidia-ml.so.1: the NVML exports of src/collect/gpu/nvml_abi.h, answering from the
// shared fake-hardware state (sim/fake_state) instead of a driver. It behaves like the real
// library where a caller can tell: init is ref-counted and required, versioned structs are
// checked, buffers follow the INSUFFICIENT_SIZE protocol, what a model lacks is NOT_SUPPORTED,
// and faults in the state (lost GPU, slow or hung calls, NOT_SUPPORTED per function) surface
// exactly as the driver would surface them. It knows nothing about any scenario.
//
// Exports are controlled by exports.map (only nvml* symbols leave the library); every export is
// checked at compile time against its typedef in nvml_abi.h and its presence in kSymbols.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include <time.h>
#include <unistd.h>

#include "collect/gpu/nvml_abi.h"
#include "fake_state/fake_state.h"

namespace ithbat::nvml {

// The opaque handle types, defined only here (NVIDIA's names).
// NOLINTBEGIN(readability-identifier-naming)
struct nvmlDevice_st {
  uint32_t magic;
  uint32_t index;
};
struct nvmlEventSet_st {
  uint32_t magic;
  std::mutex mu;
  uint64_t cursor;  // next event number to look at
  unsigned long long registered[sim::kMaxGpus];
};
struct nvmlGpmSample_st {
  uint32_t magic;
  uint32_t taken;
  uint32_t gpu;
  int64_t time_ns;
  unsigned long long pcie_tx_bytes, pcie_rx_bytes;
  unsigned long long nvlink_tx_kib[sim::kMaxNvLinks], nvlink_rx_kib[sim::kMaxNvLinks];
};
// NOLINTEND(readability-identifier-naming)

namespace {

using sim::FakeStateLayout;
using sim::GpuConfig;
using sim::GpuSlot;

constexpr uint32_t kDeviceMagic = 0x4e564456;  // "NVDV"
constexpr uint32_t kEventSetMagic = 0x4e564553;
constexpr uint32_t kSampleMagic = 0x4e564753;
constexpr int64_t kMaxHangNs = 120'000'000'000;
constexpr unsigned long long kSupportedEvents =
    nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |
    nvmlEventTypeXidCriticalError | nvmlEventTypeClock | nvmlEventTypeDramRetirementEvent |
    nvmlEventTypeDramRetirementFailure | nvmlEventTypeNonFatalPoisonError | nvmlEventTypeFatalPoisonError |
    nvmlEventTypeGpuUnavailableError | nvmlEventTypeGpuRecoveryAction;
constexpr unsigned long long kSupportedClockEventReasons = 0xff;  // all but DisplayClockSetting

std::mutex g_init_mu;
int g_refcount = 0;                      // guarded by g_init_mu
sim::StateMapping* g_mapping = nullptr;  // guarded by g_init_mu
std::atomic<FakeStateLayout*> g_layout{nullptr};
std::atomic<int> g_active_calls{0};
nvmlDevice_st g_devices[sim::kMaxGpus];
// MIG device handles: one per (GPU, MIG slot), distinct from every parent handle like the real
// library's. index = gpu * kMaxMigInstances + slot (slot = position in GpuConfig::mig).
constexpr uint32_t kMigDeviceMagic = 0x4e564d47;  // "NVMG"
nvmlDevice_st g_mig_devices[sim::kMaxGpus * sim::kMaxMigInstances];

// Counts calls in flight so nvmlShutdown never unmaps under a blocked (hung) call.
class CallScope {
 public:
  CallScope() { g_active_calls.fetch_add(1, std::memory_order_seq_cst); }
  ~CallScope() { g_active_calls.fetch_sub(1, std::memory_order_seq_cst); }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
};

void SleepNs(int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

struct Device {
  FakeStateLayout* layout = nullptr;
  GpuSlot* slot = nullptr;
  uint32_t index = 0;
  GpuConfig config;
};

uint32_t GpuCount(const FakeStateLayout* layout) { return std::min(layout->header.gpu_count, sim::kMaxGpus); }

bool ValidDevice(const FakeStateLayout* layout, nvmlDevice_t device) {
  const auto p = reinterpret_cast<uintptr_t>(device);
  const auto lo = reinterpret_cast<uintptr_t>(&g_devices[0]);
  const auto hi = reinterpret_cast<uintptr_t>(&g_devices[sim::kMaxGpus]);
  if (p < lo || p >= hi || (p - lo) % sizeof(nvmlDevice_st) != 0) return false;
  return device->magic == kDeviceMagic && device->index < GpuCount(layout);
}

// The faults every device call goes through, in the driver's order: a hung GPU blocks, a slow
// one delays, a lost one fails, an unsupported function fails.
nvmlReturn_t ApplyFaults(GpuSlot* slot, size_t fn_index) {
  if (sim::LoadU32(&slot->faults.hang) != 0) {
    const int64_t start = sim::RealtimeNs();
    while (sim::LoadU32(&slot->faults.hang) != 0) {
      if (sim::RealtimeNs() - start > kMaxHangNs) return NVML_ERROR_TIMEOUT;
      SleepNs(1'000'000);
    }
  }
  const uint32_t slow_us = std::min<uint32_t>(sim::LoadU32(&slot->faults.slow_call_us), 120'000'000);
  SleepNs(static_cast<int64_t>(slow_us) * 1000);
  if (sim::LoadU32(&slot->faults.lost) != 0) return NVML_ERROR_GPU_IS_LOST;
  const uint64_t mask = sim::LoadU64(&slot->faults.nvml_not_supported[fn_index / 64]);
  if (mask & (1ULL << (fn_index % 64))) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

nvmlReturn_t EnterDevice(size_t fn_index, nvmlDevice_t device, Device* out) {
  FakeStateLayout* layout = g_layout.load(std::memory_order_seq_cst);
  if (layout == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (!ValidDevice(layout, device)) return NVML_ERROR_INVALID_ARGUMENT;
  out->layout = layout;
  out->index = device->index;
  out->slot = &layout->gpus[device->index];
  if (nvmlReturn_t r = ApplyFaults(out->slot, fn_index); r != NVML_SUCCESS) return r;
  if (!sim::ReadConfig(*out->slot, &out->config)) return NVML_ERROR_UNKNOWN;
  return NVML_SUCCESS;
}

nvmlReturn_t EnterGlobal(FakeStateLayout** layout) {
  *layout = g_layout.load(std::memory_order_seq_cst);
  return *layout == nullptr ? NVML_ERROR_UNINITIALIZED : NVML_SUCCESS;
}

nvmlReturn_t CopyString(const char* src, char* buf, unsigned length) {
  if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const size_t n = strnlen(src, 256);
  if (length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, src, n);
  buf[n] = '\0';
  return NVML_SUCCESS;
}

bool Derive(const Device& d, sim::Derived* out) {
  return sim::ComputeDerived(*d.layout, *d.slot, d.config, sim::RealtimeNs(), out);
}

bool MigEnabled(const GpuConfig& c) { return c.mig_mode_current == NVML_DEVICE_MIG_ENABLE; }

bool IsMigHandle(nvmlDevice_t device) {
  const auto p = reinterpret_cast<uintptr_t>(device);
  const auto lo = reinterpret_cast<uintptr_t>(&g_mig_devices[0]);
  const auto hi = reinterpret_cast<uintptr_t>(&g_mig_devices[sim::kMaxGpus * sim::kMaxMigInstances]);
  return p >= lo && p < hi && (p - lo) % sizeof(nvmlDevice_st) == 0 && device->magic == kMigDeviceMagic;
}

uint32_t MigCount(const GpuConfig& c) {
  return MigEnabled(c) ? std::min(c.mig_instance_count, sim::kMaxMigInstances) : 0;
}

// Resolves a MIG handle to its parent (faults apply as the parent's) and its instance. A handle
// whose instance no longer exists (MIG reconfigured or off) is INVALID_ARGUMENT, as a stale
// handle is for the real library.
nvmlReturn_t EnterMig(size_t fn_index, nvmlDevice_t device, Device* out, sim::MigInstance* mig) {
  FakeStateLayout* layout = g_layout.load(std::memory_order_seq_cst);
  if (layout == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (!IsMigHandle(device)) return NVML_ERROR_INVALID_ARGUMENT;
  const uint32_t gpu = device->index / sim::kMaxMigInstances;
  const uint32_t slot = device->index % sim::kMaxMigInstances;
  if (gpu >= GpuCount(layout)) return NVML_ERROR_INVALID_ARGUMENT;
  out->layout = layout;
  out->index = gpu;
  out->slot = &layout->gpus[gpu];
  if (nvmlReturn_t r = ApplyFaults(out->slot, fn_index); r != NVML_SUCCESS) return r;
  if (!sim::ReadConfig(*out->slot, &out->config)) return NVML_ERROR_UNKNOWN;
  if (slot >= MigCount(out->config)) return NVML_ERROR_INVALID_ARGUMENT;
  *mig = out->config.mig[slot];
  return NVML_SUCCESS;
}

// An instance's memory: its share of the board by compute slices (7 = the whole GPU).
uint64_t MigMemoryTotal(const GpuConfig& c, const sim::MigInstance& m) {
  return c.memory_total_bytes / 7 * std::min<uint32_t>(m.slices, 7);
}

// Memory belongs to the GPU instance (compute instances share it).
uint64_t MigProcessMemory(const GpuConfig& c, const sim::MigInstance& m) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < c.process_count && i < sim::kMaxProcesses; ++i) {
    if (c.processes[i].gpu_instance_id == m.gpu_instance_id) sum += c.processes[i].used_bytes;
  }
  return sum;
}

// "MIG-" + the parent's UUID body with its last four hex digits replaced by gi/ci: distinct per
// instance and per parent, stable across calls.
void MigUuid(const GpuConfig& c, const sim::MigInstance& m, char* out, size_t cap) {
  std::string body(c.uuid, strnlen(c.uuid, sizeof(c.uuid)));
  if (body.rfind("GPU-", 0) == 0) body.erase(0, 4);
  char tail[8];
  std::snprintf(tail, sizeof(tail), "%02x%02x", m.gpu_instance_id & 0xff, m.compute_instance_id & 0xff);
  if (body.size() >= 4) body.replace(body.size() - 4, 4, tail);
  std::snprintf(out, cap, "MIG-%s", body.c_str());
}

unsigned long long EccSum(const GpuConfig& c, int type, int counter) {
  unsigned long long sum = 0;
  for (uint32_t l = 0; l < sim::kEccLocations; ++l) sum += c.ecc[type][counter][l];
  return sum;
}

unsigned long long NvLinkErrorSum(const GpuConfig& c, int counter) {
  unsigned long long sum = 0;
  for (uint32_t l = 0; l < c.nvlink_count; ++l) sum += c.nvlink[l].errors[counter];
  return sum;
}

uint64_t ProcessMemory(const GpuConfig& c) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < c.process_count && i < sim::kMaxProcesses; ++i) sum += c.processes[i].used_bytes;
  return sum;
}

// Parses "DDDDDDDD:BB:DD.F" or "DDDD:BB:DD.F" (hex, any case).
bool ParseBusId(const char* s, unsigned* domain, unsigned* bus, unsigned* device) {
  unsigned fn = 0;
  char tail = 0;
  return std::sscanf(s, "%x:%x:%x.%x%c", domain, bus, device, &fn, &tail) == 4;
}

void FillPciInfo(const GpuConfig& c, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04x:%02x:%02x.0", c.pci_domain & 0xffff,
                c.pci_bus, c.pci_device);
  pci->domain = c.pci_domain;
  pci->bus = c.pci_bus;
  pci->device = c.pci_device;
  pci->pciDeviceId = c.pci_device_id;
  pci->pciSubSystemId = c.pci_subsystem_id;
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", c.pci_bus_id);
}

unsigned Percent(double fraction) {
  return static_cast<unsigned>(std::lround(std::clamp(fraction, 0.0, 1.0) * 100.0));
}

long long NowUs() { return sim::RealtimeNs() / 1000; }

}  // namespace

// Checks the export against its typedef and kSymbols, counts the call, applies init + faults.
#define FAKE_CHECK_EXPORT(fn)                                                              \
  static_assert(std::is_same_v<decltype(&(fn)), fn##_fn>, #fn " differs from nvml_abi.h"); \
  constexpr size_t kFnIndex = SymbolIndex(#fn);                                            \
  static_assert(kFnIndex < kSymbols.size(), #fn " is missing from kSymbols")

#define FAKE_ENTER_DEVICE(fn, device) \
  FAKE_CHECK_EXPORT(fn);              \
  CallScope call_scope;               \
  Device d;                           \
  if (nvmlReturn_t r_ = EnterDevice(kFnIndex, (device), &d); r_ != NVML_SUCCESS) return r_

// For calls that also answer on a MIG device handle: is_mig / mig describe the instance, d its parent.
#define FAKE_ENTER_DEVICE_OR_MIG(fn, device)                                                        \
  FAKE_CHECK_EXPORT(fn);                                                                            \
  CallScope call_scope;                                                                             \
  Device d;                                                                                         \
  sim::MigInstance mig{};                                                                           \
  const bool is_mig = IsMigHandle(device);                                                          \
  if (nvmlReturn_t r_ = is_mig ? EnterMig(kFnIndex, (device), &d, &mig) : EnterDevice(kFnIndex, (device), &d); \
      r_ != NVML_SUCCESS)                                                                           \
  return r_

#define FAKE_ENTER_GLOBAL(fn)        \
  FAKE_CHECK_EXPORT(fn);             \
  (void)kFnIndex;                    \
  CallScope call_scope;              \
  FakeStateLayout* layout = nullptr; \
  if (nvmlReturn_t r_ = EnterGlobal(&layout); r_ != NVML_SUCCESS) return r_

#define FAKE_CHECK_VERSION(ptr, expected)                   \
  if ((ptr) == nullptr) return NVML_ERROR_INVALID_ARGUMENT; \
  if ((ptr)->version != (expected)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH

// Built with hidden visibility; the exports are the NVML functions below (exports.map filters too).
// The exports carry NVIDIA's names.
// NOLINTBEGIN(readability-identifier-naming)
#pragma GCC visibility push(default)
extern "C" {

// ---------------------------------------------------------------------------------------------
// Init / system

static nvmlReturn_t InitLocked() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_refcount > 0) {
    ++g_refcount;
    return NVML_SUCCESS;
  }
  auto* mapping = new sim::StateMapping();
  std::string error;
  const char* path = std::getenv("ITHBAT_FAKE_STATE");
  bool ok;
  if (path != nullptr && *path != '\0' && access(path, F_OK) == 0) {
    ok = mapping->Open(path, &error);
  } else {
    // No state file: eight idle H100 SXM, distinct per host.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const sim::GpuModel models[8] = {
        sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm,
        sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm, sim::GpuModel::kH100Sxm};
    ok = mapping->CreateAnonymous(models, 8, host, &error);
  }
  if (!ok) {
    delete mapping;
    std::fprintf(stderr, "fake libnvidia-ml: %s\n", error.c_str());
    return error.find("version") != std::string::npos ? NVML_ERROR_LIB_RM_VERSION_MISMATCH
                                                      : NVML_ERROR_UNKNOWN;
  }
  for (uint32_t i = 0; i < sim::kMaxGpus; ++i) g_devices[i] = nvmlDevice_st{kDeviceMagic, i};
  for (uint32_t i = 0; i < sim::kMaxGpus * sim::kMaxMigInstances; ++i) {
    g_mig_devices[i] = nvmlDevice_st{kMigDeviceMagic, i};
  }
  g_mapping = mapping;
  g_refcount = 1;
  g_layout.store(mapping->layout(), std::memory_order_seq_cst);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
  FAKE_CHECK_EXPORT(nvmlInit_v2);
  return InitLocked();
}

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
  FAKE_CHECK_EXPORT(nvmlInitWithFlags);
  if (flags & ~(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH | NVML_INIT_FLAG_FORCE_INIT)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return InitLocked();
}

nvmlReturn_t nvmlShutdown(void) {
  FAKE_CHECK_EXPORT(nvmlShutdown);
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
  if (--g_refcount > 0) return NVML_SUCCESS;
  g_layout.store(nullptr, std::memory_order_seq_cst);
  // A call still blocked in the mapping (a hang) keeps it: leak rather than unmap under it.
  if (g_active_calls.load(std::memory_order_seq_cst) != 0) g_mapping->Leak();
  delete g_mapping;
  g_mapping = nullptr;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  FAKE_CHECK_EXPORT(nvmlErrorString);
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "ECC is not supported on vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED:
      return "Deprecated";
    case NVML_ERROR_NOT_READY:
      return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "GPU not found";
    case NVML_ERROR_INVALID_STATE:
      return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "Reset type not supported";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  FAKE_ENTER_GLOBAL(nvmlSystemGetDriverVersion);
  char copy[sizeof(layout->header.driver_version)];
  std::memcpy(copy, layout->header.driver_version, sizeof(copy));
  copy[sizeof(copy) - 1] = '\0';
  return CopyString(copy, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cuda_driver_version) {
  FAKE_ENTER_GLOBAL(nvmlSystemGetCudaDriverVersion_v2);
  if (cuda_driver_version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *cuda_driver_version = layout->header.cuda_driver_version;
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Handles and identity

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* device_count) {
  FAKE_ENTER_GLOBAL(nvmlDeviceGetCount_v2);
  if (device_count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *device_count = GpuCount(layout);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  FAKE_ENTER_GLOBAL(nvmlDeviceGetHandleByIndex_v2);
  if (device == nullptr || index >= GpuCount(layout)) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = ApplyFaults(&layout->gpus[index], kFnIndex); r != NVML_SUCCESS) return r;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  FAKE_ENTER_GLOBAL(nvmlDeviceGetHandleByUUID);
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < GpuCount(layout); ++i) {
    GpuConfig c;
    if (!sim::ReadConfig(layout->gpus[i], &c)) return NVML_ERROR_UNKNOWN;
    if (strncmp(c.uuid, uuid, sizeof(c.uuid)) == 0) {
      if (nvmlReturn_t r = ApplyFaults(&layout->gpus[i], kFnIndex); r != NVML_SUCCESS) return r;
      *device = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id, nvmlDevice_t* device) {
  FAKE_ENTER_GLOBAL(nvmlDeviceGetHandleByPciBusId_v2);
  if (pci_bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, dev = 0;
  if (!ParseBusId(pci_bus_id, &domain, &bus, &dev)) return NVML_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < GpuCount(layout); ++i) {
    GpuConfig c;
    if (!sim::ReadConfig(layout->gpus[i], &c)) return NVML_ERROR_UNKNOWN;
    if (c.pci_domain == domain && c.pci_bus == bus && c.pci_device == dev) {
      if (nvmlReturn_t r = ApplyFaults(&layout->gpus[i], kFnIndex); r != NVML_SUCCESS) return r;
      *device = &g_devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetIndex, device);
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = d.index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetUUID, device);
  if (is_mig) {
    char mig_uuid[96];
    MigUuid(d.config, mig, mig_uuid, sizeof(mig_uuid));
    return CopyString(mig_uuid, uuid, length);
  }
  return CopyString(d.config.uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetName, device);
  return CopyString(d.config.name, name, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned length) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetSerial, device);
  return CopyString(d.config.serial, serial, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPciInfo_v3, device);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  FillPciInfo(d.config, pci);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t* pci) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPciInfoExt, device);
  FAKE_CHECK_VERSION(pci, nvmlPciInfoExt_v1);
  pci->domain = d.config.pci_domain;
  pci->bus = d.config.pci_bus;
  pci->device = d.config.pci_device;
  pci->pciDeviceId = d.config.pci_device_id;
  pci->pciSubSystemId = d.config.pci_subsystem_id;
  pci->baseClass = 0x03;  // display controller
  pci->subClass = 0x02;   // 3D controller
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", d.config.pci_bus_id);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetArchitecture, device);
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = d.config.architecture;
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Utilisation, memory, clocks, power, temperature

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetUtilizationRates, device);
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // Neither the partitioned parent nor a MIG device answers (§1: GPM per instance instead).
  if (is_mig || MigEnabled(d.config)) return NVML_ERROR_NOT_SUPPORTED;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  utilization->gpu = Percent(v.util_busy);
  utilization->memory = Percent(v.util_dram);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetMemoryInfo, device);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (is_mig) {
    const uint64_t total = MigMemoryTotal(d.config, mig);
    const uint64_t used = std::min(total, MigProcessMemory(d.config, mig));
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  }
  // v1 folds the driver's reservation into "used".
  const uint64_t used =
      std::min(d.config.memory_total_bytes, d.config.memory_reserved_bytes + ProcessMemory(d.config));
  memory->total = d.config.memory_total_bytes;
  memory->used = used;
  memory->free = d.config.memory_total_bytes - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetMemoryInfo_v2, device);
  FAKE_CHECK_VERSION(memory, nvmlMemory_v2);
  if (is_mig) {
    const uint64_t total = MigMemoryTotal(d.config, mig);
    const uint64_t used = std::min(total, MigProcessMemory(d.config, mig));
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
  }
  const uint64_t total = d.config.memory_total_bytes;
  const uint64_t reserved = std::min(total, d.config.memory_reserved_bytes);
  const uint64_t used = std::min(total - reserved, ProcessMemory(d.config));
  memory->total = total;
  memory->reserved = reserved;
  memory->used = used;
  memory->free = total - reserved - used;
  return NVML_SUCCESS;
}

static nvmlReturn_t CurrentClock(const Device& d, nvmlClockType_t type, unsigned* mhz) {
  if (mhz == nullptr || type < NVML_CLOCK_GRAPHICS || type > NVML_CLOCK_VIDEO)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (type == NVML_CLOCK_MEM || type == NVML_CLOCK_VIDEO) {
    *mhz = d.config.max_clock_mhz[type];
    return NVML_SUCCESS;
  }
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  *mhz = v.sm_clock_mhz;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock_mhz) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetClockInfo, device);
  return CurrentClock(d, type, clock_mhz);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock_mhz) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMaxClockInfo, device);
  if (clock_mhz == nullptr || type < NVML_CLOCK_GRAPHICS || type > NVML_CLOCK_VIDEO) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *clock_mhz = d.config.max_clock_mhz[type];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id,
                                unsigned* clock_mhz) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetClock, device);
  if (clock_mhz == nullptr || type < NVML_CLOCK_GRAPHICS || type > NVML_CLOCK_VIDEO) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  switch (id) {
    case NVML_CLOCK_ID_CURRENT:
      return CurrentClock(d, type, clock_mhz);
    case NVML_CLOCK_ID_APP_CLOCK_TARGET:
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
      *clock_mhz = d.config.max_clock_mhz[type];
      return NVML_SUCCESS;
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power_mw) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPowerUsage, device);
  if (power_mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  *power_mw = static_cast<unsigned>(std::lround(v.power_average_mw));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy_mj) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetTotalEnergyConsumption, device);
  if (energy_mj == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  *energy_mj = static_cast<unsigned long long>(v.energy_mj);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned* limit_mw) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetEnforcedPowerLimit, device);
  if (limit_mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *limit_mw = d.config.power_limit_mw;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t* temperature) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetTemperatureV, device);
  FAKE_CHECK_VERSION(temperature, nvmlTemperature_v1);
  if (temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  temperature->temperature = static_cast<int>(std::lround(v.temperature_c));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned* temp_c) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetTemperature, device);
  if (temp_c == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  *temp_c = static_cast<unsigned>(std::max(0L, std::lround(v.temperature_c)));
  return NVML_SUCCESS;
}

static nvmlReturn_t ClockEventReasons(const Device& d, unsigned long long* reasons) {
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived v;
  if (!Derive(d, &v)) return NVML_ERROR_UNKNOWN;
  *reasons = v.clock_event_reasons & kSupportedClockEventReasons;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetCurrentClocksEventReasons, device);
  return ClockEventReasons(d, reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetCurrentClocksThrottleReasons, device);
  return ClockEventReasons(d, reasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetSupportedClocksEventReasons, device);
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = kSupportedClockEventReasons;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetSupportedClocksThrottleReasons, device);
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = kSupportedClockEventReasons;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pstate) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPerformanceState, device);
  if (pstate == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pstate = NVML_PSTATE_0;  // data-center boards stay in P0 while the driver is loaded
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// ECC, retired pages, row remapping

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                  nvmlEnableState_t* pending) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetEccMode, device);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = static_cast<nvmlEnableState_t>(d.config.ecc_mode_current);
  *pending = static_cast<nvmlEnableState_t>(d.config.ecc_mode_pending);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                         nvmlEccCounterType_t counter_type, unsigned long long* count) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetTotalEccErrors, device);
  if (count == nullptr || error_type < 0 || error_type >= NVML_MEMORY_ERROR_TYPE_COUNT || counter_type < 0 ||
      counter_type >= NVML_ECC_COUNTER_TYPE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (d.config.ecc_mode_current != NVML_FEATURE_ENABLED) return NVML_ERROR_NOT_SUPPORTED;
  *count = EccSum(d.config, error_type, counter_type);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                             nvmlEccCounterType_t counter_type, nvmlMemoryLocation_t location,
                                             unsigned long long* count) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMemoryErrorCounter, device);
  if (count == nullptr || error_type < 0 || error_type >= NVML_MEMORY_ERROR_TYPE_COUNT || counter_type < 0 ||
      counter_type >= NVML_ECC_COUNTER_TYPE_COUNT || location < 0 || location >= NVML_MEMORY_LOCATION_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (d.config.ecc_mode_current != NVML_FEATURE_ENABLED) return NVML_ERROR_NOT_SUPPORTED;
  *count = d.config.ecc[error_type][counter_type][location];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t* status) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetSramEccErrorStatus, device);
  FAKE_CHECK_VERSION(status, nvmlEccSramErrorStatus_v1);
  const auto& e = d.config.ecc;
  auto on_chip = [&](int type, int counter) {
    unsigned long long sum = 0;
    for (int l = 0; l < NVML_MEMORY_LOCATION_COUNT; ++l) {
      if (l != NVML_MEMORY_LOCATION_DRAM) sum += e[type][counter][l];
    }
    return sum;
  };
  constexpr int kUnc = NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
  constexpr int kAgg = NVML_AGGREGATE_ECC;
  status->aggregateUncParity = 0;
  status->aggregateUncSecDed = on_chip(kUnc, kAgg);
  status->aggregateCor = on_chip(NVML_MEMORY_ERROR_TYPE_CORRECTED, kAgg);
  status->volatileUncParity = 0;
  status->volatileUncSecDed = on_chip(kUnc, NVML_VOLATILE_ECC);
  status->volatileCor = on_chip(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC);
  status->aggregateUncBucketL2 = e[kUnc][kAgg][NVML_MEMORY_LOCATION_L2_CACHE];
  status->aggregateUncBucketSm =
      e[kUnc][kAgg][NVML_MEMORY_LOCATION_L1_CACHE] + e[kUnc][kAgg][NVML_MEMORY_LOCATION_REGISTER_FILE] +
      e[kUnc][kAgg][NVML_MEMORY_LOCATION_TEXTURE_MEMORY] + e[kUnc][kAgg][NVML_MEMORY_LOCATION_TEXTURE_SHM];
  status->aggregateUncBucketPcie = 0;
  status->aggregateUncBucketMcu = 0;
  status->aggregateUncBucketOther =
      e[kUnc][kAgg][NVML_MEMORY_LOCATION_CBU] + e[kUnc][kAgg][NVML_MEMORY_LOCATION_SRAM];
  status->bThresholdExceeded = d.config.sram_threshold_exceeded;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                          unsigned* page_count, unsigned long long* addresses,
                                          unsigned long long* timestamps) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetRetiredPages_v2, device);
  if (page_count == nullptr || cause < 0 || cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const unsigned n = std::min(d.config.retired_count[cause], sim::kMaxRetiredPages);
  if (*page_count < n || (n > 0 && addresses == nullptr)) {
    *page_count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; ++i) {
    addresses[i] = d.config.retired_address[cause][i];
    if (timestamps != nullptr) timestamps[i] = d.config.retired_time_us[cause][i];
  }
  *page_count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t* is_pending) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetRetiredPagesPendingStatus, device);
  if (is_pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *is_pending = d.config.retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned* corr_rows, unsigned* unc_rows,
                                       unsigned* is_pending, unsigned* failure_occurred) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetRemappedRows, device);
  if (corr_rows == nullptr || unc_rows == nullptr || is_pending == nullptr || failure_occurred == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (MigEnabled(d.config)) return NVML_ERROR_NOT_SUPPORTED;
  *corr_rows = d.config.remap_corr;
  *unc_rows = d.config.remap_unc;
  *is_pending = d.config.remap_pending;
  *failure_occurred = d.config.remap_failure;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device,
                                               nvmlRowRemapperHistogramValues_t* values) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetRowRemapperHistogram, device);
  if (values == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint32_t* h = d.config.remap_histogram;
  *values = nvmlRowRemapperHistogramValues_t{h[0], h[1], h[2], h[3], h[4]};
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Events

static bool ValidEventSet(nvmlEventSet_t set) { return set != nullptr && set->magic == kEventSetMagic; }

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_ENTER_GLOBAL(nvmlEventSetCreate);
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new nvmlEventSet_st();
  s->magic = kEventSetMagic;
  s->cursor = sim::EventHead(layout->events);  // only events from now on, like the driver
  *set = s;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* event_types) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetSupportedEventTypes, device);
  if (event_types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *event_types = kSupportedEvents;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long event_types,
                                      nvmlEventSet_t set) {
  FAKE_ENTER_DEVICE(nvmlDeviceRegisterEvents, device);
  if (!ValidEventSet(set)) return NVML_ERROR_INVALID_ARGUMENT;
  {
    std::lock_guard<std::mutex> lock(set->mu);
    set->registered[d.index] |= event_types & kSupportedEvents;
  }
  // Unsupported bits fail the call but the supported ones stay registered (§1.3).
  return (event_types & ~kSupportedEvents) != 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
  FAKE_CHECK_EXPORT(nvmlEventSetWait_v2);
  (void)kFnIndex;
  CallScope call_scope;
  if (!ValidEventSet(set) || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int64_t deadline = sim::RealtimeNs() + static_cast<int64_t>(timeout_ms) * 1'000'000;
  for (;;) {
    FakeStateLayout* layout = g_layout.load(std::memory_order_seq_cst);
    if (layout == nullptr) return NVML_ERROR_UNINITIALIZED;
    {
      // Held while scanning only, so registering devices while a thread waits does not block.
      std::lock_guard<std::mutex> lock(set->mu);
      const uint64_t head = sim::EventHead(layout->events);
      // A reader that fell a whole ring behind lost the oldest events (the driver drops too).
      if (head - set->cursor > sim::kEventCapacity) set->cursor = head - sim::kEventCapacity;
      while (set->cursor < head) {
        sim::EventRecord e;
        const bool ok = sim::ReadEvent(layout->events, set->cursor, &e);
        ++set->cursor;
        if (!ok || e.gpu >= GpuCount(layout)) continue;
        if ((set->registered[e.gpu] & e.type) == 0) continue;
        data->device = &g_devices[e.gpu];
        data->eventType = e.type;
        data->eventData = e.data;
        data->gpuInstanceId = e.gpu_instance_id;
        data->computeInstanceId = e.compute_instance_id;
        return NVML_SUCCESS;
      }
    }
    const int64_t left = deadline - sim::RealtimeNs();
    if (left <= 0) return NVML_ERROR_TIMEOUT;
    SleepNs(std::min<int64_t>(left, 1'000'000));
  }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  FAKE_ENTER_GLOBAL(nvmlEventSetFree);
  (void)layout;
  if (!ValidEventSet(set)) return NVML_ERROR_INVALID_ARGUMENT;
  set->magic = 0;
  delete set;
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// NVLink

#define FAKE_CHECK_LINK(link) \
  if ((link) >= d.config.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, nvmlEnableState_t* is_active) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetNvLinkState, device);
  FAKE_CHECK_LINK(link);
  if (is_active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *is_active = d.config.nvlink[link].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned link,
                                             nvmlNvLinkErrorCounter_t counter, unsigned long long* value) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetNvLinkErrorCounter, device);
  FAKE_CHECK_LINK(link);
  if (value == nullptr || counter < 0 || counter >= NVML_NVLINK_ERROR_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  *value = d.config.nvlink[link].errors[counter];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned link, unsigned* version) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetNvLinkVersion, device);
  FAKE_CHECK_LINK(link);
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = d.config.nvlink[link].version;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link, nvmlPciInfo_t* pci) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetNvLinkRemotePciInfo_v2, device);
  FAKE_CHECK_LINK(link);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof(*pci));
  unsigned domain = 0, bus = 0, dev = 0;
  char remote[sizeof(d.config.nvlink[link].remote_bus_id)];
  std::memcpy(remote, d.config.nvlink[link].remote_bus_id, sizeof(remote));
  remote[sizeof(remote) - 1] = '\0';
  if (ParseBusId(remote, &domain, &bus, &dev)) {
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04x:%02x:%02x.0", domain & 0xffff, bus, dev);
  }
  pci->pciDeviceId = 0x22a310de;  // NVSwitch (third generation)
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", remote);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkUtilizationCounter(nvmlDevice_t device, unsigned link, unsigned counter,
                                                   unsigned long long* rx, unsigned long long* tx) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetNvLinkUtilizationCounter, device);
  (void)link;
  (void)counter;
  (void)rx;
  (void)tx;
  // Deprecated; the throughput field values (138-141) replaced it and newer GPUs lack it.
  return NVML_ERROR_NOT_SUPPORTED;
}

// ---------------------------------------------------------------------------------------------
// PCIe

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned* value) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPcieReplayCounter, device);
  if (value == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *value = d.config.pcie_replay;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                         unsigned* value_kbps) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetPcieThroughput, device);
  if (value_kbps == nullptr || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  // Like the driver: the call itself samples for 20 ms.
  constexpr int64_t kSampleNs = 20'000'000;
  const uint64_t before =
      counter == NVML_PCIE_UTIL_TX_BYTES ? d.config.pcie_tx_bytes : d.config.pcie_rx_bytes;
  SleepNs(kSampleNs);
  GpuConfig after;
  if (!sim::ReadConfig(*d.slot, &after)) return NVML_ERROR_UNKNOWN;
  const uint64_t now = counter == NVML_PCIE_UTIL_TX_BYTES ? after.pcie_tx_bytes : after.pcie_rx_bytes;
  const double kib_per_s = static_cast<double>(now - before) / 1024.0 / (kSampleNs / 1e9);
  *value_kbps = static_cast<unsigned>(std::min(kib_per_s, 4.0e9));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned* gen) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetCurrPcieLinkGeneration, device);
  if (gen == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *gen = d.config.pcie_gen_cur;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned* width) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetCurrPcieLinkWidth, device);
  if (width == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *width = d.config.pcie_width_cur;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned* gen) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMaxPcieLinkGeneration, device);
  if (gen == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *gen = d.config.pcie_gen_max;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned* width) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMaxPcieLinkWidth, device);
  if (width == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *width = d.config.pcie_width_max;
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Processes

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* info_count,
                                                     nvmlProcessInfo_t* infos) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetComputeRunningProcesses_v3, device);
  if (info_count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // On a MIG device: only the processes on that instance.
  const sim::ProcessEntry* listed[sim::kMaxProcesses];
  unsigned n = 0;
  for (uint32_t i = 0; i < std::min(d.config.process_count, sim::kMaxProcesses); ++i) {
    const sim::ProcessEntry& p = d.config.processes[i];
    if (is_mig && (p.gpu_instance_id != mig.gpu_instance_id || p.compute_instance_id != mig.compute_instance_id))
      continue;
    listed[n++] = &p;
  }
  if (*info_count < n) {
    *info_count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < n; ++i) {
    const sim::ProcessEntry& p = *listed[i];
    infos[i] = nvmlProcessInfo_t{p.pid, p.used_bytes, p.gpu_instance_id, p.compute_instance_id};
  }
  *info_count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                   nvmlProcessesUtilizationInfo_t* info) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetProcessesUtilizationInfo, device);
  FAKE_CHECK_VERSION(info, nvmlProcessesUtilizationInfo_v1);
  if (MigEnabled(d.config)) return NVML_ERROR_NOT_SUPPORTED;
  const unsigned n = std::min(d.config.process_count, sim::kMaxProcesses);
  if (info->procUtilArray == nullptr || info->processSamplesCount < n) {
    info->processSamplesCount = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  const int64_t now = sim::RealtimeNs();
  const double window = static_cast<double>(sim::kAverageWindowNs);
  for (unsigned i = 0; i < n; ++i) {
    const uint32_t pid = d.config.processes[i].pid;
    sim::WindowSums sums;
    if (!sim::SumWindow(*d.slot, d.config, now - sim::kAverageWindowNs, now, pid == 0 ? UINT32_MAX : pid,
                        &sums)) {
      return NVML_ERROR_UNKNOWN;
    }
    info->procUtilArray[i] = nvmlProcessUtilizationInfo_v1_t{static_cast<unsigned long long>(now / 1000),
                                                             pid,
                                                             Percent(sums.sm_ns / window),
                                                             Percent(sums.dram_ns / window),
                                                             0,
                                                             0,
                                                             0,
                                                             0};
  }
  info->processSamplesCount = n;
  info->lastSeenTimeStamp = static_cast<unsigned long long>(now / 1000);
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Field values

static void SetU(nvmlFieldValue_t* v, unsigned x) {
  v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
  v->value.uiVal = x;
}
static void SetULL(nvmlFieldValue_t* v, unsigned long long x) {
  v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
  v->value.ullVal = x;
}

static nvmlReturn_t FieldValue(const Device& d, sim::Derived* derived, bool* derived_ok,
                               nvmlFieldValue_t* v) {
  const GpuConfig& c = d.config;
  auto need_derived = [&]() {
    if (!*derived_ok) *derived_ok = Derive(d, derived);
    return *derived_ok;
  };
  const bool ecc = c.ecc_mode_current == NVML_FEATURE_ENABLED;
  constexpr int kCor = NVML_MEMORY_ERROR_TYPE_CORRECTED;
  constexpr int kUnc = NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
  constexpr int kVol = NVML_VOLATILE_ECC;
  constexpr int kAgg = NVML_AGGREGATE_ECC;
  constexpr int kL2 = NVML_MEMORY_LOCATION_L2_CACHE;
  constexpr int kDram = NVML_MEMORY_LOCATION_DRAM;
  const unsigned link = v->scopeId;
  switch (v->fieldId) {
    case NVML_FI_DEV_ECC_CURRENT:
      SetU(v, c.ecc_mode_current);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_PENDING:
      SetU(v, c.ecc_mode_pending);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: {
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      const unsigned id = v->fieldId;
      const int type =
          (id == NVML_FI_DEV_ECC_SBE_VOL_TOTAL || id == NVML_FI_DEV_ECC_SBE_AGG_TOTAL) ? kCor : kUnc;
      const int counter =
          (id == NVML_FI_DEV_ECC_SBE_VOL_TOTAL || id == NVML_FI_DEV_ECC_DBE_VOL_TOTAL) ? kVol : kAgg;
      SetULL(v, EccSum(c, type, counter));
      return NVML_SUCCESS;
    }
    case NVML_FI_DEV_ECC_SBE_VOL_L2:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kCor][kVol][kL2]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_VOL_L2:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kUnc][kVol][kL2]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_VOL_DEV:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kCor][kVol][kDram]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_VOL_DEV:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kUnc][kVol][kDram]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_AGG_L2:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kCor][kAgg][kL2]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_AGG_L2:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kUnc][kAgg][kL2]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_AGG_DEV:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kCor][kAgg][kDram]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_AGG_DEV:
      if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
      SetULL(v, c.ecc[kUnc][kAgg][kDram]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_SBE:
      SetULL(v, c.retired_count[0]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_DBE:
      SetULL(v, c.retired_count[1]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_PENDING:
      SetULL(v, c.retired_pending);
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
      SetULL(v, NvLinkErrorSum(c, NVML_NVLINK_ERROR_DL_CRC_FLIT));
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
      SetULL(v, NvLinkErrorSum(c, NVML_NVLINK_ERROR_DL_CRC_DATA));
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL:
      SetULL(v, NvLinkErrorSum(c, NVML_NVLINK_ERROR_DL_REPLAY));
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
      SetULL(v, NvLinkErrorSum(c, NVML_NVLINK_ERROR_DL_RECOVERY));
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL:
      SetULL(v, NvLinkErrorSum(c, NVML_NVLINK_ERROR_DL_ECC_DATA));
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC: {
      if (link >= c.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
      const int counter = v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY ? NVML_NVLINK_ERROR_DL_REPLAY
                          : v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY
                              ? NVML_NVLINK_ERROR_DL_RECOVERY
                              : NVML_NVLINK_ERROR_DL_CRC_FLIT;
      SetULL(v, c.nvlink[link].errors[counter]);
      return NVML_SUCCESS;
    }
    case NVML_FI_DEV_NVLINK_GET_SPEED:
      if (link >= c.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
      SetU(v, c.nvlink[link].speed_mbyte_s);
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_STATE:
      if (link >= c.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
      SetU(v, c.nvlink[link].active);
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_VERSION:
      if (link >= c.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
      SetU(v, c.nvlink[link].version);
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
      SetU(v, c.nvlink_count);
      return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: {
      const bool tx = v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
                      v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
      // scopeId picks one link; NVML_NVLINK_SCOPE_ALL_LINKS sums them.
      if (link != NVML_NVLINK_SCOPE_ALL_LINKS && link >= c.nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
      unsigned long long sum = 0;
      for (uint32_t l = 0; l < c.nvlink_count; ++l) {
        if (link == NVML_NVLINK_SCOPE_ALL_LINKS || l == link)
          sum += tx ? c.nvlink[l].tx_kib : c.nvlink[l].rx_kib;
      }
      // Raw counts protocol overhead on top of the payload (1/16 here).
      if (v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX ||
          v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX)
        sum += sum / 16;
      SetULL(v, sum);
      return NVML_SUCCESS;
    }
    case NVML_FI_DEV_MEMORY_TEMP:
      if (!need_derived()) return NVML_ERROR_UNKNOWN;
      SetU(v, static_cast<unsigned>(std::max(0L, std::lround(derived->memory_temperature_c))));
      return NVML_SUCCESS;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
      if (!need_derived()) return NVML_ERROR_UNKNOWN;
      SetULL(v, static_cast<unsigned long long>(derived->energy_mj));
      return NVML_SUCCESS;
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT:
      if (v->scopeId != 0) return NVML_ERROR_NOT_SUPPORTED;  // only the GPU scope is modelled
      // The 1 s average is "Ampere (except GA100) or newer" per the header.
      if (v->fieldId == NVML_FI_DEV_POWER_AVERAGE &&
          c.model == static_cast<uint32_t>(sim::GpuModel::kA100Sxm)) {
        return NVML_ERROR_NOT_SUPPORTED;
      }
      if (!need_derived()) return NVML_ERROR_UNKNOWN;
      SetU(v, static_cast<unsigned>(std::lround(v->fieldId == NVML_FI_DEV_POWER_AVERAGE
                                                    ? derived->power_average_mw
                                                    : derived->power_instant_mw)));
      return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
      SetU(v, c.pcie_replay);
      return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
      SetU(v, c.pcie_replay_rollover);
      return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER:
      SetU(v, c.pcie_l0_to_recovery);
      return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
      SetULL(v, c.pcie_tx_bytes);
      return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
      SetULL(v, c.pcie_rx_bytes);
      return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_COR:
      SetU(v, c.remap_corr);
      return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_UNC:
      SetU(v, c.remap_unc);
      return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_PENDING:
      SetU(v, c.remap_pending);
      return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_FAILURE:
      SetU(v, c.remap_failure);
      return NVML_SUCCESS;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
      SetU(v, c.recovery_action);
      return NVML_SUCCESS;
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN:
      SetULL(v, c.clock_event_ns[0]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN:
      SetULL(v, c.clock_event_ns[1]);
      return NVML_SUCCESS;
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN:
      SetULL(v, c.clock_event_ns[2]);
      return NVML_SUCCESS;
    default:
      if (v->fieldId >= NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS &&
          v->fieldId <= NVML_FI_DEV_PCIE_COUNT_LANE_ERROR) {
        SetULL(v, c.pcie_errors[v->fieldId - NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS]);
        return NVML_SUCCESS;
      }
      return v->fieldId >= NVML_FI_MAX ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
  }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int values_count, nvmlFieldValue_t* values) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetFieldValues, device);
  if (values_count < 0 || (values_count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
  sim::Derived derived;
  bool derived_ok = false;
  for (int i = 0; i < values_count; ++i) {
    nvmlFieldValue_t* v = &values[i];
    v->timestamp = NowUs();
    v->latencyUsec = 0;
    v->value.ullVal = 0;
    v->nvmlReturn = FieldValue(d, &derived, &derived_ok, v);
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current_mode, unsigned* pending_mode) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMigMode, device);
  if (current_mode == nullptr || pending_mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current_mode = d.config.mig_mode_current;
  *pending_mode = d.config.mig_mode_pending;
  return NVML_SUCCESS;
}

// MIG device enumeration. The max count is the populated-or-not slot count (kMaxMigInstances,
// as 7 on an H100) while MIG is on, 0 while it is off (SUCCESS either way, like the real one).
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned* count) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMaxMigDeviceCount, device);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = MigEnabled(d.config) ? sim::kMaxMigInstances : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index, nvmlDevice_t* mig_device) {
  FAKE_ENTER_DEVICE(nvmlDeviceGetMigDeviceHandleByIndex, device);
  if (mig_device == nullptr || index >= sim::kMaxMigInstances) return NVML_ERROR_INVALID_ARGUMENT;
  if (!MigEnabled(d.config)) return NVML_ERROR_NOT_SUPPORTED;
  if (index >= MigCount(d.config)) return NVML_ERROR_NOT_FOUND;
  *mig_device = &g_mig_devices[d.index * sim::kMaxMigInstances + index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned* is_mig_device) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceIsMigDeviceHandle, device);
  if (is_mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *is_mig_device = is_mig ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned* id) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetGpuInstanceId, device);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = mig.gpu_instance_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned* id) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetComputeInstanceId, device);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = mig.compute_instance_id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device, nvmlDevice_t* device) {
  FAKE_ENTER_DEVICE_OR_MIG(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, mig_device);
  if (device == nullptr || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[d.index];
  return NVML_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// GPM

static bool ValidSample(nvmlGpmSample_t s) { return s != nullptr && s->magic == kSampleMagic; }

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  FAKE_ENTER_DEVICE(nvmlGpmQueryDeviceSupport, device);
  FAKE_CHECK_VERSION(support, NVML_GPM_SUPPORT_VERSION);
  support->isSupportedDevice = d.config.gpm_supported ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  FAKE_ENTER_GLOBAL(nvmlGpmSampleAlloc);
  (void)layout;
  if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new nvmlGpmSample_st();
  s->magic = kSampleMagic;
  *sample = s;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  FAKE_ENTER_GLOBAL(nvmlGpmSampleFree);
  (void)layout;
  if (!ValidSample(sample)) return NVML_ERROR_INVALID_ARGUMENT;
  sample->magic = 0;
  delete sample;
  return NVML_SUCCESS;
}

static void TakeSample(const Device& d, nvmlGpmSample_t s) {
  s->taken = 1;
  s->gpu = d.index;
  s->time_ns = sim::RealtimeNs();
  s->pcie_tx_bytes = d.config.pcie_tx_bytes;
  s->pcie_rx_bytes = d.config.pcie_rx_bytes;
  for (uint32_t l = 0; l < sim::kMaxNvLinks; ++l) {
    s->nvlink_tx_kib[l] = d.config.nvlink[l].tx_kib;
    s->nvlink_rx_kib[l] = d.config.nvlink[l].rx_kib;
  }
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  FAKE_ENTER_DEVICE(nvmlGpmSampleGet, device);
  if (!ValidSample(sample)) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.config.gpm_supported) return NVML_ERROR_NOT_SUPPORTED;
  TakeSample(d, sample);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned gpu_instance_id, nvmlGpmSample_t sample) {
  FAKE_ENTER_DEVICE(nvmlGpmMigSampleGet, device);
  if (!ValidSample(sample)) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.config.gpm_supported || !MigEnabled(d.config)) return NVML_ERROR_NOT_SUPPORTED;
  bool found = false;
  for (uint32_t i = 0; i < d.config.mig_instance_count && i < sim::kMaxMigInstances; ++i) {
    found = found || d.config.mig[i].gpu_instance_id == gpu_instance_id;
  }
  if (!found) return NVML_ERROR_NOT_FOUND;
  // The timeline is per GPU: an instance sample reads the whole GPU's work.
  TakeSample(d, sample);
  return NVML_SUCCESS;
}

static const char* MetricName(unsigned id) {
  switch (id) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL:
      return "gr_util";
    case NVML_GPM_METRIC_SM_UTIL:
      return "sm_util";
    case NVML_GPM_METRIC_SM_OCCUPANCY:
      return "sm_occupancy";
    case NVML_GPM_METRIC_INTEGER_UTIL:
      return "integer_util";
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL:
      return "any_tensor_util";
    case NVML_GPM_METRIC_DFMA_TENSOR_UTIL:
      return "dfma_tensor_util";
    case NVML_GPM_METRIC_HMMA_TENSOR_UTIL:
      return "hmma_tensor_util";
    case NVML_GPM_METRIC_DMMA_TENSOR_UTIL:
      return "dmma_tensor_util";
    case NVML_GPM_METRIC_IMMA_TENSOR_UTIL:
      return "imma_tensor_util";
    case NVML_GPM_METRIC_DRAM_BW_UTIL:
      return "dram_bw_util";
    case NVML_GPM_METRIC_FP64_UTIL:
      return "fp64_util";
    case NVML_GPM_METRIC_FP32_UTIL:
      return "fp32_util";
    case NVML_GPM_METRIC_FP16_UTIL:
      return "fp16_util";
    case NVML_GPM_METRIC_PCIE_TX_PER_SEC:
      return "pcie_tx_per_sec";
    case NVML_GPM_METRIC_PCIE_RX_PER_SEC:
      return "pcie_rx_per_sec";
    case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
      return "nvlink_total_rx_per_sec";
    case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
      return "nvlink_total_tx_per_sec";
    default:
      return nullptr;
  }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* m) {
  FAKE_ENTER_GLOBAL(nvmlGpmMetricsGet);
  FAKE_CHECK_VERSION(m, NVML_GPM_METRICS_GET_VERSION);
  if (m->numMetrics > static_cast<unsigned>(NVML_GPM_METRIC_MAX_OLDEST)) return NVML_ERROR_INVALID_ARGUMENT;
  const nvmlGpmSample_t s1 = m->sample1;
  const nvmlGpmSample_t s2 = m->sample2;
  if (!ValidSample(s1) || !ValidSample(s2) || !s1->taken || !s2->taken || s1->gpu != s2->gpu ||
      s2->time_ns <= s1->time_ns || s1->gpu >= GpuCount(layout)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  GpuSlot& slot = layout->gpus[s1->gpu];
  GpuConfig c;
  if (!sim::ReadConfig(slot, &c)) return NVML_ERROR_UNKNOWN;
  sim::WindowSums w;
  if (!sim::SumWindow(slot, c, s1->time_ns, s2->time_ns, 0, &w)) return NVML_ERROR_UNKNOWN;
  const double dt_ns = static_cast<double>(s2->time_ns - s1->time_ns);
  const double dt_s = dt_ns / 1e9;
  auto pct = [&](double ns) { return std::clamp(ns / dt_ns, 0.0, 1.0) * 100.0; };
  auto mib_per_s = [&](unsigned long long a, unsigned long long b, double unit_bytes) {
    return b >= a ? static_cast<double>(b - a) * unit_bytes / (1024.0 * 1024.0) / dt_s : 0.0;
  };
  for (unsigned i = 0; i < m->numMetrics; ++i) {
    nvmlGpmMetric_t& metric = m->metrics[i];
    const unsigned id = metric.metricId;
    metric.nvmlReturn = NVML_SUCCESS;
    metric.value = 0;
    metric.metricInfo = nvmlGpmMetricInfo_t{const_cast<char*>(MetricName(id)),
                                            const_cast<char*>(MetricName(id)), const_cast<char*>("%")};
    switch (id) {
      case NVML_GPM_METRIC_GRAPHICS_UTIL:
        metric.value = pct(w.busy_ns);
        break;
      case NVML_GPM_METRIC_SM_UTIL:
        metric.value = pct(w.sm_ns);
        break;
      // The timeline has no warp detail: occupancy is a fixed half of SM activity.
      case NVML_GPM_METRIC_SM_OCCUPANCY:
        metric.value = pct(w.sm_ns) * 0.5;
        break;
      // Training work is half-precision matrix math: all tensor activity is HMMA.
      case NVML_GPM_METRIC_ANY_TENSOR_UTIL:
      case NVML_GPM_METRIC_HMMA_TENSOR_UTIL:
        metric.value = pct(w.tensor_ns);
        break;
      case NVML_GPM_METRIC_DRAM_BW_UTIL:
        metric.value = pct(w.dram_ns);
        break;
      // No pipe mix in the timeline: these pipes read idle.
      case NVML_GPM_METRIC_INTEGER_UTIL:
      case NVML_GPM_METRIC_DFMA_TENSOR_UTIL:
      case NVML_GPM_METRIC_DMMA_TENSOR_UTIL:
      case NVML_GPM_METRIC_IMMA_TENSOR_UTIL:
      case NVML_GPM_METRIC_FP64_UTIL:
      case NVML_GPM_METRIC_FP32_UTIL:
      case NVML_GPM_METRIC_FP16_UTIL:
        metric.value = 0;
        break;
      case NVML_GPM_METRIC_PCIE_TX_PER_SEC:
        metric.value = mib_per_s(s1->pcie_tx_bytes, s2->pcie_tx_bytes, 1.0);
        metric.metricInfo.unit = const_cast<char*>("MiB/s");
        break;
      case NVML_GPM_METRIC_PCIE_RX_PER_SEC:
        metric.value = mib_per_s(s1->pcie_rx_bytes, s2->pcie_rx_bytes, 1.0);
        metric.metricInfo.unit = const_cast<char*>("MiB/s");
        break;
      case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
      case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: {
        const bool rx = id == NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC;
        double sum = 0;
        for (uint32_t l = 0; l < c.nvlink_count; ++l) {
          sum += rx ? mib_per_s(s1->nvlink_rx_kib[l], s2->nvlink_rx_kib[l], 1024.0)
                    : mib_per_s(s1->nvlink_tx_kib[l], s2->nvlink_tx_kib[l], 1024.0);
        }
        metric.value = sum;
        metric.metricInfo.unit = const_cast<char*>("MiB/s");
        break;
      }
      default:
        if (id >= static_cast<unsigned>(NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) &&
            id <= static_cast<unsigned>(NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC)) {
          const unsigned l = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) / 2;
          const bool rx = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) % 2 == 0;
          if (l >= c.nvlink_count) {
            metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            break;
          }
          metric.value = rx ? mib_per_s(s1->nvlink_rx_kib[l], s2->nvlink_rx_kib[l], 1024.0)
                            : mib_per_s(s1->nvlink_tx_kib[l], s2->nvlink_tx_kib[l], 1024.0);
          metric.metricInfo.unit = const_cast<char*>("MiB/s");
        } else if (id >= 30 && id <= 51) {
          metric.value = 0;  // NVDEC / NVJPG / NVOFA engines: never busy in a training fleet
        } else {
          metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        break;
    }
  }
  return NVML_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop
// NOLINTEND(readability-identifier-naming)

}  // namespace ithbat::nvml
