#pragma once
// One clock for everything: CLOCK_REALTIME in nanoseconds since the Unix epoch. Sources with
// another clock (eBPF's CLOCK_MONOTONIC/BOOTTIME) convert at the collector.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace ithbat {

using TimeNs = int64_t;
inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;
inline constexpr TimeNs kMinTime = INT64_MIN;
inline constexpr TimeNs kMaxTime = INT64_MAX;

TimeNs NowNs();           // CLOCK_REALTIME
TimeNs MonotonicNowNs();  // CLOCK_MONOTONIC, for measuring durations only

// "1500ms", "10s", "5m", "24h", "7d", "250us", "100ns"; a bare number is seconds.
Result<TimeNs> ParseDuration(std::string_view text);
// "64MiB", "2GiB", "500KB", "1024"; binary (KiB) and decimal (KB) suffixes.
Result<uint64_t> ParseByteSize(std::string_view text);

// RFC 3339 with nanoseconds, UTC ("2026-11-30T03:51:38.123456789Z").
std::string FormatRfc3339(TimeNs t);
// Accepts RFC 3339 (with 'Z' or an offset) or a Unix timestamp in (fractional) seconds.
Result<TimeNs> ParseTimestamp(std::string_view text);

}  // namespace ithbat
