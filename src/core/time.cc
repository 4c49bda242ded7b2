#include "core/time.h"

#include <charconv>
#include <cmath>
#include <ctime>

namespace ithbat {
namespace {

TimeNs ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

// Splits "12.5ms" into 12.5 and "ms". Rejects empty numbers and trailing garbage in the number.
Result<std::pair<double, std::string_view>> SplitNumberSuffix(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' does not start with a number", text);
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' is not a number", text.substr(0, i));
  }
  return std::pair{value, text.substr(i)};
}

}  // namespace

TimeNs NowNs() { return ClockNs(CLOCK_REALTIME); }
TimeNs MonotonicNowNs() { return ClockNs(CLOCK_MONOTONIC); }

Result<TimeNs> ParseDuration(std::string_view text) {
  auto split = SplitNumberSuffix(text);
  if (!split) return std::unexpected(split.error());
  auto [value, unit] = *split;
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1e9;
  else if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "m") scale = 60e9;
  else if (unit == "h") scale = 3600e9;
  else if (unit == "d") scale = 86400e9;
  else return MakeErrorF(ErrorCode::kInvalidArgument, "unknown duration unit '{}' in '{}' (ns, us, ms, s, m, h, d)", unit, text);
  double ns = value * scale;
  if (ns > 9.2e18) return MakeErrorF(ErrorCode::kInvalidArgument, "duration '{}' is too large", text);
  return static_cast<TimeNs>(std::llround(ns));
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  auto split = SplitNumberSuffix(text);
  if (!split) return std::unexpected(split.error());
  auto [value, unit] = *split;
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else return MakeErrorF(ErrorCode::kInvalidArgument, "unknown size unit '{}' in '{}' (B, KiB, MiB, GiB, KB, MB, GB)", unit, text);
  double bytes = value * scale;
  if (bytes > 1.8e19) return MakeErrorF(ErrorCode::kInvalidArgument, "size '{}' is too large", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatRfc3339(TimeNs t) {
  TimeNs secs = t / kNsPerSec;
  TimeNs nanos = t % kNsPerSec;
  if (nanos < 0) {
    nanos += kNsPerSec;
    secs -= 1;
  }
  time_t tt = static_cast<time_t>(secs);
  tm utc{};
  gmtime_r(&tt, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, nanos);
}

Result<TimeNs> ParseTimestamp(std::string_view text) {
  if (text.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty timestamp");
  if (text.find('T') == std::string_view::npos) {
    // Unix seconds with an optional fraction, parsed as integers: a double would lose the
    // nanoseconds of a present-day timestamp (it has 53 bits; ns since 1970 need 61).
    std::string_view whole = text, frac;
    if (auto dot = text.find('.'); dot != std::string_view::npos) {
      whole = text.substr(0, dot);
      frac = text.substr(dot + 1);
    }
    bool negative = !whole.empty() && whole.front() == '-';
    if (negative) whole.remove_prefix(1);
    int64_t secs = 0;
    auto [ptr, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), secs);
    bool digits_only = !frac.empty() || !whole.empty();
    for (char c : frac) digits_only = digits_only && std::isdigit(static_cast<unsigned char>(c));
    if (whole.empty() || ec != std::errc() || ptr != whole.data() + whole.size() || !digits_only ||
        secs > 9'000'000'000LL) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' is neither RFC 3339 nor Unix seconds", text);
    }
    TimeNs nanos = 0, scale = 100'000'000;
    for (size_t i = 0; i < frac.size() && scale > 0; ++i, scale /= 10) nanos += (frac[i] - '0') * scale;
    TimeNs total = secs * kNsPerSec + nanos;
    return negative ? -total : total;
  }
  // YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)
  std::string s(text);
  tm parts{};
  int consumed = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &parts.tm_year, &parts.tm_mon, &parts.tm_mday,
             &parts.tm_hour, &parts.tm_min, &parts.tm_sec, &consumed) != 6) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' is not an RFC 3339 time", text);
  }
  // Each field in its range (timegm would roll month 13 into the next year), and the instant
  // within what int64 nanoseconds hold (years 1677-2262; the same bound as Unix seconds above):
  // a year 9999 must be refused, not wrap to 1653.
  if (parts.tm_year < 1700 || parts.tm_year > 2250 || parts.tm_mon < 1 || parts.tm_mon > 12 || parts.tm_mday < 1 ||
      parts.tm_mday > 31 || parts.tm_hour < 0 || parts.tm_hour > 23 || parts.tm_min < 0 || parts.tm_min > 59 ||
      parts.tm_sec < 0 || parts.tm_sec > 60) {
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "'{}' is outside the times this accepts (years 1700-2250, fields in their ranges)", text);
  }
  parts.tm_year -= 1900;
  parts.tm_mon -= 1;
  TimeNs nanos = 0;
  size_t pos = static_cast<size_t>(consumed);
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    TimeNs scale = 100'000'000;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      nanos += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
  }
  TimeNs offset = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int hh = 0, mm = 0;
    if (sscanf(s.c_str() + pos + 1, "%2d:%2d", &hh, &mm) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "bad UTC offset in '{}'", text);
    }
    offset = (s[pos] == '+' ? 1 : -1) * (hh * 3600 + mm * 60) * kNsPerSec;
    pos += 6;
  } else {
    return MakeErrorF(ErrorCode::kInvalidArgument, "'{}' has no time zone ('Z' or ±HH:MM)", text);
  }
  if (pos != s.size()) return MakeErrorF(ErrorCode::kInvalidArgument, "trailing text in '{}'", text);
  time_t secs = timegm(&parts);
  return static_cast<TimeNs>(secs) * kNsPerSec + nanos - offset;
}

}  // namespace ithbat
