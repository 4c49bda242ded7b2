#include <string>

#include <gtest/gtest.h>

#include "store/store.h"

namespace ithbat::store {
namespace {

using Op = LabelMatcher::Op;

TEST(SelectorTest, BareName) {
  auto s = SeriesSelector::Parse("gpu_utilization_percent");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->metric, "gpu_utilization_percent");
  EXPECT_TRUE(s->matchers.empty());

  s = SeriesSelector::Parse("  job:rate5m  ");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->metric, "job:rate5m");

  s = SeriesSelector::Parse("up{}");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->metric, "up");
  EXPECT_TRUE(s->matchers.empty());
}

TEST(SelectorTest, AllOperators) {
  auto s = SeriesSelector::Parse(R"(m{a="x",b!="y",c=~"re.*",d!~"r|s"})");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->metric, "m");
  ASSERT_EQ(s->matchers.size(), 4u);
  EXPECT_EQ(s->matchers[0].name, "a");
  EXPECT_EQ(s->matchers[0].op, Op::kEq);
  EXPECT_EQ(s->matchers[0].value, "x");
  EXPECT_EQ(s->matchers[1].op, Op::kNe);
  EXPECT_EQ(s->matchers[1].value, "y");
  EXPECT_EQ(s->matchers[2].op, Op::kRe);
  EXPECT_EQ(s->matchers[2].value, "re.*");
  EXPECT_EQ(s->matchers[3].op, Op::kNre);
  EXPECT_EQ(s->matchers[3].name, "d");
  EXPECT_EQ(s->matchers[3].value, "r|s");
}

TEST(SelectorTest, WhitespaceAndTrailingComma) {
  auto s = SeriesSelector::Parse(" m { a = \"x\" ,\n\tb =~ 'y' , } ");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->metric, "m");
  ASSERT_EQ(s->matchers.size(), 2u);
  EXPECT_EQ(s->matchers[1].value, "y");
}

TEST(SelectorTest, Escapes) {
  auto s = SeriesSelector::Parse(R"(m{a="say \"hi\"",b="back\\slash",c="line\nbreak",d=~"a\.b"})");
  ASSERT_TRUE(s) << s.error().ToString();
  ASSERT_EQ(s->matchers.size(), 4u);
  EXPECT_EQ(s->matchers[0].value, "say \"hi\"");
  EXPECT_EQ(s->matchers[1].value, "back\\slash");
  EXPECT_EQ(s->matchers[2].value, "line\nbreak");
  EXPECT_EQ(s->matchers[3].value, "a\\.b");  // regex escapes pass through
  s = SeriesSelector::Parse(R"(m{a='it\'s'})");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->matchers[0].value, "it's");
}

TEST(SelectorTest, NameAsMatcher) {
  auto s = SeriesSelector::Parse(R"({__name__="gpu_power_usage_milliwatts", gpu="0"})");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->metric, "gpu_power_usage_milliwatts");
  ASSERT_EQ(s->matchers.size(), 1u);
  EXPECT_EQ(s->matchers[0].name, "gpu");

  s = SeriesSelector::Parse(R"({__name__=~"gpu_.*"})");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_TRUE(s->metric.empty());
  ASSERT_EQ(s->matchers.size(), 1u);
  EXPECT_EQ(s->matchers[0].name, "__name__");
  EXPECT_EQ(s->matchers[0].op, Op::kRe);

  s = SeriesSelector::Parse(R"({gpu="3"})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->metric.empty());

  EXPECT_FALSE(SeriesSelector::Parse(R"(a{__name__="b"})"));  // the name twice, differently
}

void ExpectError(std::string_view text, std::string_view fragment) {
  auto s = SeriesSelector::Parse(text);
  ASSERT_FALSE(s) << "parsed: " << text;
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find(fragment), std::string::npos)
      << "'" << s.error().message << "' lacks '" << fragment << "'";
}

TEST(SelectorTest, Errors) {
  ExpectError("", "metric name or a label matcher");
  ExpectError("   ", "metric name or a label matcher");
  ExpectError("{}", "metric name or a label matcher");
  ExpectError("m{", "position 2");
  ExpectError("m{a}", "position 3");
  ExpectError("m{a=x}", "quoted value");
  ExpectError(R"(m{a="x")", "expected ','");
  ExpectError(R"(m{a="x)", "unterminated");
  ExpectError(R"(m{a="x" b="y"})", "position 8");
  ExpectError(R"(m{1a="x"})", "label name");
  ExpectError(R"(m{__reserved="x"})", "invalid label name '__reserved'");
  ExpectError(R"(m{a=~"("})", "regular expression");
  ExpectError(R"(m{a!~"[z-a]"})", "regular expression");
  ExpectError(R"(m{a=="x"})", "quoted value");
  ExpectError(R"(m{a<"x"})", "expected one of");
  ExpectError("m}", "unexpected '}'");
  ExpectError("m n", "unexpected 'n'");
  ExpectError("9m", "unexpected '9'");
  ExpectError(R"(m{a="x"} extra)", "unexpected 'e'");
  ExpectError("m-x", "unexpected '-'");
}

TEST(SelectorTest, Bounds) {
  std::string many = "m{";
  for (int i = 0; i < 17; ++i) many += "l" + std::to_string(i) + "=\"v\",";
  many += "}";
  ExpectError(many, "more than 16 matchers");

  std::string sixteen = "m{";
  for (int i = 0; i < 16; ++i) sixteen += "l" + std::to_string(i) + "=\"v\",";
  sixteen += "}";
  EXPECT_TRUE(SeriesSelector::Parse(sixteen));

  std::string big = "m{a=\"" + std::string(1100, 'x') + "\"}";
  ExpectError(big, "bytes (max 1024)");
}

}  // namespace
}  // namespace ithbat::store
