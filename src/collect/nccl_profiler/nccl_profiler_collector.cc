#include "collect/nccl_profiler/nccl_profiler_collector.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "collect/probes/proc_maps.h"
#include "ithbat_nccl_ring.h"

namespace ithbat::collect::nccl_profiler {
namespace {

// Label names of a per-process metric: the identity's, then `extra`.
std::vector<std::string> Labels(std::initializer_list<std::string> extra) {
  return agent::ProcessLabelNames(extra);
}

const MetricDesc& CollectivesDesc() {
  static const MetricDesc d{"ithbat_nccl_collectives_total",
                            "NCCL operations (collectives and send/recv) whose GPU start and stop the NCCL "
                            "profiler plugin reported (opt-in libnccl-profiler-ithbat.so), by op",
                            "", MetricType::kCounter, Labels({"op"})};
  return d;
}
const MetricDesc& KernelSecondsDesc() {
  static const MetricDesc d{
      "ithbat_nccl_kernel_seconds_total",
      "GPU time in NCCL kernels, first channel start to last channel stop per operation "
      "(GPU timer, from the profiler plugin), including time spent waiting for peers",
      "seconds", MetricType::kCounter, Labels({"op"})};
  return d;
}
const MetricDesc& BytesDesc() {
  static const MetricDesc d{"ithbat_nccl_bytes_total",
                            "Bytes per rank of the GPU-timed NCCL operations (message size as nccl-tests "
                            "reports it), from the profiler plugin",
                            "bytes", MetricType::kCounter, Labels({"op"})};
  return d;
}
const MetricDesc& WaitDesc() {
  static const MetricDesc d{"ithbat_nccl_wait_seconds_total",
                            "Time this rank's collective kernels waited for the other ranks of the same "
                            "communicator that run on this node (last local rank's GPU start minus this "
                            "rank's); peers on other nodes are not seen. Each GPU's timer is moved onto the "
                            "host clock first; what remains per collective is the difference of the two "
                            "ranks' smallest recent KernelCh delivery delays (about 10 us when NCCL's proxy "
                            "thread is idle, more when it is busy)",
                            "seconds", MetricType::kCounter, Labels({})};
  return d;
}
const MetricDesc& UntimedDesc() {
  static const MetricDesc d{
      "ithbat_nccl_untimed_total",
      "NCCL operations the profiler plugin wrote without GPU times (no kernel events, or "
      "written early because its pool wrapped)",
      "", MetricType::kCounter, Labels({})};
  return d;
}
const MetricDesc& LostDesc() {
  static const MetricDesc d{
      "ithbat_nccl_profiler_lost_total",
      "Profiler-plugin records lost, by reason: overrun (overwritten before read), torn "
      "(changed while read, or never committed), invalid (impossible fields), clock (GPU times "
      "implausible: the operation is kept and counted untimed), and the plugin's own drops "
      "(pool_full, bad_input, stale, contended)",
      "", MetricType::kCounter, Labels({"reason"})};
  return d;
}

constexpr int64_t kNsPerS = 1'000'000'000;

// The last NSpid of /proc/<pid>/status: the pid as the process sees itself ("" when unknown).
std::string NamespacePid(const std::string& procfs, int32_t pid) {
  std::ifstream in(fmt::format("{}/{}/status", procfs, pid));
  std::string line;
  for (int i = 0; i < 128 && std::getline(in, line); ++i) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream f(line.substr(6));
    std::string last;
    for (std::string v; f >> v;) last = v;
    const bool digits = !last.empty() && last.size() <= 10 &&
                        std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; });
    return digits ? last : "";
  }
  return "";
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), 0 when unreadable.
uint64_t StartTime(const std::string& procfs, int32_t pid) {
  std::ifstream in(fmt::format("{}/{}/stat", procfs, pid));
  std::string line;
  if (!std::getline(in, line) || line.size() > 4096) return 0;
  const size_t paren = line.rfind(')');  // comm may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream f(line.substr(paren + 1));
  std::string v;
  for (int field = 3; field <= 22 && (f >> v); ++field) {
    if (field == 22) {
      uint64_t x = 0;
      for (char c : v) {
        if (c < '0' || c > '9' || x > UINT64_MAX / 10 - 10) return 0;
        x = x * 10 + static_cast<uint64_t>(c - '0');
      }
      return x;
    }
  }
  return 0;
}

}  // namespace

bool NcclProfilerCollector::RingTaken(const FileKey& key, int32_t pid) const {
  for (const auto& [other_pid, other] : procs_) {
    if (other_pid != pid && other.reader && other.ring == key) return true;
  }
  return false;
}

Result<std::unique_ptr<NcclProfilerCollector>> NcclProfilerCollector::Create(NcclProfilerOptions options) {
  if (options.tracked == nullptr)
    return MakeError(ErrorCode::kInvalidArgument, "nccl_profiler: no tracked-process set");
  options.rescan_ticks = std::max(options.rescan_ticks, 1);
  options.join_ticks = std::max(options.join_ticks, 1);
  options.stall_ticks = std::max(options.stall_ticks, 1);
  options.bad_rescan_ticks = std::max(options.bad_rescan_ticks, 1);
  options.records_per_process = std::max<size_t>(options.records_per_process, 1);
  return std::unique_ptr<NcclProfilerCollector>(new NcclProfilerCollector(std::move(options)));
}

NcclProfilerCollector::NcclProfilerCollector(NcclProfilerOptions options)
    : agent::Collector("nccl_profiler"), options_(std::move(options)) {}

NcclProfilerCollector::~NcclProfilerCollector() = default;

std::vector<MetricDesc> NcclProfilerCollector::Describe() const {
  return {CollectivesDesc(), KernelSecondsDesc(), BytesDesc(), WaitDesc(), UntimedDesc(), LostDesc()};
}

Status NcclProfilerCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  return Ok();
}

void NcclProfilerCollector::StopImpl() {
  std::lock_guard lock(mu_);
  procs_.clear();
  groups_.clear();
}

std::vector<NcclProfilerCollector::ProcessStatus> NcclProfilerCollector::Processes() const {
  std::lock_guard lock(mu_);
  std::vector<ProcessStatus> out;
  for (const auto& [pid, p] : procs_) {
    ProcessStatus s;
    s.pid = pid;
    s.state = p.reader ? "reading" : (p.bad.empty() ? "no_ring" : "bad_ring");
    s.detail = p.bad;
    if (p.reader) {
      s.losses = p.reader->losses();
      s.writer = p.reader->writer();
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<CollectiveTiming> NcclProfilerCollector::RecentCollectives(int32_t pid) const {
  std::lock_guard lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) return {};
  return {it->second.records.begin(), it->second.records.end()};
}

void NcclProfilerCollector::SyncTracked() {
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
  for (auto it = procs_.begin(); it != procs_.end();) {
    it = now.contains(it->first) ? std::next(it) : procs_.erase(it);
  }
  for (auto& [pid, id] : now) {
    if (auto it = procs_.find(pid); it != procs_.end()) {
      it->second.identity = id;
      // The same pid, another process: its old ring must not be read as the new one's.
      const uint64_t st = StartTime(options_.procfs, pid);
      if (st != 0 && it->second.start_time != 0 && st != it->second.start_time) {
        Reset(it->second);
        it->second.start_time = st;
      }
      continue;
    }
    if (procs_.size() >= options_.max_processes) {
      ReportError(Error{ErrorCode::kResourceExhausted,
                        fmt::format("nccl_profiler: more than {} tracked processes; pid {} not followed",
                                    options_.max_processes, pid)});
      continue;
    }
    Proc p;
    p.pid = pid;
    p.start_time = StartTime(options_.procfs, pid);
    p.identity = id;
    procs_.emplace(pid, std::move(p));
  }
}

void NcclProfilerCollector::Retire(Proc& p) {
  if (!p.reader) return;
  const ReadLosses& l = p.reader->losses();
  p.past_losses.overrun += l.overrun;
  p.past_losses.torn += l.torn;
  p.past_losses.invalid += l.invalid;
  p.past_losses.clock += l.clock;
  p.past_losses.stuck += l.stuck;
  p.reader.reset();
}

void NcclProfilerCollector::Reset(Proc& p) {
  Retire(p);
  p.ring = FileKey{};
  p.bad.clear();
  p.scanned = false;
  p.records.clear();
  p.last_head = 0;
  p.head_moved_tick = tick_;
}

// Finds the ring in the process's maps and opens it through map_files (the kernel's link to
// exactly the mapped file, whatever the process's mount namespace). Of several candidates the one
// created last is read; a process already reading switches only to a newer ring, after draining
// the old one.
void NcclProfilerCollector::Scan(Proc& p) {
  p.scanned = true;
  p.last_scan_tick = tick_;
  if (p.start_time != 0) {
    const uint64_t st = StartTime(options_.procfs, p.pid);
    if (st != 0 && st != p.start_time) {
      Reset(p);
      p.scanned = true;
      p.start_time = st;
    }
  }
  const std::string maps_path = fmt::format("{}/{}/maps", options_.procfs, p.pid);
  std::ifstream in(maps_path);
  if (!in) return;  // gone or not ours to read: tried again later
  std::ostringstream text;
  constexpr size_t kMaxMaps = 16 << 20;
  char chunk[65536];
  size_t total = 0;
  while (in && total < kMaxMaps) {
    in.read(chunk, sizeof(chunk));
    const auto n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    text.write(chunk, static_cast<std::streamsize>(n));
    total += n;
  }
  // A process may map several rings: one inherited from the parent it forked from (its records
  // are the parent's) and its own, named with the pid the process sees itself as (NSpid's last
  // field). When that pid is known only its own ring is read.
  const auto entries = probes::ParseProcMaps(text.str());
  const std::string own = NamespacePid(options_.procfs, p.pid);
  const std::string own_name = "/" ITHBAT_NCCL_RING_FILE_PREFIX + own + ITHBAT_NCCL_RING_FILE_SUFFIX;
  std::unique_ptr<RingReader> best;
  FileKey best_key;
  std::string error;
  constexpr int kMaxCandidates = 8;
  int candidates = 0;
  for (const probes::MapsEntry& e : entries) {
    if (!IsRingPath(e.path) || e.offset != 0) continue;
    if (!own.empty() && e.path.find(own_name) == std::string::npos) continue;
    const FileKey key{makedev(e.dev_major, e.dev_minor), e.inode};
    if (p.reader && key == p.ring) continue;  // the one being read
    if (best && key == best_key) continue;    // mapped twice
    if (RingTaken(key, p.pid)) continue;      // another tracked process reads it already
    if (++candidates > kMaxCandidates) break;
    const std::string link = fmt::format("{}/{}/map_files/{:x}-{:x}", options_.procfs, p.pid, e.start, e.end);
    auto r = RingReader::Open(link, /*via_proc_link=*/true, makedev(e.dev_major, e.dev_minor), e.inode);
    if (!r) {
      if (r.error().code == ErrorCode::kNotFound) continue;  // unmapped meanwhile
      error = fmt::format("pid {}: {}", p.pid, r.error().message);
      ReportError(r.error());
      continue;
    }
    if (!best || (*r)->created_monotonic_ns() > best->created_monotonic_ns()) {
      best = std::move(*r);
      best_key = key;
    }
  }
  if (!best) {
    if (!p.reader && !error.empty()) p.bad = error;
    return;
  }
  if (p.reader) {
    if (best->created_monotonic_ns() <= p.reader->created_monotonic_ns()) return;
    Drain(p);  // what the old ring still holds is counted before it is let go
    Retire(p);
  }
  p.reader = std::move(best);
  p.ring = best_key;
  p.bad.clear();
  p.last_head = 0;
  p.head_moved_tick = tick_;
}

void NcclProfilerCollector::Drain(Proc& p) {
  std::vector<NcclRecord> got;
  if (auto s = p.reader->Read(&got, options_.max_records_per_tick); !s) {
    p.bad = fmt::format("pid {}: {}", p.pid, s.error().message);
    ReportError(s.error());
    Retire(p);
    p.ring = FileKey{};
  } else if (p.reader->head() != p.last_head) {
    p.last_head = p.reader->head();
    p.head_moved_tick = tick_;
  }
  for (NcclRecord& r : got) {
    // An evicted record's times may cover only some channels; one closed by the next operation
    // covers every channel that reported (older NCCL's P2p), so it counts.
    if (r.timed && !r.evicted) {
      OpTotals& t = p.totals[r.op];
      t.collectives += 1;
      t.kernel_seconds += static_cast<double>(r.gpu_stop_mono - r.gpu_start_mono) / kNsPerS;
      t.bytes += static_cast<double>(r.bytes);
      if (!r.p2p && groups_.size() < options_.max_open_groups) {
        Group& g = groups_[GroupKey{p.identity.job, r.comm_id, r.op, r.seq_number}];
        if (g.members.empty()) {
          g.first_tick = tick_;
          g.nranks = r.nranks;
        }
        const bool dup = std::any_of(g.members.begin(), g.members.end(),
                                     [&](const Member& m) { return m.pid == p.pid && m.rank == r.rank; });
        if (!dup && g.members.size() < static_cast<size_t>(std::max(g.nranks, 1)))
          g.members.push_back(Member{p.pid, r.rank, r.gpu_start_mono});
      }
    } else {
      p.untimed += 1;
    }
    p.records.push_back(CollectiveTiming{p.pid, r, -1});
    while (p.records.size() > options_.records_per_process) p.records.pop_front();
  }
}

// Closes the (comm, seq) groups that are complete or old: each member's wait is the latest local
// start minus its own, credited to its process and to its record in the snapshot.
void NcclProfilerCollector::CloseGroups(bool all) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    const bool complete = static_cast<int32_t>(g.members.size()) >= g.nranks;
    if (!all && !complete && tick_ - g.first_tick < static_cast<uint64_t>(options_.join_ticks)) {
      ++it;
      continue;
    }
    int64_t last = INT64_MIN;
    for (const Member& m : g.members) last = std::max(last, m.gpu_start_mono);
    for (const Member& m : g.members) {
      auto pit = procs_.find(m.pid);
      if (pit == procs_.end()) continue;
      const int64_t wait = last - m.gpu_start_mono;
      pit->second.wait_seconds += static_cast<double>(wait) / kNsPerS;
      // The record is recent: search from the newest.
      auto& recs = pit->second.records;
      for (auto r = recs.rbegin(); r != recs.rend(); ++r) {
        if (!r->record.p2p && r->record.rank == m.rank && r->record.comm_id == it->first.comm &&
            r->record.op == it->first.op && r->record.seq_number == it->first.seq && r->record.timed) {
          r->wait_ns = wait;
          break;
        }
      }
    }
    it = groups_.erase(it);
  }
}

void NcclProfilerCollector::Put(Proc& p, const MetricDesc& desc, std::string_view label,
                                std::string_view value, TimeNs t, double v) {
  agent::ProcessSeries::Labels extra;
  if (!label.empty()) extra.emplace_back(std::string(label), std::string(value));
  if (auto s = p.series.Put(*sink_, p.identity, desc, extra, t, v); !s) ReportError(s.error());
}

void NcclProfilerCollector::Publish(Proc& p, TimeNs t) {
  for (const auto& [op, tot] : p.totals) {
    Put(p, CollectivesDesc(), "op", op, t, tot.collectives);
    Put(p, KernelSecondsDesc(), "op", op, t, tot.kernel_seconds);
    Put(p, BytesDesc(), "op", op, t, tot.bytes);
  }
  Put(p, WaitDesc(), "", "", t, p.wait_seconds);
  Put(p, UntimedDesc(), "", "", t, p.untimed);
  if (p.reader) {
    ReadLosses l = p.past_losses;
    const ReadLosses& cur = p.reader->losses();
    l.overrun += cur.overrun;
    l.torn += cur.torn;
    l.invalid += cur.invalid;
    l.clock += cur.clock;
    l.stuck += cur.stuck;
    const WriterCounters& w = p.reader->writer();
    Put(p, LostDesc(), "reason", "overrun", t, static_cast<double>(l.overrun));
    Put(p, LostDesc(), "reason", "torn", t, static_cast<double>(l.torn));
    Put(p, LostDesc(), "reason", "invalid", t, static_cast<double>(l.invalid));
    Put(p, LostDesc(), "reason", "clock", t, static_cast<double>(l.clock));
    Put(p, LostDesc(), "reason", "pool_full", t, static_cast<double>(w.dropped_pool_full));
    Put(p, LostDesc(), "reason", "bad_input", t, static_cast<double>(w.dropped_bad_input));
    Put(p, LostDesc(), "reason", "stale", t, static_cast<double>(w.dropped_stale));
    Put(p, LostDesc(), "reason", "contended", t, static_cast<double>(w.dropped_contended));
  }
}

Status NcclProfilerCollector::CollectImpl(TimeNs tick_time) {
  ++tick_;
  SyncTracked();
  std::lock_guard lock(mu_);
  // Scan budget: pids never scanned first, then round-robin over those without a ring.
  size_t scans = 0;
  for (auto& [pid, p] : procs_) {
    if (!p.scanned && scans < options_.max_scans_per_tick) {
      Scan(p);
      ++scans;
    }
  }
  if (!procs_.empty()) {
    std::vector<Proc*> waiting;
    for (auto& [pid, p] : procs_) {
      const uint64_t since_scan = tick_ - p.last_scan_tick;
      // An idle process's maps (large for a CUDA process) are parsed at most every stall_ticks.
      const bool due = p.reader ? tick_ - p.head_moved_tick >= static_cast<uint64_t>(options_.stall_ticks) &&
                                      since_scan >= static_cast<uint64_t>(options_.stall_ticks)
                       : p.bad.empty() ? since_scan >= static_cast<uint64_t>(options_.rescan_ticks)
                                       : since_scan >= static_cast<uint64_t>(options_.bad_rescan_ticks);
      if (p.scanned && due) waiting.push_back(&p);
    }
    for (size_t i = 0; i < waiting.size() && scans < options_.max_scans_per_tick; ++i, ++scans)
      Scan(*waiting[(scan_cursor_ + i) % waiting.size()]);
    if (!waiting.empty()) scan_cursor_ = (scan_cursor_ + 1) % waiting.size();
  }
  std::string degraded;
  for (auto& [pid, p] : procs_) {
    if (p.reader) Drain(p);
    if (!p.bad.empty() && degraded.empty()) degraded = p.bad;
  }
  CloseGroups(false);
  for (auto& [pid, p] : procs_) {
    if (p.reader || !p.totals.empty() || p.untimed > 0) Publish(p, tick_time);
  }
  SetDegraded(degraded);
  return Ok();
}

}  // namespace ithbat::collect::nccl_profiler
