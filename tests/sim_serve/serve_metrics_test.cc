// What the simulated server shows (sim/workload/serve_metrics.h), read back with the agent's
// own parsers: the Prometheus exposition parser and vLLM normaliser of collect/serving, and the
// joblog parser of vLLM's stats lines.
#include "workload/serve_metrics.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "collect/serving/exposition.h"
#include "collect/serving/normalise.h"
#include "testutil/testutil.h"

namespace ithbat::sim::workload::serve {
namespace {

using collect::serving::ServingSeries;

TEST(PromFloat, FormatsLikePrometheusClient) {
  EXPECT_EQ(PromFloat(8), "8.0");
  EXPECT_EQ(PromFloat(0), "0.0");
  EXPECT_EQ(PromFloat(0.5), "0.5");
  EXPECT_EQ(PromFloat(218152), "218152.0");
  EXPECT_EQ(PromFloat(1048576), "1.048576e+06");
  EXPECT_EQ(PromFloat(1753795326.9352946), "1.7537953269352946e+09");
  EXPECT_EQ(PromFloat(9.75010481363281e-06), "9.75010481363281e-06");
  EXPECT_EQ(PromFloat(-1), "-1.0");
  EXPECT_EQ(PromFloat(1.0 / 0.0), "+Inf");
}

// Two replicas with some traffic behind them.
struct Fixture {
  ServeSpec spec;
  std::vector<std::unique_ptr<ReplicaEngine>> engines;
  std::vector<ReplicaView> views;
  explicit Fixture(scenario::MetricsStyle style) {
    spec.metrics = style;
    spec.gpus = 2;
    spec.shared_prefix_share = 0.5;
    spec.model = "org/model \"quoted\"";
    for (int i = 0; i < 2; ++i) {
      engines.push_back(std::make_unique<ReplicaEngine>(spec));
      ReplicaEngine& e = *engines.back();
      int64_t t = 0;
      for (int step = 0; step < 8 + i; ++step) {
        if (step < 6) e.Enqueue(Request{static_cast<uint64_t>(step), t, 400 + 100 * step, 20, 200});
        e.Plan(t);
        t += 20'000'000;
        e.Finish(t);
      }
      e.Enqueue(Request{99, t, 300, 4, 0});
    }
    for (const auto& e : engines)
      views.push_back(
          ReplicaView{e->running(), e->waiting(), e->used_blocks(), e->total_blocks(), &e->counters()});
  }
};

std::map<ServingSeries, double> Normalised(const std::string& body, size_t* samples) {
  auto expo = collect::serving::ParseExposition(body);
  EXPECT_TRUE(expo);
  if (!expo) return {};
  EXPECT_EQ(expo->errors, 0u) << expo->first_error << " at line " << expo->first_error_line;
  *samples = expo->samples.size();
  std::map<ServingSeries, double> out;
  for (const auto& s : collect::serving::Normalise(collect::serving::Engine::kVllm, *expo))
    out[s.series] += s.value;
  return out;
}

TEST(RenderMetrics, V1ParsesIntoTheAgentsSeriesPerEngine) {
  Fixture f(scenario::MetricsStyle::kVllmV1);
  const std::string body = RenderMetrics(f.spec, f.views, MetricsContext{1.7e9, 0, 0});
  EXPECT_NE(body.find("# TYPE vllm:kv_cache_usage_perc gauge"), std::string::npos);
  EXPECT_NE(body.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(body.find("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name="),
            std::string::npos);
  EXPECT_EQ(body.find("vllm:gpu_cache_usage_perc"), std::string::npos);
  size_t samples = 0;
  auto n = Normalised(body, &samples);
  EXPECT_GT(samples, 200u);
  const double running = static_cast<double>(f.views[0].running + f.views[1].running);
  const double waiting = static_cast<double>(f.views[0].waiting + f.views[1].waiting);
  EXPECT_EQ(n[ServingSeries::kRequestsRunning], running);
  EXPECT_EQ(n[ServingSeries::kRequestsWaiting], waiting);
  EXPECT_GT(n[ServingSeries::kKvCacheUsageRatio], 0);
  EXPECT_LE(n[ServingSeries::kKvCacheUsageRatio], 2.0);  // summed over 2 engines here
  EXPECT_GT(n[ServingSeries::kPrefixCacheQueriesTotal], 0);
  EXPECT_GT(n[ServingSeries::kPrefixCacheHitsTotal], 0);
  EXPECT_GT(n[ServingSeries::kPromptTokensTotal], 0);
  EXPECT_GT(n[ServingSeries::kGenerationTokensTotal], 0);
  EXPECT_GT(n[ServingSeries::kTtftRequestsTotal], 0);
  EXPECT_GT(n[ServingSeries::kPrefillSecondsTotal], 0);
  EXPECT_EQ(n[ServingSeries::kKvCacheBlocks], 2.0 * static_cast<double>(f.engines[0]->total_blocks()));
  // One series per engine, as vLLM's data-parallel engines label them.
  auto expo = collect::serving::ParseExposition(body);
  int engines = 0;
  for (const auto& s : collect::serving::Normalise(collect::serving::Engine::kVllm, *expo)) {
    if (s.series == ServingSeries::kRequestsRunning) {
      ++engines;
      EXPECT_EQ(s.model, f.spec.model);
    }
  }
  EXPECT_EQ(engines, 2);
  EXPECT_EQ(expo->types.at("vllm:time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(expo->types.at("vllm:prompt_tokens_total"), "counter");
}

TEST(RenderMetrics, V0UsesTheOldNamesSummedOverTheServer) {
  Fixture f(scenario::MetricsStyle::kVllmV0);
  const std::string body = RenderMetrics(f.spec, f.views, MetricsContext{1.7e9, 123.4, 56.7});
  EXPECT_NE(body.find("vllm:gpu_cache_usage_perc{model_name="), std::string::npos);
  EXPECT_NE(body.find("vllm:num_requests_swapped{"), std::string::npos);
  EXPECT_EQ(body.find("vllm:kv_cache_usage_perc"), std::string::npos);
  EXPECT_EQ(body.find("engine=\""), std::string::npos);
  size_t samples = 0;
  auto n = Normalised(body, &samples);
  const int64_t used = f.views[0].used_blocks + f.views[1].used_blocks;
  const int64_t total = f.views[0].total_blocks + f.views[1].total_blocks;
  EXPECT_DOUBLE_EQ(n[ServingSeries::kKvCacheUsageRatio],
                   static_cast<double>(used) / static_cast<double>(total));
  EXPECT_EQ(n[ServingSeries::kRequestsRunning], static_cast<double>(f.views[0].running + f.views[1].running));
  EXPECT_EQ(n.count(ServingSeries::kRequestsSwapped), 1u);
  EXPECT_GT(n[ServingSeries::kPrefixCacheHitRatio], 0);
  EXPECT_LE(n[ServingSeries::kPrefixCacheHitRatio], 1);
}

std::vector<collect::joblog::ParsedEvent> ParseLines(const std::vector<std::string>& lines) {
  auto parser = collect::joblog::MakeVllmParser();
  std::vector<collect::joblog::ParsedEvent> out;
  for (const std::string& l : lines) {
    collect::joblog::LineView v;
    v.text = l;
    EXPECT_TRUE(parser->Parse(v, out)) << l;
  }
  return out;
}

std::string Attr(const collect::joblog::ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs)
    if (k == key) return v;
  return "";
}

TEST(StatsLines, V1LineIsVllmsAndTheAgentReadsIt) {
  ServeSpec s;
  const StatsSample x{236.8, 51.4, 1, 0, 0.273, 0.911};
  const auto lines = StatsLines(s, 1, "06-13 11:03:35", 0, x);
  ASSERT_EQ(lines.size(), 1u);
  // The real line (vllm-v1-engine-log-lmcache-specdecode.txt) but for the logger's line number.
  EXPECT_EQ(lines[0],
            "(APIServer pid=1) INFO 06-13 11:03:35 [loggers.py:271] Engine 000: Avg prompt throughput: 236.8 "
            "tokens/s, "
            "Avg generation throughput: 51.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
            "27.3%, "
            "Prefix cache hit rate: 91.1%");
  const auto ev = ParseLines(StatsLines(s, 4242, "01-02 03:04:05", 3, StatsSample{10, 20, 7, 5, 0.5, 0.25}));
  std::map<std::string, double> by_name;
  for (const auto& e : ev) {
    EXPECT_EQ(e.kind, EventKind::kServingMetric);
    EXPECT_EQ(Attr(e, "engine"), "vllm_v1");
    EXPECT_EQ(Attr(e, "engine_index"), "3");
    by_name[e.name] = e.value;
  }
  EXPECT_EQ(by_name["running_requests"], 7);
  EXPECT_EQ(by_name["waiting_requests"], 5);
  EXPECT_DOUBLE_EQ(by_name["kv_cache_usage_ratio"], 0.5);
  EXPECT_DOUBLE_EQ(by_name["prefix_cache_hit_ratio"], 0.25);
  EXPECT_DOUBLE_EQ(by_name["generation_tokens_per_second"], 20);
}

TEST(StatsLines, V0LinesAreVllmsAndTheAgentReadsThem) {
  ServeSpec s;
  s.metrics = scenario::MetricsStyle::kVllmV0;
  const auto lines = StatsLines(s, 1, "09-22 23:46:42", 0, StatsSample{5902.0, 230.6, 16, 11, 0.871, 0.2668});
  ASSERT_EQ(lines.size(), 2u);
  // The real lines (vllm-v0-engine-log-formats-swapped-pending.txt, [1]).
  EXPECT_EQ(lines[0],
            "INFO 09-22 23:46:42 metrics.py:351] Avg prompt throughput: 5902.0 tokens/s, Avg generation "
            "throughput: "
            "230.6 tokens/s, Running: 16 reqs, Swapped: 0 reqs, Pending: 11 reqs, GPU KV cache usage: 87.1%, "
            "CPU KV "
            "cache usage: 0.0%.");
  EXPECT_EQ(lines[1], "INFO 09-22 23:46:42 metrics.py:367] Prefix cache hit rate: GPU: 26.68%, CPU: 0.00%");
  std::map<std::string, double> by_name;
  for (const auto& e : ParseLines(lines)) {
    EXPECT_EQ(Attr(e, "engine"), "vllm_v0");
    by_name[e.name] = e.value;
  }
  EXPECT_EQ(by_name["waiting_requests"], 11);
  EXPECT_DOUBLE_EQ(by_name["kv_cache_usage_ratio"], 0.871);
  EXPECT_DOUBLE_EQ(by_name["prefix_cache_hit_ratio"], 0.2668);
  s.prefix_caching = false;
  EXPECT_EQ(StatsLines(s, 1, "09-22 23:46:42", 0, StatsSample{}).size(), 1u);
}

}  // namespace
}  // namespace ithbat::sim::workload::serve
