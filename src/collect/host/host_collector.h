#pragma once
// The host collector: node-wide CPU, memory, pressure (PSI), load and paging statistics from
// /proc/stat, /proc/meminfo, /proc/pressure/{cpu,memory,io}, /proc/loadavg and /proc/vmstat,
// converted to base units (seconds, not jiffies; bytes, not kB).
//
// Roots: every file is read under HostOptions::procfs (default /proc), which may point at a
// host's /proc mounted into a container or at a fixture tree. It is for node statistics only;
// whatever later needs the identity of processes (pid → job) reads the agent's real /proc,
// never this root.
//
// Lifecycle (see agent::Collector): Create → Init(sink) checks that the root is a directory
// (kNotFound if not) → Start → Collect(t) on the runtime's worker thread → Stop. Not
// thread-safe beyond that contract: one Collect at a time. The collector keeps a pointer to the
// sink given to Init, which must outlive it.
//
// Errors: a file that is missing, unreadable, larger than max_file_bytes or malformed is one
// ReportError per tick naming the file and the problem; the other files are still collected
// and the collector stays up. Only when every file fails does Collect return an error. A kernel
// without PSI (no <procfs>/pressure, or psi=0) is degraded mode, not an error.
//
// Series are registered with the sink the first time their value is seen (a field an older
// kernel does not print never becomes a series) and appended by SeriesRef afterwards; a
// registration the sink refuses is reported once and that series is skipped from then on.
#include <array>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/collector.h"
#include "collect/host/proc_parse.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect {

struct HostOptions {
  std::filesystem::path procfs = "/proc";  // node statistics only (see above)
  size_t max_file_bytes = 1 << 20;         // per file; /proc/stat of a 256-CPU box is ~30 KiB
  long user_hz = 0;                        // ticks per second in /proc/stat; 0 = sysconf(_SC_CLK_TCK)
};

class HostCollector final : public agent::Collector {
 public:
  // Never fails: what can go wrong with the root shows at Init (and per file at Collect).
  // max_file_bytes 0 and user_hz <= 0 mean the defaults.
  static std::unique_ptr<HostCollector> Create(HostOptions options);

  std::vector<MetricDesc> Describe() const override;
  const HostOptions& options() const { return options_; }

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  enum FileId : uint8_t { kStat, kMeminfo, kLoadavg, kVmstat, kPsiCpu, kPsiMemory, kPsiIo, kFileCount };
  enum class SlotState : uint8_t { kNew, kReady, kFailed };
  struct Slot {
    uint16_t desc = 0;           // index into descs_
    std::string_view mode;       // the "mode" label value, or empty (static storage)
    SlotState state = SlotState::kNew;
    SeriesRef ref = 0;
  };

  explicit HostCollector(HostOptions options);

  // Reads and parses one file; the error names the file.
  Status CollectStat(TimeNs t);
  Status CollectMeminfo(TimeNs t);
  Status CollectLoadavg(TimeNs t);
  Status CollectVmstat(TimeNs t);
  Status CollectPressure(size_t resource, TimeNs t);
  Status ReadFile(FileId file);
  std::unexpected<Error> FileError(FileId file, const Error& e) const;

  void Emit(size_t series, TimeNs t, double value);
  bool IsPsiMissing(const Error& e) const;

  HostOptions options_;
  double user_hz_ = 100;
  std::vector<MetricDesc> descs_;
  std::vector<Slot> slots_;
  std::array<std::filesystem::path, kFileCount> paths_;
  std::string buffer_;  // file content, capacity reused across ticks
  Sink* sink_ = nullptr;
  bool psi_missing_ = false;  // the degraded reason currently set
  // Append failures of the current tick: reported once per tick, not once per series.
  size_t append_failures_ = 0;
  std::optional<Error> first_append_error_;
};

}  // namespace ithbat::collect
