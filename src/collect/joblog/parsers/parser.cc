#include "collect/joblog/parsers/parser.h"

#include <bit>
#include <cctype>
#include <charconv>
#include <system_error>
#include <limits>

namespace ithbat::collect::joblog {

bool operator==(const ParsedEvent& a, const ParsedEvent& b) {
  const bool values_equal = (std::isnan(a.value) && std::isnan(b.value)) ||
                            std::bit_cast<uint64_t>(a.value) == std::bit_cast<uint64_t>(b.value);
  return a.kind == b.kind && a.step == b.step && values_equal && a.name == b.name && a.text == b.text &&
         a.attrs == b.attrs && a.rank == b.rank;
}

namespace {
bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}
}  // namespace

std::optional<double> ParseNumber(std::string_view text) {
  if (text.empty() || text.size() > 64) return std::nullopt;
  bool negative = false;
  std::string_view body = text;
  if (body.front() == '+' || body.front() == '-') {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  // NeMo 2 prints a NaN loss as "nan.0"; Python prints inf/nan; JavaScript-style Infinity.
  if (EqualsNoCase(body, "nan") || EqualsNoCase(body, "nan.0")) return std::numeric_limits<double>::quiet_NaN();
  if (EqualsNoCase(body, "inf") || EqualsNoCase(body, "inf.0") || EqualsNoCase(body, "infinity"))
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  // Only [0-9.eE+-] may follow: strtod would also take hex floats and "nan(...)".
  bool digit = false;
  for (char c : body) {
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') {
      return std::nullopt;
    }
  }
  if (!digit || !(std::isdigit(static_cast<unsigned char>(body.front())) || body.front() == '.'))
    return std::nullopt;
  // from_chars (libstdc++ 12: fast_float) is several times faster than strtod and needs no
  // NUL-terminated copy; it does not take a leading '+', which `body` no longer has.
  double v = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ec == std::errc::result_out_of_range) {
    // Beyond double's range: the magnitude is what it is; keep the sign and the order.
    const bool tiny = body.find("e-") != std::string_view::npos || body.find("E-") != std::string_view::npos;
    v = tiny ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (ec != std::errc() || end != body.data() + body.size()) {
    return std::nullopt;
  }
  return negative ? -v : v;
}

}  // namespace ithbat::collect::joblog
