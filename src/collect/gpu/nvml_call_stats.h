#pragma once
// Per-family timing of NVML calls. A failing GPU shows first as NVML calls that take seconds
// instead of microseconds, so every call is timed; the stats are lock-free because readers
// on several threads update them and the collector reads them once per tick.
#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "core/time.h"

namespace ithbat::collect {

enum class NvmlFamily : uint8_t {
  kSystem,       // init, shutdown, driver version, count, handles
  kDeviceInfo,   // uuid, name, pci info, architecture
  kUtilization,
  kMemory,
  kClocks,
  kPower,
  kTemperature,
  kClockEvents,
  kEcc,
  kRetirement,   // retired pages, remapped rows
  kPcie,
  kNvLink,
  kFieldValues,
  kProcesses,
  kGpm,
  kEvents,
  kMig,
  kCount,
};
inline constexpr size_t kNvmlFamilyCount = static_cast<size_t>(NvmlFamily::kCount);
inline constexpr std::array<std::string_view, kNvmlFamilyCount> kNvmlFamilyNamesForMetrics = {
    "system",    "device_info", "utilization", "memory", "clocks",       "power",     "temperature", "clock_events",
    "ecc",       "retirement",  "pcie",        "nvlink", "field_values", "processes", "gpm",         "events",
    "mig"};

struct NvmlCallStat {
  std::atomic<uint64_t> count{0};
  std::atomic<int64_t> sum_ns{0};
  std::atomic<int64_t> max_ns{0};
  std::atomic<int64_t> last_ns{0};

  void Record(TimeNs d) {
    count.fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(d, std::memory_order_relaxed);
    last_ns.store(d, std::memory_order_relaxed);
    int64_t m = max_ns.load(std::memory_order_relaxed);
    while (d > m && !max_ns.compare_exchange_weak(m, d, std::memory_order_relaxed)) {
    }
  }
};

using NvmlCallStats = std::array<NvmlCallStat, kNvmlFamilyCount>;

}  // namespace ithbat::collect
