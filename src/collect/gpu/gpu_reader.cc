#include "collect/gpu/gpu_reader.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace ithbat::collect {

using namespace ::ithbat::nvml;  // NOLINT: the ABI's names

namespace {

constexpr unsigned kMaxNvLinks = 36;  // NVML_NVLINK_MAX_LINKS in 13.x headers; H100 SXM uses 18
constexpr double kMhz = 1e6;
constexpr double kMib = 1024.0 * 1024.0;
// NVML documents PCIe throughput as "KB/s" and NVLink throughput fields as KiB.
constexpr double kKib = 1024.0;

std::string CString(const char* buf, size_t cap) { return std::string(buf, strnlen(buf, cap)); }

bool Unsupported(nvmlReturn_t rc) {
  return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_NO_PERMISSION || rc == NVML_ERROR_FUNCTION_NOT_FOUND;
}

double FieldValue(const nvmlFieldValue_t& f) {
  switch (f.valueType) {
    case NVML_VALUE_TYPE_DOUBLE:
      return f.value.dVal;
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return static_cast<double>(f.value.uiVal);
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return static_cast<double>(f.value.ulVal);
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return static_cast<double>(f.value.ullVal);
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return static_cast<double>(f.value.sllVal);
    case NVML_VALUE_TYPE_SIGNED_INT:
      return static_cast<double>(f.value.siVal);
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return static_cast<double>(f.value.usVal);
    default:
      return static_cast<double>(f.value.ullVal);
  }
}

// Field requests: (field id, scope, metric, key, scale). Per-link ones are added per active link.
struct FieldDef {
  unsigned id;
  uint16_t metric;
  uint32_t key;
  double scale;
};
constexpr FieldDef kFields[] = {
    {NVML_FI_DEV_MEMORY_TEMP, kGpuMemTemp, 0, 1},
    {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, kGpuNvLinkErrorsTotal, 0, 1},
    {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, kGpuNvLinkErrorsTotal, 1, 1},
    {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, kGpuNvLinkErrorsTotal, 2, 1},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, kGpuNvLinkErrorsTotal, 3, 1},
    {NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL, kGpuNvLinkErrorsTotal, 4, 1},
    {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, kGpuNvLinkBytes, GpuKey2(0, 0), kKib},
    {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, kGpuNvLinkBytes, GpuKey2(1, 0), kKib},
    {NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, kGpuNvLinkBytes, GpuKey2(0, 1), kKib},
    {NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX, kGpuNvLinkBytes, GpuKey2(1, 1), kKib},
    {NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, kGpuPcieErrors, 0, 1},
    {NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED, kGpuPcieErrors, 1, 1},
    {NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR, kGpuPcieErrors, 2, 1},
    {NVML_FI_DEV_PCIE_COUNT_BAD_TLP, kGpuPcieErrors, 3, 1},
    {NVML_FI_DEV_PCIE_COUNT_NAKS_SENT, kGpuPcieErrors, 4, 1},
    {NVML_FI_DEV_PCIE_COUNT_BAD_DLLP, kGpuPcieErrors, 5, 1},
    {NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR, kGpuPcieErrors, 6, 1},
    {NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR, kGpuPcieErrors, 7, 1},
    {NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ, kGpuPcieErrors, 8, 1},
    {NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR, kGpuPcieErrors, 9, 1},
    {NVML_FI_DEV_PCIE_COUNT_LANE_ERROR, kGpuPcieErrors, 10, 1},
    {NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER, kGpuPcieErrors, 11, 1},
    {NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, kGpuRecoveryAction, 0, 1},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, kGpuClockEventDuration, 0, 1e-9},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, kGpuClockEventDuration, 1, 1e-9},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, kGpuClockEventDuration, 2, 1e-9},
};
// Per-link error fields (scopeId = link) and their counter label (index in kGpuNvLinkErrorNames).
constexpr std::pair<unsigned, uint32_t> kLinkFields[] = {
    {NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 0},
    {NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1},
    {NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 2},
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Enumeration

Result<GpuEnumeration> EnumerateGpus(NvmlLibrary& lib, size_t max_gpus) {
  GpuEnumeration e;
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (ITHBAT_NVML_CALL(lib, NvmlFamily::kSystem, nvmlSystemGetDriverVersion, buf, sizeof(buf)) == NVML_SUCCESS) {
    e.driver_version = CString(buf, sizeof(buf));
  }
  unsigned count = 0;
  if (nvmlReturn_t rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kSystem, nvmlDeviceGetCount_v2, &count);
      rc != NVML_SUCCESS) {
    return std::unexpected(lib.ToStatus(rc, "nvmlDeviceGetCount_v2").error());
  }
  if (count > max_gpus) {
    e.notes.push_back(fmt::format("NVML reports {} GPUs; only the first {} are collected", count, max_gpus));
    count = static_cast<unsigned>(max_gpus);
  }
  e.count = count;
  return e;
}

// ---------------------------------------------------------------------------------------------
// GpuReader

struct GpuReader::Gpm {
  bool checked = false;
  bool supported = false;
  nvmlGpmSample_t prev = nullptr;
  nvmlGpmSample_t cur = nullptr;
  bool have_prev = false;
  nvmlGpmMetricsGet_t get{};
};

GpuReader::GpuReader(std::shared_ptr<NvmlLibrary> lib, uint32_t index, bool gpm, size_t max_processes)
    : lib_(std::move(lib)),
      gpm_enabled_(gpm),
      max_processes_(std::max<size_t>(max_processes, 1)),
      unsupported_sub_(kCallCount),
      gpm_(std::make_unique<Gpm>()) {
  info_.index = index;
  info_.index_label = fmt::format("{}", index);
}

GpuReader::~GpuReader() {
  if (gpm_->prev != nullptr) (void)ITHBAT_NVML_CALL(*lib_, NvmlFamily::kGpm, nvmlGpmSampleFree, gpm_->prev);
  if (gpm_->cur != nullptr) (void)ITHBAT_NVML_CALL(*lib_, NvmlFamily::kGpm, nvmlGpmSampleFree, gpm_->cur);
}

bool GpuReader::Skip(Call call, uint32_t sub) const {
  return lost_ || (sub < 64 && unsupported_sub_[call][sub]);
}

bool GpuReader::Ok(int rc, Call call, std::string_view what, GpuReading& out, uint32_t sub) {
  if (rc == NVML_SUCCESS) return true;
  if (Unsupported(rc)) {
    // Not exported at all from now on (not as zeros): the driver will not change its mind.
    if (sub < 64) unsupported_sub_[call][sub] = true;
    return false;
  }
  if (rc == NVML_ERROR_GPU_IS_LOST) {
    lost_ = true;
    return false;
  }
  out.errors.push_back(Error{lib_->ToStatus(rc, what).error().code,
                             fmt::format("GPU {}: {}: {}", info_.index_label, what, lib_->ErrorText(rc))});
  return false;
}

void GpuReader::Add(GpuReading& out, uint16_t metric, uint32_t key, double value) {
  out.samples.push_back(GpuSample{metric, key, value});
}

void GpuReader::Identify(GpuReading& out) {
  NvmlLibrary& lib = *lib_;
  const unsigned i = info_.index;
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kSystem, nvmlDeviceGetHandleByIndex_v2, i, &dev);
  if (rc != NVML_SUCCESS) {
    (void)Ok(rc, kCallIdentity, "nvmlDeviceGetHandleByIndex_v2", out);
    return;
  }
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kDeviceInfo, nvmlDeviceGetUUID, dev, uuid, sizeof(uuid));
  if (rc != NVML_SUCCESS) {
    (void)Ok(rc, kCallIdentity, "nvmlDeviceGetUUID", out);
    return;
  }
  GpuStatic g = info_;
  g.device = dev;
  g.uuid = CString(uuid, sizeof(uuid));
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (ITHBAT_NVML_CALL(lib, NvmlFamily::kDeviceInfo, nvmlDeviceGetName, dev, name, sizeof(name)) == NVML_SUCCESS) {
    g.model = CString(name, sizeof(name));
  }
  nvmlPciInfo_t pci{};
  if (ITHBAT_NVML_CALL(lib, NvmlFamily::kDeviceInfo, nvmlDeviceGetPciInfo_v3, dev, &pci) == NVML_SUCCESS) {
    g.pci_bus_id = CString(pci.busId, sizeof(pci.busId));
  }
  info_ = std::move(g);
  identified_ = true;
  out.identity = info_;
}

void GpuReader::Read(GpuReading& out) {
  lost_ = false;
  unsupported_sub_[kCallIdentity].reset();  // identity is required: never "unsupported"
  if (!identified_) {
    // Read here, not at Init: a GPU that hangs must not hang the agent's start.
    Identify(out);
    if (!identified_) {
      out.lost = lost_;
      return;
    }
  }
  ReadBasics(out);
  if (!lost_) ReadEcc(out);
  if (!lost_) ReadPcie(out);
  if (!lost_) ReadNvLink(out);
  if (!lost_) ReadFields(out);
  if (!lost_) ReadProcesses(out);
  if (!lost_ && gpm_enabled_) ReadGpm(out);
  out.lost = lost_;
  if (lost_) {
    // What was read before NVML said "lost" is dropped: the GPU's values are not trustworthy.
    out.samples.clear();
    out.mig.clear();
  }
}

void GpuReader::ReadBasics(GpuReading& out) {
  NvmlLibrary& lib = *lib_;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  if (!Skip(kCallUtil)) {
    nvmlUtilization_t u{};
    if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kUtilization, nvmlDeviceGetUtilizationRates, dev, &u), kCallUtil,
           "nvmlDeviceGetUtilizationRates", out)) {
      Add(out, kGpuUtilGpu, 0, u.gpu / 100.0);
      Add(out, kGpuUtilMemory, 0, u.memory / 100.0);
    }
  }
  if (lost_) return;
  if (!Skip(kCallMemory)) {
    if (lib.Has("nvmlDeviceGetMemoryInfo_v2")) {
      nvmlMemory_v2_t m{};
      m.version = nvmlMemory_v2;
      if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMemory, nvmlDeviceGetMemoryInfo_v2, dev, &m), kCallMemory,
             "nvmlDeviceGetMemoryInfo_v2", out)) {
        Add(out, kGpuMemTotal, 0, static_cast<double>(m.total));
        Add(out, kGpuMemReserved, 0, static_cast<double>(m.reserved));
        Add(out, kGpuMemFree, 0, static_cast<double>(m.free));
        Add(out, kGpuMemUsed, 0, static_cast<double>(m.used));
      }
    } else {
      nvmlMemory_t m{};  // an older driver: no reserved figure
      if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMemory, nvmlDeviceGetMemoryInfo, dev, &m), kCallMemory,
             "nvmlDeviceGetMemoryInfo", out)) {
        Add(out, kGpuMemTotal, 0, static_cast<double>(m.total));
        Add(out, kGpuMemFree, 0, static_cast<double>(m.free));
        Add(out, kGpuMemUsed, 0, static_cast<double>(m.used));
      }
    }
  }
  for (uint32_t c = 0; c < kGpuClockNames.size() && !lost_; c++) {
    unsigned mhz = 0;
    if (!Skip(kCallClock, c) &&
        Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kClocks, nvmlDeviceGetClockInfo, dev, static_cast<int>(c), &mhz),
           kCallClock, "nvmlDeviceGetClockInfo", out, c)) {
      Add(out, kGpuClock, c, mhz * kMhz);
    }
    if (lost_) break;
    if (!Skip(kCallClockMax, c) &&
        Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kClocks, nvmlDeviceGetMaxClockInfo, dev, static_cast<int>(c), &mhz),
           kCallClockMax, "nvmlDeviceGetMaxClockInfo", out, c)) {
      Add(out, kGpuClockMax, c, mhz * kMhz);
    }
  }
  if (lost_) return;
  unsigned mw = 0;
  if (!Skip(kCallPower) && Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPower, nvmlDeviceGetPowerUsage, dev, &mw),
                              kCallPower, "nvmlDeviceGetPowerUsage", out)) {
    Add(out, kGpuPower, 0, mw / 1000.0);
  }
  if (lost_) return;
  if (!Skip(kCallPowerLimit) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPower, nvmlDeviceGetEnforcedPowerLimit, dev, &mw), kCallPowerLimit,
         "nvmlDeviceGetEnforcedPowerLimit", out)) {
    Add(out, kGpuPowerLimit, 0, mw / 1000.0);
  }
  if (lost_) return;
  unsigned long long mj = 0;
  if (!Skip(kCallEnergy) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPower, nvmlDeviceGetTotalEnergyConsumption, dev, &mj), kCallEnergy,
         "nvmlDeviceGetTotalEnergyConsumption", out)) {
    Add(out, kGpuEnergy, 0, static_cast<double>(mj) / 1000.0);
  }
  if (lost_) return;
  if (!Skip(kCallTemp)) {
    if (lib.Has("nvmlDeviceGetTemperatureV")) {
      nvmlTemperature_t t{};
      t.version = nvmlTemperature_v1;
      t.sensorType = NVML_TEMPERATURE_GPU;
      if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kTemperature, nvmlDeviceGetTemperatureV, dev, &t), kCallTemp,
             "nvmlDeviceGetTemperatureV", out)) {
        Add(out, kGpuTemp, 0, t.temperature);
      }
    } else {
      unsigned c = 0;
      if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kTemperature, nvmlDeviceGetTemperature, dev, NVML_TEMPERATURE_GPU,
                              &c),
             kCallTemp, "nvmlDeviceGetTemperature", out)) {
        Add(out, kGpuTemp, 0, c);
      }
    }
  }
  if (lost_) return;
  nvmlPstates_t p = NVML_PSTATE_UNKNOWN;
  if (!Skip(kCallPstate) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kClocks, nvmlDeviceGetPerformanceState, dev, &p), kCallPstate,
         "nvmlDeviceGetPerformanceState", out) &&
      p >= NVML_PSTATE_0 && p <= NVML_PSTATE_15) {
    Add(out, kGpuPstate, 0, p);
  }
  if (lost_) return;
  if (!Skip(kCallClockEvents)) {
    const bool event_api = lib.Has("nvmlDeviceGetCurrentClocksEventReasons");
    unsigned long long supported = ~0ULL, current = 0;
    nvmlReturn_t rc = event_api
                          ? ITHBAT_NVML_CALL(lib, NvmlFamily::kClockEvents, nvmlDeviceGetSupportedClocksEventReasons,
                                             dev, &supported)
                          : ITHBAT_NVML_CALL(lib, NvmlFamily::kClockEvents,
                                             nvmlDeviceGetSupportedClocksThrottleReasons, dev, &supported);
    if (rc != NVML_SUCCESS) supported = ~0ULL;  // unknown: every reason the current mask can carry
    rc = event_api ? ITHBAT_NVML_CALL(lib, NvmlFamily::kClockEvents, nvmlDeviceGetCurrentClocksEventReasons, dev,
                                      &current)
                   : ITHBAT_NVML_CALL(lib, NvmlFamily::kClockEvents, nvmlDeviceGetCurrentClocksThrottleReasons, dev,
                                      &current);
    if (Ok(rc, kCallClockEvents, "nvmlDeviceGetCurrentClocksEventReasons", out)) {
      for (uint32_t bit = 0; bit < kGpuClockEventNames.size(); bit++) {
        if (supported & (1ULL << bit)) Add(out, kGpuClockEvent, bit, (current >> bit) & 1);
      }
    }
  }
  if (lost_) return;
  nvmlEnableState_t ecc = 0, ecc_pending = 0;
  if (!Skip(kCallEccMode) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kEcc, nvmlDeviceGetEccMode, dev, &ecc, &ecc_pending), kCallEccMode,
         "nvmlDeviceGetEccMode", out)) {
    Add(out, kGpuEccMode, 0, ecc == NVML_FEATURE_ENABLED ? 1 : 0);
  }
  if (lost_) return;
  unsigned mig = 0, mig_pending = 0;
  if (!Skip(kCallMig) && Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMig, nvmlDeviceGetMigMode, dev, &mig, &mig_pending),
                            kCallMig, "nvmlDeviceGetMigMode", out)) {
    Add(out, kGpuMigEnabled, 0, mig == NVML_DEVICE_MIG_ENABLE ? 1 : 0);
    if (mig == NVML_DEVICE_MIG_ENABLE) {
      ReadMig(out);
    } else if (lib.Has("nvmlDeviceGetMaxMigDeviceCount")) {
      Add(out, kGpuMigInstances, 0, 0);
    }
  }
}

void GpuReader::ReadMig(GpuReading& out) {
  // An H100/H200/A100 has at most 7; the bound keeps a confused driver from costing a tick.
  constexpr unsigned kMaxMigDevices = 16;
  if (Skip(kCallMigDevices)) return;
  NvmlLibrary& lib = *lib_;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  unsigned max_count = 0;
  if (!Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMig, nvmlDeviceGetMaxMigDeviceCount, dev, &max_count), kCallMigDevices,
          "nvmlDeviceGetMaxMigDeviceCount", out)) {
    return;
  }
  max_count = std::min(max_count, kMaxMigDevices);
  for (unsigned i = 0; i < max_count && !lost_; i++) {
    nvmlDevice_t mig = nullptr;
    nvmlReturn_t rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kMig, nvmlDeviceGetMigDeviceHandleByIndex, dev, i, &mig);
    if (rc == NVML_ERROR_NOT_FOUND) continue;  // an unpopulated slot: indices may be sparse
    if (!Ok(rc, kCallMigDevices, "nvmlDeviceGetMigDeviceHandleByIndex", out)) return;
    unsigned gi = 0, ci = 0;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (!Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMig, nvmlDeviceGetGpuInstanceId, mig, &gi), kCallMigDevices,
            "nvmlDeviceGetGpuInstanceId", out) ||
        !Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMig, nvmlDeviceGetComputeInstanceId, mig, &ci), kCallMigDevices,
            "nvmlDeviceGetComputeInstanceId", out) ||
        !Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kDeviceInfo, nvmlDeviceGetUUID, mig, uuid, sizeof(uuid)),
            kCallMigDevices, "nvmlDeviceGetUUID (MIG device)", out)) {
      if (Skip(kCallMigDevices)) return;
      continue;
    }
    GpuMigReading m;
    m.identity.index = info_.index;
    m.identity.index_label = fmt::format("{}/{}/{}", info_.index_label, gi, ci);
    m.identity.uuid = CString(uuid, sizeof(uuid));
    m.identity.model = info_.model;
    m.identity.pci_bus_id = info_.pci_bus_id;
    m.identity.parent_index = info_.index_label;
    m.identity.device = mig;
    m.identity.mig = true;
    if (!Skip(kCallMigMemory)) {
      nvmlMemory_t mem{};
      if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kMemory, nvmlDeviceGetMemoryInfo, mig, &mem), kCallMigMemory,
             "nvmlDeviceGetMemoryInfo (MIG device)", out)) {
        m.samples.push_back(GpuSample{kGpuMemTotal, 0, static_cast<double>(mem.total)});
        m.samples.push_back(GpuSample{kGpuMemFree, 0, static_cast<double>(mem.free)});
        m.samples.push_back(GpuSample{kGpuMemUsed, 0, static_cast<double>(mem.used)});
      }
    }
    if (!lost_) ReadProcessList(mig, kCallMigProcesses, m.identity.index_label, m.samples, out);
    out.mig.push_back(std::move(m));
  }
  if (!lost_) Add(out, kGpuMigInstances, 0, static_cast<double>(out.mig.size()));
}

void GpuReader::ReadEcc(GpuReading& out) {
  NvmlLibrary& lib = *lib_;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  for (int type = 0; type < NVML_MEMORY_ERROR_TYPE_COUNT && !lost_; type++) {
    for (int counter = 0; counter < NVML_ECC_COUNTER_TYPE_COUNT && !lost_; counter++) {
      const auto sub = static_cast<uint32_t>(type * 2 + counter);
      unsigned long long n = 0;
      if (!Skip(kCallEcc, sub) &&
          Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kEcc, nvmlDeviceGetTotalEccErrors, dev, type, counter, &n), kCallEcc,
             "nvmlDeviceGetTotalEccErrors", out, sub)) {
        Add(out, kGpuEccErrors, GpuKey2(type, counter), static_cast<double>(n));
      }
    }
    for (int loc = 0; loc < NVML_MEMORY_LOCATION_COUNT && !lost_; loc++) {
      const auto sub = static_cast<uint32_t>(type * NVML_MEMORY_LOCATION_COUNT + loc);
      unsigned long long n = 0;
      if (!Skip(kCallEccLoc, sub) &&
          Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kEcc, nvmlDeviceGetMemoryErrorCounter, dev, type, NVML_AGGREGATE_ECC,
                              loc, &n),
             kCallEccLoc, "nvmlDeviceGetMemoryErrorCounter", out, sub)) {
        Add(out, kGpuEccLocErrors, GpuKey2(type, loc), static_cast<double>(n));
      }
    }
  }
  for (int cause = 0; cause < NVML_PAGE_RETIREMENT_CAUSE_COUNT && !lost_; cause++) {
    unsigned count = 0;
    if (Skip(kCallRetired, cause)) continue;
    nvmlReturn_t rc =
        ITHBAT_NVML_CALL(lib, NvmlFamily::kRetirement, nvmlDeviceGetRetiredPages_v2, dev, cause, &count,
                         static_cast<unsigned long long*>(nullptr), static_cast<unsigned long long*>(nullptr));
    // Asked with no buffer, NVML answers INSUFFICIENT_SIZE and the count when pages exist.
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) rc = NVML_SUCCESS;
    if (Ok(rc, kCallRetired, "nvmlDeviceGetRetiredPages_v2", out, cause)) Add(out, kGpuRetiredPages, cause, count);
  }
  if (lost_) return;
  nvmlEnableState_t pending = 0;
  if (!Skip(kCallRetiredPending) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kRetirement, nvmlDeviceGetRetiredPagesPendingStatus, dev, &pending),
         kCallRetiredPending, "nvmlDeviceGetRetiredPagesPendingStatus", out)) {
    Add(out, kGpuRetiredPending, 0, pending == NVML_FEATURE_ENABLED ? 1 : 0);
  }
  if (lost_) return;
  unsigned corr = 0, unc = 0, is_pending = 0, failure = 0;
  if (!Skip(kCallRemap) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kRetirement, nvmlDeviceGetRemappedRows, dev, &corr, &unc, &is_pending,
                          &failure),
         kCallRemap, "nvmlDeviceGetRemappedRows", out)) {
    Add(out, kGpuRemapped, 0, corr);
    Add(out, kGpuRemapped, 1, unc);
    Add(out, kGpuRemapPending, 0, is_pending != 0 ? 1 : 0);
    Add(out, kGpuRemapFailure, 0, failure != 0 ? 1 : 0);
  }
  if (lost_) return;
  nvmlRowRemapperHistogramValues_t h{};
  if (!Skip(kCallRemapHist) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kRetirement, nvmlDeviceGetRowRemapperHistogram, dev, &h), kCallRemapHist,
         "nvmlDeviceGetRowRemapperHistogram", out)) {
    const unsigned v[] = {h.max, h.high, h.partial, h.low, h.none};
    for (uint32_t i = 0; i < 5; i++) Add(out, kGpuRemapBanks, i, v[i]);
  }
}

void GpuReader::ReadPcie(GpuReading& out) {
  NvmlLibrary& lib = *lib_;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  unsigned v = 0;
  if (!Skip(kCallPcieReplay) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetPcieReplayCounter, dev, &v), kCallPcieReplay,
         "nvmlDeviceGetPcieReplayCounter", out)) {
    Add(out, kGpuPcieReplay, 0, v);
  }
  // Each throughput call samples for ~20 ms inside the driver: fine on this GPU's own reader.
  for (uint32_t dir = 0; dir < 2 && !lost_; dir++) {
    if (!Skip(kCallPcieTput, dir) &&
        Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetPcieThroughput, dev, static_cast<int>(dir), &v),
           kCallPcieTput, "nvmlDeviceGetPcieThroughput", out, dir)) {
      Add(out, kGpuPcieThroughput, dir, v * kKib);
    }
  }
  if (lost_) return;
  if (!Skip(kCallPcieLink, 0) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetCurrPcieLinkGeneration, dev, &v), kCallPcieLink,
         "nvmlDeviceGetCurrPcieLinkGeneration", out, 0)) {
    Add(out, kGpuPcieGen, 0, v);
  }
  if (!lost_ && !Skip(kCallPcieLink, 1) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetCurrPcieLinkWidth, dev, &v), kCallPcieLink,
         "nvmlDeviceGetCurrPcieLinkWidth", out, 1)) {
    Add(out, kGpuPcieWidth, 0, v);
  }
  if (!lost_ && !Skip(kCallPcieLinkMax, 0) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetMaxPcieLinkGeneration, dev, &v), kCallPcieLinkMax,
         "nvmlDeviceGetMaxPcieLinkGeneration", out, 0)) {
    Add(out, kGpuPcieGenMax, 0, v);
  }
  if (!lost_ && !Skip(kCallPcieLinkMax, 1) &&
      Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kPcie, nvmlDeviceGetMaxPcieLinkWidth, dev, &v), kCallPcieLinkMax,
         "nvmlDeviceGetMaxPcieLinkWidth", out, 1)) {
    Add(out, kGpuPcieWidthMax, 0, v);
  }
}

void GpuReader::ReadNvLink(GpuReading& out) {
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  if (nvlink_count_ < 0) {
    // How many links: NVML_FI_DEV_NVLINK_LINK_COUNT when the field API knows it (then link
    // state comes with the other fields in one round-trip); otherwise probe every index with
    // nvmlDeviceGetNvLinkState.
    nvmlFieldValue_t f{};
    f.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
    nvmlReturn_t rc = ITHBAT_NVML_CALL(*lib_, NvmlFamily::kFieldValues, nvmlDeviceGetFieldValues, dev, 1, &f);
    if (rc == NVML_ERROR_GPU_IS_LOST || f.nvmlReturn == NVML_ERROR_GPU_IS_LOST) {
      lost_ = true;
      return;
    }
    if (rc == NVML_SUCCESS && f.nvmlReturn == NVML_SUCCESS) {
      nvlink_count_ = static_cast<int>(std::min<double>(std::max(FieldValue(f), 0.0), kMaxNvLinks));
    } else {
      nvlink_count_ = static_cast<int>(kMaxNvLinks);
      for (unsigned link = 0; link < kMaxNvLinks; link++) link_state_by_call_[link] = true;
    }
  }
  for (unsigned link = 0; link < static_cast<unsigned>(nvlink_count_) && !lost_; link++) {
    if (!link_state_by_call_[link] || Skip(kCallNvLinkState, link)) continue;
    nvmlEnableState_t active = 0;
    nvmlReturn_t rc = ITHBAT_NVML_CALL(*lib_, NvmlFamily::kNvLink, nvmlDeviceGetNvLinkState, dev, link, &active);
    // A link index past the GPU's last link is INVALID_ARGUMENT: that link does not exist.
    if (rc == NVML_ERROR_INVALID_ARGUMENT) rc = NVML_ERROR_NOT_SUPPORTED;
    if (Ok(rc, kCallNvLinkState, "nvmlDeviceGetNvLinkState", out, link)) {
      Add(out, kGpuNvLinkUp, link, active == NVML_FEATURE_ENABLED ? 1 : 0);
    }
  }
}

void GpuReader::ReadFields(GpuReading& out) {
  if (Skip(kCallFields)) return;
  if (field_ids_.empty()) {
    // Built on the first read, after ReadNvLink found which links exist.
    for (const FieldDef& f : kFields) {
      field_ids_.push_back(f.id);
      field_targets_.emplace_back(f.metric, f.key);
      field_scale_.push_back(f.scale);
    }
    for (unsigned link = 0; link < static_cast<unsigned>(std::max(nvlink_count_, 0)); link++) {
      if (unsupported_sub_[kCallNvLinkState][link]) continue;
      if (!link_state_by_call_[link]) {
        field_ids_.push_back(NVML_FI_DEV_NVLINK_GET_STATE | (link << 16));
        field_targets_.emplace_back(kGpuNvLinkUp, link);
        field_scale_.push_back(1);
      }
      for (const auto& [id, counter] : kLinkFields) {
        field_ids_.push_back(id | (link << 16));  // scope packed in the high half, split below
        field_targets_.emplace_back(kGpuNvLinkLinkErrors, GpuKey2(link, counter));
        field_scale_.push_back(1);
      }
    }
    field_dead_.assign(field_ids_.size(), 0);
  }
  // Buffers kept across ticks: no allocation once the first tick sized them.
  std::vector<nvmlFieldValue_t>& values = field_values_;
  std::vector<size_t>& index = field_index_;
  values.clear();
  index.clear();
  for (size_t i = 0; i < field_ids_.size(); i++) {
    if (field_dead_[i]) continue;
    nvmlFieldValue_t v{};
    v.fieldId = field_ids_[i] & 0xffff;
    v.scopeId = field_ids_[i] >> 16;
    values.push_back(v);
    index.push_back(i);
  }
  if (values.empty()) return;
  if (!Ok(ITHBAT_NVML_CALL(*lib_, NvmlFamily::kFieldValues, nvmlDeviceGetFieldValues,
                           static_cast<nvmlDevice_t>(info_.device), static_cast<int>(values.size()), values.data()),
          kCallFields, "nvmlDeviceGetFieldValues", out)) {
    return;
  }
  for (size_t j = 0; j < values.size(); j++) {
    const nvmlFieldValue_t& v = values[j];
    const size_t i = index[j];
    if (v.nvmlReturn == NVML_ERROR_GPU_IS_LOST) {
      lost_ = true;
      return;
    }
    if (v.nvmlReturn != NVML_SUCCESS) {
      if (Unsupported(v.nvmlReturn)) {
        field_dead_[i] = 1;  // never a zero series, never asked again
        // Link state the field API does not know: ask nvmlDeviceGetNvLinkState from now on.
        if (v.fieldId == NVML_FI_DEV_NVLINK_GET_STATE && v.scopeId < 64) link_state_by_call_[v.scopeId] = true;
      }
      continue;
    }
    const auto [metric, key] = field_targets_[i];
    if (metric == kGpuNvLinkUp) {
      Add(out, metric, key, FieldValue(v) != 0 ? 1 : 0);
      continue;
    }
    Add(out, metric, key, FieldValue(v) * field_scale_[i]);
  }
}

void GpuReader::ReadProcesses(GpuReading& out) {
  ReadProcessList(info_.device, kCallProcesses, info_.index_label, out.samples, out);
}

void GpuReader::ReadProcessList(void* device, Call call, const std::string& label, std::vector<GpuSample>& samples,
                                GpuReading& out) {
  if (Skip(call)) return;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(device);
  // The list can change between the sizing answer and the fetch (a process starts or exits):
  // retry a few times with a larger buffer, bounded by max_processes_.
  size_t cap = std::max<size_t>(process_buf_.size() / sizeof(nvmlProcessInfo_t), 8);
  cap = std::min(cap, max_processes_);
  unsigned count = 0;
  for (int attempt = 0; attempt < 4; attempt++) {
    if (process_buf_.size() < cap * sizeof(nvmlProcessInfo_t)) process_buf_.resize(cap * sizeof(nvmlProcessInfo_t));
    count = static_cast<unsigned>(cap);
    auto* infos = reinterpret_cast<nvmlProcessInfo_t*>(process_buf_.data());
    nvmlReturn_t rc =
        ITHBAT_NVML_CALL(*lib_, NvmlFamily::kProcesses, nvmlDeviceGetComputeRunningProcesses_v3, dev, &count, infos);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      if (cap >= max_processes_) {
        out.errors.push_back(Error{ErrorCode::kResourceExhausted,
                                   fmt::format("GPU {}: more than {} compute processes; not listed",
                                               label, max_processes_)});
        return;
      }
      cap = std::min<size_t>(std::max<size_t>(count + 8, cap * 2), max_processes_);
      continue;
    }
    if (!Ok(rc, call, "nvmlDeviceGetComputeRunningProcesses_v3", out)) return;
    count = std::min<unsigned>(count, static_cast<unsigned>(cap));
    // A process with contexts on several compute instances is listed more than once: one series.
    std::vector<std::pair<uint32_t, double>> by_pid;
    for (unsigned i = 0; i < count; i++) {
      const nvmlProcessInfo_t& p = infos[i];
      auto it = std::find_if(by_pid.begin(), by_pid.end(), [&](const auto& e) { return e.first == p.pid; });
      const double mem = p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ? -1 : static_cast<double>(p.usedGpuMemory);
      if (it == by_pid.end()) {
        by_pid.emplace_back(p.pid, mem);
      } else if (mem >= 0) {
        it->second = std::max(it->second, 0.0) + mem;
      }
    }
    samples.push_back(GpuSample{kGpuProcesses, 0, static_cast<double>(by_pid.size())});
    for (const auto& [pid, mem] : by_pid) {
      if (mem >= 0) samples.push_back(GpuSample{kGpuProcessMemory, pid, mem});
    }
    return;
  }
  out.errors.push_back(
      Error{ErrorCode::kUnavailable, fmt::format("GPU {}: compute process list kept changing", label)});
}

void GpuReader::ReadGpm(GpuReading& out) {
  if (Skip(kCallGpm)) return;
  NvmlLibrary& lib = *lib_;
  nvmlDevice_t dev = static_cast<nvmlDevice_t>(info_.device);
  Gpm& g = *gpm_;
  if (!g.checked) {
    g.checked = true;
    nvmlGpmSupport_t s{};
    s.version = NVML_GPM_SUPPORT_VERSION;
    if (!Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kGpm, nvmlGpmQueryDeviceSupport, dev, &s), kCallGpm,
            "nvmlGpmQueryDeviceSupport", out) ||
        !s.isSupportedDevice) {
      unsupported_sub_[kCallGpm][0] = true;  // pre-Hopper
      return;
    }
    if (!Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kGpm, nvmlGpmSampleAlloc, &g.prev), kCallGpm, "nvmlGpmSampleAlloc",
            out) ||
        !Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kGpm, nvmlGpmSampleAlloc, &g.cur), kCallGpm, "nvmlGpmSampleAlloc", out)) {
      unsupported_sub_[kCallGpm][0] = true;
      return;
    }
    g.supported = true;
  }
  if (!g.supported) return;
  // One sample per tick; the metrics span the previous tick's sample to this one, so each
  // value covers one collection interval (well above GPM's 100 ms refresh).
  if (!Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kGpm, nvmlGpmSampleGet, dev, g.cur), kCallGpm, "nvmlGpmSampleGet", out)) {
    g.have_prev = false;
    return;
  }
  if (g.have_prev) {
    nvmlGpmMetricsGet_t& m = g.get;
    m = nvmlGpmMetricsGet_t{};
    m.version = NVML_GPM_METRICS_GET_VERSION;
    m.sample1 = g.prev;
    m.sample2 = g.cur;
    unsigned n = 0;
    for (const GpuGpmDef& d : kGpmRatioMetrics) m.metrics[n++].metricId = d.id;
    for (const GpuGpmBandwidthDef& d : kGpmBandwidthMetrics) m.metrics[n++].metricId = d.id;
    m.numMetrics = n;
    if (Ok(ITHBAT_NVML_CALL(lib, NvmlFamily::kGpm, nvmlGpmMetricsGet, &m), kCallGpm, "nvmlGpmMetricsGet", out)) {
      for (unsigned i = 0; i < n; i++) {
        if (m.metrics[i].nvmlReturn != NVML_SUCCESS) continue;
        if (i < kGpmRatioMetrics.size()) {
          Add(out, kGpuGpm, i, m.metrics[i].value / 100.0);
        } else {
          const GpuGpmBandwidthDef& d = kGpmBandwidthMetrics[i - kGpmRatioMetrics.size()];
          Add(out, kGpuGpmBandwidth, GpuKey2(d.bus, d.direction), m.metrics[i].value * kMib);
        }
      }
    }
  }
  std::swap(g.prev, g.cur);
  g.have_prev = true;
}

// ---------------------------------------------------------------------------------------------
// Events

namespace {

struct EventTypeName {
  unsigned long long type;
  std::string_view name;
};
constexpr EventTypeName kEventTypes[] = {
    {nvmlEventTypeXidCriticalError, "xid"},
    {nvmlEventTypeDoubleBitEccError, "double_bit_ecc_error"},
    {nvmlEventTypeSingleBitEccErrorStorm, "single_bit_ecc_error_storm"},
    {nvmlEventTypeDramRetirementEvent, "dram_retirement"},
    {nvmlEventTypeDramRetirementFailure, "dram_retirement_failure"},
    {nvmlEventTypeNonFatalPoisonError, "non_fatal_poison_error"},
    {nvmlEventTypeFatalPoisonError, "fatal_poison_error"},
    {nvmlEventTypeGpuUnavailableError, "gpu_unavailable"},
    {nvmlEventTypeGpuRecoveryAction, "gpu_recovery_action"},
    {nvmlEventMigConfigChange, "mig_config_change"},
};

}  // namespace

Status RunGpuEventLoop(NvmlLibrary& lib, TimeNs wait, const std::atomic<bool>& stop,
                       const std::function<std::vector<GpuEventTarget>()>& take_targets,
                       const std::function<void(Event)>& deliver, const std::function<void(size_t)>& on_xid,
                       std::atomic<bool>* ready,
                       const std::function<void(const std::string&, std::string)>& note) {
  for (std::string_view s : {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
                             "nvmlEventSetFree"}) {
    if (!lib.Has(s)) return MakeErrorF(ErrorCode::kNotFound, "NVML lacks {}: no Xid events", s);
  }
  nvmlEventSet_t set = nullptr;
  if (nvmlReturn_t rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kEvents, nvmlEventSetCreate, &set); rc != NVML_SUCCESS) {
    return lib.ToStatus(rc, "nvmlEventSetCreate");
  }
  unsigned long long wanted = 0;
  for (const auto& t : kEventTypes) wanted |= t.type;
  std::vector<GpuEventTarget> targets;
  std::vector<GpuEventTarget> retry;  // registration failed (a lost GPU, say): tried again later
  TimeNs next_retry = 0;
  const unsigned wait_ms = static_cast<unsigned>(std::clamp<TimeNs>(wait / kNsPerMs, 1, 10'000));
  while (!stop.load(std::memory_order_acquire)) {
    // GPUs join as their readers identify them (a hung GPU never blocks this thread at start).
    std::vector<GpuEventTarget> todo = take_targets();
    if (!retry.empty() && MonotonicNowNs() >= next_retry) {
      for (GpuEventTarget& t : retry) todo.push_back(std::move(t));
      retry.clear();
    }
    for (GpuEventTarget& t : todo) {
      unsigned long long supported = wanted;
      nvmlDevice_t dev = static_cast<nvmlDevice_t>(t.device);
      if (ITHBAT_NVML_CALL(lib, NvmlFamily::kEvents, nvmlDeviceGetSupportedEventTypes, dev, &supported) !=
          NVML_SUCCESS) {
        supported = wanted;
      }
      // NOT_SUPPORTED for some bits still leaves the set usable for the others.
      nvmlReturn_t rc =
          ITHBAT_NVML_CALL(lib, NvmlFamily::kEvents, nvmlDeviceRegisterEvents, dev, wanted & supported, set);
      if (rc == NVML_SUCCESS) {
        note(t.index_label, "");
        targets.push_back(std::move(t));
      } else {
        note(t.index_label, fmt::format("events not registered: {}", lib.ErrorText(rc)));
        retry.push_back(std::move(t));
        next_retry = MonotonicNowNs() + 10 * wait;
      }
    }
    // After the whole batch: "ready" means every GPU handed over so far is registered.
    if (!targets.empty()) ready->store(true, std::memory_order_release);
    if (targets.empty()) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
      continue;
    }
    nvmlEventData_t data{};
    const nvmlReturn_t rc = ITHBAT_NVML_CALL(lib, NvmlFamily::kEvents, nvmlEventSetWait_v2, set, &data, wait_ms);
    if (rc == NVML_ERROR_TIMEOUT) continue;
    if (rc != NVML_SUCCESS) {
      // An error other than "nothing happened" must not become a busy loop.
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
      continue;
    }
    Event e;
    e.time = NowNs();
    e.source = "nvml";
    const GpuEventTarget* target = nullptr;
    for (const GpuEventTarget& t : targets) {
      if (t.device == static_cast<void*>(data.device)) target = &t;
    }
    if (target != nullptr) {
      e.identity.gpu_index = target->index;
      e.identity.gpu_uuid = target->uuid;
    }
    std::string_view name = "unknown";
    for (const auto& t : kEventTypes) {
      if (data.eventType == t.type) name = t.name;
    }
    if (data.eventType == nvmlEventTypeXidCriticalError) {
      e.kind = EventKind::kXid;
      e.name = "xid";
      e.value = static_cast<double>(data.eventData);
      e.text = data.eventData == NVML_XID_UNKNOWN ? std::string("Xid (number unknown to the driver)")
                                                  : fmt::format("Xid {}", data.eventData);
      if (target != nullptr) on_xid(target->position);
    } else {
      e.kind = EventKind::kGpuEvent;
      e.name = std::string(name);
      e.value = static_cast<double>(data.eventData);
      e.text = fmt::format("NVML event {} (type {:#x}, data {})", name, data.eventType, data.eventData);
    }
    if (data.gpuInstanceId != NVML_INVALID_INSTANCE_ID) {
      e.attrs.emplace_back("gpu_instance_id", fmt::format("{}", data.gpuInstanceId));
      e.attrs.emplace_back("compute_instance_id", fmt::format("{}", data.computeInstanceId));
    }
    deliver(std::move(e));
  }
  (void)ITHBAT_NVML_CALL(lib, NvmlFamily::kEvents, nvmlEventSetFree, set);
  return Ok();
}

}  // namespace ithbat::collect
