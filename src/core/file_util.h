#pragma once
// Bounded file reading and allocation-free text scanning for the collectors that read /proc and
// /sys. Every source file is treated as untrusted input: a read never exceeds its bound (a
// /proc file reports size 0, so the size cannot be trusted either), and every parse error
// quotes the offending text, cut and escaped so that it is safe in logs and JSON.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "core/result.h"

namespace ithbat {

// Owns a file descriptor and closes it on every return path. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// The whole content of a regular file, at most max_bytes. Errors:
//   kNotFound           the file (or a directory on its path) does not exist
//   kPermission         EACCES / EPERM
//   kUnavailable        the kernel refuses the read as unsupported (EOPNOTSUPP: e.g.
//                       /proc/pressure/* on a kernel booted with psi=0)
//   kInvalidArgument    not a regular file (a FIFO or device could block or never end)
//   kResourceExhausted  the file holds more than max_bytes
//   kIo                 any other open/read failure
// Messages name the path.
Result<std::string> ReadFileBounded(const std::filesystem::path& path, size_t max_bytes);

// The same, into a caller-owned buffer whose capacity is reused: a collector that reads the
// same file every tick allocates only while the buffer grows. *out holds the content on
// success and is unspecified (but valid) on error.
Status ReadFileBoundedInto(const std::filesystem::path& path, size_t max_bytes, std::string* out);

// Text for an error message: at most 64 bytes of `text` (then "..."), with bytes outside
// printable ASCII written as \xNN so that garbage from a file cannot break a log line or JSON.
// The same cut at max_bytes (an exception's text, which may quote what it failed on).
std::string QuoteForError(std::string_view text, size_t max_bytes);
inline std::string QuoteForError(std::string_view text) { return QuoteForError(text, 64); }

// Lines of a text, without the '\n' (a final line without '\n' is a line; a trailing '\n' does
// not make an empty last line). Views point into the text; nothing is allocated.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : rest_(text) {}
  bool Next(std::string_view* line);
  // 1-based number of the line last returned by Next (0 before the first).
  size_t line_number() const { return line_number_; }

 private:
  std::string_view rest_;
  size_t line_number_ = 0;
};

// Fields of a line separated by runs of spaces and tabs. Views point into the line.
class FieldReader {
 public:
  explicit FieldReader(std::string_view line) : rest_(line) {}
  bool Next(std::string_view* field);
  // What is left after the fields taken so far, leading blanks skipped.
  std::string_view Rest();

 private:
  std::string_view rest_;
};

// Strict number parsing with std::from_chars: the whole text must be the number (no blanks, no
// sign on unsigned, no trailing bytes). Errors: kParse naming the text (QuoteForError).
Result<uint64_t> ParseUint64(std::string_view text);
Result<int64_t> ParseInt64(std::string_view text);
// Finite values only: /proc and /sys never print nan or inf, and one would poison every rate
// computed from the series.
Result<double> ParseDouble(std::string_view text);

}  // namespace ithbat
