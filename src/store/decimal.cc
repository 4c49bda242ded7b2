#include "store/decimal.h"

#include <bit>
#include <cmath>

namespace ithbat::store {
namespace {

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,
                             1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18};
constexpr double kMaxExact = 9007199254740992.0;  // 2^53

bool TryExponent(double v, int e, Decimal* out) {
  double scaled = e >= 0 ? v / kPow10[e] : v * kPow10[-e];
  if (!(std::fabs(scaled) < kMaxExact)) return false;
  double rounded = std::nearbyint(scaled);
  Decimal d{static_cast<int64_t>(rounded), static_cast<int8_t>(e)};
  if (std::bit_cast<uint64_t>(FromDecimal(d)) != std::bit_cast<uint64_t>(v)) return false;
  *out = d;
  return true;
}

}  // namespace

std::optional<Decimal> ToDecimalAt(double v, int8_t exponent) {
  if (exponent < -kMaxDecimalDigits || exponent > 18) return std::nullopt;
  if (v == 0 && std::signbit(v)) return std::nullopt;  // -0.0 has no decimal form
  Decimal d;
  if (!TryExponent(v, exponent, &d)) return std::nullopt;
  return d;
}

double FromDecimal(Decimal d) {
  double m = static_cast<double>(d.mantissa);
  // Division by an exact power of ten is correctly rounded, so a value printed with k digits
  // and parsed back (the usual origin of these numbers) comes back bit for bit.
  return d.exponent >= 0 ? m * kPow10[d.exponent] : m / kPow10[-d.exponent];
}

std::optional<Decimal> ToDecimal(double v, int8_t hint_exponent) {
  if (!std::isfinite(v) || (v == 0 && std::signbit(v))) return std::nullopt;
  if (v == 0) return Decimal{0, 0};
  Decimal d;
  // The hint is only a shortcut when no shorter form exists: check the next larger exponent.
  if (hint_exponent >= -kMaxDecimalDigits && hint_exponent <= 18 && TryExponent(v, hint_exponent, &d)) {
    Decimal shorter;
    if (hint_exponent == 18 || !TryExponent(v, hint_exponent + 1, &shorter)) return d;
  }
  // Integers with trailing zeros take positive exponents (1e9 → 1 × 10^9); others the fewest digits.
  // Integers past 2^53 start at the first exponent that brings the mantissa below it.
  int first = 0;
  if (std::fabs(v) >= kMaxExact) {
    while (first < 18 && !TryExponent(v, first, &d)) ++first;
  }
  if (TryExponent(v, first, &d)) {
    int e = first;
    Decimal bigger;
    while (e < 18 && d.mantissa % 10 == 0 && TryExponent(v, e + 1, &bigger)) {
      d = bigger;
      ++e;
    }
    return d;
  }
  for (int e = -1; e >= -kMaxDecimalDigits; --e) {
    if (TryExponent(v, e, &d)) return d;
  }
  return std::nullopt;
}

}  // namespace ithbat::store
