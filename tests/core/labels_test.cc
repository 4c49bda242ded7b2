#include "core/labels.h"

#include <gtest/gtest.h>

#include <string>

namespace ithbat {
namespace {

TEST(LabelSetTest, SortsByNameAndFindsValues) {
  auto set = LabelSet::From({{"gpu", "3"}, {"job_id", "42"}, {"a", "x"}});
  ASSERT_TRUE(set.has_value()) << set.error().ToString();
  ASSERT_EQ(set->size(), 3u);
  EXPECT_EQ(set->NameAt(0), "a");
  EXPECT_EQ(set->NameAt(1), "gpu");
  EXPECT_EQ(set->NameAt(2), "job_id");
  EXPECT_EQ(set->Get("gpu"), "3");
  EXPECT_FALSE(set->Get("rank").has_value());
  EXPECT_FALSE(set->Get("never-interned-name").has_value());
}

TEST(LabelSetTest, EqualSetsAreEqualWhateverTheInputOrder) {
  auto a = LabelSet::From({{"x", "1"}, {"y", "2"}});
  auto b = LabelSet::From({{"y", "2"}, {"x", "1"}});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->Hash(), b->Hash());
  auto c = LabelSet::From({{"x", "1"}, {"y", "3"}});
  EXPECT_NE(*a, *c);
}

TEST(LabelSetTest, EmptyValuesAreAbsent) {
  auto set = LabelSet::From({{"x", ""}, {"y", "2"}});
  ASSERT_TRUE(set);
  EXPECT_EQ(set->size(), 1u);
  EXPECT_EQ(*set, *LabelSet::From({{"y", "2"}}));
}

TEST(LabelSetTest, RejectsBadNamesDuplicatesAndOversizedInput) {
  EXPECT_EQ(LabelSet::From({{"1abc", "x"}}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(LabelSet::From({{"__name__", "x"}}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(LabelSet::From({{"a-b", "x"}}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(LabelSet::From({{"", "x"}}).error().code, ErrorCode::kInvalidArgument);
  auto dup = LabelSet::From({{"a", "1"}, {"a", "2"}});
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("twice"), std::string::npos);
  std::string big(kMaxLabelValueBytes + 1, 'v');
  EXPECT_EQ(LabelSet::From({{"a", big}}).error().code, ErrorCode::kInvalidArgument);
  std::string fits(kMaxLabelValueBytes, 'v');
  EXPECT_TRUE(LabelSet::From({{"a", fits}}).has_value());
  std::vector<std::pair<std::string, std::string>> many;
  for (size_t i = 0; i <= kMaxLabelsPerSet; ++i) many.emplace_back("l" + std::to_string(i), "v");
  EXPECT_EQ(LabelSet::From(many).error().code, ErrorCode::kInvalidArgument);
  many.pop_back();
  EXPECT_TRUE(LabelSet::From(many).has_value());
}

TEST(LabelSetTest, WithAddsReplacesAndRemoves) {
  auto base = LabelSet::From({{"a", "1"}, {"c", "3"}});
  ASSERT_TRUE(base);
  auto added = base->With("b", "2");
  ASSERT_TRUE(added);
  EXPECT_EQ(added->ToString(), R"({a="1",b="2",c="3"})");
  auto replaced = base->With("a", "9");
  ASSERT_TRUE(replaced);
  EXPECT_EQ(replaced->ToString(), R"({a="9",c="3"})");
  auto removed = base->With("a", "");
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->ToString(), R"({c="3"})");
  EXPECT_FALSE(base->With("bad name", "x").has_value());
}

TEST(LabelSetTest, ToStringEscapesForThePrometheusTextFormat) {
  auto set = LabelSet::From({{"path", "C:\\dir \"x\"\nnext"}});
  ASSERT_TRUE(set);
  EXPECT_EQ(set->ToString(), R"({path="C:\\dir \"x\"\nnext"})");
  EXPECT_EQ(LabelSet().ToString(), "");
}

TEST(StringTableTest, InternIsStableAndIdempotent) {
  auto& table = StringTable::Global();
  auto a = table.Intern("labels-test-unique-string");
  auto b = table.Intern("labels-test-unique-string");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(table.Lookup(*a), "labels-test-unique-string");
  EXPECT_EQ(table.Find("labels-test-unique-string"), *a);
  EXPECT_FALSE(table.Find("labels-test-never-seen").has_value());
  EXPECT_EQ(table.Lookup(0xFFFFFFFFu), "");
}

TEST(NamesTest, MetricAndLabelNameRules) {
  EXPECT_TRUE(IsValidMetricName("ithbat_host_cpu_seconds_total"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m"));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("_x9"));
  EXPECT_FALSE(IsValidLabelName("x:y"));
}

}  // namespace
}  // namespace ithbat
