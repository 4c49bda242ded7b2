#include "core/time.h"

#include <gtest/gtest.h>

namespace ithbat {
namespace {

TEST(ParseDurationTest, UnitsAndBareSeconds) {
  EXPECT_EQ(*ParseDuration("100ns"), 100);
  EXPECT_EQ(*ParseDuration("250us"), 250 * kNsPerUs);
  EXPECT_EQ(*ParseDuration("1500ms"), 1500 * kNsPerMs);
  EXPECT_EQ(*ParseDuration("10s"), 10 * kNsPerSec);
  EXPECT_EQ(*ParseDuration("10"), 10 * kNsPerSec);
  EXPECT_EQ(*ParseDuration("0.5s"), kNsPerSec / 2);
  EXPECT_EQ(*ParseDuration("5m"), 300 * kNsPerSec);
  EXPECT_EQ(*ParseDuration("24h"), 86400 * kNsPerSec);
  EXPECT_EQ(*ParseDuration("7d"), 7 * 86400 * kNsPerSec);
  EXPECT_EQ(*ParseDuration(" 3s "), 3 * kNsPerSec);
}

TEST(ParseDurationTest, ErrorsSayWhatIsWrong) {
  auto bad_unit = ParseDuration("10parsecs");
  ASSERT_FALSE(bad_unit);
  EXPECT_EQ(bad_unit.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_unit.error().message.find("parsecs"), std::string::npos);
  EXPECT_FALSE(ParseDuration(""));
  EXPECT_FALSE(ParseDuration("s"));
  EXPECT_FALSE(ParseDuration("-5s"));
  EXPECT_FALSE(ParseDuration("1.2.3s"));
  EXPECT_FALSE(ParseDuration("999999999999d"));
}

TEST(ParseByteSizeTest, BinaryAndDecimalSuffixes) {
  EXPECT_EQ(*ParseByteSize("1024"), 1024u);
  EXPECT_EQ(*ParseByteSize("64MiB"), 64ull << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("500KB"), 500'000u);
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536u);
  EXPECT_FALSE(ParseByteSize("12 apples"));
  EXPECT_FALSE(ParseByteSize("MiB"));
}

TEST(TimestampTest, Rfc3339RoundTripsWithNanoseconds) {
  TimeNs t = 1764474698123456789;
  std::string text = FormatRfc3339(t);
  EXPECT_EQ(text, "2025-11-30T03:51:38.123456789Z");
  EXPECT_EQ(*ParseTimestamp(text), t);
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00.000000000Z");
  // Before the epoch: the fraction stays positive.
  EXPECT_EQ(FormatRfc3339(-1), "1969-12-31T23:59:59.999999999Z");
}

TEST(TimestampTest, OffsetsAndUnixSeconds) {
  EXPECT_EQ(*ParseTimestamp("2025-11-30T05:51:38+02:00"), *ParseTimestamp("2025-11-30T03:51:38Z"));
  EXPECT_EQ(*ParseTimestamp("2025-11-30T03:51:38.5Z") - *ParseTimestamp("2025-11-30T03:51:38Z"), kNsPerSec / 2);
  EXPECT_EQ(*ParseTimestamp("1764474698.25"), 1764474698250000000);
  EXPECT_EQ(*ParseTimestamp("0"), 0);
}

TEST(TimestampTest, RejectsMalformedTimes) {
  EXPECT_FALSE(ParseTimestamp(""));
  EXPECT_FALSE(ParseTimestamp("yesterday"));
  EXPECT_FALSE(ParseTimestamp("2025-11-30T03:51:38"));  // no zone
  EXPECT_FALSE(ParseTimestamp("2025-11-30T03:51:38Zjunk"));
  EXPECT_FALSE(ParseTimestamp("2025-11-30T03:51:38+0x:00"));
  EXPECT_FALSE(ParseTimestamp("nan"));
  EXPECT_FALSE(ParseTimestamp("inf"));
}

TEST(TimestampTest, TimesOutsideInt64NanosecondsAreRefusedNotWrapped) {
  // int64 nanoseconds hold 1677-09-21 .. 2262-04-11; a year 9999 used to wrap to a time in 1653.
  for (const char* text : {"9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2262-04-12T00:00:00Z",
                           "1600-01-01T00:00:00Z", "10000000000", "-10000000000"}) {
    auto t = ParseTimestamp(text);
    EXPECT_FALSE(t) << text << " gave " << (t ? *t : 0);
  }
  // Fields out of their range are refused, not rolled over into the next month or year.
  for (const char* text : {"2025-13-01T00:00:00Z", "2025-00-10T00:00:00Z", "2025-01-32T00:00:00Z",
                           "2025-01-01T24:00:00Z", "2025-01-01T00:60:00Z", "2025--1-01T00:00:00Z",
                           "2025-01-01T00:00:00+24:00", "2025-01-01T00:00:00+01:60"}) {
    EXPECT_FALSE(ParseTimestamp(text)) << text;
  }
  EXPECT_TRUE(ParseTimestamp("2250-12-31T23:59:59Z"));
  EXPECT_TRUE(ParseTimestamp("1700-01-01T00:00:00Z"));
  EXPECT_TRUE(ParseTimestamp("2016-12-31T23:59:60Z"));  // a leap second is a valid RFC 3339 time
}

TEST(ClockTest, RealtimeIsNearTheEpochOffsetAndMonotonicAdvances) {
  TimeNs now = NowNs();
  EXPECT_GT(now, 1'600'000'000LL * kNsPerSec);  // after 2020: a realtime clock, not monotonic
  TimeNs a = MonotonicNowNs();
  TimeNs b = MonotonicNowNs();
  EXPECT_GE(b, a);
}

}  // namespace
}  // namespace ithbat
