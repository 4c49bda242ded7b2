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
  EXPECT_EQ(Once("2020-10-01 11:52:42 | INFO | train_inner | epoch 001"), Utc(2020, 10, 1, 11, 52, 42));
  EXPECT_EQ(Once("[2026-05-28 22:26:20] iteration       29/    6069"), Utc(2026, 5, 28, 22, 26, 20));
  EXPECT_EQ(Once("[rank0]:[titan] 2025-06-16 22:30:48,735 - root - INFO - step: 200"),
            Utc(2025, 6, 16, 22, 30, 48, 735'000'000));
  EXPECT_EQ(Once("[INFO|trainer.py:4168] 2025-02-07 15:26:56,948 >>   Num examples = 10671"),
            Utc(2025, 2, 7, 15, 26, 56, 948'000'000));
  EXPECT_EQ(Once("2024/05/01 00:00:01 step 3"), Utc(2024, 5, 1, 0, 0, 1));
  EXPECT_EQ(Once("2024-05-01T12:00:00.123456789Z loss=1"), Utc(2024, 5, 1, 12, 0, 0, 123'456'789));
  EXPECT_EQ(Once("2024-05-01T12:00:00+02:00 loss=1"), Utc(2024, 5, 1, 10, 0, 0));
  EXPECT_EQ(Once("2024-05-01T12:00:00-0130 loss=1"), Utc(2024, 5, 1, 13, 30, 0));
  EXPECT_EQ(Once("2024-05-01 12:00:00.1234567891234 more digits than ns"),
            Utc(2024, 5, 1, 12, 0, 0, 123'456'789));
}

TEST(LineTime, StampsWithoutAYearTakeTheClocksYear) {
  EXPECT_EQ(Once("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog", 2024),
            Utc(2024, 12, 6, 18, 44, 12, 715'298'746));
  EXPECT_EQ(Once("[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]", 2025),
            Utc(2025, 3, 21, 2, 7, 8, 408'271'257));
  EXPECT_EQ(Once("(APIServer pid=1) INFO 06-13 11:03:35 [loggers.py:271] Engine 000", 2025),
            Utc(2025, 6, 13, 11, 3, 35));
  EXPECT_EQ(Once("Sep 22 23:46:41 ml2-1-a100-1 vllm[361682]: INFO: 127.0.0.1", 2024),
            Utc(2024, 9, 22, 23, 46, 41));
  EXPECT_EQ(Once("Dec  7 03:43:01 host kernel: NVRM: Xid", 2026), Utc(2026, 12, 7, 3, 43, 1));
  // dmesg -T writes the year after the time.
  EXPECT_EQ(Once("[Mon Dec  7 03:43:01 2026] NVRM: Xid (PCI:0000:3b:00): 79"), Utc(2026, 12, 7, 3, 43, 1));
  // A time of day alone (SGLang) is January 1 of the default year before any date.
  EXPECT_EQ(Once("[04:40:55 TP0] Decode batch. #running-req: 2", 2000), Utc(2000, 1, 1, 4, 40, 55));
}

TEST(LineTime, WhatIsNoStamp) {
  for (const char* line : {
           "iter 1631: loss 4.0863, time 561.94ms",
           " 14%|#         | 377/2724 [13:55:57<86:19:20, 132.41s/it]",  // a progress bar's elapsed time
           "Epoch 0:  97% 1651/1702 [13:00<00:24,  2.11it/s, loss=0.158]",
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
