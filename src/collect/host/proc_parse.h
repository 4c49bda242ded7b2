#pragma once
// Pure parsers for the node-wide /proc files the host collector reads. They take the file's
// content (no I/O), return values in the kernel's own units (jiffies, kB already turned into
// bytes where the file says "kB", microseconds), and never crash on malformed input: a file
// that does not follow its format is a kParse error naming the line and the offending text.
//
// Strictness: every line is checked for the structure of its file (a garbage line is an error,
// not skipped), fields the kernel added over the years are optional, and fields every kernel
// since 2.6 prints are required (their absence means a truncated file).
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/result.h"

namespace ithbat::collect {

// /proc/stat. The columns of the aggregate "cpu" line, in the kernel's order; guest and
// guest_nice are left out because user and nice already include them.
inline constexpr size_t kCpuModeCount = 8;
inline constexpr std::array<std::string_view, kCpuModeCount> kCpuModes = {
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};

struct ProcStat {
  std::array<uint64_t, kCpuModeCount> cpu_jiffies{};  // summed over all CPUs, in USER_HZ ticks
  size_t cpu_modes = 0;        // columns present: 4 on 2.4 kernels, 8 since 2.6.11
  uint32_t cpus = 0;           // cpuN lines: the CPUs online now
  uint64_t context_switches = 0;
  uint64_t forks = 0;          // "processes": forks since boot
  uint64_t procs_running = 0;
  uint64_t procs_blocked = 0;
};
Result<ProcStat> ParseProcStat(std::string_view text);

// /proc/meminfo, the fields the collector exports. Values in bytes; nullopt when the kernel
// does not print the field (MemAvailable appeared in 3.14).
enum class MemField : uint8_t {
  kTotal, kAvailable, kFree, kBuffers, kCached, kDirty, kWriteback, kSwapTotal, kSwapFree,
};
inline constexpr size_t kMemFieldCount = 9;
// The kernel's name of each field (MemTotal, ...) and the name used in metric names (total).
std::string_view MemFieldKernelName(MemField f);
std::string_view MemFieldMetricName(MemField f);

struct MemInfo {
  std::array<std::optional<uint64_t>, kMemFieldCount> bytes;
  std::optional<uint64_t> Get(MemField f) const { return bytes[static_cast<size_t>(f)]; }
};
// MemTotal and MemFree are required.
Result<MemInfo> ParseMemInfo(std::string_view text);

// /proc/pressure/{cpu,memory,io} (PSI, Linux 4.20+).
struct PsiLine {
  double avg10 = 0;       // percent of the last 10 s some/all tasks were stalled
  double avg60 = 0;
  double avg300 = 0;
  uint64_t total_us = 0;  // cumulative stall time, microseconds
};
struct Pressure {
  std::optional<PsiLine> some;  // required
  std::optional<PsiLine> full;  // absent for cpu before 5.13
};
Result<Pressure> ParsePressure(std::string_view text);

// /proc/loadavg: "0.00 0.06 0.03 1/84 5502".
struct LoadAvg {
  double load1 = 0;
  double load5 = 0;
  double load15 = 0;
};
Result<LoadAvg> ParseLoadAvg(std::string_view text);

// /proc/vmstat, the counters the collector exports. pgmajfault is required.
struct VmStat {
  uint64_t major_page_faults = 0;
};
Result<VmStat> ParseVmStat(std::string_view text);

}  // namespace ithbat::collect
