#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>

namespace ithbat {
namespace {

// Bytes asked of each read(): a /proc file is produced a page at a time anyway.
constexpr size_t kReadChunk = 16 * 1024;

ErrorCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
      return ErrorCode::kPermission;
    case EOPNOTSUPP:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kIo;
  }
}

using Fd = UniqueFd;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

Status ReadFileBoundedInto(const std::filesystem::path& path, size_t max_bytes, std::string* out) {
  out->clear();
  // O_NONBLOCK so that opening a FIFO by mistake cannot hang the caller before fstat rejects it.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    return ErrnoError(CodeForErrno(err), fmt::format("open {}", path.string()), err);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return ErrnoError(CodeForErrno(err), fmt::format("stat {}", path.string()), err);
  }
  if (!S_ISREG(st.st_mode)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: not a regular file", path.string());
  }
  if (st.st_size > 0 && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{}: {} bytes, more than the bound of {}", path.string(),
                      static_cast<uint64_t>(st.st_size), max_bytes);
  }
  // Read up to one byte past the bound: that byte is how a file that lies about its size (all
  // of /proc) is caught without reading it whole.
  const size_t limit = max_bytes == std::numeric_limits<size_t>::max() ? max_bytes : max_bytes + 1;
  for (;;) {
    const size_t have = out->size();
    if (have >= limit) break;
    const size_t want = std::min(kReadChunk, limit - have);
    out->resize(have + want);
    const ssize_t n = read(fd.get(), out->data() + have, want);
    if (n < 0) {
      const int err = errno;
      out->resize(have);
      if (err == EINTR) continue;
      return ErrnoError(CodeForErrno(err), fmt::format("read {}", path.string()), err);
    }
    out->resize(have + static_cast<size_t>(n));
    if (n == 0) break;
  }
  if (out->size() > max_bytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{}: more than the bound of {} bytes", path.string(),
                      max_bytes);
  }
  return Ok();
}

Result<std::string> ReadFileBounded(const std::filesystem::path& path, size_t max_bytes) {
  std::string out;
  if (Status s = ReadFileBoundedInto(path, max_bytes, &out); !s) return std::unexpected(std::move(s.error()));
  return out;
}

std::string QuoteForError(std::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size() + 8);
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(ch);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (cut) out += "...";
  return out;
}

bool LineReader::Next(std::string_view* line) {
  if (rest_.empty()) return false;
  const size_t nl = rest_.find('\n');
  if (nl == std::string_view::npos) {
    *line = rest_;
    rest_ = {};
  } else {
    *line = rest_.substr(0, nl);
    rest_.remove_prefix(nl + 1);
  }
  line_number_++;
  return true;
}

bool FieldReader::Next(std::string_view* field) {
  size_t i = 0;
  while (i < rest_.size() && IsBlank(rest_[i])) i++;
  if (i == rest_.size()) {
    rest_ = {};
    return false;
  }
  size_t j = i;
  while (j < rest_.size() && !IsBlank(rest_[j])) j++;
  *field = rest_.substr(i, j - i);
  rest_.remove_prefix(j);
  return true;
}

std::string_view FieldReader::Rest() {
  size_t i = 0;
  while (i < rest_.size() && IsBlank(rest_[i])) i++;
  rest_.remove_prefix(i);
  return rest_;
}

Result<uint64_t> ParseUint64(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return MakeErrorF(ErrorCode::kParse, "expected an unsigned integer, got '{}'", QuoteForError(text));
  }
  return v;
}

Result<int64_t> ParseInt64(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return MakeErrorF(ErrorCode::kParse, "expected an integer, got '{}'", QuoteForError(text));
  }
  return v;
}

Result<double> ParseDouble(std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) {
    return MakeErrorF(ErrorCode::kParse, "expected a finite number, got '{}'", QuoteForError(text));
  }
  return v;
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace ithbat
