#include "collect/sched_io/sched_io_collector.h"

#include <array>
#include <deque>
#include <set>
#include <string_view>

#include <fmt/core.h>
#include <sys/stat.h>

#include "collect/proc/proc_tree.h"

namespace ithbat::collect::sched_io {
namespace {

// Label names of a per-process metric: the identity's, then `extra`.
std::vector<std::string> Labels(std::initializer_list<std::string> extra) {
  return agent::ProcessLabelNames(extra);
}

MetricDesc Desc(std::string name, std::string help, std::string unit, MetricType type,
                std::vector<std::string> labels) {
  return MetricDesc{std::move(name), std::move(help), std::move(unit), type, std::move(labels)};
}

constexpr std::array<std::string_view, SCHED_IO_NSCOPES> kScopes = {"main", "threads", "children"};
constexpr std::array<std::string_view, SCHED_IO_NCLASSES> kClasses = {"runnable", "lock", "io", "sleep"};
constexpr std::array<std::string_view, SCHED_IO_NOPS> kOps = {"write", "fsync", "close"};

// Latency thresholds as log2 buckets of ns, as the probes collector: a call counted under
// min=X took at least 2^b ns (1ms = 2^20 ns, 8ms = 2^23, 134ms = 2^27, 1s = 2^30).
struct Threshold {
  uint32_t log2_ns;
  std::string_view label;
};
constexpr std::array<Threshold, 4> kThresholds = {{{20, "1ms"}, {23, "8ms"}, {27, "134ms"}, {30, "1s"}}};

const MetricDesc& OffcpuDesc() {
  static const MetricDesc d = Desc(
      "ithbat_sched_offcpu_seconds_total",
      "Time threads of the process tree spent off CPU, summed over threads, by scope (main thread, other "
      "threads, descendant processes) and class (runnable: waiting for a CPU after a preemption or wakeup; "
      "lock: asleep in futex; io: any uninterruptible (D) sleep, storage waits but also kernel lock waits such as a "
      "contended mmap_lock; sleep: any other voluntary sleep), each sleep counted up to its wakeup",
      "seconds", MetricType::kCounter, Labels({"scope", "class"}));
  return d;
}
const MetricDesc& OncpuDesc() {
  static const MetricDesc d = Desc("ithbat_sched_oncpu_seconds_total",
                                   "Time threads of the process tree ran on a CPU, summed over threads, by scope",
                                   "seconds", MetricType::kCounter, Labels({"scope"}));
  return d;
}
const MetricDesc& IoCallsDesc() {
  static const MetricDesc d = Desc(
      "ithbat_io_calls_total",
      "write/fsync/close calls on regular files by the process tree, per mount (as the process sees it)", "",
      MetricType::kCounter, Labels({"op", "mount", "fstype"}));
  return d;
}
const MetricDesc& IoSecondsDesc() {
  static const MetricDesc d = Desc("ithbat_io_seconds_total",
                                   "Time inside write/fsync/close calls on regular files, syscall entry to exit, "
                                   "summed (divide by ithbat_io_calls_total for the mean)",
                                   "seconds", MetricType::kCounter, Labels({"op", "mount", "fstype"}));
  return d;
}
const MetricDesc& IoErrorsDesc() {
  static const MetricDesc d = Desc("ithbat_io_errors_total",
                                   "write/fsync/close calls on regular files that returned an error", "",
                                   MetricType::kCounter, Labels({"op", "mount", "fstype"}));
  return d;
}
const MetricDesc& IoBytesDesc() {
  static const MetricDesc d = Desc("ithbat_io_bytes_total",
                                   "Bytes written to regular files (write, pwrite64, writev, pwritev) per mount",
                                   "bytes", MetricType::kCounter, Labels({"mount", "fstype"}));
  return d;
}
const MetricDesc& IoSlowDesc() {
  static const MetricDesc d = Desc("ithbat_io_slow_total",
                                   "Calls that took at least min (1ms=2^20 ns, 8ms=2^23, 134ms=2^27, 1s=2^30), from "
                                   "the in-kernel log2 histogram",
                                   "", MetricType::kCounter, Labels({"op", "mount", "fstype", "min"}));
  return d;
}
const MetricDesc& IoMaxDesc() {
  static const MetricDesc d =
      Desc("ithbat_io_latency_max_seconds", "Longest call since the previous tick (0: none ended)", "seconds",
           MetricType::kGauge, Labels({"op", "mount", "fstype"}));
  return d;
}
const MetricDesc& TrackedDesc() {
  static const MetricDesc d = Desc("ithbat_sched_io_tracked_processes",
                                   "Processes in the kernel filter (roots and their descendants)", "",
                                   MetricType::kGauge, {});
  return d;
}
const MetricDesc& LostDesc() {
  static const MetricDesc d = Desc(
      "ithbat_sched_io_lost_total",
      "Kernel-side entries that could not be created (track_full: a child not tracked; roots_full: scheduling "
      "time lost; threads_full: a thread not followed; io_full, inflight_full: I/O calls lost)",
      "", MetricType::kCounter, {"reason"});
  return d;
}

bool ProcessExists(const std::string& procfs, int32_t pid) {
  struct stat st {};
  return stat(fmt::format("{}/{}", procfs, pid).c_str(), &st) == 0;
}

}  // namespace

SchedIoCollector::SchedIoCollector(SchedIoOptions options)
    : Collector("sched_io"), options_(std::move(options)) {}
SchedIoCollector::~SchedIoCollector() = default;

Result<std::unique_ptr<SchedIoCollector>> SchedIoCollector::Create(SchedIoOptions options) {
  if (options.tracked == nullptr) return MakeError(ErrorCode::kInvalidArgument, "sched_io: no tracked-process set");
  if (options.max_mounts_per_process < 1) options.max_mounts_per_process = 1;
  return std::unique_ptr<SchedIoCollector>(new SchedIoCollector(std::move(options)));
}

std::vector<MetricDesc> SchedIoCollector::Describe() const {
  return {OffcpuDesc(), OncpuDesc(), IoCallsDesc(), IoSecondsDesc(), IoErrorsDesc(), IoBytesDesc(),
          IoSlowDesc(), IoMaxDesc(), TrackedDesc(), LostDesc()};
}

Status SchedIoCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  return Ok();
}

Status SchedIoCollector::StartImpl() {
  auto bpf = SchedIoBpf::Load(/*attach=*/false);
  if (!bpf) {
    SetDegraded(bpf.error().message);
    return Ok();
  }
  bpf_ = std::move(*bpf);
  return Ok();
}

void SchedIoCollector::StopImpl() {
  std::lock_guard lock(mu_);
  roots_.clear();
  bpf_.reset();
}

std::vector<int32_t> SchedIoCollector::Roots() const {
  std::lock_guard lock(mu_);
  std::vector<int32_t> out;
  for (const auto& [pid, r] : roots_) out.push_back(pid);
  return out;
}

void SchedIoCollector::AddRoot(int32_t pid, const Identity& id) {
  if (auto s = bpf_->SetAttached(true); !s) {
    // Attach before the first map entry, so no fork or exit of the tree is missed.
    SetDegraded(s.error().message);
    ReportError(s.error());
    return;
  }
  // Counters restart with the root: drop what an event racing with an earlier removal left.
  bpf_->ForgetRoot(static_cast<uint32_t>(pid));
  if (auto s = bpf_->Track(pid, pid); !s) {
    ReportError(s.error());
    return;
  }
  // Existing descendants, once (later ones inherit at fork in the kernel). A descendant that is
  // itself a root keeps its own entry.
  auto kernel = bpf_->Tracked();
  std::deque<int32_t> todo = {pid};
  size_t added = 0;
  std::set<int32_t> seen = {pid};
  while (!todo.empty() && added < options_.max_descendants) {
    const int32_t p = todo.front();
    todo.pop_front();
    for (int32_t c : proc::ReadChildren(options_.procfs, p, options_.max_descendants)) {
      if (!seen.insert(c).second) continue;
      if (auto it = kernel.find(static_cast<uint32_t>(c)); it != kernel.end() && it->second == it->first) continue;
      if (roots_.contains(c)) continue;
      if (auto s = bpf_->Track(c, pid); !s) {
        ReportError(s.error());
        break;
      }
      todo.push_back(c);
      if (++added >= options_.max_descendants) break;
    }
  }
  Root r;
  r.pid = pid;
  r.identity = id;
  roots_.emplace(pid, std::move(r));
}

// What the kernel holds for the root goes now; what a race leaves (a child forked after the
// snapshot below, a call that ends after ForgetRoot) goes at the reconciliation of every tick.
void SchedIoCollector::RemoveRoot(int32_t pid) {
  for (const auto& [tgid, root] : bpf_->Tracked()) {
    if (root == static_cast<uint32_t>(pid)) (void)bpf_->Untrack(static_cast<int32_t>(tgid));
  }
  bpf_->ForgetRoot(static_cast<uint32_t>(pid));
  roots_.erase(pid);
}

void SchedIoCollector::SyncTracked() {
  const uint64_t gen = options_.tracked->generation();
  if (gen == seen_generation_) return;
  seen_generation_ = gen;
  std::map<int32_t, Identity> now;
  for (auto& p : options_.tracked->Snapshot()) {
    Identity id = p.identity;
    id.pid = p.pid;
    now.emplace(p.pid, std::move(id));
  }
  std::lock_guard lock(mu_);
  std::vector<int32_t> gone;
  for (const auto& [pid, r] : roots_) {
    if (!now.contains(pid)) gone.push_back(pid);
  }
  for (int32_t pid : gone) RemoveRoot(pid);
  for (const auto& [pid, id] : now) {
    if (auto it = roots_.find(pid); it != roots_.end()) {
      it->second.identity = id;
      continue;
    }
    if (roots_.size() >= options_.max_roots) {
      ReportError(Error{ErrorCode::kResourceExhausted,
                        fmt::format("sched_io: more than {} tracked processes; pid {} not followed",
                                    options_.max_roots, pid)});
      continue;
    }
    if (!ProcessExists(options_.procfs, pid)) continue;
    AddRoot(pid, id);
  }
}

const SchedIoCollector::MountLabel& SchedIoCollector::LabelFor(Root& r, uint32_t dev) {
  if (auto it = r.dev_labels.find(dev); it != r.dev_labels.end()) return it->second;
  const uint32_t major = KernelDevMajor(dev), minor = KernelDevMinor(dev);
  const MountEntry* m = FindMount(r.mounts, major, minor);
  if (m == nullptr && r.mounts_read_tick != tick_) {  // a mount made since the last read
    r.mounts = ReadMountinfo(options_.procfs, r.pid);
    r.mounts_read_tick = tick_;
    m = FindMount(r.mounts, major, minor);
  }
  MountLabel label;
  if (m == nullptr) {
    label.mount = "unknown";
  } else {
    // Several devices can share a mount label only through "other": count distinct names.
    bool known = false;
    for (const auto& [d, l] : r.dev_labels) known |= l.mount == m->mount_point;
    if (!known && r.distinct_mounts >= options_.max_mounts_per_process) {
      label.mount = "other";
    } else {
      if (!known) ++r.distinct_mounts;
      label.mount = m->mount_point;
      label.fstype = m->fstype;
    }
  }
  return r.dev_labels.emplace(dev, std::move(label)).first->second;
}

void SchedIoCollector::Put(Root& r, const MetricDesc& desc,
                           const std::vector<std::pair<std::string, std::string>>& labels, TimeNs t, double v) {
  if (auto s = r.series.Put(*sink_, r.identity, desc, labels, t, v); !s) ReportError(s.error());
}

void SchedIoCollector::Global(const MetricDesc& d, std::string_view label, std::string_view value, TimeNs t,
                              double v) {
  agent::ProcessSeries::Labels extra;
  if (!label.empty()) extra.emplace_back(std::string(label), std::string(value));
  if (auto s = global_series_.Put(*sink_, Identity{}, d, extra, t, v); !s) ReportError(s.error());
}

void SchedIoCollector::AppendRoot(Root& r, TimeNs t, const sched_io_sched* s,
                                  const std::vector<const SchedIoBpf::IoEntry*>& io) {
  for (size_t sc = 0; sc < SCHED_IO_NSCOPES; ++sc) {
    const std::string scope(kScopes[sc]);
    for (size_t c = 0; c < SCHED_IO_NCLASSES; ++c) {
      const double ns = s ? static_cast<double>(s->offcpu_ns[sc][c]) : 0.0;
      Put(r, OffcpuDesc(), {{"scope", scope}, {"class", std::string(kClasses[c])}}, t, ns / 1e9);
    }
    Put(r, OncpuDesc(), {{"scope", scope}}, t, s ? static_cast<double>(s->oncpu_ns[sc]) / 1e9 : 0.0);
  }
  // Per (op, mount label): sums over the devices that share the label ("other", bind mounts).
  struct Agg {
    double calls = 0, ns = 0, errors = 0, max_ns = 0;
    std::array<double, kThresholds.size()> slow{};
  };
  std::map<std::pair<uint32_t, std::pair<std::string, std::string>>, Agg> ops;
  std::map<std::pair<std::string, std::string>, double> bytes;
  for (const SchedIoBpf::IoEntry* ep : io) {
    const SchedIoBpf::IoEntry& e = *ep;
    if (e.key.op >= SCHED_IO_NOPS) continue;
    const MountLabel& l = LabelFor(r, e.key.dev);
    auto& a = ops[{e.key.op, {l.mount, l.fstype}}];
    a.calls += static_cast<double>(e.value.calls);
    a.ns += static_cast<double>(e.value.lat_ns);
    a.errors += static_cast<double>(e.value.errors);
    a.max_ns = std::max(a.max_ns, static_cast<double>(e.max_ns));
    for (uint32_t b = 0; b < SCHED_IO_HIST; ++b) {
      for (size_t i = 0; i < kThresholds.size(); ++i) {
        if (b >= kThresholds[i].log2_ns) a.slow[i] += static_cast<double>(e.value.hist[b]);
      }
    }
    if (e.key.op == SCHED_IO_OP_WRITE) bytes[{l.mount, l.fstype}] += static_cast<double>(e.value.bytes);
  }
  for (const auto& [k, a] : ops) {
    const std::string op(kOps[k.first]);
    const auto& [mount, fstype] = k.second;
    std::vector<std::pair<std::string, std::string>> labels = {{"op", op}, {"mount", mount}, {"fstype", fstype}};
    Put(r, IoCallsDesc(), labels, t, a.calls);
    Put(r, IoSecondsDesc(), labels, t, a.ns / 1e9);
    Put(r, IoErrorsDesc(), labels, t, a.errors);
    Put(r, IoMaxDesc(), labels, t, a.max_ns / 1e9);
    for (size_t i = 0; i < kThresholds.size(); ++i) {
      auto with_min = labels;
      with_min.emplace_back("min", std::string(kThresholds[i].label));
      Put(r, IoSlowDesc(), with_min, t, a.slow[i]);
    }
  }
  for (const auto& [k, v] : bytes) Put(r, IoBytesDesc(), {{"mount", k.first}, {"fstype", k.second}}, t, v);
}

Status SchedIoCollector::CollectImpl(TimeNs tick_time) {
  ++tick_;
  if (!bpf_) return Ok();  // degraded since Start
  SyncTracked();
  std::lock_guard lock(mu_);
  const auto sched = bpf_->ReadSched();
  const auto io = bpf_->ReadIo();
  // Grouped by root once (not one walk of every entry per root).
  std::map<uint32_t, std::vector<const SchedIoBpf::IoEntry*>> io_by_root;
  for (const auto& e : io) io_by_root[e.key.root].push_back(&e);
  static const std::vector<const SchedIoBpf::IoEntry*> kNoIo;
  for (auto& [pid, r] : roots_) {
    auto it = sched.find(static_cast<uint32_t>(pid));
    auto io_it = io_by_root.find(static_cast<uint32_t>(pid));
    AppendRoot(r, tick_time, it == sched.end() ? nullptr : &it->second,
               io_it == io_by_root.end() ? kNoIo : io_it->second);
  }
  const sched_io_globals g = bpf_->Globals();
  Global(LostDesc(), "reason", "track_full", tick_time, static_cast<double>(g.track_full));
  Global(LostDesc(), "reason", "roots_full", tick_time, static_cast<double>(g.roots_full));
  Global(LostDesc(), "reason", "threads_full", tick_time, static_cast<double>(g.threads_full));
  Global(LostDesc(), "reason", "io_full", tick_time, static_cast<double>(g.io_full));
  Global(LostDesc(), "reason", "inflight_full", tick_time, static_cast<double>(g.inflight_full));

  // Exits, after this tick's read so a root's last counts are appended: its remaining tree
  // (orphaned children) stops being followed and its aggregates are deleted.
  std::vector<int32_t> gone;
  for (const auto& [pid, r] : roots_) {
    if (!ProcessExists(options_.procfs, pid)) gone.push_back(pid);
  }
  for (int32_t pid : gone) RemoveRoot(pid);
  // The kernel maps against roots_: tracked entries of a root not followed (a child forked
  // while its root was removed, an entry a race left) leave the filter, and aggregates of such
  // roots (a switch or a call that ended after the root's removal) are deleted.
  std::set<uint32_t> followed;
  for (const auto& [pid, r] : roots_) followed.insert(static_cast<uint32_t>(pid));
  bpf_->RetainRoots(followed);
  Global(TrackedDesc(), "", "", tick_time, static_cast<double>(bpf_->Tracked().size()));

  if (roots_.empty() && bpf_->attached()) {
    if (++idle_ticks_ >= std::max(1, options_.idle_detach_ticks)) {
      // Detached, no program sees an exit or a switch: nothing kept from before may be read
      // as current after the next attach (a reused pid under a dead root, a thread's phase).
      (void)bpf_->SetAttached(false);
      bpf_->Clear();
      idle_ticks_ = 0;
    }
  } else {
    idle_ticks_ = 0;
  }
  return Ok();
}

}  // namespace ithbat::collect::sched_io
