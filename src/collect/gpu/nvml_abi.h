#pragma once
// The subset of the NVML ABI (libnvidia-ml.so.1) that Ithbat uses, declared in the project.
//
// Why this file exists: the agent is built on machines without NVIDIA headers and loads NVML
// with dlopen at run time, so the types, constants and function signatures it relies on are
// declared here, once, and shared by the collector (src/collect/gpu) and the fake library
// (sim/fake_nvml) that tests load in place of the real one. Layouts follow the NVML 13.3 header
// (x86-64); every struct carries static_asserts on size and offsets taken from
// /work/shared/design/nvidia-abi.md §1.4 so a typo breaks the build, not a production node.
//
// Naming: identifiers keep NVML's own spelling (nvmlMemory_v2_t, NVML_SUCCESS, the exported
// symbol names) instead of the project's kConstant style, because they mirror an ABI and a
// reader must be able to grep NVIDIA's documentation for them. Everything is plain C types in
// namespace ithbat::nvml; enums are `int` aliases (C enums are int-sized on x86-64), so the
// function-pointer typedefs are exactly the C signatures.
//
// Export rule (§1.1): dlsym the *versioned* export names listed in kSymbols (nvmlInit_v2,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3,
// nvmlEventSetWait_v2, nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetMemoryInfo_v2, ...).
// The unversioned header names are macros in nvml.h; where a driver still exports them they are
// legacy entry points with older structs, so never dlsym them (the fake does not export them).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ithbat::nvml {

// NVIDIA's spellings on purpose (see the top of this file), so the naming check is off until
// the symbol table below.
// NOLINTBEGIN(readability-identifier-naming)

// ---------------------------------------------------------------------------------------------
// Return codes (nvmlReturn_t) — §1.2
using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_ALREADY_INITIALIZED = 5;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_POWER = 8;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_IRQ_ISSUE = 11;
inline constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_CORRUPTED_INFOROM = 14;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
inline constexpr nvmlReturn_t NVML_ERROR_OPERATING_SYSTEM = 17;
inline constexpr nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18;
inline constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
inline constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
inline constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
inline constexpr nvmlReturn_t NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
inline constexpr nvmlReturn_t NVML_ERROR_FREQ_NOT_SUPPORTED = 24;
inline constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
inline constexpr nvmlReturn_t NVML_ERROR_DEPRECATED = 26;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_READY = 27;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_NOT_FOUND = 28;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_STATE = 29;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// ---------------------------------------------------------------------------------------------
// Opaque handles. Only pointers to these ever cross the ABI.
struct nvmlDevice_st;
struct nvmlEventSet_st;
struct nvmlGpmSample_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlEventSet_t = nvmlEventSet_st*;
using nvmlGpmSample_t = nvmlGpmSample_st*;

// ---------------------------------------------------------------------------------------------
// Buffer sizes and misc constants
inline constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned NVML_DEVICE_SERIAL_BUFFER_SIZE = 30;
inline constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
inline constexpr unsigned NVML_NVLINK_MAX_LINKS = 36;  // 13.x header; H100 SXM uses 0..17
inline constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;
inline constexpr unsigned NVML_INVALID_INSTANCE_ID = 0xFFFFFFFFu;  // gpu/computeInstanceId, non-MIG

// nvmlInitWithFlags flags
inline constexpr unsigned NVML_INIT_FLAG_NO_GPUS = 1;
inline constexpr unsigned NVML_INIT_FLAG_NO_ATTACH = 2;
inline constexpr unsigned NVML_INIT_FLAG_FORCE_INIT = 4;

// NVML_STRUCT_VERSION(Name, ver) = sizeof(nvmlName_vN_t) | (ver << 24)
constexpr unsigned NvmlStructVersion(std::size_t size, unsigned ver) {
  return static_cast<unsigned>(size) | (ver << 24);
}

// ---------------------------------------------------------------------------------------------
// Enums (all int-sized) — §1.3/§1.5
using nvmlEnableState_t = int;
inline constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

using nvmlDeviceArchitecture_t = unsigned;
inline constexpr unsigned NVML_DEVICE_ARCH_VOLTA = 5;
inline constexpr unsigned NVML_DEVICE_ARCH_TURING = 6;
inline constexpr unsigned NVML_DEVICE_ARCH_AMPERE = 7;
inline constexpr unsigned NVML_DEVICE_ARCH_ADA = 8;
inline constexpr unsigned NVML_DEVICE_ARCH_HOPPER = 9;
inline constexpr unsigned NVML_DEVICE_ARCH_BLACKWELL = 10;
inline constexpr unsigned NVML_DEVICE_ARCH_RUBIN = 13;
inline constexpr unsigned NVML_DEVICE_ARCH_UNKNOWN = 0xFFFFFFFFu;

using nvmlClockType_t = int;
inline constexpr nvmlClockType_t NVML_CLOCK_GRAPHICS = 0;
inline constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
inline constexpr nvmlClockType_t NVML_CLOCK_MEM = 2;
inline constexpr nvmlClockType_t NVML_CLOCK_VIDEO = 3;

using nvmlClockId_t = int;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_CURRENT = 0;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_APP_CLOCK_TARGET = 1;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3;

using nvmlTemperatureSensors_t = int;
inline constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;

using nvmlPstates_t = int;
inline constexpr nvmlPstates_t NVML_PSTATE_0 = 0;
inline constexpr nvmlPstates_t NVML_PSTATE_15 = 15;
inline constexpr nvmlPstates_t NVML_PSTATE_UNKNOWN = 32;

// Clock event (throttle) reasons, unsigned long long mask
inline constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
inline constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ULL;
inline constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;
inline constexpr unsigned long long nvmlClocksEventReasonNone = 0x0ULL;

// ECC
using nvmlMemoryErrorType_t = int;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
inline constexpr int NVML_MEMORY_ERROR_TYPE_COUNT = 2;

using nvmlEccCounterType_t = int;
inline constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;
inline constexpr nvmlEccCounterType_t NVML_AGGREGATE_ECC = 1;
inline constexpr int NVML_ECC_COUNTER_TYPE_COUNT = 2;

using nvmlMemoryLocation_t = int;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_L1_CACHE = 0;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_L2_CACHE = 1;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_DRAM = 2;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_REGISTER_FILE = 3;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_TEXTURE_MEMORY = 4;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_TEXTURE_SHM = 5;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_CBU = 6;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_SRAM = 7;
inline constexpr int NVML_MEMORY_LOCATION_COUNT = 8;

using nvmlPageRetirementCause_t = int;
inline constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
inline constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;
inline constexpr int NVML_PAGE_RETIREMENT_CAUSE_COUNT = 2;

// PCIe
using nvmlPcieUtilCounter_t = int;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_TX_BYTES = 0;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_RX_BYTES = 1;

// NVLink
using nvmlNvLinkErrorCounter_t = int;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_REPLAY = 0;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_RECOVERY = 1;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_CRC_DATA = 3;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_ECC_DATA = 4;
inline constexpr int NVML_NVLINK_ERROR_COUNT = 5;

// MIG mode (nvmlDeviceGetMigMode)
inline constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;

// Event types (unsigned long long mask)
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
inline constexpr unsigned long long nvmlEventTypeClock = 0x10ULL;
inline constexpr unsigned long long nvmlEventTypePowerSourceChange = 0x80ULL;
inline constexpr unsigned long long nvmlEventMigConfigChange = 0x100ULL;
inline constexpr unsigned long long nvmlEventTypeSingleBitEccErrorStorm = 0x200ULL;
inline constexpr unsigned long long nvmlEventTypeDramRetirementEvent = 0x400ULL;
inline constexpr unsigned long long nvmlEventTypeDramRetirementFailure = 0x800ULL;
inline constexpr unsigned long long nvmlEventTypeNonFatalPoisonError = 0x1000ULL;
inline constexpr unsigned long long nvmlEventTypeFatalPoisonError = 0x2000ULL;
inline constexpr unsigned long long nvmlEventTypeGpuUnavailableError = 0x4000ULL;
inline constexpr unsigned long long nvmlEventTypeGpuRecoveryAction = 0x8000ULL;
inline constexpr unsigned long long nvmlEventTypeNone = 0x0ULL;
// eventData of an Xid event whose number the driver could not decode.
inline constexpr unsigned long long NVML_XID_UNKNOWN = 999;

// ---------------------------------------------------------------------------------------------
// Structs — §1.4

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;  // (device id << 16) | vendor id (0x10de)
  unsigned pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "00000000:18:00.0"
};
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);

struct nvmlPciInfoExt_v1_t {
  unsigned version;  // nvmlPciInfoExt_v1
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  unsigned baseClass;
  unsigned subClass;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};
using nvmlPciInfoExt_t = nvmlPciInfoExt_v1_t;
static_assert(sizeof(nvmlPciInfoExt_v1_t) == 64);
inline constexpr unsigned nvmlPciInfoExt_v1 = NvmlStructVersion(sizeof(nvmlPciInfoExt_v1_t), 1);
static_assert(nvmlPciInfoExt_v1 == 0x01000040);

// v1 struct, used only by the unversioned nvmlDeviceGetMemoryInfo export.
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(nvmlMemory_t) == 24);

struct nvmlMemory_v2_t {
  unsigned version;  // nvmlMemory_v2
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(offsetof(nvmlMemory_v2_t, total) == 8);
static_assert(offsetof(nvmlMemory_v2_t, reserved) == 16);
static_assert(offsetof(nvmlMemory_v2_t, free) == 24);
static_assert(offsetof(nvmlMemory_v2_t, used) == 32);
inline constexpr unsigned nvmlMemory_v2 = NvmlStructVersion(sizeof(nvmlMemory_v2_t), 2);
static_assert(nvmlMemory_v2 == 0x02000028);

struct nvmlUtilization_t {
  unsigned gpu;     // % of the sample period during which one or more kernels ran
  unsigned memory;  // % of the sample period during which device memory was read or written
};
static_assert(sizeof(nvmlUtilization_t) == 8);

// nvmlProcessInfo_t == nvmlProcessInfo_v2_t, used by nvmlDeviceGetComputeRunningProcesses_v3.
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long usedGpuMemory;  // bytes, or NVML_VALUE_NOT_AVAILABLE
  unsigned gpuInstanceId;            // NVML_INVALID_INSTANCE_ID when not MIG
  unsigned computeInstanceId;
};
using nvmlProcessInfo_v2_t = nvmlProcessInfo_t;
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8);
static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);
static_assert(offsetof(nvmlProcessInfo_t, computeInstanceId) == 20);

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // Xid number for nvmlEventTypeXidCriticalError
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventType) == 8);
static_assert(offsetof(nvmlEventData_t, eventData) == 16);
static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24);
static_assert(offsetof(nvmlEventData_t, computeInstanceId) == 28);

using nvmlValueType_t = int;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_DOUBLE = 0;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT = 1;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_INT = 5;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;

union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
};
static_assert(sizeof(nvmlValue_t) == 8);

struct nvmlFieldValue_t {
  unsigned fieldId;     // NVML_FI_*
  unsigned scopeId;     // NVLink link index for per-link fields; power scope for power fields
  long long timestamp;  // microseconds since the epoch, when the value was read
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;  // per-entry result; the call itself returns SUCCESS
  nvmlValue_t value;
};
static_assert(sizeof(nvmlFieldValue_t) == 40);
static_assert(offsetof(nvmlFieldValue_t, scopeId) == 4);
static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8);
static_assert(offsetof(nvmlFieldValue_t, latencyUsec) == 16);
static_assert(offsetof(nvmlFieldValue_t, valueType) == 24);
static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28);
static_assert(offsetof(nvmlFieldValue_t, value) == 32);

struct nvmlTemperature_v1_t {
  unsigned version;  // nvmlTemperature_v1
  nvmlTemperatureSensors_t sensorType;
  int temperature;  // °C
};
using nvmlTemperature_t = nvmlTemperature_v1_t;
static_assert(sizeof(nvmlTemperature_v1_t) == 12);
inline constexpr unsigned nvmlTemperature_v1 = NvmlStructVersion(sizeof(nvmlTemperature_v1_t), 1);
static_assert(nvmlTemperature_v1 == 0x0100000c);

struct nvmlEccSramErrorStatus_v1_t {
  unsigned version;  // nvmlEccSramErrorStatus_v1
  unsigned long long aggregateUncParity;
  unsigned long long aggregateUncSecDed;
  unsigned long long aggregateCor;
  unsigned long long volatileUncParity;
  unsigned long long volatileUncSecDed;
  unsigned long long volatileCor;
  unsigned long long aggregateUncBucketL2;
  unsigned long long aggregateUncBucketSm;
  unsigned long long aggregateUncBucketPcie;
  unsigned long long aggregateUncBucketMcu;
  unsigned long long aggregateUncBucketOther;
  unsigned bThresholdExceeded;
};
using nvmlEccSramErrorStatus_t = nvmlEccSramErrorStatus_v1_t;
static_assert(sizeof(nvmlEccSramErrorStatus_v1_t) == 104);
static_assert(offsetof(nvmlEccSramErrorStatus_v1_t, aggregateUncParity) == 8);
static_assert(offsetof(nvmlEccSramErrorStatus_v1_t, bThresholdExceeded) == 96);
inline constexpr unsigned nvmlEccSramErrorStatus_v1 =
    NvmlStructVersion(sizeof(nvmlEccSramErrorStatus_v1_t), 1);
static_assert(nvmlEccSramErrorStatus_v1 == 0x01000068);

struct nvmlRowRemapperHistogramValues_t {
  unsigned max;
  unsigned high;
  unsigned partial;
  unsigned low;
  unsigned none;
};
static_assert(sizeof(nvmlRowRemapperHistogramValues_t) == 20);

struct nvmlProcessUtilizationInfo_v1_t {
  unsigned long long timeStamp;  // microseconds
  unsigned pid;
  unsigned smUtil;
  unsigned memUtil;
  unsigned encUtil;
  unsigned decUtil;
  unsigned jpgUtil;
  unsigned ofaUtil;
};
static_assert(sizeof(nvmlProcessUtilizationInfo_v1_t) == 40);

struct nvmlProcessesUtilizationInfo_v1_t {
  unsigned version;                      // nvmlProcessesUtilizationInfo_v1
  unsigned processSamplesCount;          // in: capacity of procUtilArray; out: entries written / needed
  unsigned long long lastSeenTimeStamp;  // in: only samples newer than this (us)
  nvmlProcessUtilizationInfo_v1_t* procUtilArray;
};
using nvmlProcessesUtilizationInfo_t = nvmlProcessesUtilizationInfo_v1_t;
static_assert(sizeof(nvmlProcessesUtilizationInfo_v1_t) == 24);
static_assert(offsetof(nvmlProcessesUtilizationInfo_v1_t, lastSeenTimeStamp) == 8);
static_assert(offsetof(nvmlProcessesUtilizationInfo_v1_t, procUtilArray) == 16);
inline constexpr unsigned nvmlProcessesUtilizationInfo_v1 =
    NvmlStructVersion(sizeof(nvmlProcessesUtilizationInfo_v1_t), 1);
static_assert(nvmlProcessesUtilizationInfo_v1 == 0x01000018);

// ---------------------------------------------------------------------------------------------
// GPM — §1.7 (Hopper or newer). GPM structs use plain version integers.
inline constexpr unsigned NVML_GPM_SUPPORT_VERSION = 1;
inline constexpr unsigned NVML_GPM_METRICS_GET_VERSION = 1;

struct nvmlGpmSupport_t {
  unsigned version;  // NVML_GPM_SUPPORT_VERSION
  unsigned isSupportedDevice;
};
static_assert(sizeof(nvmlGpmSupport_t) == 8);

using nvmlGpmMetricId_t = int;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_GRAPHICS_UTIL = 1;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_UTIL = 2;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_OCCUPANCY = 3;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_INTEGER_UTIL = 4;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_DFMA_TENSOR_UTIL = 6;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_HMMA_TENSOR_UTIL = 7;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_IMMA_TENSOR_UTIL = 9;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_DMMA_TENSOR_UTIL = 8;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_DRAM_BW_UTIL = 10;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP64_UTIL = 11;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP32_UTIL = 12;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP16_UTIL = 13;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61;
// Per-link: RX of link L = 62 + 2L, TX of link L = 63 + 2L, for L in 0..17.
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC = 62;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_L0_TX_PER_SEC = 63;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC = 97;
// The oldest header's NVML_GPM_METRIC_MAX (11.8–12.8); ids at or above it may be unknown to a
// driver of that age.
inline constexpr int NVML_GPM_METRIC_MAX_OLDEST = 98;

struct nvmlGpmMetricInfo_t {
  char* shortName;
  char* longName;
  char* unit;
};

struct nvmlGpmMetric_t {
  unsigned metricId;               // in
  nvmlReturn_t nvmlReturn;         // out, per metric
  double value;                    // out
  nvmlGpmMetricInfo_t metricInfo;  // out; strings owned by the library
};
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetric_t, nvmlReturn) == 4);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8);
static_assert(offsetof(nvmlGpmMetric_t, metricInfo) == 16);

// ABI hazard (§1.7): NVIDIA's nvmlGpmMetricsGet_t embeds metrics[NVML_GPM_METRIC_MAX] and that
// MAX grew (98 → 210 → 333) without a version bump; the library reads only numMetrics entries.
// We declare our own, smaller array: the prefix layout is identical, and numMetrics must stay
// <= NVML_GPM_METRICS_GET_CAPACITY.
inline constexpr unsigned NVML_GPM_METRICS_GET_CAPACITY = 32;
struct nvmlGpmMetricsGet_t {
  unsigned version;     // NVML_GPM_METRICS_GET_VERSION
  unsigned numMetrics;  // entries of metrics[] filled in by the caller
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[NVML_GPM_METRICS_GET_CAPACITY];
};
static_assert(offsetof(nvmlGpmMetricsGet_t, numMetrics) == 4);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample2) == 16);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
static_assert(sizeof(nvmlGpmMetricsGet_t) == 24 + NVML_GPM_METRICS_GET_CAPACITY * 40);

// ---------------------------------------------------------------------------------------------
// Field IDs — §1.6 (those the collector reads; NVML_FI_MAX = 303 in the 13.3 header)
inline constexpr unsigned NVML_FI_DEV_ECC_CURRENT = 1;
inline constexpr unsigned NVML_FI_DEV_ECC_PENDING = 2;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_AGG_TOTAL = 5;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_AGG_TOTAL = 6;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_VOL_L2 = 9;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_VOL_L2 = 10;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_VOL_DEV = 11;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_VOL_DEV = 12;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_AGG_L2 = 20;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_AGG_L2 = 21;
inline constexpr unsigned NVML_FI_DEV_ECC_SBE_AGG_DEV = 22;
inline constexpr unsigned NVML_FI_DEV_ECC_DBE_AGG_DEV = 23;
inline constexpr unsigned NVML_FI_DEV_RETIRED_SBE = 29;
inline constexpr unsigned NVML_FI_DEV_RETIRED_DBE = 30;
inline constexpr unsigned NVML_FI_DEV_RETIRED_PENDING = 31;
inline constexpr unsigned NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38;
inline constexpr unsigned NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45;
inline constexpr unsigned NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52;
inline constexpr unsigned NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59;
inline constexpr unsigned NVML_FI_DEV_MEMORY_TEMP = 82;
inline constexpr unsigned NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83;
inline constexpr unsigned NVML_FI_DEV_NVLINK_LINK_COUNT = 91;
inline constexpr unsigned NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94;
inline constexpr unsigned NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER = 95;
// NVLink throughput counters (KiB, cumulative): scopeId = link index for one link, or
// NVML_NVLINK_SCOPE_ALL_LINKS (UINT_MAX) for the sum over links.
inline constexpr unsigned NVML_NVLINK_SCOPE_ALL_LINKS = 0xFFFFFFFFu;
inline constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138;
inline constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139;
inline constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX = 140;
inline constexpr unsigned NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX = 141;
inline constexpr unsigned NVML_FI_DEV_REMAPPED_COR = 142;
inline constexpr unsigned NVML_FI_DEV_REMAPPED_UNC = 143;
inline constexpr unsigned NVML_FI_DEV_REMAPPED_PENDING = 144;
inline constexpr unsigned NVML_FI_DEV_REMAPPED_FAILURE = 145;
inline constexpr unsigned NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL = 160;
inline constexpr unsigned NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY = 161;    // scopeId = link
inline constexpr unsigned NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY = 162;  // scopeId = link
inline constexpr unsigned NVML_FI_DEV_NVLINK_ERROR_DL_CRC = 163;       // scopeId = link
inline constexpr unsigned NVML_FI_DEV_NVLINK_GET_SPEED = 164;          // scopeId = link, MB/s
inline constexpr unsigned NVML_FI_DEV_NVLINK_GET_STATE = 165;          // scopeId = link
inline constexpr unsigned NVML_FI_DEV_NVLINK_GET_VERSION = 166;        // scopeId = link
inline constexpr unsigned NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER = 169;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS = 173;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED = 174;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR = 175;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_BAD_TLP = 176;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_NAKS_SENT = 177;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_BAD_DLLP = 178;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR = 179;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR = 180;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ = 181;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR = 182;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_LANE_ERROR = 183;
inline constexpr unsigned NVML_FI_DEV_POWER_AVERAGE = 185;  // mW, 1 s average
inline constexpr unsigned NVML_FI_DEV_POWER_INSTANT = 186;  // mW
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197;
inline constexpr unsigned NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198;
inline constexpr unsigned NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230;
inline constexpr unsigned NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269;        // ns
inline constexpr unsigned NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270;        // ns
inline constexpr unsigned NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271;  // ns
inline constexpr unsigned NVML_FI_MAX = 303;

// Values of NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
inline constexpr unsigned NVML_GPU_RECOVERY_ACTION_NONE = 0;
inline constexpr unsigned NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1;
inline constexpr unsigned NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2;
inline constexpr unsigned NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3;
inline constexpr unsigned NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4;

// ---------------------------------------------------------------------------------------------
// Function-pointer typedefs, one per export, named <export>_fn. The fake library static_asserts
// its definitions against these, so a signature drift breaks the build.
extern "C" {
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlInitWithFlags_fn)(unsigned flags);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char* version, unsigned length);
typedef nvmlReturn_t (*nvmlSystemGetCudaDriverVersion_v2_fn)(int* cuda_driver_version);

typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned* device_count);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned index, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByUUID_fn)(const char* uuid, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByPciBusId_v2_fn)(const char* pci_bus_id, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetIndex_fn)(nvmlDevice_t device, unsigned* index);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t device, char* uuid, unsigned length);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfo_v3_fn)(nvmlDevice_t device, nvmlPciInfo_t* pci);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfoExt_fn)(nvmlDevice_t device, nvmlPciInfoExt_t* pci);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t device, char* name, unsigned length);
typedef nvmlReturn_t (*nvmlDeviceGetSerial_fn)(nvmlDevice_t device, char* serial, unsigned length);
typedef nvmlReturn_t (*nvmlDeviceGetArchitecture_fn)(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch);

typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t device, nvmlUtilization_t* utilization);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t device, nvmlMemory_t* memory);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2_fn)(nvmlDevice_t device, nvmlMemory_v2_t* memory);
typedef nvmlReturn_t (*nvmlDeviceGetClockInfo_fn)(nvmlDevice_t device, nvmlClockType_t type,
                                                  unsigned* clock_mhz);
typedef nvmlReturn_t (*nvmlDeviceGetMaxClockInfo_fn)(nvmlDevice_t device, nvmlClockType_t type,
                                                     unsigned* clock_mhz);
typedef nvmlReturn_t (*nvmlDeviceGetClock_fn)(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id,
                                              unsigned* clock_mhz);
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t device, unsigned* power_mw);
typedef nvmlReturn_t (*nvmlDeviceGetTotalEnergyConsumption_fn)(nvmlDevice_t device,
                                                               unsigned long long* energy_mj);
typedef nvmlReturn_t (*nvmlDeviceGetEnforcedPowerLimit_fn)(nvmlDevice_t device, unsigned* limit_mw);
typedef nvmlReturn_t (*nvmlDeviceGetTemperatureV_fn)(nvmlDevice_t device, nvmlTemperature_t* temperature);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                    unsigned* temp_c);
typedef nvmlReturn_t (*nvmlDeviceGetCurrentClocksEventReasons_fn)(nvmlDevice_t device,
                                                                  unsigned long long* reasons);
typedef nvmlReturn_t (*nvmlDeviceGetSupportedClocksEventReasons_fn)(nvmlDevice_t device,
                                                                    unsigned long long* reasons);
typedef nvmlReturn_t (*nvmlDeviceGetCurrentClocksThrottleReasons_fn)(nvmlDevice_t device,
                                                                     unsigned long long* reasons);
typedef nvmlReturn_t (*nvmlDeviceGetSupportedClocksThrottleReasons_fn)(nvmlDevice_t device,
                                                                       unsigned long long* reasons);
typedef nvmlReturn_t (*nvmlDeviceGetPerformanceState_fn)(nvmlDevice_t device, nvmlPstates_t* pstate);

typedef nvmlReturn_t (*nvmlDeviceGetEccMode_fn)(nvmlDevice_t device, nvmlEnableState_t* current,
                                                nvmlEnableState_t* pending);
typedef nvmlReturn_t (*nvmlDeviceGetTotalEccErrors_fn)(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                                       nvmlEccCounterType_t counter_type,
                                                       unsigned long long* count);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryErrorCounter_fn)(nvmlDevice_t device,
                                                           nvmlMemoryErrorType_t error_type,
                                                           nvmlEccCounterType_t counter_type,
                                                           nvmlMemoryLocation_t location,
                                                           unsigned long long* count);
typedef nvmlReturn_t (*nvmlDeviceGetSramEccErrorStatus_fn)(nvmlDevice_t device,
                                                           nvmlEccSramErrorStatus_t* status);
typedef nvmlReturn_t (*nvmlDeviceGetRetiredPages_v2_fn)(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                        unsigned* page_count, unsigned long long* addresses,
                                                        unsigned long long* timestamps);
typedef nvmlReturn_t (*nvmlDeviceGetRetiredPagesPendingStatus_fn)(nvmlDevice_t device,
                                                                  nvmlEnableState_t* is_pending);
typedef nvmlReturn_t (*nvmlDeviceGetRemappedRows_fn)(nvmlDevice_t device, unsigned* corr_rows,
                                                     unsigned* unc_rows, unsigned* is_pending,
                                                     unsigned* failure_occurred);
typedef nvmlReturn_t (*nvmlDeviceGetRowRemapperHistogram_fn)(nvmlDevice_t device,
                                                             nvmlRowRemapperHistogramValues_t* values);

typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t* set);
typedef nvmlReturn_t (*nvmlDeviceGetSupportedEventTypes_fn)(nvmlDevice_t device,
                                                            unsigned long long* event_types);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t device, unsigned long long event_types,
                                                    nvmlEventSet_t set);
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t set, nvmlEventData_t* data,
                                               unsigned timeout_ms);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t set);

typedef nvmlReturn_t (*nvmlDeviceGetNvLinkState_fn)(nvmlDevice_t device, unsigned link,
                                                    nvmlEnableState_t* is_active);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkErrorCounter_fn)(nvmlDevice_t device, unsigned link,
                                                           nvmlNvLinkErrorCounter_t counter,
                                                           unsigned long long* value);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkVersion_fn)(nvmlDevice_t device, unsigned link, unsigned* version);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo_v2_fn)(nvmlDevice_t device, unsigned link,
                                                               nvmlPciInfo_t* pci);
typedef nvmlReturn_t (*nvmlDeviceGetNvLinkUtilizationCounter_fn)(nvmlDevice_t device, unsigned link,
                                                                 unsigned counter, unsigned long long* rx,
                                                                 unsigned long long* tx);

typedef nvmlReturn_t (*nvmlDeviceGetPcieReplayCounter_fn)(nvmlDevice_t device, unsigned* value);
typedef nvmlReturn_t (*nvmlDeviceGetPcieThroughput_fn)(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                       unsigned* value_kbps);
typedef nvmlReturn_t (*nvmlDeviceGetCurrPcieLinkGeneration_fn)(nvmlDevice_t device, unsigned* gen);
typedef nvmlReturn_t (*nvmlDeviceGetCurrPcieLinkWidth_fn)(nvmlDevice_t device, unsigned* width);
typedef nvmlReturn_t (*nvmlDeviceGetMaxPcieLinkGeneration_fn)(nvmlDevice_t device, unsigned* gen);
typedef nvmlReturn_t (*nvmlDeviceGetMaxPcieLinkWidth_fn)(nvmlDevice_t device, unsigned* width);

typedef nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3_fn)(nvmlDevice_t device, unsigned* info_count,
                                                                   nvmlProcessInfo_t* infos);
typedef nvmlReturn_t (*nvmlDeviceGetProcessesUtilizationInfo_fn)(nvmlDevice_t device,
                                                                 nvmlProcessesUtilizationInfo_t* info);
typedef nvmlReturn_t (*nvmlDeviceGetFieldValues_fn)(nvmlDevice_t device, int values_count,
                                                    nvmlFieldValue_t* values);
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t device, unsigned* current_mode,
                                                unsigned* pending_mode);
// MIG device enumeration (11.0+). A MIG device handle is a handle of its own (distinct from the
// parent's); most device calls on it return NOT_SUPPORTED (utilisation rates included), memory
// info and compute processes answer per instance. GetMaxMigDeviceCount is 0 with MIG off;
// GetMigDeviceHandleByIndex: NOT_FOUND for an unpopulated index below the max count,
// INVALID_ARGUMENT past it.
typedef nvmlReturn_t (*nvmlDeviceGetMaxMigDeviceCount_fn)(nvmlDevice_t device, unsigned* count);
typedef nvmlReturn_t (*nvmlDeviceGetMigDeviceHandleByIndex_fn)(nvmlDevice_t device, unsigned index,
                                                               nvmlDevice_t* mig_device);
typedef nvmlReturn_t (*nvmlDeviceIsMigDeviceHandle_fn)(nvmlDevice_t device, unsigned* is_mig_device);
typedef nvmlReturn_t (*nvmlDeviceGetGpuInstanceId_fn)(nvmlDevice_t device, unsigned* id);
typedef nvmlReturn_t (*nvmlDeviceGetComputeInstanceId_fn)(nvmlDevice_t device, unsigned* id);
typedef nvmlReturn_t (*nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn)(nvmlDevice_t mig_device,
                                                                        nvmlDevice_t* device);

typedef nvmlReturn_t (*nvmlGpmQueryDeviceSupport_fn)(nvmlDevice_t device, nvmlGpmSupport_t* support);
typedef nvmlReturn_t (*nvmlGpmSampleAlloc_fn)(nvmlGpmSample_t* sample);
typedef nvmlReturn_t (*nvmlGpmSampleFree_fn)(nvmlGpmSample_t sample);
typedef nvmlReturn_t (*nvmlGpmSampleGet_fn)(nvmlDevice_t device, nvmlGpmSample_t sample);
typedef nvmlReturn_t (*nvmlGpmMigSampleGet_fn)(nvmlDevice_t device, unsigned gpu_instance_id,
                                               nvmlGpmSample_t sample);
typedef nvmlReturn_t (*nvmlGpmMetricsGet_fn)(nvmlGpmMetricsGet_t* metrics_get);
}  // extern "C"

// NOLINTEND(readability-identifier-naming)

// ---------------------------------------------------------------------------------------------
// The exports the collector resolves with dlsym. Required ones make the collector give up (the
// library is not a usable NVML); optional ones disable the series they feed when missing
// (older drivers, §1.3 "first seen").
struct Symbol {
  std::string_view name;
  bool required;
};

inline constexpr std::array kSymbols = {
    Symbol{"nvmlInit_v2", true},
    Symbol{"nvmlInitWithFlags", false},
    Symbol{"nvmlShutdown", true},
    Symbol{"nvmlErrorString", true},
    Symbol{"nvmlSystemGetDriverVersion", false},
    Symbol{"nvmlSystemGetCudaDriverVersion_v2", false},
    Symbol{"nvmlDeviceGetCount_v2", true},
    Symbol{"nvmlDeviceGetHandleByIndex_v2", true},
    Symbol{"nvmlDeviceGetHandleByUUID", false},
    Symbol{"nvmlDeviceGetHandleByPciBusId_v2", false},
    Symbol{"nvmlDeviceGetIndex", false},
    Symbol{"nvmlDeviceGetUUID", true},
    Symbol{"nvmlDeviceGetPciInfo_v3", false},
    Symbol{"nvmlDeviceGetPciInfoExt", false},
    Symbol{"nvmlDeviceGetName", false},
    Symbol{"nvmlDeviceGetSerial", false},
    Symbol{"nvmlDeviceGetArchitecture", false},
    Symbol{"nvmlDeviceGetUtilizationRates", false},
    Symbol{"nvmlDeviceGetMemoryInfo", false},
    Symbol{"nvmlDeviceGetMemoryInfo_v2", false},
    Symbol{"nvmlDeviceGetClockInfo", false},
    Symbol{"nvmlDeviceGetMaxClockInfo", false},
    Symbol{"nvmlDeviceGetClock", false},
    Symbol{"nvmlDeviceGetPowerUsage", false},
    Symbol{"nvmlDeviceGetTotalEnergyConsumption", false},
    Symbol{"nvmlDeviceGetEnforcedPowerLimit", false},
    Symbol{"nvmlDeviceGetTemperatureV", false},
    Symbol{"nvmlDeviceGetTemperature", false},
    Symbol{"nvmlDeviceGetCurrentClocksEventReasons", false},
    Symbol{"nvmlDeviceGetSupportedClocksEventReasons", false},
    Symbol{"nvmlDeviceGetCurrentClocksThrottleReasons", false},
    Symbol{"nvmlDeviceGetSupportedClocksThrottleReasons", false},
    Symbol{"nvmlDeviceGetPerformanceState", false},
    Symbol{"nvmlDeviceGetEccMode", false},
    Symbol{"nvmlDeviceGetTotalEccErrors", false},
    Symbol{"nvmlDeviceGetMemoryErrorCounter", false},
    Symbol{"nvmlDeviceGetSramEccErrorStatus", false},
    Symbol{"nvmlDeviceGetRetiredPages_v2", false},
    Symbol{"nvmlDeviceGetRetiredPagesPendingStatus", false},
    Symbol{"nvmlDeviceGetRemappedRows", false},
    Symbol{"nvmlDeviceGetRowRemapperHistogram", false},
    Symbol{"nvmlEventSetCreate", false},
    Symbol{"nvmlDeviceGetSupportedEventTypes", false},
    Symbol{"nvmlDeviceRegisterEvents", false},
    Symbol{"nvmlEventSetWait_v2", false},
    Symbol{"nvmlEventSetFree", false},
    Symbol{"nvmlDeviceGetNvLinkState", false},
    Symbol{"nvmlDeviceGetNvLinkErrorCounter", false},
    Symbol{"nvmlDeviceGetNvLinkVersion", false},
    Symbol{"nvmlDeviceGetNvLinkRemotePciInfo_v2", false},
    Symbol{"nvmlDeviceGetNvLinkUtilizationCounter", false},
    Symbol{"nvmlDeviceGetPcieReplayCounter", false},
    Symbol{"nvmlDeviceGetPcieThroughput", false},
    Symbol{"nvmlDeviceGetCurrPcieLinkGeneration", false},
    Symbol{"nvmlDeviceGetCurrPcieLinkWidth", false},
    Symbol{"nvmlDeviceGetMaxPcieLinkGeneration", false},
    Symbol{"nvmlDeviceGetMaxPcieLinkWidth", false},
    Symbol{"nvmlDeviceGetComputeRunningProcesses_v3", false},
    Symbol{"nvmlDeviceGetProcessesUtilizationInfo", false},
    Symbol{"nvmlDeviceGetFieldValues", false},
    Symbol{"nvmlDeviceGetMigMode", false},
    Symbol{"nvmlGpmQueryDeviceSupport", false},
    Symbol{"nvmlGpmSampleAlloc", false},
    Symbol{"nvmlGpmSampleFree", false},
    Symbol{"nvmlGpmSampleGet", false},
    Symbol{"nvmlGpmMigSampleGet", false},
    Symbol{"nvmlGpmMetricsGet", false},
    // Appended (not inserted) so the fake's per-function NOT_SUPPORTED mask bits stay put.
    Symbol{"nvmlDeviceGetMaxMigDeviceCount", false},
    Symbol{"nvmlDeviceGetMigDeviceHandleByIndex", false},
    Symbol{"nvmlDeviceIsMigDeviceHandle", false},
    Symbol{"nvmlDeviceGetGpuInstanceId", false},
    Symbol{"nvmlDeviceGetComputeInstanceId", false},
    Symbol{"nvmlDeviceGetDeviceHandleFromMigDeviceHandle", false},
};

// Position of an export in kSymbols, or kSymbols.size() when absent (usable in constant
// expressions, so a collector can index a resolved-pointer array by name at compile time).
constexpr std::size_t SymbolIndex(std::string_view name) {
  for (std::size_t i = 0; i < kSymbols.size(); ++i) {
    if (kSymbols[i].name == name) return i;
  }
  return kSymbols.size();
}

}  // namespace ithbat::nvml
