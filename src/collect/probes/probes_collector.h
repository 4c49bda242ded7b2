#pragma once
// The CUDA/NCCL probes collector ("probes"): uprobes on the libcuda/libnccl that tracked
// processes map, aggregated in the kernel (bpf/cuda_probes.bpf.c), read each tick as series
// tagged with the process's identity (job, rank, pid, gpu). See README.md in this folder for
// what each signal means (host-side enqueue and blocking, never GPU execution time).
//
// Whom it follows: agent::TrackedProcesses (the GPU processes). A pid is resolved and attached
// the first tick it is seen; a tracked pid whose maps lack a library is re-scanned every
// `rescan_ticks` ticks (at most `max_rescans_per_tick` pids per tick, round-robin), so a
// library loaded late is attached within a few ticks without polling every pid every tick.
// A pid is detached when it leaves the tracked set or its /proc entry disappears.
//
// Security: the agent runs as root and dlopens only the host's driver library (TrustedHostPath);
// every other file (a container's libcuda or libnccl) is resolved from its ELF symbols only.
//
// Threads: the LinkCloser's (up to kCloseThreads, started by the first duty-cycle detaches; they
// only close link fds); everything else, the ring buffer included, runs in Collect. Lifecycle: Create → Init →
// Start (loads the BPF program; a load failure is SetDegraded with libbpf's reason and the
// collector keeps running with nothing attached) → Collect… → Stop (detaches everything).
// options.tracked must outlive the collector.
//
// Overhead budget (README "Overhead budget"): each (process, library) attachment is two, the
// launch probes and the rare ones. The rare ones stay attached. A process whose launch rate times
// the cost of one probe hit exceeds `budget` has its launch probes attached only for a slice of
// each period (duty cycle, state `sampled`, launch counts extrapolated); detaching is handed to
// a LinkCloser thread (a close waits for an RCU grace period), so a toggle does not stall the
// tick. The cost per hit is measured at Start on the agent's own binary (ProbeBpf::MeasureHitCost)
// and again every `recalibrate_every`, unless `cost_ns` is given; the duty cycle aims at
// budget x margin.
//
// Records: the ring buffer's per-call records (collectives, communicator inits, syncs) go to
// RecordAnalysis — step boundaries inferred per process (recorded in the store's step timeline
// once logged steps number them), the node's ranks' arrival order at shared collectives, NCCL
// calls by size bucket. Host scheduling and file I/O are collect/sched_io; GPU-side collective
// times from the opt-in profiler plugin are collect/nccl_profiler.
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "agent/collector.h"
#include "agent/logged_steps.h"
#include "agent/process_series.h"
#include "agent/tracked_processes.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/record_analysis.h"
#include "collect/probes/proc_maps.h"
#include "collect/probes/target_resolver.h"
#include "core/identity.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect::probes {

struct ProbesOptions {
  agent::TrackedProcesses* tracked = nullptr;                  // whom to follow (required)
  // Steps the jobs logged (collect/joblog publishes them): they number the steps inferred from
  // the records. Optional; must outlive the collector.
  agent::LoggedSteps* logged_steps = nullptr;
  std::string procfs = "/proc";                                // the agent's real /proc (pids it sees)
  std::vector<std::string> driver_dirs = DefaultDriverDirs();  // where a trusted host libcuda may live
  int rescan_ticks = 5;
  size_t max_rescans_per_tick = 16;
  size_t max_processes = 512;         // attached at once; more are reported, not attached
  size_t records_per_process = 4096;  // recent collective records kept per process
  // Overhead budget: the time the launch probes may add to a process, as a fraction of wall
  // time (0.01 = 1%). <= 0: no duty cycle (launch probes always attached).
  double budget = 0.01;
  double cost_ns = 0;  // cost of one launch-probe hit; 0 = measure at Start (self-calibration)
  // The duty cycle aims at budget x margin (clamped to [0.1, 1]), not at the budget itself: the
  // calibration runs a trivial function in a tight loop, and a paced job's real launch hit costs
  // more (1.05-1.65x the calibrated cost over a period in the bench here, README "Overhead
  // budget"); the cost also drifts with the host's load between calibrations.
  double margin = 0.6;
  // Self-calibration only: re-measured every this long (a calibration holds the tick ~0.1-0.2 s:
  // 40k calls, one attach, one close); a failed or implausible one keeps the cost in use. <= 0:
  // at Start only.
  TimeNs recalibrate_every = 10 * 60 * kNsPerSec;
  // Replaces ProbeBpf::MeasureHitCost (tests inject results); null = the real measurement.
  std::function<Result<HitCost>(ProbeBpf&)> calibrate;
  TimeNs min_slice = kNsPerSec;        // shortest on or off slice (less 5% tick slack; toggles as far apart)
  TimeNs max_period = 60 * kNsPerSec;  // longest on+off period (the lowest on-fraction is min/max)
  // Back to exact (always attached) when the measured added fraction falls under
  // budget * exit_ratio (hysteresis: entering takes added > budget).
  double exit_ratio = 0.5;
};

// One NCCL collective as the host enqueued it (a ring-buffer record, clock converted).
struct CollectiveRecord {
  TimeNs time = 0;  // CLOCK_REALTIME of the API call's entry (host enqueue)
  uint16_t probe = 0;
  std::string_view op;  // "all_reduce", ... (static storage)
  uint64_t comm = 0;    // the communicator's address in the process
  uint64_t seq = 0;     // per-communicator number since attachment, 1-based
  uint64_t count = 0;
  uint64_t bytes = 0;
  int32_t dtype = -1;
  int32_t nranks = -1;  // -1: the communicator's init was not seen
  int32_t rank = -1;
  uint32_t group_depth = 0;
  uint32_t tid = 0;
};

class ProbesCollector : public agent::Collector {
 public:
  static Result<std::unique_ptr<ProbesCollector>> Create(ProbesOptions options);
  ~ProbesCollector() override;

  std::vector<MetricDesc> Describe() const override;

  struct LibraryStatus {
    LibraryKind kind = LibraryKind::kCuda;
    std::string path;  // as the process sees it
    size_t targets = 0;
    size_t links = 0;
    size_t failed = 0;
    std::vector<std::string> missing_core;
    bool procaddr_used = false;
    size_t procaddr_internal = 0;
  };
  struct ProcessStatus {
    int32_t pid = -1;
    std::string state;  // "exact" | "sampled" | "degraded" | "pending" (no library mapped yet)
    std::vector<LibraryStatus> libraries;
    // Duty cycle: the on-fraction (1 = exact), the current slices, toggles so far, whether the
    // launch probes are attached now.
    double on_fraction = 1;
    TimeNs on_ns = 0, off_ns = 0;
    uint64_t toggles = 0;
    bool launch_attached = true;
    bool closing = false;  // a close of the launch probes has not finished
    // Launch rate x cost per hit when fully attached (the rate of the last complete on-slice,
    // or of the exact-mode window that entered `sampled`).
    double added = 0;
    // Attached time / wall time of the last complete period (attach to close start, then to the
    // next attach); 0 before the first. The scheduled on_fraction is what the slices aim at; this
    // is what they got (toggles at ticks, closes that started late).
    double on_fraction_achieved = 0;
    TimeNs detached_ns = 0;  // launch probes not firing, summed: the time extrapolated
    // Per launch probe: the kernel's count (attached time only), what is reported (that plus
    // the off time x rate), and the rate (per second) the off time is extrapolated at.
    struct Launch {
      uint16_t probe = 0;
      std::string_view api;
      uint64_t counted = 0;
      double reported = 0;
      double rate_per_s = 0;
    };
    std::vector<Launch> launch;
  };
  // Thread-safe snapshots (tests, the API later).
  std::vector<ProcessStatus> Processes() const;
  // Cost per launch-probe hit in use (ns): the option, else the latest plausible measurement, else
  // kFallbackCostNs (0 before Start or when the BPF program did not load).
  double hit_cost_ns() const { return cost_ns_.load(); }
  // The measurement behind hit_cost_ns (nullopt when `cost_ns` was given or none was plausible).
  std::optional<HitCost> calibration() const;
  // Below this a measured cost per hit is taken for a failed measurement (a trap costs ~0.7 us
  // on current hosts): the fallback is used and the error reported.
  static constexpr double kMinCalibratedCostNs = 100;
  static constexpr double kFallbackCostNs = 5000;
  std::vector<CollectiveRecord> RecentCollectives(int32_t pid) const;
  size_t open_links() const;

 protected:
  Status InitImpl(Sink& sink) override;
  Status StartImpl() override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  explicit ProbesCollector(ProbesOptions options);

  struct LibKey {
    uint32_t dev_major, dev_minor;
    uint64_t inode;
    bool trusted;
    auto operator<=>(const LibKey&) const = default;
  };
  struct AttachedLib {
    MappedLibrary lib;
    std::unique_ptr<Attachment> attachment;
    std::shared_ptr<const ResolvedLibrary> resolved;
    std::unique_ptr<Attachment> launch;  // the launch probes; null while duty-cycled off
    std::vector<Target> launch_targets;
    // The file the first attach used, held open (O_PATH) and re-attached through
    // <procfs>/self/fd/N: a re-attach never resolves a path the process can change again.
    std::shared_ptr<const PinnedFile> file;
  };
  // One launch probe's counters: the kernel's (raw, only while attached) and what is reported
  // (raw plus the extrapolated off slices).
  struct LaunchSeries {
    uint64_t raw_count = 0, raw_sum = 0;      // at the last read
    uint64_t slice_count = 0, slice_sum = 0;  // raw at the start of the current on-slice
    double rate_count = 0, rate_sum = 0;      // per ns, over the last complete on-slice
    double rep_count = 0, rep_sum = 0;
  };
  // Duty-cycle state of a process (CLOCK_MONOTONIC ns).
  struct Duty {
    bool sampled = false;
    bool launch_on = true;    // launch links attached (not handed to the closer)
    bool return_exact = false;  // the rate fell: attach for good at the next allowed toggle
    bool slice_open = false;  // an on-slice whose rate is not taken yet
    TimeNs on_since = 0;      // start of the current/last on-slice
    TimeNs off_since = 0;     // when the last detach began (the probes stopped firing)
    TimeNs last_toggle = 0;
    TimeNs last_read = 0;
    TimeNs window_start = 0;  // exact mode: rate window
    double window_raw = 0;
    std::map<uint16_t, std::pair<uint64_t, uint64_t>> window_keys;
    double on_fraction = 1;
    TimeNs on_ns = 0, off_ns = 0;
    double added = 0;  // measured launch rate x cost (fraction of wall time) when fully attached
    double achieved = 0;  // attached / wall time of the last complete period (0: none yet)
    TimeNs detached_ns = 0;
    TimeNs attached_ns = 0;  // launch probes attached (launch and grid counts exact), summed over reads
    uint64_t toggles = 0;
    std::vector<std::shared_ptr<const LinkCloser::Ticket>> closing;
  };
  struct Proc {
    int32_t pid = -1;
    Identity identity;
    std::vector<AttachedLib> libs;
    std::string degraded;  // why attachment is incomplete ("" = exact)
    uint64_t last_scan_tick = 0;
    bool scanned = false;
    std::deque<CollectiveRecord> records;
    agent::ProcessSeries series;
    Duty duty;
    std::map<uint16_t, LaunchSeries> launch;  // by probe id
    uint64_t logged_cursor = 0;  // LoggedSteps marks of its job already fed to step inference
  };

  void SyncTracked();
  void ScanProcess(Proc& p);
  void Detach(int32_t pid);
  // Resolves lib's targets; *file: the pinned file they were read from (attach through it).
  Result<std::shared_ptr<const ResolvedLibrary>> Resolve(Proc& p, const MappedLibrary& lib,
                                                         std::shared_ptr<const PinnedFile>* file);
  void AppendProcess(Proc& p, TimeNs t, const std::vector<ProbeBpf::StatEntry>& stats);
  void UpdateLaunchSeries(Proc& p, TimeNs now, const std::vector<ProbeBpf::StatEntry>& stats);
  void DutyCycle(Proc& p, TimeNs now);
  void Schedule(Duty& d) const;
  void FitOffSlice(Duty& d, TimeNs on_len) const;
  void AttachLaunch(Proc& p);
  void DetachLaunch(Proc& p, TimeNs now);
  // A cost per hit from a calibration result: a plausible one is taken, else `keep` (or the
  // fallback when keep <= 0) and the error reported.
  void Calibrate(double keep);
  // Opens `path` (O_PATH) and checks it is `lib`'s file; shared by every process mapping it.
  Result<std::shared_ptr<const PinnedFile>> Pin(const std::string& path, const MappedLibrary& lib);
  // The added fraction the duty cycle aims at: budget x margin.
  double Aim() const;
  void Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value, TimeNs t,
           double v);
  // The same with a second label (label2=value2).
  void Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value,
           std::string_view label2, std::string_view value2, TimeNs t, double v);
  // Step inference and arrival order from this tick's records: steps to the store's step
  // timeline (once numbered by logged steps), summaries as series.
  void AppendRecordAnalysis(Proc& p, TimeNs t);

  ProbesOptions options_;
  Sink* sink_ = nullptr;
  std::unique_ptr<ProbeBpf> bpf_;
  static constexpr size_t kCloseThreads = 4;
  LinkCloser closer_{kCloseThreads};  // after bpf_ in destruction order: destroyed first
  std::atomic<double> cost_ns_{0};
  std::optional<HitCost> calibration_;  // guarded by mu_
  TimeNs calibrated_at_ = 0;            // CLOCK_MONOTONIC of the last calibration attempt
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::weak_ptr<const PinnedFile>> pinned_;
  std::string load_error_;
  uint64_t tick_ = 0;
  uint64_t seen_generation_ = UINT64_MAX;
  size_t rescan_cursor_ = 0;
  int64_t mono_to_real_ = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC, refreshed each tick
  std::map<LibKey, std::shared_ptr<const ResolvedLibrary>> resolved_cache_;
  RecordAnalysis analysis_;  // guarded by mu_ like procs_
  // Files whose ELF was rejected (malformed, over a bound): not re-read at every rescan of every
  // process mapping them. Bounded (kMaxFailedCache, cleared when full); transient errors
  // (cannot open/read) are not cached.
  std::map<LibKey, Error> failed_cache_;
  mutable std::mutex mu_;  // guards procs_ for the snapshot accessors
  std::map<int32_t, Proc> procs_;
  agent::ProcessSeries global_series_;  // node-wide series (no identity labels)
};

}  // namespace ithbat::collect::probes
