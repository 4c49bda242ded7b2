#include "collect/joblog/joblog_collector.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>

#include <fmt/core.h>

#include "agent/logging.h"
#include "collect/identity/identity_resolver.h"
#include "collect/proc/proc_tree.h"
#include "collect/joblog/tensorboard/tensorboard.h"
#include "collect/joblog/text/redact.h"
#include "core/labels.h"

namespace ithbat::collect::joblog {
namespace {

// Records handed from a source to the parsers at a time (~100 KB of CaptureRecord).
constexpr size_t kDrainBatch = 1024;

enum DescIndex : size_t {
  kLines,
  kBytes,
  kEvents,
  kLostRecords,
  kLostBytes,
  kTruncatedWrites,
  kTruncatedLines,
  kReadErrors,
  kProcessesRefused,
  kTracked,
  kOptedOut,
  kMode,
  kTbFiles,
  kTbScalars,
  kTbErrors,
  kThinnedLines,
  kDescCount,
};

std::vector<MetricDesc> MakeDescs() {
  std::vector<MetricDesc> d(kDescCount);
  d[kLines] = {"ithbat_joblog_lines_total",
               "Lines captured from tracked processes' output, by stream (stdout, stderr)",
               "",
               MetricType::kCounter,
               {"stream"}};
  d[kBytes] = {"ithbat_joblog_bytes_total",
               "Bytes of output captured from tracked processes",
               "bytes",
               MetricType::kCounter,
               {}};
  d[kEvents] = {"ithbat_joblog_events_total",
                "Events parsed from job output and TensorBoard files, by kind (step, loss, error, ...)",
                "",
                MetricType::kCounter,
                {"kind"}};
  d[kLostRecords] = {"ithbat_joblog_lost_records_total",
                     "Capture records lost because the kernel ring buffer or the agent's queue was full",
                     "",
                     MetricType::kCounter,
                     {}};
  d[kLostBytes] = {"ithbat_joblog_lost_bytes_total",
                   "Output bytes lost with those records",
                   "bytes",
                   MetricType::kCounter,
                   {}};
  d[kTruncatedWrites] = {"ithbat_joblog_truncated_writes_total",
                         "Writes larger than the per-call capture bound (64 KiB); their rest was not copied",
                         "",
                         MetricType::kCounter,
                         {}};
  d[kTruncatedLines] = {"ithbat_joblog_truncated_lines_total",
                        "Lines longer than the line bound, cut there (the rest of the line dropped)",
                        "",
                        MetricType::kCounter,
                        {}};
  d[kReadErrors] = {"ithbat_joblog_read_errors_total",
                    "Written buffers the kernel program could not read (memory not resident)",
                    "",
                    MetricType::kCounter,
                    {}};
  d[kProcessesRefused] = {"ithbat_joblog_processes_refused_total",
                          "Processes not followed because the bound on followed processes was reached",
                          "",
                          MetricType::kCounter,
                          {}};
  d[kTracked] = {
      "ithbat_joblog_tracked_processes",
      "Processes whose output is followed now (tracked processes, their descendants and launchers)",
      "",
      MetricType::kGauge,
      {}};
  d[kOptedOut] = {"ithbat_joblog_opted_out_processes",
                  "Tracked processes not captured because they or their job or user opted out",
                  "",
                  MetricType::kGauge,
                  {}};
  d[kMode] = {"ithbat_joblog_capture_mode",
              "How job output is captured (info: always 1): mode ebpf, tail or off, and the attachment "
              "(fexit, tp_btf, raw_tp, tail; none when off)",
              "",
              MetricType::kGauge,
              {"mode", "attachment"}};
  d[kTbFiles] = {
      "ithbat_joblog_tensorboard_files", "TensorBoard event files followed now", "", MetricType::kGauge, {}};
  d[kTbScalars] = {"ithbat_joblog_tensorboard_scalars_total",
                   "Scalars read from TensorBoard event files",
                   "",
                   MetricType::kCounter,
                   {}};
  d[kTbErrors] = {"ithbat_joblog_tensorboard_errors_total",
                  "TensorBoard event files that could not be opened or read, or were found corrupt",
                  "",
                  MetricType::kCounter,
                  {}};
  d[kThinnedLines] = {
      "ithbat_joblog_lines_thinned_total",
      "Lines of per-step values (step, loss, training or serving metrics) not stored as events "
      "because their process printed such lines faster than the value-line rate",
      "",
      MetricType::kCounter,
      {}};
  return d;
}

// The kinds a line of per-step values yields; any other kind (an error, a checkpoint, an
// evaluation) makes the line always kept.
bool IsPerStepValue(EventKind k) {
  return k == EventKind::kStep || k == EventKind::kLoss || k == EventKind::kTrainMetric ||
         k == EventKind::kServingMetric;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool OptOutValue(const std::optional<std::string>& v) {
  if (!v) return false;
  std::string l = Lower(*v);
  return l == "off" || l == "0" || l == "false" || l == "no" || l == "disabled";
}

}  // namespace

struct JobLogCollector::TbFile {
  tensorboard::FileFollower follower;
  int32_t pid = -1;
  Identity identity;
  bool broken = false;  // error counted; counted again only after it recovers and breaks again
  bool alive = true;    // still open in a followed process at the last scan
};

Result<CaptureMode> ParseCaptureMode(std::string_view text) {
  if (text == "ebpf") return CaptureMode::kEbpf;
  if (text == "tail") return CaptureMode::kTail;
  if (text == "off") return CaptureMode::kOff;
  return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' is not ebpf, tail or off", text);
}

Result<std::vector<OptOut>> ParseOptOutList(std::string_view text) {
  std::vector<OptOut> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find_first_of(", ", i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view e = text.substr(i, j - i);
    i = j + 1;
    if (e.empty()) continue;
    size_t colon = e.find(':');
    std::string_view kind = e.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : e.substr(colon + 1);
    if (value.empty() || value.size() > 256 || (kind != "job" && kind != "user")) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "opt-out entry '{}' is not job:ID or user:NAME", e);
    }
    if (out.size() >= 4096) return MakeError(ErrorCode::kInvalidArgument, "more than 4096 opt-out entries");
    out.push_back(OptOut{kind == "job" ? OptOut::Kind::kJob : OptOut::Kind::kUser, std::string(value)});
  }
  return out;
}

Result<std::unique_ptr<JobLogCollector>> JobLogCollector::Create(JobLogOptions options) {
  StreamParserOptions po;
  po.format = options.format;
  if (auto p = StreamParser::Create(po); !p) return std::unexpected(p.error());
  return std::unique_ptr<JobLogCollector>(new JobLogCollector(std::move(options)));
}

JobLogCollector::JobLogCollector(JobLogOptions options)
    : Collector("joblog"),
      options_(std::move(options)),
      descs_(MakeDescs()),
      raw_ring_(options_.raw_ring_bytes) {
  if (options_.max_processes == 0) options_.max_processes = 1;
  if (options_.tensorboard_scan_ticks <= 0) options_.tensorboard_scan_ticks = 1;
}

JobLogCollector::~JobLogCollector() { StopImpl(); }

std::vector<MetricDesc> JobLogCollector::Describe() const { return descs_; }

std::string JobLogCollector::attachment() const {
  std::string out;
  for (const auto& s : sources_) {
    if (!out.empty()) out += '+';
    out += s->attachment();
  }
  return out;
}

CaptureCounters JobLogCollector::counters() const {
  CaptureCounters sum;
  for (const auto& s : sources_) sum += s->Counters();
  return sum;
}

Status JobLogCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  return Ok();
}

Status JobLogCollector::StartImpl() {
  auto log = agent::GetLogger("joblog");
  sources_.clear();
  kernel_source_ = nullptr;
  std::string degraded;
  if (options_.make_sources) {
    auto made = options_.make_sources();
    if (!made) return std::unexpected(made.error());
    sources_ = std::move(*made);
  } else {
    if (options_.mode == CaptureMode::kEbpf) {
      auto ebpf = EbpfCaptureSource::Create(options_.ebpf);
      if (ebpf) {
        sources_.push_back(std::move(*ebpf));
      } else {
        degraded = ebpf.error().message;
        log->warn("job output capture degraded: {}", degraded);
      }
    }
    if (options_.mode != CaptureMode::kOff && !options_.tail.empty()) {
      TailSourceOptions to = options_.tail_options;
      to.files = options_.tail;
      sources_.push_back(std::make_unique<TailCaptureSource>(std::move(to)));
    }
  }
  effective_mode_ = CaptureMode::kOff;
  for (const auto& s : sources_) {
    if (s->mode() == CaptureMode::kEbpf) {
      effective_mode_ = CaptureMode::kEbpf;
      if (!kernel_source_) kernel_source_ = s.get();
    } else if (effective_mode_ == CaptureMode::kOff) {
      effective_mode_ = s->mode();
    }
  }
  for (const auto& s : sources_) {
    if (auto st = s->Start(); !st) {
      degraded = fmt::format("{} source: {}", s->attachment(), st.error().message);
    }
  }
  SetDegraded(degraded);
  if (!sources_.empty())
    log->info("job output capture: {} ({})", CaptureModeName(effective_mode_), attachment());
  return Ok();
}

void JobLogCollector::StopImpl() {
  for (auto& s : sources_) s->Stop();
}

Identity JobLogCollector::IdentityFor(int32_t root, Role role, int32_t pid) const {
  Identity id;
  auto it = roots_.find(root);
  if (it != roots_.end()) id = it->second;
  if (role == Role::kLauncher) {
    Identity l;
    l.cluster = id.cluster;
    l.node = id.node;
    l.job = id.job;
    l.world_size = id.world_size;
    id = std::move(l);
  }
  id.pid = pid;
  return id;
}

JobLogCollector::Proc* JobLogCollector::AddProc(int32_t pid, int32_t root, Role role, CaptureSource* source) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) {
    if (procs_.size() >= options_.max_processes) {
      ++process_limit_total_;
      if (source && pid > 0) (void)source->Untrack(pid);
      return nullptr;
    }
    it = procs_.emplace(pid, Proc{}).first;
  }
  Proc& p = it->second;
  p.pid = pid;
  p.root = root;
  p.role = role;
  p.source = source;
  if (role != Role::kFile) p.identity = IdentityFor(root, role, pid);
  return &p;
}

void JobLogCollector::FreeProc(int32_t pid, TimeNs t) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  Proc& p = it->second;
  for (int s = 0; s < 2; ++s) {
    lines_.clear();
    p.streams[s].assembler.Flush(t, lines_);
    for (auto& l : lines_) HandleLine(p, s + 1, l);
  }
  procs_.erase(it);
}

bool JobLogCollector::OptedOut(int32_t pid, const Identity& identity) {
  bool truncated = false;
  auto env = identity::ReadAllowedEnviron(options_.proc_root / std::to_string(pid) / "environ", 256 * 1024,
                                          &truncated);
  if (env && OptOutValue(env->Get(identity::EnvKey::kIthbatJoblog))) return true;
  if (options_.opt_out.empty()) return false;
  std::optional<uint32_t> uid = proc::ProcessUid(options_.proc_root, pid);
  std::string user = uid ? proc::UserName(*uid) : "";
  for (const auto& o : options_.opt_out) {
    if (o.kind == OptOut::Kind::kJob && !identity.job.empty() && o.value == identity.job) return true;
    if (o.kind == OptOut::Kind::kUser && uid && (o.value == user || o.value == std::to_string(*uid)))
      return true;
  }
  return false;
}

void JobLogCollector::Reconcile() {
  std::vector<agent::TrackedProcesses::Process> snap = options_.tracked->Snapshot();
  std::map<int32_t, Identity> now;
  for (auto& p : snap) now.emplace(p.pid, std::move(p.identity));
  const TimeNs t = NowNs();

  // Gone: their state (and that of the descendants found through them) is freed. Launchers
  // stay until they exit themselves: the elastic agent prints its failure summary after the
  // workers are gone, which is when the GPU processes leave the tracked set.
  for (auto it = roots_.begin(); it != roots_.end();) {
    if (now.count(it->first)) {
      ++it;
      continue;
    }
    const int32_t root = it->first;
    std::vector<int32_t> drop;
    for (const auto& [pid, p] : procs_) {
      if (p.root == root && p.role != Role::kFile && p.role != Role::kLauncher) drop.push_back(pid);
    }
    for (int32_t pid : drop) {
      Proc& p = procs_.at(pid);
      if (p.source) (void)p.source->Untrack(pid);
      FreeProc(pid, t);
    }
    it = roots_.erase(it);
  }
  for (auto it = opted_out_.begin(); it != opted_out_.end();) {
    it = now.count(*it) ? std::next(it) : opted_out_.erase(it);
  }

  for (auto& [pid, identity] : now) {
    if (opted_out_.count(pid)) continue;
    auto known = roots_.find(pid);
    if (known != roots_.end()) {
      if (known->second == identity) continue;
      if (OptedOut(pid, identity)) {  // e.g. its job id became known and is on the list
        std::vector<int32_t> drop;
        for (const auto& [ppid, p] : procs_) {
          if (p.root == pid && p.role != Role::kFile) drop.push_back(ppid);
        }
        for (int32_t d : drop) {
          Proc& p = procs_.at(d);
          if (p.source) (void)p.source->Untrack(d);
          FreeProc(d, t);
        }
        roots_.erase(known);
        opted_out_.insert(pid);
        continue;
      }
      known->second = identity;  // the publisher resolved more (job, rank): follow it
      for (auto& [ppid, p] : procs_) {
        if (p.root == pid && p.role != Role::kFile) p.identity = IdentityFor(pid, p.role, ppid);
      }
      continue;
    }
    if (OptedOut(pid, identity)) {
      opted_out_.insert(pid);
      if (kernel_source_) (void)kernel_source_->Untrack(pid);
      FreeProc(pid, t);
      continue;
    }
    roots_.emplace(pid, identity);
    if (!kernel_source_) continue;  // nothing can capture processes (tail / off)
    if (!AddProc(pid, pid, Role::kRoot, kernel_source_)) continue;
    if (auto s = kernel_source_->Track(pid, pid, true); !s) {
      ReportError(s.error());
      continue;
    }
    if (!proc::ProcessExists(options_.proc_root, pid)) {
      // It exited before it was tracked: no exit record will remove the kernel entry.
      (void)kernel_source_->Untrack(pid);
      FreeProc(pid, t);
      continue;
    }
    // Children that existed before this process was first seen (the kernel tracks children
    // forked from now on).
    std::deque<int32_t> queue{pid};
    size_t found = 0;
    while (!queue.empty() && found < options_.max_children_scan) {
      int32_t parent = queue.front();
      queue.pop_front();
      for (int32_t child : proc::ReadChildren(options_.proc_root, parent, options_.max_children_scan - found)) {
        if (procs_.count(child) || now.count(child)) continue;  // another root follows it
        if (!AddProc(child, pid, Role::kDescendant, kernel_source_)) break;
        (void)kernel_source_->Track(child, pid, true);
        queue.push_back(child);
        ++found;
      }
    }
    // Launchers above it: their output carries the elastic agent's failure lines.
    int32_t cur = pid;
    for (int depth = 0; depth < options_.max_ancestor_depth; ++depth) {
      std::optional<int32_t> ppid = proc::ReadPpid(options_.proc_root, cur);
      if (!ppid || *ppid <= 1) break;
      cur = *ppid;
      if (procs_.count(cur) || now.count(cur)) continue;
      if (!proc::IsLauncher(proc::ReadArgv(options_.proc_root, cur))) continue;
      if (!AddProc(cur, pid, Role::kLauncher, kernel_source_)) break;
      (void)kernel_source_->Track(cur, pid, false);
    }
  }
  tb_rescan_ = true;
}

JobLogCollector::Proc* JobLogCollector::Adopt(int32_t pid, CaptureSource* source) {
  // Data from a process the kernel tracks but user space does not know (its fork record was
  // lost): find the followed ancestor it descends from.
  int32_t cur = pid;
  for (int depth = 0; depth < 16; ++depth) {
    std::optional<int32_t> ppid = proc::ReadPpid(options_.proc_root, cur);
    if (!ppid || *ppid <= 1) break;
    auto it = procs_.find(*ppid);
    if (it != procs_.end() && (it->second.role == Role::kRoot || it->second.role == Role::kDescendant)) {
      return AddProc(pid, it->second.root, Role::kDescendant, source);
    }
    cur = *ppid;
  }
  return nullptr;
}

void JobLogCollector::Handle(CaptureSource* source, CaptureRecord& r) {
  switch (r.type) {
    case CaptureRecord::Type::kFork: {
      auto parent = procs_.find(r.tid);
      int32_t root = parent != procs_.end() ? parent->second.root : r.root;
      if (!roots_.count(root) || procs_.count(r.pid)) {
        if (!roots_.count(root)) (void)source->Untrack(r.pid);
        return;
      }
      AddProc(r.pid, root, Role::kDescendant, source);
      return;
    }
    case CaptureRecord::Type::kExit:
      FreeProc(r.pid, r.time);
      return;
    case CaptureRecord::Type::kData:
      break;
  }
  if (r.stream != 1 && r.stream != 2) return;
  bytes_.value += r.data.size();
  auto it = procs_.find(r.pid);
  Proc* p = it != procs_.end() ? &it->second : nullptr;
  if (!p && r.pid < 0) {
    std::optional<StreamInfo> info = source->Stream(r.pid);
    if (!info) return;
    p = AddProc(r.pid, r.pid, Role::kFile, source);
    if (p) p->identity = info->identity;
  }
  if (!p && r.pid > 0) {
    p = Adopt(r.pid, source);
    if (!p) {
      (void)source->Untrack(r.pid);
      return;
    }
  }
  if (!p) return;
  FeedStream(*p, r.stream, r);
}

void JobLogCollector::FeedStream(Proc& p, int stream, const CaptureRecord& r) {
  if (r.gap_before) {
    // Bytes before this record were lost (a whole call) or came from another file: every
    // pending partial line of the process ends here, cut, whichever stream lost them.
    for (int k = 1; k <= 2; ++k) {
      StreamState& gs = p.streams[k - 1];
      lines_.clear();
      gs.assembler.Cut(r.time, lines_);  // truncated; the loss itself is counted by the source
      gs.next_offset = gs.call_total = 0;
      for (auto& l : lines_) HandleLine(p, k, l);
    }
  }
  StreamState& s = p.streams[stream - 1];
  // A missing chunk (lost in a full ring) would glue two unrelated pieces of text into one
  // line: end the pending line at the gap instead.
  const bool continues = r.offset > 0;
  const bool expected = continues && r.tid == s.tid && r.offset == s.next_offset;
  const bool previous_incomplete = s.next_offset < s.call_total;
  if ((continues && !expected) || (!continues && previous_incomplete)) {
    lines_.clear();
    s.assembler.Cut(r.time, lines_);
    for (auto& l : lines_) HandleLine(p, stream, l);
  }
  s.tid = r.tid;
  s.next_offset = r.offset + r.data.size();
  s.call_total = r.total_len;
  lines_.clear();
  const uint64_t truncated_before = s.assembler.truncated_lines();
  s.assembler.Feed(r.data, r.time, lines_);
  truncated_lines_total_ += s.assembler.truncated_lines() - truncated_before;
  // HandleLine may not touch lines_ (it is being iterated): it uses parsed_ only.
  for (auto& l : lines_) HandleLine(p, stream, l);
}

void JobLogCollector::HandleLine(Proc& p, int stream, AssembledLine& line) {
  line_counts_[stream - 1].value++;
  // Redacted once, before anything reads it: the ring keeps this text, the parsers quote and
  // cut it into events, so no excerpt or extracted field can hold half a secret.
  RedactSecrets(line.text);
  if (!line.progress) raw_ring_.AppendRedacted(RawLine{line.time, p.pid, stream, line.text});
  if (!p.parser) {
    StreamParserOptions po;
    po.format = options_.format;
    po.user_patterns = options_.patterns.get();
    if (p.pid > 0) po.command_line = proc::JoinArgv(proc::ReadArgv(options_.proc_root, p.pid));
    auto created = StreamParser::Create(std::move(po));
    if (!created) return;  // the format was checked at Create
    p.parser = std::make_unique<StreamParser>(std::move(*created));
  }
  parsed_.clear();
  p.parser->Parse(LineView{line.text, line.progress, stream}, parsed_);
  if (parsed_.empty() || !KeepValueLine(p, line.time)) return;
  const std::string_view framework = p.parser->framework();
  for (const auto& pe : parsed_) EmitParsed(p, stream, pe, line.time, framework);
}

bool JobLogCollector::KeepValueLine(Proc& p, TimeNs t) {
  for (const auto& pe : parsed_) {
    if (!IsPerStepValue(pe.kind)) return true;
    if (!std::isfinite(pe.value) && pe.kind != EventKind::kStep) return true;  // a NaN loss is news
  }
  const double rate = options_.value_lines_per_second;
  const double burst = std::max(1.0, options_.value_lines_burst);
  if (!(rate > 0)) return true;  // no bound configured
  if (p.value_tokens_at == kMinTime) {
    p.value_tokens = burst;
  } else if (t > p.value_tokens_at) {
    // Line times come from the kernel's clock and only move forward per process; one that goes
    // back (another stream's late record) refills nothing.
    p.value_tokens =
        std::min(burst, p.value_tokens + static_cast<double>(t - p.value_tokens_at) * 1e-9 * rate);
  }
  if (t > p.value_tokens_at) p.value_tokens_at = t;
  if (p.value_tokens >= 1.0) {
    p.value_tokens -= 1.0;
    return true;
  }
  thinned_lines_.value++;
  return false;
}

void JobLogCollector::EmitParsed(const Proc& p, int /*stream*/, const ParsedEvent& pe, TimeNs t,
                                 std::string_view framework) {
  Event e = StoredEvent(p.identity, pe, t, framework);
  events_[pe.kind].value++;
  if (pe.kind == EventKind::kStep && pe.step >= 0) {
    if (options_.logged_steps != nullptr) {
      options_.logged_steps->Add(e.identity.job, e.identity.rank, pe.step, t);
    }
    // Calibration: the span of one step (step_spans.h). A line written through a block-buffered
    // pipe arrives late, so both ends may lag (README).
    if (auto span = step_spans_.Next(e.identity.job, e.identity.rank, pe.step, pe.value, t)) {
      if (auto s = sink_->RecordStep(e.identity.job, e.identity.rank, *span); !s) ReportError(s.error());
    }
  }
  if (auto s = sink_->AppendEvent(std::move(e)); !s) ReportError(s.error());
}

void JobLogCollector::Sweep(TimeNs t) {
  // Processes whose exit record was lost (or that a file-less source cannot report): free
  // them once /proc no longer has them.
  std::vector<int32_t> gone;
  for (const auto& [pid, p] : procs_) {
    if (pid > 0 && !proc::ProcessExists(options_.proc_root, pid)) gone.push_back(pid);
  }
  for (int32_t pid : gone) {
    Proc& p = procs_.at(pid);
    if (p.source) (void)p.source->Untrack(pid);
    FreeProc(pid, t);
  }
}

void JobLogCollector::ScanTensorboard() {
  for (auto& [key, f] : tb_files_) f->alive = false;
  for (const auto& [pid, p] : procs_) {
    if (pid <= 0) continue;
    const auto fd_dir = options_.proc_root / std::to_string(pid) / "fd";
    for (const auto& ref : proc::FindTfeventsFiles(options_.proc_root, pid, 4096)) {
      // The job's own open file, through its fd: stat'ed (the link is followed by the kernel
      // to the file the process holds) to find it among those followed, opened only if new.
      struct stat st {};
      const auto link = fd_dir / std::to_string(ref.fd);
      if (::stat(link.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const std::pair<uint64_t, uint64_t> key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
      auto it = tb_files_.find(key);
      if (it != tb_files_.end()) {
        it->second->alive = true;
        continue;
      }
      if (tb_files_.size() >= options_.max_tensorboard_files) break;
      auto fd = proc::OpenProcessFile(options_.proc_root, pid, ref.fd);
      if (!fd) {
        if (fd.error().code != ErrorCode::kNotFound) ++tb_errors_total_;
        continue;
      }
      auto follower = tensorboard::FileFollower::FromFd(*fd, fmt::format("{} (pid {})", ref.path, pid));
      if (!follower) {
        ++tb_errors_total_;
        continue;
      }
      const std::pair<uint64_t, uint64_t> opened{static_cast<uint64_t>(follower->dev()),
                                                 static_cast<uint64_t>(follower->ino())};
      if (tb_files_.count(opened)) continue;
      auto f = std::make_unique<TbFile>(TbFile{std::move(*follower), pid, p.identity, false, true});
      tb_files_.emplace(opened, std::move(f));
    }
  }
}

void JobLogCollector::PollTensorboard() {
  std::vector<tensorboard::Scalar> scalars;
  size_t budget = options_.max_tensorboard_bytes_per_collect;
  for (auto it = tb_files_.begin(); it != tb_files_.end();) {
    TbFile& f = *it->second;
    scalars.clear();
    auto read = f.follower.Poll(scalars, std::max<size_t>(budget, 4096));
    if (!read) {
      if (!f.broken) ++tb_errors_total_;
      f.broken = true;
    } else {
      f.broken = false;
      budget -= std::min(budget, *read);
    }
    for (const auto& sc : scalars) {
      ++tb_scalars_total_;
      std::optional<ParsedEvent> pe = tensorboard::ScalarToEvent(sc);
      if (!pe) continue;
      Event e;
      // The file's wall time is the job's word: NaN, negative or absurd values (converting
      // them to an integer is undefined) fall back to the time it was read.
      constexpr double kMaxWallNs = static_cast<double>(int64_t{1} << 62);
      const double wall_ns = sc.wall_time * 1e9;
      e.time = std::isfinite(wall_ns) && wall_ns >= 0 && wall_ns < kMaxWallNs ? static_cast<TimeNs>(wall_ns)
                                                                              : NowNs();
      e.kind = pe->kind;
      e.identity = f.identity;
      if (pe->rank >= 0) e.identity.rank = pe->rank;
      e.source = "joblog";
      e.step = pe->step;
      e.value = pe->value;
      e.name = pe->name;
      e.text = pe->text;
      e.attrs = pe->attrs;
      for (auto& [k, v] : e.attrs) RedactSecrets(v);  // the tag is the job's text
      e.attrs.emplace_back("framework", "tensorboard");
      events_[pe->kind].value++;
      if (auto s = sink_->AppendEvent(std::move(e)); !s) ReportError(s.error());
    }
    // A file no followed process holds any more is read to its end once more, then dropped.
    if (!f.alive && (!read || *read == 0)) {
      it = tb_files_.erase(it);
    } else {
      ++it;
    }
  }
}

Status JobLogCollector::CollectImpl(TimeNs tick_time) {
  ++ticks_;
  // Records first: what processes wrote before they left the tracked set is still theirs.
  // In batches: the vector's capacity (kept between ticks) stays a batch's, not the largest
  // second a job ever printed (10,000 lines/s held ~1 MB of it for the agent's life).
  for (auto& src : sources_) {
    size_t left = options_.max_records_per_collect;
    while (left > 0) {
      records_.clear();
      const size_t n = src->Drain(records_, std::min(left, kDrainBatch));
      for (auto& r : records_) Handle(src.get(), r);
      if (n < kDrainBatch) break;
      left -= n;
    }
    records_.clear();
  }
  if (options_.tracked) {
    const uint64_t gen = options_.tracked->generation();
    if (first_reconcile_ || gen != seen_generation_) {
      first_reconcile_ = false;
      seen_generation_ = gen;
      Reconcile();
    }
  }
  if (ticks_ % 10 == 0) Sweep(tick_time);
  for (auto& src : sources_) src->Maintain();
  if (tb_rescan_ || ticks_ % static_cast<uint64_t>(options_.tensorboard_scan_ticks) == 0) {
    tb_rescan_ = false;
    ScanTensorboard();
  }
  PollTensorboard();
  WriteMetrics(tick_time);
  return Ok();
}

void JobLogCollector::Bump(Counter& c, const MetricDesc& desc, const LabelSet& labels, TimeNs t) {
  if (!c.ref) {
    auto ref = sink_->RegisterSeries(desc, labels);
    if (!ref) {
      ReportError(ref.error());
      return;
    }
    c.ref = *ref;
  }
  if (auto s = sink_->Append(*c.ref, t, static_cast<double>(c.value)); !s) ReportError(s.error());
}

void JobLogCollector::WriteMetrics(TimeNs t) {
  static const LabelSet kNone;
  const CaptureCounters cc = counters();
  lost_records_.value = cc.lost_records;
  lost_bytes_.value = cc.lost_bytes;
  truncated_writes_.value = cc.truncated_writes;
  read_errors_.value = cc.read_errors;
  truncated_lines_.value = truncated_lines_total_;
  process_limit_.value = process_limit_total_ + cc.track_full;
  tb_errors_.value = tb_errors_total_;
  tb_scalars_.value = tb_scalars_total_;

  for (int s = 0; s < 2; ++s) {
    if (!line_counts_[s].ref) {
      auto labels = LabelSet::From({{"stream", s == 0 ? "stdout" : "stderr"}});
      if (!labels) continue;
      auto ref = sink_->RegisterSeries(descs_[kLines], *labels);
      if (!ref) {
        ReportError(ref.error());
        continue;
      }
      line_counts_[s].ref = *ref;
    }
    Bump(line_counts_[s], descs_[kLines], kNone, t);
  }
  Bump(bytes_, descs_[kBytes], kNone, t);
  for (auto& [kind, c] : events_) {
    if (!c.ref) {
      auto labels = LabelSet::From({{"kind", EventKindName(kind)}});
      if (!labels) continue;
      auto ref = sink_->RegisterSeries(descs_[kEvents], *labels);
      if (!ref) {
        ReportError(ref.error());
        continue;
      }
      c.ref = *ref;
    }
    Bump(c, descs_[kEvents], kNone, t);
  }
  Bump(lost_records_, descs_[kLostRecords], kNone, t);
  Bump(lost_bytes_, descs_[kLostBytes], kNone, t);
  Bump(truncated_writes_, descs_[kTruncatedWrites], kNone, t);
  Bump(truncated_lines_, descs_[kTruncatedLines], kNone, t);
  Bump(read_errors_, descs_[kReadErrors], kNone, t);
  Bump(process_limit_, descs_[kProcessesRefused], kNone, t);
  Bump(tb_scalars_, descs_[kTbScalars], kNone, t);
  Bump(tb_errors_, descs_[kTbErrors], kNone, t);
  Bump(thinned_lines_, descs_[kThinnedLines], kNone, t);

  auto gauge = [&](std::optional<SeriesRef>& ref, size_t desc, double value) {
    if (!ref) {
      auto r = sink_->RegisterSeries(descs_[desc], kNone);
      if (!r) {
        ReportError(r.error());
        return;
      }
      ref = *r;
    }
    if (auto s = sink_->Append(*ref, t, value); !s) ReportError(s.error());
  };
  gauge(tracked_ref_, kTracked,
        static_cast<double>(
            std::count_if(procs_.begin(), procs_.end(), [](const auto& kv) { return kv.first > 0; })));
  gauge(opted_out_ref_, kOptedOut, static_cast<double>(opted_out_.size()));
  gauge(tb_files_ref_, kTbFiles, static_cast<double>(tb_files_.size()));

  std::string attach = attachment();
  if (attach.empty()) attach = "none";
  const std::string mode_key = std::string(CaptureModeName(effective_mode_)) + "/" + attach;
  auto mit = mode_refs_.find(mode_key);
  if (mit == mode_refs_.end()) {
    auto labels = LabelSet::From({{"mode", CaptureModeName(effective_mode_)}, {"attachment", attach}});
    if (!labels) return;
    auto ref = sink_->RegisterSeries(descs_[kMode], *labels);
    if (!ref) {
      ReportError(ref.error());
      return;
    }
    mit = mode_refs_.emplace(mode_key, *ref).first;
  }
  if (auto s = sink_->Append(mit->second, t, 1.0); !s) ReportError(s.error());
}

}  // namespace ithbat::collect::joblog
