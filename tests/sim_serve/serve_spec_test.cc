// ServeSpec JSON (sim/workload/serve_spec.h) and the vLLM command line the server accepts
// (serve_args.h), checked against the agent's own discovery of vLLM servers.
#include "workload/serve_spec.h"

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "collect/serving/discovery.h"
#include "workload/serve_args.h"

namespace ithbat::sim::workload {
namespace {

TEST(ServeSpec, DefaultsRoundTrip) {
  const ServeSpec d;
  auto back = ParseServeSpec(ServeSpecToJson(d));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(*back == d);
  auto empty = ParseServeSpec("{}");
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_TRUE(*empty == d);
}

TEST(ServeSpec, EveryFieldRoundTrips) {
  ServeSpec s;
  s.id = "chat-ar";
  s.model = "Qwen/Qwen2.5-32B-Instruct";
  s.served_model_name = "chat";
  s.port = 8123;
  s.gpus = 8;
  s.tensor_parallel = 2;
  s.engine = scenario::Engine::kNaive;
  s.slots = 48;
  s.chunked_prefill = false;
  s.prefix_caching = false;
  s.kv_capacity_tokens = 150000;
  s.block_size = 32;
  s.max_model_len = 16384;
  s.max_num_batched_tokens = 4096;
  s.arrival_rate_rps = 3.25;
  s.prompt_tokens.dist = scenario::Dist::kLognormal;
  s.prompt_tokens.median = 2500;
  s.prompt_tokens.sigma = 0.7;
  s.prompt_tokens.min = 200;
  s.prompt_tokens.max = 16000;
  s.output_tokens.dist = scenario::Dist::kChoice;
  s.output_tokens.choices = {64, 256, 1024};
  s.output_tokens.weights = {1, 2, 1};
  s.shared_prefix_share = 0.4;
  s.model_bytes = uint64_t{30} << 30;
  s.kv_bytes_per_token = 65536;
  s.costs = DefaultServeCosts(30, 2, 65536, scenario::Engine::kNaive);
  s.metrics = scenario::MetricsStyle::kVllmV0;
  s.seed = 0xFFFFFFFFFFFFFFFFULL;
  s.stats_every_s = 2.5;
  s.duration_s = 60;
  auto back = ParseServeSpec(ServeSpecToJson(s));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(*back == s) << ServeSpecToJson(*back);
  EXPECT_EQ(back->prompt_tokens.dist, scenario::Dist::kLognormal);
  EXPECT_EQ(back->output_tokens.weights.size(), 3u);
  EXPECT_EQ(back->seed, s.seed);
}

TEST(ServeSpec, TokenCountsMayBePlainNumbers) {
  auto s = ParseServeSpec(R"({"prompt_tokens": 512, "output_tokens": 64})");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(s->prompt_tokens.IsFixed());
  EXPECT_EQ(s->prompt_tokens.value, 512);
  EXPECT_EQ(s->output_tokens.value, 64);
}

TEST(ServeSpec, ErrorsNameTheField) {
  struct Case {
    const char* json;
    ErrorCode code;
    const char* needle;
  };
  const Case cases[] = {
      {"{not json", ErrorCode::kParse, "JSON"},
      {"[]", ErrorCode::kInvalidArgument, "not an object"},
      {R"({"slot": 4})", ErrorCode::kInvalidArgument, "slot: unknown key"},
      {R"({"engine": "batchy"})", ErrorCode::kInvalidArgument, "engine: unknown value 'batchy'"},
      {R"({"metrics": "vllm_v2"})", ErrorCode::kInvalidArgument, "metrics"},
      {R"({"gpus": 3, "tensor_parallel": 2})", ErrorCode::kInvalidArgument, "multiple of tensor_parallel"},
      {R"({"arrival_rate_rps": -1})", ErrorCode::kInvalidArgument, "arrival_rate_rps"},
      {R"({"port": 70000})", ErrorCode::kInvalidArgument, "port"},
      {R"({"slots": 2.5})", ErrorCode::kInvalidArgument, "slots: not an integer"},
      {R"({"prefix_caching": 1})", ErrorCode::kInvalidArgument, "prefix_caching: not a boolean"},
      {R"({"shared_prefix_share": 1.5})", ErrorCode::kInvalidArgument, "shared_prefix_share"},
      {R"({"prompt_tokens": {"dist": "uniform", "min": 10, "max": 5}})", ErrorCode::kInvalidArgument,
       "prompt_tokens"},
      {R"({"output_tokens": {"dist": "choice"}})", ErrorCode::kInvalidArgument, "output_tokens.values"},
      {R"({"prompt_tokens": 0})", ErrorCode::kInvalidArgument, "prompt_tokens"},
      {R"({"costs": {"step_ms": 5}})", ErrorCode::kInvalidArgument, "costs.step_ms: unknown key"},
      {R"({"kv_capacity_tokens": 8, "block_size": 16})", ErrorCode::kInvalidArgument, "block"},
      {R"({"model": "a\u0001b"})", ErrorCode::kInvalidArgument, "control character"},
  };
  for (const Case& c : cases) {
    auto s = ParseServeSpec(c.json);
    ASSERT_FALSE(s) << c.json;
    EXPECT_EQ(s.error().code, c.code) << c.json;
    EXPECT_NE(s.error().message.find(c.needle), std::string::npos) << c.json << " -> " << s.error().message;
  }
  EXPECT_FALSE(ParseServeSpec(std::string(kMaxServeSpecBytes + 1, ' ')));
  EXPECT_EQ(ReadServeSpecFile("/nonexistent/spec.json").error().code, ErrorCode::kNotFound);
}

TEST(ServeSpec, CompressTimeDividesDurationsAndMultipliesRates) {
  ServeSpec s;
  s.duration_s = 600;
  const ServeSpec c = CompressServeTime(s, 10);
  EXPECT_EQ(c.costs.step_ns, s.costs.step_ns / 10);
  EXPECT_EQ(c.costs.prefill_ns_per_token, s.costs.prefill_ns_per_token / 10);
  EXPECT_EQ(c.costs.host_ns_per_step, s.costs.host_ns_per_step / 10);
  EXPECT_DOUBLE_EQ(c.costs.attn_ns_per_kv_token, s.costs.attn_ns_per_kv_token / 10);
  EXPECT_DOUBLE_EQ(c.arrival_rate_rps, s.arrival_rate_rps * 10);
  EXPECT_DOUBLE_EQ(c.duration_s, 60);
}

TEST(ServeSpec, DefaultCostsFollowModelSizeAndParallelism) {
  const ServeCosts d;
  const ServeCosts c = DefaultServeCosts(16, 1, 131072, scenario::Engine::kContinuous);
  // The struct's defaults are this formula for a 16 GiB model on one GPU.
  EXPECT_NEAR(static_cast<double>(c.step_ns), static_cast<double>(d.step_ns), d.step_ns * 0.05);
  EXPECT_NEAR(static_cast<double>(c.prefill_ns_per_token), static_cast<double>(d.prefill_ns_per_token),
              d.prefill_ns_per_token * 0.05);
  EXPECT_NEAR(c.attn_ns_per_kv_token, d.attn_ns_per_kv_token, 1.0);
  const ServeCosts big = DefaultServeCosts(32, 1, 131072, scenario::Engine::kContinuous);
  EXPECT_GT(big.step_ns, c.step_ns);
  EXPECT_GT(big.prefill_ns_per_token, c.prefill_ns_per_token);
  const ServeCosts tp2 = DefaultServeCosts(32, 2, 131072, scenario::Engine::kContinuous);
  EXPECT_LT(tp2.step_ns, big.step_ns);
  EXPECT_LT(tp2.prefill_ns_per_token, big.prefill_ns_per_token);
  EXPECT_GT(DefaultServeCosts(16, 1, 131072, scenario::Engine::kNaive).host_ns_per_step, c.host_ns_per_step);
}

TEST(ServeSpec, FromAScenarioEntry) {
  scenario::InferenceT<scenario::Plain> in;
  in.id = "chat-ar";
  in.gpus = 8;
  in.tensor_parallel = 2;
  in.engine = scenario::Engine::kNaive;
  in.slots = 32;
  in.chunked_prefill = false;
  in.prefix_caching = false;
  in.kv_capacity_tokens = 150000;
  in.arrival_rate_rps = 3;
  in.prompt_tokens.dist = scenario::Dist::kLognormal;
  in.prompt_tokens.median = 2500;
  in.prompt_tokens.sigma = 0.7;
  in.prompt_tokens.min = 200;
  in.prompt_tokens.max = 16000;
  in.shared_prefix_share = 0.4;
  in.model_gib = 30;
  in.metrics = scenario::MetricsStyle::kVllmV0;
  in.port = 8001;
  const ServeSpec s = ServeSpecFromScenario(in, 99, 4);
  EXPECT_EQ(s.id, "chat-ar");
  EXPECT_EQ(Replicas(s), 4);
  EXPECT_EQ(s.engine, scenario::Engine::kNaive);
  EXPECT_EQ(s.model_bytes, uint64_t{30} << 30);
  EXPECT_DOUBLE_EQ(s.arrival_rate_rps, 12);
  EXPECT_EQ(s.prompt_tokens.dist, scenario::Dist::kLognormal);
  EXPECT_EQ(s.seed, 99u);
  EXPECT_EQ(s.port, 8001);
  const ServeCosts full = DefaultServeCosts(30, 2, s.kv_bytes_per_token, scenario::Engine::kNaive);
  EXPECT_EQ(s.costs.step_ns, full.step_ns / 4);
  EXPECT_EQ(s.costs.host_ns_per_step, full.host_ns_per_step / 4);
  auto back = ParseServeSpec(ServeSpecToJson(s));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(*back == s);
}

// ---- the command line ----

std::string Cmdline(const std::vector<std::string_view>& argv) {
  std::string s;
  for (std::string_view a : argv) {
    s.append(a);
    s.push_back('\0');
  }
  return s;
}

TEST(ServeArgs, VllmServeFormIsObeyedAndDiscovered) {
  const std::vector<std::string_view> argv = {"/opt/sim/bin/vllm",
                                              "serve",
                                              "meta-llama/Llama-3.1-8B-Instruct",
                                              "--port",
                                              "8123",
                                              "--max-num-seqs",
                                              "48",
                                              "--tensor-parallel-size",
                                              "2",
                                              "--max_model_len=16384",
                                              "--no-enable-prefix-caching",
                                              "--enable-chunked-prefill",
                                              "--gpu-memory-utilization",
                                              "0.9",
                                              "--disable-log-requests",
                                              "--served-model-name",
                                              "chat",
                                              "chat-alias",
                                              "--max-num-batched-tokens",
                                              "4096"};
  auto a = ParseServeArgs(argv);
  ASSERT_TRUE(a) << a.error().message;
  ServeSpec s;
  s.gpus = 4;
  ASSERT_TRUE(ApplyServeArgs(*a, &s));
  EXPECT_EQ(s.model, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(s.served_model_name, "chat");
  EXPECT_EQ(s.port, 8123);
  EXPECT_EQ(s.slots, 48);
  EXPECT_EQ(s.tensor_parallel, 2);
  EXPECT_EQ(Replicas(s), 2);
  EXPECT_EQ(s.max_model_len, 16384);
  EXPECT_EQ(s.max_num_batched_tokens, 4096);
  EXPECT_FALSE(s.prefix_caching);
  EXPECT_TRUE(s.chunked_prefill);

  // The agent reads the same command line the same way.
  auto info = collect::serving::ParseServerCmdline(Cmdline(argv));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->engine, collect::serving::Engine::kVllm);
  EXPECT_EQ(info->port, 8123);
  EXPECT_EQ(info->model, s.model);
  EXPECT_EQ(info->max_num_seqs, s.slots);
  EXPECT_EQ(info->tensor_parallel_size, s.tensor_parallel);
  EXPECT_EQ(info->max_model_len, s.max_model_len);
  EXPECT_EQ(info->max_num_batched_tokens, s.max_num_batched_tokens);
  EXPECT_EQ(info->prefix_caching, false);
  EXPECT_EQ(info->chunked_prefill, true);
}

TEST(ServeArgs, PythonModuleFormAndSpecFlag) {
  const std::vector<std::string_view> argv = {"python3",
                                              "-m",
                                              "vllm.entrypoints.openai.api_server",
                                              "--model",
                                              "Qwen/Qwen2.5-7B",
                                              "--port=9001",
                                              "-tp",
                                              "1",
                                              "--spec",
                                              "/tmp/s.json"};
  auto a = ParseServeArgs(argv);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->spec_path, "/tmp/s.json");
  ServeSpec s;
  ASSERT_TRUE(ApplyServeArgs(*a, &s));
  EXPECT_EQ(s.model, "Qwen/Qwen2.5-7B");
  EXPECT_EQ(s.port, 9001);
  auto info = collect::serving::ParseServerCmdline(Cmdline(argv));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->port, 9001);
  EXPECT_EQ(info->model, "Qwen/Qwen2.5-7B");
}

TEST(ServeArgs, DataParallelSetsTheGpuCount) {
  const std::vector<std::string_view> argv = {
      "vllm", "serve", "m", "--tensor-parallel-size", "2", "--data-parallel-size", "3"};
  auto a = ParseServeArgs(argv);
  ASSERT_TRUE(a);
  ServeSpec s;
  ASSERT_TRUE(ApplyServeArgs(*a, &s));
  EXPECT_EQ(s.gpus, 6);
  EXPECT_EQ(Replicas(s), 3);
}

TEST(ServeArgs, RefusesWhatVllmWouldRefuse) {
  for (const std::vector<std::string_view>& argv :
       std::vector<std::vector<std::string_view>>{{"vllm", "serve", "m", "--port", "eighty"},
                                                  {"vllm", "serve", "m", "--max-num-seqs"},
                                                  {"vllm", "serve", "m", "--enable-prefix-caching=maybe"}}) {
    EXPECT_FALSE(ParseServeArgs(argv)) << argv.back();
  }
  ServeSpec s;
  s.gpus = 3;
  auto a = ParseServeArgs(std::vector<std::string_view>{"vllm", "serve", "m", "--tensor-parallel-size", "2"});
  ASSERT_TRUE(a);
  EXPECT_FALSE(ApplyServeArgs(*a, &s));
  auto b = ParseServeArgs(std::vector<std::string_view>{"vllm", "serve", "m", "--port", "0"});
  ASSERT_TRUE(b);
  ServeSpec t;
  EXPECT_FALSE(ApplyServeArgs(*b, &t));
}

}  // namespace
}  // namespace ithbat::sim::workload
