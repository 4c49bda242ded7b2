// The shared scanners of the parsers folder (scan.h).
#include "collect/joblog/parsers/scan.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace ithbat::collect::joblog::scan {
namespace {

TEST(Scan, StripPrefixes) {
  EXPECT_EQ(StripPrefixes("[rank3]:[titan] x").rank, 3);
  EXPECT_EQ(StripPrefixes("[rank3]:[titan] x").body, "[titan] x");
  EXPECT_EQ(StripPrefixes("[default12]:iter 1: loss 2").rank, 12);
  EXPECT_EQ(StripPrefixes("[default12]:iter 1: loss 2").body, "iter 1: loss 2");
  EXPECT_EQ(StripPrefixes("  3: step 5").rank, 3);
  EXPECT_EQ(StripPrefixes("  3: step 5").body, "step 5");
  EXPECT_EQ(StripPrefixes("[1,5]<stdout>: hello").rank, 5);
  EXPECT_EQ(StripPrefixes("[1,5]<stdout>: hello").body, "hello");
  // Docker timestamps and journald heads, then a rank prefix.
  const auto d = StripPrefixes("2024-05-01T10:00:00.123456789Z [rank1]:x");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.body, "x");
  const auto j = StripPrefixes("May 01 10:00:00 node7 python[1234]: 0: iter 1");
  EXPECT_EQ(j.rank, 0);
  EXPECT_EQ(j.body, "iter 1");
  // Not prefixes.
  EXPECT_EQ(StripPrefixes(" 10%|#| 1/10 [").rank, -1);
  EXPECT_EQ(StripPrefixes(" 10%|#| 1/10 [").body, " 10%|#| 1/10 [");
  EXPECT_EQ(StripPrefixes("[2026-05-28 22:26:20] iteration").rank, -1);
  EXPECT_EQ(StripPrefixes("[rank]:x").rank, -1);
  EXPECT_EQ(StripPrefixes("[rank99999999999]:x").rank, -1);
  EXPECT_EQ(StripPrefixes("123456: x").rank, -1);  // more than 5 digits: not a Slurm label
  EXPECT_EQ(StripPrefixes("").body, "");
}

TEST(Scan, Numbers) {
  EXPECT_EQ(ParseLooseNumber("2,397"), 2397.0);
  EXPECT_EQ(ParseLooseNumber("1,234.56"), 1234.56);
  EXPECT_EQ(ParseLooseNumber("34.29%"), 34.29);
  EXPECT_TRUE(std::isnan(*ParseLooseNumber("nan.0")));
  EXPECT_FALSE(ParseLooseNumber(",1"));
  EXPECT_FALSE(ParseLooseNumber("1,"));
  EXPECT_FALSE(ParseLooseNumber("abc"));
  EXPECT_EQ(ParseExactInteger("794.0"), 794);
  EXPECT_EQ(ParseExactInteger("794"), 794);
  EXPECT_FALSE(ParseExactInteger("3.2e+4"));
  EXPECT_FALSE(ParseExactInteger("794.5"));
  EXPECT_FALSE(ParseExactInteger("-1"));
  EXPECT_FALSE(ParseUint("1234567890123456789"));  // 19 digits
  EXPECT_EQ(ParseUint("123456789012345678"), 123456789012345678);
  EXPECT_EQ(ParseByteSize("9.46GiB(64.99%)"), 9.46 * 1024.0 * 1024 * 1024);
  EXPECT_EQ(ParseByteSize("12 MB"), 12e6);
  EXPECT_FALSE(ParseByteSize("12"));
  EXPECT_FALSE(ParseByteSize("12 parsecs"));
}

TEST(Scan, SnakeCase) {
  EXPECT_EQ(SnakeCase("mtp_1 loss"), "mtp_1_loss");
  EXPECT_EQ(SnakeCase("rewards/chosen"), "rewards_chosen");
  EXPECT_EQ(SnakeCase("TFLOP/s/GPU"), "tflop_s_gpu");
  EXPECT_EQ(SnakeCase("  --  "), "");
  EXPECT_LE(SnakeCase(std::string(500, 'a')).size(), 64u);
}

TEST(Scan, Pairs) {
  PairScanner eq("loss=0.158, v_num=0, train_loss=0.149]", PairScanner::Style::kEquals);
  KeyValue kv;
  ASSERT_TRUE(eq.Next(kv));
  EXPECT_EQ(kv.key, "loss");
  EXPECT_EQ(kv.value, "0.158");
  ASSERT_TRUE(eq.Next(kv));
  EXPECT_EQ(kv.key, "v_num");
  ASSERT_TRUE(eq.Next(kv));
  EXPECT_EQ(kv.value, "0.149");
  EXPECT_FALSE(eq.Next(kv));

  PairScanner colon("step: 10  loss:  9.9  tps: 2,397  \"k\": \"v\",", PairScanner::Style::kColon);
  ASSERT_TRUE(colon.Next(kv));
  EXPECT_EQ(kv.key, "step");
  EXPECT_EQ(kv.value, "10");
  ASSERT_TRUE(colon.Next(kv));
  ASSERT_TRUE(colon.Next(kv));
  EXPECT_EQ(kv.value, "2,397");
  ASSERT_TRUE(colon.Next(kv));
  EXPECT_EQ(kv.key, "k");
  EXPECT_EQ(kv.value, "v");
  EXPECT_FALSE(colon.Next(kv));

  // Bounded.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "a=1 ";
  PairScanner bounded(many, PairScanner::Style::kEquals, 10);
  int n = 0;
  while (bounded.Next(kv)) ++n;
  EXPECT_EQ(n, 10);
}

TEST(Scan, Fields) {
  FieldSplitter f(" iteration 5/ 10 | lm loss: 2.5 | grad norm: 0.3 | cut");
  std::string_view field;
  ASSERT_TRUE(f.Next(field));
  EXPECT_EQ(field, "iteration 5/ 10");
  ASSERT_TRUE(f.Next(field));
  KeyValue kv;
  ASSERT_TRUE(SplitColonField(field, kv));
  EXPECT_EQ(kv.key, "lm loss");
  EXPECT_EQ(kv.value, "2.5");
  EXPECT_TRUE(f.terminated());
  ASSERT_TRUE(f.Next(field));
  ASSERT_TRUE(f.Next(field));
  EXPECT_EQ(field, "cut");
  EXPECT_FALSE(f.terminated());
  EXPECT_FALSE(f.Next(field));
}

TEST(Scan, TqdmBars) {
  TqdmBar bar;
  ASSERT_TRUE(
      FindTqdmBar("Epoch 3:  45%|####5     | 45/100 [00:10<00:12,  4.4it/s, v_num=3, loss=0.5]", bar));
  EXPECT_EQ(bar.desc, "Epoch 3");
  EXPECT_EQ(bar.n, 45);
  EXPECT_EQ(bar.total, 100);
  EXPECT_EQ(bar.postfix, "v_num=3, loss=0.5");
  EXPECT_TRUE(bar.closed);
  ASSERT_TRUE(FindTqdmBar("Epoch 0:  97% 1651/1702 [13:00<00:24,  2.11it/s]", bar));
  EXPECT_EQ(bar.n, 1651);
  EXPECT_EQ(bar.postfix, "");
  ASSERT_TRUE(FindTqdmBar("  1%|▉  | 40/4500 [07:21<4:45:21,  3.84s/it[INFO|trainer.py:3850] ", bar));
  EXPECT_EQ(bar.desc, "");
  EXPECT_EQ(bar.n, 40);
  EXPECT_FALSE(bar.closed);
  EXPECT_FALSE(FindTqdmBar("memory: 49.66GiB(52.28%)  tps: 5,856  mfu: 34.29%", bar));
  EXPECT_FALSE(FindTqdmBar("100%", bar));
  EXPECT_FALSE(FindTqdmBar("Training: 0it [00:00, ?it/s]", bar));
  EXPECT_FALSE(FindTqdmBar("50%|", bar));
}

TEST(Scan, Find) {
  EXPECT_EQ(Find("abcabc", "ca"), 2u);
  EXPECT_EQ(Find("abcabc", "ca", 3), npos);
  EXPECT_EQ(Find("abc", ""), npos);
  EXPECT_EQ(Find("", "a"), npos);
  EXPECT_EQ(Find("ab", "abc"), npos);
  // Same answers as std::string_view::find on random text over a small alphabet.
  uint64_t seed = 12345;
  auto next = [&seed]() {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(seed >> 33);
  };
  const std::string_view alphabet = "ab :[k";
  for (int round = 0; round < 20000; ++round) {
    std::string hay(next() % 40, 'a');
    for (char& c : hay) c = alphabet[next() % alphabet.size()];
    std::string needle(1 + next() % 4, 'a');
    for (char& c : needle) c = alphabet[next() % alphabet.size()];
    const size_t from = next() % (hay.size() + 2);
    const size_t want = from > hay.size() ? npos : std::string_view(hay).find(needle, from);
    ASSERT_EQ(Find(hay, needle, from), want) << hay << " / " << needle << " @" << from;
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog::scan
