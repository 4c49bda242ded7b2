#pragma once
// The job-output collector ("joblog"): what tracked processes print, turned into events.
//
// Whom it follows: the processes TrackedProcesses holds (the GPU processes the GPU collector
// publishes, with their identity), plus
//   * their descendants: children inherit tracking in the kernel at fork (a data-loader worker,
//     a `sh -c` wrapper), and children that existed before the process was first seen are
//     found once through /proc/<pid>/task/*/children;
//   * their ancestors whose command line names a launcher (torchrun, python -m
//     torch.distributed.run/launch, deepspeed, accelerate), whose own output carries the
//     elastic agent's failure lines; a launcher's other children are not inherited.
// Identity: a descendant carries its tracked root's identity (job, rank, ...) with its own pid;
// a launcher carries the job only (no rank, no GPU). A rank prefix in a line ("[rank3]:")
// overrides the rank.
//
// Per process: one StreamParser (parser.h; the command line is its hint) shared by stdout and
// stderr, and one LineAssembler per stream. Each parsed event becomes a core Event (time = the
// write time of the line, source "joblog", attrs + framework) in the sink; kStep events also
// calibrate the step timeline (Sink::RecordStep): one step's span ends at the line's time and
// lasts (t - t_prev) / (step - step_prev) from the previous logged step of that rank (every Nth
// step logged: the interval shared out); lines sharing the previous one's time (one buffered
// write) are not calibrated from it. Attribute values and text are redacted like raw lines,
// which (redacted) go into a RawRing kept on the node.
//
// Opt-out: a tracked process whose environment has ITHBAT_JOBLOG=off (also 0/false/no), or
// whose job id or user is in options.opt_out ("job:ID", "user:NAME" or "user:UID"), is not
// captured; its kernel entry is removed and it is counted in ithbat_joblog_opted_out_processes.
//
// TensorBoard: events.out.tfevents.* files among the open fds of followed processes are found
// when the tracked set changes and every tensorboard_scan_ticks ticks, opened through the
// process's fd (/proc/<pid>/fd/<N>, regular files only), known by (dev, inode) and followed
// (tensorboard.h); their scalars become the same events as log lines, at the scalar's wall time
// (the time read when the file's is not a usable number).
//
// Threads: the runtime's worker calls Collect; the eBPF source has one thread of its own that
// blocks on the ring buffer (ebpf_source.h). Lifecycle: Create → Init → Start (makes the
// sources: an eBPF load failure is SetDegraded with its reason, the agent keeps running) →
// Collect… → Stop. options.tracked must outlive the collector.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/collector.h"
#include "agent/logged_steps.h"
#include "agent/tracked_processes.h"
#include "collect/joblog/capture_source.h"
#include "collect/joblog/ebpf_source.h"
#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/step_spans.h"
#include "collect/joblog/stored_event.h"
#include "collect/joblog/tail_source.h"
#include "collect/joblog/text/line_assembler.h"
#include "collect/joblog/text/raw_ring.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"

namespace ithbat::collect::joblog {

namespace tensorboard {
class FileFollower;
}

// "ebpf", "tail", "off". Errors: kInvalidArgument.
Result<CaptureMode> ParseCaptureMode(std::string_view text);

// One entry of the opt-out list.
struct OptOut {
  enum class Kind : uint8_t { kJob, kUser };
  Kind kind = Kind::kJob;
  std::string value;  // job id, user name or numeric uid
  friend bool operator==(const OptOut&, const OptOut&) = default;
};
// "job:1234,user:alice,user:1001" (commas or spaces). Errors: kInvalidArgument naming the entry.
Result<std::vector<OptOut>> ParseOptOutList(std::string_view text);

struct JobLogOptions {
  CaptureMode mode = CaptureMode::kEbpf;
  std::vector<TailFile> tail;                    // followed files (with kTail; with kEbpf too, when given)
  std::string format = "auto";                   // StreamParserOptions::format
  std::shared_ptr<const UserPatterns> patterns;  // may be null
  std::vector<OptOut> opt_out;
  agent::TrackedProcesses* tracked = nullptr;  // whom to follow; may be null (tail only)
  // Where logged step numbers are shared with the step inference of collect/probes (may be
  // null). Must outlive the collector.
  agent::LoggedSteps* logged_steps = nullptr;
  std::filesystem::path proc_root = "/proc";   // the agent's real /proc; tests only change it
  EbpfSourceOptions ebpf;
  TailSourceOptions tail_options;  // `files` is filled from `tail`

  size_t max_processes = 1024;     // followed processes (roots, descendants, launchers)
  size_t max_children_scan = 256;  // existing descendants found per root at first sight
  int max_ancestor_depth = 8;      // parents walked looking for a launcher
  size_t max_records_per_collect = 200'000;
  size_t raw_ring_bytes = 1u << 20;
  // Per process, lines whose values are per-step numbers (step, loss, training and serving
  // metrics) are stored as events at this sustained rate at most, beyond a burst; the lines
  // over it are counted (ithbat_joblog_lines_thinned_total), still redacted and kept in the raw
  // ring, and a line with a non-finite value or any other kind of event is always stored.
  // Why: a job printing every micro-step (or a flood of its own) would otherwise fill the
  // store's memory with events and push other jobs' out (README, "Lines, events, calibration").
  double value_lines_per_second = 20;
  double value_lines_burst = 64;
  int tensorboard_scan_ticks = 10;
  size_t max_tensorboard_files = 64;
  size_t max_tensorboard_bytes_per_collect = 4u << 20;

  // Tests: the sources to use instead of the ones `mode` makes (called at Start).
  std::function<Result<std::vector<std::unique_ptr<CaptureSource>>>()> make_sources;
};

class JobLogCollector final : public agent::Collector {
 public:
  // Errors: kInvalidArgument for an unknown format.
  static Result<std::unique_ptr<JobLogCollector>> Create(JobLogOptions options);
  ~JobLogCollector() override;

  std::vector<MetricDesc> Describe() const override;

  // The redacted raw lines (kept on the node; nothing serves them yet).
  const RawRing& raw_ring() const { return raw_ring_; }
  // What is running: ebpf when the eBPF source loaded, else tail when files are followed, else off.
  CaptureMode effective_mode() const { return effective_mode_; }
  std::string attachment() const;  // "tp_btf", "tail", ... ("" when off)
  // Processes with per-process state now (for tests: freed on exit).
  size_t followed_processes() const { return procs_.size(); }
  bool follows(int32_t pid) const { return procs_.count(pid) > 0; }
  size_t opted_out_processes() const { return opted_out_.size(); }
  CaptureCounters counters() const;  // summed over the sources
  // The first source (tests reach the eBPF source through it).
  CaptureSource* source() const { return sources_.empty() ? nullptr : sources_.front().get(); }

 protected:
  Status InitImpl(Sink& sink) override;
  Status StartImpl() override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  enum class Role : uint8_t { kRoot, kDescendant, kLauncher, kFile };
  struct StreamState {
    LineAssembler assembler{kMaxLineBytes};
    int32_t tid = -1;          // the writer of the call in progress
    uint64_t next_offset = 0;  // of the next chunk of that call
    uint64_t call_total = 0;
  };
  struct Proc {
    int32_t pid = -1;
    int32_t root = -1;
    Role role = Role::kDescendant;
    Identity identity;
    std::unique_ptr<StreamParser> parser;  // created at the first line
    StreamState streams[2];
    CaptureSource* source = nullptr;  // the one it was tracked in (Untrack)
    // Token bucket of value lines (JobLogOptions::value_lines_per_second): tokens left and the
    // line time they were counted at (kMinTime: full, not started).
    double value_tokens = 0;
    TimeNs value_tokens_at = kMinTime;
  };
  struct Counter {
    uint64_t value = 0;
    std::optional<SeriesRef> ref;
  };
  struct TbFile;

  explicit JobLogCollector(JobLogOptions options);

  void Reconcile();
  bool OptedOut(int32_t pid, const Identity& identity);
  Proc* AddProc(int32_t pid, int32_t root, Role role, CaptureSource* source);
  void FreeProc(int32_t pid, TimeNs t);
  Proc* Adopt(int32_t pid, CaptureSource* source);
  void Handle(CaptureSource* source, CaptureRecord& r);
  void FeedStream(Proc& p, int stream, const CaptureRecord& r);
  void HandleLine(Proc& p, int stream, AssembledLine& line);
  void EmitParsed(const Proc& p, int stream, const ParsedEvent& pe, TimeNs t, std::string_view framework);
  // Whether the line's parsed events (in parsed_) go to the store: false when they are only
  // per-step values and the process is over its value-line rate (the bucket takes a token).
  bool KeepValueLine(Proc& p, TimeNs t);
  void Sweep(TimeNs t);
  void ScanTensorboard();
  void PollTensorboard();
  void WriteMetrics(TimeNs t);
  void Bump(Counter& c, const MetricDesc& desc, const LabelSet& labels, TimeNs t);
  Identity IdentityFor(int32_t root, Role role, int32_t pid) const;

  JobLogOptions options_;
  Sink* sink_ = nullptr;
  std::vector<MetricDesc> descs_;
  std::vector<std::unique_ptr<CaptureSource>> sources_;
  CaptureSource* kernel_source_ = nullptr;  // the one that tracks pids (eBPF), if any
  CaptureMode effective_mode_ = CaptureMode::kOff;
  RawRing raw_ring_;

  uint64_t seen_generation_ = 0;
  bool first_reconcile_ = true;
  std::map<int32_t, Identity> roots_;  // tracked roots now (not opted out)
  std::set<int32_t> opted_out_;
  std::unordered_map<int32_t, Proc> procs_;
  StepSpans step_spans_;  // each rank's last logged step
  std::vector<CaptureRecord> records_;
  std::vector<AssembledLine> lines_;
  std::vector<ParsedEvent> parsed_;
  uint64_t ticks_ = 0;
  bool tb_rescan_ = true;
  // Keyed by (st_dev, st_ino) of the file the job holds, never by its path: a path names
  // different files in different mount namespaces (containers), and the job controls it.
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<TbFile>> tb_files_;

  // Self-metrics (totals since Start).
  Counter line_counts_[2];
  Counter bytes_;
  std::map<EventKind, Counter> events_;
  Counter lost_records_, lost_bytes_, truncated_writes_, truncated_lines_, read_errors_;
  Counter process_limit_, tb_errors_, tb_scalars_, thinned_lines_;
  std::optional<SeriesRef> tracked_ref_, opted_out_ref_, tb_files_ref_;
  std::map<std::string, SeriesRef> mode_refs_;
  uint64_t truncated_lines_total_ = 0;
  uint64_t process_limit_total_ = 0;
  uint64_t tb_errors_total_ = 0;
  uint64_t tb_scalars_total_ = 0;
};

}  // namespace ithbat::collect::joblog
