#include "core/result.h"

#include <cstring>

namespace ithbat {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kParse: return "parse";
    case ErrorCode::kOutOfOrder: return "out_of_order";
    case ErrorCode::kDuplicate: return "duplicate";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kPermission: return "permission";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Error::ToString() const { return fmt::format("{}: {}", ErrorCodeName(code), message); }

std::unexpected<Error> ErrnoError(ErrorCode code, std::string_view context, int err) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof buf);  // GNU variant returns the text
  return MakeErrorF(code, "{}: {}", context, text);
}

}  // namespace ithbat
