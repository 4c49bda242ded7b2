#pragma once
// ServeSpec: everything the simulated inference server (`ithbat-sim-serve`, serve_main.cc;
// SERVE.md) needs, written by the simulator's runner as jobs/<id>/spec.json for one
// `inference[]` entry of a scenario.
//
// Units: every duration is REAL (the runner already divided the scenario's times by
// time_compression: CompressServeTime below does exactly that), every rate is per REAL second,
// sizes are real bytes (device memory is only accounted by the fake libcuda, never touched, so
// it is not scaled). Token counts are tokens.
//
// Contract with the runner: fields are only ever added, never renamed; ParseServeSpec fills a
// missing key with the default written here. Unknown keys are refused (a typo must not fall
// back to a default silently). The command line the server is started with (vLLM's flags:
// --port, --max-num-seqs, --tensor-parallel-size, ...) overrides the matching fields, as the
// agent reads the command line and the program must behave as it says (serve_args.h).
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "scenario/scenario.h"

namespace ithbat::sim::workload {

// GPU and host time of one engine step (one forward pass over the scheduled batch), per replica.
// Every GPU of a tensor-parallel replica runs the step in parallel for the same time, so these
// are already divided by the tensor-parallel degree (DefaultServeCosts does it).
//
//   step GPU time = max(step_ns, prefill_ns_per_token × prompt tokens computed in the step)
//                 + decode_ns_per_seq × sequences decoded in the step
//                 + attn_ns_per_kv_token × context tokens those sequences attend to
//   then host_ns_per_step of CPU work (scheduling, sampling, Python) with the GPU idle.
//
// step_ns is reading the weights once (decode is memory-bound: weights / HBM bandwidth);
// prefill is compute-bound (2 × parameters FLOP per token at an achieved tensor throughput).
struct ServeCosts {
  int64_t step_ns = 6'600'000;            // 16 GiB of weights / ~2.6 TB/s achieved HBM bandwidth
  int64_t prefill_ns_per_token = 43'000;  // 16 GFLOP/token (8B params) at ~370 TFLOP/s achieved bf16
  int64_t decode_ns_per_seq = 25'000;     // per sequence row: GEMM rows, sampling, KV write
  double attn_ns_per_kv_token = 50.0;     // 128 KiB of K/V per context token read at ~2.6 TB/s
  int64_t host_ns_per_step = 1'000'000;   // vLLM V1 with CUDA graphs: ~1 ms CPU per step
};

// The figures above for another model size and engine on H100 SXM (docs in SERVE.md):
//   step_ns              model_gib × 2^30 B / 2.6e12 B/s / tp (+ 0.4 ms of all-reduces when tp > 1)
//   prefill_ns_per_token 2.7 µs × model_gib / (tp × 0.9 when tp > 1)  (bf16 or fp8: both are
//                        ~2.7 µs per GiB of weights at their own achieved throughput)
//   decode_ns_per_seq    1.6 µs × model_gib / tp
//   attn_ns_per_kv_token kv_bytes_per_token / 2.6e3 / tp
//   host_ns_per_step     continuous 1 ms (vLLM: CUDA graphs, batched sampling); naive 8 ms (a
//                        Python loop around generate(): eager launches, per-token checks)
ServeCosts DefaultServeCosts(double model_gib, int64_t tensor_parallel, uint64_t kv_bytes_per_token,
                             scenario::Engine engine);

struct ServeSpec {
  std::string id = "serve";  // the scenario's inference id ([A-Za-z0-9._-]); names files only
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";  // model path/name (vLLM's positional MODEL)
  std::string served_model_name;  // the model_name label ("" = model), vLLM --served-model-name
  int64_t port = 8000;            // /metrics and the API on 127.0.0.1:port (vLLM --port)
  int64_t gpus = 1;               // CUDA devices used (the first `gpus` visible ones)
  int64_t tensor_parallel = 1;    // GPUs per replica; replicas = gpus / tensor_parallel
  scenario::Engine engine = scenario::Engine::kContinuous;  // continuous batching, or naive (one request
                                                            // at a time per replica, prompts prefilled whole)
  int64_t slots = 32;                   // max concurrent sequences per replica (vLLM --max-num-seqs)
  bool chunked_prefill = true;          // prefill in chunks mixed with decodes (else prefill-only steps)
  bool prefix_caching = true;           // reuse KV blocks of a prompt prefix seen before
  int64_t kv_capacity_tokens = 500000;  // KV cache per replica, tokens (num_gpu_blocks × block_size)
  int64_t block_size = 16;              // tokens per KV block (vLLM --block-size)
  int64_t max_model_len = 32768;        // prompt + output limit; longer prompts are cut to fit
  int64_t max_num_batched_tokens = 0;   // token budget of one step; 0 = vLLM's default (8192 with
                                        // chunked prefill, else max(max_model_len, 2048))
  double arrival_rate_rps = 5.0;        // Poisson arrivals per REAL second, whole server
  scenario::Param<int64_t> prompt_tokens = 1000;  // per request, drawn from the seed
  scenario::Param<int64_t> output_tokens = 300;   // per request (the request's stop length)
  double shared_prefix_share = 0.0;               // 0..1: this share of every prompt is a common prefix
                                                  // (system prompt); prefix caching can hit on it
  uint64_t model_bytes = uint64_t{16} << 30;      // weights of one replica (split over tensor_parallel GPUs)
  uint64_t kv_bytes_per_token = 131072;           // K+V bytes per token per replica (Llama-3-8B: 32 layers ×
                                                  // 8 KV heads × 128 dims × 2 × 2 B)
  ServeCosts costs;                               // REAL ns
  scenario::MetricsStyle metrics = scenario::MetricsStyle::kVllmV1;  // metric names and stats line
  uint64_t seed = 0;                                                 // arrivals and request sizes
  double stats_every_s = 0;  // REAL s between stats lines; 0 = vLLM's own (V0 5 s, V1 10 s)
  double duration_s = 0;     // REAL s to serve, then exit 0; 0 = until SIGTERM
};

// Bounds ParseServeSpec enforces.
inline constexpr size_t kMaxServeSpecBytes = 1 << 20;
inline constexpr int64_t kMaxServeGpus = 16;
inline constexpr int64_t kMaxServeSlots = 4096;
inline constexpr int64_t kMaxKvTokens = int64_t{1} << 32;

// Parses and validates (JSON object, keys as the field names above, `costs` a nested object,
// enums by their scenario names, prompt_tokens/output_tokens as the scenario JSON writes a
// Param: a number or {"dist":...}). Never throws: kParse for malformed JSON, kInvalidArgument
// for a bad or inconsistent value (gpus not a multiple of tensor_parallel, ...) naming the field.
Result<ServeSpec> ParseServeSpec(std::string_view json);
Result<ServeSpec> ReadServeSpecFile(const std::string& path);
// Pretty-printed JSON; ParseServeSpec(ServeSpecToJson(s)) == s.
std::string ServeSpecToJson(const ServeSpec& spec);
bool operator==(const ServeSpec& a, const ServeSpec& b);

// The spec's scenario-time values made real for a world running c times faster: costs and
// durations divided by c, arrival rate multiplied by c (what the runner does for every spec).
ServeSpec CompressServeTime(ServeSpec spec, double time_compression);

// The spec of a scenario's inference server (a resolved `inference[]` entry) in a world running
// time_compression times faster: every field copied, model_gib → model_bytes, the costs from
// DefaultServeCosts for that model size, tensor parallelism and engine, then CompressServeTime.
// `seed` is the server's own (the runner derives one per server from the world's seed).
// gpus and port are the entry's; the runner still picks CUDA_VISIBLE_DEVICES and may move the
// port (the command line it starts the server with overrides it).
ServeSpec ServeSpecFromScenario(const scenario::InferenceT<scenario::Plain>& inference, uint64_t seed,
                                double time_compression);

// Derived values.
inline int64_t Replicas(const ServeSpec& s) { return s.gpus / s.tensor_parallel; }
int64_t StepTokenBudget(const ServeSpec& s);
double StatsIntervalS(const ServeSpec& s);
// Prefix caching as the engine really does it (a naive server has none, whatever the flag says).
inline bool PrefixCachingOn(const ServeSpec& s) {
  return s.prefix_caching && s.engine == scenario::Engine::kContinuous;
}
inline const std::string& ModelLabel(const ServeSpec& s) {
  return s.served_model_name.empty() ? s.model : s.served_model_name;
}

}  // namespace ithbat::sim::workload
