#include "store/event_log.h"

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ithbat::store {
namespace {

Event MakeEvent(TimeNs t, EventKind kind = EventKind::kLogLine, std::string job = "", int32_t rank = -1) {
  Event e;
  e.time = t;
  e.kind = kind;
  e.identity.job = std::move(job);
  e.identity.rank = rank;
  e.name = "n" + std::to_string(t);
  return e;
}

// Every behaviour holds whether the events sit in the head or in sealed blocks: each test runs
// with blocks of 1, 2 and 3 events (sealing on nearly every append, late events landing inside
// sealed blocks) and with the default.
class EventLogTest : public ::testing::TestWithParam<size_t> {
 protected:
  // Seals as soon as the head holds two blocks' worth, whatever the events' times.
  EventLog::Sealing Sealed() const {
    return {.events_per_block = GetParam(), .lag = 0, .max_head_blocks = 2};
  }
};

std::vector<TimeNs> Times(const std::vector<Event>& events) {
  std::vector<TimeNs> out;
  for (const auto& e : events) out.push_back(e.time);
  return out;
}

TEST_P(EventLogTest, AppendAndQueryAllInTimeOrder) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t : {10, 20, 30}) log.Append(MakeEvent(t));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{10, 20, 30}));
  EXPECT_GT(log.bytes(), 0u);
}

TEST_P(EventLogTest, OutOfOrderArrivalIsPlacedInOrder) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t : {10, 30, 20, 40, 5, 35}) log.Append(MakeEvent(t));
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{5, 10, 20, 30, 35, 40}));
}

TEST_P(EventLogTest, EqualTimesKeepAppendOrder) {
  EventLog log(100, 1024, 0, Sealed());
  Event a = MakeEvent(10), b = MakeEvent(10), c = MakeEvent(10), late = MakeEvent(5);
  a.name = "a";
  b.name = "b";
  c.name = "c";
  log.Append(a);
  log.Append(b);
  log.Append(late);
  log.Append(c);
  auto got = log.Query(EventQuery{});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].time, 5);
  EXPECT_EQ(got[1].name, "a");
  EXPECT_EQ(got[2].name, "b");
  EXPECT_EQ(got[3].name, "c");
}

TEST_P(EventLogTest, BoundedDropsOldestAndCounts) {
  EventLog log(3, 1024, 0, Sealed());
  for (TimeNs t = 1; t <= 5; ++t) log.Append(MakeEvent(t));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(log.dropped(), 2u);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{3, 4, 5}));
  // A late event older than everything held is the oldest: it goes at once.
  log.Append(MakeEvent(0));
  EXPECT_EQ(log.dropped(), 3u);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{3, 4, 5}));
}

// The log packs what it holds; what comes back is the event as it went in, field for field.
TEST_P(EventLogTest, EveryFieldComesBackAsItWentIn) {
  Event e;
  e.time = 42;
  e.kind = EventKind::kTrainMetric;
  e.identity.cluster = "c1";
  e.identity.node = "gpu-node-0001.example";
  e.identity.job = "job-77";
  e.identity.rank = 3;
  e.identity.local_rank = 1;
  e.identity.world_size = 16;
  e.identity.pid = 4242;
  e.identity.gpu_index = 5;
  e.identity.gpu_uuid = "GPU-0b5e7a4c-1d2e-3f40-5162-738495a6b7c8";
  e.source = "joblog";
  e.step = 1234;
  e.value = 0.125;
  e.name = "grad_norm";
  e.text = std::string(300, 'y') + "\xc3\xa9";  // long, and not ASCII
  e.attrs = {{"framework", "megatron"}, {"", ""}, {"k", std::string(200, 'z')}};
  Event nan_value = e;
  nan_value.time = 43;
  nan_value.value = std::nan("");
  nan_value.attrs.clear();
  EventLog log(10, 1024, 0, Sealed());
  log.Append(e);
  log.Append(nan_value);
  const auto got = log.Query(EventQuery{});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], e);
  EXPECT_EQ(got[1], nan_value);  // Event's == takes NaN values as equal
  const auto unflushed = log.TakeUnflushed();
  ASSERT_EQ(unflushed.size(), 2u);
  EXPECT_EQ(unflushed[0], e);
  EventQuery by_job;
  by_job.job = "job-77";
  EXPECT_EQ(log.Query(by_job).size(), 2u);
  by_job.job = "job-7";
  EXPECT_TRUE(log.Query(by_job).empty()) << "a job id is matched whole, not as a prefix";
}

TEST_P(EventLogTest, ByteBoundDropsOldestAndCounts) {
  auto same_size = [](TimeNs t) {
    Event e = MakeEvent(t);
    e.name = "n";
    return e;
  };
  EventLog probe(100, 1024, 0, Sealed());
  probe.Append(same_size(1));
  const uint64_t one = probe.bytes();
  EventLog log(100, 1024, 3 * one, Sealed());
  for (TimeNs t = 1; t <= 10; ++t) log.Append(same_size(t));
  EXPECT_LE(log.bytes(), 3 * one);
  // Sealed events are charged differently (a block of one costs more than the event alone, a
  // block of many less), so how many fit depends on the block size; the newest always stay.
  const size_t held = log.size();
  EXPECT_GE(held, 1u);
  EXPECT_EQ(log.dropped(), 10u - held);
  std::vector<TimeNs> newest;
  for (TimeNs t = 11 - static_cast<TimeNs>(held); t <= 10; ++t) newest.push_back(t);
  EXPECT_EQ(Times(log.Query(EventQuery{})), newest);
  if (GetParam() == EventLog::Sealing{}.events_per_block) {
    EXPECT_EQ(held, 3u);  // none sealed yet
  }
  // An event bigger than the whole bound is still kept (alone): its text is cut, not dropped.
  Event big = MakeEvent(11);
  big.text = std::string(1000, 'x');
  log.Append(big);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{11}));
}

TEST_P(EventLogTest, DropOldestFreesUpToATime) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t = 1; t <= 6; ++t) log.Append(MakeEvent(t));
  EXPECT_EQ(log.oldest_time(), TimeNs{1});
  const uint64_t before = log.bytes();
  // Asked for more than the events up to t=3 hold: only those three go.
  const uint64_t freed = log.DropOldest(3, before);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{4, 5, 6}));
  EXPECT_EQ(log.bytes(), before - freed);
  EXPECT_EQ(log.dropped(), 3u);
  // Asked for a little: one event goes.
  EXPECT_GT(log.DropOldest(kMaxTime, 1), 0u);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{5, 6}));
  const uint64_t left = log.bytes();
  EXPECT_EQ(log.DropOldest(kMaxTime, before), left);  // everything, and no more than is held
  EXPECT_EQ(log.DropOldest(kMaxTime, before), 0u);    // nothing left to free
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.dropped(), 6u);
  EXPECT_FALSE(log.oldest_time());
}

TEST_P(EventLogTest, CutsLongTextAndAttributeValuesVisibly) {
  EventLog log(10, 32, 0, Sealed());
  Event e = MakeEvent(1);
  e.text = std::string(100, 'x');
  e.attrs = {{"path", std::string(50, 'p')}, {"short", "ok"}};
  log.Append(e);
  auto got = log.Query(EventQuery{});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE(got[0].text.size(), 32u);
  EXPECT_TRUE(got[0].text.ends_with("…[cut]")) << got[0].text;
  EXPECT_TRUE(got[0].text.starts_with("xxxx"));
  EXPECT_LE(got[0].attrs[0].second.size(), 32u);
  EXPECT_TRUE(got[0].attrs[0].second.ends_with("…[cut]"));
  EXPECT_EQ(got[0].attrs[1].second, "ok");
}

TEST_P(EventLogTest, CutNeverSplitsAUtf8Character) {
  EventLog log(10, 16, 0, Sealed());
  Event e = MakeEvent(1);
  e.text = "ééééééééééééééé";  // 2 bytes each
  log.Append(e);
  std::string text = log.Query(EventQuery{})[0].text;
  ASSERT_TRUE(text.ends_with("…[cut]"));
  std::string kept = text.substr(0, text.size() - std::string("…[cut]").size());
  EXPECT_EQ(kept.size() % 2, 0u);
  for (size_t i = 0; i < kept.size(); i += 2) EXPECT_EQ(kept.substr(i, 2), "é");
}

TEST_P(EventLogTest, TextAtTheBoundIsKept) {
  EventLog log(10, 8, 0, Sealed());
  Event e = MakeEvent(1);
  e.text = "12345678";
  log.Append(e);
  EXPECT_EQ(log.Query(EventQuery{})[0].text, "12345678");
}

TEST_P(EventLogTest, QueryFilters) {
  EventLog log(100, 1024, 0, Sealed());
  Event a = MakeEvent(10, EventKind::kXid, "j1", 0);
  a.identity.gpu_index = 3;
  Event b = MakeEvent(20, EventKind::kStep, "j1", 1);
  b.identity.pid = 77;
  Event c = MakeEvent(30, EventKind::kStep, "j2", 0);
  Event d = MakeEvent(40, EventKind::kLoss, "j1", 0);
  for (const auto& e : {a, b, c, d}) log.Append(e);

  EventQuery q;
  q.kinds = {EventKind::kStep};
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{20, 30}));
  q = {};
  q.job = "j1";
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{10, 20, 40}));
  q.rank = 0;
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{10, 40}));
  q = {};
  q.pid = 77;
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{20}));
  q = {};
  q.gpu = 3;
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{10}));
  q = {};
  q.kinds = {EventKind::kLoss, EventKind::kXid};
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{10, 40}));
  // Names are matched whole (MakeEvent names each event "n<time>").
  q = {};
  q.names = {"n20", "n40", "n4"};
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{20, 40}));
  q.job = "j2";
  EXPECT_TRUE(log.Query(q).empty());
}

TEST_P(EventLogTest, QueryWindowIsInclusive) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t : {10, 20, 20, 30, 40}) log.Append(MakeEvent(t));
  EventQuery q;
  q.from = 20;
  q.to = 30;
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{20, 20, 30}));
  q.from = 31;
  q.to = 39;
  EXPECT_TRUE(log.Query(q).empty());
  q.from = 50;
  q.to = 10;  // empty window
  EXPECT_TRUE(log.Query(q).empty());
}

TEST_P(EventLogTest, LimitKeepsNewestInTimeOrder) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t = 1; t <= 10; ++t) log.Append(MakeEvent(t, t % 2 ? EventKind::kXid : EventKind::kStep));
  EventQuery q;
  q.limit = 3;
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{8, 9, 10}));
  q.kinds = {EventKind::kXid};
  EXPECT_EQ(Times(log.Query(q)), (std::vector<TimeNs>{5, 7, 9}));
  q.limit = 0;
  EXPECT_TRUE(log.Query(q).empty());
}

TEST_P(EventLogTest, TakeUnflushedInAppendOrderOnce) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t : {10, 30, 20}) log.Append(MakeEvent(t));
  EXPECT_EQ(Times(log.TakeUnflushed()), (std::vector<TimeNs>{10, 30, 20}));
  EXPECT_TRUE(log.TakeUnflushed().empty());
  log.Append(MakeEvent(5));  // late: sorts first in the log, still handed out
  log.Append(MakeEvent(40));
  EXPECT_EQ(Times(log.TakeUnflushed()), (std::vector<TimeNs>{5, 40}));
  EXPECT_EQ(log.size(), 5u);  // taking does not remove
}

TEST_P(EventLogTest, TakeUnflushedSkipsDroppedEvents) {
  EventLog log(2, 1024, 0, Sealed());
  for (TimeNs t = 1; t <= 4; ++t) log.Append(MakeEvent(t));
  EXPECT_EQ(Times(log.TakeUnflushed()), (std::vector<TimeNs>{3, 4}));
  log.Append(MakeEvent(5));
  log.DropBefore(5);
  log.Append(MakeEvent(6));
  EXPECT_EQ(Times(log.TakeUnflushed()), (std::vector<TimeNs>{5, 6}));
}

TEST_P(EventLogTest, DropBefore) {
  EventLog log(100, 1024, 0, Sealed());
  for (TimeNs t : {10, 20, 30}) log.Append(MakeEvent(t));
  uint64_t bytes = log.bytes();
  log.DropBefore(20);
  EXPECT_EQ(Times(log.Query(EventQuery{})), (std::vector<TimeNs>{20, 30}));
  EXPECT_LT(log.bytes(), bytes);
  EXPECT_EQ(log.dropped(), 0u);  // retention is not an overflow
  log.DropBefore(kMaxTime);
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.bytes(), 0u);
}

// The values a sealed block writes as decimals and those it keeps as raw bits come back bit
// for bit, in every block size.
TEST_P(EventLogTest, SealedValuesComeBackBitForBit) {
  const std::vector<double> values = {0.0,
                                      -0.0,
                                      1.0,
                                      -3.25,
                                      0.1 + 0.2,
                                      1e-300,
                                      6.02214076e23,
                                      1e18,
                                      -1e-7,
                                      3.0097E+00,
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      std::nan(""),
                                      std::numeric_limits<double>::denorm_min(),
                                      9007199254740993.0};
  // Steps as a hostile job may print them: the extremes of int64 next to each other.
  auto step_of = [](size_t i) {
    return i % 3 == 0
               ? std::numeric_limits<int64_t>::max()
               : (i % 3 == 1 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(i) * 500 - 7);
  };
  EventLog log(100, 1024, 0, Sealed());
  for (size_t i = 0; i < values.size(); ++i) {
    // The first event at the earliest time there is: the time deltas span the whole range.
    Event e = MakeEvent(i == 0 ? kMinTime : static_cast<TimeNs>(i + 1), EventKind::kTrainMetric, "j", 0);
    e.name = "loss";
    e.value = values[i];
    e.step = step_of(i);
    log.Append(e);
  }
  const auto got = log.Query(EventQuery{});
  ASSERT_EQ(got.size(), values.size());
  EXPECT_EQ(got[0].time, kMinTime);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(got[i].value), std::bit_cast<uint64_t>(values[i])) << i;
    EXPECT_EQ(got[i].step, step_of(i)) << i;
  }
}

// A job's metric events, sealed with the default sealing: ~12 bytes an event, not ~136, and
// every one comes back as it went in.
TEST(EventLogSealingTest, AJobsMetricEventsCostTensOfBytesEach) {
  EventLog log(1'000'000, 1024);
  std::vector<Event> in;
  const char* names[] = {"loss_lm", "learning_rate", "grad_norm", "loss_scale", "step_time", "samples"};
  for (int64_t step = 1; step <= 2000; ++step) {
    const TimeNs t = step * 50'000'000;  // 20 kept lines a second
    Event s = MakeEvent(t, EventKind::kStep, "4242", 0);
    s.name = "iteration";
    s.source = "joblog";
    s.step = step * 500;
    s.identity.gpu_uuid = "GPU-0b5e7a4c-1d2e-3f40-5162-738495a6b7c8";
    s.attrs = {{"total_steps", "1000000"}};
    in.push_back(s);
    for (const char* name : names) {
      Event m = s;
      m.kind = EventKind::kTrainMetric;
      m.name = name;
      m.attrs.clear();
      m.value = 3.0 + static_cast<double>(step % 97) / 1000;
      in.push_back(m);
    }
  }
  // The newest ~10 s stay unsealed (~140 events a second here): the cost of the second half is
  // what sealing charges.
  uint64_t half_bytes = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    log.Append(in[i]);
    if (i + 1 == in.size() / 2) half_bytes = log.bytes();
  }
  ASSERT_EQ(log.size(), in.size());
  const uint64_t second_half = log.bytes() - half_bytes;
  EXPECT_LT(second_half / (in.size() / 2), 16u) << second_half << " bytes for " << in.size() / 2 << " events";
  EXPECT_EQ(log.Query(EventQuery{.limit = in.size()}), in);
  EventQuery metrics{.kinds = {EventKind::kTrainMetric}, .job = "4242", .limit = 10};
  const auto newest = log.Query(metrics);
  ASSERT_EQ(newest.size(), 10u);
  EXPECT_EQ(newest.back(), in.back());
  EXPECT_EQ(log.TakeUnflushed(), in);
}

// An event late by more than the sealing lag lands inside a sealed block, in time order, and is
// still handed to the flusher once.
TEST(EventLogSealingTest, AnEventLateByMinutesLandsInItsSealedBlock) {
  EventLog log(1'000'000, 1024);
  for (TimeNs s = 1; s <= 3000; ++s) log.Append(MakeEvent(s * 1'000'000'000));
  (void)log.TakeUnflushed();
  const uint64_t before = log.bytes();
  Event late = MakeEvent(1000 * 1'000'000'000LL + 1);
  late.name = "late";
  log.Append(late);
  EXPECT_GT(log.bytes(), before);
  EventQuery around{.from = 1000 * 1'000'000'000LL, .to = 1001 * 1'000'000'000LL};
  const auto got = log.Query(around);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].name, "late");
  EXPECT_EQ(log.TakeUnflushed(), std::vector<Event>{late});
  EXPECT_EQ(log.size(), 3001u);
  // Dropping by time goes through the sealed blocks and the head alike.
  log.DropBefore(2000 * 1'000'000'000LL);
  EXPECT_EQ(log.size(), 1001u);
  EXPECT_EQ(log.oldest_time(), TimeNs{2000 * 1'000'000'000LL});
  log.DropBefore(kMaxTime);
  EXPECT_EQ(log.bytes(), 0u);
}

TEST_P(EventLogTest, ConcurrentWritersAndReaders) {
  EventLog log(100'000, 64, 0, Sealed());
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&log, w] {
      for (int i = 0; i < 2000; ++i) log.Append(MakeEvent(i * 4 + w));
    });
  }
  threads.emplace_back([&log] {
    for (int i = 0; i < 50; ++i) (void)log.Query(EventQuery{});
  });
  for (auto& t : threads) t.join();
  auto all = log.Query(EventQuery{.limit = 100'000});
  ASSERT_EQ(all.size(), 8000u);
  for (size_t i = 1; i < all.size(); ++i) ASSERT_LE(all[i - 1].time, all[i].time);
  EXPECT_EQ(log.TakeUnflushed().size(), 8000u);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, EventLogTest,
                         ::testing::Values(1, 2, 3, EventLog::Sealing{}.events_per_block),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "EventsPerBlock" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace ithbat::store
