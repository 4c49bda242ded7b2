#include "collect/joblog/record_queue.h"

#include <cstring>
#include <utility>

#include <sys/mman.h>

namespace ithbat::collect::joblog {
namespace {

// A record as it sits in a slab: the fixed fields, then `len` bytes of data, padded to 8.
struct Stored {
  TimeNs time;
  uint64_t total_len;
  uint64_t offset;
  int32_t pid, tid, fd, root;
  uint32_t len;
  CaptureRecord::Type type;
  uint8_t stream;
  bool gap_before;
};

constexpr size_t Padded(size_t n) { return (n + 7) & ~size_t{7}; }
constexpr size_t StoredSize(size_t len) { return Padded(sizeof(Stored) + len); }
static_assert(StoredSize(RecordQueue::kMaxDataBytes) <= RecordQueue::kSlabBytes);

}  // namespace

RecordQueue::RecordQueue(size_t max_bytes) : max_bytes_(max_bytes) {}

RecordQueue::~RecordQueue() {
  for (const Slab& s : slabs_) Unmap(s.base);
  if (spare_) Unmap(spare_);
}

char* RecordQueue::MapSlab() {
  if (spare_) return std::exchange(spare_, nullptr);
  void* p = mmap(nullptr, kSlabBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

void RecordQueue::Unmap(char* base) { munmap(base, kSlabBytes); }

bool RecordQueue::Push(const CaptureRecord& record, std::string_view data) {
  if (data.size() > kMaxDataBytes) return false;
  const size_t need = StoredSize(data.size());
  if (bytes_ + need > max_bytes_) return false;
  if (slabs_.empty() || slabs_.back().write + need > kSlabBytes) {
    char* base = MapSlab();
    if (base == nullptr) return false;
    slabs_.push_back(Slab{base, 0, 0});
  }
  Slab& slab = slabs_.back();
  Stored s{record.time, record.total_len, record.offset,    record.pid,
           record.tid,  record.fd,        record.root,      static_cast<uint32_t>(data.size()),
           record.type, record.stream,    record.gap_before};
  std::memcpy(slab.base + slab.write, &s, sizeof(s));
  if (!data.empty()) std::memcpy(slab.base + slab.write + sizeof(s), data.data(), data.size());
  slab.write += need;
  bytes_ += need;
  ++count_;
  return true;
}

size_t RecordQueue::Drain(std::vector<CaptureRecord>& out, size_t max_records) {
  size_t n = 0;
  // Every slab held has records left to read: one is released as soon as its last is read.
  while (n < max_records && count_ > 0) {
    Slab& slab = slabs_.front();
    Stored s;
    std::memcpy(&s, slab.base + slab.read, sizeof(s));
    CaptureRecord& r = out.emplace_back();
    r.type = s.type;
    r.pid = s.pid;
    r.tid = s.tid;
    r.fd = s.fd;
    r.stream = s.stream;
    r.time = s.time;
    r.total_len = s.total_len;
    r.offset = s.offset;
    r.root = s.root;
    r.gap_before = s.gap_before;
    r.data.assign(slab.base + slab.read + sizeof(s), s.len);
    const size_t size = StoredSize(s.len);
    slab.read += size;
    bytes_ -= size;
    --count_;
    ++n;
    if (slab.read == slab.write) ReleaseFront();
  }
  return n;
}

void RecordQueue::ReleaseFront() {
  // One drained slab stays mapped as the spare for the next burst; others go back at once.
  if (spare_) {
    Unmap(slabs_.front().base);
  } else {
    spare_ = slabs_.front().base;
  }
  slabs_.pop_front();
}

}  // namespace ithbat::collect::joblog
