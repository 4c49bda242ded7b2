// The HTTP endpoint end to end: a real server on a free port, a real client.
#include "serve/http_server.h"

#include <atomic>
#include <csignal>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/time.h"
#include "core/version.h"
#include "investigate/diagnosis_json.h"
#include "serve/text_format.h"
#include "store/store.h"

namespace ithbat::serve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

MetricDesc Gauge(std::string name, std::string help, std::string unit = "") {
  return MetricDesc{std::move(name), std::move(help), std::move(unit), MetricType::kGauge, {}};
}

class HttpServerTest : public ::testing::Test {
 protected:
  // The server closes a connection whose body it refused unread; the client writing the rest
  // then gets EPIPE, which must not kill the test (the agent and hub ignore SIGPIPE too).
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }

  void SetUp() override {
    auto s = store::Store::Open(store::StoreOptions{});
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    store_ = std::move(*s);
    now_ = NowNs();
    t0_ = now_ - 10 * kNsPerSec;
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  void Put(const MetricDesc& desc, const LabelSet& labels, TimeNs t, double v) {
    auto ref = store_->RegisterSeries(desc, labels);
    ASSERT_TRUE(ref.has_value()) << ref.error().ToString();
    auto ok = store_->Append(*ref, t, v);
    ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  }

  static LabelSet Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
    auto l = LabelSet::From(pairs);
    EXPECT_TRUE(l.has_value());
    return l.value_or(LabelSet());
  }

  void StartServer(ServerOptions options = {}, ServerSources sources = {}) {
    options.port = 0;
    auto s = HttpServer::Start(*store_, std::move(sources), std::move(options));
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    server_ = std::move(*s);
    ASSERT_NE(server_->port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }

  // GET that must answer; returns status and parsed JSON body (null when not JSON).
  std::pair<int, json> GetJson(const std::string& path, const httplib::Headers& headers = {}) {
    auto res = client_->Get(path, headers);
    EXPECT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    if (!res) return {0, json()};
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << path;
    json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(body.is_discarded()) << path << ": " << res->body;
    return {res->status, body};
  }

  // Asserts the documented error shape and returns the code.
  static std::string ErrorCodeOf(const json& body) {
    EXPECT_EQ(body.value("status", ""), "error") << body.dump();
    if (!body.contains("error")) return "";
    EXPECT_TRUE(body["error"]["message"].is_string()) << body.dump();
    EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
    return body["error"].value("code", "");
  }

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  TimeNs now_ = 0;
  TimeNs t0_ = 0;
};

TEST_F(HttpServerTest, MetricsServesTheExposition) {
  Put(Gauge("ithbat_test_temperature_celsius", "Temperature", "celsius"), Labels({{"gpu", "0"}}), t0_, 70);
  StartServer();
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, RenderPrometheusText(*store_, kMinTime));
  EXPECT_THAT(res->body, HasSubstr("ithbat_test_temperature_celsius{gpu=\"0\"} 70\n"));

  auto head = client_->Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
}

TEST_F(HttpServerTest, MetricsLeavesOutStaleSeries) {
  Put(Gauge("ithbat_test_fresh", "Fresh"), LabelSet(), t0_, 1);
  Put(Gauge("ithbat_test_stale", "Stale"), LabelSet(), now_ - 3600 * kNsPerSec, 1);
  ServerOptions options;
  options.stale_after = 60 * kNsPerSec;
  StartServer(options);
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("ithbat_test_fresh 1\n"));
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("ithbat_test_stale")));
}

TEST_F(HttpServerTest, SeriesReturnsSamplesWithValuesAsStrings) {
  MetricDesc g = Gauge("ithbat_test_temperature_celsius", "Temperature", "celsius");
  Put(g, Labels({{"gpu", "0"}}), t0_, 70.5);
  Put(g, Labels({{"gpu", "0"}}), t0_ + kNsPerSec, std::nan(""));
  Put(g, Labels({{"gpu", "0"}}), t0_ + 2 * kNsPerSec, kInf);
  Put(g, Labels({{"gpu", "0"}}), t0_ + 3 * kNsPerSec, -kInf);
  Put(g, Labels({{"gpu", "1"}}), t0_, 1);
  Put(Gauge("ithbat_test_other", "Other"), LabelSet(), t0_, 5);
  StartServer();

  auto [status, body] = GetJson("/api/v1/series?match=ithbat_test_temperature_celsius%7Bgpu%3D%220%22%7D");
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["status"], "success");
  ASSERT_EQ(body["data"].size(), 1u) << body.dump();
  const json& s = body["data"][0];
  EXPECT_EQ(s["metric"], "ithbat_test_temperature_celsius");
  EXPECT_EQ(s["labels"], (json{{"gpu", "0"}}));
  EXPECT_EQ(s["type"], "gauge");
  EXPECT_EQ(s["unit"], "celsius");
  ASSERT_EQ(s["samples"].size(), 4u);
  std::vector<std::string> values;
  for (const auto& sample : s["samples"]) values.push_back(sample[1].get<std::string>());
  EXPECT_THAT(values, ElementsAre("70.5", "NaN", "+Inf", "-Inf"));
  // Times are exact Unix seconds.
  EXPECT_NEAR(s["samples"][0][0].get<double>(), static_cast<double>(t0_) / 1e9, 1e-6);

  auto [status2, body2] = GetJson("/api/v1/series?match=%7B__name__%3D~%22ithbat_test_.*%22%7D");
  ASSERT_EQ(status2, 200) << body2.dump();
  EXPECT_EQ(body2["data"].size(), 3u);
}

TEST_F(HttpServerTest, SeriesWindow) {
  MetricDesc g = Gauge("ithbat_test_value", "Value");
  const TimeNs base = 1'700'000'000 * kNsPerSec;
  for (int i = 0; i < 10; ++i) Put(g, LabelSet(), base + i * kNsPerSec, i);
  StartServer();
  // RFC 3339 and Unix seconds both work; the window is inclusive.
  auto [status, body] =
      GetJson("/api/v1/series?match=ithbat_test_value&start=1700000002&end=2023-11-14T22:13:24Z");
  ASSERT_EQ(status, 200) << body.dump();
  ASSERT_EQ(body["data"].size(), 1u);
  const json& samples = body["data"][0]["samples"];
  ASSERT_EQ(samples.size(), 3u) << samples.dump();
  EXPECT_EQ(samples[0][0], 1700000002);
  EXPECT_EQ(samples[0][1], "2");
  EXPECT_EQ(samples[2][1], "4");

  // The default window is the last hour: these old samples are not in it.
  auto [status2, body2] = GetJson("/api/v1/series?match=ithbat_test_value");
  ASSERT_EQ(status2, 200);
  EXPECT_EQ(body2["data"].size(), 0u);
}

TEST_F(HttpServerTest, SeriesBadInputIs400) {
  Put(Gauge("ithbat_test_value", "Value"), LabelSet(), t0_, 1);
  StartServer();
  for (const char* path :
       {"/api/v1/series", "/api/v1/series?match=", "/api/v1/series?match=%7B",
        "/api/v1/series?match=ithbat_test_value%7Bjob%3D",
        "/api/v1/series?match=ithbat_test_value&start=yesterday",
        "/api/v1/series?match=ithbat_test_value&start=1e300",
        "/api/v1/series?match=ithbat_test_value&start=200&end=100",
        "/api/v1/series?match=ithbat_test_value&strat=100", "/api/v1/series?match=a&match=b"}) {
    auto [status, body] = GetJson(path);
    EXPECT_EQ(status, 400) << path << " " << body.dump();
    EXPECT_EQ(ErrorCodeOf(body), "bad_request") << path;
  }
}

TEST_F(HttpServerTest, SeriesLimitsAre422) {
  MetricDesc g = Gauge("ithbat_test_value", "Value");
  for (int i = 0; i < 3; ++i) {
    std::string gpu = std::to_string(i);
    Put(g, Labels({{"gpu", gpu}}), t0_, i);
    Put(g, Labels({{"gpu", gpu}}), t0_ + kNsPerSec, i);
  }
  {
    ServerOptions options;
    options.max_series_per_query = 2;
    StartServer(options);
    auto [status, body] = GetJson("/api/v1/series?match=ithbat_test_value");
    EXPECT_EQ(status, 422) << body.dump();
    EXPECT_EQ(ErrorCodeOf(body), "limit_exceeded");
    EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("3 series"));
    auto [ok_status, ok_body] = GetJson("/api/v1/series?match=ithbat_test_value%7Bgpu%3D%221%22%7D");
    EXPECT_EQ(ok_status, 200) << ok_body.dump();
    server_->Stop();
  }
  {
    ServerOptions options;
    options.max_samples_per_query = 5;
    StartServer(options);
    auto [status, body] = GetJson("/api/v1/series?match=ithbat_test_value");
    EXPECT_EQ(status, 422) << body.dump();
    EXPECT_EQ(ErrorCodeOf(body), "limit_exceeded");
    EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("6 samples"));
  }
}

Event MakeEvent(TimeNs t, EventKind kind, std::string job, int32_t rank) {
  Event e;
  e.time = t;
  e.kind = kind;
  e.identity.job = std::move(job);
  e.identity.rank = rank;
  e.source = "test";
  return e;
}

TEST_F(HttpServerTest, EventsWithFilters) {
  Event xid = MakeEvent(t0_, EventKind::kXid, "j1", 0);
  xid.identity.gpu_index = 3;
  xid.value = 79;
  xid.text = "GPU has fallen off the bus";
  xid.attrs = {{"pci", "0000:3b:00.0"}};
  ASSERT_TRUE(store_->AppendEvent(xid).has_value());
  Event loss = MakeEvent(t0_ + kNsPerSec, EventKind::kLoss, "j1", 1);
  loss.step = 12;
  loss.value = kInf;
  ASSERT_TRUE(store_->AppendEvent(loss).has_value());
  Event step = MakeEvent(t0_ + 2 * kNsPerSec, EventKind::kStep, "j2", 0);
  step.identity.pid = 4242;
  ASSERT_TRUE(store_->AppendEvent(step).has_value());
  Event nameless;
  nameless.time = t0_ + 3 * kNsPerSec;
  nameless.kind = EventKind::kLogLine;
  nameless.text = "hello";
  ASSERT_TRUE(store_->AppendEvent(nameless).has_value());
  StartServer();

  {
    auto [status, body] = GetJson("/api/v1/events");
    ASSERT_EQ(status, 200) << body.dump();
    ASSERT_EQ(body["data"].size(), 4u) << body.dump();
  }
  {
    auto [status, body] = GetJson("/api/v1/events?kind=xid");
    ASSERT_EQ(status, 200);
    ASSERT_EQ(body["data"].size(), 1u) << body.dump();
    const json& e = body["data"][0];
    EXPECT_EQ(e["kind"], "xid");
    EXPECT_EQ(e["time_unix_ns"], t0_);
    EXPECT_EQ(e["time"], FormatRfc3339(t0_));
    EXPECT_EQ(e["job"], "j1");
    EXPECT_EQ(e["rank"], 0);
    EXPECT_EQ(e["gpu"], 3);
    EXPECT_FALSE(e.contains("pid"));  // unknown identity parts are left out
    EXPECT_EQ(e["value"], "79");
    EXPECT_TRUE(e["step"].is_null());
    EXPECT_EQ(e["text"], "GPU has fallen off the bus");
    EXPECT_EQ(e["attrs"], (json{{"pci", "0000:3b:00.0"}}));
    EXPECT_EQ(e["source"], "test");
  }
  {
    auto [status, body] = GetJson("/api/v1/events?kind=loss,step&job=j1");
    ASSERT_EQ(status, 200);
    ASSERT_EQ(body["data"].size(), 1u) << body.dump();
    EXPECT_EQ(body["data"][0]["value"], "+Inf");
    EXPECT_EQ(body["data"][0]["step"], 12);
  }
  {
    auto [status, body] = GetJson("/api/v1/events?rank=0");
    ASSERT_EQ(status, 200);
    EXPECT_EQ(body["data"].size(), 2u) << body.dump();
  }
  {
    auto [status, body] = GetJson("/api/v1/events?pid=4242");
    ASSERT_EQ(status, 200);
    ASSERT_EQ(body["data"].size(), 1u) << body.dump();
    EXPECT_EQ(body["data"][0]["kind"], "step");
  }
  {
    auto [status, body] = GetJson("/api/v1/events?kind=log_line");
    ASSERT_EQ(status, 200);
    ASSERT_EQ(body["data"].size(), 1u) << body.dump();
    EXPECT_TRUE(body["data"][0]["value"].is_null());
    EXPECT_FALSE(body["data"][0].contains("job"));
    EXPECT_FALSE(body["data"][0].contains("rank"));
  }
  {
    std::string path = fmt::format("/api/v1/events?start={}&end={}", FormatRfc3339(t0_ + kNsPerSec),
                                   FormatRfc3339(t0_ + 2 * kNsPerSec));
    auto [status, body] = GetJson(path);
    ASSERT_EQ(status, 200) << body.dump();
    EXPECT_EQ(body["data"].size(), 2u) << body.dump();
  }
  {
    // Newest events win when the limit cuts.
    auto [status, body] = GetJson("/api/v1/events?limit=1");
    ASSERT_EQ(status, 200);
    ASSERT_EQ(body["data"].size(), 1u) << body.dump();
    EXPECT_EQ(body["data"][0]["kind"], "log_line");
  }
  for (const char* path : {"/api/v1/events?kind=nope", "/api/v1/events?kind=xid,", "/api/v1/events?rank=x",
                           "/api/v1/events?rank=-1", "/api/v1/events?limit=0", "/api/v1/events?limit=100001",
                           "/api/v1/events?gpu=99999999999", "/api/v1/events?jobb=j1"}) {
    auto [status, body] = GetJson(path);
    EXPECT_EQ(status, 400) << path << " " << body.dump();
    EXPECT_EQ(ErrorCodeOf(body), "bad_request") << path;
  }
}

TEST_F(HttpServerTest, StepsRangeAndAt) {
  for (int64_t s = 1; s <= 5; ++s) {
    StepSpan span{s, t0_ + (s - 1) * kNsPerSec, t0_ + s * kNsPerSec};
    ASSERT_TRUE(store_->RecordStep("j1", 0, span).has_value());
  }
  ASSERT_TRUE(store_->RecordStep("j1", 1, StepSpan{1, t0_, t0_ + kNsPerSec}).has_value());
  StartServer();
  {
    auto [status, body] = GetJson("/api/v1/steps?job=j1&rank=0");
    ASSERT_EQ(status, 200) << body.dump();
    ASSERT_EQ(body["data"].size(), 5u) << body.dump();
    const json& first = body["data"][0];
    EXPECT_EQ(first["step"], 1);
    EXPECT_EQ(first["start_unix_ns"], t0_);
    EXPECT_EQ(first["end_unix_ns"], t0_ + kNsPerSec);
    EXPECT_EQ(first["start"], FormatRfc3339(t0_));
    EXPECT_EQ(first["duration_seconds"], 1);
  }
  {
    std::string path =
        fmt::format("/api/v1/steps?job=j1&rank=0&at={}", FormatRfc3339(t0_ + 2 * kNsPerSec + 5));
    auto [status, body] = GetJson(path);
    ASSERT_EQ(status, 200) << body.dump();
    EXPECT_EQ(body["data"]["step"], 3) << body.dump();
    EXPECT_EQ(body["data"]["start_unix_ns"], t0_ + 2 * kNsPerSec);
  }
  {
    auto [status, body] = GetJson("/api/v1/steps?job=j1&rank=0&at=1000");
    ASSERT_EQ(status, 200) << body.dump();
    EXPECT_TRUE(body["data"].is_null()) << body.dump();
  }
  {
    // Steps overlapping the window count, even one that started before it.
    std::string path = fmt::format("/api/v1/steps?job=j1&rank=0&start={}&end={}",
                                   FormatUnixSeconds(t0_ + kNsPerSec + kNsPerSec / 2),
                                   FormatUnixSeconds(t0_ + 2 * kNsPerSec + kNsPerSec / 2));
    auto [status, body] = GetJson(path);
    ASSERT_EQ(status, 200) << body.dump();
    ASSERT_EQ(body["data"].size(), 2u) << body.dump();
    EXPECT_EQ(body["data"][0]["step"], 2);
    EXPECT_EQ(body["data"][1]["step"], 3);
  }
  {
    auto [status, body] = GetJson("/api/v1/steps?job=nope&rank=0");
    ASSERT_EQ(status, 200) << body.dump();
    EXPECT_EQ(body["data"].size(), 0u);
  }
  for (const char* path :
       {"/api/v1/steps", "/api/v1/steps?job=j1", "/api/v1/steps?rank=0", "/api/v1/steps?job=j1&rank=zero",
        "/api/v1/steps?job=j1&rank=0&at=1&start=0", "/api/v1/steps?job=j1&rank=0&at=noon"}) {
    auto [status, body] = GetJson(path);
    EXPECT_EQ(status, 400) << path << " " << body.dump();
    EXPECT_EQ(ErrorCodeOf(body), "bad_request") << path;
  }
}

TEST_F(HttpServerTest, HealthzReportsCollectorsAndStays200) {
  ServerSources sources;
  sources.collectors = [] {
    agent::CollectorStatus host;
    host.name = "host";
    host.health.state = agent::CollectorState::kRunning;
    host.health.up = true;
    host.health.collects = 10;
    agent::CollectorStatus nvml;
    nvml.name = "nvml";
    nvml.health.state = agent::CollectorState::kFailed;
    nvml.health.errors = 2;
    nvml.health.timeouts = 1;
    nvml.health.last_error = "libnvidia-ml.so.1 not found";
    nvml.health.degraded = "no GPU";
    return std::vector<agent::CollectorStatus>{host, nvml};
  };
  StartServer({}, sources);
  auto [status, body] = GetJson("/healthz");
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["status"], "ok");
  ASSERT_EQ(body["collectors"].size(), 2u);
  const json& nvml = body["collectors"][1];
  EXPECT_EQ(nvml["name"], "nvml");
  EXPECT_EQ(nvml["state"], "failed");
  EXPECT_EQ(nvml["up"], false);
  EXPECT_EQ(nvml["errors"], 2);
  EXPECT_EQ(nvml["timeouts"], 1);
  EXPECT_EQ(nvml["last_error"], "libnvidia-ml.so.1 not found");
  EXPECT_EQ(nvml["degraded"], "no GPU");
  EXPECT_EQ(body["collectors"][0]["state"], "running");
  EXPECT_EQ(body["down"], (json{"nvml"}));
}

TEST_F(HttpServerTest, AThrowingHandlerIs500AndTheServerGoesOn) {
  ServerSources sources;
  sources.collectors = []() -> std::vector<agent::CollectorStatus> { throw std::runtime_error("boom"); };
  sources.metric_descs = []() -> std::vector<MetricDesc> { throw 42; };
  StartServer({}, sources);
  for (const char* path : {"/healthz", "/api/v1/metrics"}) {
    auto [status, body] = GetJson(path);
    EXPECT_EQ(status, 500) << path;
    EXPECT_EQ(ErrorCodeOf(body), "internal") << path;
  }
  auto [status, body] = GetJson("/api/v1/version");
  EXPECT_EQ(status, 200);
}

TEST_F(HttpServerTest, HealthzWithoutSources) {
  StartServer();
  auto [status, body] = GetJson("/healthz");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(body["collectors"], json::array());
}

TEST_F(HttpServerTest, Version) {
  StartServer();
  auto [status, body] = GetJson("/api/v1/version");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(body["version"], kVersion);
  EXPECT_EQ(body["api"], "v1");
  EXPECT_FALSE(body.contains("node"));  // none configured
}

TEST_F(HttpServerTest, VersionSaysTheNodeName) {
  ServerOptions o;
  o.node = "gpu-a07";
  StartServer(o);
  auto [status, body] = GetJson("/api/v1/version");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(body["node"], "gpu-a07");
}

TEST_F(HttpServerTest, MetricListMergesDeclaredAndStored) {
  Put(Gauge("ithbat_test_stored", "Stored"), LabelSet(), t0_, 1);
  ServerSources sources;
  sources.metric_descs = [] {
    MetricDesc declared = Gauge("ithbat_test_declared_bytes", "Declared only", "bytes");
    declared.label_names = {"gpu"};
    return std::vector<MetricDesc>{declared};
  };
  StartServer({}, sources);
  auto [status, body] = GetJson("/api/v1/metrics");
  ASSERT_EQ(status, 200) << body.dump();
  ASSERT_EQ(body["data"].size(), 2u) << body.dump();
  EXPECT_EQ(body["data"][0]["name"], "ithbat_test_declared_bytes");
  EXPECT_EQ(body["data"][0]["stored"], false);
  EXPECT_EQ(body["data"][0]["unit"], "bytes");
  EXPECT_EQ(body["data"][0]["labels"], (json{"gpu"}));
  EXPECT_EQ(body["data"][1]["name"], "ithbat_test_stored");
  EXPECT_EQ(body["data"][1]["stored"], true);
  // Declared-only metrics have nothing to show on /metrics.
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("ithbat_test_declared_bytes")));
}

TEST_F(HttpServerTest, BearerToken) {
  ServerOptions options;
  options.bearer_token = "s3cret-token";
  StartServer(options);
  {
    auto res = client_->Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_THAT(res->get_header_value("WWW-Authenticate"), HasSubstr("Bearer"));
    json body = json::parse(res->body);
    EXPECT_EQ(ErrorCodeOf(body), "unauthorized");
  }
  for (const char* header : {"Bearer wrong", "Bearer s3cret-token-longer", "Bearer s3cret-toke",
                             "Basic czNjcmV0", "s3cret-token", "Bearer "}) {
    auto res = client_->Get("/api/v1/version", {{"Authorization", header}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << header;
    EXPECT_THAT(res->get_header_value("WWW-Authenticate"), HasSubstr("invalid_token")) << header;
  }
  {
    auto res = client_->Get("/api/v1/version", {{"Authorization", "Bearer s3cret-token"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    auto res2 = client_->Get("/metrics", {{"Authorization", "bearer s3cret-token"}});
    ASSERT_TRUE(res2);
    EXPECT_EQ(res2->status, 200);
  }
  {
    // Unknown paths do not reveal themselves to an unauthenticated caller.
    auto res = client_->Get("/nope");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
  }
  {
    auto res = client_->Get("/healthz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
}

TEST_F(HttpServerTest, UnknownPathIs404Json) {
  StartServer();
  for (const char* path : {"/", "/nope", "/api/v1/", "/api/v2/series", "/metrics/extra"}) {
    auto [status, body] = GetJson(path);
    EXPECT_EQ(status, 404) << path;
    EXPECT_EQ(ErrorCodeOf(body), "not_found") << path;
  }
}

TEST_F(HttpServerTest, OnlyGetAndHead) {
  StartServer();
  {
    auto res = client_->Post("/metrics", "x=1", "application/x-www-form-urlencoded");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 405);
    EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
    EXPECT_EQ(ErrorCodeOf(json::parse(res->body)), "method_not_allowed");
  }
  {
    auto res = client_->Delete("/api/v1/series");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 405);
  }
  {
    auto res = client_->Put("/nope", "", "text/plain");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 405);
  }
  // Still serving.
  auto [status, body] = GetJson("/api/v1/version");
  EXPECT_EQ(status, 200);
}

TEST_F(HttpServerTest, OversizeRequestsAreRefusedWithoutHarm) {
  StartServer();
  // Whether the server answers (400/414/431) or drops the connection, it must survive.
  auto refused = [](const httplib::Result& res) {
    return !res || res->status == 400 || res->status == 414 || res->status == 431 || res->status == 413;
  };
  {
    std::string huge(1 << 20, 'a');
    auto res = client_->Get("/metrics", {{"X-Huge", huge}});
    EXPECT_TRUE(refused(res)) << (res ? res->status : 0);
  }
  {
    std::string path = "/api/v1/series?match=" + std::string(1 << 20, 'a');
    auto res = client_->Get(path);
    EXPECT_TRUE(refused(res)) << (res ? res->status : 0);
  }
  {
    // Headers adding up past max_request_bytes (16 KiB) but within the connection's pool get
    // the JSON 431; past the pool the library refuses them itself (tests/serve/http_bounds_test).
    httplib::Headers headers;
    for (int i = 0; i < 5; ++i) headers.emplace(fmt::format("X-Filler-{}", i), std::string(4000, 'b'));
    auto res = client_->Get("/api/v1/version", headers);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 431);
    EXPECT_EQ(ErrorCodeOf(json::parse(res->body)), "headers_too_large");
  }
  {
    auto res = client_->Post("/api/v1/version", std::string(1 << 20, 'c'), "text/plain");
    EXPECT_TRUE(!res || res->status == 405 || res->status == 413) << (res ? res->status : 0);
  }
  auto [status, body] = GetJson("/healthz");
  EXPECT_EQ(status, 200);
}

TEST_F(HttpServerTest, BindConflictIsUnavailable) {
  StartServer();
  ServerOptions options;
  options.port = server_->port();
  auto second = HttpServer::Start(*store_, {}, options);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(second.error().message, HasSubstr(std::to_string(server_->port())));

  options.bind_address = "not an address";
  auto third = HttpServer::Start(*store_, {}, options);
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::kUnavailable);
}

TEST_F(HttpServerTest, BadOptionsAreInvalid) {
  ServerOptions options;
  options.port = 0;
  options.threads = 0;
  auto s = HttpServer::Start(*store_, {}, options);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(HttpServerTest, StopIsIdempotentAndFreesThePort) {
  StartServer();
  uint16_t port = server_->port();
  server_->Stop();
  server_->Stop();
  ServerOptions options;
  options.port = port;
  auto again = HttpServer::Start(*store_, {}, options);
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  EXPECT_EQ((*again)->port(), port);
}

TEST_F(HttpServerTest, ConcurrentClients) {
  Put(Gauge("ithbat_test_value", "Value"), LabelSet(), t0_, 1);
  ServerOptions options;
  options.threads = 2;
  StartServer(options);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, port = server_->port()] {
      httplib::Client c("127.0.0.1", port);
      for (int k = 0; k < 10; ++k) {
        auto res = c.Get("/metrics");
        if (res && res->status == 200) ok++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 80);
}

Diagnosis ServedDiagnosis(TimeNs t) {
  Diagnosis d;
  d.id = "dx-77";
  d.state = DiagnosisState::kOpen;
  d.verdict = Verdict::kJob;
  d.cause = Cause::kDataImbalance;
  d.summary = "the slowest rank rotates with the work";
  d.subjects.job = "77";
  d.subjects.nodes = {"n1"};
  d.subjects.ranks = {{1, 1, "n1", 101}};
  d.window = {t - 60 * kNsPerSec, t};
  Evidence e;
  e.signal = "ithbat_probe_nccl_last_arrivals_total";
  e.collector = "probes";
  e.subject = "rank 1";
  e.observed = 2;
  e.expected = 1;
  e.note = "arrives last twice as often as its peers";
  e.window = d.window;
  d.evidence = {e};
  d.fix = "balance the data";
  d.opened_at = t - 30 * kNsPerSec;
  d.updated_at = t;
  return d;
}

TEST_F(HttpServerTest, DiagnosesServesSchemaV1) {
  ServerSources sources;
  std::atomic<int> calls{0};
  sources.diagnoses = [this, &calls] {
    ++calls;
    return std::vector<Diagnosis>{ServedDiagnosis(now_)};
  };
  StartServer({}, std::move(sources));
  auto [status, body] = GetJson("/api/v1/diagnoses");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body.value("schema", ""), investigate::kDiagnosisSchema);
  ASSERT_TRUE(body["diagnoses"].is_array()) << body.dump();
  ASSERT_EQ(body["diagnoses"].size(), 1u);
  const json& d = body["diagnoses"][0];
  EXPECT_TRUE(investigate::ValidateDiagnosisJson(d).has_value()) << d.dump();
  EXPECT_EQ(d["id"], "dx-77");
  EXPECT_EQ(d["cause"], "data_imbalance");
  EXPECT_EQ(d["subjects"]["job"], "77");
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(HttpServerTest, DiagnosesEmptyListWhenNothingIsFound) {
  ServerSources sources;
  sources.diagnoses = [] { return std::vector<Diagnosis>{}; };
  StartServer({}, std::move(sources));
  auto [status, body] = GetJson("/api/v1/diagnoses");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body.value("schema", ""), investigate::kDiagnosisSchema);
  EXPECT_EQ(body["diagnoses"], json::array());
}

TEST_F(HttpServerTest, DiagnosesOffIs503) {
  StartServer();
  auto [status, body] = GetJson("/api/v1/diagnoses");
  EXPECT_EQ(status, 503);
  EXPECT_EQ(ErrorCodeOf(body), "unavailable");
}

TEST_F(HttpServerTest, DiagnosesNeedTheBearerToken) {
  ServerOptions options;
  options.bearer_token = "s3cret-token";
  ServerSources sources;
  sources.diagnoses = [this] { return std::vector<Diagnosis>{ServedDiagnosis(now_)}; };
  StartServer(options, std::move(sources));
  {
    auto res = client_->Get("/api/v1/diagnoses");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_EQ(res->body.find("dx-77"), std::string::npos);
  }
  {
    auto res = client_->Get("/api/v1/diagnoses", {{"Authorization", "Bearer wrong"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
  }
  auto [status, body] = GetJson("/api/v1/diagnoses", {{"Authorization", "Bearer s3cret-token"}});
  EXPECT_EQ(status, 200);
  ASSERT_EQ(body["diagnoses"].size(), 1u);
}

TEST_F(HttpServerTest, ADiagnosesSourceThatThrowsIs500) {
  ServerSources sources;
  sources.diagnoses = []() -> std::vector<Diagnosis> { throw std::runtime_error("boom"); };
  StartServer({}, std::move(sources));
  auto [status, body] = GetJson("/api/v1/diagnoses");
  EXPECT_EQ(status, 500);
  auto [status2, body2] = GetJson("/api/v1/version");
  EXPECT_EQ(status2, 200);
}

}  // namespace
}  // namespace ithbat::serve
