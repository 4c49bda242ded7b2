#pragma once
// Reads the shared-memory ring of libnccl-profiler-ithbat.so (nccl_profiler/ithbat_nccl_ring.h)
// from outside the job. The job controls the file; the agent is root. So:
//   - the file is first opened with O_PATH (no open side effects: a FIFO or device is not
//     opened), without following links (O_NOFOLLOW) except the kernel's own
//     /proc/<pid>/map_files/* links; only when that is a regular file with the (dev, inode) the
//     process maps is it reopened for reading through /proc/self/fd (O_NONBLOCK);
//   - it is read with pread, not mapped: a job that truncates its file under a mapping would
//     crash the agent with SIGBUS, a pread just comes back short;
//   - every header field is checked (magic, version, sizes, capacity, file size) and every record
//     is checked against its sequence number (lapped or torn: dropped, counted) and its fields
//     (strings, ranks, times, with no arithmetic that can overflow) before it is returned;
//   - seqlock order holds on weakly ordered CPUs too: the sequence numbers, the payload and the
//     sequence numbers again are three separate preads with acquire fences between them.
//
// Not thread-safe; one reader per ring (the collector's thread).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/time.h"

namespace ithbat::collect::nccl_profiler {

// One operation as the agent keeps it (clock-converted, validated).
struct NcclRecord {
  uint64_t comm_id = 0;
  uint64_t seq_number = 0;  // Coll: NCCL's per-communicator number (same on every rank)
  bool p2p = false;
  std::string_view op;  // "all_reduce", ..., "other" (static storage)
  uint64_t count = 0;
  uint64_t bytes = 0;  // bytes per rank; 0 when the datatype was not recognised
  int32_t rank = -1;
  int32_t nranks = -1;
  int32_t peer_or_root = -1;
  uint32_t channels = 0;
  bool timed = false;           // GPU start/stop known (KernelCh pTimers, corrected to the host clock)
  bool evicted = false;         // written before every channel finished (see the plugin's README)
  bool closed_by_next = false;  // written when a later operation used its channel (older NCCL P2p)
  TimeNs enqueue = 0;           // CLOCK_REALTIME of the host enqueue (startEvent)
  // GPU times moved onto the host clock with the plugin's per-communicator bound
  // (gpu_to_mono_ns): each is late by at most the smallest KernelCh delivery delay NCCL showed
  // that communicator recently (~10 us when its proxy thread is idle-polling).
  TimeNs gpu_start = 0;        // CLOCK_REALTIME of the first channel's start; 0 when !timed
  TimeNs gpu_stop = 0;         // CLOCK_REALTIME of the last channel's stop; 0 when !timed
  int64_t gpu_start_mono = 0;  // the same in CLOCK_MONOTONIC (comparable across local ranks)
  int64_t gpu_stop_mono = 0;
  int64_t gpu_to_mono_ns = 0;  // the correction that was applied
};

// What a read lost, by reason (cumulative over the reader's life).
struct ReadLosses {
  uint64_t overrun = 0;  // overwritten before the agent read them (lapped)
  uint64_t torn = 0;     // changed while being read, or never committed
  uint64_t invalid = 0;  // committed but with impossible fields
  uint64_t clock = 0;    // GPU times implausible after correction: kept, but as untimed
  uint64_t stuck = 0;    // never committed: given up after kMaxStuckReads reads (also in torn)
};

// The plugin's own counters, from the header (see ithbat_nccl_ring.h).
struct WriterCounters {
  uint64_t records_written = 0;
  uint64_t dropped_pool_full = 0;
  uint64_t dropped_bad_input = 0;
  uint64_t dropped_stale = 0;
  uint64_t dropped_contended = 0;
  uint64_t evicted = 0;
  uint64_t comms = 0;
  uint64_t comms_refused = 0;
};

// Whether a path (as in /proc/<pid>/maps, maybe with " (deleted)") names a ring of ours.
bool IsRingPath(std::string_view maps_path);

class RingReader {
 public:
  // Opens `path`. `via_proc_link`: the path is a /proc/<pid>/map_files entry (a kernel link,
  // followed); otherwise no link is followed. `expect_dev`/`expect_inode` (when nonzero): the
  // file must be that one. Errors: kNotFound (gone), kPermission/kIo (open/stat), kParse (not a
  // regular file, a header that fails a check, a file smaller than the header says).
  static Result<std::unique_ptr<RingReader>> Open(const std::string& path, bool via_proc_link,
                                                  uint64_t expect_dev = 0, uint64_t expect_inode = 0);
  ~RingReader();
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  // Appends the records committed since the last call (at most `max_records`) to *out.
  // A reader that starts late begins at the oldest record still in the ring (older ones count
  // as overrun). Errors: kParse when the header changed under it (magic, sizes, head going
  // backwards), kIo when the file cannot be read; the reader is then unusable.
  Status Read(std::vector<NcclRecord>* out, size_t max_records = 1 << 16);

  // Reads a record stays uncommitted (while later ones are) before it is given up as torn: a
  // writer killed between claiming and committing must not block everything after it.
  static constexpr int kMaxStuckReads = 8;

  const ReadLosses& losses() const { return losses_; }
  const WriterCounters& writer() const { return writer_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t writer_pid() const { return writer_pid_; }
  uint64_t next_index() const { return next_; }
  uint64_t head() const { return head_; }  // as of the last Read
  uint64_t created_monotonic_ns() const { return created_mono_; }

 private:
  RingReader(int fd, uint32_t capacity, uint32_t pid, uint64_t created_mono);

  int fd_ = -1;
  uint32_t capacity_ = 0;
  uint32_t writer_pid_ = 0;
  uint64_t next_ = 0;
  uint64_t head_ = 0;
  uint64_t created_mono_ = 0;
  uint64_t stuck_index_ = UINT64_MAX;
  int stuck_reads_ = 0;
  bool started_ = false;
  ReadLosses losses_;
  WriterCounters writer_;
  std::vector<unsigned char> buf_;
  std::vector<unsigned char> payload_;
  std::vector<unsigned char> check_;
};

// What a decoded record is checked against. `host_realtime_minus_monotonic_ns`: the agent's own
// CLOCK_REALTIME - CLOCK_MONOTONIC (same host, same clocks); a record whose offset is more than a
// day from it is invalid.
struct DecodeBounds {
  int64_t host_realtime_minus_monotonic_ns = 0;
  static DecodeBounds Now();
};

// Converts and validates one raw record (exposed for tests). nullopt when a field is impossible;
// `*clock_implausible` (optional) is set when only its GPU times were refused (the record is then
// returned untimed).
std::optional<NcclRecord> DecodeRecord(const void* raw_record, const DecodeBounds& bounds,
                                       bool* clock_implausible = nullptr);
std::optional<NcclRecord> DecodeRecord(const void* raw_record);

// The op label for NCCL's func string: "AllReduce" -> "all_reduce"; unknown -> "other".
std::string_view OpLabel(std::string_view func);

}  // namespace ithbat::collect::nccl_profiler
