#include "collect/host/host_collector.h"

#include <unistd.h>

#include <cstdlib>
#include <system_error>
#include <utility>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

constexpr std::array<std::string_view, 3> kPsiResources = {"cpu", "memory", "io"};
constexpr std::array<std::string_view, 2> kPsiKinds = {"some", "full"};

// Series layout: one slot per (metric, labels), in the order the constructor adds them.
constexpr size_t kCpuSeriesBase = 0;  // + mode
constexpr size_t kCpusSeries = kCpuSeriesBase + kCpuModeCount;
constexpr size_t kContextSwitchesSeries = kCpusSeries + 1;
constexpr size_t kForksSeries = kContextSwitchesSeries + 1;
constexpr size_t kProcsRunningSeries = kForksSeries + 1;
constexpr size_t kProcsBlockedSeries = kProcsRunningSeries + 1;
constexpr size_t kMemSeriesBase = kProcsBlockedSeries + 1;  // + MemField
constexpr size_t kPsiSeriesBase = kMemSeriesBase + kMemFieldCount;
// PSI: (resource, kind) pairs, each a waiting-seconds counter then an avg10 ratio.
constexpr size_t PsiSeries(size_t resource, size_t kind, bool avg10) {
  return kPsiSeriesBase + (resource * kPsiKinds.size() + kind) * 2 + (avg10 ? 1 : 0);
}
constexpr size_t kLoad1Series = kPsiSeriesBase + kPsiResources.size() * kPsiKinds.size() * 2;
constexpr size_t kLoad5Series = kLoad1Series + 1;
constexpr size_t kLoad15Series = kLoad5Series + 1;
constexpr size_t kMajorFaultsSeries = kLoad15Series + 1;
constexpr size_t kSeriesCount = kMajorFaultsSeries + 1;

constexpr std::array<std::string_view, kMemFieldCount> kMemHelp = {
    "Total usable memory (MemTotal)",
    "Memory available for new workloads without swapping, estimated by the kernel (MemAvailable)",
    "Memory not used for anything (MemFree)",
    "Memory in block device buffers (Buffers)",
    "Memory in the page cache, excluding swap cache (Cached)",
    "Memory waiting to be written back to disk (Dirty)",
    "Memory being written back to disk now (Writeback)",
    "Total swap space (SwapTotal)",
    "Unused swap space (SwapFree)",
};

}  // namespace

std::unique_ptr<HostCollector> HostCollector::Create(HostOptions options) {
  return std::unique_ptr<HostCollector>(new HostCollector(std::move(options)));
}

HostCollector::HostCollector(HostOptions options) : Collector("host"), options_(std::move(options)) {
  if (options_.max_file_bytes == 0) options_.max_file_bytes = HostOptions{}.max_file_bytes;
  if (options_.user_hz <= 0) {
    const long hz = sysconf(_SC_CLK_TCK);
    options_.user_hz = hz > 0 ? hz : 100;  // 100 is USER_HZ on every Linux architecture
  }
  user_hz_ = static_cast<double>(options_.user_hz);

  const auto& root = options_.procfs;
  paths_[kStat] = root / "stat";
  paths_[kMeminfo] = root / "meminfo";
  paths_[kLoadavg] = root / "loadavg";
  paths_[kVmstat] = root / "vmstat";
  paths_[kPsiCpu] = root / "pressure" / "cpu";
  paths_[kPsiMemory] = root / "pressure" / "memory";
  paths_[kPsiIo] = root / "pressure" / "io";

  auto add = [this](std::string name, std::string help, std::string unit, MetricType type,
                    std::vector<std::string> labels = {}) {
    descs_.push_back(MetricDesc{std::move(name), std::move(help), std::move(unit), type, std::move(labels)});
    return static_cast<uint16_t>(descs_.size() - 1);
  };
  const uint16_t cpu = add("ithbat_host_cpu_seconds_total",
                           "Time all CPUs together spent in each mode since boot (from /proc/stat)", "seconds",
                           MetricType::kCounter, {"mode"});
  for (std::string_view mode : kCpuModes) slots_.push_back(Slot{cpu, mode});
  slots_.push_back(Slot{add("ithbat_host_cpus", "CPUs online", "", MetricType::kGauge)});
  slots_.push_back(Slot{add("ithbat_host_context_switches_total", "Context switches since boot", "",
                            MetricType::kCounter)});
  slots_.push_back(Slot{add("ithbat_host_forks_total", "Processes and threads created since boot", "",
                            MetricType::kCounter)});
  slots_.push_back(Slot{add("ithbat_host_procs_running", "Tasks runnable now", "", MetricType::kGauge)});
  slots_.push_back(Slot{add("ithbat_host_procs_blocked", "Tasks blocked on I/O now", "", MetricType::kGauge)});
  for (size_t i = 0; i < kMemFieldCount; i++) {
    const std::string_view field = MemFieldMetricName(static_cast<MemField>(i));
    slots_.push_back(Slot{add(fmt::format("ithbat_host_memory_{}_bytes", field), std::string(kMemHelp[i]), "bytes",
                              MetricType::kGauge)});
  }
  for (std::string_view resource : kPsiResources) {
    for (std::string_view kind : kPsiKinds) {
      const std::string_view who = kind == "some" ? "at least one task" : "all non-idle tasks";
      slots_.push_back(Slot{add(fmt::format("ithbat_host_pressure_{}_{}_waiting_seconds_total", resource, kind),
                                fmt::format("Time {} stalled waiting for {} (PSI {} total)", who, resource, kind),
                                "seconds", MetricType::kCounter)});
      slots_.push_back(Slot{add(fmt::format("ithbat_host_pressure_{}_{}_avg10_ratio", resource, kind),
                                fmt::format("Share of the last 10 seconds {} stalled waiting for {} (PSI {} avg10)",
                                            who, resource, kind),
                                "ratio", MetricType::kGauge)});
    }
  }
  slots_.push_back(Slot{add("ithbat_host_load1", "Load average over 1 minute", "", MetricType::kGauge)});
  slots_.push_back(Slot{add("ithbat_host_load5", "Load average over 5 minutes", "", MetricType::kGauge)});
  slots_.push_back(Slot{add("ithbat_host_load15", "Load average over 15 minutes", "", MetricType::kGauge)});
  slots_.push_back(Slot{add("ithbat_host_major_page_faults_total",
                            "Page faults that needed a read from disk since boot (pgmajfault)", "",
                            MetricType::kCounter)});
  // The layout constants above index slots_: a change here must keep them in step.
  if (slots_.size() != kSeriesCount) std::abort();
}

std::vector<MetricDesc> HostCollector::Describe() const { return descs_; }

Status HostCollector::InitImpl(Sink& sink) {
  std::error_code ec;
  if (!std::filesystem::is_directory(options_.procfs, ec)) {
    return MakeErrorF(ErrorCode::kNotFound, "procfs root '{}' is not a directory{}", options_.procfs.string(),
                      ec ? ": " + ec.message() : std::string());
  }
  sink_ = &sink;
  return Ok();
}

Status HostCollector::CollectImpl(TimeNs tick_time) {
  append_failures_ = 0;
  first_append_error_.reset();

  std::array<Status, kFileCount> results = {
      CollectStat(tick_time),         CollectMeminfo(tick_time),    CollectLoadavg(tick_time),
      CollectVmstat(tick_time),       CollectPressure(0, tick_time), CollectPressure(1, tick_time),
      CollectPressure(2, tick_time),
  };

  // PSI absent from the kernel is one state (degraded), not three errors per tick.
  bool psi_missing = false;
  size_t attempted = 0, failed = 0;
  const Error* first_error = nullptr;
  for (size_t f = 0; f < kFileCount; f++) {
    const bool psi = f >= kPsiCpu;
    if (psi && !results[f] && IsPsiMissing(results[f].error())) {
      psi_missing = true;
      continue;
    }
    attempted++;
    if (!results[f]) {
      failed++;
      if (first_error == nullptr) first_error = &results[f].error();
    }
  }
  if (psi_missing != psi_missing_) {
    psi_missing_ = psi_missing;
    SetDegraded(psi_missing ? fmt::format("no PSI: {} is missing or disabled (kernel without CONFIG_PSI, "
                                          "or booted with psi=0); no pressure series",
                                          (options_.procfs / "pressure").string())
                            : std::string());
  }

  if (attempted > 0 && failed == attempted) {
    return MakeErrorF(first_error->code, "all {} files under {} failed; first: {}", failed,
                      options_.procfs.string(), first_error->message);
  }
  for (const Status& r : results) {
    if (!r && !(psi_missing && IsPsiMissing(r.error()))) ReportError(r.error());
  }
  if (append_failures_ > 0) {
    ReportError(Error{first_append_error_->code,
                      fmt::format("{} appends failed this tick; first: {}", append_failures_,
                                  first_append_error_->message)});
  }
  return Ok();
}

bool HostCollector::IsPsiMissing(const Error& e) const {
  if (e.code == ErrorCode::kUnavailable) return true;  // psi=0: the files exist, reads fail
  if (e.code != ErrorCode::kNotFound) return false;
  std::error_code ec;
  return !std::filesystem::exists(options_.procfs / "pressure", ec);
}

Status HostCollector::ReadFile(FileId file) {
  if (Status s = ReadFileBoundedInto(paths_[file], options_.max_file_bytes, &buffer_); !s) {
    return std::unexpected(std::move(s.error()));  // the message already names the path
  }
  return Ok();
}

std::unexpected<Error> HostCollector::FileError(FileId file, const Error& e) const {
  return MakeErrorF(e.code, "{}: {}", paths_[file].string(), e.message);
}

Status HostCollector::CollectStat(TimeNs t) {
  if (Status s = ReadFile(kStat); !s) return s;
  auto stat = ParseProcStat(buffer_);
  if (!stat) return FileError(kStat, stat.error());
  for (size_t m = 0; m < stat->cpu_modes; m++) {
    Emit(kCpuSeriesBase + m, t, static_cast<double>(stat->cpu_jiffies[m]) / user_hz_);
  }
  Emit(kCpusSeries, t, stat->cpus);
  Emit(kContextSwitchesSeries, t, static_cast<double>(stat->context_switches));
  Emit(kForksSeries, t, static_cast<double>(stat->forks));
  Emit(kProcsRunningSeries, t, static_cast<double>(stat->procs_running));
  Emit(kProcsBlockedSeries, t, static_cast<double>(stat->procs_blocked));
  return Ok();
}

Status HostCollector::CollectMeminfo(TimeNs t) {
  if (Status s = ReadFile(kMeminfo); !s) return s;
  auto mem = ParseMemInfo(buffer_);
  if (!mem) return FileError(kMeminfo, mem.error());
  for (size_t i = 0; i < kMemFieldCount; i++) {
    if (mem->bytes[i]) Emit(kMemSeriesBase + i, t, static_cast<double>(*mem->bytes[i]));
  }
  return Ok();
}

Status HostCollector::CollectLoadavg(TimeNs t) {
  if (Status s = ReadFile(kLoadavg); !s) return s;
  auto load = ParseLoadAvg(buffer_);
  if (!load) return FileError(kLoadavg, load.error());
  Emit(kLoad1Series, t, load->load1);
  Emit(kLoad5Series, t, load->load5);
  Emit(kLoad15Series, t, load->load15);
  return Ok();
}

Status HostCollector::CollectVmstat(TimeNs t) {
  if (Status s = ReadFile(kVmstat); !s) return s;
  auto vm = ParseVmStat(buffer_);
  if (!vm) return FileError(kVmstat, vm.error());
  Emit(kMajorFaultsSeries, t, static_cast<double>(vm->major_page_faults));
  return Ok();
}

Status HostCollector::CollectPressure(size_t resource, TimeNs t) {
  const auto file = static_cast<FileId>(kPsiCpu + resource);
  if (Status s = ReadFile(file); !s) return s;
  auto psi = ParsePressure(buffer_);
  if (!psi) return FileError(file, psi.error());
  const std::array<const std::optional<PsiLine>*, 2> lines = {&psi->some, &psi->full};
  for (size_t kind = 0; kind < lines.size(); kind++) {
    const auto& line = *lines[kind];
    if (!line) continue;  // cpu "full" before 5.13
    Emit(PsiSeries(resource, kind, false), t, static_cast<double>(line->total_us) / 1e6);
    Emit(PsiSeries(resource, kind, true), t, line->avg10 / 100.0);
  }
  return Ok();
}

void HostCollector::Emit(size_t series, TimeNs t, double value) {
  Slot& slot = slots_[series];
  if (slot.state == SlotState::kFailed) return;
  if (slot.state == SlotState::kNew) {
    // Cold path: once per series for the life of the collector.
    const MetricDesc& desc = descs_[slot.desc];
    Result<LabelSet> labels = slot.mode.empty() ? Result<LabelSet>(LabelSet()) : LabelSet::From({{"mode", slot.mode}});
    Result<SeriesRef> ref = labels ? sink_->RegisterSeries(desc, *labels) : Result<SeriesRef>(std::unexpected(labels.error()));
    if (!ref) {
      slot.state = SlotState::kFailed;
      ReportError(Error{ref.error().code, fmt::format("register {}{}: {} (series skipped from now on)", desc.name,
                                                      slot.mode.empty() ? "" : fmt::format("{{mode=\"{}\"}}", slot.mode),
                                                      ref.error().message)});
      return;
    }
    slot.ref = *ref;
    slot.state = SlotState::kReady;
  }
  if (Status s = sink_->Append(slot.ref, t, value); !s) {
    if (append_failures_++ == 0) first_append_error_ = s.error();
  }
}

}  // namespace ithbat::collect
