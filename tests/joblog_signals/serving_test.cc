// vLLM and SGLang periodic stats lines over real output (../shared/data/serving) and edges.
// Expected events were written from reading the files.
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

std::vector<std::string> SharedLines(const std::string& rel) { return testing::SharedDataLines(rel); }

std::optional<std::string> Attr(const ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// The events of each line, by line.
std::vector<std::vector<ParsedEvent>> PerLine(FormatParser& p, const std::vector<std::string>& lines) {
  std::vector<std::vector<ParsedEvent>> out;
  for (const auto& l : lines) {
    std::vector<ParsedEvent> ev;
    p.Parse(LineView{l}, ev);
    if (!ev.empty()) out.push_back(std::move(ev));
  }
  return out;
}

std::map<std::string, double> Values(const std::vector<ParsedEvent>& events) {
  std::map<std::string, double> m;
  for (const auto& e : events) {
    EXPECT_EQ(e.kind, EventKind::kServingMetric);
    m[e.name] = e.value;
  }
  return m;
}

void ExpectValues(const std::vector<ParsedEvent>& events, const std::map<std::string, double>& expected) {
  auto got = Values(events);
  EXPECT_EQ(got.size(), expected.size());
  for (const auto& [name, v] : expected) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_NEAR(got[name], v, 1e-9) << name;
  }
}

TEST(ServingTest, Registered) {
  for (std::string_view n : {"vllm", "sglang"}) {
    const ParserInfo* info = FindParser(n);
    ASSERT_NE(info, nullptr) << n;
    EXPECT_EQ(info->role, ParserRole::kAlwaysOn);
    EXPECT_EQ(info->make()->name(), n);
  }
}

TEST(ServingTest, VllmV0Formats) {
  auto p = MakeVllmParser();
  auto lines = PerLine(*p, SharedLines("serving/vllm-v0-engine-log-formats-swapped-pending.txt"));
  ASSERT_EQ(lines.size(), 6u);  // 3 stats lines, 2 prefix-cache lines, 1 early V1 line; uvicorn lines none
  ExpectValues(lines[0], {{"prompt_tokens_per_second", 5902.0},
                          {"generation_tokens_per_second", 230.6},
                          {"running_requests", 16},
                          {"swapped_requests", 0},
                          {"waiting_requests", 11},
                          {"kv_cache_usage_ratio", 0.871},
                          {"cpu_kv_cache_usage_ratio", 0.0}});
  for (const auto& e : lines[0]) EXPECT_EQ(Attr(e, "engine"), "vllm_v0");
  ExpectValues(lines[1], {{"prefix_cache_hit_ratio", 0.2668}, {"cpu_prefix_cache_hit_ratio", 0.0}});
  ExpectValues(lines[2], {{"prompt_tokens_per_second", 6501.4},
                          {"generation_tokens_per_second", 69.1},
                          {"running_requests", 4},
                          {"swapped_requests", 0},
                          {"waiting_requests", 0},
                          {"kv_cache_usage_ratio", 0.156},
                          {"cpu_kv_cache_usage_ratio", 0.0}});
  ExpectValues(lines[3], {{"prompt_tokens_per_second", 0.0},
                          {"generation_tokens_per_second", 15.5},
                          {"running_requests", 1},
                          {"swapped_requests", 0},
                          {"waiting_requests", 0},
                          {"kv_cache_usage_ratio", 0.0},
                          {"cpu_kv_cache_usage_ratio", 0.001}});
  ExpectValues(lines[4], {{"prefix_cache_hit_ratio", 0.0}, {"cpu_prefix_cache_hit_ratio", 0.9}});
  ExpectValues(lines[5], {{"prompt_tokens_per_second", 1254.4},
                          {"generation_tokens_per_second", 29.2},
                          {"running_requests", 10},
                          {"waiting_requests", 4},
                          {"kv_cache_usage_ratio", 0.579},
                          {"prefix_cache_hit_ratio", 0.405}});
  for (const auto& e : lines[5]) {
    EXPECT_EQ(Attr(e, "engine"), "vllm_v1");
    EXPECT_EQ(Attr(e, "engine_index"), "0");
  }
}

TEST(ServingTest, VllmV1Formats) {
  auto p = MakeVllmParser();
  auto lines = PerLine(*p, SharedLines("serving/vllm-v1-engine-log-lmcache-specdecode.txt"));
  ASSERT_EQ(lines.size(), 8u);  // 1 + 5 + 2 stats lines; the SpecDecoding line is none
  ExpectValues(lines[0], {{"prompt_tokens_per_second", 236.8},
                          {"generation_tokens_per_second", 51.4},
                          {"running_requests", 1},
                          {"waiting_requests", 0},
                          {"kv_cache_usage_ratio", 0.273},
                          {"prefix_cache_hit_ratio", 0.911},
                          {"external_prefix_cache_hit_ratio", 0.012}});
  // The runaway request: KV use creeping up 0.0 → 0.1 → 0.3 → 0.4 → 0.6 %.
  const double kv[] = {0.0, 0.001, 0.003, 0.004, 0.006};
  for (int i = 0; i < 5; ++i) {
    auto v = Values(lines[1 + i]);
    EXPECT_NEAR(v["kv_cache_usage_ratio"], kv[i], 1e-12);
    EXPECT_EQ(v["running_requests"], i == 0 ? 0 : 1);
    EXPECT_EQ(v.size(), 6u);
  }
  // Docker RFC 3339 prefix.
  ExpectValues(lines[7], {{"prompt_tokens_per_second", 0.0},
                          {"generation_tokens_per_second", 7.2},
                          {"running_requests", 9},
                          {"waiting_requests", 1},
                          {"kv_cache_usage_ratio", 0.688},
                          {"prefix_cache_hit_ratio", 0.0}});
  for (const auto& e : lines[7]) EXPECT_EQ(Attr(e, "engine"), "vllm_v1");
}

TEST(ServingTest, VllmGarbageAndLookAlikes) {
  auto p = MakeVllmParser();
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"Avg prompt throughput: abc tokens/s, Running: many reqs, GPU KV cache usage: high%"}, out));
  EXPECT_TRUE(out.empty());
  // A cut line: the usage without its '%' is not read as a ratio.
  EXPECT_TRUE(p->Parse(LineView{"Avg prompt throughput: 1.0 tokens/s, Running: 2 reqs, GPU KV cache usage: 87"}, out));
  ExpectValues(out, {{"prompt_tokens_per_second", 1.0}, {"running_requests", 2}});
  out.clear();
  EXPECT_FALSE(p->Parse(LineView{" 14%|█▍        | 377/2724 [13:55:57<86:19:20, 132.41s/it]"}, out));
  EXPECT_FALSE(p->Parse(LineView{"We measured 95% prefix cache hit rate and great Avg prompt throughput"}, out));
  EXPECT_TRUE(out.empty());
}

TEST(ServingTest, SglangFormats) {
  auto p = MakeSglangParser();
  auto lines = PerLine(*p, SharedLines("serving/sglang-decode-batch-log-formats.txt"));
  ASSERT_EQ(lines.size(), 14u);  // 12 decode + 2 prefill lines; uvicorn access line none
  // [1] saturated server, 2024 format.
  ExpectValues(lines[0], {{"batch_size", 1010},
                          {"kv_cache_tokens", 55006},
                          {"token_usage_ratio", 0.93},
                          {"generation_tokens_per_second", 1397.13},
                          {"queued_requests", 12279}});
  for (const auto& e : lines[0]) {
    EXPECT_EQ(Attr(e, "engine"), "sglang");
    EXPECT_EQ(Attr(e, "phase"), "decode");
    EXPECT_EQ(Attr(e, "tp_rank"), std::nullopt);
  }
  // [2] "[04:40:55 TP0] Decode batch."
  EXPECT_EQ(Values(lines[1])["kv_cache_tokens"], 4078);
  EXPECT_EQ(Attr(lines[1][0], "tp_rank"), "0");
  EXPECT_NEAR(Values(lines[5])["generation_tokens_per_second"], 238.27, 1e-9);
  // [3] 2026 "Decode batch," with cuda graph.
  EXPECT_EQ(Attr(lines[6][0], "cuda_graph"), "true");
  EXPECT_NEAR(Values(lines[6])["token_usage_ratio"], 0.29, 1e-12);
  // [4] prefill with input throughput.
  ExpectValues(lines[10], {{"new_sequences", 1},
                           {"new_tokens", 158},
                           {"cached_tokens", 0},
                           {"token_usage_ratio", 0.08},
                           {"batch_size", 31},
                           {"queued_requests", 0},
                           {"prompt_tokens_per_second", 559.53}});
  for (const auto& e : lines[10]) EXPECT_EQ(Attr(e, "phase"), "prefill");
  // [5] python-logging prefix, trailing comma.
  EXPECT_EQ(Values(lines[11])["queued_requests"], 0);
  EXPECT_EQ(Values(lines[11]).size(), 5u);
  ExpectValues(lines[12], {{"new_sequences", 1},
                           {"new_tokens", 1},
                           {"cached_tokens", 7},
                           {"token_usage_ratio", 0.0},
                           {"batch_size", 0},
                           {"queued_requests", 0}});
  // [6] JAX port with #cache_miss.
  EXPECT_EQ(Values(lines[13])["cache_misses"], 1);
  EXPECT_EQ(Values(lines[13]).size(), 6u);
}

TEST(ServingTest, SglangLookAlikes) {
  auto p = MakeSglangParser();
  std::vector<ParsedEvent> out;
  for (std::string_view line : {"Decode batch. nothing here", "# Decode batch size tuning", "Prefill batch #1 done",
                                "Decode batch. #running-req: lots, #queue-req: none", "#token: 5"}) {
    EXPECT_FALSE(p->Parse(LineView{line}, out)) << line;
  }
  EXPECT_TRUE(out.empty());
}

TEST(ServingTest, ServingParsersIgnoreTrainingLogs) {
  auto v = MakeVllmParser();
  auto s = MakeSglangParser();
  for (const char* f : {"training/deepspeed-overflow-loss-scale-collapse.txt", "training/megatron-llm-issue11-iterations.txt",
                        "training/nanogpt-issue178-healthy-start-mfu-minus100.txt",
                        "nccl/pytorch-issue118369-nemo-progress-then-watchdog.txt"}) {
    EXPECT_TRUE(PerLine(*v, SharedLines(f)).empty()) << f;
    EXPECT_TRUE(PerLine(*s, SharedLines(f)).empty()) << f;
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog
