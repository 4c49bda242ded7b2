#include "collect/probes/probes_collector.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/core.h>
#include <sys/stat.h>

#include "collect/probes/probe_table.h"
#include "core/time.h"

namespace ithbat::collect::probes {
namespace {

const std::vector<std::string> kIdentityLabels = {"job_id", "rank", "local_rank", "world_size",
                                                  "pid",    "gpu",  "gpu_uuid"};

std::vector<std::string> Labels(std::initializer_list<std::string> extra) {
  std::vector<std::string> l = kIdentityLabels;
  l.insert(l.end(), extra);
  return l;
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
          ProcessesDesc(),  LostDesc()};
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
  return Ok();
}

void ProbesCollector::StopImpl() {
  std::lock_guard lock(mu_);
  procs_.clear();  // destroys every attachment (links)
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
  std::lock_guard lock(mu_);
  procs_.erase(pid);
  if (bpf_) bpf_->ForgetProcess(static_cast<uint32_t>(pid));
}

Result<std::shared_ptr<const ResolvedLibrary>> ProbesCollector::Resolve(Proc& p, const MappedLibrary& lib,
                                                                        std::string* path) {
  auto agent_path = AgentPathFor(options_.procfs, p.pid, lib);
  if (!agent_path) return std::unexpected(agent_path.error());
  *path = *agent_path;
  std::optional<std::string> trusted;
  if (lib.kind == LibraryKind::kCuda) {
    if (auto t = TrustedHostPath(options_.procfs, p.pid, lib, options_.driver_dirs); t) trusted = *t;
  }
  const LibKey key{lib.dev_major, lib.dev_minor, lib.inode, trusted.has_value()};
  if (auto it = resolved_cache_.find(key); it != resolved_cache_.end()) return it->second;
  if (auto it = failed_cache_.find(key); it != failed_cache_.end()) return std::unexpected(it->second);
  auto r = ResolveLibrary(*agent_path, lib.kind, trusted);
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
    std::string path;
    auto resolved = Resolve(p, lib, &path);
    if (!resolved) {
      p.degraded = resolved.error().message;
      ReportError(resolved.error());
      continue;
    }
    auto att = bpf_->Attach(p.pid, path, (*resolved)->targets);
    if (!att) {
      p.degraded = att.error().message;
      ReportError(att.error());
      continue;
    }
    if ((*att)->failed() > 0) {
      p.degraded = fmt::format("{} of {} uprobes failed: {}", (*att)->failed(),
                               (*att)->failed() + (*att)->links(), (*att)->first_error());
    }
    p.libs.push_back({lib, std::move(*att), *resolved});
  }
}

void ProbesCollector::Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value,
                          TimeNs t, double v) {
  auto key = std::make_tuple(desc.name, std::string(label), std::string(value));
  auto it = p.refs.find(key);
  if (it == p.refs.end()) {
    auto pairs = p.identity.ToLabelPairs();
    if (!label.empty()) pairs.emplace_back(std::string(label), std::string(value));
    auto labels = LabelSet::From(pairs);
    if (!labels) {
      ReportError(labels.error());
      return;
    }
    auto ref = sink_->RegisterSeries(desc, *labels);
    if (!ref) {
      ReportError(ref.error());
      return;
    }
    it = p.refs.emplace(std::move(key), *ref).first;
  }
  if (auto s = sink_->Append(it->second, t, v); !s) ReportError(s.error());
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
      Put(p, CallsDesc(), "api", spec->symbol, t, count);
      switch (spec->cls) {
        case ProbeClass::kLaunch:
          Put(p, LaunchesDesc(), "api", spec->symbol, t, count);
          grid += sum;
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
      // Two labels: the api and the threshold; registered under a combined key.
      auto key =
          std::make_tuple(CallSlowDesc().name, std::string(spec->symbol), std::string(kThresholds[i].label));
      auto it = p.refs.find(key);
      if (it == p.refs.end()) {
        auto pairs = p.identity.ToLabelPairs();
        pairs.emplace_back("api", std::string(spec->symbol));
        pairs.emplace_back("min", std::string(kThresholds[i].label));
        auto labels = LabelSet::From(pairs);
        if (!labels) continue;
        auto ref = sink_->RegisterSeries(CallSlowDesc(), *labels);
        if (!ref) {
          ReportError(ref.error());
          continue;
        }
        it = p.refs.emplace(std::move(key), *ref).first;
      }
      if (auto s = sink_->Append(it->second, t, a[i]); !s) ReportError(s.error());
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
  Put(p, StateDesc(), "state", "exact", t, degraded ? 0 : 1);
  Put(p, StateDesc(), "state", "sampled", t, 0);
  Put(p, StateDesc(), "state", "degraded", t, degraded ? 1 : 0);
}

Status ProbesCollector::CollectImpl(TimeNs tick_time) {
  ++tick_;
  if (!bpf_) return Ok();  // degraded since Start: nothing to attach to
  mono_to_real_ = NowNs() - MonotonicNowNs();
  SyncTracked();

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

    std::vector<ProbeBpf::StatEntry> stats;
    if (auto s = bpf_->ReadStats(&stats); !s) return s;
    size_t attached = 0, links = 0;
    for (auto& [pid, p] : procs_) {
      if (p.libs.empty()) continue;
      ++attached;
      for (const auto& l : p.libs) links += l.attachment->links();
      AppendProcess(p, tick_time, stats);
      bpf_->ResetMaxima(static_cast<uint32_t>(pid));
    }
    auto global = [&](const MetricDesc& d, std::string_view label, std::string_view value, double v) {
      const std::string key = d.name + "/" + std::string(value);
      auto it = global_refs_.find(key);
      if (it == global_refs_.end()) {
        auto labels = label.empty() ? LabelSet::From({}) : LabelSet::From({{label, value}});
        if (!labels) return;
        auto ref = sink_->RegisterSeries(d, *labels);
        if (!ref) {
          ReportError(ref.error());
          return;
        }
        it = global_refs_.emplace(key, *ref).first;
      }
      if (auto s = sink_->Append(it->second, tick_time, v); !s) ReportError(s.error());
    };
    const cuda_probe_global g = bpf_->Globals();
    global(LinksDesc(), "", "", static_cast<double>(links));
    global(ProcessesDesc(), "", "", static_cast<double>(attached));
    global(LostDesc(), "reason", "stats_full", static_cast<double>(g.stats_full));
    global(LostDesc(), "reason", "ring_dropped", static_cast<double>(g.ring_dropped));
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
                             : (p.degraded.empty() ? "exact" : "degraded");
    for (const auto& l : p.libs) {
      LibraryStatus ls;
      ls.kind = l.lib.kind;
      ls.path = l.lib.path;
      ls.targets = l.resolved->targets.size();
      ls.links = l.attachment->links();
      ls.failed = l.attachment->failed();
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
    for (const auto& l : p.libs) n += l.attachment->links();
  }
  return n;
}

}  // namespace ithbat::collect::probes
