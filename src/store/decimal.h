#pragma once
// Most values a GPU node reports are integers or short decimals (98.0, 0.861234, 1755.0) that
// a binary float spells with ~50 significant bits. Written as mantissa × 10^exponent they are
// small integers whose deltas are smaller still. Both codecs (the in-memory chunk and the
// on-disk block) use this conversion; it is exact: Decode(Encode(v)) has v's bits.
#include <cstdint>
#include <optional>

namespace ithbat::store {

struct Decimal {
  int64_t mantissa = 0;
  int8_t exponent = 0;  // value = mantissa * 10^exponent, exponent in [-kMaxDecimalDigits, 18]
};

inline constexpr int kMaxDecimalDigits = 15;

// The decimal with the largest exponent (fewest digits) whose Decode gives exactly v's bits;
// tries hint_exponent first (pass the previous sample's exponent: it usually fits). nullopt
// for NaN, ±Inf, -0.0, and values with no such short form (|mantissa| must stay < 2^53).
std::optional<Decimal> ToDecimal(double v, int8_t hint_exponent = 0);
// v as mantissa × 10^exponent at exactly this exponent (bit-exact, |mantissa| < 2^53), or
// nullopt. Lets a codec keep one exponent for a series whose values vary in digit count.
std::optional<Decimal> ToDecimalAt(double v, int8_t exponent);
double FromDecimal(Decimal d);

}  // namespace ithbat::store
