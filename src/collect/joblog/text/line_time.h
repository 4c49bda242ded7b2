#pragma once
// The wall-clock time a log line was stamped with, read from the line's start: what lets an
// offline replay (`ithbat replay --times stamped`) date a job's events when they happened
// instead of by line number. The agent does not need it (it dates a line when it captures it).
//
// Stamps found (the first one within the line's first kLineTimeSearchBytes, after any prefix
// such as "[rank0]:[titan] " or "[INFO|trainer.py:4168] "), each seen in ../shared/data:
//   2020-10-01 11:52:42            fairseq, Megatron-Bridge "[2026-05-28 22:26:20]"
//   2025-06-25 12:55:32,539        Python logging (torchtitan, HF Trainer, DeepSpeed): , or . and
//                                  up to 9 fraction digits; a "T" between date and time, a "Z"
//                                  or a ±HH:MM / ±HHMM offset after it are read too (ISO 8601)
//   2024/05/01 12:00:00            slash-separated dates
//   E1206 18:44:12.715298746       glog / c10d ("[rank0]:[E1206 ...]"): month and day, no year
//   INFO 09-22 23:46:42            vLLM's logger: month and day, no year
//   Sep 22 23:46:41                syslog / journald: month and day, no year
//   [04:40:55 TP0]                 SGLang: time of day only
// A stamp without a year takes the year of the last stamp (the next year when that would put it
// over 180 days before the last stamp: a log across New Year; the year before when over 180 days
// after it), or, before any, LineClock's default year. A time of day alone takes the date of the
// last stamp (the next day when the clock went back by more than 12 hours: past midnight), or,
// before any, January 1 of the default year. Years outside 1970–2200 are no stamp. Times without an offset
// are read as UTC: a log rarely says its zone, and a replay compares a file's lines with each other.
//
// Ranges are checked (month 1–12, day within its month, hour < 24, minute < 60, second ≤ 60 for
// a leap second): "at step 2020-13-45" is no stamp. Nothing here allocates.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/time.h"

namespace ithbat::collect::joblog {

inline constexpr size_t kLineTimeSearchBytes = 96;

enum class StampKind : uint8_t {
  kFull,       // date with year and time of day
  kNoYear,     // month, day and time of day
  kTimeOfDay,  // time of day only
};

struct LineStamp {
  StampKind kind = StampKind::kFull;
  int year = 0, month = 0, day = 0;  // year 0 unless kFull; month and day 0 for kTimeOfDay
  int64_t ns_of_day = 0;             // since midnight, fraction included
  int64_t offset_seconds = 0;        // east of UTC, from a "+02:00"-style suffix
};

// The first stamp in the line's first kLineTimeSearchBytes, or nullopt.
std::optional<LineStamp> FindLineStamp(std::string_view line);

// Turns a file's stamps into times, in line order, filling a year or a date a stamp leaves out
// from the stamps before it (see above).
class LineClock {
 public:
  explicit LineClock(int default_year = 2000) : year_(default_year) {}
  // The time of a line, or nullopt when it carries no stamp.
  std::optional<TimeNs> Read(std::string_view line);
  // The time of the last stamped line read, or nullopt before the first.
  std::optional<TimeNs> last() const { return last_; }

 private:
  int year_;                    // the last stamp's year, or the default
  std::optional<int64_t> day_;  // the last stamp's date, in days since 1970-01-01
  int64_t ns_of_day_ = 0;       // the last stamp's time of day
  std::optional<TimeNs> last_;
};

}  // namespace ithbat::collect::joblog
