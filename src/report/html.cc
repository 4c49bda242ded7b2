#include "report/html.h"

#include <cmath>
#include <ctime>

#include <fmt/core.h>

namespace ithbat::report {

std::string Escape(std::string_view text) {
  const bool cut = text.size() > kMaxTextBytes;
  if (cut) {
    text = text.substr(0, kMaxTextBytes);
    // Do not end inside a UTF-8 sequence: drop trailing continuation bytes and their lead byte.
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.remove_suffix(1);
    if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.remove_suffix(1);
  }
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case ':':
        out += text.substr(i + 1, 2) == "//" ? "&#58;" : ":";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') break;  // control bytes
        if (c == 0x7F) break;
        out += c;
    }
  }
  if (cut) out += "…";
  return out;
}

namespace {
std::tm Utc(TimeNs t) {
  const time_t s = static_cast<time_t>(t / kNsPerSec - (t % kNsPerSec < 0 ? 1 : 0));
  std::tm tm{};
  gmtime_r(&s, &tm);
  return tm;
}
}  // namespace

std::string FormatTime(TimeNs t) {
  if (t == 0) return "—";
  const std::tm tm = Utc(t);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

std::string FormatClock(TimeNs t, bool tenths) {
  const std::tm tm = Utc(t);
  std::string s = fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (tenths) {
    const TimeNs frac = ((t % kNsPerSec) + kNsPerSec) % kNsPerSec;
    s += fmt::format(".{}", frac / (kNsPerSec / 10));
  }
  return s;
}

std::string FormatDuration(TimeNs d) {
  if (d < 0) return "-" + FormatDuration(-d);
  const double s = static_cast<double>(d) / kNsPerSec;
  if (s < 10) return fmt::format("{:.3g} s", s);
  if (s < 60) return fmt::format("{:.0f} s", s);
  const int64_t whole = static_cast<int64_t>(std::llround(s));
  if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
  if (whole < 86400) return fmt::format("{} h {:02} min", whole / 3600, (whole % 3600) / 60);
  return fmt::format("{} d {:02} h", whole / 86400, (whole % 86400) / 3600);
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  const double a = std::fabs(v);
  if (a == 0) return "0";
  static constexpr struct {
    double threshold, divisor;
    const char* suffix;
  } kScales[] = {{1e12, 1e12, "T"}, {1e9, 1e9, "G"}, {1e6, 1e6, "M"}, {1e4, 1e3, "k"}};
  for (const auto& sc : kScales) {
    if (a >= sc.threshold) return fmt::format("{:.3g}{}", v / sc.divisor, sc.suffix);
  }
  if (a >= 99.95) return fmt::format("{:.0f}", v);  // 100 .. 9999: whole ("1.23e+03" reads badly)
  if (a < 1e-3) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace ithbat::report
