// The tests' FakeSink (tests/testutil/fake_sink.h) holds collectors to the Sink contract; these
// check that it does, so a collector test that passes against it means what it says.
#include "testutil/fake_sink.h"

#include <cmath>
#include <thread>

#include <gtest/gtest.h>

namespace ithbat::testing {
namespace {

MetricDesc Gauge(std::string name) {
  return MetricDesc{std::move(name), "A test gauge", "", MetricType::kGauge, {}};
}

LabelSet Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  auto l = LabelSet::From(pairs);
  EXPECT_TRUE(l);
  return *l;
}

TEST(FakeSinkTest, RegistrationFindsOrCreatesAndChecksDescs) {
  FakeSink sink;
  auto a = sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"gpu", "0"}}));
  auto b = sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"gpu", "1"}}));
  auto again = sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"gpu", "0"}}));
  ASSERT_TRUE(a && b && again);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*a, *again);
  EXPECT_EQ(sink.series_count(), 2u);

  MetricDesc other = Gauge("ithbat_test_value");
  other.help = "Another help text";
  auto conflict = sink.RegisterSeries(other, Labels({{"gpu", "2"}}));
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, ErrorCode::kInvalidArgument);
  MetricDesc counter = Gauge("ithbat_test_value");
  counter.type = MetricType::kCounter;
  EXPECT_FALSE(sink.RegisterSeries(counter, {}));

  auto invalid = sink.RegisterSeries(Gauge("0 not a name"), {});
  ASSERT_FALSE(invalid);
  EXPECT_EQ(invalid.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(sink.series_count(), 2u);
  EXPECT_EQ(sink.registrations(), 6u);
}

TEST(FakeSinkTest, AppendsFollowTheStoresOrderRules) {
  FakeSink sink;
  auto ref = sink.RegisterSeries(Gauge("ithbat_test_value"), {});
  ASSERT_TRUE(ref);
  ASSERT_TRUE(sink.Append(*ref, 10, 1.0));
  ASSERT_TRUE(sink.Append(*ref, 20, 2.0));
  EXPECT_TRUE(sink.Append(*ref, 20, 2.0));  // a resend: accepted, ignored
  auto dup = sink.Append(*ref, 20, 3.0);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kDuplicate);
  auto old = sink.Append(*ref, 15, 1.5);
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().code, ErrorCode::kOutOfOrder);
  auto unknown = sink.Append(*ref + 1, 30, 1.0);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(sink.Append(*ref, 30, std::nan("")));
  EXPECT_TRUE(sink.Append(*ref, 30, std::nan("")));  // NaN resent compares by bits

  const auto s = sink.Find("ithbat_test_value");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->samples.size(), 3u);
  EXPECT_EQ(s->samples[1], (std::pair<TimeNs, double>{20, 2.0}));
  EXPECT_EQ(sink.appends(), 3u);
  EXPECT_EQ(sink.repeats(), 2u);
  EXPECT_EQ(sink.duplicates(), 1u);
  EXPECT_EQ(sink.out_of_order(), 1u);
  EXPECT_EQ(sink.appends_not_newer(), 4u);
  EXPECT_FALSE(s->many_writers);
}

TEST(FakeSinkTest, QueriesByLabelsAndPrefix) {
  FakeSink sink;
  auto p0 = sink.RegisterSeries(Gauge("ithbat_gpu_power_watts"), Labels({{"gpu", "0"}, {"uuid", "a"}}));
  auto p1 = sink.RegisterSeries(Gauge("ithbat_gpu_power_watts"), Labels({{"gpu", "1"}, {"uuid", "b"}}));
  auto load = sink.RegisterSeries(Gauge("ithbat_host_load1"), {});
  ASSERT_TRUE(p0 && p1 && load);
  ASSERT_TRUE(sink.Append(*p0, 10, 100));
  ASSERT_TRUE(sink.Append(*p0, 20, 110));
  ASSERT_TRUE(sink.Append(*load, 10, 0.5));

  EXPECT_EQ(sink.Last("ithbat_gpu_power_watts", R"({gpu="0",uuid="a"})"), 110);
  EXPECT_EQ(sink.Last("ithbat_gpu_power_watts", R"({gpu="1",uuid="b"})"), std::nullopt);  // no sample
  EXPECT_EQ(sink.Last("ithbat_gpu_power_watts", R"({gpu="0"})"), std::nullopt);           // labels are exact
  EXPECT_EQ(sink.Last("ithbat_host_load1"), 0.5);
  EXPECT_EQ(sink.ValueAt("ithbat_gpu_power_watts", {{"gpu", "0"}}, 10), 100);
  EXPECT_EQ(sink.ValueAt("ithbat_gpu_power_watts", {{"gpu", "0"}}, 15), std::nullopt);
  auto b = sink.FindWith("ithbat_gpu_power_watts", {{"uuid", "b"}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->labels.Get("gpu"), "1");
  EXPECT_FALSE(sink.FindWith("ithbat_gpu_power_watts", {{"gpu", "0"}, {"uuid", "b"}}));
  EXPECT_EQ(sink.CountSeries("ithbat_gpu_power_watts"), 2u);
  EXPECT_EQ(sink.CountSeries("ithbat_gpu_power"), 0u);
  EXPECT_EQ(sink.CountByPrefix("ithbat_gpu_"), 2u);
  EXPECT_EQ(sink.CountWithSamples("ithbat_gpu_"), 1u);
  EXPECT_EQ(sink.CountWithSamples(), 2u);
}

TEST(FakeSinkTest, KnobsRefuseRegistrationsAndAppends) {
  FakeSink sink;
  sink.RefuseRegistration("ithbat_test_refused");
  auto refused = sink.RegisterSeries(Gauge("ithbat_test_refused"), {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);

  sink.SetMaxSeries(1);
  auto first = sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"n", "1"}}));
  ASSERT_TRUE(first);
  auto full = sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"n", "2"}}));
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted);
  EXPECT_TRUE(sink.RegisterSeries(Gauge("ithbat_test_value"), Labels({{"n", "1"}})));  // known: found

  sink.RefuseAppends(ErrorCode::kIo);
  auto s = sink.Append(*first, 10, 1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
  sink.RefuseAppends(std::nullopt);
  EXPECT_TRUE(sink.Append(*first, 10, 1));
  EXPECT_EQ(sink.appends(), 1u);
}

TEST(FakeSinkTest, EventsStepsAndWritersFromOtherThreads) {
  FakeSink sink;
  auto ref = sink.RegisterSeries(Gauge("ithbat_test_value"), {});
  ASSERT_TRUE(ref);
  ASSERT_TRUE(sink.Append(*ref, 10, 1));
  std::thread other([&] {
    for (int i = 0; i < 100; i++) {
      Event e;
      e.kind = EventKind::kXid;
      e.value = i;
      EXPECT_TRUE(sink.AppendEvent(std::move(e)));
    }
    EXPECT_TRUE(sink.Append(*ref, 20, 2));
  });
  other.join();
  EXPECT_EQ(sink.event_count(), 100u);
  EXPECT_EQ(sink.events()[99].value, 99);
  EXPECT_TRUE(sink.Find("ithbat_test_value")->many_writers);

  ASSERT_TRUE(sink.RecordStep("job", 0, StepSpan{1, 100, 200}));
  ASSERT_TRUE(sink.RecordStep("job", 1, StepSpan{1, 110, 210}));
  ASSERT_TRUE(sink.RecordStep("job", 0, StepSpan{1, 90, 190}));    // known step: updated
  EXPECT_FALSE(sink.RecordStep("job", 0, StepSpan{2, 300, 250}));  // ends before it starts
  const auto steps = sink.steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].job, "job");
  EXPECT_EQ(steps[0].rank, 0);
  EXPECT_EQ(steps[0].span, (StepSpan{1, 90, 190}));
  EXPECT_EQ(steps[1].rank, 1);
}

}  // namespace
}  // namespace ithbat::testing
