#include "store/step_timeline.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ithbat::store {
namespace {

std::vector<int64_t> StepsOf(const std::vector<StepSpan>& spans) {
  std::vector<int64_t> out;
  for (const auto& s : spans) out.push_back(s.step);
  return out;
}

// Steps 0..n-1 of 100 ns each starting at 1000.
void RecordRun(StepTimelines* tl, std::string_view job, int32_t rank, int64_t n) {
  for (int64_t s = 0; s < n; ++s) ASSERT_TRUE(tl->Record(job, rank, {s, 1000 + s * 100, 1100 + s * 100}));
}

TEST(StepTimelinesTest, StepAtUsesHalfOpenSpans) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 3);  // [1000,1100) [1100,1200) [1200,1300)
  EXPECT_EQ(tl.StepAt("j", 0, 1000), 0);
  EXPECT_EQ(tl.StepAt("j", 0, 1099), 0);
  EXPECT_EQ(tl.StepAt("j", 0, 1100), 1);
  EXPECT_EQ(tl.StepAt("j", 0, 1299), 2);
  EXPECT_EQ(tl.StepAt("j", 0, 1300), std::nullopt);
  EXPECT_EQ(tl.StepAt("j", 0, 999), std::nullopt);
  EXPECT_EQ(tl.StepAt("j", 1, 1050), std::nullopt);
  EXPECT_EQ(tl.StepAt("other", 0, 1050), std::nullopt);
  EXPECT_EQ(tl.size(), 3u);
}

TEST(StepTimelinesTest, GapsBetweenStepsMapToNothing) {
  StepTimelines tl;
  ASSERT_TRUE(tl.Record("j", 0, {1, 100, 200}));
  ASSERT_TRUE(tl.Record("j", 0, {2, 300, 400}));
  EXPECT_EQ(tl.StepAt("j", 0, 250), std::nullopt);
  EXPECT_EQ(tl.StepAt("j", 0, 350), 2);
}

TEST(StepTimelinesTest, ZeroLengthSpanHoldsNoInstant) {
  StepTimelines tl;
  ASSERT_TRUE(tl.Record("j", 0, {1, 100, 100}));
  EXPECT_EQ(tl.StepAt("j", 0, 100), std::nullopt);
  EXPECT_EQ(tl.Find("j", 0, 1), (StepSpan{1, 100, 100}));
}

TEST(StepTimelinesTest, RejectsEndBeforeStart) {
  StepTimelines tl;
  auto st = tl.Record("j", 0, {1, 200, 100});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(tl.size(), 0u);
}

TEST(StepTimelinesTest, RecordReplacesAnExistingStep) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 5);
  // A logged step calibrates the inferred span of step 3.
  ASSERT_TRUE(tl.Record("j", 0, {3, 1290, 1410}));
  EXPECT_EQ(tl.size(), 5u);
  EXPECT_EQ(tl.Find("j", 0, 3), (StepSpan{3, 1290, 1410}));
  EXPECT_EQ(tl.StepAt("j", 0, 1295), 3);
  EXPECT_EQ(tl.StepAt("j", 0, 1395), 3);
  // Where the calibrated span overlaps the next (still inferred) one, the later start wins.
  EXPECT_EQ(tl.StepAt("j", 0, 1405), 4);
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 0, 10'000)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(StepTimelinesTest, FindAfterStepNumbersRepeat) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 5000);
  // Restart from a checkpoint long after: step numbers begin again at 10.
  for (int64_t s = 10; s < 20; ++s)
    ASSERT_TRUE(tl.Record("j", 0, {s, 10'000'000 + s * 10, 10'000'010 + s * 10}));
  EXPECT_EQ(tl.Find("j", 0, 15), (StepSpan{15, 10'000'150, 10'000'160}));
  EXPECT_EQ(tl.Find("j", 0, 4000), (StepSpan{4000, 401'000, 401'100}));
  EXPECT_EQ(tl.Find("j", 0, 9999), std::nullopt);
  EXPECT_EQ(tl.StepAt("j", 0, 10'000'155), 15);
}

TEST(StepTimelinesTest, FindBinarySearchesInOrderTimelines) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 1000);
  for (int64_t s : {0, 1, 499, 500, 999})
    EXPECT_EQ(tl.Find("j", 0, s), (StepSpan{s, 1000 + s * 100, 1100 + s * 100}));
  EXPECT_EQ(tl.Find("j", 0, 1000), std::nullopt);
  EXPECT_EQ(tl.Find("j", 0, -5), std::nullopt);
}

TEST(StepTimelinesTest, OutOfOrderRecordIsPlacedByStart) {
  StepTimelines tl;
  ASSERT_TRUE(tl.Record("j", 0, {1, 100, 200}));
  ASSERT_TRUE(tl.Record("j", 0, {3, 300, 400}));
  ASSERT_TRUE(tl.Record("j", 0, {2, 200, 300}));
  EXPECT_EQ(tl.StepAt("j", 0, 250), 2);
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 0, 1000)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(tl.Find("j", 0, 2), (StepSpan{2, 200, 300}));
}

TEST(StepTimelinesTest, RangeReturnsOverlappingSteps) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 10);  // step s: [1000+100s, 1100+100s)
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 1150, 1350)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 1100, 1100)), (std::vector<int64_t>{1}));  // end is exclusive
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 0, 999)), (std::vector<int64_t>{}));
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 1000, 1000)), (std::vector<int64_t>{0}));
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 5000, 9000)), (std::vector<int64_t>{}));
  EXPECT_EQ(StepsOf(tl.Range("j", 0, 2000, 1000)), (std::vector<int64_t>{}));
  EXPECT_EQ(tl.Range("j", 0, kMinTime, kMaxTime).size(), 10u);
}

TEST(StepTimelinesTest, BoundedPerRankDropsOldest) {
  StepTimelines tl(3);
  RecordRun(&tl, "j", 0, 5);
  RecordRun(&tl, "j", 1, 2);
  EXPECT_EQ(tl.size(), 5u);
  EXPECT_EQ(tl.Find("j", 0, 1), std::nullopt);
  EXPECT_EQ(StepsOf(tl.Range("j", 0, kMinTime, kMaxTime)), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(tl.Find("j", 1, 0), (StepSpan{0, 1000, 1100}));
}

TEST(StepTimelinesTest, TakeUnflushedInRecordOrder) {
  StepTimelines tl;
  ASSERT_TRUE(tl.Record("a", 0, {1, 100, 200}));
  ASSERT_TRUE(tl.Record("b", 2, {7, 150, 250}));
  ASSERT_TRUE(tl.Record("a", 0, {2, 200, 300}));
  auto got = tl.TakeUnflushed();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].job, "a");
  EXPECT_EQ(got[0].span.step, 1);
  EXPECT_EQ(got[1].job, "b");
  EXPECT_EQ(got[1].rank, 2);
  EXPECT_EQ(got[1].span, (StepSpan{7, 150, 250}));
  EXPECT_EQ(got[2].span.step, 2);
  EXPECT_TRUE(tl.TakeUnflushed().empty());
  // A replacement of a flushed step is new for the flusher.
  ASSERT_TRUE(tl.Record("a", 0, {1, 110, 190}));
  got = tl.TakeUnflushed();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].span, (StepSpan{1, 110, 190}));
}

TEST(StepTimelinesTest, DropBeforeRemovesEndedSteps) {
  StepTimelines tl;
  RecordRun(&tl, "j", 0, 5);  // ends at 1100..1500
  ASSERT_TRUE(tl.Record("k", 0, {1, 100, 200}));
  tl.DropBefore(1200);
  EXPECT_EQ(StepsOf(tl.Range("j", 0, kMinTime, kMaxTime)), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(tl.StepAt("k", 0, 150), std::nullopt);
  EXPECT_EQ(tl.size(), 3u);
  EXPECT_EQ(tl.StepAt("j", 0, 1250), 2);
}

TEST(StepTimelinesTest, ConcurrentRanks) {
  StepTimelines tl;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 4; ++r) {
    threads.emplace_back([&tl, r] {
      for (int64_t s = 0; s < 1000; ++s) (void)tl.Record("j", r, {s, s * 10, s * 10 + 10});
    });
  }
  threads.emplace_back([&tl] {
    for (int i = 0; i < 1000; ++i) (void)tl.StepAt("j", 0, i);
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(tl.size(), 4000u);
  for (int32_t r = 0; r < 4; ++r) EXPECT_EQ(tl.StepAt("j", r, 5555), 555);
  EXPECT_EQ(tl.TakeUnflushed().size(), 4000u);
}

}  // namespace
}  // namespace ithbat::store
