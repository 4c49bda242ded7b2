// The exposition parser and the normaliser, on the real /metrics captures in
// ../shared/data/serving (expected values written by reading those files) and on hostile input.
#include <cmath>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "collect/serving/exposition.h"
#include "collect/serving/normalise.h"
#include "core/file_util.h"
#include "core/metric.h"
#include "testutil/testutil.h"

namespace ithbat::collect::serving {
namespace {

std::string ReadShared(std::string_view name) {
  auto dir = ithbat::testing::SharedDataDir();
  if (!dir) {
    ADD_FAILURE() << "../shared/data is absent: the serving conformance samples cannot be read";
    return {};
  }
  auto text = ReadFileBounded(*dir / "serving" / std::string(name), 1 << 20);
  if (!text) {
    ADD_FAILURE() << "cannot read shared sample " << name << ": " << text.error().message;
    return {};
  }
  return *text;
}

Exposition MustParse(std::string_view body, const ExpositionLimits& limits = {}) {
  auto e = ParseExposition(body, limits);
  EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().message);
  return e ? *e : Exposition{};
}

const NormalSample* Find(const std::vector<NormalSample>& v, ServingSeries s, std::string_view engine_index = "") {
  for (const auto& n : v) {
    if (n.series == s && n.engine_index == engine_index) return &n;
  }
  return nullptr;
}

// --- parser on the real captures ---

TEST(ServingExposition, VllmV0TtftHistogramSample) {
  const Exposition e = MustParse(ReadShared("ibm-vllm-pr18-v0-ttft-histogram.txt"));
  EXPECT_EQ(e.errors, 0u) << e.first_error;
  ASSERT_EQ(e.samples.size(), 10u);  // cpu cache, 2 token counters, 7 TTFT buckets (cut there)
  EXPECT_EQ(e.samples[0].name, "vllm:cpu_cache_usage_perc");
  EXPECT_EQ(e.samples[0].Label("model_name"), "bigscience/bloom-560m");
  EXPECT_EQ(e.samples[1].value, 1196.0);
  EXPECT_EQ(e.samples[2].value, 218152.0);
  EXPECT_EQ(e.samples[6].name, "vllm:time_to_first_token_seconds_bucket");
  EXPECT_EQ(e.samples[6].Label("le"), "0.02");
  EXPECT_EQ(e.samples[6].value, 112.0);
  EXPECT_EQ(e.types.at("vllm:time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(e.types.at("vllm:prompt_tokens_total"), "counter");
}

TEST(ServingExposition, FamiliesWithoutSamples) {
  const Exposition e = MustParse(ReadShared("metric-name-inventories-tgi-vllm-v0.txt"));
  EXPECT_EQ(e.errors, 0u) << e.first_error;
  EXPECT_TRUE(e.samples.empty());
  EXPECT_EQ(e.types.size(), 7u);
  EXPECT_EQ(e.types.at("vllm:num_requests_swapped"), "gauge");
}

TEST(ServingExposition, UpstreamDocWithElisionsCountsBadLines) {
  const Exposition e = MustParse(ReadShared("vllm-docs-design-metrics-example-output.txt"));
  // "$ curl" (twice), "..." (three times) and the cache_config_info line cut with ",...}".
  EXPECT_EQ(e.errors, 6u);
  EXPECT_EQ(e.first_error_line, 3u);
  EXPECT_EQ(e.samples.size(), 19u);
  EXPECT_EQ(e.samples.back().name, "http_request_duration_seconds_count");
  EXPECT_EQ(e.samples.back().Label("method"), "POST");
  EXPECT_EQ(e.samples.back().value, 201.0);
}

TEST(ServingExposition, TgiDictReprLabelValue) {
  const Exposition e = MustParse(ReadShared("tgi-metrics-tgis-compat-ibm-vllm-pr18.txt"));
  EXPECT_EQ(e.errors, 0u) << e.first_error;
  ASSERT_EQ(e.samples.size(), 15u);
  EXPECT_EQ(e.samples[2].Label("method"), "{'method': 'prefill'}");
  EXPECT_EQ(e.samples[2].Label("le"), "0.001");
  EXPECT_EQ(e.samples[14].Label("le"), "10.0");
  EXPECT_EQ(e.samples[14].value, 215.0);
}

TEST(ServingExposition, PlusInfBucketAndEngineLabel) {
  const Exposition e = MustParse(ReadShared("vllm-pr22227-v1-decode-time-histogram.txt"));
  EXPECT_EQ(e.errors, 0u) << e.first_error;
  ASSERT_EQ(e.samples.size(), 13u);
  EXPECT_EQ(e.samples.back().Label("le"), "+Inf");
  EXPECT_EQ(e.samples.back().Label("engine"), "1");
}

// --- parser on constructed and hostile input ---

TEST(ServingExposition, ValuesTimestampsEscapes) {
  const Exposition e = MustParse(
      "a 1\n"
      "b{x=\"q\\\"uo\\\\te\\nnl\"} NaN\n"
      "c +Inf 1700000000000\n"
      "d{} -Inf\n"
      "e{y=\"1\",} 2.5e3 1.5\n"
      "f 3 # {trace_id=\"x\"} 1\n"
      "# UNIT g seconds\n"
      "# EOF\n"
      "after_eof 1\n");
  EXPECT_EQ(e.errors, 0u) << e.first_error;
  ASSERT_EQ(e.samples.size(), 6u);
  EXPECT_EQ(e.samples[1].Label("x"), "q\"uo\\te\nnl");
  EXPECT_TRUE(std::isnan(e.samples[1].value));
  EXPECT_TRUE(std::isinf(e.samples[2].value) && e.samples[2].value > 0);
  EXPECT_EQ(e.samples[2].timestamp_ms, 1700000000000);
  EXPECT_TRUE(std::isinf(e.samples[3].value) && e.samples[3].value < 0);
  EXPECT_EQ(e.samples[4].value, 2500.0);
  EXPECT_EQ(e.samples[4].timestamp_ms, 1500);
  EXPECT_EQ(e.samples[5].value, 3.0);
  EXPECT_TRUE(e.saw_eof);
}

TEST(ServingExposition, GarbageIsCountedNeverFatal) {
  const Exposition e = MustParse(
      "ok 1\n"
      "{x=\"1\"} 2\n"              // no name
      "m{x=\"1\" 2\n"              // unterminated label set
      "m{x=1} 2\n"                 // unquoted
      "m{x=\"1\",x=\"2\"} 2\n"     // label twice
      "m 1 2 3\n"                  // trailing text
      "m abc\n"                    // bad value
      "m\n"                        // no value
      "m{x=\"unterminated\n"
      "# TYPE m bogus\n"
      "\x01\xff\xfe binary\n"
      "ok2 2\n");
  EXPECT_EQ(e.errors, 10u);
  EXPECT_EQ(e.first_error_line, 2u);
  ASSERT_EQ(e.samples.size(), 2u);
  EXPECT_EQ(e.samples[1].name, "ok2");
}

TEST(ServingExposition, Bounds) {
  ExpositionLimits limits;
  limits.max_body_bytes = 100;
  EXPECT_EQ(ParseExposition(std::string(101, 'a'), limits).error().code, ErrorCode::kResourceExhausted);

  limits = {};
  limits.max_line_bytes = 24;
  limits.max_samples = 2;
  limits.max_labels = 2;
  limits.max_label_value_bytes = 4;
  const Exposition e = MustParse(
      "a 1\n" + std::string(30, 'x') + " 1\n" + "b{p=\"12345\"} 1\nc{p=\"1\",q=\"2\",r=\"3\"} 1\nd 1\ne 1\n", limits);
  EXPECT_EQ(e.errors, 3u);           // long line, long value, too many labels
  EXPECT_EQ(e.samples.size(), 2u);   // a, d
  EXPECT_EQ(e.dropped_samples, 1u);  // e
}

TEST(ServingExposition, TruncatedAndEmpty) {
  EXPECT_TRUE(MustParse("").samples.empty());
  const Exposition e = MustParse("vllm:num_requests_running{model_name=\"m\"} 3.0\nvllm:num_requests_wai");
  EXPECT_EQ(e.samples.size(), 1u);
  EXPECT_EQ(e.errors, 1u);
  EXPECT_EQ(e.first_error_line, 2u);
}

TEST(ServingExposition, EveryPrefixOfARealSampleIsSafe) {
  const std::string body = ReadShared("production-stack-issue617-vllm-0.10-v1-metrics.txt");
  for (size_t n = 0; n <= body.size(); n++) {
    auto e = ParseExposition(std::string_view(body).substr(0, n));
    ASSERT_TRUE(e.has_value());
    EXPECT_LE(e->samples.size(), 5u);
  }
}

// --- normaliser on each engine's real capture ---

TEST(ServingNormalise, VllmV0TokenCounters) {
  const auto n = Normalise(Engine::kVllm, MustParse(ReadShared("ibm-vllm-pr18-v0-ttft-histogram.txt")));
  ASSERT_EQ(n.size(), 2u);  // cpu cache usage has no ithbat series; the histogram is cut before _sum
  const NormalSample* prompt = Find(n, ServingSeries::kPromptTokensTotal);
  ASSERT_NE(prompt, nullptr);
  EXPECT_EQ(prompt->value, 1196.0);
  EXPECT_EQ(prompt->model, "bigscience/bloom-560m");
  ASSERT_NE(Find(n, ServingSeries::kGenerationTokensTotal), nullptr);
  EXPECT_EQ(Find(n, ServingSeries::kGenerationTokensTotal)->value, 218152.0);
}

TEST(ServingNormalise, VllmV0IdleServer) {
  const auto n = Normalise(Engine::kVllm, MustParse(ReadShared("production-stack-issue318-vllm-v0-metrics.txt")));
  ASSERT_EQ(n.size(), 3u);  // process_* are not serving series
  for (auto s : {ServingSeries::kRequestsRunning, ServingSeries::kRequestsWaiting, ServingSeries::kKvCacheUsageRatio}) {
    const NormalSample* x = Find(n, s);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->value, 0.0);
    EXPECT_EQ(x->model, "Qwen/Qwen2.5-Coder-32B-Instruct");
  }
}

TEST(ServingNormalise, VllmV1PrefixCountersAndKvUsage) {
  const auto n = Normalise(Engine::kVllm, MustParse(ReadShared("production-stack-issue617-vllm-0.10-v1-metrics.txt")));
  ASSERT_EQ(n.size(), 3u);  // _created gauges ignored
  const NormalSample* kv = Find(n, ServingSeries::kKvCacheUsageRatio, "0");
  ASSERT_NE(kv, nullptr);
  EXPECT_DOUBLE_EQ(kv->value, 9.75010481363281e-06);
  EXPECT_EQ(kv->model, "zai-org/GLM-4.5");
  ASSERT_NE(Find(n, ServingSeries::kPrefixCacheQueriesTotal, "0"), nullptr);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheQueriesTotal, "0")->value, 32.0);
  ASSERT_NE(Find(n, ServingSeries::kPrefixCacheHitsTotal, "0"), nullptr);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheHitsTotal, "0")->value, 0.0);
}

TEST(ServingNormalise, VllmV1DocExample) {
  const auto n = Normalise(Engine::kVllm, MustParse(ReadShared("vllm-docs-design-metrics-example-output.txt")));
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning)->value, 8.0);
  EXPECT_EQ(Find(n, ServingSeries::kGenerationTokensTotal)->value, 27453.0);
  EXPECT_EQ(Find(n, ServingSeries::kTtftRequestsTotal)->value, 140.0);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning)->model, "meta-llama/Llama-3.1-8B-Instruct");
}

TEST(ServingNormalise, NewNameBeatsDeprecatedAndHistogramSums) {
  const auto n = Normalise(Engine::kVllm, MustParse(
      "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
      "vllm:gpu_prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 7\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 9\n"
      "vllm:request_prefill_time_seconds_sum{engine=\"1\",model_name=\"m\"} 1.5\n"
      "vllm:request_decode_time_seconds_sum{engine=\"1\",model_name=\"m\"} 12\n"
      "vllm:time_to_first_token_seconds_sum{engine=\"1\",model_name=\"m\"} 3.25\n"
      "vllm:num_requests_swapped{model_name=\"m\"} 2\n"
      "vllm:num_requests_running{model_name=\"m\"} NaN\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"27092\"} 1.0\n"));
  EXPECT_EQ(Find(n, ServingSeries::kKvCacheUsageRatio, "0")->value, 0.25);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheHitsTotal, "0")->value, 9.0);
  EXPECT_EQ(Find(n, ServingSeries::kPrefillSecondsTotal, "1")->value, 1.5);
  EXPECT_EQ(Find(n, ServingSeries::kDecodeSecondsTotal, "1")->value, 12.0);
  EXPECT_EQ(Find(n, ServingSeries::kTtftSecondsTotal, "1")->value, 3.25);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsSwapped)->value, 2.0);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning), nullptr);  // NaN dropped
  EXPECT_EQ(Find(n, ServingSeries::kKvCacheBlocks)->value, 27092.0);
}

TEST(ServingNormalise, SglangRealSamples) {
  auto n = Normalise(Engine::kSglang, MustParse(ReadShared("sglang-pr4444-metrics.txt")));
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning)->value, 0.0);
  EXPECT_EQ(Find(n, ServingSeries::kKvCacheUsageRatio)->model, "/shared/public/models/Meta-Llama-3-8B-Instruct");

  n = Normalise(Engine::kSglang, MustParse(ReadShared("sglang-pr7944-deepseek-r1-metrics.txt")));
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheHitsTotal)->value, 2688.0);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheHitsTotal)->model, "/home/moyun.zty/models/deepseek-ai__DeepSeek-R1");
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning)->value, 0.0);
}

TEST(ServingNormalise, SglangPercentHitRateAndOldNameLabel) {
  const auto n = Normalise(Engine::kSglang, MustParse(
      "sglang:cache_hit_rate{name=\"llama\"} 87.5\n"
      "sglang:num_queue_reqs{name=\"llama\"} 4\n"
      "sglang:prompt_tokens_total{name=\"llama\"} 100\n"
      "sglang:max_running_requests{name=\"llama\"} 48\n"));
  EXPECT_DOUBLE_EQ(Find(n, ServingSeries::kPrefixCacheHitRatio)->value, 0.875);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsWaiting)->model, "llama");
  EXPECT_EQ(Find(n, ServingSeries::kPromptTokensTotal)->value, 100.0);
  EXPECT_EQ(Find(n, ServingSeries::kPrefixCacheQueriesTotal)->value, 100.0);
  EXPECT_EQ(Find(n, ServingSeries::kMaxNumSeqs)->value, 48.0);
}

TEST(ServingNormalise, TgiRealSampleAndMethodLabel) {
  auto n = Normalise(Engine::kTgi, MustParse(ReadShared("tgi-metrics-tgis-compat-ibm-vllm-pr18.txt")));
  ASSERT_EQ(n.size(), 2u);  // buckets only: the excerpt is cut before _sum
  EXPECT_EQ(Find(n, ServingSeries::kRequestsWaiting)->value, 0.0);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsRunning)->value, 0.0);

  n = Normalise(Engine::kTgi, MustParse(
      "tgi_batch_inference_duration_sum{method=\"{'method': 'prefill'}\"} 4.5\n"
      "tgi_batch_inference_duration_sum{method=\"decode\"} 30\n"
      "tgi_request_input_length_sum 1200\n"
      "tgi_request_generated_tokens_sum 800\n"
      "tgi_queue_size 3\n"));
  EXPECT_EQ(Find(n, ServingSeries::kPrefillSecondsTotal)->value, 4.5);
  EXPECT_EQ(Find(n, ServingSeries::kDecodeSecondsTotal)->value, 30.0);
  EXPECT_EQ(Find(n, ServingSeries::kPromptTokensTotal)->value, 1200.0);
  EXPECT_EQ(Find(n, ServingSeries::kGenerationTokensTotal)->value, 800.0);
  EXPECT_EQ(Find(n, ServingSeries::kRequestsWaiting)->value, 3.0);
}

TEST(ServingNormalise, LabelsDroppedHereAreSummed) {
  const auto n = Normalise(Engine::kVllm, MustParse(
      "vllm:num_requests_running{model_name=\"m\",lora=\"a\"} 2\n"
      "vllm:num_requests_running{model_name=\"m\",lora=\"b\"} 3\n"));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].value, 5.0);
}

TEST(ServingNormalise, EveryDescIsValid) {
  for (size_t i = 0; i < kServingSeriesCount; i++) {
    const MetricDesc& d = ServingSeriesDesc(static_cast<ServingSeries>(i));
    EXPECT_TRUE(ValidateMetricDesc(d).has_value()) << d.name;
  }
}

}  // namespace
}  // namespace ithbat::collect::serving
