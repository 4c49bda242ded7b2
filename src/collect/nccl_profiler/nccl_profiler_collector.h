#pragma once
// The NCCL profiler-plugin collector ("nccl_profiler"): for every tracked process that runs
// libnccl-profiler-ithbat.so (opt-in, NCCL_PROFILER_PLUGIN), reads the plugin's shared-memory
// ring each tick and publishes GPU-timed collective metrics tagged with the process's identity.
// See README.md in this folder for what each series means.
//
// Whom it follows: agent::TrackedProcesses. A tracked pid's /proc/<pid>/maps is scanned for a
// ring (ithbat-ncclprof-<pid>.ring, usually " (deleted)") the first tick it is seen and then
// every `rescan_ticks` ticks (at most `max_scans_per_tick` per tick) until one is found; the
// file is opened through /proc/<pid>/map_files (containers included) and read with pread
// (ring_reader.h). A bad ring is SetDegraded with the pid and the reason; the others go on, and
// the process is scanned again `bad_rescan_ticks` later. Only a ring named with the process's own
// namespace pid is read (a forked child also maps its parent's), and a ring another tracked
// process already reads (same dev, inode) is skipped. Of several candidate rings the newest
// (header creation time) is read, and a process whose ring head has not moved for `stall_ticks`
// ticks is scanned again (a plugin reloaded without -z nodelete starts a new ring). A pid whose
// process start time changed (pid reuse) starts over.
//
// Wait across ranks: records of the same (job, comm id, op, seqNumber) from several local ranks
// (pid, rank) are joined; each rank's wait = the last local rank's GPU start − its own GPU start (time its
// kernel spent waiting for peers that are on this node; peers on other nodes are not seen). A
// group is closed when all its nranks arrived or `join_ticks` ticks after its first record.
//
// Threads: none of its own. Lifecycle: Create → Init → Start → Collect… → Stop.
// options.tracked must outlive the collector.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "agent/collector.h"
#include "agent/process_series.h"
#include "agent/tracked_processes.h"
#include "collect/nccl_profiler/ring_reader.h"
#include "core/identity.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"

namespace ithbat::collect::nccl_profiler {

struct NcclProfilerOptions {
  agent::TrackedProcesses* tracked = nullptr;  // whom to follow (required)
  std::string procfs = "/proc";
  int rescan_ticks = 5;
  int stall_ticks = 10;       // a reading process whose head did not move this long is rescanned
  int bad_rescan_ticks = 60;  // a process whose ring was refused is scanned again after this
  size_t max_scans_per_tick = 16;
  size_t max_processes = 512;
  size_t records_per_process = 4096;   // recent records kept per process (snapshot API)
  size_t max_records_per_tick = 8192;  // per process (bounds what a hostile ring costs a tick)
  int join_ticks = 2;                  // ticks a (comm, seq) group waits for other local ranks
  size_t max_open_groups = 1 << 16;
};

// A record as the snapshot API returns it: the process and what the plugin reported, plus the
// wait computed across local ranks (-1 until its group is closed, or when untimed).
struct CollectiveTiming {
  int32_t pid = -1;
  NcclRecord record;
  int64_t wait_ns = -1;
};

class NcclProfilerCollector : public agent::Collector {
 public:
  static Result<std::unique_ptr<NcclProfilerCollector>> Create(NcclProfilerOptions options);
  ~NcclProfilerCollector() override;

  std::vector<MetricDesc> Describe() const override;

  struct ProcessStatus {
    int32_t pid = -1;
    std::string state;  // "reading" | "no_ring" | "bad_ring"
    std::string detail;
    ReadLosses losses;
    WriterCounters writer;
  };
  // Thread-safe snapshots (tests, step breakdown later).
  std::vector<ProcessStatus> Processes() const;
  std::vector<CollectiveTiming> RecentCollectives(int32_t pid) const;

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  explicit NcclProfilerCollector(NcclProfilerOptions options);

  struct OpTotals {
    double collectives = 0;
    double kernel_seconds = 0;
    double bytes = 0;
  };
  struct FileKey {
    uint64_t dev = 0;
    uint64_t inode = 0;
    bool operator==(const FileKey&) const = default;
  };
  struct Proc {
    int32_t pid = -1;
    uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (0 unknown): pid reuse changes it
    Identity identity;
    std::unique_ptr<RingReader> reader;
    ReadLosses past_losses;  // of the readers before `reader` (counters never go down)
    uint64_t last_head = 0;
    uint64_t head_moved_tick = 0;
    FileKey ring;     // the file `reader` reads
    std::string bad;  // why its ring was refused ("" = fine)
    uint64_t last_scan_tick = 0;
    bool scanned = false;
    std::map<std::string_view, OpTotals> totals;
    double untimed = 0;
    double wait_seconds = 0;
    std::deque<CollectiveTiming> records;
    agent::ProcessSeries series;
  };
  // NCCL numbers collectives per communicator and per function: (comm, op, seq) is one collective.
  struct GroupKey {
    std::string job;  // another job's records never join this job's groups
    uint64_t comm;
    std::string_view op;  // static storage (OpLabel)
    uint64_t seq;
    auto operator<=>(const GroupKey&) const = default;
  };
  struct Member {
    int32_t pid;
    int32_t rank;  // one process may hold several ranks of a communicator
    int64_t gpu_start_mono;
  };
  struct Group {
    uint64_t first_tick = 0;
    int32_t nranks = 0;
    std::vector<Member> members;
  };

  void SyncTracked();
  bool RingTaken(const FileKey& key, int32_t pid) const;
  void Scan(Proc& p);
  void Reset(Proc& p);
  void Retire(Proc& p);
  void Drain(Proc& p);
  void CloseGroups(bool all);
  void Publish(Proc& p, TimeNs t);
  void Put(Proc& p, const MetricDesc& desc, std::string_view label, std::string_view value, TimeNs t,
           double v);

  NcclProfilerOptions options_;
  Sink* sink_ = nullptr;
  uint64_t tick_ = 0;
  uint64_t seen_generation_ = UINT64_MAX;
  size_t scan_cursor_ = 0;
  mutable std::mutex mu_;  // guards procs_ for the snapshot accessors
  std::map<int32_t, Proc> procs_;
  std::map<GroupKey, Group> groups_;
};

}  // namespace ithbat::collect::nccl_profiler
