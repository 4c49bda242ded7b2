#include "collect/gpu/gpu_metrics.h"

#include <fmt/format.h>

#include <cstdlib>

#include "collect/gpu/nvml_call_stats.h"

namespace ithbat::collect {
namespace {

template <size_t N>
constexpr GpuLabelDim Dim(std::string_view label, const std::array<std::string_view, N>& names) {
  return GpuLabelDim{label, names.data(), N};
}
constexpr GpuLabelDim NumDim(std::string_view label) { return GpuLabelDim{label, nullptr, 0}; }

constexpr MetricType kG = MetricType::kGauge;
constexpr MetricType kC = MetricType::kCounter;

const std::array<GpuMetricDef, kGpuMetricCount> kDefs = {{
    {kGpuInfo, "ithbat_gpu_info",
     "Always 1 per GPU; labels carry the model, PCI bus id and NVML driver version", "", kG},
    {kGpuLost, "ithbat_gpu_lost",
     "1 when NVML reports the GPU lost (GPU_IS_LOST: fell off the bus or needs a reset), else 0", "", kG},
    {kGpuStalled, "ithbat_gpu_nvml_stalled",
     "1 while an NVML call on this GPU has not returned within the collector's per-GPU deadline, else 0", "",
     kG},
    {kGpuUtilGpu, "ithbat_gpu_utilization_ratio",
     "Share of the last sample period in which a kernel was running on the GPU (coarse NVML duty cycle)",
     "ratio", kG},
    {kGpuUtilMemory, "ithbat_gpu_memory_utilization_ratio",
     "Share of the last sample period in which device memory was being read or written", "ratio", kG},
    {kGpuMemTotal, "ithbat_gpu_memory_total_bytes", "Installed device memory", "bytes", kG},
    {kGpuMemReserved, "ithbat_gpu_memory_reserved_bytes",
     "Device memory reserved by the driver and firmware (not usable by applications)", "bytes", kG},
    {kGpuMemFree, "ithbat_gpu_memory_free_bytes", "Device memory not allocated", "bytes", kG},
    {kGpuMemUsed, "ithbat_gpu_memory_used_bytes", "Device memory allocated by applications", "bytes", kG},
    {kGpuClock, "ithbat_gpu_clock_hertz", "Current clock frequency of each clock domain", "hertz", kG,
     Dim("clock", kGpuClockNames)},
    {kGpuClockMax, "ithbat_gpu_clock_max_hertz", "Maximum clock frequency of each clock domain", "hertz", kG,
     Dim("clock", kGpuClockNames)},
    {kGpuPower, "ithbat_gpu_power_watts", "Power draw of the board", "watts", kG},
    {kGpuPowerLimit, "ithbat_gpu_power_limit_watts", "Power limit the driver enforces now", "watts", kG},
    {kGpuEnergy, "ithbat_gpu_energy_joules_total", "Energy used by the GPU since the driver was loaded",
     "joules", kC},
    {kGpuTemp, "ithbat_gpu_temperature_celsius", "GPU die temperature", "celsius", kG},
    {kGpuMemTemp, "ithbat_gpu_memory_temperature_celsius", "Device memory (HBM) temperature", "celsius", kG},
    {kGpuPstate, "ithbat_gpu_performance_state", "Performance state (0 = P0, fastest; 15 = P15, slowest)", "",
     kG},
    {kGpuClockEvent, "ithbat_gpu_clock_event_active",
     "1 while the reason holds clocks down (NVML clock event reasons; idle and power cap are benign), else 0",
     "", kG, Dim("reason", kGpuClockEventNames)},
    {kGpuClockEventDuration, "ithbat_gpu_clock_event_seconds_total",
     "Time clocks were held down by thermal or power-brake slowdown", "seconds", kC,
     Dim("reason", kGpuSlowdownNames)},
    {kGpuEccMode, "ithbat_gpu_ecc_enabled", "1 when ECC is enabled on device memory, else 0", "", kG},
    {kGpuEccErrors, "ithbat_gpu_ecc_errors_total",
     "ECC errors by type; counter volatile resets at driver reload, aggregate is lifetime", "", kC,
     Dim("type", kGpuEccTypeNames), Dim("counter", kGpuEccCounterNames)},
    {kGpuEccLocErrors, "ithbat_gpu_ecc_location_errors_total",
     "Lifetime (aggregate) ECC errors by type and memory location", "", kC, Dim("type", kGpuEccTypeNames),
     Dim("location", kGpuMemLocationNames)},
    {kGpuRetiredPages, "ithbat_gpu_retired_pages", "Device memory pages retired, by cause", "", kG,
     Dim("cause", kGpuRetireCauseNames)},
    {kGpuRetiredPending, "ithbat_gpu_retired_pages_pending",
     "1 when a page retirement waits for the next driver reload, else 0", "", kG},
    {kGpuRemapped, "ithbat_gpu_remapped_rows", "Device memory rows remapped, by the error that caused it", "",
     kG, Dim("kind", kGpuRemapKindNames)},
    {kGpuRemapPending, "ithbat_gpu_row_remap_pending", "1 when a row remap waits for a GPU reset, else 0", "",
     kG},
    {kGpuRemapFailure, "ithbat_gpu_row_remap_failure",
     "1 when a row remap failed (the GPU needs service), else 0", "", kG},
    {kGpuRemapBanks, "ithbat_gpu_row_remap_banks",
     "Memory banks by how many spare rows they have left (row remapper histogram)", "", kG,
     Dim("availability", kGpuRemapBankNames)},
    {kGpuPcieReplay, "ithbat_gpu_pcie_replays_total", "PCIe replays (retransmitted packets) since driver load",
     "", kC},
    {kGpuPcieThroughput, "ithbat_gpu_pcie_throughput_bytes_per_second",
     "PCIe throughput over NVML's short sample window, by direction", "bytes_per_second", kG,
     Dim("direction", kGpuDirectionNames)},
    {kGpuPcieGen, "ithbat_gpu_pcie_link_generation", "Current PCIe link generation (below max = downtrained)",
     "", kG},
    {kGpuPcieGenMax, "ithbat_gpu_pcie_link_generation_max", "Maximum PCIe link generation of GPU and slot", "",
     kG},
    {kGpuPcieWidth, "ithbat_gpu_pcie_link_width", "Current PCIe link width in lanes (below max = downtrained)",
     "", kG},
    {kGpuPcieWidthMax, "ithbat_gpu_pcie_link_width_max", "Maximum PCIe link width in lanes", "", kG},
    {kGpuPcieErrors, "ithbat_gpu_pcie_errors_total", "PCIe error counters of the GPU's link, by counter", "",
     kC, Dim("counter", kGpuPcieErrorNames)},
    {kGpuNvLinkUp, "ithbat_gpu_nvlink_up", "1 when the NVLink link is active, else 0", "", kG,
     NumDim("link")},
    {kGpuNvLinkErrorsTotal, "ithbat_gpu_nvlink_errors_total", "NVLink errors summed over all links, by counter",
     "", kC, Dim("counter", kGpuNvLinkErrorNames)},
    {kGpuNvLinkLinkErrors, "ithbat_gpu_nvlink_link_errors_total",
     "NVLink errors of one link, by counter; a series exists only once its counter was non-zero", "", kC,
     NumDim("link"), Dim("counter", kGpuNvLinkErrorNames), /*on_change=*/true},
    {kGpuNvLinkBytes, "ithbat_gpu_nvlink_bytes_total",
     "NVLink traffic over all links; kind data is payload, raw includes protocol overhead", "bytes", kC,
     Dim("direction", kGpuDirectionNames), Dim("kind", kGpuNvLinkBytesKindNames)},
    {kGpuRecoveryAction, "ithbat_gpu_recovery_action",
     "What the driver says the GPU needs (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset)",
     "", kG},
    {kGpuProcesses, "ithbat_gpu_compute_processes", "Compute processes running on the GPU", "", kG},
    {kGpuProcessMemory, "ithbat_gpu_process_memory_used_bytes",
     "Device memory used by a compute process (pid as the host sees it)", "bytes", kG, NumDim("pid")},
    {kGpuGpm, "ithbat_gpu_gpm_ratio",
     "GPM activity over the last interval (Hopper+): SM activity and occupancy, tensor and other pipes, DRAM "
     "bandwidth, as a share of peak",
     "ratio", kG, Dim("metric", kGpuGpmRatioNames)},
    {kGpuGpmBandwidth, "ithbat_gpu_gpm_bandwidth_bytes_per_second",
     "GPM PCIe and NVLink bandwidth over the last interval (Hopper+)", "bytes_per_second", kG,
     Dim("bus", kGpuBusNames), Dim("direction", kGpuDirectionNames)},
    {kGpuMigEnabled, "ithbat_gpu_mig_enabled", "1 when MIG (multi-instance GPU) mode is on, else 0", "", kG},
    {kGpuMigInstances, "ithbat_gpu_mig_instances",
     "MIG devices on a GPU in MIG mode (0 with MIG off). Each is exported as a GPU of its own: "
     "gpu=\"<parent index>/<GPU instance id>/<compute instance id>\", gpu_uuid = its MIG-... UUID, "
     "parent_gpu = the parent's index; it carries the series NVML answers for MIG devices "
     "(ithbat_gpu_info, memory total/free/used, compute processes and their memory)",
     "", kG},
    {kGpuXidTotal, "ithbat_gpu_xid_errors_total", "Xid critical errors NVML delivered since the agent started",
     "", kC},
    {kGpuNvmlCalls, "ithbat_gpu_nvml_calls_total", "NVML calls made, by function family", "", kC,
     Dim("family", kNvmlFamilyNamesForMetrics), {}, false, /*per_gpu=*/false},
    {kGpuNvmlCallSeconds, "ithbat_gpu_nvml_call_seconds_total", "Time spent in NVML calls, by function family",
     "seconds", kC, Dim("family", kNvmlFamilyNamesForMetrics), {}, false, false},
    {kGpuNvmlCallMax, "ithbat_gpu_nvml_call_max_seconds",
     "Longest NVML call since the agent started, by function family", "seconds", kG,
     Dim("family", kNvmlFamilyNamesForMetrics), {}, false, false},
    {kGpuNvmlCallLast, "ithbat_gpu_nvml_call_last_seconds", "Duration of the latest NVML call, by function family",
     "seconds", kG, Dim("family", kNvmlFamilyNamesForMetrics), {}, false, false},
}};

}  // namespace

const std::array<GpuMetricDef, kGpuMetricCount>& GpuMetricDefs() {
  static const bool checked = [] {
    for (size_t i = 0; i < kDefs.size(); i++) {
      if (kDefs[i].id != i) std::abort();  // the table must follow the enum
    }
    return true;
  }();
  (void)checked;
  return kDefs;
}

std::vector<MetricDesc> GpuMetricDescs() {
  std::vector<MetricDesc> out;
  for (const GpuMetricDef& d : GpuMetricDefs()) {
    MetricDesc desc{std::string(d.name), std::string(d.help), std::string(d.unit), d.type, {}};
    if (d.per_gpu) desc.label_names = {"gpu", "gpu_uuid"};
    if (d.id == kGpuInfo) {
      desc.label_names.insert(desc.label_names.end(), {"model", "pci_bus_id", "driver_version"});
    }
    if (!d.d0.label.empty()) desc.label_names.emplace_back(d.d0.label);
    if (!d.d1.label.empty()) desc.label_names.emplace_back(d.d1.label);
    // Where known (collect/identity): the collector adds the process's job and ranks.
    if (d.id == kGpuProcessMemory) {
      desc.label_names.insert(desc.label_names.end(), {"job_id", "rank", "local_rank", "world_size"});
    }
    out.push_back(std::move(desc));
  }
  return out;
}

std::string GpuLabelValue(const GpuMetricDef& m, int dim, uint32_t key) {
  const GpuLabelDim& d = dim == 0 ? m.d0 : m.d1;
  uint32_t k = key;
  if (!m.d1.label.empty()) k = dim == 0 ? (key & 0xffff) : (key >> 16);
  if (d.names != nullptr) {
    if (k < d.name_count) return std::string(d.names[k]);
    return fmt::format("unknown_{}", k);
  }
  return fmt::format("{}", k);
}

}  // namespace ithbat::collect
