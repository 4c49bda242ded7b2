// The agent's diagnosis collector: a round per tick over the store it writes to, the
// ithbat_diagnosis_* self-metrics, and ithbat_diagnosis_active going 1 → 0 as an incident is
// opened, resolved and forgotten.
#include "cli/diagnosis_collector.h"

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/agent_process.h"
#include "investigate/node_diagnoser.h"
#include "store/store.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::cli {
namespace {

using ::testing::UnorderedElementsAre;
using testutil::kS;
using testutil::kT0;

constexpr int kTicks = 60;
constexpr TimeNs kEnd = kT0 + (kTicks - 1) * kS;

// The newest value of every series of `metric`, keyed by its label text.
std::map<std::string, double> Latest(const store::Store& s, const std::string& metric) {
  std::map<std::string, double> out;
  auto selector = store::SeriesSelector::Parse(metric);
  EXPECT_TRUE(selector) << selector.error().ToString();
  if (!selector) return out;
  for (const auto& info : s.ListSeries(*selector)) {
    auto latest = s.Latest(info.ref);
    if (latest) out[info.labels.ToString()] = latest->v;
  }
  return out;
}

TEST(DiagnosisCollector, DescribesValidMetrics) {
  auto st = store::Store::Open({});
  ASSERT_TRUE(st);
  investigate::NodeDiagnoser nd;
  DiagnosisCollector c(nd, **st, "n1");
  EXPECT_EQ(c.name(), "diagnosis");
  std::vector<std::string> names;
  for (const auto& d : c.Describe()) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    names.push_back(d.name);
  }
  EXPECT_THAT(names, UnorderedElementsAre("ithbat_diagnosis_active", "ithbat_diagnosis_rounds_total",
                                          "ithbat_diagnosis_round_seconds", "ithbat_diagnosis_errors_total"));
}

TEST(DiagnosisCollector, ActiveGaugeFollowsTheIncident) {
  testutil::SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  store::Store& st = f.Node("n1");
  investigate::NodeDiagnoserOptions o;
  o.lookback = 60 * kS;
  o.investigate.resolve_after = 120 * kS;
  investigate::NodeDiagnoser nd(o);
  DiagnosisCollector c(nd, st, "n1");
  ASSERT_TRUE(c.Init(st));
  ASSERT_TRUE(c.Start());

  const std::string key = R"({cause="data_imbalance",job_id="77",verdict="job"})";
  ASSERT_TRUE(c.Collect(kEnd));
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_active"), (std::map<std::string, double>{{key, 1}}));
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_rounds_total").at(""), 1);
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_errors_total").at(""), 0);
  EXPECT_GT(Latest(st, "ithbat_diagnosis_round_seconds").at(""), 0);

  // Nothing supports it any more: resolved (0) after resolve_after, while still listed.
  bool saw_zero = false;
  TimeNs t = kEnd;
  for (int i = 0; i < 20 && !saw_zero; ++i) {
    t += 30 * kS;
    ASSERT_TRUE(c.Collect(t));
    auto active = Latest(st, "ithbat_diagnosis_active");
    ASSERT_EQ(active.count(key), 1u);
    saw_zero = active[key] == 0;
    if (saw_zero) {
      EXPECT_EQ(nd.Current().size(), 1u);  // resolved, not yet forgotten
    }
  }
  EXPECT_TRUE(saw_zero);
  // Forgotten: the series stays at 0.
  ASSERT_TRUE(c.Collect(t + 3600 * kS));
  EXPECT_TRUE(nd.Current().empty());
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_active").at(key), 0);
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_errors_total").at(""), 0);
  EXPECT_GE(Latest(st, "ithbat_diagnosis_rounds_total").at(""), 3);
  EXPECT_TRUE(c.Health().up);
}

TEST(DiagnosisCollector, AnEmptyStoreWritesOnlyTheSelfMetrics) {
  auto opened = store::Store::Open({});
  ASSERT_TRUE(opened);
  store::Store& st = **opened;
  investigate::NodeDiagnoser nd;
  DiagnosisCollector c(nd, st, "n1");
  ASSERT_TRUE(c.Init(st));
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.Collect(kT0));
  ASSERT_TRUE(c.Collect(kT0 + 10 * kS));
  EXPECT_TRUE(Latest(st, "ithbat_diagnosis_active").empty());
  EXPECT_EQ(Latest(st, "ithbat_diagnosis_rounds_total").at(""), 2);
  EXPECT_EQ(nd.Stats().rounds, 2u);
}

// An agent in-process, with the sources that need privileges or hardware off.
AgentOptions QuietAgent(TimeNs diagnose_interval) {
  AgentOptions o;
  o.listen_address = "127.0.0.1";
  o.listen_port = 0;
  o.node = "test-node";
  o.interval = 100 * kNsPerMs;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  o.kmsg = "";
  o.joblog = "off";
  o.sched_io = false;
  o.diagnose_interval = diagnose_interval;
  return o;
}

TEST(DiagnosisCollector, TheAgentRunsRoundsAndServesThem) {
  auto p = AgentProcess::Start(QuietAgent(kNsPerSec), /*serve=*/true);
  ASSERT_TRUE(p) << p.error().ToString();
  const TimeNs until = MonotonicNowNs() + 10 * kNsPerSec;
  while ((*p)->diagnoser().Stats().rounds < 1 && MonotonicNowNs() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE((*p)->diagnoser().Stats().rounds, 1u);
  EXPECT_EQ((*p)->diagnoser().Stats().errors, 0u);
  httplib::Client client("127.0.0.1", (*p)->port());
  client.set_read_timeout(10, 0);
  auto res = client.Get("/api/v1/diagnoses");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  auto body = nlohmann::json::parse(res->body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << res->body;
  EXPECT_EQ(body.value("schema", ""), "ithbat.diagnosis/v1");
  EXPECT_TRUE(body["diagnoses"].is_array());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ithbat_diagnosis_rounds_total"), std::string::npos);
  (*p)->Stop();
}

TEST(DiagnosisCollector, ZeroIntervalTurnsItOff) {
  auto p = AgentProcess::Start(QuietAgent(0), /*serve=*/true);
  ASSERT_TRUE(p) << p.error().ToString();
  httplib::Client client("127.0.0.1", (*p)->port());
  client.set_read_timeout(10, 0);
  auto res = client.Get("/api/v1/diagnoses");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  for (const auto& c : (*p)->runtime().Status()) EXPECT_NE(c.name, "diagnosis");
  (*p)->Stop();
}

}  // namespace
}  // namespace ithbat::cli
