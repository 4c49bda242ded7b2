// Inference servers' periodic stats lines → kServingMetric.
//   vLLM V0  "Avg prompt throughput: 5902.0 tokens/s, Avg generation throughput: 230.6 tokens/s,
//            Running: 16 reqs, Swapped: 0 reqs, Pending: 11 reqs, GPU KV cache usage: 87.1%,
//            CPU KV cache usage: 0.0%."  and  "Prefix cache hit rate: GPU: 26.68%, CPU: 0.00%"
//   vLLM V1  "Engine 000: Avg prompt throughput: ..., Running: 1 reqs, Waiting: 0 reqs,
//            GPU KV cache usage: 27.3%, Prefix cache hit rate: 91.1%, External prefix cache hit rate: 1.2%"
//   SGLang   "Decode batch. #running-req: 1010, #token: 55006, token usage: 0.93,
//            gen throughput (token/s): 1397.13, #queue-req: 12279"  (2026: "Decode batch," and
//            "cuda graph: True"), "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, ..."
// Whatever precedes the message (journald "host vllm[pid]:", Docker RFC 3339 stamps, python
// logging, "(APIServer pid=1)") is ignored: fields are read from the anchor on, as a ", "-separated
// list of "key: value" items; an item that is not a number is skipped, not guessed.
#include <cmath>
#include <cstring>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"
#include "collect/joblog/parsers/signals_scan.h"

namespace ithbat::collect::joblog {
namespace {

using signals::AddAttr;
using signals::Find;
using signals::SkipSpaces;

// Calls fn(key, value) for each "key: value" item of a ", "-separated list (at most 32).
template <class Fn>
void ForEachItem(std::string_view s, Fn&& fn) {
  for (int i = 0; i < 32 && !s.empty(); ++i) {
    const size_t comma = s.find(", ");
    std::string_view item = comma == std::string_view::npos ? s : s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 2);
    const size_t colon = item.find(": ");
    if (colon == std::string_view::npos || colon == 0 || colon > 64) continue;
    fn(SkipSpaces(item.substr(0, colon)), SkipSpaces(item.substr(colon + 2)));
  }
}

// "87.1%" → 0.871 (percent required when `percent`); "16 reqs" / "5902.0 tokens/s" → the number.
std::optional<double> ItemValue(std::string_view v, bool percent) {
  std::string_view tok = signals::NumberToken(v);
  std::string_view after = v.substr(tok.size());
  auto num = signals::Num(tok);
  if (!num) return std::nullopt;
  if (percent) {
    if (!after.starts_with("%")) return std::nullopt;
    return *num / 100.0;
  }
  return num;
}

// A line cut before its first '%' still carries throughput and request counts, so the test is
// the anchors themselves, not a '%'.
constexpr std::string_view kVllmAnchors[] = {"Avg prompt throughput:", "Prefix cache hit rate: GPU:"};
constexpr signals::AnchorFilter kVllmFilter{kVllmAnchors[0], kVllmAnchors[1]};
constexpr auto kVllmMasks = MasksOf(kVllmAnchors);

// ---------------------------------------------------------------------------------------------
class VllmParser final : public FormatParser {
 public:
  std::string_view name() const override { return "vllm"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view t = line.text;
    if (line.facts != nullptr && !line.facts->MayContainAny(kVllmMasks)) return false;
    const uint32_t hits = kVllmFilter.Scan(t);
    if (hits == 0) return false;
    const bool stats = (hits & 1) != 0;
    const size_t at = Find(t, stats ? std::string_view("Avg prompt throughput:") : std::string_view("Prefix cache hit rate: GPU:"));
    if (at == std::string_view::npos) return false;

    std::string_view engine = "vllm_v0";
    std::string_view engine_index;
    if (stats && at >= 12) {
      const std::string_view before = t.substr(0, at);
      const size_t e = before.rfind("Engine ");
      if (e != std::string_view::npos) {
        std::string_view idx = signals::DigitsAfter(before.substr(e), "Engine ");
        if (!idx.empty()) {
          engine = "vllm_v1";
          while (idx.size() > 1 && idx.front() == '0') idx.remove_prefix(1);
          engine_index = idx;
        }
      }
    }
    const int32_t rank = signals::LinePrefixRank(t);
    const size_t before = out.size();
    std::string_view body = t.substr(at);
    if (stats && signals::Contains(body, "Waiting:")) engine = "vllm_v1";
    auto emit = [&](std::string_view name, double v) {
      // Built in place in `out` (as MetricEvent() builds it): no move per event.
      ParsedEvent& e = out.emplace_back();
      e.kind = EventKind::kServingMetric;
      e.name.assign(name);
      e.value = v;
      e.rank = rank;
      e.attrs.reserve(engine_index.empty() ? 1 : 2);
      AddAttr(e, "engine", engine);
      if (!engine_index.empty()) AddAttr(e, "engine_index", engine_index);
    };
    if (!stats) {
      // "Prefix cache hit rate: GPU: 26.68%, CPU: 0.00%"
      ForEachItem(body, [&](std::string_view key, std::string_view value) {
        if (key == "Prefix cache hit rate" && value.starts_with("GPU: ")) {
          if (auto v = ItemValue(value.substr(5), true)) emit("prefix_cache_hit_ratio", *v);
        } else if (key == "CPU") {
          if (auto v = ItemValue(value, true)) emit("cpu_prefix_cache_hit_ratio", *v);
        }
      });
      return out.size() != before;
    }
    ForEachItem(body, [&](std::string_view key, std::string_view value) {
      struct Field {
        std::string_view key, name;
        bool percent;
      };
      static constexpr Field kFields[] = {
          {"Avg prompt throughput", "prompt_tokens_per_second", false},
          {"Avg generation throughput", "generation_tokens_per_second", false},
          {"Running", "running_requests", false},
          {"Swapped", "swapped_requests", false},
          {"Pending", "waiting_requests", false},
          {"Waiting", "waiting_requests", false},
          {"GPU KV cache usage", "kv_cache_usage_ratio", true},
          {"CPU KV cache usage", "cpu_kv_cache_usage_ratio", true},
          {"Prefix cache hit rate", "prefix_cache_hit_ratio", true},
          {"External prefix cache hit rate", "external_prefix_cache_hit_ratio", true},
      };
      for (const Field& f : kFields) {
        if (key != f.key) continue;
        if (auto v = ItemValue(value, f.percent)) emit(f.name, *v);
        return;
      }
    });
    return out.size() != before;
  }
};

// ---------------------------------------------------------------------------------------------
class SglangParser final : public FormatParser {
 public:
  std::string_view name() const override { return "sglang"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view t = line.text;
    if (std::memchr(t.data(), '#', t.size()) == nullptr) return false;
    std::string_view phase = "decode";
    size_t at = Find(t, "Decode batch");
    size_t len = 12;
    if (at == std::string_view::npos) {
      at = Find(t, "Prefill batch");
      len = 13;
      phase = "prefill";
    }
    if (at == std::string_view::npos || at + len >= t.size() || (t[at + len] != '.' && t[at + len] != ',')) return false;
    const std::string_view body = t.substr(at + len + 1);

    // "[04:40:55 TP0] Decode batch." → tensor-parallel rank 0.
    std::string_view tp;
    if (size_t p = t.substr(0, at).rfind(" TP"); p != std::string_view::npos) tp = signals::DigitsAfter(t.substr(p), " TP");
    const int32_t rank = signals::LinePrefixRank(t);
    std::string_view cuda_graph;
    std::vector<ParsedEvent> events;  // attrs added after: "cuda graph" may come last
    ForEachItem(body, [&](std::string_view key, std::string_view value) {
      if (key == "cuda graph") {
        if (value.starts_with("True")) cuda_graph = "true";
        if (value.starts_with("False")) cuda_graph = "false";
        return;
      }
      struct Field {
        std::string_view key, name;
      };
      static constexpr Field kFields[] = {
          {"#running-req", "batch_size"},
          {"#queue-req", "queued_requests"},
          {"#token", "kv_cache_tokens"},
          {"token usage", "token_usage_ratio"},
          {"gen throughput (token/s)", "generation_tokens_per_second"},
          {"input throughput (token/s)", "prompt_tokens_per_second"},
          {"#new-seq", "new_sequences"},
          {"#new-token", "new_tokens"},
          {"#cached-token", "cached_tokens"},
          {"#cache_miss", "cache_misses"},
      };
      std::string_view name;
      for (const Field& f : kFields) {
        if (key == f.key) name = f.name;
      }
      if (name.empty()) return;
      auto v = ItemValue(value, false);
      if (!v) return;
      events.push_back(signals::MetricEvent(EventKind::kServingMetric, name, *v, rank));
    });
    if (events.empty()) return false;
    for (ParsedEvent& e : events) {
      e.attrs.reserve(4);
      AddAttr(e, "engine", "sglang");
      AddAttr(e, "phase", phase);
      if (!tp.empty()) AddAttr(e, "tp_rank", tp);
      if (!cuda_graph.empty()) AddAttr(e, "cuda_graph", cuda_graph);
      out.push_back(std::move(e));
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<FormatParser> MakeVllmParser() { return std::make_unique<VllmParser>(); }
std::unique_ptr<FormatParser> MakeSglangParser() { return std::make_unique<SglangParser>(); }

}  // namespace ithbat::collect::joblog
