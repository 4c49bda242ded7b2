#include "store/disk.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "store/block_codec.h"
#include "store/crc32c.h"
#include "core/file_util.h"

namespace ithbat::store {
namespace {

// ---- formats (docs/storage.md) -------------------------------------------------------------

constexpr char kSegmentMagic[8] = {'I', 'T', 'H', 'B', 'S', 'E', 'G', '\n'};
constexpr uint32_t kSegmentVersion = 1;
constexpr size_t kSegmentHeaderBytes = 80;
constexpr size_t kSegmentTrailerBytes = 4;
constexpr uint32_t kFlagCompacted = 1;

constexpr char kSeriesMagic[8] = {'I', 'T', 'H', 'B', 'S', 'E', 'R', '\n'};
constexpr uint32_t kSeriesLogVersion = 1;
constexpr size_t kSeriesHeaderBytes = 16;
constexpr size_t kRecordHeaderBytes = 8;

// A series record holds at most 32 labels of at most 1 KiB each plus the description.
constexpr uint32_t kMaxSeriesRecordBytes = 1 << 20;
// The body of one segment; a flush is seconds of data and a compacted segment stops at
// kCompactMaxBytes, so this only rejects hostile or corrupt headers before they allocate.
constexpr uint64_t kMaxBodyBytes = 1ull << 30;

// Fast for the flush that runs every few seconds; compaction, rare and off the hot path,
// spends more CPU for a smaller file.
constexpr int kFlushZstdLevel = 3;

// Compaction tiers: the segments whose newest data falls in one aligned window are merged
// once the window has closed (a later segment exists), so each sample is rewritten once per
// tier and a call with nothing to do costs a scan of the index. The Store calls Compact after
// every flush; re-merging a window that is still filling would re-encode it every time.
struct CompactionTier {
  TimeNs window;
  int zstd_level;
};
constexpr CompactionTier kTiers[] = {
    {5 * 60 * kNsPerSec, 6},  // 10 s flushes -> 5 min segments
    {3600 * kNsPerSec, 12},   // 5 min -> 1 h: the long-lived files, worth the CPU
};
// A merged segment stops growing at this size (a window of unusually many series is split).
constexpr uint64_t kCompactMaxBytes = 64ull << 20;

int64_t WindowOf(TimeNs t, TimeNs window) {
  int64_t q = t / window;
  return (t % window < 0) ? q - 1 : q;  // floor, for times before 1970 too
}

constexpr std::string_view kLockName = "LOCK";
constexpr std::string_view kSeriesLogName = "series.log";
constexpr std::string_view kTmpSuffix = ".tmp";
constexpr std::string_view kCorruptSuffix = ".corrupt";
// Quarantined segments kept for a human to inspect; older ones are deleted, so a disk that keeps
// corrupting cannot fill the data directory with them (they are outside the disk budget).
constexpr size_t kMaxQuarantined = 8;
// The data directory and every file in it: the owner's only (issue 20: a 0755 directory of
// 0644 files let every local user read other users' job output and identities).
constexpr mode_t kDirMode = 0700;
constexpr mode_t kFileMode = 0600;

struct SegmentHeader {
  uint32_t version = kSegmentVersion;
  uint32_t flags = 0;
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  TimeNs min_time = 0;
  TimeNs max_time = 0;
  uint64_t samples = 0;
  uint32_t series = 0;
  uint32_t events = 0;
  uint32_t steps = 0;
  uint32_t body_bytes = 0;  // uncompressed
  uint32_t zstd_bytes = 0;
};

void PutLe(char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string EncodeHeader(const SegmentHeader& h) {
  std::string b(kSegmentHeaderBytes, '\0');
  std::copy(std::begin(kSegmentMagic), std::end(kSegmentMagic), b.begin());
  PutLe(&b[8], h.version, 4);
  PutLe(&b[12], h.flags, 4);
  PutLe(&b[16], h.first_seq, 8);
  PutLe(&b[24], h.last_seq, 8);
  PutLe(&b[32], static_cast<uint64_t>(h.min_time), 8);
  PutLe(&b[40], static_cast<uint64_t>(h.max_time), 8);
  PutLe(&b[48], h.samples, 8);
  PutLe(&b[56], h.series, 4);
  PutLe(&b[60], h.events, 4);
  PutLe(&b[64], h.steps, 4);
  PutLe(&b[68], h.body_bytes, 4);
  PutLe(&b[72], h.zstd_bytes, 4);
  PutLe(&b[76], Crc32c(b.data(), 76), 4);
  return b;
}

Result<SegmentHeader> DecodeHeader(std::string_view b) {
  if (b.size() < kSegmentHeaderBytes) return MakeError(ErrorCode::kCorrupt, "short segment header");
  if (!std::equal(std::begin(kSegmentMagic), std::end(kSegmentMagic), b.begin())) {
    return MakeError(ErrorCode::kCorrupt, "not a segment (magic)");
  }
  if (GetLe(&b[76], 4) != Crc32c(b.data(), 76))
    return MakeError(ErrorCode::kCorrupt, "segment header checksum");
  SegmentHeader h;
  h.version = static_cast<uint32_t>(GetLe(&b[8], 4));
  if (h.version != kSegmentVersion) return MakeErrorF(ErrorCode::kCorrupt, "segment version {}", h.version);
  h.flags = static_cast<uint32_t>(GetLe(&b[12], 4));
  h.first_seq = GetLe(&b[16], 8);
  h.last_seq = GetLe(&b[24], 8);
  h.min_time = static_cast<TimeNs>(GetLe(&b[32], 8));
  h.max_time = static_cast<TimeNs>(GetLe(&b[40], 8));
  h.samples = GetLe(&b[48], 8);
  h.series = static_cast<uint32_t>(GetLe(&b[56], 4));
  h.events = static_cast<uint32_t>(GetLe(&b[60], 4));
  h.steps = static_cast<uint32_t>(GetLe(&b[64], 4));
  h.body_bytes = static_cast<uint32_t>(GetLe(&b[68], 4));
  h.zstd_bytes = static_cast<uint32_t>(GetLe(&b[72], 4));
  if (h.first_seq == 0 || h.first_seq > h.last_seq || h.body_bytes > kMaxBodyBytes) {
    return MakeError(ErrorCode::kCorrupt, "segment header fields out of range");
  }
  return h;
}

// ---- POSIX helpers -------------------------------------------------------------------------

using Fd = UniqueFd;

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, "write " + what, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok();
}

Status PreadAll(int fd, char* buf, size_t n, off_t offset, const std::string& what) {
  while (n > 0) {
    ssize_t r = ::pread(fd, buf, n, offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, "read " + what, errno);
    }
    if (r == 0) return MakeErrorF(ErrorCode::kCorrupt, "{}: unexpected end of file", what);
    buf += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return Ok();
}

Status SyncDir(int dir_fd, const std::string& dir) {
  if (::fsync(dir_fd) != 0) return ErrnoError(ErrorCode::kIo, "fsync " + dir, errno);
  return Ok();
}

// Writes `data` as `path` atomically: a reader (or a restart after a crash) sees the old file
// or the new one, whole, never a prefix.
//
// Every file is created relative to the directory's descriptor, never through a symlink
// (O_NOFOLLOW), readable by its owner only (0600: the store holds job output and job identities).
Status WriteFileAtomic(int dir_fd, const std::string& dir, const std::string& name, std::string_view data) {
  const std::string tmp_name = name + std::string(kTmpSuffix);
  const std::string tmp = dir + "/" + tmp_name;
  Fd fd(::openat(dir_fd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kFileMode));
  if (!fd.valid()) return ErrnoError(ErrorCode::kIo, "create " + tmp, errno);
  Status st = WriteAll(fd.get(), data, tmp);
  if (st && ::fdatasync(fd.get()) != 0) st = ErrnoError(ErrorCode::kIo, "fdatasync " + tmp, errno);
  fd.Reset();
  if (st && ::renameat(dir_fd, tmp_name.c_str(), dir_fd, name.c_str()) != 0) {
    st = ErrnoError(ErrorCode::kIo, "rename " + tmp, errno);
  }
  if (!st) {
    ::unlinkat(dir_fd, tmp_name.c_str(), 0);
    return st;
  }
  return SyncDir(dir_fd, dir);
}

std::string SegmentName(uint64_t seq) { return fmt::format("seg-{:016d}.ith", seq); }

bool IsSegmentName(std::string_view n) {
  return n.size() == 4 + 16 + 4 && n.starts_with("seg-") && n.ends_with(".ith") &&
         std::all_of(n.begin() + 4, n.begin() + 20, [](char c) { return c >= '0' && c <= '9'; });
}

// A segment file's bytes, ready to be written under a name.
struct BuiltSegment {
  SegmentHeader header;
  std::string file;
};

Result<BuiltSegment> BuildSegment(const SegmentContents& contents, uint64_t first_seq, uint64_t last_seq,
                                  uint32_t flags, int level);

struct SegmentInfo {
  std::string name;
  SegmentHeader header;
  uint64_t bytes = 0;
};

bool SegmentOrder(const SegmentInfo& a, const SegmentInfo& b) {
  // A compacted segment sorts before the inputs it covers (same first_seq, larger range).
  if (a.header.first_seq != b.header.first_seq) return a.header.first_seq < b.header.first_seq;
  return a.header.last_seq > b.header.last_seq;
}

void ExtendRange(TimeNs t, bool* any, TimeNs* lo, TimeNs* hi) {
  if (!*any) {
    *lo = *hi = t;
    *any = true;
  } else {
    *lo = std::min(*lo, t);
    *hi = std::max(*hi, t);
  }
}

// Merges the contents of consecutive segments, added oldest first: samples per series in time
// order (a timestamp seen twice keeps its first value), events and steps in their original
// order. Each segment is added as it is read, so a compaction holds the merged result and one
// input, not every input and the result (a 5-minute window of a busy node is tens of MB
// decoded; holding it twice was the agent's highest memory peak).
class ContentsMerger {
 public:
  void Add(SegmentContents&& part) {
    for (auto& batch : part.series) {
      auto& dst = by_ref_[batch.ref];
      if (dst.empty()) {
        dst = std::move(batch.samples);
        continue;
      }
      const bool in_order = batch.samples.empty() || dst.back().t < batch.samples.front().t;
      dst.insert(dst.end(), batch.samples.begin(), batch.samples.end());
      std::vector<Sample>().swap(batch.samples);  // freed now, not with the whole part
      if (!in_order) {
        std::stable_sort(dst.begin(), dst.end(), [](const Sample& a, const Sample& b) { return a.t < b.t; });
        dst.erase(
            std::unique(dst.begin(), dst.end(), [](const Sample& a, const Sample& b) { return a.t == b.t; }),
            dst.end());
      }
    }
    std::move(part.events.begin(), part.events.end(), std::back_inserter(out_.events));
    std::move(part.steps.begin(), part.steps.end(), std::back_inserter(out_.steps));
  }
  SegmentContents Take() && {
    out_.series.reserve(by_ref_.size());
    for (auto& [ref, samples] : by_ref_) out_.series.push_back(SeriesBatch{ref, std::move(samples)});
    by_ref_.clear();
    return std::move(out_);
  }

 private:
  SegmentContents out_;
  std::map<SeriesRef, std::vector<Sample>> by_ref_;
};

}  // namespace

struct DiskStore::Impl {
  std::string dir;
  uint64_t disk_budget = 0;
  Fd lock_fd;
  Fd dir_fd;
  Fd series_fd;

  // Held for index and file changes; never across a Load callback or a compaction's encoding.
  mutable std::mutex mu;
  std::mutex compact_mu;  // one compaction at a time
  // One segment write at a time, so that seqs are committed in order: a compaction never sees
  // seq k+1 on disk while k is still being written, and so never covers k by mistake.
  std::mutex write_mu;
  std::vector<SegmentInfo> segments;  // in SegmentOrder
  uint64_t next_seq = 1;
  uint64_t series_log_bytes = 0;  // the valid length of series.log
  bool series_dirty = false;      // appended since the last fdatasync
  uint64_t segments_deleted = 0;
  uint64_t corrupt_segments = 0;
  std::vector<std::string> quarantined;  // the .corrupt files in the directory, oldest first

  std::string PathOf(std::string_view name) const { return dir + "/" + std::string(name); }
  // Opens a file of the directory by name, never through a symlink.
  Fd OpenAt(std::string_view name, int flags) const {
    return Fd(::openat(dir_fd.get(), std::string(name).c_str(), flags | O_CLOEXEC | O_NOFOLLOW, kFileMode));
  }

  // Moves a bad segment aside (kept for a human to inspect, out of the way of the next
  // load), counts it, and keeps at most kMaxQuarantined such files.
  void QuarantineLocked(const std::string& name) {
    const std::string to = name + std::string(kCorruptSuffix);
    if (::renameat(dir_fd.get(), name.c_str(), dir_fd.get(), to.c_str()) != 0) {
      ::unlinkat(dir_fd.get(), name.c_str(), 0);
    } else {
      quarantined.push_back(to);
      std::sort(quarantined.begin(), quarantined.end());  // segment names sort by sequence
      while (quarantined.size() > kMaxQuarantined) {
        ::unlinkat(dir_fd.get(), quarantined.front().c_str(), 0);
        quarantined.erase(quarantined.begin());
      }
    }
    ++corrupt_segments;
    std::erase_if(segments, [&](const SegmentInfo& s) { return s.name == name; });
  }

  void DeleteLocked(size_t index) {
    ::unlinkat(dir_fd.get(), segments[index].name.c_str(), 0);
    segments.erase(segments.begin() + static_cast<ptrdiff_t>(index));
    ++segments_deleted;
  }

  uint64_t BytesLocked() const {
    uint64_t b = series_log_bytes;
    for (const auto& s : segments) b += s.bytes;
    return b;
  }

  // The next run of segments to merge (empty when none), with the zstd level for its tier.
  std::vector<SegmentInfo> PickCompactionLocked(int* level) const;
  Status OpenSeriesLog();
  Status ScanSegments();
  Result<SegmentContents> ReadSegment(const SegmentInfo& info) const;
  Result<SegmentInfo> WriteSegmentFileLocked(const BuiltSegment& built, std::string_view name);
  Status ReadSeriesLog(const std::function<void(const SeriesDefinition&)>& on_series) const;
};

DiskStore::DiskStore() : impl_(std::make_unique<Impl>()) {}
DiskStore::~DiskStore() {
  if (impl_ && impl_->series_dirty && impl_->series_fd.valid()) ::fdatasync(impl_->series_fd.get());
}

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir, uint64_t disk_budget_bytes) {
  if (dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "disk store: empty directory");
  std::error_code ec;
  if (const auto parent = std::filesystem::path(dir).parent_path(); !parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) return MakeErrorF(ErrorCode::kIo, "create {}: {}", parent.string(), ec.message());
  }
  if (::mkdir(dir.c_str(), kDirMode) != 0 && errno != EEXIST) return ErrnoError(ErrorCode::kIo, "create " + dir, errno);

  std::unique_ptr<DiskStore> store(new DiskStore());
  Impl& im = *store->impl_;
  im.dir = dir;
  im.disk_budget = disk_budget_bytes;
  // The directory itself may be a symlink the operator made (/var/lib/ithbat → a data disk);
  // nothing inside it is ever followed.
  im.dir_fd = Fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!im.dir_fd.valid()) return ErrnoError(ErrorCode::kIo, "open " + dir, errno);
  // A directory made by an earlier version, or by hand, is tightened to the owner's.
  struct stat dir_stat {};
  if (::fstat(im.dir_fd.get(), &dir_stat) == 0 && (dir_stat.st_mode & 077) != 0) {
    if (::fchmod(im.dir_fd.get(), dir_stat.st_mode & kDirMode) != 0) {
      return ErrnoError(ErrorCode::kIo, fmt::format("chmod {:o} {}", kDirMode, dir), errno);
    }
  }

  // flock, not fcntl locks: tied to this open file description, so a second DiskStore in the
  // same process is refused too, and released by the kernel however the process dies.
  std::string lock_path = im.PathOf(kLockName);
  im.lock_fd = im.OpenAt(kLockName, O_RDWR | O_CREAT);
  if (!im.lock_fd.valid()) return ErrnoError(ErrorCode::kIo, "open " + lock_path, errno);
  ::fchmod(im.lock_fd.get(), kFileMode);  // an earlier version's 0644
  if (::flock(im.lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return MakeErrorF(ErrorCode::kUnavailable, "{} is in use by another agent (lock {})", dir, lock_path);
    }
    return ErrnoError(ErrorCode::kIo, "flock " + lock_path, errno);
  }
  // The holder's pid, for a human wondering who holds the directory.
  if (::ftruncate(im.lock_fd.get(), 0) == 0) {
    std::string pid = fmt::format("{}\n", ::getpid());
    (void)::pwrite(im.lock_fd.get(), pid.data(), pid.size(), 0);
  }

  if (auto st = im.ScanSegments(); !st) return std::unexpected(st.error());
  if (auto st = im.OpenSeriesLog(); !st) return std::unexpected(st.error());
  return store;
}

Status DiskStore::Impl::ScanSegments() {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError(ErrorCode::kIo, "opendir " + dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);

  bool removed_tmp = false;
  for (const auto& name : names) {
    if (name.ends_with(kTmpSuffix)) {
      // A write that never reached its rename: never part of the history.
      ::unlinkat(dir_fd.get(), name.c_str(), 0);
      removed_tmp = true;
      continue;
    }
    if (name.ends_with(kCorruptSuffix)) {
      quarantined.push_back(name);
      continue;
    }
    if (!IsSegmentName(name)) continue;
    // Files of an earlier version were 0644: tightened as they are found.
    ::fchmodat(dir_fd.get(), name.c_str(), kFileMode, 0);
    Fd fd = OpenAt(name, O_RDONLY);
    struct stat st;
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) continue;
    std::string head(kSegmentHeaderBytes, '\0');
    Result<SegmentHeader> header = MakeError(ErrorCode::kCorrupt, "short segment");
    if (static_cast<uint64_t>(st.st_size) >= kSegmentHeaderBytes + kSegmentTrailerBytes &&
        PreadAll(fd.get(), head.data(), head.size(), 0, name)) {
      header = DecodeHeader(head);
    }
    if (header && static_cast<uint64_t>(st.st_size) !=
                      kSegmentHeaderBytes + header->zstd_bytes + kSegmentTrailerBytes) {
      header = MakeError(ErrorCode::kCorrupt, "segment size does not match its header");
    }
    if (!header) {
      QuarantineLocked(name);
      continue;
    }
    segments.push_back(SegmentInfo{name, *header, static_cast<uint64_t>(st.st_size)});
    next_seq = std::max(next_seq, header->last_seq + 1);
  }
  std::sort(segments.begin(), segments.end(), SegmentOrder);
  std::sort(quarantined.begin(), quarantined.end());
  while (quarantined.size() > kMaxQuarantined) {
    ::unlinkat(dir_fd.get(), quarantined.front().c_str(), 0);
    quarantined.erase(quarantined.begin());
    removed_tmp = true;
  }
  if (removed_tmp) return SyncDir(dir_fd.get(), dir);
  return Ok();
}

Status DiskStore::Impl::OpenSeriesLog() {
  std::string path = PathOf(kSeriesLogName);
  if (::faccessat(dir_fd.get(), std::string(kSeriesLogName).c_str(), F_OK, AT_SYMLINK_NOFOLLOW) != 0) {
    std::string header(kSeriesHeaderBytes, '\0');
    std::copy(std::begin(kSeriesMagic), std::end(kSeriesMagic), header.begin());
    PutLe(&header[8], kSeriesLogVersion, 4);
    PutLe(&header[12], Crc32c(header.data(), 12), 4);
    if (auto st = WriteFileAtomic(dir_fd.get(), dir, std::string(kSeriesLogName), header); !st) return st;
  }
  series_fd = OpenAt(kSeriesLogName, O_RDWR | O_APPEND);
  if (!series_fd.valid()) return ErrnoError(ErrorCode::kIo, "open " + path, errno);
  ::fchmod(series_fd.get(), kFileMode);  // an earlier version's 0644
  struct stat st;
  if (::fstat(series_fd.get(), &st) != 0) return ErrnoError(ErrorCode::kIo, "stat " + path, errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string header(kSeriesHeaderBytes, '\0');
  if (size < kSeriesHeaderBytes || !PreadAll(series_fd.get(), header.data(), header.size(), 0, path) ||
      !std::equal(std::begin(kSeriesMagic), std::end(kSeriesMagic), header.begin()) ||
      GetLe(&header[12], 4) != Crc32c(header.data(), 12)) {
    // Created atomically, so a bad header is not a torn write but a foreign or damaged file:
    // refusing beats overwriting what may be someone's data.
    return MakeErrorF(ErrorCode::kCorrupt, "{}: not an ithbat series table", path);
  }
  if (uint32_t v = static_cast<uint32_t>(GetLe(&header[8], 4)); v != kSeriesLogVersion) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: unsupported version {}", path, v);
  }

  // Walk the records; the first one that is incomplete or fails its checksum marks the torn
  // tail of a write that a crash interrupted: everything from there is cut.
  uint64_t pos = kSeriesHeaderBytes;
  std::string payload;
  while (pos + kRecordHeaderBytes <= size) {
    char rh[kRecordHeaderBytes];
    if (!PreadAll(series_fd.get(), rh, sizeof(rh), static_cast<off_t>(pos), path)) break;
    uint32_t len = static_cast<uint32_t>(GetLe(rh, 4));
    uint32_t crc = static_cast<uint32_t>(GetLe(rh + 4, 4));
    if (len > kMaxSeriesRecordBytes || pos + kRecordHeaderBytes + len > size) break;
    payload.resize(len);
    if (!PreadAll(series_fd.get(), payload.data(), len, static_cast<off_t>(pos + kRecordHeaderBytes), path))
      break;
    if (Crc32c(payload, Crc32c(rh, 4)) != crc) break;
    pos += kRecordHeaderBytes + len;
  }
  if (pos != size) {
    if (::ftruncate(series_fd.get(), static_cast<off_t>(pos)) != 0 || ::fsync(series_fd.get()) != 0) {
      return ErrnoError(ErrorCode::kIo, "cut torn tail of " + path, errno);
    }
  }
  series_log_bytes = pos;
  return Ok();
}

Status DiskStore::DefineSeries(const SeriesDefinition& def) {
  std::string payload = codec::EncodeSeriesDefinition(def);
  if (payload.size() > kMaxSeriesRecordBytes) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "series definition of {} bytes", payload.size());
  }
  std::string frame(kRecordHeaderBytes, '\0');
  PutLe(&frame[0], payload.size(), 4);
  PutLe(&frame[4], Crc32c(payload, Crc32c(frame.data(), 4)), 4);
  frame += payload;

  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  Status st = WriteAll(im.series_fd.get(), frame, im.PathOf(kSeriesLogName));
  if (!st) {
    // A partial record would hide every later one behind a torn tail: take it back.
    if (::ftruncate(im.series_fd.get(), static_cast<off_t>(im.series_log_bytes)) != 0) {
      return ErrnoError(ErrorCode::kIo, "roll back " + im.PathOf(kSeriesLogName), errno);
    }
    return st;
  }
  im.series_log_bytes += frame.size();
  im.series_dirty = true;
  return Ok();
}

namespace {
Result<BuiltSegment> BuildSegment(const SegmentContents& contents, uint64_t first_seq, uint64_t last_seq,
                                  uint32_t flags, int level) {
  SegmentHeader h;
  h.flags = flags;
  h.first_seq = first_seq;
  h.last_seq = last_seq;
  bool any = false;
  for (const auto& batch : contents.series) {
    h.samples += batch.samples.size();
    for (const auto& s : batch.samples) ExtendRange(s.t, &any, &h.min_time, &h.max_time);
  }
  for (const auto& e : contents.events) ExtendRange(e.time, &any, &h.min_time, &h.max_time);
  for (const auto& s : contents.steps) {
    ExtendRange(s.span.start, &any, &h.min_time, &h.max_time);
    ExtendRange(s.span.end, &any, &h.min_time, &h.max_time);
  }
  if (contents.series.size() > UINT32_MAX || contents.events.size() > UINT32_MAX ||
      contents.steps.size() > UINT32_MAX) {
    return MakeError(ErrorCode::kResourceExhausted, "segment: too many records");
  }
  h.series = static_cast<uint32_t>(contents.series.size());
  h.events = static_cast<uint32_t>(contents.events.size());
  h.steps = static_cast<uint32_t>(contents.steps.size());

  std::string body = codec::EncodeBody(contents);
  if (body.size() > kMaxBodyBytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "segment body of {} bytes (at most {})", body.size(),
                      kMaxBodyBytes);
  }
  std::string file(kSegmentHeaderBytes, '\0');
  file.resize(kSegmentHeaderBytes + ZSTD_compressBound(body.size()));
  size_t z = ZSTD_compress(file.data() + kSegmentHeaderBytes, file.size() - kSegmentHeaderBytes, body.data(),
                           body.size(), level);
  if (ZSTD_isError(z)) return MakeErrorF(ErrorCode::kInternal, "zstd: {}", ZSTD_getErrorName(z));
  h.body_bytes = static_cast<uint32_t>(body.size());
  h.zstd_bytes = static_cast<uint32_t>(z);
  file.resize(kSegmentHeaderBytes + z);
  std::string header = EncodeHeader(h);
  std::copy(header.begin(), header.end(), file.begin());
  char crc[4];
  PutLe(crc, Crc32c(file), 4);
  file.append(crc, 4);

  return BuiltSegment{h, std::move(file)};
}
}  // namespace

Result<SegmentInfo> DiskStore::Impl::WriteSegmentFileLocked(const BuiltSegment& built,
                                                            std::string_view name) {
  if (auto st = WriteFileAtomic(dir_fd.get(), dir, std::string(name), built.file); !st) {
    return std::unexpected(st.error());
  }
  return SegmentInfo{std::string(name), built.header, built.file.size()};
}

Status DiskStore::WriteSegment(const SegmentContents& contents) {
  if (contents.series.empty() && contents.events.empty() && contents.steps.empty()) return Ok();
  Impl& im = *impl_;
  std::lock_guard write_lock(im.write_mu);
  uint64_t seq;
  {
    std::lock_guard lock(im.mu);
    seq = im.next_seq++;
  }
  // Encoding and compression need no lock; a failed write leaves a gap in the seqs, which is
  // harmless (seqs order segments, they need not be dense).
  auto built = BuildSegment(contents, seq, seq, 0, kFlushZstdLevel);
  if (!built) return std::unexpected(built.error());
  std::lock_guard lock(im.mu);
  // The segment may reference series defined since the last segment: their definitions must
  // be durable before it is.
  if (im.series_dirty) {
    if (::fdatasync(im.series_fd.get()) != 0)
      return ErrnoError(ErrorCode::kIo, "fdatasync series.log", errno);
    im.series_dirty = false;
  }
  auto info = im.WriteSegmentFileLocked(*built, SegmentName(seq));
  if (!info) return std::unexpected(info.error());
  im.segments.push_back(std::move(*info));
  std::sort(im.segments.begin(), im.segments.end(), SegmentOrder);
  return Ok();
}

Result<SegmentContents> DiskStore::Impl::ReadSegment(const SegmentInfo& info) const {
  std::string path = PathOf(info.name);
  Fd fd = OpenAt(info.name, O_RDONLY);
  if (!fd.valid())
    return ErrnoError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(ErrorCode::kIo, "stat " + path, errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kSegmentHeaderBytes + kSegmentTrailerBytes || size > kSegmentHeaderBytes + kMaxBodyBytes * 2) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: bad size {}", path, size);
  }
  std::string file(size, '\0');
  if (auto r = PreadAll(fd.get(), file.data(), size, 0, path); !r) return std::unexpected(r.error());
  auto h = DecodeHeader(file);
  if (!h) return MakeErrorF(ErrorCode::kCorrupt, "{}: {}", path, h.error().message);
  if (size != kSegmentHeaderBytes + h->zstd_bytes + kSegmentTrailerBytes) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: size does not match header", path);
  }
  if (GetLe(&file[size - 4], 4) != Crc32c(file.data(), size - 4)) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: checksum mismatch", path);
  }
  std::string body(h->body_bytes, '\0');
  size_t n = ZSTD_decompress(body.data(), body.size(), file.data() + kSegmentHeaderBytes, h->zstd_bytes);
  if (ZSTD_isError(n) || n != body.size()) return MakeErrorF(ErrorCode::kCorrupt, "{}: bad zstd body", path);
  SegmentContents contents;
  if (auto r = codec::DecodeBody(body, &contents); !r) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: {}", path, r.error().message);
  }
  if (contents.series.size() != h->series || contents.events.size() != h->events ||
      contents.steps.size() != h->steps) {
    return MakeErrorF(ErrorCode::kCorrupt, "{}: counts do not match header", path);
  }
  return contents;
}

Status DiskStore::Impl::ReadSeriesLog(const std::function<void(const SeriesDefinition&)>& on_series) const {
  uint64_t size;
  {
    std::lock_guard lock(mu);
    size = series_log_bytes;
  }
  std::string path = PathOf(kSeriesLogName);
  std::string data(size, '\0');
  if (auto r = PreadAll(series_fd.get(), data.data(), size, 0, path); !r) return r;
  uint64_t pos = kSeriesHeaderBytes;
  while (pos + kRecordHeaderBytes <= size) {
    uint32_t len = static_cast<uint32_t>(GetLe(&data[pos], 4));
    uint32_t crc = static_cast<uint32_t>(GetLe(&data[pos + 4], 4));
    if (pos + kRecordHeaderBytes + len > size) break;
    std::string_view payload(data.data() + pos + kRecordHeaderBytes, len);
    if (Crc32c(payload, Crc32c(&data[pos], 4)) != crc) {
      return MakeErrorF(ErrorCode::kCorrupt, "{}: record at {} changed since open", path, pos);
    }
    SeriesDefinition def;
    // A record that checks out but does not decode is from a newer writer or a bug: skipping
    // it loses one series, not the rest of the table.
    if (codec::DecodeSeriesDefinition(payload, &def)) on_series(def);
    pos += kRecordHeaderBytes + len;
  }
  return Ok();
}

Status DiskStore::Load(const std::function<void(const SeriesDefinition&)>& on_series,
                       const std::function<void(const SegmentContents&)>& on_segment) {
  Impl& im = *impl_;
  if (auto st = im.ReadSeriesLog(on_series); !st) return st;

  std::vector<SegmentInfo> todo;
  {
    std::lock_guard lock(im.mu);
    todo = im.segments;
  }
  uint64_t loaded_through = 0;  // highest seq replayed so far
  bool deleted_any = false;
  for (const SegmentInfo& info : todo) {
    if (info.header.last_seq <= loaded_through) {
      // Every seq of this one is in a compacted segment already replayed: the leftover of a
      // compaction interrupted between writing the merged segment and deleting its inputs.
      std::lock_guard lock(im.mu);
      auto it = std::find_if(im.segments.begin(), im.segments.end(),
                             [&](const SegmentInfo& s) { return s.name == info.name; });
      if (it != im.segments.end()) {
        im.DeleteLocked(static_cast<size_t>(it - im.segments.begin()));
        deleted_any = true;
      }
      continue;
    }
    auto contents = im.ReadSegment(info);
    if (!contents) {
      if (contents.error().code == ErrorCode::kNotFound) {
        std::lock_guard lock(im.mu);
        std::erase_if(im.segments, [&](const SegmentInfo& s) { return s.name == info.name; });
        continue;
      }
      // The OS refused the read (permissions, a failing disk): skipped but left in place,
      // since the file may be fine; its history is missing from this run only.
      if (contents.error().code == ErrorCode::kIo) continue;
      std::lock_guard lock(im.mu);
      im.QuarantineLocked(info.name);
      continue;
    }
    on_segment(*contents);
    loaded_through = std::max(loaded_through, info.header.last_seq);
  }
  if (deleted_any) {
    std::lock_guard lock(im.mu);
    return SyncDir(im.dir_fd.get(), im.dir);
  }
  return Ok();
}

std::vector<SegmentInfo> DiskStore::Impl::PickCompactionLocked(int* level) const {
  const auto& segs = segments;
  // Segments whose seq ranges overlap (leftovers of an interrupted compaction, not yet removed
  // by Load) are never merged: merging them again would duplicate their contents.
  // In SegmentOrder (first_seq ascending), j overlaps an earlier segment iff its first_seq is
  // within the highest last_seq before it, and a later one iff the next one starts within it.
  std::vector<bool> clean(segs.size(), true);
  uint64_t max_last = 0;
  for (size_t j = 0; j < segs.size(); ++j) {
    if (j > 0 && segs[j].header.first_seq <= max_last) clean[j] = false;
    if (j + 1 < segs.size() && segs[j + 1].header.first_seq <= segs[j].header.last_seq) clean[j] = false;
    max_last = std::max(max_last, segs[j].header.last_seq);
  }
  for (const CompactionTier& tier : kTiers) {
    for (size_t i = 0; i < segs.size();) {
      int64_t key = WindowOf(segs[i].header.max_time, tier.window);
      size_t j = i;
      uint64_t bytes = 0;
      std::vector<SegmentInfo> run;
      while (j < segs.size() && WindowOf(segs[j].header.max_time, tier.window) == key && clean[j] &&
             (run.empty() || bytes + segs[j].bytes <= kCompactMaxBytes)) {
        bytes += segs[j].bytes;
        run.push_back(segs[j]);
        ++j;
      }
      // Closed: some later segment exists (its window is later, or this run hit the size cap).
      if (run.size() >= 2 && j < segs.size()) {
        *level = tier.zstd_level;
        return run;
      }
      i = std::max(j, i + 1);
    }
  }
  return {};
}

Status DiskStore::Compact() {
  Impl& im = *impl_;
  std::lock_guard compact_lock(im.compact_mu);
  for (;;) {
    std::vector<SegmentInfo> run;
    int level = kFlushZstdLevel;
    {
      std::lock_guard lock(im.mu);
      run = im.PickCompactionLocked(&level);
    }
    if (run.size() < 2) return Ok();

    // Read, merge and write without the index lock: flushes go on meanwhile.
    ContentsMerger merger;
    size_t read = 0;
    for (const auto& info : run) {
      auto c = im.ReadSegment(info);
      if (!c) {
        if (c.error().code == ErrorCode::kIo) return std::unexpected(c.error());
        // Gone (retention ran meanwhile, or someone removed it) or bad: out of the index, and
        // pick again.
        std::lock_guard lock(im.mu);
        if (c.error().code == ErrorCode::kCorrupt) {
          im.QuarantineLocked(info.name);
        } else {
          std::erase_if(im.segments, [&](const SegmentInfo& s) { return s.name == info.name; });
        }
        break;
      }
      merger.Add(std::move(*c));
      ++read;
    }
    if (read != run.size()) continue;
    SegmentContents merged = std::move(merger).Take();

    uint64_t first = run.front().header.first_seq, last = run.back().header.last_seq;
    auto built = BuildSegment(merged, first, last, kFlagCompacted, level);
    if (!built) return std::unexpected(built.error());
    // The merged file takes the first input's name: the rename replaces that input in one
    // step, and a crash before the other inputs are deleted leaves segments whose seqs the
    // merged one covers, which Load recognises and drops.
    std::lock_guard lock(im.mu);
    for (const auto& info : run) {
      bool present = std::any_of(im.segments.begin(), im.segments.end(),
                                 [&](const SegmentInfo& s) { return s.name == info.name; });
      if (!present) return Ok();  // retention took an input meanwhile; try next time
    }
    auto written = im.WriteSegmentFileLocked(*built, run.front().name);
    if (!written) return std::unexpected(written.error());
    for (size_t k = 1; k < run.size(); ++k) ::unlinkat(im.dir_fd.get(), run[k].name.c_str(), 0);
    std::erase_if(im.segments, [&](const SegmentInfo& s) {
      return std::any_of(run.begin(), run.end(), [&](const SegmentInfo& r) { return r.name == s.name; });
    });
    im.segments.push_back(std::move(*written));
    std::sort(im.segments.begin(), im.segments.end(), SegmentOrder);
    if (auto st = SyncDir(im.dir_fd.get(), im.dir); !st) return st;
  }
}

void DiskStore::EnforceRetention(TimeNs before) {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  bool deleted = false;
  for (size_t i = 0; i < im.segments.size();) {
    if (im.segments[i].header.max_time < before) {
      im.DeleteLocked(i);
      deleted = true;
    } else {
      ++i;
    }
  }
  // Over budget: the oldest history goes first (segments are in seq order, which is age).
  while (!im.segments.empty() && im.BytesLocked() > im.disk_budget) {
    im.DeleteLocked(0);
    deleted = true;
  }
  if (deleted) (void)SyncDir(im.dir_fd.get(), im.dir);
}

DiskStats DiskStore::Stats() const {
  const Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  DiskStats s;
  s.bytes = im.BytesLocked();
  s.segments = im.segments.size();
  s.segments_deleted = im.segments_deleted;
  s.corrupt_segments = im.corrupt_segments;
  return s;
}

}  // namespace ithbat::store
