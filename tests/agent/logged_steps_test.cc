#include "agent/logged_steps.h"

#include <gtest/gtest.h>

namespace ithbat::agent {
namespace {

TEST(LoggedSteps, CursorReturnsOnlyNewMarksInOrder) {
  LoggedSteps s;
  s.Add("j1", 0, 500, 1000);
  s.Add("j1", 0, 1000, 2000);
  s.Add("j2", 3, 7, 1500);
  auto all = s.Since("j1", 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 500);
  EXPECT_EQ(all[1].step, 1000);
  EXPECT_EQ(all[1].index, 2u);
  auto newer = s.Since("j1", all[0].index);
  ASSERT_EQ(newer.size(), 1u);
  EXPECT_EQ(newer[0].time, 2000);
  EXPECT_TRUE(s.Since("j1", all[1].index).empty());
  ASSERT_EQ(s.Since("j2", 0).size(), 1u);
  EXPECT_EQ(s.Since("j2", 0)[0].rank, 3);
  EXPECT_TRUE(s.Since("nope", 0).empty());
}

TEST(LoggedSteps, RejectsEmptyJobAndNegativeStep) {
  LoggedSteps s;
  s.Add("", 0, 1, 1);
  s.Add("j", 0, -1, 1);
  EXPECT_TRUE(s.Since("", 0).empty());
  EXPECT_TRUE(s.Since("j", 0).empty());
}

TEST(LoggedSteps, BoundedPerJobAndInJobs) {
  LoggedSteps s;
  for (size_t i = 0; i < LoggedSteps::kMaxPerJob + 10; ++i) s.Add("j", 0, static_cast<int64_t>(i), 1);
  auto marks = s.Since("j", 0);
  ASSERT_EQ(marks.size(), LoggedSteps::kMaxPerJob);
  EXPECT_EQ(marks.front().step, 10);  // the oldest ten were dropped
  EXPECT_EQ(marks.front().index, 11u);
  for (size_t i = 0; i < LoggedSteps::kMaxJobs; ++i) s.Add("k" + std::to_string(i), 0, 1, 1);
  // "j" was the first job created: it made room for the last one.
  EXPECT_TRUE(s.Since("j", 0).empty());
  EXPECT_EQ(s.Since("k0", 0).size(), 1u);
  EXPECT_EQ(s.Since("k" + std::to_string(LoggedSteps::kMaxJobs - 1), 0).size(), 1u);
}

}  // namespace
}  // namespace ithbat::agent
