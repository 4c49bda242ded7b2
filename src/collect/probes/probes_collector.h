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
// Threads: none of its own; the ring buffer is drained in Collect. Lifecycle: Create → Init →
// Start (loads the BPF program; a load failure is SetDegraded with libbpf's reason and the
// collector keeps running with nothing attached) → Collect… → Stop (detaches everything).
// options.tracked must outlive the collector.
//
// TODO(issue 4, later sessions): the overhead budget (duty-cycling launch probes, `sampled`
// state), step inference from collective patterns, sched/IO probes, the NCCL profiler plugin.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "agent/collector.h"
#include "agent/tracked_processes.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/proc_maps.h"
#include "collect/probes/target_resolver.h"
#include "core/identity.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"

namespace ithbat::collect::probes {

struct ProbesOptions {
  agent::TrackedProcesses* tracked = nullptr;                  // whom to follow (required)
  std::string procfs = "/proc";                                // the agent's real /proc (pids it sees)
  std::vector<std::string> driver_dirs = DefaultDriverDirs();  // where a trusted host libcuda may live
  int rescan_ticks = 5;
  size_t max_rescans_per_tick = 16;
  size_t max_processes = 512;         // attached at once; more are reported, not attached
  size_t records_per_process = 4096;  // recent collective records kept per process
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
    std::string state;  // "exact" | "degraded" | "pending" (no library mapped yet)
    std::vector<LibraryStatus> libraries;
  };
  // Thread-safe snapshots (tests, the API later).
  std::vector<ProcessStatus> Processes() const;
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
  };
  struct Proc {
    int32_t pid = -1;
    Identity identity;
    std::vector<AttachedLib> libs;
    std::string degraded;  // why attachment is incomplete ("" = exact)
    uint64_t last_scan_tick = 0;
    bool scanned = false;
    std::deque<CollectiveRecord> records;
    std::map<std::tuple<std::string, std::string, std::string>, SeriesRef> refs;  // (metric, label, value)
  };

  void SyncTracked();
  void ScanProcess(Proc& p);
  void Detach(int32_t pid);
  Result<std::shared_ptr<const ResolvedLibrary>> Resolve(Proc& p, const MappedLibrary& lib,
                                                         std::string* path);
  void AppendProcess(Proc& p, TimeNs t, const std::vector<ProbeBpf::StatEntry>& stats);
  void Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value, TimeNs t,
           double v);

  ProbesOptions options_;
  Sink* sink_ = nullptr;
  std::unique_ptr<ProbeBpf> bpf_;
  std::string load_error_;
  uint64_t tick_ = 0;
  uint64_t seen_generation_ = UINT64_MAX;
  size_t rescan_cursor_ = 0;
  int64_t mono_to_real_ = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC, refreshed each tick
  std::map<LibKey, std::shared_ptr<const ResolvedLibrary>> resolved_cache_;
  // Files whose ELF was rejected (malformed, over a bound): not re-read at every rescan of every
  // process mapping them. Bounded (kMaxFailedCache, cleared when full); transient errors
  // (cannot open/read) are not cached.
  std::map<LibKey, Error> failed_cache_;
  mutable std::mutex mu_;  // guards procs_ for the snapshot accessors
  std::map<int32_t, Proc> procs_;
  std::map<std::string, SeriesRef> global_refs_;
};

}  // namespace ithbat::collect::probes
