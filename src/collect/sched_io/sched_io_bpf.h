#pragma once
// The loaded bpf/sched_io.bpf.c: its tracked-process map, its aggregates and its counters.
// One instance per collector (or benchmark); the programs stay loaded for its whole life and
// are attached/detached with SetAttached (nothing runs in the kernel while detached).
//
// Thread-compatible: one thread drives it (the collector's Collect); the kernel side runs
// concurrently and every read copies.
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "sched_io_abi.h"

struct sched_io_bpf;

namespace ithbat::collect::sched_io {

class SchedIoBpf {
 public:
  // Opens, loads and attaches the programs (then detaches them when !attach). kUnavailable /
  // kPermission with the step that failed and the kernel's reason ("BPF load failed: ...").
  static Result<std::unique_ptr<SchedIoBpf>> Load(bool attach = true);
  ~SchedIoBpf();
  SchedIoBpf(const SchedIoBpf&) = delete;
  SchedIoBpf& operator=(const SchedIoBpf&) = delete;

  Status SetAttached(bool attached);
  bool attached() const { return attached_; }

  // Adds or replaces pid's entry (root: the tgid its time rolls up to; inherit: its children
  // are added at fork). kResourceExhausted when the map is full. Each call gives the entry a new
  // epoch: kernel state of its threads from an earlier tracking is reset, never counted.
  Status Track(int32_t pid, int32_t root, bool inherit = true);
  Status Untrack(int32_t pid);
  // The kernel's tracked map now (tgid -> root), at most SCHED_IO_MAX_TRACKED entries.
  std::map<uint32_t, uint32_t> Tracked() const;

  struct IoEntry {
    sched_io_io_key key{};
    sched_io_io_val value{};
    uint64_t max_ns = 0;  // longest call since the previous ReadIo (0: none)
  };
  // Every root's cumulative scheduling totals.
  std::map<uint32_t, sched_io_sched> ReadSched() const;
  // Every I/O aggregate, with the maximum since the previous call (which it resets).
  std::vector<IoEntry> ReadIo();
  // Deletes root's aggregates (sched, io, io_max): after its last read, when it is gone.
  void ForgetRoot(uint32_t root);
  // Reconciles the kernel with the roots user space follows: deletes every `tracked` entry
  // whose root is not in `roots` (a child forked while its root was being removed, a process
  // left by a race) and every aggregate (sched, io, io_max) of a root not in `roots` (a call
  // or a switch that ended after the root's removal). Returns the tracked entries deleted.
  size_t RetainRoots(const std::set<uint32_t>& roots);
  // Empties tracked, threads and the aggregates: before a detach, so nothing from before it is
  // read as current after the next attach.
  void Clear();
  sched_io_globals Globals() const;

  // Tests: entries in the per-thread map, and whether a tid has one.
  size_t ThreadEntries() const;
  bool HasThread(uint32_t tid) const;

 private:
  SchedIoBpf() = default;
  sched_io_bpf* skel_ = nullptr;
  bool attached_ = false;
  uint32_t next_epoch_ = 1;  // never 0
};

}  // namespace ithbat::collect::sched_io
