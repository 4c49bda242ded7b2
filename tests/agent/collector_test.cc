#include "agent/collector.h"

#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "agent/logging.h"
#include "testutil/fake_sink.h"

namespace ithbat::agent {
namespace {

using ::ithbat::testing::FakeSink;
using ::testing::HasSubstr;

// A collector whose every step is scripted by the test.
class ScriptedCollector final : public Collector {
 public:
  explicit ScriptedCollector(std::string name = "scripted") : Collector(std::move(name)) {}

  std::vector<MetricDesc> Describe() const override { return {}; }

  bool fail_init = false;
  bool fail_start = false;
  bool fail_collect = false;
  bool throw_collect = false;
  int partial_errors = 0;  // ReportError calls per Collect
  int stops = 0;

  void Degrade(std::string reason) { SetDegraded(std::move(reason)); }

 protected:
  Status InitImpl(Sink&) override {
    if (fail_init) return MakeError(ErrorCode::kNotFound, "no such device");
    return Ok();
  }
  Status StartImpl() override {
    if (fail_start) return MakeError(ErrorCode::kPermission, "no capability");
    return Ok();
  }
  Status CollectImpl(TimeNs) override {
    if (throw_collect) throw std::runtime_error("boom");
    for (int i = 0; i < partial_errors; ++i)
      ReportError(Error{ErrorCode::kParse, "bad line " + std::to_string(i)});
    if (fail_collect) return MakeError(ErrorCode::kIo, "read failed");
    return Ok();
  }
  void StopImpl() override { ++stops; }
};

TEST(CollectorTest, LifecycleOrderIsEnforced) {
  FakeSink sink;
  ScriptedCollector c;
  EXPECT_EQ(c.Health().state, CollectorState::kCreated);

  auto s = c.Start();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);
  s = c.Collect(1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);

  ASSERT_TRUE(c.Init(sink));
  EXPECT_EQ(c.Health().state, CollectorState::kInitialized);
  s = c.Init(sink);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);
  s = c.Collect(1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);

  ASSERT_TRUE(c.Start());
  EXPECT_EQ(c.Health().state, CollectorState::kRunning);
  EXPECT_FALSE(c.Start());
  EXPECT_TRUE(c.Collect(1000));
  EXPECT_EQ(c.Health().collects, 1u);

  c.Stop();
  EXPECT_EQ(c.Health().state, CollectorState::kStopped);
  EXPECT_EQ(c.stops, 1);
  EXPECT_FALSE(c.Health().up);
  s = c.Collect(2000);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);
  c.Stop();  // idempotent
  EXPECT_EQ(c.stops, 1);
  // Order errors are misuse, not collect failures: they are not counted.
  EXPECT_EQ(c.Health().errors, 0u);
}

TEST(CollectorTest, InitOrStartFailureFails) {
  FakeSink sink;
  ScriptedCollector a;
  a.fail_init = true;
  auto s = a.Init(sink);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(a.Health().state, CollectorState::kFailed);
  EXPECT_THAT(a.Health().last_error, HasSubstr("no such device"));
  EXPECT_FALSE(a.Start());
  a.Stop();
  EXPECT_EQ(a.stops, 0);

  ScriptedCollector b;
  b.fail_start = true;
  ASSERT_TRUE(b.Init(sink));
  s = b.Start();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kPermission);
  EXPECT_EQ(b.Health().state, CollectorState::kFailed);
  EXPECT_FALSE(b.Collect(1));
}

TEST(CollectorTest, FailedCollectMarksDownUntilASuccess) {
  FakeSink sink;
  ScriptedCollector c;
  ASSERT_TRUE(c.Init(sink));
  ASSERT_TRUE(c.Start());

  c.fail_collect = true;
  auto s = c.Collect(1000);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
  CollectorHealth h = c.Health();
  EXPECT_FALSE(h.up);
  EXPECT_EQ(h.errors, 1u);
  EXPECT_EQ(h.collects, 1u);
  EXPECT_THAT(h.last_error, HasSubstr("read failed"));
  EXPECT_EQ(h.last_success, 0);

  EXPECT_FALSE(c.Collect(2000));
  EXPECT_EQ(c.Health().errors, 2u);

  c.fail_collect = false;
  ASSERT_TRUE(c.Collect(3000));
  h = c.Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 2u);
  EXPECT_EQ(h.collects, 3u);
  EXPECT_EQ(h.last_success, 3000);
  EXPECT_TRUE(h.last_error.empty());
  EXPECT_GE(h.last_duration, 0);
}

TEST(CollectorTest, ReportErrorCountsButStaysUp) {
  FakeSink sink;
  ScriptedCollector c;
  ASSERT_TRUE(c.Init(sink));
  ASSERT_TRUE(c.Start());
  c.partial_errors = 3;
  ASSERT_TRUE(c.Collect(1000));
  CollectorHealth h = c.Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 3u);
  EXPECT_EQ(h.last_success, 1000);
  EXPECT_FALSE(h.last_error.empty()) << "a partial error stays visible in health";
  // The next clean Collect clears it.
  c.partial_errors = 0;
  ASSERT_TRUE(c.Collect(2000));
  EXPECT_TRUE(c.Health().last_error.empty());
}

TEST(CollectorTest, ReportErrorLogIsRateLimited) {
  FakeSink sink;
  ScriptedCollector c("rate_limited_source");
  std::ostringstream out;
  auto capture = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  capture->set_formatter(MakeLogFormatter(LogFormat::kHuman));
  auto logger = GetLogger("rate_limited_source");
  logger->sinks().push_back(capture);

  ASSERT_TRUE(c.Init(sink));
  ASSERT_TRUE(c.Start());
  c.partial_errors = 5;
  ASSERT_TRUE(c.Collect(1000));
  c.partial_errors = 0;
  c.fail_collect = true;
  EXPECT_FALSE(c.Collect(2000));
  logger->sinks().pop_back();

  EXPECT_EQ(c.Health().errors, 6u);
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_THAT(text, HasSubstr("[rate_limited_source] parse: bad line 0"));
}

TEST(CollectorTest, MarkTimedOutThenRecovery) {
  FakeSink sink;
  ScriptedCollector c;
  ASSERT_TRUE(c.Init(sink));
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.Collect(1000));
  c.MarkTimedOut("collect running for 6 s");
  CollectorHealth h = c.Health();
  EXPECT_FALSE(h.up);
  EXPECT_EQ(h.timeouts, 1u);
  EXPECT_EQ(h.errors, 1u);
  EXPECT_EQ(h.last_error, "collect running for 6 s");
  ASSERT_TRUE(c.Collect(2000));
  h = c.Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.timeouts, 1u);
  EXPECT_TRUE(h.last_error.empty());
}

TEST(CollectorTest, ExceptionBecomesInternalError) {
  FakeSink sink;
  ScriptedCollector c;
  ASSERT_TRUE(c.Init(sink));
  ASSERT_TRUE(c.Start());
  c.throw_collect = true;
  auto s = c.Collect(1000);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInternal);
  EXPECT_THAT(s.error().message, HasSubstr("boom"));
  EXPECT_FALSE(c.Health().up);
  EXPECT_EQ(c.Health().errors, 1u);
}

TEST(CollectorTest, DegradedShowsInHealth) {
  ScriptedCollector c;
  c.Degrade("no BTF: falling back to /proc");
  EXPECT_EQ(c.Health().degraded, "no BTF: falling back to /proc");
  c.Degrade("");
  EXPECT_TRUE(c.Health().degraded.empty());
  // Bounded: a runaway reason does not grow health without limit.
  c.Degrade(std::string(100'000, 'x'));
  EXPECT_LT(c.Health().degraded.size(), 2000u);
}

}  // namespace
}  // namespace ithbat::agent
