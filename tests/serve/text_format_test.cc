#include "serve/text_format.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace ithbat::serve {
namespace {

TEST(FormatSampleValueTest, IntegersHaveNoExponent) {
  EXPECT_EQ(FormatSampleValue(0), "0");
  EXPECT_EQ(FormatSampleValue(42), "42");
  EXPECT_EQ(FormatSampleValue(-7), "-7");
  EXPECT_EQ(FormatSampleValue(123456789012345.0), "123456789012345");
  EXPECT_EQ(FormatSampleValue(999999999999999.0), "999999999999999");
}

TEST(FormatSampleValueTest, SpecialValues) {
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(FormatSampleValueTest, FractionsAreShortest) {
  EXPECT_EQ(FormatSampleValue(0.1), "0.1");
  EXPECT_EQ(FormatSampleValue(-2.5), "-2.5");
  EXPECT_EQ(FormatSampleValue(1e20), "1e+20");
}

TEST(FormatSampleValueTest, RoundTrips) {
  const double values[] = {0.1,
                           1.0 / 3,
                           -1e-300,
                           1e300,
                           5e-324,
                           std::numeric_limits<double>::max(),
                           1e15,
                           1e16 + 2,
                           123.456,
                           -0.0,
                           9007199254740993.0,
                           3.0e-7,
                           72.125,
                           65535,
                           4294967296.0};
  for (double v : values) {
    std::string text = FormatSampleValue(v);
    double back = std::strtod(text.c_str(), nullptr);
    EXPECT_EQ(back, v) << text;
    EXPECT_EQ(std::signbit(back), std::signbit(v)) << text;
  }
}

TEST(FormatUnixSecondsTest, ExactNanoseconds) {
  EXPECT_EQ(FormatUnixSeconds(0), "0");
  EXPECT_EQ(FormatUnixSeconds(1'700'000'000'000'000'000), "1700000000");
  EXPECT_EQ(FormatUnixSeconds(1'700'000'000'250'000'000), "1700000000.25");
  EXPECT_EQ(FormatUnixSeconds(1'700'000'000'000'000'001), "1700000000.000000001");
  EXPECT_EQ(FormatUnixSeconds(-1'500'000'000), "-1.5");
  EXPECT_EQ(FormatUnixSeconds(std::numeric_limits<int64_t>::min()), "-9223372036.854775808");
}

TEST(EscapeHelpTest, BackslashAndNewlineOnly) {
  EXPECT_EQ(EscapeHelp("plain text"), "plain text");
  EXPECT_EQ(EscapeHelp("a\\b"), "a\\\\b");
  EXPECT_EQ(EscapeHelp("line1\nline2"), "line1\\nline2");
  EXPECT_EQ(EscapeHelp("say \"hi\""), "say \"hi\"");
}

TEST(ConstantTimeEqualsTest, Compares) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret1", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("secret\0", 7), "secret"));
}

}  // namespace
}  // namespace ithbat::serve
