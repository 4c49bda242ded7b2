#pragma once
// The loaded BPF program (bpf/cuda_probes.bpf.c) and its per-process attachments. One load per
// agent; the two programs are attached per (process, library file), each target with its cookie
// (probe id + what to read) and the process's pid as filter.
//
// Two ways to attach, chosen at Load:
//   uprobe_multi (kernel 6.6+): ONE link per (process, file, entry|return) carrying every
//     offset and cookie. Preferred: detaching a uprobe waits for an RCU grace period per link
//     (measured here: ~0.1 s per link on 6.18), so 60 single links take seconds to detach while
//     two multi links take two waits. libbpf 1.1 has no API for it; Attach issues BPF_LINK_CREATE
//     itself with the (stable) uapi layout.
//   perf-event uprobes (older kernels): one link per target and direction.
//
// Thread-compatible: the collector calls it from its Collect only.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collect/probes/target_resolver.h"
#include "core/result.h"
#include "cuda_probes_abi.h"

struct cuda_probes_bpf;
struct bpf_link;
struct ring_buffer;

namespace ithbat::collect::probes {

// The links of one process to one library file. Destroying it detaches them.
class Attachment {
 public:
  Attachment() = default;
  ~Attachment();
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  // Kernel links held (multi mode: up to 2; perf mode: one per target and direction).
  size_t links() const { return links_.size() + fds_.size(); }
  // Probe points attached (targets + return probes), whatever the mode.
  size_t points() const { return points_; }
  size_t failed() const { return failed_; }
  const std::string& first_error() const { return first_error_; }

 private:
  friend class ProbeBpf;
  std::vector<bpf_link*> links_;
  std::vector<int> fds_;  // uprobe_multi link fds
  size_t points_ = 0;
  size_t failed_ = 0;
  std::string first_error_;
};

// Closes attachments off the caller's thread. Closing a uprobe link returns only after an RCU
// grace period (uprobe_multi: one per link, 30-60 ms on this VM, ~0.1 s seen on 6.18; README
// "Overhead budget"), so a collector that toggles launch probes on many processes would stall its
// tick for that long per toggle. The kernel unregisters the uprobes at the start of the close;
// the wait that follows only lets in-flight hits finish. Up to `max_threads` closes run at once
// (threads started on demand, at most that many, kept until destruction): N processes detached
// in one tick end their slices together instead of each waiting for the closes queued before
// it. The destructor closes whatever is queued, then joins.
class LinkCloser {
 public:
  // What the collector watches of one queued close. `started_ns` (CLOCK_MONOTONIC) is set when
  // the close begins (the probes stop firing then), `done` when every link is closed.
  struct Ticket {
    std::atomic<int64_t> started_ns{0};
    std::atomic<bool> done{false};
  };
  explicit LinkCloser(size_t max_threads = 4);
  ~LinkCloser();
  LinkCloser(const LinkCloser&) = delete;
  LinkCloser& operator=(const LinkCloser&) = delete;
  std::shared_ptr<const Ticket> Submit(std::unique_ptr<Attachment> a);
  // Blocks until that close is done (a ticket of this closer).
  void Wait(const Ticket& ticket);
  // Blocks until everything submitted so far is closed.
  void Drain();
  size_t pending() const;
  size_t threads() const;  // closer threads started so far (<= max_threads)

 private:
  void Run();
  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work queued or stop
  std::condition_variable done_cv_;  // a close finished
  std::deque<std::pair<std::unique_ptr<Attachment>, std::shared_ptr<Ticket>>> queue_;
  size_t busy_ = 0;
  size_t idle_ = 0;  // threads waiting for work
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// A library file held open with O_PATH (no read access, no mapping: a name for the inode) and
// the path through which the kernel reaches exactly it, <procfs>/self/fd/N. Attaching through
// that path never follows a path the traced process could swap in the meantime. Closed by the
// destructor.
class PinnedFile {
 public:
  PinnedFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PinnedFile();
  PinnedFile(const PinnedFile&) = delete;
  PinnedFile& operator=(const PinnedFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// What one probe hit costs the probed thread, measured on the agent's own binary (MeasureHitCost).
struct HitCost {
  double ns_per_hit = 0;      // probed minus unprobed, per call (thread CPU time)
  double unprobed_ns = 0;     // per call without the probe
  double attach_ns = 0;       // wall time of attaching the one-target link
  double detach_ns = 0;       // wall time of closing it (the RCU grace period)
  uint64_t calls = 0;         // calls per measured round
};

class ProbeBpf {
 public:
  // Opens and loads the skeleton. Errors (kUnavailable) carry libbpf's reason.
  static Result<std::unique_ptr<ProbeBpf>> Load();
  ~ProbeBpf();
  ProbeBpf(const ProbeBpf&) = delete;
  ProbeBpf& operator=(const ProbeBpf&) = delete;

  // Attaches `targets` of the file at `path` (a path the agent reaches: AgentPathFor) to pid:
  // an entry uprobe per target and a return probe for timed ones. Per-target failures are
  // counted in the attachment; an error only when nothing attached.
  Result<std::unique_ptr<Attachment>> Attach(int32_t pid, const std::string& path,
                                             const std::vector<Target>& targets);

  struct StatEntry {
    cuda_probe_key key;
    cuda_probe_value value;
  };
  // Every stats entry (bounded by the map size).
  Status ReadStats(std::vector<StatEntry>* out) const;
  // Zeroes the per-tick maxima of tgid (CUDA_SLOT_GAP_MAX).
  void ResetMaxima(uint32_t tgid);
  // Deletes every entry of tgid from every map — counters, per-thread state, communicators —
  // (after its links are gone).
  void ForgetProcess(uint32_t tgid);
  // Deletes tgid's per-thread last-launch times only: done before the launch probes of a
  // duty-cycled process are attached again, so the time they were detached is never a gap.
  void ForgetLaunchState(uint32_t tgid);
  // Self-calibration: attaches the entry program, with a launch probe's cookie (the same work as
  // a cuLaunchKernel hit: counter, grid, per-thread gap state), to a function of the agent's own
  // binary (found through its ELF: its file offset from /proc/self/exe's PT_LOAD headers), calls
  // it `calls` times probed and unprobed over a few rounds (median), then detaches and forgets
  // the agent's own keys. The function's first instruction is one the kernel single-steps out of
  // line (x86-64: a mov), like the fake's and most drivers' entry points, so the figure is not
  // the cheaper emulated path. Errors: the attach was refused, or the binary cannot be read.
  Result<HitCost> MeasureHitCost(uint64_t calls = 4000, int rounds = 5);
  // Entries of tgid per map (diagnostics and tests; walks the maps).
  struct KeyCounts {
    size_t stats = 0, last_launch = 0, group_depth = 0, entries = 0, comms = 0;
  };
  KeyCounts CountKeys(uint32_t tgid) const;
  // Consumes ring-buffer records (at most what is there now).
  int DrainRecords(const std::function<void(const cuda_probe_record&)>& fn);
  cuda_probe_global Globals() const;
  bool multi() const { return multi_; }

 private:
  ProbeBpf() = default;
  Result<std::unique_ptr<Attachment>> AttachMulti(int32_t pid, const std::string& path,
                                                  const std::vector<Target>& targets);
  cuda_probes_bpf* skel_ = nullptr;
  bool multi_ = false;
  ring_buffer* rb_ = nullptr;
  std::function<void(const cuda_probe_record&)> sink_;
  static int OnRecord(void* ctx, void* data, size_t size);
};

}  // namespace ithbat::collect::probes
