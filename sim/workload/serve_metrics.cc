#include "workload/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include <fmt/core.h>

namespace ithbat::sim::workload::serve {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string Escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

class Writer {
 public:
  void Family(std::string_view name, std::string_view help, std::string_view type) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(std::string_view name, Labels labels, double value) {
    std::sort(labels.begin(), labels.end());
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) out_ += ',';
        out_ += fmt::format("{}=\"{}\"", labels[i].first, Escape(labels[i].second));
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += PromFloat(value);
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

struct Group {
  Labels labels;
  std::vector<const ReplicaView*> members;
};

}  // namespace

std::string PromFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::string s = fmt::format("{}", v);  // shortest round-trip, like Python's repr
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  const size_t dot = s.find('.');
  // Go switches to exponents sooner than Python (prometheus_client's floatToGoString).
  if (v > 0 && dot != std::string::npos && dot > 6 && s.find('e') == std::string::npos) {
    std::string mantissa = s.substr(0, 1) + "." + s.substr(1, dot - 1) + s.substr(dot + 1);
    while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.')) mantissa.pop_back();
    return fmt::format("{}e+0{}", mantissa, dot - 1);
  }
  return s;
}

std::string RenderMetrics(const ServeSpec& spec, std::span<const ReplicaView> replicas,
                          const MetricsContext& ctx) {
  const bool v1 = spec.metrics == scenario::MetricsStyle::kVllmV1;
  const std::string model = ModelLabel(spec);
  std::vector<Group> groups;
  if (v1) {
    for (size_t i = 0; i < replicas.size(); ++i)
      groups.push_back(Group{{{"engine", std::to_string(i)}, {"model_name", model}}, {&replicas[i]}});
  } else {
    Group g{{{"model_name", model}}, {}};
    for (const ReplicaView& r : replicas) g.members.push_back(&r);
    groups.push_back(std::move(g));
  }
  Writer w;
  auto sum = [](const Group& g, const std::function<double(const ReplicaView&)>& f) {
    double s = 0;
    for (const ReplicaView* r : g.members) s += f(*r);
    return s;
  };
  auto gauge = [&](std::string_view name, std::string_view help,
                   const std::function<double(const Group&)>& f) {
    w.Family(name, help, "gauge");
    for (const Group& g : groups) w.Sample(name, g.labels, f(g));
  };
  auto created = [&](const std::string& base, std::string_view help,
                     const std::pair<std::string, std::string>* extra = nullptr, size_t extra_count = 0) {
    const std::string name = base + "_created";
    w.Family(name, help, "gauge");
    for (const Group& g : groups) {
      if (extra == nullptr) {
        w.Sample(name, g.labels, ctx.created_s);
        continue;
      }
      for (size_t i = 0; i < extra_count; ++i) {
        Labels l = g.labels;
        l.push_back(extra[i]);
        w.Sample(name, l, ctx.created_s);
      }
    }
  };
  auto counter = [&](const std::string& base, std::string_view help,
                     const std::function<double(const ReplicaCounters&)>& f) {
    const std::string name = base + "_total";
    w.Family(name, help, "counter");
    for (const Group& g : groups)
      w.Sample(name, g.labels, sum(g, [&](const ReplicaView& r) { return f(*r.counters); }));
    created(base, help);
  };
  auto histogram = [&](const std::string& name, std::string_view help,
                       const std::function<const Histogram&(const ReplicaCounters&)>& f) {
    w.Family(name, help, "histogram");
    for (const Group& g : groups) {
      const Histogram& first = f(*g.members.front()->counters);
      std::vector<uint64_t> counts(first.counts.size(), 0);
      double total = 0;
      uint64_t n = 0;
      for (const ReplicaView* r : g.members) {
        const Histogram& h = f(*r->counters);
        for (size_t i = 0; i < counts.size() && i < h.counts.size(); ++i) counts[i] += h.counts[i];
        total += h.sum;
        n += h.count;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i < first.bounds.size(); ++i) {
        cum += counts[i];
        Labels l = g.labels;
        l.emplace_back("le", PromFloat(first.bounds[i]));
        w.Sample(name + "_bucket", l, static_cast<double>(cum));
      }
      cum += counts.back();
      Labels l = g.labels;
      l.emplace_back("le", "+Inf");
      w.Sample(name + "_bucket", l, static_cast<double>(cum));
      w.Sample(name + "_count", g.labels, static_cast<double>(n));
      w.Sample(name + "_sum", g.labels, total);
    }
    created(name, help);
  };
  auto kv_usage = [&](const Group& g) {
    const double used = sum(g, [](const ReplicaView& r) { return static_cast<double>(r.used_blocks); });
    const double total = sum(g, [](const ReplicaView& r) { return static_cast<double>(r.total_blocks); });
    return total > 0 ? used / total : 0.0;
  };

  // Gauges.
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.", [&](const Group& g) {
    return sum(g, [](const ReplicaView& r) { return static_cast<double>(r.running); });
  });
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", [&](const Group& g) {
    return sum(g, [](const ReplicaView& r) { return static_cast<double>(r.waiting); });
  });
  if (v1) {
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage);
  } else {
    gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.",
          [](const Group&) { return 0.0; });
    gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", kv_usage);
    gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.",
          [](const Group&) { return 0.0; });
    gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.",
          [&](const Group&) { return PrefixCachingOn(spec) ? 0.0 : -1.0; });
    gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", [&](const Group& g) {
      if (!PrefixCachingOn(spec)) return -1.0;
      const double q =
          sum(g, [](const ReplicaView& r) { return static_cast<double>(r.counters->prefix_queries); });
      const double h =
          sum(g, [](const ReplicaView& r) { return static_cast<double>(r.counters->prefix_hits); });
      return q > 0 ? h / q : 0.0;
    });
    gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.",
          [&](const Group&) { return ctx.prompt_throughput; });
    gauge("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.",
          [&](const Group&) { return ctx.generation_throughput; });
  }
  // Counters.
  if (v1) {
    counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            [](const ReplicaCounters& c) { return static_cast<double>(c.prefix_queries); });
    counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            [](const ReplicaCounters& c) { return static_cast<double>(c.prefix_hits); });
  }
  counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
          [](const ReplicaCounters& c) { return static_cast<double>(c.preemptions); });
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
          [](const ReplicaCounters& c) { return static_cast<double>(c.prompt_tokens); });
  counter("vllm:generation_tokens", "Number of generation tokens processed.",
          [](const ReplicaCounters& c) { return static_cast<double>(c.generation_tokens); });
  {
    const std::string_view help = "Count of successfully processed requests.";
    w.Family("vllm:request_success_total", help, "counter");
    static const std::pair<std::string, std::string> kReasons[] = {
        {"finished_reason", "stop"}, {"finished_reason", "length"}, {"finished_reason", "abort"}};
    for (const Group& g : groups) {
      for (const auto& reason : kReasons) {
        Labels l = g.labels;
        l.push_back(reason);
        const double v = sum(g, [&](const ReplicaView& r) {
          if (reason.second == "stop") return static_cast<double>(r.counters->finished_stop);
          if (reason.second == "length") return static_cast<double>(r.counters->finished_length);
          return 0.0;
        });
        w.Sample("vllm:request_success_total", l, v);
      }
    }
    created("vllm:request_success", help, kReasons, 3);
  }
  // Histograms.
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.request_prompt_tokens; });
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.request_generation_tokens; });
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.iteration_tokens; });
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.ttft; });
  histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.tpot; });
  if (v1) {
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              [](const ReplicaCounters& c) -> const Histogram& { return c.tpot; });
  }
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.e2e; });
  histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.queue; });
  histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.inference; });
  histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.prefill; });
  histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
            [](const ReplicaCounters& c) -> const Histogram& { return c.decode; });
  // The engine's cache configuration, as an Info-style gauge.
  w.Family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& g = groups[gi];
    const int64_t blocks = static_cast<int64_t>(
        sum(g, [](const ReplicaView& r) { return static_cast<double>(r.total_blocks); }) /
        static_cast<double>(std::max<size_t>(1, g.members.size())));
    Labels l = g.labels;
    l.erase(std::remove_if(l.begin(), l.end(), [](const auto& p) { return p.first == "model_name"; }),
            l.end());
    l.emplace_back("block_size", std::to_string(spec.block_size));
    l.emplace_back("cache_dtype", "auto");
    l.emplace_back("cpu_offload_gb", "0");
    l.emplace_back("enable_prefix_caching", PrefixCachingOn(spec) ? "True" : "False");
    l.emplace_back("gpu_memory_utilization", "0.9");
    l.emplace_back("num_cpu_blocks", v1 ? "None" : "2048");
    l.emplace_back("num_gpu_blocks", std::to_string(blocks));
    l.emplace_back("sliding_window", "None");
    l.emplace_back("swap_space", "4");
    l.emplace_back("swap_space_bytes", "4294967296");
    if (v1) {
      l.emplace_back("calculate_kv_scales", "False");
      l.emplace_back("is_attention_free", "False");
      l.emplace_back("num_gpu_blocks_override", "None");
      l.emplace_back("prefix_caching_hash_algo", "builtin");
    }
    w.Sample("vllm:cache_config_info", l, 1.0);
  }
  return w.Take();
}

std::vector<std::string> StatsLines(const ServeSpec& spec, int pid, const std::string& t, int64_t engine,
                                    const StatsSample& s) {
  std::vector<std::string> out;
  if (spec.metrics == scenario::MetricsStyle::kVllmV1) {
    out.push_back(
        fmt::format("(APIServer pid={}) INFO {} [loggers.py:271] Engine {:03d}: Avg prompt throughput: "
                    "{:.1f} tokens/s, Avg "
                    "generation throughput: {:.1f} tokens/s, Running: {} reqs, Waiting: {} reqs, GPU KV "
                    "cache usage: {:.1f}%, "
                    "Prefix cache hit rate: {:.1f}%",
                    pid, t, engine, s.prompt_throughput, s.generation_throughput, s.running, s.waiting,
                    s.kv_usage * 100.0, s.prefix_hit_rate * 100.0));
  } else {
    out.push_back(fmt::format(
        "INFO {} metrics.py:351] Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} "
        "tokens/s, "
        "Running: {} reqs, Swapped: 0 reqs, Pending: {} reqs, GPU KV cache usage: {:.1f}%, CPU KV cache "
        "usage: 0.0%.",
        t, s.prompt_throughput, s.generation_throughput, s.running, s.waiting, s.kv_usage * 100.0));
    if (PrefixCachingOn(spec))
      out.push_back(fmt::format("INFO {} metrics.py:367] Prefix cache hit rate: GPU: {:.2f}%, CPU: 0.00%", t,
                                s.prefix_hit_rate * 100.0));
  }
  return out;
}

}  // namespace ithbat::sim::workload::serve
