#include "workload/serve_spec.h"

#include "workload/spec_json.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ithbat::sim::workload {
namespace {

using nlohmann::json;

using Fields = spec_json::Fields;

// A token-count distribution: a number, or the scenario JSON form of a Param.
void ReadTokens(const json* v, const std::string& path, scenario::Param<int64_t>& out, std::string* err) {
  if (v == nullptr || !err->empty()) return;
  spec_json::ReadCountParam(*v, path, out, err);
}

json TokensToJson(const scenario::Param<int64_t>& a) { return spec_json::CountParamToJson(a); }

constexpr int64_t kBigNs = int64_t{1} << 50;  // ~13 days

void ReadSpec(const json& j, ServeSpec& s, std::string* err) {
  Fields r(j, "", err);
  r.Str("id", s.id, 256);
  r.Str("model", s.model, 1024);
  r.Str("served_model_name", s.served_model_name, 1024);
  r.Int("port", s.port, 1, 65535);
  r.Int("gpus", s.gpus, 1, kMaxServeGpus);
  r.Int("tensor_parallel", s.tensor_parallel, 1, kMaxServeGpus);
  r.Enum("engine", s.engine);
  r.Int("slots", s.slots, 1, kMaxServeSlots);
  r.Bool("chunked_prefill", s.chunked_prefill);
  r.Bool("prefix_caching", s.prefix_caching);
  r.Int("kv_capacity_tokens", s.kv_capacity_tokens, 1, kMaxKvTokens);
  r.Int("block_size", s.block_size, 1, 1024);
  r.Int("max_model_len", s.max_model_len, 2, kMaxKvTokens);
  r.Int("max_num_batched_tokens", s.max_num_batched_tokens, 0, kMaxKvTokens);
  r.Num("arrival_rate_rps", s.arrival_rate_rps, 0, 1e6);
  ReadTokens(r.Get("prompt_tokens"), "prompt_tokens", s.prompt_tokens, err);
  ReadTokens(r.Get("output_tokens"), "output_tokens", s.output_tokens, err);
  r.Num("shared_prefix_share", s.shared_prefix_share, 0, 1);
  r.U64("model_bytes", s.model_bytes, 0, uint64_t{1} << 50);
  r.U64("kv_bytes_per_token", s.kv_bytes_per_token, 1, uint64_t{1} << 30);
  if (const json* v = r.Get("costs")) {
    Fields c(*v, "costs", err);
    c.Int("step_ns", s.costs.step_ns, 0, kBigNs);
    c.Int("prefill_ns_per_token", s.costs.prefill_ns_per_token, 0, kBigNs);
    c.Int("decode_ns_per_seq", s.costs.decode_ns_per_seq, 0, kBigNs);
    c.Num("attn_ns_per_kv_token", s.costs.attn_ns_per_kv_token, 0, 1e12);
    c.Int("host_ns_per_step", s.costs.host_ns_per_step, 0, kBigNs);
    c.Check();
  }
  r.Enum("metrics", s.metrics);
  r.U64("seed", s.seed, 0, UINT64_MAX);
  r.Num("stats_every_s", s.stats_every_s, 0, 86400);
  r.Num("duration_s", s.duration_s, 0, 1e9);
  r.Check();
  if (!err->empty()) return;
  if (s.gpus % s.tensor_parallel != 0)
    *err = fmt::format("gpus {} is not a multiple of tensor_parallel {}", s.gpus, s.tensor_parallel);
  else if (s.kv_capacity_tokens < s.block_size)
    *err =
        fmt::format("kv_capacity_tokens {} is less than one block of {}", s.kv_capacity_tokens, s.block_size);
  else if (s.stats_every_s > 0 && s.stats_every_s < 0.01)
    *err = "stats_every_s: below 0.01 s";
}

}  // namespace

ServeCosts DefaultServeCosts(double model_gib, int64_t tensor_parallel, uint64_t kv_bytes_per_token,
                             scenario::Engine engine) {
  const double tp = static_cast<double>(std::max<int64_t>(1, tensor_parallel));
  const double gib = std::max(0.0, model_gib);
  constexpr double kHbmBytesPerNs = 2.6e3;  // 2.6 TB/s achieved of H100 SXM's 3.35
  ServeCosts c;
  c.step_ns = static_cast<int64_t>(gib * double(1 << 30) / kHbmBytesPerNs / tp) + (tp > 1 ? 400'000 : 0);
  c.prefill_ns_per_token = static_cast<int64_t>(2'700.0 * gib / (tp > 1 ? tp * 0.9 : 1.0));
  c.decode_ns_per_seq = static_cast<int64_t>(1'600.0 * gib / tp);
  c.attn_ns_per_kv_token = static_cast<double>(kv_bytes_per_token) / kHbmBytesPerNs / tp;
  c.host_ns_per_step = engine == scenario::Engine::kNaive ? 8'000'000 : 1'000'000;
  return c;
}

ServeSpec ServeSpecFromScenario(const scenario::InferenceT<scenario::Plain>& in, uint64_t seed, double c) {
  ServeSpec s;
  s.id = in.id;
  s.port = in.port;
  s.gpus = in.gpus;
  s.tensor_parallel = in.tensor_parallel;
  s.engine = in.engine;
  s.slots = in.slots;
  s.chunked_prefill = in.chunked_prefill;
  s.prefix_caching = in.prefix_caching;
  s.kv_capacity_tokens = in.kv_capacity_tokens;
  s.arrival_rate_rps = in.arrival_rate_rps;
  s.prompt_tokens = in.prompt_tokens;
  s.output_tokens = in.output_tokens;
  s.shared_prefix_share = in.shared_prefix_share;
  s.model_bytes = static_cast<uint64_t>(std::max(0.0, in.model_gib) * double(uint64_t{1} << 30));
  s.metrics = in.metrics;
  s.seed = seed;
  s.costs = DefaultServeCosts(in.model_gib, in.tensor_parallel, s.kv_bytes_per_token, in.engine);
  return CompressServeTime(std::move(s), c);
}

int64_t StepTokenBudget(const ServeSpec& s) {
  if (s.max_num_batched_tokens > 0) return s.max_num_batched_tokens;
  return s.chunked_prefill ? 8192 : std::max<int64_t>(s.max_model_len, 2048);
}

double StatsIntervalS(const ServeSpec& s) {
  if (s.stats_every_s > 0) return s.stats_every_s;
  return s.metrics == scenario::MetricsStyle::kVllmV0 ? 5.0 : 10.0;
}

ServeSpec CompressServeTime(ServeSpec s, double c) {
  if (!(c > 0) || !std::isfinite(c)) return s;
  auto div = [c](int64_t ns) { return static_cast<int64_t>(std::llround(static_cast<double>(ns) / c)); };
  s.costs.step_ns = div(s.costs.step_ns);
  s.costs.prefill_ns_per_token = div(s.costs.prefill_ns_per_token);
  s.costs.decode_ns_per_seq = div(s.costs.decode_ns_per_seq);
  s.costs.attn_ns_per_kv_token /= c;
  s.costs.host_ns_per_step = div(s.costs.host_ns_per_step);
  s.arrival_rate_rps *= c;
  s.duration_s /= c;
  return s;
}

Result<ServeSpec> ParseServeSpec(std::string_view text) {
  return spec_json::ParseSpec<ServeSpec>(text, kMaxServeSpecBytes, "serve spec",
                                         [](const json& j, ServeSpec& s, std::string* err) { ReadSpec(j, s, err); });
}

Result<ServeSpec> ReadServeSpecFile(const std::string& path) {
  auto text = spec_json::ReadSpecFile(path, kMaxServeSpecBytes, "serve spec");
  if (!text) return std::unexpected(text.error());
  auto s = ParseServeSpec(*text);
  if (!s) return MakeErrorF(s.error().code, "{}: {}", path, s.error().message);
  return s;
}

std::string ServeSpecToJson(const ServeSpec& s) {
  json j;
  j["id"] = s.id;
  j["model"] = s.model;
  j["served_model_name"] = s.served_model_name;
  j["port"] = s.port;
  j["gpus"] = s.gpus;
  j["tensor_parallel"] = s.tensor_parallel;
  j["engine"] = scenario::EnumName(s.engine);
  j["slots"] = s.slots;
  j["chunked_prefill"] = s.chunked_prefill;
  j["prefix_caching"] = s.prefix_caching;
  j["kv_capacity_tokens"] = s.kv_capacity_tokens;
  j["block_size"] = s.block_size;
  j["max_model_len"] = s.max_model_len;
  j["max_num_batched_tokens"] = s.max_num_batched_tokens;
  j["arrival_rate_rps"] = s.arrival_rate_rps;
  j["prompt_tokens"] = TokensToJson(s.prompt_tokens);
  j["output_tokens"] = TokensToJson(s.output_tokens);
  j["shared_prefix_share"] = s.shared_prefix_share;
  j["model_bytes"] = s.model_bytes;
  j["kv_bytes_per_token"] = s.kv_bytes_per_token;
  j["costs"] = {{"step_ns", s.costs.step_ns},
                {"prefill_ns_per_token", s.costs.prefill_ns_per_token},
                {"decode_ns_per_seq", s.costs.decode_ns_per_seq},
                {"attn_ns_per_kv_token", s.costs.attn_ns_per_kv_token},
                {"host_ns_per_step", s.costs.host_ns_per_step}};
  j["metrics"] = scenario::EnumName(s.metrics);
  j["seed"] = s.seed;
  j["stats_every_s"] = s.stats_every_s;
  j["duration_s"] = s.duration_s;
  return j.dump(2);
}

bool operator==(const ServeSpec& a, const ServeSpec& b) { return ServeSpecToJson(a) == ServeSpecToJson(b); }

}  // namespace ithbat::sim::workload
