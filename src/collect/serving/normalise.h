#pragma once
// From each engine's own metric names to one set of ithbat series, so that a diagnosis can
// ask "how full is the KV cache" without knowing whether vLLM v0, vLLM v1, SGLang or TGI is
// serving. Pure: an Exposition in, samples out; the collector adds the server's identity
// labels (engine, port, pid) and registers the series.
//
// Mapping (sample name → series), decided from real /metrics captures (shared/data/serving):
//   requests_running      vllm:num_requests_running, sglang:num_running_reqs, tgi_batch_current_size
//   requests_waiting      vllm:num_requests_waiting, sglang:num_queue_reqs, tgi_queue_size
//   requests_swapped      vllm:num_requests_swapped (v0 only)
//   kv_cache_usage_ratio  vllm:kv_cache_usage_perc (v1) over vllm:gpu_cache_usage_perc (v0),
//                         sglang:token_usage — all already fractions 0..1 despite "perc"
//   prefix_cache_hit_ratio  the engine's own gauge: vllm:gpu_prefix_cache_hit_rate (v0),
//                         sglang:cache_hit_rate (early SGLang wrote a percent: a value > 1 is
//                         divided by 100). Without one the collector derives it from the
//                         counters below (Δhits / Δqueries).
//   prefix_cache_queries_total / _hits_total  vllm:prefix_cache_{queries,hits}_total (v1) over
//                         the deprecated vllm:gpu_prefix_cache_{queries,hits}_total; SGLang:
//                         prompt_tokens_total as queries, cached_tokens_total as hits (tokens)
//   prompt_tokens_total   vllm:/sglang:prompt_tokens_total, tgi_request_input_length_sum
//   generation_tokens_total  vllm:/sglang:generation_tokens_total, tgi_request_generated_tokens_sum
//   prefill_seconds_total / decode_seconds_total  vllm:request_{prefill,decode}_time_seconds_sum
//                         (per request), tgi_batch_inference_duration_sum by method (per
//                         forward pass of a batch; the method label may be "prefill" or the
//                         leaked dict text "{'method': 'prefill'}" — matched by substring)
//   time_to_first_token_seconds_total / _requests_total  the TTFT histogram's _sum and _count
//                         (vLLM, SGLang; TGI has no TTFT metric). Named _total, not _sum/_count,
//                         because ithbat counters must end in _total.
//   max_num_seqs          sglang:max_running_requests (the collector also sets it from flags)
//   kv_cache_blocks       vllm:cache_config_info's num_gpu_blocks label
// Labels kept: engine_index (vLLM's `engine` label, the data-parallel engine) and model
// (model_name, or SGLang's older `name`). Samples of one series that differ only in labels
// dropped here are added up (counts) or the largest kept (ratios). Non-finite values are
// dropped: one NaN would poison every rate computed from the series.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collect/serving/discovery.h"
#include "collect/serving/exposition.h"
#include "core/metric.h"

namespace ithbat::collect::serving {

enum class ServingSeries : uint8_t {
  kRequestsRunning,
  kRequestsWaiting,
  kRequestsSwapped,
  kKvCacheUsageRatio,
  kPrefixCacheHitRatio,
  kPrefixCacheQueriesTotal,
  kPrefixCacheHitsTotal,
  kPromptTokensTotal,
  kGenerationTokensTotal,
  kPrefillSecondsTotal,
  kDecodeSecondsTotal,
  kTtftSecondsTotal,
  kTtftRequestsTotal,
  kMaxNumSeqs,
  kKvCacheBlocks,
  kCount,
};
inline constexpr size_t kServingSeriesCount = static_cast<size_t>(ServingSeries::kCount);

// The desc of each normalised series (labels: engine, engine_index, model, port, pid).
const MetricDesc& ServingSeriesDesc(ServingSeries series);

struct NormalSample {
  ServingSeries series = ServingSeries::kRequestsRunning;
  std::string engine_index;  // "" when the engine has no such label
  std::string model;         // "" when unknown
  double value = 0;
};

// Ordered by (series, engine_index, model); at most one sample per such key.
std::vector<NormalSample> Normalise(Engine engine, const Exposition& expo);

// The engine whose metric names the exposition holds ("vllm:", "sglang:", "tgi_"): for a body
// with no command line beside it (a saved scrape). The first engine named wins; nullopt when
// none is (a DCGM exporter's, a node exporter's).
std::optional<Engine> EngineOfExposition(const Exposition& expo);

}  // namespace ithbat::collect::serving
