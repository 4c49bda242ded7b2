#include "agent/runtime.h"
#include "core/version.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testutil/fake_sink.h"

namespace ithbat::agent {
namespace {

using ::ithbat::testing::FakeSink;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Polls until pred holds. The limit only keeps a broken build from hanging; passing tests
// never get near it, and no assertion depends on how fast anything ran.
bool WaitFor(const std::function<bool()>& pred, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A one-shot gate: Wait blocks until Open.
class Gate {
 public:
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// What a test collector shares with the test; shared so it outlives a detached worker.
struct Probe {
  std::mutex mu;
  std::vector<TimeNs> ticks;  // every CollectImpl entry
  std::atomic<int> fail_first{0};
  std::atomic<int> hang_on_collect{-1};  // the n-th collect (0-based) blocks on the gate
  Gate gate;
  std::atomic<bool> entered_hang{false};
  std::atomic<bool> after_hang_done{false};
  std::optional<ErrorCode> after_hang_append;  // what the sink said after the gate opened
  std::atomic<bool> fail_init{false};

  size_t count() {
    std::lock_guard lock(mu);
    return ticks.size();
  }
  std::vector<TimeNs> Ticks() {
    std::lock_guard lock(mu);
    return ticks;
  }
};

class TestCollector final : public Collector {
 public:
  TestCollector(std::string name, std::shared_ptr<Probe> probe) : Collector(std::move(name)), probe_(probe) {}

  std::vector<MetricDesc> Describe() const override {
    return {{"ithbat_test_" + name() + "_value",
             "A value the test collector writes",
             "",
             MetricType::kGauge,
             {"source"}}};
  }

 protected:
  Status InitImpl(Sink& sink) override {
    if (probe_->fail_init) return MakeError(ErrorCode::kNotFound, "device missing");
    sink_ = &sink;
    auto labels = LabelSet::From({{"source", name()}});
    if (!labels) return std::unexpected(labels.error());
    auto ref = sink.RegisterSeries(Describe()[0], *labels);
    if (!ref) return std::unexpected(ref.error());
    ref_ = *ref;
    return Ok();
  }

  Status CollectImpl(TimeNs tick) override {
    int n = 0;
    {
      std::lock_guard lock(probe_->mu);
      n = static_cast<int>(probe_->ticks.size());
      probe_->ticks.push_back(tick);
    }
    if (n == probe_->hang_on_collect) {
      probe_->entered_hang = true;
      probe_->gate.Wait();
      auto s = sink_->Append(ref_, tick, 42);
      {
        std::lock_guard lock(probe_->mu);
        if (!s) probe_->after_hang_append = s.error().code;
      }
      probe_->after_hang_done = true;
      return Ok();
    }
    if (n < probe_->fail_first) return MakeErrorF(ErrorCode::kIo, "scripted failure {}", n);
    return sink_->Append(ref_, tick, n);
  }

 private:
  std::shared_ptr<Probe> probe_;
  Sink* sink_ = nullptr;
  SeriesRef ref_ = 0;
};

RuntimeOptions FastOptions() {
  RuntimeOptions o;
  o.interval = 20 * kNsPerMs;
  o.collect_deadline = 200 * kNsPerMs;
  o.maintenance_interval = 50 * kNsPerMs;
  return o;
}

TEST(RuntimeTest, TicksAreAlignedToTheInterval) {
  FakeSink sink;
  auto probe = std::make_shared<Probe>();
  auto slow = std::make_shared<Probe>();
  Runtime rt(sink, FastOptions());
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("a", probe)));
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("b", slow), 50 * kNsPerMs));
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] { return probe->count() >= 10 && slow->count() >= 4; }));
  rt.Stop();

  for (auto [p, interval] : {std::pair{probe, 20 * kNsPerMs}, std::pair{slow, 50 * kNsPerMs}}) {
    const auto ticks = p->Ticks();
    for (size_t i = 0; i < ticks.size(); ++i) {
      EXPECT_EQ(ticks[i] % interval, 0) << ticks[i];
      if (i > 0) {
        EXPECT_GT(ticks[i], ticks[i - 1]);
      }
    }
  }
  // Self-metrics carry the tick times too.
  auto up = sink.FindWith("ithbat_collector_up", {{"collector", "b"}});
  ASSERT_TRUE(up);
  ASSERT_FALSE(up->samples.empty());
  // Every periodic sample sits on a tick; the last one is written at Stop (the state the
  // collector ended in).
  for (size_t i = 0; i + 1 < up->samples.size(); ++i) EXPECT_EQ(up->samples[i].first % (50 * kNsPerMs), 0);
  EXPECT_EQ(sink.appends_not_newer(), 0u);

  const auto status = rt.Status();
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[0].name, "a");
  EXPECT_EQ(status[0].interval, 20 * kNsPerMs);
  EXPECT_EQ(status[1].interval, 50 * kNsPerMs);
  EXPECT_EQ(status[0].health.state, CollectorState::kStopped);
}

TEST(RuntimeTest, SelfMetricsHaveTheirLabelsAndOneWriter) {
  FakeSink sink;
  auto probe = std::make_shared<Probe>();
  Runtime rt(sink, FastOptions());
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("gpu", probe)));
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] {
    auto d = sink.FindWith("ithbat_collector_up", {{"collector", "gpu"}});
    return d && d->samples.size() >= 3 && d->samples.back().second == 1.0;
  }));
  rt.Stop();

  std::vector<std::string> names;
  for (const auto& d : Runtime::DescribeSelf()) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    if (d.name == "ithbat_build_info") {
      // One series for the agent, not per collector: which build runs here.
      EXPECT_THAT(d.label_names, ElementsAre("version", "build_type", "compiler"));
      auto info = sink.FindWith(d.name, {{"version", kVersion}});
      ASSERT_TRUE(info);
      EXPECT_THAT(std::string(info->labels.Get("compiler").value_or("")), ::testing::StartsWith("g++ "));
      ASSERT_FALSE(info->samples.empty());
      EXPECT_EQ(info->samples.back().second, 1.0);
      continue;
    }
    EXPECT_THAT(d.label_names, ElementsAre("collector"));
    names.push_back(d.name);
    auto series = sink.FindWith(d.name, {{"collector", "gpu"}});
    ASSERT_TRUE(series) << d.name;
    EXPECT_EQ(series->labels.ToString(), "{collector=\"gpu\"}");
    EXPECT_FALSE(series->samples.empty()) << d.name;
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("ithbat_collector_up", "ithbat_collector_errors_total",
                                                     "ithbat_collector_timeouts_total",
                                                     "ithbat_collector_last_collect_duration_seconds",
                                                     "ithbat_collector_degraded"));
  auto duration = sink.FindWith("ithbat_collector_last_collect_duration_seconds", {{"collector", "gpu"}});
  EXPECT_EQ(duration->desc.unit, "seconds");
  EXPECT_EQ(duration->desc.type, MetricType::kGauge);
  EXPECT_EQ(sink.FindWith("ithbat_collector_errors_total", {{"collector", "gpu"}})->desc.type,
            MetricType::kCounter);
  EXPECT_EQ(sink.FindWith("ithbat_collector_errors_total", {{"collector", "gpu"}})->samples.back().second,
            0.0);

  for (const auto& s : sink.series()) EXPECT_FALSE(s.many_writers) << s.desc.name;
  EXPECT_EQ(sink.appends_not_newer(), 0u);
}

TEST(RuntimeTest, FailingCollectorGoesDownAndRecovers) {
  FakeSink sink;
  auto probe = std::make_shared<Probe>();
  probe->fail_first = 3;
  Runtime rt(sink, FastOptions());
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("flaky", probe)));
  ASSERT_TRUE(rt.Start());

  ASSERT_TRUE(WaitFor([&] { return probe->count() >= 1; }));
  ASSERT_TRUE(WaitFor([&] { return rt.Status()[0].health.up; }));
  const CollectorHealth h = rt.Status()[0].health;
  EXPECT_EQ(h.errors, 3u);
  EXPECT_TRUE(h.last_error.empty());
  // The self-metrics saw both states, ending up.
  ASSERT_TRUE(WaitFor([&] {
    auto up = sink.FindWith("ithbat_collector_up", {{"collector", "flaky"}});
    return up && !up->samples.empty() && up->samples.back().second == 1.0;
  }));
  rt.Stop();

  auto up = sink.FindWith("ithbat_collector_up", {{"collector", "flaky"}});
  EXPECT_TRUE(std::any_of(up->samples.begin(), up->samples.end(), [](auto s) { return s.second == 0.0; }));
  auto errors = sink.FindWith("ithbat_collector_errors_total", {{"collector", "flaky"}});
  EXPECT_EQ(errors->samples.back().second, 3.0);
  const auto events = sink.events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const Event& e) {
    return e.kind == EventKind::kCollectorState && e.name == "flaky" && e.text == "up";
  }));
}

// The self-metrics of a tick are written before its collect runs, so after a first collect
// longer than the interval the stored "up" lagged: 0 although every collect had succeeded
// (CI saw `agent --once` print the GPU collector down). Stop writes how each collector ended.
TEST(RuntimeTest, StopRecordsTheStateTheLastCollectLeft) {
  FakeSink sink;
  auto probe = std::make_shared<Probe>();
  probe->hang_on_collect = 0;
  RuntimeOptions o = FastOptions();
  o.interval = 100 * kNsPerMs;
  o.collect_deadline = 5 * kNsPerSec;  // slow, not hung
  Runtime rt(sink, o);
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("slow_start", probe)));
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] { return probe->entered_hang.load(); }));
  // Two ticks pass while the first collect is still running: both store "up 0".
  ASSERT_TRUE(WaitFor([&] {
    auto up = sink.FindWith("ithbat_collector_up", {{"collector", "slow_start"}});
    return up && up->samples.size() >= 2;
  }));
  probe->gate.Open();
  ASSERT_TRUE(WaitFor([&] { return rt.Status()[0].health.collects >= 2; }));
  rt.Stop();

  auto up = sink.FindWith("ithbat_collector_up", {{"collector", "slow_start"}});
  ASSERT_TRUE(up);
  EXPECT_EQ(up->samples.front().second, 0.0);
  EXPECT_EQ(up->samples.back().second, 1.0);
  EXPECT_EQ(sink.appends_not_newer(), 0u);
}

TEST(RuntimeTest, WatchdogMarksHungCollectorWhileOthersGoOn) {
  FakeSink sink;
  auto hung = std::make_shared<Probe>();
  hung->hang_on_collect = 1;
  auto healthy = std::make_shared<Probe>();
  Runtime rt(sink, FastOptions());
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("hung", hung)));
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("healthy", healthy)));
  ASSERT_TRUE(rt.Start());

  ASSERT_TRUE(WaitFor([&] { return rt.Status()[0].health.timeouts >= 1; }));
  CollectorHealth h = rt.Status()[0].health;
  EXPECT_FALSE(h.up);
  EXPECT_EQ(h.timeouts, 1u);
  EXPECT_THAT(h.last_error, HasSubstr("still running"));

  // While it hangs the other collector keeps its cadence and the hung one gets no new ticks.
  const size_t before = healthy->count();
  ASSERT_TRUE(WaitFor([&] { return healthy->count() >= before + 10; }));
  EXPECT_EQ(hung->count(), 2u);
  ASSERT_TRUE(WaitFor([&] {
    auto t = sink.FindWith("ithbat_collector_timeouts_total", {{"collector", "hung"}});
    return t && !t->samples.empty() && t->samples.back().second == 1.0;
  }));

  // Released, it returns and is up again with the next collects.
  hung->gate.Open();
  ASSERT_TRUE(WaitFor([&] { return hung->count() >= 4 && rt.Status()[0].health.up; }));
  EXPECT_EQ(rt.Status()[0].health.timeouts, 1u);
  rt.Stop();

  const auto events = sink.events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const Event& e) {
    return e.kind == EventKind::kCollectorState && e.name == "hung" && e.text.starts_with("timed out");
  }));
  for (const auto& s : sink.series()) EXPECT_FALSE(s.many_writers) << s.desc.name;
}

TEST(RuntimeTest, StopReturnsWithACollectorHungForever) {
  auto sink = std::make_unique<FakeSink>();
  auto hung = std::make_shared<Probe>();
  hung->hang_on_collect = 0;
  auto healthy = std::make_shared<Probe>();
  {
    RuntimeOptions o = FastOptions();
    int maintenance_runs = 0;  // touched by the maintenance thread, then by Stop's final run
    o.maintenance = [&](TimeNs) { ++maintenance_runs; };
    Runtime rt(*sink, o);
    ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("hung", hung)));
    ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("healthy", healthy)));
    ASSERT_TRUE(rt.Start());
    ASSERT_TRUE(WaitFor([&] { return hung->entered_hang.load() && healthy->count() >= 2; }));
    rt.Stop();  // must return although "hung" never does
    const auto status = rt.Status();
    EXPECT_EQ(status[0].health.state, CollectorState::kRunning);  // abandoned, not stopped under its feet
    EXPECT_GE(status[0].health.timeouts, 1u);
    EXPECT_EQ(status[1].health.state, CollectorState::kStopped);
    EXPECT_GE(maintenance_runs, 1);
    rt.Stop();  // idempotent
  }
  // The runtime is gone and so is the sink; the abandoned collect finally returns and writes.
  const uint64_t appends = sink->appends();
  sink.reset();
  hung->gate.Open();
  ASSERT_TRUE(WaitFor([&] { return hung->after_hang_done.load(); }));
  std::lock_guard lock(hung->mu);
  ASSERT_TRUE(hung->after_hang_append.has_value());
  EXPECT_EQ(*hung->after_hang_append, ErrorCode::kUnavailable);
  EXPECT_GT(appends, 0u);
}

TEST(RuntimeTest, MaintenanceRunsPeriodicallyAndAtStop) {
  FakeSink sink;
  std::atomic<int> runs{0};
  std::atomic<TimeNs> last_now{0};
  RuntimeOptions o = FastOptions();
  o.maintenance = [&](TimeNs now) {
    last_now = now;
    ++runs;
  };
  Runtime rt(sink, o);
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] { return runs >= 3; }));
  EXPECT_GT(last_now.load(), 0);
  rt.Stop();
  const int after_stop = runs;
  EXPECT_GE(after_stop, 4);  // three periodic runs, one final
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(runs, after_stop);  // nothing runs after Stop
}

// Upkeep runs between maintenance rounds, never in place of one and never at the same time:
// with maintenance every 200 ms and upkeep every 20 ms, several upkeeps fall between rounds.
TEST(RuntimeTest, UpkeepRunsBetweenMaintenanceRounds) {
  FakeSink sink;
  std::atomic<int> rounds{0}, upkeeps{0}, busy{0}, overlaps{0};
  RuntimeOptions o = FastOptions();
  o.maintenance_interval = 200 * kNsPerMs;
  o.upkeep_interval = 20 * kNsPerMs;
  o.maintenance = [&](TimeNs) {
    if (busy.fetch_add(1) != 0) ++overlaps;
    ++rounds;
    busy.fetch_sub(1);
  };
  o.upkeep = [&] {
    if (busy.fetch_add(1) != 0) ++overlaps;
    ++upkeeps;
    busy.fetch_sub(1);
  };
  Runtime rt(sink, o);
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] { return rounds >= 2; }));
  rt.Stop();
  // ~18 are due in two rounds; a loaded machine delays some (they never pile up).
  EXPECT_GE(upkeeps.load(), 3) << "upkeep every 20 ms between rounds 200 ms apart";
  EXPECT_EQ(overlaps.load(), 0);
  const int after_stop = upkeeps;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(upkeeps.load(), after_stop);  // nothing runs after Stop
}

TEST(RuntimeTest, ACollectorThatFailsToInitStaysDownOthersRun) {
  FakeSink sink;
  auto broken = std::make_shared<Probe>();
  broken->fail_init = true;
  auto fine = std::make_shared<Probe>();
  Runtime rt(sink, FastOptions());
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("broken", broken)));
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("fine", fine)));
  ASSERT_TRUE(rt.Start());
  ASSERT_TRUE(WaitFor([&] {
    auto up = sink.FindWith("ithbat_collector_up", {{"collector", "broken"}});
    return fine->count() >= 3 && up && !up->samples.empty();
  }));
  rt.Stop();
  EXPECT_EQ(broken->count(), 0u);
  EXPECT_EQ(rt.Status()[0].health.state, CollectorState::kFailed);
  EXPECT_THAT(rt.Status()[0].health.last_error, HasSubstr("device missing"));
  EXPECT_EQ(sink.FindWith("ithbat_collector_up", {{"collector", "broken"}})->samples.back().second, 0.0);
  const auto events = sink.events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const Event& e) {
    return e.kind == EventKind::kCollectorState && e.name == "broken" &&
           e.text.find("device missing") != std::string::npos;
  }));
}

TEST(RuntimeTest, AddAndStartMisuse) {
  FakeSink sink;
  Runtime rt(sink, FastOptions());
  auto probe = std::make_shared<Probe>();
  EXPECT_FALSE(rt.Add(nullptr));
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("x", probe)));
  auto dup = rt.Add(std::make_unique<TestCollector>("x", probe));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(rt.Add(std::make_unique<TestCollector>("y", probe), -1));
  ASSERT_TRUE(rt.Start());
  auto late = rt.Add(std::make_unique<TestCollector>("z", probe));
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kInternal);
  EXPECT_FALSE(rt.Start());
  rt.Stop();
  EXPECT_FALSE(rt.Start());

  RuntimeOptions bad = FastOptions();
  bad.interval = 0;
  Runtime rt2(sink, bad);
  auto s = rt2.Start();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
}

TEST(RuntimeTest, DestructorStopsARunningRuntime) {
  FakeSink sink;
  auto probe = std::make_shared<Probe>();
  {
    Runtime rt(sink, FastOptions());
    ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("x", probe)));
    ASSERT_TRUE(rt.Start());
    ASSERT_TRUE(WaitFor([&] { return probe->count() >= 2; }));
  }
  const size_t n = probe->count();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(probe->count(), n);
}

TEST(RuntimeTest, DescribeAllIsSortedAndComplete) {
  FakeSink sink;
  Runtime rt(sink, FastOptions());
  auto probe = std::make_shared<Probe>();
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("b", probe)));
  ASSERT_TRUE(rt.Add(std::make_unique<TestCollector>("a", probe)));
  const auto all = rt.DescribeAll();
  ASSERT_EQ(all.size(), Runtime::DescribeSelf().size() + 2);
  EXPECT_TRUE(
      std::is_sorted(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.name < y.name; }));
  EXPECT_TRUE(
      std::any_of(all.begin(), all.end(), [](const auto& d) { return d.name == "ithbat_test_a_value"; }));

  const auto grouped = rt.DescribeByCollector();
  ASSERT_EQ(grouped.size(), 3u);
  EXPECT_EQ(grouped[0].first, "agent");
  EXPECT_EQ(grouped[1].first, "b");
  EXPECT_EQ(grouped[2].first, "a");
}

}  // namespace
}  // namespace ithbat::agent
