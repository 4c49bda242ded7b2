#include "collect/probes/probes_collector.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "collect/probes/probe_table.h"
#include "core/time.h"

namespace ithbat::collect::probes {
namespace {

// Label names of a per-process metric: the identity's, then `extra`.
std::vector<std::string> Labels(std::initializer_list<std::string> extra) {
  return agent::ProcessLabelNames(extra);
}

MetricDesc Desc(std::string name, std::string help, std::string unit, MetricType type,
                std::vector<std::string> labels) {
  return MetricDesc{std::move(name), std::move(help), std::move(unit), type, std::move(labels)};
}

// Latency / gap thresholds as log2 buckets of nanoseconds: a call counted under min=X took at
// least 2^b ns (1ms = 2^20 ns = 1.048576 ms, 8ms = 2^23, 134ms = 2^27, 1s = 2^30 = 1.074 s).
struct Threshold {
  uint32_t log2_ns;
  std::string_view label;
};
constexpr std::array<Threshold, 4> kThresholds = {{{20, "1ms"}, {23, "8ms"}, {27, "134ms"}, {30, "1s"}}};
constexpr size_t kMaxFailedCache = 1024;
// ProbesCollector::kFallbackCostNs, when the self-calibration fails or measures an implausible
// cost (and no cost is configured): conservative, above what a trap costs on current hosts
// (~0.7 us) and near this kind of VM's (~5.5 us).

bool IsLaunch(const ProbeSpec& s) { return (s.flags & CUDA_PROBE_F_LAUNCH) != 0; }

const MetricDesc& LaunchesDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_launches_total",
           "Kernel and graph launches the process called, per driver function (host-side enqueue, "
           "not GPU execution)",
           "", MetricType::kCounter, Labels({"api"}));
  return d;
}
const MetricDesc& CallsDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_calls_total", "Calls of each probed libcuda/libnccl function", "",
           MetricType::kCounter, Labels({"api"}));
  return d;
}
const MetricDesc& CallSecondsDesc() {
  static const MetricDesc d = Desc("ithbat_probe_call_seconds_total",
                                   "Host time spent inside a timed call, entry to return, summed (divide by "
                                   "ithbat_probe_call_returns_total "
                                   "for the mean)",
                                   "seconds", MetricType::kCounter, Labels({"api"}));
  return d;
}
const MetricDesc& CallReturnsDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_call_returns_total",
           "Returns seen of a timed call (the count behind ithbat_probe_call_seconds_total)", "",
           MetricType::kCounter, Labels({"api"}));
  return d;
}
const MetricDesc& CallSlowDesc() {
  static const MetricDesc d = Desc("ithbat_probe_call_slow_total",
                                   "Timed calls that took at least min (1ms=2^20 ns, 8ms=2^23, 134ms=2^27, "
                                   "1s=2^30), from the in-kernel log2 "
                                   "histogram",
                                   "", MetricType::kCounter, Labels({"api", "min"}));
  return d;
}
const MetricDesc& GapMaxDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_launch_gap_max_seconds",
           "Longest host time between two consecutive launches of one thread since the previous "
           "tick (0 when no launch followed another)",
           "seconds", MetricType::kGauge, Labels({}));
  return d;
}
const MetricDesc& GapsDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_launch_gaps_total",
           "Host gaps between consecutive launches of one thread of at least min (log2 "
           "buckets, see ithbat_probe_call_slow_total)",
           "", MetricType::kCounter, Labels({"min"}));
  return d;
}
const MetricDesc& BlockedDesc() {
  static const MetricDesc d = Desc(
      "ithbat_probe_sync_blocked_seconds_total",
      "Host time inside synchronising calls: stream, event and context synchronisation and blocking copies",
      "seconds", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& CopyBytesDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_copy_bytes_total",
           "Bytes the process asked the driver to copy, by direction (unknown: cuMemcpyAsync "
           "with unified addresses)",
           "bytes", MetricType::kCounter, Labels({"direction"}));
  return d;
}
const MetricDesc& AllocBytesDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_alloc_bytes_total",
           "Device memory bytes requested from the driver (cuMemAlloc, cuMemAllocAsync)", "bytes",
           MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& GridBlocksDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_grid_blocks_total",
           "Thread blocks of the kernels launched (grid X*Y*Z; graph launches add none): a "
           "work proxy to compare ranks",
           "", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& NcclOpsDesc() {
  static const MetricDesc d = Desc("ithbat_probe_nccl_ops_total",
                                   "NCCL collective and point-to-point calls (host enqueue, not completion)",
                                   "", MetricType::kCounter, Labels({"op"}));
  return d;
}
const MetricDesc& NcclBytesDesc() {
  static const MetricDesc d = Desc("ithbat_probe_nccl_bytes_total",
                                   "NCCL message bytes enqueued: count x type size (x ranks for all-gather, "
                                   "reduce-scatter, all-to-all when "
                                   "the communicator's init was seen)",
                                   "bytes", MetricType::kCounter, Labels({"op"}));
  return d;
}
const MetricDesc& StateDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_state",
           "1 for the probes' state of this process: exact (every call counted), sampled "
           "(launch probes duty-cycled, counts extrapolated), degraded (attachment incomplete)",
           "", MetricType::kGauge, Labels({"state"}));
  return d;
}
const MetricDesc& OnFractionDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_launch_on_fraction",
           "Fraction of each period the launch probes are attached (1: always, counts exact; less: "
           "duty-cycled to keep the process under the overhead budget, launch counts extrapolated)",
           "", MetricType::kGauge, Labels({}));
  return d;
}
const MetricDesc& TogglesDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_toggles_total",
           "Attaches plus detaches of the launch probes of the process by the duty cycle (each takes the "
           "process's memory-map lock; at least 0.95 s apart)",
           "", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& AttachedDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_launch_attached_seconds_total",
           "Seconds the launch probes of the process were attached: its launch and grid-block counts are "
           "exact over them and extrapolated over the rest (with the wall time, it says which part of a "
           "tick's work was measured)",
           "seconds", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& AddedDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_added_time_ratio",
           "Estimated time the launch probes add to the process, as a fraction of wall time: measured "
           "launch rate x cost per hit x on-fraction (achieved over the last period once there is one)",
           "", MetricType::kGauge, Labels({}));
  return d;
}
const MetricDesc& HitCostDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_hit_cost_seconds",
           "Cost of one launch-probe hit to the probed thread (measured at start on the agent's own binary, "
           "or --probe-cost-ns)",
           "seconds", MetricType::kGauge, {});
  return d;
}
const MetricDesc& NcclOpsBySizeDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_nccl_ops_by_size_total",
           "NCCL calls by op and message size bucket (bytes as in ithbat_probe_nccl_bytes_total; "
           "buckets lt_1k, 1k_16k, 16k_256k, 256k_4m, 4m_64m, 64m_1g, ge_1g), from the per-call records",
           "", MetricType::kCounter, Labels({"op", "size"}));
  return d;
}
const MetricDesc& StepsDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_steps_total",
           "Training steps inferred from the repeating pattern of the process's NCCL calls and host "
           "syncs (no logs needed); numbered in the step timeline once the job logs a step",
           "", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& StepSecondsDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_step_seconds",
           "Duration of the newest inferred step (host side: from the end of the previous step's last "
           "collective or sync to the end of this one's)",
           "seconds", MetricType::kGauge, Labels({}));
  return d;
}
const MetricDesc& StepConfidenceDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_step_confidence",
           "Confidence (0..1) of the newest inferred step: pattern lock quality x marks that matched it",
           "", MetricType::kGauge, Labels({}));
  return d;
}
const MetricDesc& ArrivalsAlignedDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_nccl_aligned_total",
           "Collectives matched across this node's ranks of a shared communicator (same commHash and "
           "sequence number since init): the base of the arrival series",
           "", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& ArrivalsLastDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_nccl_last_arrivals_total",
           "Aligned collectives this process enqueued last among the node's ranks (HOST ENQUEUE order, "
           "not GPU): a rank that is always last holds the others back",
           "", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& ArrivalLagDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_nccl_arrival_lag_seconds_total",
           "Sum over aligned collectives of this process's enqueue time minus the first local rank's "
           "(HOST ENQUEUE, not GPU time)",
           "seconds", MetricType::kCounter, Labels({}));
  return d;
}
const MetricDesc& LinksDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_links", "Uprobe links the agent holds now", "", MetricType::kGauge, {});
  return d;
}
const MetricDesc& ProcessesDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_processes", "Tracked processes with probes attached", "", MetricType::kGauge, {});
  return d;
}
const MetricDesc& LostDesc() {
  static const MetricDesc d =
      Desc("ithbat_probe_lost_total",
           "Probe data the kernel side could not keep (stats_full: aggregation map full; "
           "ring_dropped: collective records dropped)",
           "", MetricType::kCounter, {"reason"});
  return d;
}

}  // namespace

ProbesCollector::ProbesCollector(ProbesOptions options) : Collector("probes"), options_(std::move(options)) {}
ProbesCollector::~ProbesCollector() = default;

Result<std::unique_ptr<ProbesCollector>> ProbesCollector::Create(ProbesOptions options) {
  if (options.tracked == nullptr)
    return MakeError(ErrorCode::kInvalidArgument, "probes: no tracked-process set");
  if (options.rescan_ticks < 1) options.rescan_ticks = 1;
  return std::unique_ptr<ProbesCollector>(new ProbesCollector(std::move(options)));
}

std::vector<MetricDesc> ProbesCollector::Describe() const {
  return {LaunchesDesc(),   CallsDesc(),   CallSecondsDesc(), CallReturnsDesc(), CallSlowDesc(),
          GapMaxDesc(),     GapsDesc(),    BlockedDesc(),     CopyBytesDesc(),   AllocBytesDesc(),
          GridBlocksDesc(), NcclOpsDesc(), NcclBytesDesc(),   StateDesc(),       LinksDesc(),
          ProcessesDesc(),  LostDesc(),  OnFractionDesc(),  TogglesDesc(),     AttachedDesc(),   AddedDesc(),
          HitCostDesc(),    NcclOpsBySizeDesc(), StepsDesc(), StepSecondsDesc(), StepConfidenceDesc(),
          ArrivalsAlignedDesc(), ArrivalsLastDesc(), ArrivalLagDesc()};
}

Status ProbesCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  return Ok();
}

Status ProbesCollector::StartImpl() {
  auto bpf = ProbeBpf::Load();
  if (!bpf) {
    load_error_ = bpf.error().message;
    SetDegraded(load_error_);
    return Ok();
  }
  bpf_ = std::move(*bpf);
  if (options_.cost_ns > 0) {
    cost_ns_ = options_.cost_ns;
  } else if (options_.budget > 0) {
    Calibrate(0);
  }
  return Ok();
}

void ProbesCollector::Calibrate(double keep) {
  calibrated_at_ = MonotonicNowNs();
  auto c = options_.calibrate ? options_.calibrate(*bpf_) : bpf_->MeasureHitCost();
  // A measurement near 0 means the probe did not fire or the clock lied (an unprobed call that
  // ran slow): taken as is, it would turn the budget off (added = rate x 0).
  if (c && std::isfinite(c->ns_per_hit) && c->ns_per_hit >= kMinCalibratedCostNs) {
    {
      std::lock_guard lock(mu_);
      calibration_ = *c;
    }
    cost_ns_ = c->ns_per_hit;
    return;
  }
  const double use = keep > 0 ? keep : kFallbackCostNs;
  cost_ns_ = use;
  const std::string why =
      c ? fmt::format("measured {:.1f} ns per hit, under the {:.0f} ns floor", c->ns_per_hit, kMinCalibratedCostNs)
        : c.error().message;
  ReportError(Error{c ? ErrorCode::kInternal : c.error().code,
                    fmt::format("probes: cost calibration failed ({}); {} {:.0f} ns per hit", why,
                                keep > 0 ? "keeping" : "assuming", use)});
}

double ProbesCollector::Aim() const { return options_.budget * std::clamp(options_.margin, 0.1, 1.0); }

std::optional<HitCost> ProbesCollector::calibration() const {
  std::lock_guard lock(mu_);
  return calibration_;
}

Result<std::shared_ptr<const PinnedFile>> ProbesCollector::Pin(const std::string& path, const MappedLibrary& lib) {
  const auto key = std::make_tuple(lib.dev_major, lib.dev_minor, lib.inode);
  if (auto it = pinned_.find(key); it != pinned_.end()) {
    if (auto f = it->second.lock()) return f;
  }
  const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return ErrnoError(ErrorCode::kNotFound, fmt::format("cannot open {}", path), errno);
  auto file = std::make_shared<const PinnedFile>(fd, fmt::format("{}/self/fd/{}", options_.procfs, fd));
  // What was opened is what the maps named (the path may have been swapped since it was checked).
  // map_files links report the mapping's inode on the file's own device, which for overlay
  // mounts differs from the maps line's: the inode alone there, as AgentPathFor does.
  struct stat st {};
  const bool via_map = path.find("/map_files/") != std::string::npos;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != lib.inode ||
      (!via_map && (major(st.st_dev) != lib.dev_major || minor(st.st_dev) != lib.dev_minor))) {
    return MakeErrorF(ErrorCode::kNotFound, "{} was replaced while being opened", lib.path);
  }
  if (pinned_.size() >= 4 * options_.max_processes) {
    std::erase_if(pinned_, [](const auto& kv) { return kv.second.expired(); });
  }
  pinned_[key] = file;
  return file;
}

void ProbesCollector::StopImpl() {
  std::lock_guard lock(mu_);
  procs_.clear();  // destroys every attachment (links)
  closer_.Drain();
  bpf_.reset();
}

void ProbesCollector::SyncTracked() {
  const uint64_t gen = options_.tracked->generation();
  if (gen == seen_generation_) return;
  seen_generation_ = gen;
  std::map<int32_t, Identity> now;
  for (auto& p : options_.tracked->Snapshot()) {
    Identity id = p.identity;
    id.pid = p.pid;
    now.emplace(p.pid, std::move(id));
  }
  std::vector<int32_t> gone;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, proc] : procs_) {
      if (!now.contains(pid)) gone.push_back(pid);
    }
  }
  for (int32_t pid : gone) Detach(pid);
  std::lock_guard lock(mu_);
  for (auto& [pid, id] : now) {
    auto it = procs_.find(pid);
    if (it != procs_.end()) {
      it->second.identity = id;
      continue;
    }
    if (procs_.size() >= options_.max_processes) {
      ReportError(Error{ErrorCode::kResourceExhausted,
                        fmt::format("probes: more than {} tracked processes; pid {} not attached",
                                    options_.max_processes, pid)});
      continue;
    }
    Proc p;
    p.pid = pid;
    p.identity = id;
    procs_.emplace(pid, std::move(p));
  }
}

void ProbesCollector::Detach(int32_t pid) {
  std::optional<Proc> gone;
  {
    std::lock_guard lock(mu_);
    if (auto it = procs_.find(pid); it != procs_.end()) {
      gone.emplace(std::move(it->second));
      procs_.erase(it);
    }
    analysis_.Forget(pid);
  }
  // Outside mu_ (the snapshot accessors do not wait on kernel grace periods). Only Collect's
  // thread changes procs_, so nothing re-adds the pid meanwhile.
  if (gone) {
    // A launch link still closing could add keys after ForgetProcess: wait for this process's
    // own closes (only duty-cycled processes have any), not for every queued one.
    for (const auto& t : gone->duty.closing) closer_.Wait(*t);
    gone.reset();  // closes its other links
  }
  if (bpf_) bpf_->ForgetProcess(static_cast<uint32_t>(pid));
}

Result<std::shared_ptr<const ResolvedLibrary>> ProbesCollector::Resolve(Proc& p, const MappedLibrary& lib,
                                                                        std::shared_ptr<const PinnedFile>* file) {
  auto agent_path = AgentPathFor(options_.procfs, p.pid, lib);
  if (!agent_path) return std::unexpected(agent_path.error());
  // Read and attach through one open file: the ELF parsed is the file the probes go into.
  auto pinned = Pin(*agent_path, lib);
  if (!pinned) return std::unexpected(pinned.error());
  *file = *pinned;
  std::optional<std::string> trusted;
  if (lib.kind == LibraryKind::kCuda) {
    if (auto t = TrustedHostPath(options_.procfs, p.pid, lib, options_.driver_dirs); t) trusted = *t;
  }
  const LibKey key{lib.dev_major, lib.dev_minor, lib.inode, trusted.has_value()};
  if (auto it = resolved_cache_.find(key); it != resolved_cache_.end()) return it->second;
  if (auto it = failed_cache_.find(key); it != failed_cache_.end()) return std::unexpected(it->second);
  auto r = ResolveLibrary((*file)->path(), lib.kind, trusted);
  if (!r) {
    // A file's content under one (dev, inode) does not change while it is mapped, so a parse or
    // bound failure is final; kNotFound/kIo may be a race with the process and are retried.
    const ErrorCode c = r.error().code;
    if (c == ErrorCode::kParse || c == ErrorCode::kResourceExhausted) {
      if (failed_cache_.size() >= kMaxFailedCache) failed_cache_.clear();
      failed_cache_.emplace(key, r.error());
    }
    return std::unexpected(r.error());
  }
  auto shared = std::make_shared<const ResolvedLibrary>(std::move(*r));
  resolved_cache_.emplace(key, shared);
  return shared;
}

void ProbesCollector::ScanProcess(Proc& p) {
  p.scanned = true;
  p.last_scan_tick = tick_;
  auto libs = ReadMappedLibraries(options_.procfs, p.pid);
  if (!libs) return;  // gone: the exit check detaches it
  for (const MappedLibrary& lib : *libs) {
    const bool have = std::any_of(p.libs.begin(), p.libs.end(), [&](const AttachedLib& a) {
      return a.lib.inode == lib.inode && a.lib.dev_major == lib.dev_major && a.lib.dev_minor == lib.dev_minor;
    });
    if (have) continue;
    std::shared_ptr<const PinnedFile> file;
    auto resolved = Resolve(p, lib, &file);
    if (!resolved) {
      p.degraded = resolved.error().message;
      ReportError(resolved.error());
      continue;
    }
    // Two attachments: the rare probes (always) and the launch probes (duty-cycled).
    std::vector<Target> rare, launch;
    for (const Target& t : (*resolved)->targets) {
      const ProbeSpec* spec = FindProbe(t.probe);
      (spec != nullptr && IsLaunch(*spec) ? launch : rare).push_back(t);
    }
    const std::string& path = file->path();
    auto att = bpf_->Attach(p.pid, path, rare);
    if (!att) {
      p.degraded = att.error().message;
      ReportError(att.error());
      continue;
    }
    std::unique_ptr<Attachment> launch_att;
    if (!launch.empty() && p.duty.launch_on) {
      auto la = bpf_->Attach(p.pid, path, launch);
      if (!la) {
        p.degraded = la.error().message;
        ReportError(la.error());
        continue;
      }
      launch_att = std::move(*la);
      if (p.duty.on_since == 0) {
        p.duty.on_since = MonotonicNowNs();
        p.duty.window_start = p.duty.on_since;
        p.duty.last_toggle = p.duty.on_since;
      }
    }
    const size_t failed = (*att)->failed() + (launch_att ? launch_att->failed() : 0);
    if (failed > 0) {
      const std::string& first =
          !(*att)->first_error().empty() ? (*att)->first_error() : launch_att->first_error();
      p.degraded = fmt::format("{} of {} uprobes failed: {}", failed,
                               failed + (*att)->links() + (launch_att ? launch_att->links() : 0), first);
    }
    AttachedLib al{lib, std::move(*att), *resolved, std::move(launch_att), std::move(launch), std::move(file)};
    p.libs.push_back(std::move(al));
  }
}

void ProbesCollector::Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value,
                          TimeNs t, double v) {
  agent::ProcessSeries::Labels extra;
  if (!label.empty()) extra.emplace_back(std::string(label), std::string(value));
  if (auto s = p.series.Put(*sink_, p.identity, desc, extra, t, v); !s) ReportError(s.error());
}

void ProbesCollector::Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value,
                          std::string_view label2, std::string_view value2, TimeNs t, double v) {
  const agent::ProcessSeries::Labels extra = {{std::string(label), std::string(value)},
                                              {std::string(label2), std::string(value2)}};
  if (auto s = p.series.Put(*sink_, p.identity, desc, extra, t, v); !s) ReportError(s.error());
}

void ProbesCollector::AppendRecordAnalysis(Proc& p, TimeNs t) {
  // Logged steps of the job number the inferred ones. The marks are CLOCK_MONOTONIC; the log
  // lines' times are realtime.
  if (options_.logged_steps != nullptr && !p.identity.job.empty()) {
    for (const auto& m : options_.logged_steps->Since(p.identity.job, p.logged_cursor)) {
      analysis_.AddLoggedStep(p.pid, m.step, m.time - mono_to_real_);
      p.logged_cursor = m.index;
    }
  }
  const RecordAnalysis::Steps steps = analysis_.TakeSteps(p.pid);
  // A retraction voids steps of an early lock; only numbered steps reached the store, and
  // numbering needs a logged step, which in practice comes after the first window of marks. The
  // renumbered steps that follow replace them (the timeline replaces a step it holds).
  if (!p.identity.job.empty() && p.identity.rank >= 0) {
    for (const InferredStep& st : steps.steps) {
      if (st.step < 0) continue;  // relative numbering: only counted (series), not in the timeline
      StepSpan span{st.step, st.start + mono_to_real_, st.end + mono_to_real_};
      if (auto s = sink_->RecordStep(p.identity.job, p.identity.rank, span); !s) ReportError(s.error());
    }
  }
  const RecordAnalysis::Summary sum = analysis_.Get(p.pid);
  if (sum.steps > 0) {
    Put(p, StepsDesc(), "", "", t, static_cast<double>(sum.steps));
    Put(p, StepSecondsDesc(), "", "", t, static_cast<double>(sum.last_step_ns) / 1e9);
    Put(p, StepConfidenceDesc(), "", "", t, sum.confidence);
  }
  for (const auto& [key, n] : sum.ops_by_size) {
    Put(p, NcclOpsBySizeDesc(), "op", key.first, "size", key.second, t, static_cast<double>(n));
  }
  if (sum.aligned > 0) {
    Put(p, ArrivalsAlignedDesc(), "", "", t, static_cast<double>(sum.aligned));
    Put(p, ArrivalsLastDesc(), "", "", t, static_cast<double>(sum.last));
    Put(p, ArrivalLagDesc(), "", "", t, static_cast<double>(sum.lag_sum) / 1e9);
  }
}

void ProbesCollector::AppendProcess(Proc& p, TimeNs t, const std::vector<ProbeBpf::StatEntry>& stats) {
  std::map<std::string_view, double> copy_bytes;
  double blocked_ns = 0, grid = 0, alloc = 0, gap_max_ns = 0;
  std::array<double, kThresholds.size()> gaps{};
  for (const auto& e : stats) {
    if (e.key.tgid != static_cast<uint32_t>(p.pid)) continue;
    const double count = static_cast<double>(e.value.count);
    const double sum = static_cast<double>(e.value.sum);
    if (e.key.probe == CUDA_PROBE_ID_LAUNCH_GAP) {
      if (e.key.slot == CUDA_SLOT_GAP_MAX) gap_max_ns = sum;
      if (e.key.slot >= CUDA_SLOT_HIST) {
        const uint32_t b = e.key.slot - CUDA_SLOT_HIST;
        for (size_t i = 0; i < kThresholds.size(); ++i) {
          if (b >= kThresholds[i].log2_ns) gaps[i] += count;
        }
      }
      continue;
    }
    const ProbeSpec* spec = FindProbe(e.key.probe);
    if (spec == nullptr) continue;
    if (e.key.slot == CUDA_SLOT_CALLS) {
      // Launch probes: what the kernel counted plus the extrapolated off slices (equal to the
      // kernel's count while the process has never been duty-cycled).
      double calls = count, launch_sum = sum;
      if (IsLaunch(*spec)) {
        if (auto it = p.launch.find(e.key.probe); it != p.launch.end()) {
          calls = it->second.rep_count;
          launch_sum = it->second.rep_sum;
        }
      }
      Put(p, CallsDesc(), "api", spec->symbol, t, calls);
      switch (spec->cls) {
        case ProbeClass::kLaunch:
          Put(p, LaunchesDesc(), "api", spec->symbol, t, calls);
          grid += launch_sum;
          break;
        case ProbeClass::kCopy:
        case ProbeClass::kBlockingCopy:
          copy_bytes[CopyDirectionName(spec->direction)] += sum;
          break;
        case ProbeClass::kAlloc:
          alloc += sum;
          break;
        case ProbeClass::kNcclColl:
          Put(p, NcclOpsDesc(), "op", spec->nccl_op, t, count);
          Put(p, NcclBytesDesc(), "op", spec->nccl_op, t, sum);
          break;
        default:
          break;
      }
    } else if (e.key.slot == CUDA_SLOT_LATENCY) {
      Put(p, CallSecondsDesc(), "api", spec->symbol, t, sum / 1e9);
      Put(p, CallReturnsDesc(), "api", spec->symbol, t, count);
      if (spec->cls == ProbeClass::kSync || spec->cls == ProbeClass::kBlockingCopy) blocked_ns += sum;
    }
  }
  // Slow-call counts: per api, from its histogram slots.
  std::map<uint16_t, std::array<double, kThresholds.size()>> slow;
  for (const auto& e : stats) {
    if (e.key.tgid != static_cast<uint32_t>(p.pid) || e.key.probe == CUDA_PROBE_ID_LAUNCH_GAP ||
        e.key.slot < CUDA_SLOT_HIST) {
      continue;
    }
    auto& a = slow[e.key.probe];
    const uint32_t b = e.key.slot - CUDA_SLOT_HIST;
    for (size_t i = 0; i < kThresholds.size(); ++i) {
      if (b >= kThresholds[i].log2_ns) a[i] += static_cast<double>(e.value.count);
    }
  }
  for (const auto& [probe, a] : slow) {
    const ProbeSpec* spec = FindProbe(probe);
    if (spec == nullptr) continue;
    for (size_t i = 0; i < kThresholds.size(); ++i) {
      Put(p, CallSlowDesc(), "api", spec->symbol, "min", kThresholds[i].label, t, a[i]);
    }
  }
  for (size_t i = 0; i < kThresholds.size(); ++i) Put(p, GapsDesc(), "min", kThresholds[i].label, t, gaps[i]);
  Put(p, GapMaxDesc(), "", "", t, gap_max_ns / 1e9);
  Put(p, BlockedDesc(), "", "", t, blocked_ns / 1e9);
  Put(p, GridBlocksDesc(), "", "", t, grid);
  Put(p, AllocBytesDesc(), "", "", t, alloc);
  for (std::string_view dir : {"h2d", "d2h", "d2d", "unknown", "peer"}) {
    Put(p, CopyBytesDesc(), "direction", dir, t, copy_bytes[dir]);
  }
  const bool degraded = !p.degraded.empty();
  const bool sampled = p.duty.sampled;
  Put(p, StateDesc(), "state", "exact", t, degraded || sampled ? 0 : 1);
  Put(p, StateDesc(), "state", "sampled", t, !degraded && sampled ? 1 : 0);
  Put(p, StateDesc(), "state", "degraded", t, degraded ? 1 : 0);
  const double on = sampled ? p.duty.on_fraction : 1.0;
  Put(p, OnFractionDesc(), "", "", t, on);
  Put(p, TogglesDesc(), "", "", t, static_cast<double>(p.duty.toggles));
  Put(p, AttachedDesc(), "", "", t, static_cast<double>(p.duty.attached_ns) / 1e9);
  // What the slices achieved once a period is complete (closes that start late lengthen on-slices).
  Put(p, AddedDesc(), "", "", t, p.duty.added * (sampled && p.duty.achieved > 0 ? p.duty.achieved : on));
}

void ProbesCollector::UpdateLaunchSeries(Proc& p, TimeNs now, const std::vector<ProbeBpf::StatEntry>& stats) {
  Duty& d = p.duty;
  // This process's launch counters in one pass (a new key starts at 0: all its count is new).
  std::map<uint16_t, std::pair<uint64_t, uint64_t>> raw;
  for (const auto& e : stats) {
    if (e.key.tgid != static_cast<uint32_t>(p.pid) || e.key.slot != CUDA_SLOT_CALLS) continue;
    const ProbeSpec* spec = FindProbe(e.key.probe);
    if (spec == nullptr || !IsLaunch(*spec)) continue;
    p.launch[e.key.probe];
    raw[e.key.probe] = {e.value.count, e.value.sum};
  }
  auto current = [&](uint16_t probe, const LaunchSeries& ls) {
    auto it = raw.find(probe);
    return it != raw.end() ? it->second : std::make_pair(ls.raw_count, ls.raw_sum);
  };
  if (d.last_read == 0) d.last_read = d.on_since != 0 ? std::min(d.on_since, now) : now;
  // Where the probes stopped firing, if a detach has begun.
  if (!d.launch_on && d.off_since == 0) {
    TimeNs started = 0;
    bool all = !d.closing.empty();
    for (const auto& tk : d.closing) {
      const TimeNs s = tk->started_ns.load();
      if (s == 0) all = false;
      started = std::max(started, s);
    }
    // Only once every launch link is unregistering, and before this read (`now` precedes it).
    if (all && started <= now) d.off_since = started;
  }
  const bool firing = d.launch_on || d.off_since == 0;
  const TimeNs on_end = firing ? now : d.off_since;
  const TimeNs since = std::max(d.last_read, d.on_since);
  const TimeNs attached = d.on_since == 0 ? 0 : std::max<TimeNs>(0, on_end - since);
  const TimeNs off = std::max<TimeNs>(0, (now - d.last_read) - attached);
  d.detached_ns += off;
  d.attached_ns += attached;
  // A slice that ended: its rate per key (counted in it / its attached time) extrapolates the off
  // slice that follows.
  if (d.slice_open && !firing && d.off_since > d.on_since) {
    const double len = static_cast<double>(d.off_since - d.on_since);
    double total = 0;
    for (auto& [probe, ls] : p.launch) {
      const auto [c, sm] = current(probe, ls);
      ls.rate_count = static_cast<double>(c - std::min(c, ls.slice_count)) / len;
      ls.rate_sum = static_cast<double>(sm - std::min(sm, ls.slice_sum)) / len;
      total += ls.rate_count;
    }
    d.slice_open = false;
    d.added = total * cost_ns_.load();
    if (d.added < Aim() * options_.exit_ratio) {
      d.return_exact = true;
    } else {
      d.on_fraction = std::clamp(Aim() / d.added, 0.0, 1.0);
      Schedule(d);
      FitOffSlice(d, d.off_since - d.on_since);
    }
  }
  for (auto& [probe, ls] : p.launch) {
    const auto [c, sm] = current(probe, ls);
    // Counted exactly while attached; the off part of this interval at the last slice's rate.
    // Monotone by construction (both terms >= 0).
    ls.rep_count += static_cast<double>(c - std::min(c, ls.raw_count)) + ls.rate_count * static_cast<double>(off);
    ls.rep_sum += static_cast<double>(sm - std::min(sm, ls.raw_sum)) + ls.rate_sum * static_cast<double>(off);
    ls.raw_count = c;
    ls.raw_sum = sm;
  }
  d.last_read = now;
}

// The on/off slices for on_fraction f: slices >= min_slice (so toggles <= 1 per min_slice), the
// period as short as that allows, never over max_period (the lowest reachable f is
// min_slice / max_period; below it the process stays over budget, reported by
// ithbat_probe_added_time_ratio).
void ProbesCollector::Schedule(Duty& d) const {
  const double min = static_cast<double>(options_.min_slice);
  const double max_period = std::max(2 * min, static_cast<double>(options_.max_period));
  const double f = std::clamp(d.on_fraction, min / max_period, 1 - min / max_period);
  double on = min, off = min;
  if (f <= 0.5) {
    off = std::min(on * (1 - f) / f, max_period - on);
  } else {
    on = std::min(off * f / (1 - f), max_period - off);
  }
  d.on_ns = static_cast<TimeNs>(on);
  d.off_ns = static_cast<TimeNs>(off);
  d.on_fraction = on / (on + off);
}

// Toggles happen at ticks, so an on-slice lasts its scheduled length plus up to one tick (2 s
// instead of 1 at a 1 s interval). The off slice that follows is sized on the on-slice's actual
// length, so the on-fraction, and with it the budget, holds whatever the tick's phase.
void ProbesCollector::FitOffSlice(Duty& d, TimeNs on_len) const {
  const double f = d.on_fraction;
  if (f <= 0 || f >= 1 || on_len <= 0) return;
  const double want = static_cast<double>(on_len) * (1 - f) / f;
  const double hi = std::max(static_cast<double>(options_.min_slice),
                             static_cast<double>(options_.max_period - on_len));
  d.off_ns = static_cast<TimeNs>(std::clamp(want, static_cast<double>(options_.min_slice), hi));
}

void ProbesCollector::AttachLaunch(Proc& p) {
  Duty& d = p.duty;
  // The time detached must not become a gap: the first launch after this starts afresh.
  bpf_->ForgetLaunchState(static_cast<uint32_t>(p.pid));
  const TimeNs t0 = MonotonicNowNs();
  for (AttachedLib& l : p.libs) {
    if (l.launch_targets.empty() || l.launch) continue;
    // Through the file pinned at the first attach: no path lookup the process could redirect.
    auto la = bpf_->Attach(p.pid, l.file->path(), l.launch_targets);
    if (!la) {
      p.degraded = la.error().message;
      ReportError(la.error());
      continue;
    }
    l.launch = std::move(*la);
  }
  const TimeNs t1 = MonotonicNowNs();
  d.launch_on = true;
  const TimeNs on_since = t0 + (t1 - t0) / 2;  // the breakpoints go in during the call
  // The period that ends here, as it happened: attached from on_since to the close's start.
  if (d.sampled && d.on_since != 0 && d.off_since > d.on_since && on_since > d.on_since) {
    d.achieved = static_cast<double>(d.off_since - d.on_since) / static_cast<double>(on_since - d.on_since);
  }
  d.on_since = on_since;
  d.off_since = 0;
  d.closing.clear();
  d.last_toggle = t1;
  ++d.toggles;
  for (auto& [probe, ls] : p.launch) {  // nothing fired while detached: raw is the slice start
    ls.slice_count = ls.raw_count;
    ls.slice_sum = ls.raw_sum;
  }
  if (d.return_exact) {
    d.sampled = false;
    d.return_exact = false;
    d.on_fraction = 1;
    d.achieved = 0;
    d.window_start = d.on_since;
    d.window_raw = 0;
    d.window_keys.clear();
    for (const auto& [probe, ls] : p.launch) {
      d.window_raw += static_cast<double>(ls.raw_count);
      d.window_keys[probe] = {ls.raw_count, ls.raw_sum};
    }
  } else {
    d.slice_open = true;
  }
}

void ProbesCollector::DetachLaunch(Proc& p, TimeNs now) {
  Duty& d = p.duty;
  for (AttachedLib& l : p.libs) {
    if (l.launch) d.closing.push_back(closer_.Submit(std::move(l.launch)));
  }
  d.launch_on = false;
  // Nothing to close (a re-attach that failed): the slice ended now.
  d.off_since = d.closing.empty() ? now : 0;
  d.last_toggle = now;
  ++d.toggles;
}

void ProbesCollector::DutyCycle(Proc& p, TimeNs now) {
  Duty& d = p.duty;
  const double cost = cost_ns_.load();
  if (options_.budget <= 0 || cost <= 0 || d.on_since == 0) return;
  // Toggles happen at ticks, which jitter by a few ms around the interval: a slice due at the
  // tick that comes 10 ms early would otherwise last a whole tick more (2 s instead of 1 at a 1 s
  // interval), and with the period at max_period the off slice cannot make up for it. A slice
  // ends at a tick within 5% of min_slice of its due time; toggles stay >= min_slice x 0.95 apart.
  const TimeNs slack = options_.min_slice / 20;
  const bool may_toggle = now - d.last_toggle >= options_.min_slice - slack;
  if (!d.sampled) {
    if (!d.launch_on) return;
    double total = 0;
    for (const auto& [probe, ls] : p.launch) total += static_cast<double>(ls.raw_count);
    if (d.window_start == 0) d.window_start = now;
    const TimeNs span = now - d.window_start;
    if (span < options_.min_slice) return;
    const double rate = (total - d.window_raw) / static_cast<double>(span);
    d.added = rate * cost;
    if (d.added > Aim() && may_toggle) {
      // Over the target: the window was the first on-slice; its counts give the rate for the
      // first off slice (taken again over [window start, close start] at the next read).
      d.sampled = true;
      d.on_fraction = Aim() / d.added;
      Schedule(d);
      for (auto& [probe, ls] : p.launch) {
        auto it = d.window_keys.find(probe);
        ls.slice_count = it != d.window_keys.end() ? it->second.first : 0;
        ls.slice_sum = it != d.window_keys.end() ? it->second.second : 0;
        ls.rate_count = static_cast<double>(ls.raw_count - std::min(ls.raw_count, ls.slice_count)) /
                        static_cast<double>(span);
        ls.rate_sum = static_cast<double>(ls.raw_sum - std::min(ls.raw_sum, ls.slice_sum)) / static_cast<double>(span);
      }
      d.on_since = d.window_start;
      d.slice_open = true;
      FitOffSlice(d, now - d.window_start);
      DetachLaunch(p, now);
      return;
    }
    // Next window.
    d.window_start = now;
    d.window_raw = total;
    d.window_keys.clear();
    for (const auto& [probe, ls] : p.launch) d.window_keys[probe] = {ls.raw_count, ls.raw_sum};
    return;
  }
  if (!may_toggle) return;
  if (d.launch_on) {
    if (now - d.on_since >= d.on_ns - slack) DetachLaunch(p, now);
    return;
  }
  bool closed = true;
  for (const auto& t : d.closing) closed &= t->done.load();
  if (!closed || d.slice_open) return;  // the slice's rate is taken at the read after the close began
  if (d.return_exact || now - d.off_since >= d.off_ns - slack) AttachLaunch(p);
}

Status ProbesCollector::CollectImpl(TimeNs tick_time) {
  ++tick_;
  if (!bpf_) return Ok();  // degraded since Start: nothing to attach to
  mono_to_real_ = NowNs() - MonotonicNowNs();
  SyncTracked();
  // Periodic re-calibration (the trap's cost moves with the host's load and kernel). Not while
  // the agent traces itself: the measurement forgets the agent's own keys.
  if (options_.cost_ns <= 0 && options_.budget > 0 && options_.recalibrate_every > 0 &&
      MonotonicNowNs() - calibrated_at_ >= options_.recalibrate_every) {
    bool self = false;
    {
      std::lock_guard lock(mu_);
      self = procs_.contains(static_cast<int32_t>(getpid()));
    }
    if (!self) Calibrate(cost_ns_.load());
  }

  {
    std::lock_guard lock(mu_);
    // First sight: scan now. Others: a bounded round-robin every rescan_ticks ticks, so a library
    // loaded late (or a second one, NCCL after CUDA) is attached within a few ticks.
    size_t rescans = 0;
    std::vector<Proc*> order;
    for (auto& [pid, p] : procs_) order.push_back(&p);
    for (Proc* p : order) {
      if (!p->scanned) ScanProcess(*p);
    }
    if (tick_ % static_cast<uint64_t>(options_.rescan_ticks) == 0 && !order.empty()) {
      for (size_t i = 0; i < order.size() && rescans < options_.max_rescans_per_tick; ++i) {
        Proc* p = order[(rescan_cursor_ + i) % order.size()];
        if (p->last_scan_tick == tick_) continue;
        ScanProcess(*p);
        ++rescans;
      }
      rescan_cursor_ = (rescan_cursor_ + rescans) % order.size();
    }

    bpf_->DrainRecords([&](const cuda_probe_record& r) {
      auto it = procs_.find(static_cast<int32_t>(r.tgid));
      if (it == procs_.end()) return;
      const ProbeSpec* spec = FindProbe(r.probe);
      analysis_.Add(r, spec != nullptr ? spec->nccl_op : std::string_view());
      // RecentCollectives keeps collectives and communicator inits; syncs only feed the analysis.
      if (r.kind != CUDA_REC_COLLECTIVE && r.kind != CUDA_REC_COMM_INIT) return;
      CollectiveRecord c;
      c.time = static_cast<TimeNs>(r.time_ns) + mono_to_real_;
      c.probe = r.probe;
      c.op = spec != nullptr ? spec->nccl_op : std::string_view("?");
      c.comm = r.comm;
      c.seq = r.seq;
      c.count = r.count;
      c.bytes = r.bytes;
      c.dtype = r.dtype;
      c.nranks = r.nranks;
      c.rank = r.rank;
      c.group_depth = r.group_depth;
      c.tid = r.tid;
      auto& q = it->second.records;
      q.push_back(c);
      while (q.size() > options_.records_per_process) q.pop_front();
    });

    analysis_.Flush(MonotonicNowNs());
    std::vector<ProbeBpf::StatEntry> stats;
    // Before the read: every hit of an attached interval that ends before `now` is in it.
    const TimeNs now = MonotonicNowNs();
    if (auto s = bpf_->ReadStats(&stats); !s) return s;
    size_t attached = 0, links = 0;
    for (auto& [pid, p] : procs_) {
      if (p.libs.empty()) continue;
      ++attached;
      for (const auto& l : p.libs) links += l.attachment->links() + (l.launch ? l.launch->links() : 0);
      UpdateLaunchSeries(p, now, stats);
      AppendProcess(p, tick_time, stats);
      AppendRecordAnalysis(p, tick_time);
      bpf_->ResetMaxima(static_cast<uint32_t>(pid));
      DutyCycle(p, MonotonicNowNs());
    }
    auto global = [&](const MetricDesc& d, std::string_view label, std::string_view value, double v) {
      agent::ProcessSeries::Labels extra;
      if (!label.empty()) extra.emplace_back(std::string(label), std::string(value));
      if (auto s = global_series_.Put(*sink_, Identity{}, d, extra, tick_time, v); !s) ReportError(s.error());
    };
    const cuda_probe_global g = bpf_->Globals();
    global(LinksDesc(), "", "", static_cast<double>(links));
    global(ProcessesDesc(), "", "", static_cast<double>(attached));
    global(LostDesc(), "reason", "stats_full", static_cast<double>(g.stats_full));
    global(LostDesc(), "reason", "ring_dropped", static_cast<double>(g.ring_dropped));
    global(HitCostDesc(), "", "", cost_ns_.load() / 1e9);
  }
  // Exits, after this tick's read so a process's last counts are appended: a pid whose /proc
  // entry is gone is detached now (links, kernel map entries, series state).
  std::vector<int32_t> gone;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, p] : procs_) {
      struct stat st {};
      if (stat(fmt::format("{}/{}", options_.procfs, pid).c_str(), &st) != 0) gone.push_back(pid);
    }
  }
  for (int32_t pid : gone) Detach(pid);

  return Ok();
}

std::vector<ProbesCollector::ProcessStatus> ProbesCollector::Processes() const {
  std::lock_guard lock(mu_);
  std::vector<ProcessStatus> out;
  for (const auto& [pid, p] : procs_) {
    ProcessStatus s;
    s.pid = pid;
    s.state = p.libs.empty() ? (p.degraded.empty() ? "pending" : "degraded")
                             : (p.degraded.empty() ? (p.duty.sampled ? "sampled" : "exact") : "degraded");
    s.on_fraction = p.duty.sampled ? p.duty.on_fraction : 1.0;
    s.on_ns = p.duty.on_ns;
    s.off_ns = p.duty.off_ns;
    s.toggles = p.duty.toggles;
    s.launch_attached = p.duty.launch_on;
    for (const auto& t : p.duty.closing) s.closing |= !t->done.load();
    s.added = p.duty.added;
    s.on_fraction_achieved = p.duty.sampled ? p.duty.achieved : 0;
    s.detached_ns = p.duty.detached_ns;
    for (const auto& [probe, ls] : p.launch) {
      const ProbeSpec* spec = FindProbe(probe);
      s.launch.push_back({probe, spec != nullptr ? spec->symbol : std::string_view(), ls.raw_count, ls.rep_count,
                          ls.rate_count * 1e9});
    }
    for (const auto& l : p.libs) {
      LibraryStatus ls;
      ls.kind = l.lib.kind;
      ls.path = l.lib.path;
      ls.targets = l.resolved->targets.size();
      ls.links = l.attachment->links() + (l.launch ? l.launch->links() : 0);
      ls.failed = l.attachment->failed() + (l.launch ? l.launch->failed() : 0);
      ls.missing_core = l.resolved->missing_core;
      ls.procaddr_used = l.resolved->procaddr_used;
      ls.procaddr_internal = l.resolved->procaddr_internal;
      s.libraries.push_back(std::move(ls));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<CollectiveRecord> ProbesCollector::RecentCollectives(int32_t pid) const {
  std::lock_guard lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) return {};
  return {it->second.records.begin(), it->second.records.end()};
}

size_t ProbesCollector::open_links() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [pid, p] : procs_) {
    for (const auto& l : p.libs) n += l.attachment->links() + (l.launch ? l.launch->links() : 0);
  }
  return n;
}

}  // namespace ithbat::collect::probes
