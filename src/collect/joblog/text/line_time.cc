#include "collect/joblog/text/line_time.h"

#include <algorithm>
#include <array>
#include <chrono>

namespace ithbat::collect::joblog {
namespace {

constexpr int64_t kNsPerSecond = 1'000'000'000;
constexpr int64_t kNsPerDay = 86'400 * kNsPerSecond;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A cursor over the text after a candidate start; every read checks the bound.
struct Cursor {
  std::string_view s;
  size_t at = 0;

  bool Char(char c) {
    if (at >= s.size() || s[at] != c) return false;
    ++at;
    return true;
  }
  bool OneOf(std::string_view set) {
    if (at >= s.size() || set.find(s[at]) == std::string_view::npos) return false;
    ++at;
    return true;
  }
  // Exactly n digits.
  bool Digits(size_t n, int* out) {
    if (at + n > s.size()) return false;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!IsDigit(s[at + i])) return false;
      v = v * 10 + (s[at + i] - '0');
    }
    at += n;
    *out = v;
    return true;
  }
  // A run of 1 to 9 digits as nanoseconds (".5" is 500 ms); more digits are read and ignored.
  bool Fraction(int64_t* ns) {
    size_t n = 0;
    int64_t v = 0;
    while (at < s.size() && IsDigit(s[at])) {
      if (n < 9) v = v * 10 + (s[at] - '0');
      ++n;
      ++at;
    }
    if (n == 0) return false;
    for (size_t i = n; i < 9; ++i) v *= 10;
    *ns = v;
    return true;
  }
};

// HH:MM:SS[(.|,)fraction] into ns since midnight.
bool TimeOfDay(Cursor& c, int64_t* ns) {
  int h = 0, m = 0, sec = 0;
  if (!c.Digits(2, &h) || !c.Char(':') || !c.Digits(2, &m) || !c.Char(':') || !c.Digits(2, &sec))
    return false;
  if (h > 23 || m > 59 || sec > 60) return false;
  int64_t frac = 0;
  const size_t before = c.at;
  if (c.OneOf(".,") && !c.Fraction(&frac)) c.at = before;  // "12:00:00." ends a sentence
  *ns = ((h * 60 + m) * 60 + sec) * kNsPerSecond + frac;
  return true;
}

bool ValidDate(int y, int m, int d) {
  using namespace std::chrono;
  return year_month_day{year{y}, month{static_cast<unsigned>(m)}, day{static_cast<unsigned>(d)}}.ok();
}

// YYYY(-|/)MM(-|/)DD( |T)HH:MM:SS[fraction][Z|±HH:MM|±HHMM]
std::optional<LineStamp> FullDate(std::string_view s) {
  Cursor c{s};
  LineStamp st;
  int y = 0, m = 0, d = 0;
  if (!c.Digits(4, &y)) return std::nullopt;
  const char sep = c.at < s.size() ? s[c.at] : '\0';
  if (sep != '-' && sep != '/') return std::nullopt;
  ++c.at;
  if (!c.Digits(2, &m) || !c.Char(sep) || !c.Digits(2, &d) || !c.OneOf(" T")) return std::nullopt;
  if (y < 1970 || y > 2200 || !ValidDate(y, m, d) || !TimeOfDay(c, &st.ns_of_day)) return std::nullopt;
  if (!c.Char('Z') && c.at < s.size() && (s[c.at] == '+' || s[c.at] == '-')) {
    Cursor o = c;
    ++o.at;
    int oh = 0, om = 0;
    const bool hours = o.Digits(2, &oh);
    o.Char(':');  // "+02:00" and "+0200" alike
    if (hours && o.Digits(2, &om) && oh <= 14 && om <= 59) {
      st.offset_seconds = (s[c.at] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
    }
  }
  st.kind = StampKind::kFull;
  st.year = y;
  st.month = m;
  st.day = d;
  return st;
}

// A stamp with month and day but no year (whether the day exists is decided once the year is).
std::optional<LineStamp> NoYear(LineStamp st, int month, int day) {
  if (month < 1 || month > 12 || day < 1 || day > 31) return std::nullopt;
  st.kind = StampKind::kNoYear;
  st.month = month;
  st.day = day;
  return st;
}

// glog / c10d: [IWEF]MMDD HH:MM:SS (the month may be one digit: "E321" is March 21).
std::optional<LineStamp> Glog(std::string_view s) {
  if (s.empty() || std::string_view("IWEF").find(s[0]) == std::string_view::npos) return std::nullopt;
  size_t n = 1;
  while (n < s.size() && IsDigit(s[n])) ++n;
  const size_t digits = n - 1;
  if ((digits != 3 && digits != 4) || n >= s.size() || s[n] != ' ') return std::nullopt;
  Cursor c{s, 1};
  LineStamp st;
  int m = 0, d = 0;
  if (!c.Digits(digits - 2, &m) || !c.Digits(2, &d) || !c.Char(' ') || !TimeOfDay(c, &st.ns_of_day)) {
    return std::nullopt;
  }
  return NoYear(st, m, d);
}

// vLLM: MM-DD HH:MM:SS
std::optional<LineStamp> MonthDayDash(std::string_view s) {
  Cursor c{s};
  LineStamp st;
  int m = 0, d = 0;
  if (!c.Digits(2, &m) || !c.Char('-') || !c.Digits(2, &d) || !c.Char(' ') || !TimeOfDay(c, &st.ns_of_day)) {
    return std::nullopt;
  }
  return NoYear(st, m, d);
}

// syslog: Mon D HH:MM:SS (the day space-padded or not); dmesg -T adds " YYYY" after the time.
std::optional<LineStamp> Syslog(std::string_view s) {
  static constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (s.size() < 4) return std::nullopt;
  const auto it = std::find(kMonths.begin(), kMonths.end(), s.substr(0, 3));
  if (it == kMonths.end() || s[3] != ' ') return std::nullopt;
  Cursor c{s, 4};
  c.Char(' ');
  int d = 0;
  if (!c.Digits(2, &d) && !c.Digits(1, &d)) return std::nullopt;
  LineStamp st;
  if (!c.Char(' ') || !TimeOfDay(c, &st.ns_of_day) || d < 1 || d > 31) return std::nullopt;
  st.kind = StampKind::kNoYear;
  st.month = static_cast<int>(it - kMonths.begin()) + 1;
  st.day = d;
  Cursor y = c;
  int year = 0;
  if (y.Char(' ') && y.Digits(4, &year) && (y.at == s.size() || !IsAlnum(s[y.at])) && year >= 1970 &&
      year <= 2200 && ValidDate(year, st.month, d)) {
    st.kind = StampKind::kFull;
    st.year = year;
  }
  return st;
}

// SGLang: "[HH:MM:SS " or "[HH:MM:SS]" — only after a bracket and before a space or a bracket,
// so that a progress bar's elapsed "[13:55:57<86:19:20" is not read as a time of day.
std::optional<LineStamp> BracketedTimeOfDay(std::string_view s, bool after_bracket) {
  if (!after_bracket) return std::nullopt;
  Cursor c{s};
  LineStamp st;
  if (!TimeOfDay(c, &st.ns_of_day) || c.at >= s.size() || (s[c.at] != ' ' && s[c.at] != ']'))
    return std::nullopt;
  st.kind = StampKind::kTimeOfDay;
  return st;
}

int64_t DaysOf(int y, int m, int d) {
  using namespace std::chrono;
  return sys_days{year{y} / month{static_cast<unsigned>(m)} / day{static_cast<unsigned>(d)}}
      .time_since_epoch()
      .count();
}

}  // namespace

std::optional<LineStamp> FindLineStamp(std::string_view line) {
  const size_t end = std::min(line.size(), kLineTimeSearchBytes);
  for (size_t i = 0; i < end; ++i) {
    // A stamp starts a word: not after a letter or digit, nor inside a number, date or time.
    if (i > 0 &&
        (IsAlnum(line[i - 1]) || std::string_view(":.-/+").find(line[i - 1]) != std::string_view::npos)) {
      continue;
    }
    const std::string_view rest = line.substr(i);
    std::optional<LineStamp> st;
    if (IsDigit(line[i])) {
      st = FullDate(rest);
      if (!st) st = MonthDayDash(rest);
      if (!st) st = BracketedTimeOfDay(rest, i > 0 && line[i - 1] == '[');
    } else {
      st = Glog(rest);
      if (!st) st = Syslog(rest);
    }
    if (st) return st;
  }
  return std::nullopt;
}

std::optional<TimeNs> LineClock::Read(std::string_view line) {
  const auto st = FindLineStamp(line);
  if (!st) return std::nullopt;
  int64_t day = 0;
  switch (st->kind) {
    case StampKind::kFull:
      year_ = st->year;
      day = DaysOf(st->year, st->month, st->day);
      break;
    case StampKind::kNoYear: {
      int y = year_;
      if (!ValidDate(y, st->month, st->day)) {
        if (!ValidDate(y + 1, st->month, st->day)) return std::nullopt;  // Feb 29 of no year near
        ++y;
      }
      day = DaysOf(y, st->month, st->day);
      if (day_ && day < *day_ - 180 && ValidDate(y + 1, st->month, st->day)) {
        day = DaysOf(++y, st->month, st->day);  // Dec 31 → Jan 1
      } else if (day_ && day > *day_ + 180 && ValidDate(y - 1, st->month, st->day)) {
        day = DaysOf(--y, st->month, st->day);
      }
      break;
    }
    case StampKind::kTimeOfDay:
      day = day_.value_or(DaysOf(year_, 1, 1));
      if (day_ && st->ns_of_day + kNsPerDay / 2 < ns_of_day_) ++day;  // past midnight
      break;
  }
  const TimeNs t = day * kNsPerDay + st->ns_of_day - st->offset_seconds * kNsPerSecond;
  if (t < 0) return std::nullopt;  // 1970-01-01 00:00 at an offset east of UTC
  day_ = day;
  year_ = static_cast<int>(std::chrono::year_month_day{std::chrono::sys_days{std::chrono::days{day}}}.year());
  ns_of_day_ = st->ns_of_day;
  last_ = t;
  return last_;
}

}  // namespace ithbat::collect::joblog
