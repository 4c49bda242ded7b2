// The /proc parsers of the host collector, on strings: exact values from real-format text, and
// errors (never crashes) on truncated, garbage and non-numeric input.
#include "collect/host/proc_parse.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ithbat::collect {
namespace {

using ::testing::HasSubstr;

// Copied from a real 2-CPU machine (kernel 6.x), intr line shortened.
constexpr std::string_view kStat =
    "cpu  16871 0 2655 91305 387 0 63 24 0 0\n"
    "cpu0 8719 0 1319 45275 305 0 23 13 0 0\n"
    "cpu1 8152 0 1336 46029 82 0 40 10 0 0\n"
    "intr 250729 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 8 0 0 0 0 111 20\n"
    "ctxt 417325\n"
    "btime 1796010640\n"
    "processes 9667\n"
    "procs_running 6\n"
    "procs_blocked 1\n"
    "softirq 126243 0 14624 4 2881 44495 0 4 32828 0 31407\n";

TEST(ParseProcStatTest, RealFormat) {
  auto r = ParseProcStat(kStat);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->cpu_modes, 8u);
  const std::array<uint64_t, kCpuModeCount> want = {16871, 0, 2655, 91305, 387, 0, 63, 24};
  EXPECT_EQ(r->cpu_jiffies, want);
  EXPECT_EQ(r->cpus, 2u);
  EXPECT_EQ(r->context_switches, 417325u);
  EXPECT_EQ(r->forks, 9667u);
  EXPECT_EQ(r->procs_running, 6u);
  EXPECT_EQ(r->procs_blocked, 1u);
}

TEST(ParseProcStatTest, OldKernelWithFourColumns) {
  auto r = ParseProcStat(
      "cpu  10 20 30 40\ncpu0 10 20 30 40\nctxt 1\nprocesses 2\nprocs_running 3\nprocs_blocked 4\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->cpu_modes, 4u);
  EXPECT_EQ(r->cpu_jiffies[3], 40u);
  EXPECT_EQ(r->cpu_jiffies[4], 0u);
}

TEST(ParseProcStatTest, ExtraColumnsAndUnknownLinesAreAccepted) {
  // A future kernel adding a column or a line must not break the collector.
  auto r = ParseProcStat(
      "cpu  1 2 3 4 5 6 7 8 9 10 11\ncpu0 1 2 3 4 5 6 7 8 9 10 11\nnew_thing 5 6\nctxt 1\nprocesses 2\n"
      "procs_running 3\nprocs_blocked 4");  // no final newline
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->cpu_modes, 8u);
  EXPECT_EQ(r->cpu_jiffies[7], 8u);
  EXPECT_EQ(r->procs_blocked, 4u);
}

TEST(ParseProcStatTest, TruncatedCpuLine) {
  auto r = ParseProcStat("cpu  16871 0\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
  EXPECT_THAT(r.error().message, HasSubstr("line 1"));
  EXPECT_THAT(r.error().message, HasSubstr("2 columns"));
}

TEST(ParseProcStatTest, TruncatedFileMissesRequiredLines) {
  // The file cut inside the cpu0 line: what follows is missing.
  auto r = ParseProcStat(kStat.substr(0, 60));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("ctxt"));
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3 4\nctxt 1\nprocesses 2\nprocs_running 3\nprocs_blocked 4\n"));  // no cpuN
  EXPECT_FALSE(ParseProcStat(""));
}

TEST(ParseProcStatTest, NonNumericField) {
  std::string text(kStat);
  text.replace(text.find(" 2655 "), 6, " 26x5 ");
  auto r = ParseProcStat(text);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("line 1: cpu column 3"));
  EXPECT_THAT(r.error().message, HasSubstr("'26x5'"));
}

TEST(ParseProcStatTest, BadCounterLines) {
  EXPECT_THAT(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\nctxt\n").error().message, HasSubstr("'ctxt' has no value"));
  EXPECT_THAT(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\nctxt 5 6\n").error().message, HasSubstr("extra fields"));
  EXPECT_THAT(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\nctxt -5\n").error().message, HasSubstr("'-5'"));
  EXPECT_THAT(ParseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\nprocesses 99999999999999999999999\n").error().message,
              HasSubstr("line 3"));
}

TEST(ParseProcStatTest, GarbageBytesAreAnErrorWithEscapedText) {
  auto r = ParseProcStat(std::string(kStat.substr(0, 79)) + "\n\x7f" "ELF\x01\xff\n" + std::string(kStat));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("unexpected line"));
  EXPECT_THAT(r.error().message, HasSubstr("\\x7fELF\\x01\\xff"));
  // A second aggregate line (two files concatenated) is not silently merged.
  EXPECT_THAT(ParseProcStat(std::string(kStat) + std::string(kStat)).error().message,
              HasSubstr("second aggregate cpu"));
}

constexpr std::string_view kMemInfo =
    "MemTotal:       24731708 kB\n"
    "MemFree:        20975688 kB\n"
    "MemAvailable:   23625000 kB\n"
    "Buffers:           54524 kB\n"
    "Cached:          2764020 kB\n"
    "SwapCached:            0 kB\n"
    "Active(anon):       1636 kB\n"
    "SwapTotal:       8388604 kB\n"
    "SwapFree:        8388000 kB\n"
    "Dirty:             17620 kB\n"
    "Writeback:            12 kB\n"
    "HugePages_Total:       0\n"
    "Hugepagesize:       2048 kB\n";

TEST(ParseMemInfoTest, RealFormatInBytes) {
  auto r = ParseMemInfo(kMemInfo);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->Get(MemField::kTotal), 24731708ull * 1024);
  EXPECT_EQ(r->Get(MemField::kFree), 20975688ull * 1024);
  EXPECT_EQ(r->Get(MemField::kAvailable), 23625000ull * 1024);
  EXPECT_EQ(r->Get(MemField::kBuffers), 54524ull * 1024);
  EXPECT_EQ(r->Get(MemField::kCached), 2764020ull * 1024);
  EXPECT_EQ(r->Get(MemField::kDirty), 17620ull * 1024);
  EXPECT_EQ(r->Get(MemField::kWriteback), 12ull * 1024);
  EXPECT_EQ(r->Get(MemField::kSwapTotal), 8388604ull * 1024);
  EXPECT_EQ(r->Get(MemField::kSwapFree), 8388000ull * 1024);
}

TEST(ParseMemInfoTest, FieldNames) {
  EXPECT_EQ(MemFieldKernelName(MemField::kSwapTotal), "SwapTotal");
  EXPECT_EQ(MemFieldMetricName(MemField::kSwapTotal), "swap_total");
}

TEST(ParseMemInfoTest, OldKernelWithoutMemAvailable) {
  auto r = ParseMemInfo("MemTotal: 100 kB\nMemFree: 50 kB\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(r->Get(MemField::kAvailable).has_value());
  EXPECT_EQ(r->Get(MemField::kFree), 50u * 1024);
}

TEST(ParseMemInfoTest, Errors) {
  EXPECT_THAT(ParseMemInfo("MemFree: 50 kB\n").error().message, HasSubstr("MemTotal"));
  EXPECT_THAT(ParseMemInfo("MemTotal: 100 kB\n").error().message, HasSubstr("MemFree"));
  EXPECT_THAT(ParseMemInfo("MemTotal: 100 MB\nMemFree: 1 kB\n").error().message, HasSubstr("unit 'MB'"));
  EXPECT_THAT(ParseMemInfo("MemTotal: 1x0 kB\nMemFree: 1 kB\n").error().message, HasSubstr("'1x0'"));
  EXPECT_THAT(ParseMemInfo("MemTotal:\nMemFree: 1 kB\n").error().message, HasSubstr("has no value"));
  EXPECT_THAT(ParseMemInfo("MemTotal: 1 kB extra\nMemFree: 1 kB\n").error().message, HasSubstr("extra fields"));
  EXPECT_THAT(ParseMemInfo("MemTotal: 18446744073709551615 kB\nMemFree: 1 kB\n").error().message,
              HasSubstr("overflows"));
  auto garbage = ParseMemInfo(std::string(kMemInfo.substr(0, 56)) + "\x7f" "ELF\x02\x01\n" + std::string(kMemInfo));
  ASSERT_FALSE(garbage);
  EXPECT_THAT(garbage.error().message, HasSubstr("line 3"));
  EXPECT_THAT(garbage.error().message, HasSubstr("\\x7fELF\\x02\\x01"));
}

TEST(ParsePressureTest, RealFormat) {
  auto r = ParsePressure(
      "some avg10=76.12 avg60=28.98 avg300=9.00 total=34601805\n"
      "full avg10=0.50 avg60=0.25 avg300=0.08 total=654321\n");
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_TRUE(r->some && r->full);
  EXPECT_DOUBLE_EQ(r->some->avg10, 76.12);
  EXPECT_DOUBLE_EQ(r->some->avg60, 28.98);
  EXPECT_DOUBLE_EQ(r->some->avg300, 9.00);
  EXPECT_EQ(r->some->total_us, 34601805u);
  EXPECT_DOUBLE_EQ(r->full->avg10, 0.5);
  EXPECT_EQ(r->full->total_us, 654321u);
}

TEST(ParsePressureTest, CpuWithoutFullBefore513) {
  auto r = ParsePressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(r->full.has_value());
  EXPECT_EQ(r->some->total_us, 12u);
}

TEST(ParsePressureTest, UnknownKeysAreIgnored) {
  auto r = ParsePressure("some avg10=1.00 avg60=0.00 avg300=0.00 avg3600=0.5 total=12\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_DOUBLE_EQ(r->some->avg10, 1.0);
}

TEST(ParsePressureTest, Errors) {
  EXPECT_THAT(ParsePressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").error().message,
              HasSubstr("no 'some'"));
  EXPECT_THAT(ParsePressure("some avg10=0.00 avg60=0.0").error().message, HasSubstr("no total"));
  EXPECT_THAT(ParsePressure("some avg60=0.00 total=5\n").error().message, HasSubstr("no avg10"));
  EXPECT_THAT(ParsePressure("partial avg10=0.00 total=5\n").error().message, HasSubstr("'partial'"));
  EXPECT_THAT(ParsePressure("some avg10=abc total=5\n").error().message, HasSubstr("'abc'"));
  EXPECT_THAT(ParsePressure("some avg10=-1.0 total=5\n").error().message, HasSubstr("negative"));
  EXPECT_THAT(ParsePressure("some avg10=1.0 total=5x\n").error().message, HasSubstr("'5x'"));
  EXPECT_THAT(ParsePressure("some avg10 total=5\n").error().message, HasSubstr("key=value"));
  EXPECT_THAT(ParsePressure("some avg10=1 total=5\nsome avg10=1 total=5\n").error().message,
              HasSubstr("second 'some'"));
  EXPECT_FALSE(ParsePressure(""));
}

TEST(ParseLoadAvgTest, RealFormat) {
  auto r = ParseLoadAvg("1.88 0.61 0.23 7/121 9668\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_DOUBLE_EQ(r->load1, 1.88);
  EXPECT_DOUBLE_EQ(r->load5, 0.61);
  EXPECT_DOUBLE_EQ(r->load15, 0.23);
}

TEST(ParseLoadAvgTest, Errors) {
  EXPECT_THAT(ParseLoadAvg("1.88 0.6I 0.23 7/121 9668\n").error().message, HasSubstr("'0.6I'"));
  EXPECT_THAT(ParseLoadAvg("1.88 0.61\n").error().message, HasSubstr("2 fields"));
  EXPECT_THAT(ParseLoadAvg("1.88 0.61 0.23\n").error().message, HasSubstr("3 fields"));
  EXPECT_THAT(ParseLoadAvg("1.88 0.61 0.23 7-121 9668\n").error().message, HasSubstr("running/total"));
  EXPECT_THAT(ParseLoadAvg("1.88 0.61 0.23 7/121 9668 1\n").error().message, HasSubstr("extra"));
  EXPECT_THAT(ParseLoadAvg("1.88 0.61 0.23 7/121 9668\n1 2 3\n").error().message, HasSubstr("second line"));
  EXPECT_THAT(ParseLoadAvg("-1 0.61 0.23 7/121 9668\n").error().message, HasSubstr("negative"));
  EXPECT_THAT(ParseLoadAvg("").error().message, HasSubstr("empty"));
}

TEST(ParseVmStatTest, RealFormat) {
  auto r = ParseVmStat("nr_free_pages 853123\npgfault 5598191\npgmajfault 770\npgrefill 0\n");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->major_page_faults, 770u);
}

TEST(ParseVmStatTest, Errors) {
  EXPECT_THAT(ParseVmStat("pgfault 5\n").error().message, HasSubstr("pgmajfault"));
  EXPECT_THAT(ParseVmStat("pgmajfault 770\npgsteal").error().message, HasSubstr("line 2: 'pgsteal' has no value"));
  EXPECT_THAT(ParseVmStat("pgmajfault seven\n").error().message, HasSubstr("'seven'"));
  EXPECT_THAT(ParseVmStat("pgmajfault 7 7\n").error().message, HasSubstr("extra"));
}

}  // namespace
}  // namespace ithbat::collect
