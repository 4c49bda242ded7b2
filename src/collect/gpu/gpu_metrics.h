#pragma once
// The GPU collector's series table and the plain-value snapshot a GPU reader fills.
//
// A reader thread never touches the sink: it turns NVML answers into GpuSample{metric, key,
// value} (already in base units) and the collector, on the runtime's worker, maps each
// (metric, key) to a SeriesRef. `key` holds the metric's extra label values: one label takes
// the whole 32 bits (a pid, a link), two labels take 16 bits each (low = first label).
#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/metric.h"
#include "core/result.h"

namespace ithbat::collect {

enum GpuMetric : uint16_t {
  kGpuInfo,
  kGpuLost,
  kGpuStalled,
  kGpuUtilGpu,
  kGpuUtilMemory,
  kGpuMemTotal,
  kGpuMemReserved,
  kGpuMemFree,
  kGpuMemUsed,
  kGpuClock,          // {clock}
  kGpuClockMax,       // {clock}
  kGpuPower,
  kGpuPowerLimit,
  kGpuEnergy,
  kGpuTemp,
  kGpuMemTemp,
  kGpuPstate,
  kGpuClockEvent,     // {reason}
  kGpuClockEventDuration,  // {reason}
  kGpuEccMode,
  kGpuEccErrors,      // {type, counter}
  kGpuEccLocErrors,   // {type, location} (aggregate counter)
  kGpuRetiredPages,   // {cause}
  kGpuRetiredPending,
  kGpuRemapped,       // {kind}: corrected, uncorrected
  kGpuRemapPending,
  kGpuRemapFailure,
  kGpuRemapBanks,     // {availability}
  kGpuPcieReplay,
  kGpuPcieThroughput,  // {direction} bytes/s
  kGpuPcieGen,
  kGpuPcieGenMax,
  kGpuPcieWidth,
  kGpuPcieWidthMax,
  kGpuPcieErrors,     // {counter}
  kGpuNvLinkUp,       // {link}
  kGpuNvLinkErrorsTotal,  // {counter}: all links
  kGpuNvLinkLinkErrors,   // {link, counter}, on change only
  kGpuNvLinkBytes,    // {direction, kind}
  kGpuRecoveryAction,
  kGpuProcesses,
  kGpuProcessMemory,  // {pid}
  kGpuGpm,            // {metric}: ratios
  kGpuGpmBandwidth,   // {bus, direction}: bytes/s
  kGpuMigEnabled,
  kGpuMigInstances,
  kGpuXidTotal,
  kGpuNvmlCalls,      // {family} (no gpu labels)
  kGpuNvmlCallSeconds,
  kGpuNvmlCallMax,
  kGpuNvmlCallLast,
  kGpuMetricCount,
};

struct GpuLabelDim {
  std::string_view label;                    // "" = none
  const std::string_view* names = nullptr;   // value names by key; nullptr = the key as a number
  size_t name_count = 0;
};

struct GpuMetricDef {
  GpuMetric id;
  std::string_view name, help, unit;
  MetricType type;
  GpuLabelDim d0, d1;
  bool on_change = false;   // registered only once non-zero
  bool per_gpu = true;      // gpu + gpu_uuid labels
};

const std::array<GpuMetricDef, kGpuMetricCount>& GpuMetricDefs();
std::vector<MetricDesc> GpuMetricDescs();  // in GpuMetricDefs order
// The label value of dimension `dim` (0/1) of metric `m` for `key`.
std::string GpuLabelValue(const GpuMetricDef& m, int dim, uint32_t key);

inline constexpr uint32_t GpuKey2(uint32_t a, uint32_t b) { return (a & 0xffff) | (b << 16); }

// Label value tables (index = key).
inline constexpr std::array<std::string_view, 4> kGpuClockNames = {"graphics", "sm", "memory", "video"};
inline constexpr std::array<std::string_view, 9> kGpuClockEventNames = {
    "gpu_idle",       "applications_clocks_setting", "sw_power_cap",           "hw_slowdown",
    "sync_boost",     "sw_thermal_slowdown",         "hw_thermal_slowdown",    "hw_power_brake_slowdown",
    "display_clock_setting"};
inline constexpr std::array<std::string_view, 3> kGpuSlowdownNames = {"sw_thermal", "hw_thermal", "hw_power_brake"};
inline constexpr std::array<std::string_view, 2> kGpuEccTypeNames = {"corrected", "uncorrected"};
inline constexpr std::array<std::string_view, 2> kGpuEccCounterNames = {"volatile", "aggregate"};
// nvmlMemoryLocation_t values 0..7.
inline constexpr std::array<std::string_view, 8> kGpuMemLocationNames = {
    "l1_cache", "l2_cache", "device_memory", "register_file", "texture_memory", "texture_shm", "cbu", "sram"};
inline constexpr std::array<std::string_view, 2> kGpuRetireCauseNames = {"multiple_single_bit", "double_bit"};
inline constexpr std::array<std::string_view, 2> kGpuRemapKindNames = {"corrected", "uncorrected"};
inline constexpr std::array<std::string_view, 5> kGpuRemapBankNames = {"max", "high", "partial", "low", "none"};
inline constexpr std::array<std::string_view, 2> kGpuDirectionNames = {"tx", "rx"};
inline constexpr std::array<std::string_view, 2> kGpuNvLinkBytesKindNames = {"data", "raw"};
// PCIe error counters (field ids 173..183 in order) + l0_to_recovery (169).
inline constexpr std::array<std::string_view, 12> kGpuPcieErrorNames = {
    "correctable", "naks_received", "receiver_error", "bad_tlp", "naks_sent", "bad_dllp",
    "non_fatal",   "fatal",         "unsupported_request", "lcrc", "lane", "l0_to_recovery"};
inline constexpr std::array<std::string_view, 5> kGpuNvLinkErrorNames = {"replay", "recovery", "crc_flit",
                                                                         "crc_data", "ecc_data"};
// GPM ratio metrics exported (ids from nvmlGpmMetricId_t), names are the label values.
struct GpuGpmDef {
  uint32_t id;
  std::string_view name;
};
inline constexpr std::array<GpuGpmDef, 13> kGpmRatioMetrics = {{
    {1, "graphics_activity"}, {2, "sm_activity"}, {3, "sm_occupancy"}, {4, "integer_pipe"},
    {5, "tensor_any"}, {6, "tensor_dfma"}, {7, "tensor_hmma"}, {8, "tensor_dmma"}, {9, "tensor_imma"},
    {10, "dram_bandwidth"}, {11, "fp64_pipe"}, {12, "fp32_pipe"}, {13, "fp16_pipe"},
}};
inline constexpr std::array<std::string_view, 13> kGpuGpmRatioNames = {
    "graphics_activity", "sm_activity", "sm_occupancy", "integer_pipe", "tensor_any",  "tensor_dfma", "tensor_hmma",
    "tensor_dmma",       "tensor_imma", "dram_bandwidth", "fp64_pipe", "fp32_pipe", "fp16_pipe"};
// GPM bandwidth metrics (MiB/s in NVML, bytes/s here): key = GpuKey2(bus, direction).
struct GpuGpmBandwidthDef {
  uint32_t id;
  uint32_t bus;        // index in kGpuBusNames
  uint32_t direction;  // index in kGpuDirectionNames
};
inline constexpr std::array<std::string_view, 2> kGpuBusNames = {"pcie", "nvlink"};
inline constexpr std::array<GpuGpmBandwidthDef, 4> kGpmBandwidthMetrics = {{
    {20, 0, 0}, {21, 0, 1}, {60, 1, 1}, {61, 1, 0}}};

// A GPU's identity, read once by its reader.
struct GpuStatic {
  uint32_t index = 0;          // NVML index (parent's for a MIG instance)
  std::string index_label;     // "3", or "3/1" for MIG instance 1 of GPU 3
  std::string uuid, model, pci_bus_id;
  std::string parent_index;    // "" unless a MIG instance
  void* device = nullptr;      // nvmlDevice_t
  bool mig = false;
};

struct GpuSample {
  uint16_t metric = 0;
  uint32_t key = 0;
  double value = 0;
};

// One MIG device of a partitioned GPU, read on the parent's reader thread.
struct GpuMigReading {
  GpuStatic identity;  // index_label "<parent>/<gi>/<ci>", MIG UUID, parent_index, mig = true
  std::vector<GpuSample> samples;
};

// What a reader hands back for one tick.
struct GpuReading {
  uint64_t tick_id = 0;
  std::optional<GpuStatic> identity;  // set on the read that identified the GPU
  bool lost = false;              // NVML said GPU_IS_LOST
  std::vector<GpuSample> samples;
  std::vector<GpuMigReading> mig;  // MIG devices present this tick (empty with MIG off)
  std::vector<Error> errors;      // partial failures (one call failed), reported by Collect
};

}  // namespace ithbat::collect
