#pragma once
// The host scheduling and file I/O collector ("sched_io"): off-CPU time by reason, on-CPU time
// and write/fsync/close latency per mount of the tracked processes and their process trees,
// aggregated in the kernel (bpf/sched_io.bpf.c) and read each tick as counters tagged with the
// root process's identity (job, rank, pid, gpu). What each series means: README.md here.
//
// Whom it follows: agent::TrackedProcesses. Each tracked pid is a *root*: it is added to the
// kernel filter with its existing descendants (read once from /proc, at first sight); later
// children inherit at fork in the kernel. A root that leaves the tracked set or whose /proc
// entry disappears is read one last time, then its tree and its kernel aggregates are removed.
// Each tick the kernel maps are reconciled with the roots followed (entries and aggregates of
// any other root are deleted), and they are emptied when the programs are detached.
//
// Threads: none of its own. Lifecycle: Create → Init → Start (loads the BPF programs; a load
// failure is SetDegraded with the kernel's reason and the collector keeps running, empty) →
// Collect… → Stop (unloads). The programs are attached only while something is tracked
// (detached after `idle_detach_ticks` empty ticks). options.tracked must outlive the collector.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/collector.h"
#include "agent/process_series.h"
#include "agent/tracked_processes.h"
#include "collect/sched_io/mountinfo.h"
#include "collect/sched_io/sched_io_bpf.h"
#include "core/identity.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"

namespace ithbat::collect::sched_io {

struct SchedIoOptions {
  agent::TrackedProcesses* tracked = nullptr;  // whom to follow (required)
  std::string procfs = "/proc";                // the agent's real /proc
  size_t max_roots = 256;                      // roots followed at once; more are reported
  size_t max_descendants = 1024;               // existing descendants added per root at first sight
  size_t max_mounts_per_process = 16;          // distinct mount labels per root; the rest: "other"
  int idle_detach_ticks = 10;                  // ticks with nothing tracked before detaching
};

class SchedIoCollector : public agent::Collector {
 public:
  static Result<std::unique_ptr<SchedIoCollector>> Create(SchedIoOptions options);
  ~SchedIoCollector() override;

  std::vector<MetricDesc> Describe() const override;

  // The loaded programs (nullptr before Start, after Stop, or when the load failed). Tests and
  // benchmarks inspect the kernel maps through it; call from the collecting thread only.
  SchedIoBpf* bpf() { return bpf_.get(); }
  // The roots followed now (thread-safe).
  std::vector<int32_t> Roots() const;

 protected:
  Status InitImpl(Sink& sink) override;
  Status StartImpl() override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  explicit SchedIoCollector(SchedIoOptions options);

  struct MountLabel {
    std::string mount;   // mount point as the process sees it, "other" or "unknown"
    std::string fstype;  // "" for other/unknown (the label is then absent)
  };
  struct Root {
    int32_t pid = -1;
    Identity identity;
    std::vector<MountEntry> mounts;
    uint64_t mounts_read_tick = 0;  // 0: never
    std::map<uint32_t, MountLabel> dev_labels;  // sticky: a counter never moves between labels
    size_t distinct_mounts = 0;
    agent::ProcessSeries series;
  };

  void SyncTracked();
  void AddRoot(int32_t pid, const Identity& id);
  void RemoveRoot(int32_t pid);
  const MountLabel& LabelFor(Root& r, uint32_t dev);
  void Put(Root& r, const MetricDesc& desc, const std::vector<std::pair<std::string, std::string>>& labels,
           TimeNs t, double v);
  void Global(const MetricDesc& desc, std::string_view label, std::string_view value, TimeNs t, double v);
  // io: this root's entries of this tick's ReadIo.
  void AppendRoot(Root& r, TimeNs t, const sched_io_sched* s, const std::vector<const SchedIoBpf::IoEntry*>& io);

  SchedIoOptions options_;
  Sink* sink_ = nullptr;
  std::unique_ptr<SchedIoBpf> bpf_;
  uint64_t tick_ = 0;
  uint64_t seen_generation_ = UINT64_MAX;
  int idle_ticks_ = 0;
  mutable std::mutex mu_;  // guards roots_ for Roots()
  std::map<int32_t, Root> roots_;
  agent::ProcessSeries global_series_;  // node-wide series (no identity labels)
};

}  // namespace ithbat::collect::sched_io
