#include "collect/joblog/tail_source.h"

#include <cerrno>
#include <charconv>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ithbat::collect::joblog {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

bool ParseInt(std::string_view text, int32_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

Result<TailFile> ParseTailSpec(std::string_view spec) {
  TailFile f;
  size_t q = spec.find('?');
  f.path = std::string(spec.substr(0, q));
  if (f.path.empty()) return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-tail: empty path in '{}'", spec);
  if (f.path.size() > 4096) return MakeError(ErrorCode::kInvalidArgument, "joblog-tail: path too long");
  if (q == std::string_view::npos) return f;
  std::string_view rest = spec.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-tail: '{}' in '{}' is not key=value", kv, spec);
    }
    std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "job") {
      if (value.empty() || value.size() > 256)
        return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-tail: bad job in '{}'", spec);
      f.identity.job = std::string(value);
    } else if (key == "rank" || key == "local_rank") {
      int32_t v = -1;
      if (!ParseInt(value, v) || v < 0)
        return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-tail: bad {} '{}' in '{}'", key, value, spec);
      (key == "rank" ? f.identity.rank : f.identity.local_rank) = v;
    } else {
      return MakeErrorF(ErrorCode::kInvalidArgument,
                        "joblog-tail: unknown key '{}' in '{}' (job, rank, local_rank)", key, spec);
    }
  }
  return f;
}

TailCaptureSource::TailCaptureSource(TailSourceOptions options) : options_(std::move(options)) {
  if (options_.max_bytes_per_drain == 0)
    options_.max_bytes_per_drain = TailSourceOptions{}.max_bytes_per_drain;
  for (auto& spec : options_.files) files_.push_back(File{spec});
}

TailCaptureSource::~TailCaptureSource() { Stop(); }

void TailCaptureSource::Open(File& f, bool at_end) {
  // O_NOFOLLOW: the path is reopened after every rotation, and whoever can write the log
  // directory could put a symlink there (to a FIFO, a device, a file the job may not read).
  // O_NONBLOCK: a FIFO opens without waiting for a writer, then is refused as not regular.
  int fd = open(f.spec.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  if (fd < 0) return;  // not there (yet): tried again next Drain
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return;
  }
  f.fd = fd;
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.offset = at_end ? static_cast<uint64_t>(st.st_size) : 0;
}

void TailCaptureSource::Close(File& f) {
  if (f.fd >= 0) close(f.fd);
  f.fd = -1;
}

Status TailCaptureSource::Start() {
  if (started_) return Ok();
  started_ = true;
  for (auto& f : files_) Open(f, !options_.from_start);
  return Ok();
}

void TailCaptureSource::Stop() {
  for (auto& f : files_) Close(f);
  started_ = false;
}

std::optional<StreamInfo> TailCaptureSource::Stream(int32_t pid) const {
  if (pid >= 0) return std::nullopt;
  size_t i = static_cast<size_t>(-static_cast<int64_t>(pid) - 1);
  if (i >= files_.size()) return std::nullopt;
  return StreamInfo{files_[i].spec.identity, files_[i].spec.path};
}

size_t TailCaptureSource::Drain(std::vector<CaptureRecord>& out, size_t max_records) {
  if (!started_) return 0;
  size_t n = 0;
  std::string buf;
  for (size_t i = 0; i < files_.size() && n < max_records; ++i) {
    File& f = files_[i];
    if (f.fd < 0) {
      Open(f, false);  // appeared after Start, or reopened after rotation: from its start
      if (f.fd < 0) continue;
    }
    // Rotated (the path names another file now) or truncated: start over from the beginning
    // of what the path names. The old file's unread tail is not read (it was renamed away).
    struct stat by_path {};
    if (stat(f.spec.path.c_str(), &by_path) == 0 && (by_path.st_ino != f.ino || by_path.st_dev != f.dev)) {
      Close(f);
      ++reopens_;
      f.gap_pending = true;  // the old file's unterminated last line must not join the new one's
      Open(f, false);
      if (f.fd < 0) continue;
    }
    struct stat st {};
    if (fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) < f.offset) {
      f.offset = 0;
      ++reopens_;
      f.gap_pending = true;
    }
    size_t budget = options_.max_bytes_per_drain;
    const TimeNs now = NowNs();
    while (budget > 0 && n < max_records) {
      buf.resize(std::min(budget, kReadChunk));
      ssize_t got = pread(f.fd, buf.data(), buf.size(), static_cast<off_t>(f.offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      CaptureRecord r;
      r.type = CaptureRecord::Type::kData;
      r.pid = -static_cast<int32_t>(i) - 1;
      r.tid = r.pid;
      r.fd = -1;
      r.stream = 1;
      r.time = now;
      r.total_len = static_cast<uint64_t>(got);
      r.data.assign(buf.data(), static_cast<size_t>(got));
      r.gap_before = std::exchange(f.gap_pending, false);
      f.offset += static_cast<uint64_t>(got);
      budget -= static_cast<size_t>(got);
      counters_.records++;
      counters_.bytes += static_cast<uint64_t>(got);
      out.push_back(std::move(r));
      ++n;
    }
  }
  return n;
}

}  // namespace ithbat::collect::joblog
