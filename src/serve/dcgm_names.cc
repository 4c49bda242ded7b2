#include "serve/dcgm_names.h"

#include <array>

namespace ithbat::serve {
namespace {

constexpr MetricType kG = MetricType::kGauge;
constexpr MetricType kC = MetricType::kCounter;
constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
constexpr double kMHz = 1e-6;
constexpr double kPercent = 100.0;

// The fields are those of dcgm-exporter's default counter set (etc/default-counters.csv) and
// its DCP set that the agent measures too, in DCGM's units; tests/serve/dcgm_names_test.cc
// checks each source and selector against what the GPU collector describes, and
// tests/integration/dcgm_exporter_names.sh every default field against dcgm-exporter's own list.
// Left out because the agent does not read them: DCGM_FI_DEV_ENC_UTIL/DEC_UTIL (the video
// engines), DCGM_FI_DEV_VGPU_LICENSE_STATUS (vGPU guests), the *_VIOLATION times (NVML's
// perf-policy counters), DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (a sum of DCGM's own NVLink
// bandwidth counters, in a unit DCGM does not document; ithbat_gpu_nvlink_bytes_total counts
// bytes), and DCGM_FI_DEV_XID_ERRORS, whose value is the number of the last Xid (the agent
// counts Xids: ithbat_gpu_xid_errors_total and, by code, ithbat_kmsg_xid_events_total).
// One field per entry reads better than one argument per line.
// clang-format off
constexpr std::array kAliases = {
    DcgmAlias{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "ithbat_gpu_remapped_rows", {{"kind", "corrected"}}, 1, kC,
              "Rows remapped for correctable errors"},
    DcgmAlias{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ithbat_gpu_ecc_errors_total",
              {{"type", "uncorrected"}, {"counter", "aggregate"}}, 1, kC,
              "Uncorrectable (double-bit) ECC errors over the GPU's lifetime"},
    DcgmAlias{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ithbat_gpu_ecc_errors_total",
              {{"type", "uncorrected"}, {"counter", "volatile"}}, 1, kC,
              "Uncorrectable (double-bit) ECC errors since the driver was loaded"},
    DcgmAlias{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ithbat_gpu_ecc_errors_total",
              {{"type", "corrected"}, {"counter", "aggregate"}}, 1, kC,
              "Corrected (single-bit) ECC errors over the GPU's lifetime"},
    DcgmAlias{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ithbat_gpu_ecc_errors_total",
              {{"type", "corrected"}, {"counter", "volatile"}}, 1, kC,
              "Corrected (single-bit) ECC errors since the driver was loaded"},
    DcgmAlias{"DCGM_FI_DEV_FB_FREE", "ithbat_gpu_memory_free_bytes", {}, kMiB, kG,
              "Device memory not allocated (MiB)"},
    DcgmAlias{"DCGM_FI_DEV_FB_RESERVED", "ithbat_gpu_memory_reserved_bytes", {}, kMiB, kG,
              "Device memory reserved by the driver and firmware (MiB)"},
    DcgmAlias{"DCGM_FI_DEV_FB_TOTAL", "ithbat_gpu_memory_total_bytes", {}, kMiB, kG, "Installed device memory (MiB)"},
    DcgmAlias{"DCGM_FI_DEV_FB_USED", "ithbat_gpu_memory_used_bytes", {}, kMiB, kG,
              "Device memory allocated by applications (MiB)"},
    DcgmAlias{"DCGM_FI_DEV_GPU_TEMP", "ithbat_gpu_temperature_celsius", {}, 1, kG, "GPU die temperature (C)"},
    DcgmAlias{"DCGM_FI_DEV_GPU_UTIL", "ithbat_gpu_utilization_ratio", {}, kPercent, kG,
              "Share of the sample period a kernel ran on the GPU (%)"},
    DcgmAlias{"DCGM_FI_DEV_MEMORY_TEMP", "ithbat_gpu_memory_temperature_celsius", {}, 1, kG,
              "Device memory temperature (C)"},
    DcgmAlias{"DCGM_FI_DEV_MEM_CLOCK", "ithbat_gpu_clock_hertz", {{"clock", "memory"}}, kMHz, kG,
              "Memory clock (MHz)"},
    DcgmAlias{"DCGM_FI_DEV_MEM_COPY_UTIL", "ithbat_gpu_memory_utilization_ratio", {}, kPercent, kG,
              "Share of the sample period device memory was read or written (%)"},
    DcgmAlias{"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "ithbat_gpu_nvlink_errors_total", {{"counter", "crc_data"}}, 1, kC, "NVLink data CRC errors, all links"},
    DcgmAlias{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "ithbat_gpu_nvlink_errors_total", {{"counter", "crc_flit"}}, 1, kC, "NVLink flow-control CRC errors, all links"},
    DcgmAlias{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "ithbat_gpu_nvlink_errors_total", {{"counter", "recovery"}}, 1, kC, "NVLink recovery errors, all links"},
    DcgmAlias{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "ithbat_gpu_nvlink_errors_total", {{"counter", "replay"}}, 1, kC, "NVLink replay errors, all links"},
    DcgmAlias{"DCGM_FI_DEV_PCIE_LINK_GEN", "ithbat_gpu_pcie_link_generation", {}, 1, kG,
              "Current PCIe link generation"},
    DcgmAlias{"DCGM_FI_DEV_PCIE_LINK_WIDTH", "ithbat_gpu_pcie_link_width", {}, 1, kG,
              "Current PCIe link width (lanes)"},
    DcgmAlias{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "ithbat_gpu_pcie_replays_total", {}, 1, kC,
              "PCIe replays since the driver was loaded"},
    DcgmAlias{"DCGM_FI_DEV_POWER_MGMT_LIMIT", "ithbat_gpu_power_limit_watts", {}, 1, kG,
              "Power limit the driver enforces (W)"},
    DcgmAlias{"DCGM_FI_DEV_POWER_USAGE", "ithbat_gpu_power_watts", {}, 1, kG, "Board power draw (W)"},
    DcgmAlias{"DCGM_FI_DEV_PSTATE", "ithbat_gpu_performance_state", {}, 1, kG,
              "Performance state (0 = P0, fastest)"},
    DcgmAlias{"DCGM_FI_DEV_RETIRED_DBE", "ithbat_gpu_retired_pages", {{"cause", "double_bit"}}, 1, kC,
              "Pages retired for double-bit errors"},
    DcgmAlias{"DCGM_FI_DEV_RETIRED_PENDING", "ithbat_gpu_retired_pages_pending", {}, 1, kG,
              "1 when a page retirement waits for the next driver reload"},
    DcgmAlias{"DCGM_FI_DEV_RETIRED_SBE", "ithbat_gpu_retired_pages", {{"cause", "multiple_single_bit"}}, 1, kC,
              "Pages retired for repeated single-bit errors"},
    DcgmAlias{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "ithbat_gpu_row_remap_failure", {}, 1, kG,
              "1 when a row remap failed"},
    DcgmAlias{"DCGM_FI_DEV_ROW_REMAP_PENDING", "ithbat_gpu_row_remap_pending", {}, 1, kG,
              "1 when a row remap waits for a GPU reset"},
    DcgmAlias{"DCGM_FI_DEV_SM_CLOCK", "ithbat_gpu_clock_hertz", {{"clock", "sm"}}, kMHz, kG, "SM clock (MHz)"},
    DcgmAlias{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "ithbat_gpu_energy_joules_total", {}, 1000, kC,
              "Energy used since the driver was loaded (mJ)"},
    DcgmAlias{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "ithbat_gpu_remapped_rows", {{"kind", "uncorrected"}}, 1, kC,
              "Rows remapped for uncorrectable errors"},
    DcgmAlias{"DCGM_FI_PROF_DRAM_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "dram_bandwidth"}}, 1, kG,
              "Share of peak device-memory bandwidth used"},
    DcgmAlias{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "graphics_activity"}}, 1, kG,
              "Share of time the graphics or compute engine was active"},
    DcgmAlias{"DCGM_FI_PROF_NVLINK_RX_BYTES", "ithbat_gpu_gpm_bandwidth_bytes_per_second",
              {{"bus", "nvlink"}, {"direction", "rx"}}, 1, kG,
              "NVLink bytes received per second"},
    DcgmAlias{"DCGM_FI_PROF_NVLINK_TX_BYTES", "ithbat_gpu_gpm_bandwidth_bytes_per_second",
              {{"bus", "nvlink"}, {"direction", "tx"}}, 1, kG,
              "NVLink bytes sent per second"},
    DcgmAlias{"DCGM_FI_PROF_PCIE_RX_BYTES", "ithbat_gpu_gpm_bandwidth_bytes_per_second",
              {{"bus", "pcie"}, {"direction", "rx"}}, 1, kG,
              "PCIe bytes received per second"},
    DcgmAlias{"DCGM_FI_PROF_PCIE_TX_BYTES", "ithbat_gpu_gpm_bandwidth_bytes_per_second",
              {{"bus", "pcie"}, {"direction", "tx"}}, 1, kG,
              "PCIe bytes sent per second"},
    DcgmAlias{"DCGM_FI_PROF_PIPE_FP16_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "fp16_pipe"}}, 1, kG,
              "Share of cycles the FP16 pipe was active"},
    DcgmAlias{"DCGM_FI_PROF_PIPE_FP32_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "fp32_pipe"}}, 1, kG,
              "Share of cycles the FP32 pipe was active"},
    DcgmAlias{"DCGM_FI_PROF_PIPE_FP64_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "fp64_pipe"}}, 1, kG,
              "Share of cycles the FP64 pipe was active"},
    DcgmAlias{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "tensor_any"}}, 1, kG,
              "Share of cycles any tensor pipe was active"},
    DcgmAlias{"DCGM_FI_PROF_SM_ACTIVE", "ithbat_gpu_gpm_ratio", {{"metric", "sm_activity"}}, 1, kG,
              "Share of time at least one warp was resident on an SM, averaged over SMs"},
    DcgmAlias{"DCGM_FI_PROF_SM_OCCUPANCY", "ithbat_gpu_gpm_ratio", {{"metric", "sm_occupancy"}}, 1, kG,
              "Resident warps as a share of the SMs' maximum"},
};
// clang-format on

}  // namespace

std::span<const DcgmAlias> DcgmAliases() { return kAliases; }

}  // namespace ithbat::serve
