#include "store/decimal.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace ithbat::store {
namespace {

uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }

void ExpectExact(double v) {
  auto d = ToDecimal(v);
  ASSERT_TRUE(d.has_value()) << v;
  EXPECT_EQ(Bits(FromDecimal(*d)), Bits(v)) << v;
  EXPECT_LT(std::abs(d->mantissa), int64_t{1} << 53);
  EXPECT_GE(d->exponent, -kMaxDecimalDigits);
  EXPECT_LE(d->exponent, 18);
}

TEST(DecimalTest, ShortestForms) {
  auto d = ToDecimal(98.0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 98);
  EXPECT_EQ(d->exponent, 0);

  d = ToDecimal(0.861234);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 861234);
  EXPECT_EQ(d->exponent, -6);

  d = ToDecimal(1755.5);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 17555);
  EXPECT_EQ(d->exponent, -1);

  d = ToDecimal(-42.25);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, -4225);
  EXPECT_EQ(d->exponent, -2);
}

TEST(DecimalTest, TrailingZerosTakePositiveExponents) {
  auto d = ToDecimal(1e9);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 1);
  EXPECT_EQ(d->exponent, 9);
  d = ToDecimal(700000.0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 7);
  EXPECT_EQ(d->exponent, 5);
  d = ToDecimal(1e18);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->exponent, 18);
  ExpectExact(1e20);  // beyond 10^18: mantissa > 1
  ExpectExact(1.5e22);
}

TEST(DecimalTest, ZeroAndSpecials) {
  auto d = ToDecimal(0.0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 0);
  EXPECT_FALSE(ToDecimal(-0.0));
  EXPECT_FALSE(ToDecimal(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(ToDecimal(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(ToDecimal(-std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(ToDecimal(std::numeric_limits<double>::denorm_min()));
  EXPECT_FALSE(ToDecimal(std::numeric_limits<double>::max()));
  EXPECT_FALSE(ToDecimal(0.1 + 0.2));  // 0.30000000000000004 needs 17 digits
  EXPECT_FALSE(ToDecimal(1.0 / 3.0));  // 16 significant digits after the point
}

TEST(DecimalTest, HintIsOnlyAShortcut) {
  // A hint that fits but is not the shortest must not change the answer.
  auto d = ToDecimal(0.5, -6);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 5);
  EXPECT_EQ(d->exponent, -1);
  d = ToDecimal(0.123456, -6);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->exponent, -6);
  // Out-of-range hints are ignored.
  d = ToDecimal(12.5, 100);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 125);
  d = ToDecimal(12.5, -100);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 125);
}

TEST(DecimalTest, ToDecimalAtKeepsTheExponent) {
  auto d = ToDecimalAt(0.5, -6);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 500000);
  EXPECT_EQ(d->exponent, -6);
  d = ToDecimalAt(700000.0, 0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mantissa, 700000);
  EXPECT_FALSE(ToDecimalAt(0.25, -1));
  EXPECT_FALSE(ToDecimalAt(1234.0, 1));
  EXPECT_FALSE(ToDecimalAt(-0.0, 0));
  EXPECT_FALSE(ToDecimalAt(1.0, 19));
  EXPECT_FALSE(ToDecimalAt(1.0, -16));
  EXPECT_FALSE(ToDecimalAt(1e17, -1));  // mantissa would pass 2^53
}

TEST(DecimalTest, PrintedValuesRoundTrip) {
  std::mt19937_64 rng(7);
  for (int digits = 0; digits <= 9; ++digits) {
    std::uniform_int_distribution<int64_t> m(-10'000'000, 10'000'000);
    for (int i = 0; i < 2000; ++i) {
      double v = static_cast<double>(m(rng)) / std::pow(10.0, digits);
      // Round-trip through text the way a collector would receive it.
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
      ExpectExact(std::strtod(buf, nullptr));
    }
  }
}

TEST(DecimalTest, RandomDoublesAreExactOrRejected) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    double v = std::bit_cast<double>(rng());
    auto d = ToDecimal(v);
    if (d) {
      EXPECT_EQ(Bits(FromDecimal(*d)), Bits(v));
    }
  }
  std::uniform_real_distribution<double> u(-1e6, 1e6);
  for (int i = 0; i < 20000; ++i) {
    double v = u(rng);
    auto d = ToDecimal(v);
    if (d) {
      EXPECT_EQ(Bits(FromDecimal(*d)), Bits(v));
    }
  }
}

TEST(DecimalTest, LargeIntegers) {
  ExpectExact(9007199254740991.0);  // 2^53 - 1
  ExpectExact(-9007199254740991.0);
  ExpectExact(1234567890123.0);
  ExpectExact(static_cast<double>(int64_t{80} << 30));
}

}  // namespace
}  // namespace ithbat::store
