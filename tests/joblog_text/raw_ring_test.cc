#include "collect/joblog/text/raw_ring.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace ithbat::collect::joblog {
namespace {

RawLine Line(TimeNs t, int32_t pid, std::string text) {
  RawLine l;
  l.time = t;
  l.pid = pid;
  l.fd = 1;
  l.text = std::move(text);
  return l;
}

TEST(RawRingTest, RedactsOnAppend) {
  RawRing ring;
  EXPECT_EQ(ring.Append(Line(1, 10, "export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345")), 1u);
  EXPECT_EQ(ring.Append(Line(2, 10, "{'loss': 1.5}")), 0u);
  auto lines = ring.Read(kMinTime, kMaxTime);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "export HF_TOKEN=[REDACTED]");
  EXPECT_EQ(lines[1].text, "{'loss': 1.5}");
}

TEST(RawRingTest, OldestDroppedAtTheBudget) {
  RawRing ring(64 * 1024);
  const std::string text(1000, 'a');
  for (int k = 0; k < 500; ++k) ring.Append(Line(k, 1, text + std::to_string(k)));
  EXPECT_LE(ring.bytes(), 64u * 1024);
  EXPECT_GT(ring.dropped_lines(), 0u);
  auto lines = ring.Read(kMinTime, kMaxTime);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.size() + ring.dropped_lines(), 500u);
  EXPECT_EQ(lines.back().text, text + "499");  // the newest survive, in order
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_LT(lines[i - 1].time, lines[i].time);
}

TEST(RawRingTest, EmptyLinesAreBoundedToo) {
  RawRing ring(16 * 1024);
  for (int k = 0; k < 100000; ++k) ring.Append(Line(k, 1, ""));
  EXPECT_LE(ring.bytes(), 16u * 1024);
  EXPECT_LT(ring.Read(kMinTime, kMaxTime, -1, 1000000).size(), 1000u);
}

TEST(RawRingTest, OversizeLineIsCutToTheBudget) {
  RawRing ring(4096);
  ring.Append(Line(1, 1, std::string(100000, 'z')));
  EXPECT_LE(ring.bytes(), 4096u);
  auto lines = ring.Read(kMinTime, kMaxTime);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LT(lines[0].text.size(), 4096u);
}

TEST(RawRingTest, ReadsATimeRangeAndOnePid) {
  RawRing ring;
  for (int k = 0; k < 10; ++k) ring.Append(Line(100 + k, k % 2 == 0 ? 7 : 8, "line " + std::to_string(k)));
  auto range = ring.Read(102, 106);
  ASSERT_EQ(range.size(), 4u);
  EXPECT_EQ(range.front().text, "line 2");
  EXPECT_EQ(range.back().text, "line 5");
  auto pid8 = ring.Read(kMinTime, kMaxTime, 8);
  ASSERT_EQ(pid8.size(), 5u);
  for (const auto& l : pid8) EXPECT_EQ(l.pid, 8);
  EXPECT_EQ(pid8.front().text, "line 1");
  // The cap keeps the newest lines, still oldest first.
  auto capped = ring.Read(kMinTime, kMaxTime, -1, 3);
  ASSERT_EQ(capped.size(), 3u);
  EXPECT_EQ(capped[0].text, "line 7");
  EXPECT_EQ(capped[2].text, "line 9");
  EXPECT_TRUE(ring.Read(106, 102).empty());
}

TEST(RawRingTest, ConcurrentAppendAndRead) {
  RawRing ring(32 * 1024);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&ring, w] {
      for (int k = 0; k < 2000; ++k) ring.Append(Line(k, w, "password=x line"));
    });
  }
  threads.emplace_back([&ring] {
    for (int k = 0; k < 200; ++k) {
      for (const auto& l : ring.Read(kMinTime, kMaxTime)) ASSERT_EQ(l.text, "password=[REDACTED] line");
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_LE(ring.bytes(), 32u * 1024);
}

}  // namespace
}  // namespace ithbat::collect::joblog
