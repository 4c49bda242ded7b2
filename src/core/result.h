#pragma once
// Errors travel as values: every call that can fail returns Result<T> (std::expected with a
// small error type). No exceptions cross a module boundary; vendor return codes and -errno
// are converted where they are met.
#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/core.h>

namespace ithbat {

enum class ErrorCode {
  kInvalidArgument,  // the caller passed something malformed (bad selector, bad config)
  kNotFound,         // a file, series, symbol or library that is not there
  kParse,            // input that does not follow its format (a /proc file, a segment)
  kOutOfOrder,       // a sample older than the series' newest one
  kDuplicate,        // a second, different value for a timestamp already stored
  kCorrupt,          // stored data that fails its checksum
  kIo,               // the OS refused a read/write/open
  kUnavailable,      // a source that is down or degraded (hung call, lost GPU)
  kTimeout,          // a bounded wait that ran out
  kResourceExhausted,// a budget (memory, disk, size bound) would be exceeded
  kPermission,       // not allowed (auth, capabilities)
  kInternal,         // a broken invariant
};

std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  std::string ToString() const;
};

// [[nodiscard]] cannot be put on an alias template, so Result is a thin subclass.
template <class T>
class [[nodiscard]] Result : public std::expected<T, Error> {
 public:
  using std::expected<T, Error>::expected;
  Result(std::expected<T, Error> e) : std::expected<T, Error>(std::move(e)) {}  // NOLINT
};

using Status = Result<void>;

inline std::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

template <class... Args>
std::unexpected<Error> MakeErrorF(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return std::unexpected<Error>(Error{code, fmt::format(f, std::forward<Args>(args)...)});
}

// An errno value as an Error (strerror text plus context).
std::unexpected<Error> ErrnoError(ErrorCode code, std::string_view context, int err);

inline Status Ok() { return {}; }

}  // namespace ithbat
