#include "collect/nccl_profiler/ring_reader.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "ithbat_nccl_ring.h"

namespace ithbat::collect::nccl_profiler {
namespace {

constexpr int64_t kMaxOpNs = int64_t{3600} * 1'000'000'000;  // a longer "collective" is garbage
constexpr int32_t kMaxRanks = 1 << 20;
constexpr int64_t kDayNs = int64_t{86'400} * 1'000'000'000;
// Host-clock nanoseconds beyond this (~146 years of uptime or Unix time) are not times: keeping
// every operand below it makes the sums below unable to overflow.
constexpr int64_t kMaxTimeNs = INT64_MAX / 2;
// How far a corrected GPU start may precede the host enqueue. The correction makes GPU times late,
// never early, while the GPU timer keeps its offset; this covers its drift within the plugin's
// ~17 s window and timer granularity.
constexpr int64_t kStartBeforeEnqueueNs = 10'000'000;

int64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A raw pTimer + correction on the host's CLOCK_MONOTONIC, or nullopt when out of bounds.
std::optional<int64_t> Corrected(uint64_t raw, int64_t lag) {
  if (raw == 0 || raw > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  int64_t v = 0;
  if (__builtin_add_overflow(static_cast<int64_t>(raw), lag, &v) || v <= 0 || v > kMaxTimeNs)
    return std::nullopt;
  return v;
}

bool PreadAll(int fd, void* dst, size_t n, uint64_t off) {
  auto* p = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

Status CheckHeader(const IthbatNcclRingHeader& h, uint64_t file_size) {
  if (h.magic != ITHBAT_NCCL_RING_MAGIC) return MakeError(ErrorCode::kParse, "nccl ring: bad magic");
  if (h.version != ITHBAT_NCCL_RING_VERSION)
    return MakeErrorF(ErrorCode::kParse, "nccl ring: version {} (reader knows {})", h.version,
                      ITHBAT_NCCL_RING_VERSION);
  if (h.header_size != sizeof(IthbatNcclRingHeader) || h.record_size != sizeof(IthbatNcclRecord))
    return MakeErrorF(ErrorCode::kParse, "nccl ring: header/record size {}/{} (expected {}/{})",
                      h.header_size, h.record_size, sizeof(IthbatNcclRingHeader), sizeof(IthbatNcclRecord));
  if (h.capacity < ITHBAT_NCCL_RING_MIN_CAPACITY || h.capacity > ITHBAT_NCCL_RING_MAX_CAPACITY ||
      (h.capacity & (h.capacity - 1)) != 0)
    return MakeErrorF(ErrorCode::kParse, "nccl ring: capacity {} out of bounds", h.capacity);
  const uint64_t need = uint64_t{h.header_size} + uint64_t{h.capacity} * h.record_size;
  if (file_size < need)
    return MakeErrorF(ErrorCode::kParse, "nccl ring: file of {} bytes, header says {}", file_size, need);
  return Ok();
}

// A NUL-terminated copy of a fixed field, or nullopt when it holds anything but [A-Za-z0-9_].
std::optional<std::string> CleanString(const char* field, size_t cap) {
  std::string s;
  for (size_t i = 0; i < cap; ++i) {
    const char c = field[i];
    if (c == '\0') return s;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return std::nullopt;
    s.push_back(c);
  }
  return std::nullopt;  // not terminated
}

}  // namespace

bool IsRingPath(std::string_view p) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (p.size() >= kDeleted.size() && p.substr(p.size() - kDeleted.size()) == kDeleted)
    p.remove_suffix(kDeleted.size());
  const size_t slash = p.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? p : p.substr(slash + 1);
  constexpr std::string_view kPrefix = ITHBAT_NCCL_RING_FILE_PREFIX;
  constexpr std::string_view kSuffix = ITHBAT_NCCL_RING_FILE_SUFFIX;
  if (base.size() <= kPrefix.size() + kSuffix.size()) return false;
  if (base.substr(0, kPrefix.size()) != kPrefix || base.substr(base.size() - kSuffix.size()) != kSuffix)
    return false;
  const std::string_view digits = base.substr(kPrefix.size(), base.size() - kPrefix.size() - kSuffix.size());
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return digits.size() <= 10;
}

std::string_view OpLabel(std::string_view f) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kOps = {{
      {"AllReduce", "all_reduce"},
      {"AllGather", "all_gather"},
      {"ReduceScatter", "reduce_scatter"},
      {"Broadcast", "broadcast"},
      {"Reduce", "reduce"},
      {"Send", "send"},
      {"Recv", "recv"},
      {"SendRecv", "send_recv"},
      {"AllToAll", "all_to_all"},
      {"AlltoAll", "all_to_all"},
      {"Gather", "gather"},
      {"Scatter", "scatter"},
  }};
  for (const auto& [name, label] : kOps) {
    if (f == name) return label;
  }
  return "other";
}

DecodeBounds DecodeBounds::Now() {
  const int64_t mono = ClockNs(CLOCK_MONOTONIC);
  return DecodeBounds{ClockNs(CLOCK_REALTIME) - mono};
}

std::optional<NcclRecord> DecodeRecord(const void* raw) { return DecodeRecord(raw, DecodeBounds::Now()); }

std::optional<NcclRecord> DecodeRecord(const void* raw, const DecodeBounds& bounds, bool* clock_implausible) {
  if (clock_implausible != nullptr) *clock_implausible = false;
  IthbatNcclRecord r;
  std::memcpy(&r, raw, sizeof(r));
  if (r.kind != ITHBAT_NCCL_KIND_COLL && r.kind != ITHBAT_NCCL_KIND_P2P) return std::nullopt;
  if (r.nranks < 1 || r.nranks > kMaxRanks || r.rank < 0 || r.rank >= r.nranks) return std::nullopt;
  if (r.peer_or_root < -1 || r.peer_or_root >= r.nranks) return std::nullopt;
  if ((r.flags & ~(ITHBAT_NCCL_FLAG_GPU_TIMED | ITHBAT_NCCL_FLAG_EVICTED | ITHBAT_NCCL_FLAG_BYTES_UNKNOWN |
                   ITHBAT_NCCL_FLAG_CLOSED_BY_NEXT)) != 0)
    return std::nullopt;
  // Same host, same clocks: the writer's REALTIME - MONOTONIC is the agent's, give or take clock
  // steps. Bounding it and the enqueue time keeps enqueue + offset far from overflow.
  const int64_t off = r.realtime_minus_monotonic_ns;
  const int64_t host_off = bounds.host_realtime_minus_monotonic_ns;
  if (host_off < -kMaxTimeNs || host_off > kMaxTimeNs || off < host_off - kDayNs || off > host_off + kDayNs)
    return std::nullopt;
  if (r.enqueue_mono_ns > static_cast<uint64_t>(kMaxTimeNs)) return std::nullopt;
  const auto enqueue = static_cast<int64_t>(r.enqueue_mono_ns);
  auto func = CleanString(r.func, sizeof(r.func));
  auto dtype = CleanString(r.datatype, sizeof(r.datatype));
  if (!func || !dtype) return std::nullopt;
  if (r.dtype_size != 0 && r.count != 0 && r.bytes / r.count < r.dtype_size) return std::nullopt;
  NcclRecord out;
  out.comm_id = r.comm_id;
  out.seq_number = r.seq_number;
  out.p2p = r.kind == ITHBAT_NCCL_KIND_P2P;
  out.op = OpLabel(*func);
  out.count = r.count;
  out.bytes = r.bytes;
  out.rank = r.rank;
  out.nranks = r.nranks;
  out.peer_or_root = r.peer_or_root;
  out.channels = r.channels;
  out.evicted = (r.flags & ITHBAT_NCCL_FLAG_EVICTED) != 0;
  out.closed_by_next = (r.flags & ITHBAT_NCCL_FLAG_CLOSED_BY_NEXT) != 0;
  out.enqueue = static_cast<TimeNs>(enqueue + off);
  if ((r.flags & ITHBAT_NCCL_FLAG_GPU_TIMED) != 0) {
    // Raw pTimers are the GPU's clock; gpu_to_mono_ns moves them onto the host's monotonic clock.
    // The GPU timer follows wall-clock time (within a day, as the plugin checked), and the corrected
    // start cannot precede the enqueue by more than the timer's drift.
    const int64_t lag = r.gpu_to_mono_ns;
    int64_t gpu_minus_real = 0;
    const auto s = Corrected(r.gpu_start_ns, lag);
    const auto e = Corrected(r.gpu_stop_ns, lag);
    const bool plausible = s && e && *e >= *s && *e - *s <= kMaxOpNs && lag >= -kMaxTimeNs &&
                           lag <= kMaxTimeNs && !__builtin_add_overflow(lag, off, &gpu_minus_real) &&
                           gpu_minus_real >= -kDayNs && gpu_minus_real <= kDayNs &&
                           *s >= enqueue - kStartBeforeEnqueueNs;
    if (!plausible) {
      if (clock_implausible != nullptr) *clock_implausible = true;
      return out;
    }
    out.timed = true;
    out.gpu_to_mono_ns = lag;
    out.gpu_start_mono = *s;
    out.gpu_stop_mono = *e;
    out.gpu_start = static_cast<TimeNs>(*s + off);
    out.gpu_stop = static_cast<TimeNs>(*e + off);
  }
  return out;
}

Result<std::unique_ptr<RingReader>> RingReader::Open(const std::string& path, bool via_proc_link,
                                                     uint64_t expect_dev, uint64_t expect_inode) {
  // O_PATH first: nothing of the target is opened (a FIFO cannot block, a device is not opened)
  // until it is known to be the regular file the process maps. A map_files entry is a kernel
  // link and must be followed; any other link is refused.
  int pflags = O_PATH | O_CLOEXEC;
  if (!via_proc_link) pflags |= O_NOFOLLOW;
  const int pfd = open(path.c_str(), pflags);
  if (pfd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ESRCH) return ErrnoError(ErrorCode::kNotFound, path, e);
    if (e == EACCES || e == EPERM) return ErrnoError(ErrorCode::kPermission, path, e);
    return ErrnoError(ErrorCode::kIo, path, e);
  }
  struct stat pst {};
  if (fstat(pfd, &pst) != 0) {
    const int e = errno;
    close(pfd);
    return ErrnoError(ErrorCode::kIo, path, e);
  }
  if (S_ISLNK(pst.st_mode)) {
    close(pfd);
    return MakeErrorF(ErrorCode::kParse, "{}: a symbolic link (not followed)", path);
  }
  if (!S_ISREG(pst.st_mode)) {
    close(pfd);
    return MakeErrorF(ErrorCode::kParse, "{}: not a regular file", path);
  }
  if (expect_inode != 0 && (pst.st_ino != expect_inode || pst.st_dev != expect_dev)) {
    close(pfd);
    return MakeErrorF(ErrorCode::kNotFound, "{}: not the mapped file (replaced)", path);
  }
  // Reopen exactly that inode for reading: /proc/self/fd/N names the O_PATH descriptor's file,
  // whatever happens to `path` meanwhile.
  const std::string self = fmt::format("/proc/self/fd/{}", pfd);
  const int fd = open(self.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  const int open_errno = errno;
  close(pfd);
  if (fd < 0) {
    if (open_errno == EACCES || open_errno == EPERM)
      return ErrnoError(ErrorCode::kPermission, path, open_errno);
    return ErrnoError(ErrorCode::kIo, path, open_errno);
  }
  auto fail = [&](std::unexpected<Error> err) -> Result<std::unique_ptr<RingReader>> {
    close(fd);
    return err;
  };
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(ErrnoError(ErrorCode::kIo, path, errno));
  if (!S_ISREG(st.st_mode) || st.st_ino != pst.st_ino || st.st_dev != pst.st_dev)
    return fail(MakeErrorF(ErrorCode::kParse, "{}: changed while being opened", path));
  IthbatNcclRingHeader h{};
  if (!PreadAll(fd, &h, sizeof(h), 0))
    return fail(MakeErrorF(ErrorCode::kParse, "{}: shorter than a header", path));
  if (auto s = CheckHeader(h, static_cast<uint64_t>(st.st_size)); !s)
    return fail(MakeErrorF(ErrorCode::kParse, "{}: {}", path, s.error().message));
  return std::unique_ptr<RingReader>(new RingReader(fd, h.capacity, h.pid, h.created_monotonic_ns));
}

RingReader::RingReader(int fd, uint32_t capacity, uint32_t pid, uint64_t created_mono)
    : fd_(fd), capacity_(capacity), writer_pid_(pid), created_mono_(created_mono) {}

RingReader::~RingReader() {
  if (fd_ >= 0) close(fd_);
}

Status RingReader::Read(std::vector<NcclRecord>* out, size_t max_records) {
  if (fd_ < 0) return MakeError(ErrorCode::kIo, "nccl ring: reader closed");
  IthbatNcclRingHeader h{};
  struct stat st {};
  if (fstat(fd_, &st) != 0 || !PreadAll(fd_, &h, sizeof(h), 0)) {
    close(fd_);
    fd_ = -1;
    return MakeError(ErrorCode::kIo, "nccl ring: cannot read the header (file truncated?)");
  }
  if (auto s = CheckHeader(h, static_cast<uint64_t>(st.st_size)); !s || h.capacity != capacity_) {
    close(fd_);
    fd_ = -1;
    return MakeError(ErrorCode::kParse, "nccl ring: header changed under the reader");
  }
  writer_ = WriterCounters{h.records_written, h.dropped_pool_full, h.dropped_bad_input,
                           h.dropped_stale,   h.dropped_contended, h.evicted,
                           h.comms,           h.comms_refused};
  const uint64_t head = h.head;
  head_ = head;
  if (!started_) {
    started_ = true;
    next_ = head > capacity_ ? head - capacity_ : 0;
    losses_.overrun += next_;
  }
  if (head < next_) {
    close(fd_);
    fd_ = -1;
    return MakeError(ErrorCode::kParse, "nccl ring: head went backwards");
  }
  if (head - next_ > capacity_) {
    losses_.overrun += head - next_ - capacity_;
    next_ = head - capacity_;
  }
  uint64_t end = head;
  if (end - next_ > max_records) end = next_ + max_records;
  constexpr size_t kBatch = 256;
  const size_t rs = sizeof(IthbatNcclRecord);
  buf_.resize(kBatch * rs);
  payload_.resize(kBatch * rs);
  check_.resize(kBatch * rs);
  const DecodeBounds bounds = DecodeBounds::Now();
  while (next_ < end) {
    // One contiguous run of slots (no wrap inside a batch), read three times: the sequence
    // numbers, the payloads, the sequence numbers again. Separate preads with acquire fences
    // between them keep that order on weakly ordered CPUs too (within one pread the kernel's copy
    // may load a record's words in any order).
    const uint64_t slot = next_ & (capacity_ - 1);
    const uint64_t n = std::min<uint64_t>({end - next_, uint64_t{kBatch}, capacity_ - slot});
    const uint64_t off = sizeof(IthbatNcclRingHeader) + slot * rs;
    bool ok = PreadAll(fd_, buf_.data(), n * rs, off);
    std::atomic_thread_fence(std::memory_order_acquire);
    ok = ok && PreadAll(fd_, payload_.data(), n * rs, off);
    std::atomic_thread_fence(std::memory_order_acquire);
    ok = ok && PreadAll(fd_, check_.data(), n * rs, off);
    if (!ok) {
      close(fd_);
      fd_ = -1;
      return MakeError(ErrorCode::kIo, "nccl ring: records unreadable (file truncated?)");
    }
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t idx = next_ + i;
      const uint64_t want = 2 * idx + 2;
      uint64_t s1 = 0, s2 = 0;
      std::memcpy(&s1, buf_.data() + i * rs, sizeof(s1));
      std::memcpy(&s2, check_.data() + i * rs, sizeof(s2));
      if (s1 == want && s2 == want) {
        bool clock_bad = false;
        if (auto r = DecodeRecord(payload_.data() + i * rs, bounds, &clock_bad)) {
          if (clock_bad) ++losses_.clock;
          out->push_back(std::move(*r));
        } else {
          ++losses_.invalid;
        }
        continue;
      }
      if (s1 > want || s2 > want) {
        ++losses_.overrun;  // a later lap already took the slot
        continue;
      }
      // Not committed yet. A writer still at it: stop here and retry next time, unless the
      // record is far behind the head, or has stayed uncommitted for kMaxStuckReads reads (a
      // writer that died mid-record): then give it up.
      if (head - idx < capacity_ / 2) {
        if (idx != stuck_index_) {
          stuck_index_ = idx;
          stuck_reads_ = 0;
        }
        // Only a record that blocks committed ones behind it is counted towards giving up.
        if (idx + 1 == head || ++stuck_reads_ <= kMaxStuckReads) {
          next_ = idx;
          return Ok();
        }
        ++losses_.stuck;
      }
      ++losses_.torn;
    }
    next_ += n;
  }
  return Ok();
}

}  // namespace ithbat::collect::nccl_profiler
