// User pattern sets: loading, refusal messages, bounds, and the events a set's groups give.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

constexpr std::string_view kExample = R"j({
  "pattern_sets": [
    {"name": "mytrainer",
     "patterns": [
       {"regex": "step (?P<step>\\d+)/(?P<total_steps>\\d+) .*loss=(?P<loss>\\S+) acc=(?P<acc>[0-9.]+)"},
       {"regex": "saved to (?P<path>\\S+) \\((?P<bytes>[0-9.]+ [KMG]iB)\\)", "event": "checkpoint_end"},
       {"regex": "saving step (?P<step>\\d+)", "event": "checkpoint_begin"},
       {"regex": "FATAL: (?P<text>.*)", "event": "error", "class": "my_fatal"},
       {"regex": "eval: (?P<eval_bleu>[0-9.]+)"}
     ]},
    {"name": "other-tool",
     "comment": "a second set",
     "patterns": [{"regex": "^\\[r(?P<rank>\\d+)\\] tput=(?P<tokens_per_second>\\d+)"}]}
  ]
})j";

std::optional<std::string> Attr(const ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::string RefusalOf(std::string_view json) {
  auto r = UserPatterns::Parse(json);
  if (r) return "(accepted)";
  return r.error().message;
}

TEST(UserPatternsTest, ParsesAndRuns) {
  auto up = UserPatterns::Parse(kExample);
  ASSERT_TRUE(up) << up.error().message;
  EXPECT_EQ(up->names(), (std::vector<std::string>{"mytrainer", "other-tool"}));
  auto p = up->MakeParser();
  EXPECT_EQ(p->name(), "user");

  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"nothing to see"}, out));
  EXPECT_TRUE(out.empty());

  EXPECT_TRUE(p->Parse(LineView{"step 12/500 took 1s loss=2.5 acc=0.75"}, out));
  EXPECT_EQ(p->name(), "user:mytrainer");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].kind, EventKind::kStep);
  EXPECT_EQ(out[0].step, 12);
  EXPECT_EQ(Attr(out[0], "total_steps"), "500");
  EXPECT_EQ(out[1].kind, EventKind::kLoss);
  EXPECT_EQ(out[1].name, "loss");
  EXPECT_EQ(out[1].value, 2.5);
  EXPECT_EQ(out[1].step, 12);
  EXPECT_EQ(out[2].kind, EventKind::kTrainMetric);
  EXPECT_EQ(out[2].name, "acc");

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"step 13/500 loss=nan acc=0.1"}, out));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(std::isnan(out[1].value));

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"model saved to /ckpt/step_100 (1.5 GiB)"}, out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, EventKind::kCheckpointEnd);
  EXPECT_EQ(Attr(out[0], "path"), "/ckpt/step_100");
  EXPECT_EQ(Attr(out[0], "bytes"), std::to_string(3 * 512 * 1024 * 1024LL));

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"saving step 200"}, out));
  ASSERT_EQ(out.size(), 2u);  // the step and the checkpoint begin at that step
  EXPECT_EQ(out[1].kind, EventKind::kCheckpointBegin);
  EXPECT_EQ(out[1].step, 200);

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"12:00 FATAL: disk quota exceeded"}, out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, EventKind::kError);
  EXPECT_EQ(out[0].name, "my_fatal");
  EXPECT_EQ(out[0].text, "disk quota exceeded");

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"eval: 31.5"}, out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, EventKind::kEvalMetric);
  EXPECT_EQ(out[0].name, "eval_bleu");

  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"[r3] tput=4096"}, out));
  EXPECT_EQ(p->name(), "user:other-tool");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "tokens_per_second");
  EXPECT_EQ(out[0].rank, 3);

  // A numeric group that did not capture a number gives nothing for that group.
  out.clear();
  EXPECT_TRUE(p->Parse(LineView{"step 14/500 loss=oops acc=0.2"}, out));
  EXPECT_EQ(out.size(), 2u);
}

TEST(UserPatternsTest, ParserOutlivesTheSets) {
  std::unique_ptr<FormatParser> p;
  {
    auto up = UserPatterns::Parse(kExample);
    ASSERT_TRUE(up);
    p = up->MakeParser();
  }
  std::vector<ParsedEvent> out;
  EXPECT_TRUE(p->Parse(LineView{"eval: 1.0"}, out));
  EXPECT_EQ(p->name(), "user:mytrainer");
}

TEST(UserPatternsTest, RefusalsNameSetPatternAndReason) {
  const std::string bad_regex = RefusalOf(R"j({"pattern_sets":[{"name":"a","patterns":[
      {"regex":"ok (?P<loss>\\d+)"}, {"regex":"broken (?P<loss>\\d+"}]}]})j");
  EXPECT_NE(bad_regex.find("\"a\""), std::string::npos) << bad_regex;
  EXPECT_NE(bad_regex.find("patterns[1]"), std::string::npos) << bad_regex;
  EXPECT_NE(bad_regex.find("bad regex"), std::string::npos) << bad_regex;

  const std::string bad_event =
      RefusalOf(R"j({"pattern_sets":[{"name":"b","patterns":[{"regex":"x (?P<path>\\S+)","event":"checkpoint_middle"}]}]})j");
  EXPECT_NE(bad_event.find("\"b\" patterns[0]"), std::string::npos) << bad_event;
  EXPECT_NE(bad_event.find("unknown event \"checkpoint_middle\""), std::string::npos) << bad_event;

  const std::string bad_group = RefusalOf(R"j({"pattern_sets":[{"name":"c","patterns":[{"regex":"x (?P<Loss2>\\d+)"}]}]})j");
  EXPECT_NE(bad_group.find("unknown group \"Loss2\""), std::string::npos) << bad_group;

  const std::string attr_without_event = RefusalOf(R"j({"pattern_sets":[{"name":"d","patterns":[{"regex":"to (?P<path>\\S+)"}]}]})j");
  EXPECT_NE(attr_without_event.find("group \"path\""), std::string::npos) << attr_without_event;

  EXPECT_NE(RefusalOf(R"j({"pattern_sets":[{"name":"e","patterns":[{"regex":"F (?P<text>.*)","event":"error"}]}]})j")
                .find("needs a \"class\""),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"j({"pattern_sets":[{"name":"f","patterns":[{"regex":"no groups"}]}]})j").find("named group"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"j({"pattern_sets":[{"name":"g","patterns":[{"regx":"typo"}]}]})j").find("unknown key \"regx\""),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"j({"pattern_sets":[{"name":"h","patterns":[{"regex":"a (?P<x>\\d)"}]},
                                      {"name":"h","patterns":[{"regex":"b (?P<x>\\d)"}]}]})j")
                .find("duplicate"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"j({"pattern_sets":[{"name":"i","patterns":[{"regex":"t (?P<total_steps>\\d+)"}]}]})j")
                .find("needs a \"step\""),
            std::string::npos);
}

TEST(UserPatternsTest, Bounds) {
  // 65 patterns in one set.
  std::string many = R"j({"pattern_sets":[{"name":"big","patterns":[)j";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + R"j({"regex":"k)j" + std::to_string(i) + R"j( (?P<v>\\d+)"})j";
  many += "]}]}";
  const std::string too_many = RefusalOf(many);
  EXPECT_NE(too_many.find("\"big\""), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("too many patterns"), std::string::npos) << too_many;

  // 65 sets.
  std::string sets = R"j({"pattern_sets":[)j";
  for (int i = 0; i < 65; ++i)
    sets += std::string(i ? "," : "") + R"j({"name":"s)j" + std::to_string(i) + R"j(","patterns":[{"regex":"(?P<v>\\d+)"}]})j";
  sets += "]}";
  EXPECT_NE(RefusalOf(sets).find("too many pattern sets"), std::string::npos);

  // A regex over 1 KiB.
  const std::string long_regex = R"j({"pattern_sets":[{"name":"long","patterns":[{"regex":"(?P<v>\\d+))j" +
                                 std::string(1100, 'a') + R"j("}]}]})j";
  const std::string too_long = RefusalOf(long_regex);
  EXPECT_NE(too_long.find("patterns[0]"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("regex too long"), std::string::npos) << too_long;

  // A file over 1 MiB.
  std::string huge = R"j({"pattern_sets":[], "comment":")j" + std::string(1024 * 1024, 'x') + R"j("})j";
  auto r = UserPatterns::Parse(huge);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);

  // More capture groups than events a line may give.
  std::string groups = "";
  for (int i = 0; i < 40; ++i) groups += "(?P<g" + std::to_string(i) + ">\\\\d)";
  const std::string many_groups =
      RefusalOf(R"j({"pattern_sets":[{"name":"grp","patterns":[{"regex":")j" + groups + R"j("}]}]})j");
  EXPECT_NE(many_groups.find("too many capture groups"), std::string::npos) << many_groups;
}

TEST(UserPatternsTest, EventsPerLineBoundedAcrossPatterns) {
  // Three patterns of 20 numeric groups each match the same line: still at most 32 events.
  std::string regex;
  for (int i = 0; i < 20; ++i) regex += "(?P<m" + std::to_string(i) + ">\\\\d)";
  std::string json = R"j({"pattern_sets":[{"name":"wide","patterns":[)j";
  for (int p = 0; p < 3; ++p) json += std::string(p ? "," : "") + R"j({"regex":")j" + regex + R"j("})j";
  json += "]}]}";
  auto up = UserPatterns::Parse(json);
  ASSERT_TRUE(up) << up.error().message;
  auto parser = up->MakeParser();
  std::vector<ParsedEvent> out;
  EXPECT_TRUE(parser->Parse(LineView{std::string(40, '7')}, out));
  EXPECT_EQ(out.size(), kMaxEventsPerLine);
}

TEST(UserPatternsTest, MalformedJsonIsAnErrorNotAThrow) {
  for (std::string_view text : {"", "{", "[]", "{\"pattern_sets\": 5}", "{\"pattern_sets\": [5]}",
                                "{\"pattern_sets\": [{\"name\": 7, \"patterns\": []}]}",
                                "{\"pattern_sets\": [{\"name\": \"x\", \"patterns\": [{\"regex\": 5}]}]}",
                                "{\"pattern_sets\": [{\"name\": \"x\", \"patterns\": [{\"regex\": \"(?P<v>1)\", \"event\": 3}]}]}",
                                "\xff\xfe garbage"}) {
    auto r = UserPatterns::Parse(text);
    EXPECT_FALSE(r) << text;
  }
  auto r = UserPatterns::Parse("{");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
}

TEST(UserPatternsTest, LoadFromFile) {
  testing::TempDir dir;
  dir.WriteFile("patterns.json", kExample);
  auto up = UserPatterns::Load((dir.path() / "patterns.json").string());
  ASSERT_TRUE(up) << up.error().message;
  EXPECT_EQ(up->names().size(), 2u);

  auto missing = UserPatterns::Load((dir.path() / "nope.json").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);

  dir.WriteFile("bad.json", R"j({"pattern_sets":[{"name":"z","patterns":[{"regex":"("}]}]})j");
  auto bad = UserPatterns::Load((dir.path() / "bad.json").string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad.json"), std::string::npos) << bad.error().message;
}

TEST(UserPatternsTest, EmptyPatternsObjectIsUsable) {
  UserPatterns none;
  EXPECT_TRUE(none.names().empty());
  auto p = none.MakeParser();
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"step 1 loss=2"}, out));
  EXPECT_EQ(p->name(), "user");
}

}  // namespace
}  // namespace ithbat::collect::joblog
