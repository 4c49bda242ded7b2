// Reading the stamp a log line starts with (collect/joblog/text/line_time.h): each format on a
// line of its shape, the ranges that make "at step 2020-13-45" no stamp, the year and date a
// stamp leaves out, and the real files of ../shared/data.
#include "collect/joblog/text/line_time.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/time.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// 2020-10-01T11:52:42Z and friends, as ns since the epoch.
TimeNs Utc(int y, int mo, int d, int h, int mi, int s, int64_t ns = 0) {
  // Days from the civil date (1970-01-01 = 0), without a library the test would share with the code.
  const int yy = mo <= 2 ? y - 1 : y;
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  return ((days * 24 + h) * 60 + mi) * 60 * kSec + s * kSec + ns;
}

std::optional<TimeNs> Once(std::string_view line, int default_year = 2000) {
  LineClock clock(default_year);
  return clock.Read(line);
}

TEST(LineTime, FullDatesInTheShapesFrameworksPrint) {
  EXPECT_EQ(Once("2021-03-04 05:06:07 | INFO | train_inner | epoch 002"), Utc(2021, 3, 4, 5, 6, 7));
  EXPECT_EQ(Once("[2026-02-11 08:15:30] iteration       12/    1000"), Utc(2026, 2, 11, 8, 15, 30));
  EXPECT_EQ(Once("[rank3]:[titan] 2025-07-01 10:20:30,125 - root - INFO - step: 40"),
            Utc(2025, 7, 1, 10, 20, 30, 125'000'000));
  EXPECT_EQ(Once("[INFO|trainer.py:100] 2025-01-02 03:04:05,006 >>   Num examples = 42"),
            Utc(2025, 1, 2, 3, 4, 5, 6'000'000));
  EXPECT_EQ(Once("2024/05/01 00:00:01 step 3"), Utc(2024, 5, 1, 0, 0, 1));
  EXPECT_EQ(Once("2024-05-01T12:00:00.123456789Z loss=1"), Utc(2024, 5, 1, 12, 0, 0, 123'456'789));
  EXPECT_EQ(Once("2024-05-01T12:00:00+02:00 loss=1"), Utc(2024, 5, 1, 10, 0, 0));
  EXPECT_EQ(Once("2024-05-01T12:00:00-0130 loss=1"), Utc(2024, 5, 1, 13, 30, 0));
  EXPECT_EQ(Once("2024-05-01 12:00:00.1234567891234 more digits than ns"),
            Utc(2024, 5, 1, 12, 0, 0, 123'456'789));
}

TEST(LineTime, StampsWithoutAYearTakeTheClocksYear) {
  EXPECT_EQ(Once("[rank2]:[E1105 07:08:09.123456789 ProcessGroupNCCL.cpp:100] [Rank 2] Watchdog", 2024),
            Utc(2024, 11, 5, 7, 8, 9, 123'456'789));
  // c10d writes the month without its leading zero: E321 is March 21.
  EXPECT_EQ(Once("[42] [rank1]:[E321 01:02:03.000000001 ProcessGroupNCCL.cpp:100]", 2025),
            Utc(2025, 3, 21, 1, 2, 3, 1));
  EXPECT_EQ(Once("(APIServer pid=7) INFO 07-14 09:10:11 [loggers.py:10] Engine 000", 2025),
            Utc(2025, 7, 14, 9, 10, 11));
  EXPECT_EQ(Once("Oct  3 12:13:14 gpu-node-1 vllm[1234]: INFO: 10.0.0.1", 2024),
            Utc(2024, 10, 3, 12, 13, 14));
  EXPECT_EQ(Once("Dec  7 03:43:01 host kernel: NVRM: Xid", 2026), Utc(2026, 12, 7, 3, 43, 1));
  // dmesg -T writes the year after the time.
  EXPECT_EQ(Once("[Mon Dec  7 03:43:01 2026] NVRM: Xid (PCI:0000:3b:00): 79"), Utc(2026, 12, 7, 3, 43, 1));
  // A time of day alone (SGLang) is January 1 of the default year before any date.
  EXPECT_EQ(Once("[05:06:07 TP1] Decode batch. #running-req: 3", 2000), Utc(2000, 1, 1, 5, 6, 7));
}

TEST(LineTime, WhatIsNoStamp) {
  for (const char* line : {
           "iter 10: loss 4.0, time 500.00ms",
           " 10%|#         | 100/1000 [12:34:56<99:00:00, 99.00s/it]",  // a progress bar's elapsed time
           "Epoch 0:  50% 500/1000 [10:00<10:00,  1.00it/s, loss=0.5]",
           "at step 2020-13-45 11:00:00 the loss rose",  // month 13
           "2023-02-29 10:00:00 not a leap year",
           "2024-05-01 24:00:00 hour 24",
           "1969-12-31 23:59:59 before the epoch",
           "version 12-34 10:00:00",
           "E12345 18:44:12 five digits",
           "12:00:00 a time of day outside brackets",
           "Sep 32 10:00:00 day 32",
           "",
       }) {
    EXPECT_FALSE(FindLineStamp(line).has_value()) << line;
  }
  // An offset that would put a stamp before 1970 makes it no time.
  EXPECT_EQ(Once("1970-01-01T00:00:00+01:00 first"), std::nullopt);
  // A stamp past the search window is not looked for.
  EXPECT_FALSE(FindLineStamp(std::string(kLineTimeSearchBytes, ' ') + "2024-05-01 12:00:00").has_value());
  // A stamp inside a word is not one.
  EXPECT_FALSE(FindLineStamp("id12024-05-01 12:00:00").has_value());
}

TEST(LineTime, AFileFillsWhatItsStampsLeaveOut) {
  LineClock clock(2000);
  // A full date sets the year the year-less stamps after it take.
  EXPECT_EQ(clock.Read("2025-12-31 23:59:58 start"), Utc(2025, 12, 31, 23, 59, 58));
  EXPECT_EQ(clock.Read("I1231 23:59:59.000000 still the old year"), Utc(2025, 12, 31, 23, 59, 59));
  // Across New Year without a year: January after December is the next year.
  EXPECT_EQ(clock.Read("I0101 00:00:01.000000 new year"), Utc(2026, 1, 1, 0, 0, 1));
  // A time of day takes the last date; going back by over 12 h is the next day.
  EXPECT_EQ(clock.Read("[12:00:00 TP0] noon"), Utc(2026, 1, 1, 12, 0, 0));
  EXPECT_EQ(clock.Read("[11:59:00 TP0] a minute back is not a day on"), Utc(2026, 1, 1, 11, 59, 0));
  EXPECT_EQ(clock.Read("[23:00:00 TP0] late"), Utc(2026, 1, 1, 23, 0, 0));
  EXPECT_EQ(clock.Read("[00:00:05 TP0] past midnight"), Utc(2026, 1, 2, 0, 0, 5));
  EXPECT_EQ(clock.Read("no stamp"), std::nullopt);
  EXPECT_EQ(clock.last(), Utc(2026, 1, 2, 0, 0, 5));
  // Feb 29 in a year that has none is no time.
  LineClock leap(2023);
  EXPECT_EQ(leap.Read("I0229 10:00:00.0 leap"), Utc(2024, 2, 29, 10, 0, 0));
}

// The real files: how many of a file's lines carry a stamp, and the first one's time.
TEST(LineTime, RealLogsOfSharedData) {
  struct Case {
    const char* file;
    size_t min_stamped;
    TimeNs first;
  };
  const Case cases[] = {
      {"training/fairseq-issue2681-train-inner.txt", 2, Utc(2020, 10, 1, 11, 52, 42)},
      {"training/megatron-bridge-issue4024-moe-mtp-losses.txt", 2, Utc(2026, 5, 28, 22, 26, 20)},
      {"training/torchtitan-pr3393-grad-norm-format.txt", 2, Utc(2026, 5, 18, 16, 4, 46, 338'000'000)},
      {"nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt", 2,
       Utc(2000, 12, 6, 18, 44, 12, 715'298'746)},
      {"training/nanogpt-issue110-old-format-no-mfu.txt", 0, 0},
      {"training/deepspeed-overflow-loss-scale-collapse.txt", 1, 0},
  };
  for (const Case& c : cases) {
    const auto lines = testing::SharedDataLines(c.file);
    ASSERT_FALSE(lines.empty()) << c.file;
    LineClock clock(2000);
    size_t stamped = 0;
    std::optional<TimeNs> first;
    for (const auto& line : lines) {
      auto t = clock.Read(line);
      if (!t) continue;
      ++stamped;
      if (!first) first = t;
    }
    EXPECT_GE(stamped, c.min_stamped) << c.file;
    if (c.min_stamped == 0) {
      EXPECT_EQ(stamped, 0u) << c.file;
    }
    if (c.first != 0) {
      EXPECT_EQ(first, c.first) << c.file << ": " << FormatRfc3339(first.value_or(0));
    }
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog
