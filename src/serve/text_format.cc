#include "serve/text_format.h"

#include <cmath>

#include <fmt/format.h>

namespace ithbat::serve {

std::string FormatSampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Below 1e15 every integer-valued double prints exactly in fixed notation with no more
  // digits than its shortest form; above, fmt's shortest form (with exponent) is both shorter
  // and exact.
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::string FormatUnixSeconds(int64_t t_ns) {
  constexpr int64_t kNs = 1'000'000'000;
  // Split on magnitudes so INT64_MIN does not overflow when negated.
  bool negative = t_ns < 0;
  uint64_t mag = negative ? uint64_t{0} - static_cast<uint64_t>(t_ns) : static_cast<uint64_t>(t_ns);
  uint64_t secs = mag / kNs;
  uint64_t frac = mag % kNs;
  std::string out = fmt::format("{}{}", negative ? "-" : "", secs);
  if (frac != 0) {
    std::string digits = fmt::format("{:09}", frac);
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    out += '.';
    out += digits;
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // Loop over the expected length whatever is presented; no early exit.
  volatile unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = diff | static_cast<unsigned char>(p ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace ithbat::serve
