#include "collect/serving/normalise.h"

#include <charconv>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

namespace ithbat::collect::serving {
namespace {

const std::vector<std::string> kLabels = {"engine", "engine_index", "model", "port", "pid"};

std::array<MetricDesc, kServingSeriesCount> MakeDescs() {
  auto d = [](std::string name, std::string help, std::string unit, MetricType type) {
    return MetricDesc{std::move(name), std::move(help), std::move(unit), type, kLabels};
  };
  using T = MetricType;
  return {
      d("ithbat_serving_requests_running", "Requests the inference server is running in its batch now", "", T::kGauge),
      d("ithbat_serving_requests_waiting", "Requests queued by the inference server, not yet scheduled", "", T::kGauge),
      d("ithbat_serving_requests_swapped", "Requests whose KV cache the inference server swapped to CPU memory (vLLM v0)",
        "", T::kGauge),
      d("ithbat_serving_kv_cache_usage_ratio", "Share of the GPU KV cache (or token pool) in use", "ratio", T::kGauge),
      d("ithbat_serving_prefix_cache_hit_ratio",
        "Share of prefix-cache lookups that hit, from the engine's gauge or from the hit and query counters since the "
        "previous scrape",
        "ratio", T::kGauge),
      d("ithbat_serving_prefix_cache_queries_total", "Prefix-cache lookups (tokens or blocks, as the engine counts them)",
        "", T::kCounter),
      d("ithbat_serving_prefix_cache_hits_total", "Prefix-cache lookups that hit (same unit as the queries)", "",
        T::kCounter),
      d("ithbat_serving_prompt_tokens_total", "Prompt (prefill) tokens processed", "", T::kCounter),
      d("ithbat_serving_generation_tokens_total", "Tokens generated (decode)", "", T::kCounter),
      d("ithbat_serving_prefill_seconds_total",
        "Time spent in prefill: per request for vLLM, per batch forward pass for TGI", "seconds", T::kCounter),
      d("ithbat_serving_decode_seconds_total",
        "Time spent in decode: per request for vLLM, per batch forward pass for TGI", "seconds", T::kCounter),
      d("ithbat_serving_time_to_first_token_seconds_total",
        "Sum of the time to first token of the requests counted in ithbat_serving_time_to_first_token_requests_total",
        "seconds", T::kCounter),
      d("ithbat_serving_time_to_first_token_requests_total", "Requests whose time to first token was measured", "",
        T::kCounter),
      d("ithbat_serving_max_num_seqs", "Most requests the server runs in one batch (its slot count)", "", T::kGauge),
      d("ithbat_serving_kv_cache_blocks", "KV-cache blocks the engine allocated on the GPU", "", T::kGauge),
  };
}

enum class Combine : uint8_t { kSum, kMax };

Combine CombineOf(ServingSeries s) {
  switch (s) {
    case ServingSeries::kKvCacheUsageRatio:
    case ServingSeries::kPrefixCacheHitRatio:
    case ServingSeries::kMaxNumSeqs:
    case ServingSeries::kKvCacheBlocks:
      return Combine::kMax;
    default:
      return Combine::kSum;
  }
}

struct Rule {
  std::string_view name;
  ServingSeries series;
  int priority;  // a newer name beats a deprecated one for the same key
};

using S = ServingSeries;
constexpr Rule kVllmRules[] = {
    {"vllm:num_requests_running", S::kRequestsRunning, 1},
    {"vllm:num_requests_waiting", S::kRequestsWaiting, 1},
    {"vllm:num_requests_swapped", S::kRequestsSwapped, 1},
    {"vllm:kv_cache_usage_perc", S::kKvCacheUsageRatio, 2},
    {"vllm:gpu_cache_usage_perc", S::kKvCacheUsageRatio, 1},
    {"vllm:gpu_prefix_cache_hit_rate", S::kPrefixCacheHitRatio, 1},
    {"vllm:prefix_cache_queries_total", S::kPrefixCacheQueriesTotal, 2},
    {"vllm:gpu_prefix_cache_queries_total", S::kPrefixCacheQueriesTotal, 1},
    {"vllm:prefix_cache_hits_total", S::kPrefixCacheHitsTotal, 2},
    {"vllm:gpu_prefix_cache_hits_total", S::kPrefixCacheHitsTotal, 1},
    {"vllm:prompt_tokens_total", S::kPromptTokensTotal, 1},
    {"vllm:generation_tokens_total", S::kGenerationTokensTotal, 1},
    {"vllm:request_prefill_time_seconds_sum", S::kPrefillSecondsTotal, 1},
    {"vllm:request_decode_time_seconds_sum", S::kDecodeSecondsTotal, 1},
    {"vllm:time_to_first_token_seconds_sum", S::kTtftSecondsTotal, 1},
    {"vllm:time_to_first_token_seconds_count", S::kTtftRequestsTotal, 1},
};
constexpr Rule kSglangRules[] = {
    {"sglang:num_running_reqs", S::kRequestsRunning, 1},
    {"sglang:num_queue_reqs", S::kRequestsWaiting, 1},
    {"sglang:token_usage", S::kKvCacheUsageRatio, 1},
    {"sglang:cache_hit_rate", S::kPrefixCacheHitRatio, 1},
    {"sglang:prompt_tokens_total", S::kPromptTokensTotal, 1},
    {"sglang:prompt_tokens_total", S::kPrefixCacheQueriesTotal, 1},
    {"sglang:cached_tokens_total", S::kPrefixCacheHitsTotal, 1},
    {"sglang:generation_tokens_total", S::kGenerationTokensTotal, 1},
    {"sglang:time_to_first_token_seconds_sum", S::kTtftSecondsTotal, 1},
    {"sglang:time_to_first_token_seconds_count", S::kTtftRequestsTotal, 1},
    {"sglang:max_running_requests", S::kMaxNumSeqs, 1},
};
constexpr Rule kTgiRules[] = {
    {"tgi_batch_current_size", S::kRequestsRunning, 1},
    {"tgi_queue_size", S::kRequestsWaiting, 1},
    {"tgi_request_input_length_sum", S::kPromptTokensTotal, 1},
    {"tgi_request_generated_tokens_sum", S::kGenerationTokensTotal, 1},
};

struct Acc {
  int priority = 0;
  double value = 0;
};
using Key = std::tuple<ServingSeries, std::string, std::string>;

void Add(std::map<Key, Acc>* acc, ServingSeries series, int priority, std::string engine_index, std::string model,
         double value) {
  if (!std::isfinite(value)) return;
  Acc& a = (*acc)[Key{series, std::move(engine_index), std::move(model)}];
  if (priority < a.priority) return;
  if (priority > a.priority) {
    a = Acc{priority, value};
    return;
  }
  a.value = CombineOf(series) == Combine::kSum ? a.value + value : std::max(a.value, value);
}

std::string ModelOf(const ExpoSample& s) {
  if (auto m = s.Label("model_name")) return std::string(*m);
  if (auto m = s.Label("name")) return std::string(*m);  // SGLang before 2025-03
  return {};
}

}  // namespace

const MetricDesc& ServingSeriesDesc(ServingSeries series) {
  static const std::array<MetricDesc, kServingSeriesCount> descs = MakeDescs();
  return descs[static_cast<size_t>(series)];
}

std::vector<NormalSample> Normalise(Engine engine, const Exposition& expo) {
  std::map<Key, Acc> acc;
  for (const ExpoSample& s : expo.samples) {
    std::string engine_index(s.Label("engine").value_or(""));
    switch (engine) {
      case Engine::kVllm:
        for (const Rule& r : kVllmRules) {
          if (s.name == r.name) Add(&acc, r.series, r.priority, engine_index, ModelOf(s), s.value);
        }
        if (s.name == "vllm:cache_config_info") {
          const std::string_view blocks = s.Label("num_gpu_blocks").value_or("");
          double v = 0;
          auto [end, ec] = std::from_chars(blocks.data(), blocks.data() + blocks.size(), v);
          if (!blocks.empty() && ec == std::errc() && end == blocks.data() + blocks.size()) {
            Add(&acc, S::kKvCacheBlocks, 1, engine_index, ModelOf(s), v);
          }
        }
        break;
      case Engine::kSglang:
        for (const Rule& r : kSglangRules) {
          if (s.name != r.name) continue;
          double v = s.value;
          if (r.series == S::kPrefixCacheHitRatio && v > 1.0) v /= 100.0;  // early SGLang: a percent
          Add(&acc, r.series, r.priority, "", ModelOf(s), v);
        }
        break;
      case Engine::kTgi:
        for (const Rule& r : kTgiRules) {
          if (s.name == r.name) Add(&acc, r.series, r.priority, "", "", s.value);
        }
        if (s.name == "tgi_batch_inference_duration_sum") {
          const std::string_view method = s.Label("method").value_or("");
          if (method.find("prefill") != std::string_view::npos) {
            Add(&acc, S::kPrefillSecondsTotal, 1, "", "", s.value);
          } else if (method.find("decode") != std::string_view::npos) {
            Add(&acc, S::kDecodeSecondsTotal, 1, "", "", s.value);
          }
        }
        break;
    }
  }
  std::vector<NormalSample> out;
  out.reserve(acc.size());
  for (auto& [key, a] : acc) {
    out.push_back(NormalSample{std::get<0>(key), std::get<1>(key), std::get<2>(key), a.value});
  }
  return out;
}

std::optional<Engine> EngineOfExposition(const Exposition& expo) {
  auto of = [](std::string_view name) -> std::optional<Engine> {
    if (name.starts_with("vllm:")) return Engine::kVllm;
    if (name.starts_with("sglang:")) return Engine::kSglang;
    if (name.starts_with("tgi_")) return Engine::kTgi;
    return std::nullopt;
  };
  for (const ExpoSample& s : expo.samples) {
    if (auto e = of(s.name)) return e;
  }
  for (const auto& [family, type] : expo.types) {  // a capture of HELP/TYPE lines only
    if (auto e = of(family)) return e;
  }
  return std::nullopt;
}

}  // namespace ithbat::collect::serving
