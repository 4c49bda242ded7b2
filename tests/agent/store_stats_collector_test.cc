#include "agent/store_stats_collector.h"

#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store/store.h"
#include "testutil/testutil.h"

namespace ithbat::agent {
namespace {

using ::testing::UnorderedElementsAre;

// The newest value of every ithbat_store_* series.
std::map<std::string, double> StoreMetrics(const store::Store& s) {
  std::map<std::string, double> out;
  auto selector = store::SeriesSelector::Parse("{__name__=~\"ithbat_store_.*\"}");
  EXPECT_TRUE(selector) << selector.error().ToString();
  if (!selector) return out;
  for (const auto& info : s.ListSeries(*selector)) {
    auto latest = s.Latest(info.ref);
    if (latest) out[info.desc->name] = latest->v;
  }
  return out;
}

TEST(StoreStatsCollectorTest, DescribesValidMetrics) {
  auto st = store::Store::Open({});
  ASSERT_TRUE(st) << st.error().ToString();
  StoreStatsCollector c(**st);
  EXPECT_EQ(c.name(), "store");
  std::vector<std::string> names;
  for (const auto& d : c.Describe()) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    names.push_back(d.name);
  }
  EXPECT_THAT(names,
              UnorderedElementsAre("ithbat_store_series", "ithbat_store_samples_appended_total",
                                   "ithbat_store_samples_rejected_total", "ithbat_store_sample_bytes",
                                   "ithbat_store_chunks_dropped_total", "ithbat_store_events",
                                   "ithbat_store_event_bytes", "ithbat_store_events_dropped_total",
                                   "ithbat_store_disk_bytes", "ithbat_store_flushes_total",
                                   "ithbat_store_flush_errors_total", "ithbat_store_corrupt_segments_total"));
}

TEST(StoreStatsCollectorTest, ExportsTheStoresStats) {
  auto opened = store::Store::Open({});
  ASSERT_TRUE(opened) << opened.error().ToString();
  store::Store& st = **opened;
  StoreStatsCollector c(st);
  ASSERT_TRUE(c.Init(st));
  ASSERT_TRUE(c.Start());

  const TimeNs t0 = 1'800'000'000 * kNsPerSec;
  MetricDesc desc{"ithbat_test_value", "A test value", "", MetricType::kGauge, {}};
  auto ref = st.RegisterSeries(desc, LabelSet());
  ASSERT_TRUE(ref);
  ASSERT_TRUE(st.Append(*ref, t0, 1));
  ASSERT_TRUE(st.Append(*ref, t0 + kNsPerSec, 2));
  ASSERT_TRUE(st.Append(*ref, t0 + 2 * kNsPerSec, 3));
  EXPECT_FALSE(st.Append(*ref, t0, 9));  // out of order: rejected
  Event e;
  e.time = t0;
  e.kind = EventKind::kXid;
  e.value = 79;
  ASSERT_TRUE(st.AppendEvent(e));

  ASSERT_TRUE(c.Collect(t0 + 3 * kNsPerSec));
  EXPECT_TRUE(c.Health().up);
  auto m = StoreMetrics(st);
  ASSERT_EQ(m.size(), 12u);
  EXPECT_EQ(m["ithbat_store_series"], 13);  // its own twelve and the test's one
  EXPECT_EQ(m["ithbat_store_samples_appended_total"], 3);
  EXPECT_EQ(m["ithbat_store_samples_rejected_total"], 1);
  EXPECT_GT(m["ithbat_store_sample_bytes"], 0);
  EXPECT_EQ(m["ithbat_store_events"], 1);
  EXPECT_GT(m["ithbat_store_event_bytes"], 0);
  EXPECT_EQ(m["ithbat_store_events_dropped_total"], 0);
  EXPECT_EQ(m["ithbat_store_disk_bytes"], 0);  // memory only
  EXPECT_EQ(m["ithbat_store_flush_errors_total"], 0);

  // The next tick sees the twelve samples the collector itself wrote.
  ASSERT_TRUE(c.Collect(t0 + 4 * kNsPerSec));
  m = StoreMetrics(st);
  EXPECT_EQ(m["ithbat_store_samples_appended_total"], 15);
  c.Stop();
}

TEST(StoreStatsCollectorTest, CountsFlushesAndDiskBytes) {
  testing::TempDir dir;
  store::StoreOptions options;
  options.data_dir = (dir.path() / "data").string();
  auto opened = store::Store::Open(options);
  ASSERT_TRUE(opened) << opened.error().ToString();
  store::Store& st = **opened;
  StoreStatsCollector c(st);
  ASSERT_TRUE(c.Init(st));
  ASSERT_TRUE(c.Start());
  const TimeNs t0 = NowNs() / kNsPerSec * kNsPerSec;
  ASSERT_TRUE(c.Collect(t0));
  ASSERT_TRUE(st.Flush());
  ASSERT_TRUE(c.Collect(t0 + kNsPerSec));
  auto m = StoreMetrics(st);
  EXPECT_GE(m["ithbat_store_flushes_total"], 1);
  EXPECT_GT(m["ithbat_store_disk_bytes"], 0);
  EXPECT_EQ(m["ithbat_store_flush_errors_total"], 0);
  EXPECT_EQ(m["ithbat_store_corrupt_segments_total"], 0);
}

TEST(StoreStatsCollectorTest, CountsCorruptSegments) {
  testing::TempDir dir;
  dir.WriteFile("data/seg-0000000000000042.ith", "not a segment");
  store::StoreOptions options;
  options.data_dir = (dir.path() / "data").string();
  auto opened = store::Store::Open(options);
  ASSERT_TRUE(opened) << opened.error().ToString();
  store::Store& st = **opened;
  StoreStatsCollector c(st);
  ASSERT_TRUE(c.Init(st));
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.Collect(NowNs() / kNsPerSec * kNsPerSec));
  EXPECT_EQ(StoreMetrics(st)["ithbat_store_corrupt_segments_total"], 1);
}

}  // namespace
}  // namespace ithbat::agent
