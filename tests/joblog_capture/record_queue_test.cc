#include "collect/joblog/record_queue.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ithbat::collect::joblog {
namespace {

CaptureRecord Meta(int32_t pid, TimeNs time) {
  CaptureRecord r;
  r.type = CaptureRecord::Type::kData;
  r.pid = pid;
  r.tid = pid + 1;
  r.fd = 2;
  r.stream = 2;
  r.time = time;
  r.total_len = 9000;
  r.offset = 4096;
  r.root = 7;
  r.gap_before = true;
  return r;
}

TEST(RecordQueueTest, RecordsComeOutInOrderFieldForField) {
  RecordQueue q(1 << 20);
  ASSERT_TRUE(q.Push(Meta(10, 100), "first line\n"));
  CaptureRecord fork;
  fork.type = CaptureRecord::Type::kFork;
  fork.pid = 11;
  fork.tid = 10;
  fork.root = 10;
  ASSERT_TRUE(q.Push(fork, ""));
  ASSERT_TRUE(q.Push(Meta(10, 200), std::string(4096, 'x')));
  EXPECT_EQ(q.size(), 3u);
  std::vector<CaptureRecord> out;
  EXPECT_EQ(q.Drain(out, 100), 3u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].data, "first line\n");
  EXPECT_EQ(out[0].type, CaptureRecord::Type::kData);
  EXPECT_EQ(out[0].pid, 10);
  EXPECT_EQ(out[0].tid, 11);
  EXPECT_EQ(out[0].fd, 2);
  EXPECT_EQ(out[0].stream, 2);
  EXPECT_EQ(out[0].time, 100);
  EXPECT_EQ(out[0].total_len, 9000u);
  EXPECT_EQ(out[0].offset, 4096u);
  EXPECT_EQ(out[0].root, 7);
  EXPECT_TRUE(out[0].gap_before);
  EXPECT_EQ(out[1].type, CaptureRecord::Type::kFork);
  EXPECT_EQ(out[1].root, 10);
  EXPECT_TRUE(out[1].data.empty());
  EXPECT_FALSE(out[1].gap_before);
  EXPECT_EQ(out[2].data, std::string(4096, 'x'));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(RecordQueueTest, DrainTakesAtMostWhatItIsAskedAndAppends) {
  RecordQueue q(1 << 20);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.Push(Meta(1, i), std::to_string(i)));
  std::vector<CaptureRecord> out(1);  // what is there stays
  EXPECT_EQ(q.Drain(out, 2), 2u);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].data, "0");
  EXPECT_EQ(out[2].data, "1");
  EXPECT_EQ(q.size(), 3u);
  out.clear();
  EXPECT_EQ(q.Drain(out, 100), 3u);
  EXPECT_EQ(out.back().data, "4");
  EXPECT_EQ(q.Drain(out, 100), 0u);
}

TEST(RecordQueueTest, RefusesWhatWouldPassItsBoundAndTakesMoreOnceDrained) {
  RecordQueue q(4096);
  size_t pushed = 0;
  while (q.Push(Meta(1, 0), std::string(1000, 'a'))) ++pushed;
  EXPECT_EQ(pushed, 3u);  // 3 × (1000 + header) fit in 4,096; a fourth does not
  EXPECT_LE(q.bytes(), 4096u);
  std::vector<CaptureRecord> out;
  EXPECT_EQ(q.Drain(out, 1), 1u);
  EXPECT_TRUE(q.Push(Meta(1, 0), std::string(1000, 'b')));
  EXPECT_FALSE(q.Push(Meta(1, 0), std::string(RecordQueue::kMaxDataBytes + 1, 'c')));
}

// A burst spans many slabs; once drained, the queue keeps one mapped (the spare), not the
// burst's worth.
TEST(RecordQueueTest, ABurstsSlabsAreGivenBackWhenDrained) {
  RecordQueue q(32u << 20);
  const std::string line(250, 'l');
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(q.Push(Meta(1, i), line));
  EXPECT_GE(q.slabs(), 10'000u * 250 / RecordQueue::kSlabBytes);
  std::vector<CaptureRecord> out;
  size_t drained = 0;
  while (size_t n = q.Drain(out, 1024)) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i].time, static_cast<TimeNs>(drained + i));
    drained += n;
    out.clear();
  }
  EXPECT_EQ(drained, 10'000u);
  EXPECT_EQ(q.slabs(), 1u);
  EXPECT_EQ(q.bytes(), 0u);
  // The spare takes the next record.
  ASSERT_TRUE(q.Push(Meta(1, 0), line));
  EXPECT_EQ(q.slabs(), 1u);
}

}  // namespace
}  // namespace ithbat::collect::joblog
