#include "agent/process_series.h"

#include <gtest/gtest.h>

#include "testutil/fake_sink.h"

namespace ithbat::agent {
namespace {

MetricDesc Desc(std::vector<std::string> labels) {
  return MetricDesc{"ithbat_test_things_total", "Things", "", MetricType::kCounter, std::move(labels)};
}

TEST(ProcessSeries, RegistersOncePerLabelSetWithTheIdentityFirst) {
  testing::FakeSink sink;
  Identity id;
  id.job = "j1";
  id.rank = 3;
  id.pid = 42;
  ProcessSeries s;
  const MetricDesc d = Desc(ProcessLabelNames({"op"}));
  ASSERT_TRUE(s.Put(sink, id, d, {{"op", "a"}}, 1000, 1));
  ASSERT_TRUE(s.Put(sink, id, d, {{"op", "a"}}, 2000, 2));
  ASSERT_TRUE(s.Put(sink, id, d, {{"op", "b"}}, 2000, 5));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(sink.registrations(), 2u);
  auto a = sink.Find("ithbat_test_things_total", R"({job_id="j1",op="a",pid="42",rank="3"})");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->samples.size(), 2u);
  EXPECT_EQ(a->samples.back().second, 2);
  // The identity is read at registration only: a later change does not move the series.
  id.rank = 4;
  ASSERT_TRUE(s.Put(sink, id, d, {{"op", "a"}}, 3000, 3));
  EXPECT_EQ(sink.registrations(), 2u);
}

TEST(ProcessSeries, TheSameValuesUnderOtherLabelNamesAreOtherSeries) {
  testing::FakeSink sink;
  Identity id;
  id.pid = 7;
  ProcessSeries s;
  const MetricDesc d = Desc(ProcessLabelNames({"x", "y"}));
  ASSERT_TRUE(s.Put(sink, id, d, {{"x", "1"}, {"y", "2"}}, 1, 1));
  ASSERT_TRUE(s.Put(sink, id, d, {{"x", "2"}, {"y", "1"}}, 1, 1));
  EXPECT_EQ(s.size(), 2u);
}

TEST(ProcessSeries, SinkErrorsAreReturned) {
  testing::FakeSink sink;
  sink.RefuseRegistration("ithbat_test_things_total");
  ProcessSeries s;
  auto st = s.Put(sink, Identity{}, Desc(ProcessLabelNames()), {}, 1, 1);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(s.size(), 0u);
}

TEST(ProcessLabelNames, IdentityLabelsThenExtra) {
  const auto names = ProcessLabelNames({"op"});
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(names.front(), "job_id");
  EXPECT_EQ(names.back(), "op");
}

}  // namespace
}  // namespace ithbat::agent
