#pragma once
// Where the job-output collector gets bytes from: the eBPF capture (ebpf_source.h), a set of
// followed files (tail_source.h), or a fake in tests. The collector (joblog_collector.h) owns
// one or more sources and is the only caller.
//
// Lifecycle: a source is created ready (the eBPF one loaded and attached), Start() begins
// delivery (a thread that blocks on the kernel, for eBPF), Drain() hands over what came since
// the last call, Stop() ends delivery. Track/Untrack tell an in-kernel source whom to copy;
// sources that cannot choose (files) ignore them. Drain, Track, Untrack and Counters are
// called from the collector's thread while the source's own thread (if any) runs.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/identity.h"
#include "core/result.h"
#include "core/time.h"

namespace ithbat::collect::joblog {

struct CaptureRecord {
  enum class Type : uint8_t {
    kData,  // bytes written to stdout/stderr
    kFork,  // a tracked process forked and the kernel tracks the child: pid = child, tid = parent
    kExit,  // the last thread of a tracked process exited: pid
  };
  Type type = Type::kData;
  // The process (host pid). A source that reads files, not processes, uses negative keys and
  // describes them with StreamInfo().
  int32_t pid = -1;
  int32_t tid = -1;        // the writing thread (kFork: the parent's pid)
  int32_t fd = -1;         // the fd written to (a dup of 1 or 2 keeps its own number)
  uint8_t stream = 1;      // 1 = stdout, 2 = stderr
  TimeNs time = 0;         // realtime ns of the write (its completion, for eBPF)
  uint64_t total_len = 0;  // bytes the one call wrote (several records when it was large)
  uint64_t offset = 0;     // of `data` within those bytes
  int32_t root = -1;       // kFork: the tracked process the child descends from
  // kData: bytes of this process (or file) written before this record were not delivered (a
  // whole call lost in the kernel ring or the source's queue), or come from another file (a
  // followed file rotated or truncated). A partial line pending before it ends there, cut,
  // rather than being glued to this record's bytes.
  bool gap_before = false;
  std::string data;
};

// Cumulative since the source was created. Lost and truncated data is always counted here,
// never dropped silently.
struct CaptureCounters {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t lost_records = 0;  // the ring (or the user-space queue) was full
  uint64_t lost_bytes = 0;
  uint64_t truncated_writes = 0;  // calls larger than the per-call bound
  uint64_t truncated_bytes = 0;
  uint64_t read_errors = 0;  // user memory not readable at capture time
  uint64_t track_full = 0;   // children not tracked: the kernel map was full

  CaptureCounters& operator+=(const CaptureCounters& o) {
    records += o.records;
    bytes += o.bytes;
    lost_records += o.lost_records;
    lost_bytes += o.lost_bytes;
    truncated_writes += o.truncated_writes;
    truncated_bytes += o.truncated_bytes;
    read_errors += o.read_errors;
    track_full += o.track_full;
    return *this;
  }
};

// A stream a source names itself (a followed file): who its lines belong to.
struct StreamInfo {
  Identity identity;
  std::string name;  // the path, for logs
};

// Which records follow lost ones, for sources that number each process's calls (the eBPF
// program's joblog_header.seq, from 1, shared by the records of one call) or drop records
// themselves (a full queue). Only a jump forward is a gap: threads on two CPUs may deliver
// out of order, and the numbering starts over when a pid is tracked again. At most
// kMaxEntries pids are remembered; beyond that all are forgotten at once (at worst a gap
// goes unseen). Not thread-safe (the source calls it under its lock).
class SeqGapDetector {
 public:
  static constexpr size_t kMaxEntries = 65536;
  // True when records of pid before this one (numbered `seq`, 0 = unnumbered) were lost.
  bool Observe(int32_t pid, uint32_t seq) {
    bool gap = lost_.erase(pid) > 0;
    if (seq == 0) return gap;
    auto it = last_.find(pid);
    if (it == last_.end()) {
      if (last_.size() >= kMaxEntries) last_.clear();
      last_.emplace(pid, seq);
      return gap;
    }
    if (seq > it->second + 1) gap = true;
    if (seq > it->second || seq == 1) it->second = seq;
    return gap;
  }
  // A record of pid was dropped (numbered `seq` or 0): its next record follows a gap.
  void Lost(int32_t pid) {
    if (lost_.size() >= kMaxEntries) lost_.clear();
    lost_.insert(pid);
  }
  void Forget(int32_t pid) {
    last_.erase(pid);
    lost_.erase(pid);
  }

 private:
  std::unordered_map<int32_t, uint32_t> last_;
  std::unordered_set<int32_t> lost_;
};

enum class CaptureMode : uint8_t { kOff, kEbpf, kTail };
std::string_view CaptureModeName(CaptureMode mode);  // "off", "ebpf", "tail"

class CaptureSource {
 public:
  virtual ~CaptureSource() = default;
  virtual CaptureMode mode() const = 0;
  // How it is attached, for logs and the capture-mode metric ("fexit", "tp_btf", "raw_tp", "tail").
  virtual std::string_view attachment() const = 0;
  virtual Status Start() = 0;
  virtual void Stop() = 0;
  // Appends at most max_records records to `out`, oldest first; returns how many.
  virtual size_t Drain(std::vector<CaptureRecord>& out, size_t max_records) = 0;
  // Copy pid's output from now on; its children are tracked too unless !inherit. `root` is the
  // tracked process it belongs to (itself for a root), handed back in kFork records.
  virtual Status Track(int32_t pid, int32_t root, bool inherit) = 0;
  virtual Status Untrack(int32_t pid) = 0;
  virtual CaptureCounters Counters() const = 0;
  virtual std::optional<StreamInfo> Stream(int32_t /*pid*/) const { return std::nullopt; }
  // Called once per collector tick, after the records were drained (housekeeping: the eBPF
  // source detaches its programs when nothing has been tracked for a while).
  virtual void Maintain() {}
};

}  // namespace ithbat::collect::joblog
