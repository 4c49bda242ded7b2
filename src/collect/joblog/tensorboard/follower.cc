#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "collect/joblog/tensorboard/tensorboard.h"

namespace ithbat::collect::joblog::tensorboard {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + length CRC
constexpr size_t kFooterBytes = 4;   // data CRC
// Beyond any record a TensorBoard writer produces (protobuf's own limit is 2 GiB): a length
// this large with a valid CRC is garbage that happened to check out, not a record to skip.
constexpr uint64_t kMaxPlausibleRecordBytes = 2ull << 30;
constexpr size_t kReadChunk = 64 * 1024;

uint64_t LoadLe(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[k])) << (8 * k);
  return v;
}

}  // namespace

// ---- RecordReader ----

void RecordReader::Compact() {
  if (pos_ == 0) return;
  buffer_.erase(0, pos_);
  pos_ = 0;
}

void RecordReader::Append(std::string_view bytes) {
  if (broken_) return;
  // The rest of an oversize record is discarded as it arrives, never buffered.
  if (skip_bytes_ > 0 && buffered_bytes() == 0) {
    const uint64_t drop = std::min<uint64_t>(skip_bytes_, bytes.size());
    skip_bytes_ -= drop;
    consumed_ += drop;
    bytes.remove_prefix(static_cast<size_t>(drop));
  }
  Compact();
  buffer_.append(bytes);
}

RecordReader::Status RecordReader::Next(std::string_view& record) {
  if (broken_) return Status::kBroken;
  if (skip_bytes_ > 0) {
    const uint64_t drop = std::min<uint64_t>(skip_bytes_, buffered_bytes());
    skip_bytes_ -= drop;
    pos_ += static_cast<size_t>(drop);
    consumed_ += drop;
    if (skip_bytes_ > 0) return Status::kNeedMore;
  }
  if (buffered_bytes() < kHeaderBytes) return Status::kNeedMore;
  const char* h = buffer_.data() + pos_;
  const uint64_t length = LoadLe(h, 8);
  const uint32_t length_crc = static_cast<uint32_t>(LoadLe(h + 8, 4));
  if (MaskCrc(Crc32c(std::string_view(h, 8))) != length_crc || length > kMaxPlausibleRecordBytes) {
    broken_ = true;
    error_ = fmt::format("record length CRC mismatch at offset {}: the rest cannot be framed", consumed_);
    buffer_.clear();
    pos_ = 0;
    return Status::kBroken;
  }
  if (length > kMaxRecordBytes) {
    pos_ += kHeaderBytes;
    consumed_ += kHeaderBytes;
    skip_bytes_ = length + kFooterBytes;
    const uint64_t drop = std::min<uint64_t>(skip_bytes_, buffered_bytes());
    skip_bytes_ -= drop;
    pos_ += static_cast<size_t>(drop);
    consumed_ += drop;
    return Status::kSkippedOversize;
  }
  const size_t total = kHeaderBytes + static_cast<size_t>(length) + kFooterBytes;
  if (buffered_bytes() < total) return Status::kNeedMore;
  const std::string_view data(h + kHeaderBytes, static_cast<size_t>(length));
  const uint32_t data_crc = static_cast<uint32_t>(LoadLe(h + kHeaderBytes + length, 4));
  pos_ += total;
  consumed_ += total;
  if (MaskCrc(Crc32c(data)) != data_crc) return Status::kCorruptRecord;
  record = data;
  return Status::kRecord;
}

// ---- FileFollower ----

Result<FileFollower> FileFollower::Open(std::string path) {
  // O_NOFOLLOW: a symlink is refused, not followed to whatever it names. O_NONBLOCK: a FIFO
  // that slipped in opens without waiting for a writer (and is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path, err);
  }
  return FromFd(fd, std::move(path));
}

Result<FileFollower> FileFollower::FromFd(int fd, std::string name) {
  FileFollower f;
  f.path_ = std::move(name);
  f.fd_ = fd;  // owned from here: closed by ~FileFollower on every return below
  if (fd < 0) return MakeErrorF(ErrorCode::kInvalidArgument, "{}: no descriptor", f.path_);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError(ErrorCode::kIo, f.path_, errno);
  if (!S_ISREG(st.st_mode)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: not a regular file; not followed", f.path_);
  }
  f.dev_ = st.st_dev;
  f.ino_ = st.st_ino;
  return f;
}

FileFollower::FileFollower(FileFollower&& other) noexcept { *this = std::move(other); }

FileFollower& FileFollower::operator=(FileFollower&& other) noexcept {
  if (this != &other) {
    Close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    dev_ = other.dev_;
    ino_ = other.ino_;
    offset_ = other.offset_;
    reader_ = std::move(other.reader_);
    records_ = other.records_;
    scalars_ = other.scalars_;
    corrupt_records_ = other.corrupt_records_;
    oversize_records_ = other.oversize_records_;
    bytes_read_ = other.bytes_read_;
    restarts_ = other.restarts_;
  }
  return *this;
}

FileFollower::~FileFollower() { Close(); }

void FileFollower::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<size_t> FileFollower::Poll(std::vector<Scalar>& out, size_t max_bytes) {
  // Only ever the inode opened first: a path is never looked up again, so a job cannot swap
  // in another file (or a FIFO, a device) under it. A new file it opens is found by the
  // caller's next scan of its fds.
  struct stat st {};
  if (fd_ < 0) return MakeErrorF(ErrorCode::kIo, "{}: not open", path_);
  if (::fstat(fd_, &st) != 0) return ErrnoError(ErrorCode::kIo, path_, errno);
  if (static_cast<uint64_t>(st.st_size) < offset_) {  // truncated: the writer started over
    offset_ = 0;
    reader_ = RecordReader();
    ++restarts_;
  }
  if (reader_.broken()) return MakeErrorF(ErrorCode::kCorrupt, "{}: {}; not followed any more", path_, reader_.error());

  std::string chunk(kReadChunk, '\0');
  size_t total = 0;
  while (total < max_bytes) {
    const size_t want = std::min(kReadChunk, max_bytes - total);
    const ssize_t n = ::pread(fd_, chunk.data(), want, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, path_, errno);
    }
    if (n == 0) break;
    offset_ += static_cast<uint64_t>(n);
    total += static_cast<size_t>(n);
    bytes_read_ += static_cast<uint64_t>(n);
    // Frame after every chunk so the buffer holds at most one partial record.
    reader_.Append(std::string_view(chunk.data(), static_cast<size_t>(n)));
    for (;;) {
      std::string_view record;
      const auto status = reader_.Next(record);
      if (status == RecordReader::Status::kNeedMore) break;
      if (status == RecordReader::Status::kBroken) {
        return MakeErrorF(ErrorCode::kCorrupt, "{}: {}; not followed any more", path_, reader_.error());
      }
      if (status == RecordReader::Status::kSkippedOversize) {
        ++oversize_records_;
        continue;
      }
      ++records_;
      if (status == RecordReader::Status::kCorruptRecord) {
        ++corrupt_records_;
        continue;
      }
      auto scalars = DecodeEvent(record);
      if (!scalars) {
        ++corrupt_records_;
        continue;
      }
      scalars_ += scalars->size();
      for (Scalar& s : *scalars) out.push_back(std::move(s));
    }
    if (static_cast<size_t>(n) < want) break;  // reached the end of what is written
  }
  return total;
}

}  // namespace ithbat::collect::joblog::tensorboard
