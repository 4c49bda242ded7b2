#pragma once
// The capture thread's queue of records waiting for the collector: a FIFO of records copied
// into 64 KiB slabs mapped straight from the kernel. A job printing 10,000 lines a second puts
// ~2.7 MB a second through it; held as one std::string and one deque node per record, that
// churn went through malloc's arena between long-lived objects of other threads, and the pages
// stayed resident after each drain (docs/performance.md, "The agent's memory", third pass).
// A slab is unmapped when its last record is drained (one spare is kept), so the queue costs
// what it holds and nothing after. Not thread-safe: its owner locks.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

#include "collect/joblog/capture_source.h"

namespace ithbat::collect::joblog {

class RecordQueue {
 public:
  static constexpr size_t kSlabBytes = 64 * 1024;
  // The largest record data a slab takes; a longer one is refused (Push returns false). The
  // BPF program sends at most JOBLOG_CHUNK_BYTES (4,096) per record.
  static constexpr size_t kMaxDataBytes = kSlabBytes / 4;

  // max_bytes bounds what the records hold (data plus a fixed header each).
  explicit RecordQueue(size_t max_bytes);
  ~RecordQueue();
  RecordQueue(const RecordQueue&) = delete;
  RecordQueue& operator=(const RecordQueue&) = delete;

  // Copies the record (its `data` ignored) with `data` as its bytes. False, and nothing
  // queued, when that would take the queue past max_bytes or the data is longer than
  // kMaxDataBytes or a slab cannot be mapped.
  bool Push(const CaptureRecord& record, std::string_view data);
  // Appends up to max_records of the oldest records to `out` (each its own CaptureRecord);
  // returns how many.
  size_t Drain(std::vector<CaptureRecord>& out, size_t max_records);

  size_t size() const { return count_; }
  size_t bytes() const { return bytes_; }  // what the records are charged against max_bytes
  size_t slabs() const { return slabs_.size() + (spare_ ? 1 : 0); }  // mapped now

 private:
  struct Slab {
    char* base = nullptr;
    size_t write = 0;  // bytes written
    size_t read = 0;   // bytes drained
  };
  char* MapSlab();
  void Unmap(char* base);
  void ReleaseFront();  // the front slab, fully read

  size_t max_bytes_;
  std::deque<Slab> slabs_;  // oldest first; records are written to the back one
  char* spare_ = nullptr;   // one drained slab kept mapped for the next burst
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ithbat::collect::joblog
