#pragma once
// What the simulated server shows the world: the Prometheus text of /metrics with vLLM's names,
// types, labels and number formatting (prometheus_client's text format 0.0.4), and vLLM's
// periodic stats lines. Pure: the server passes its replicas' state in.
//
//   vllm_v1  (vLLM ≥ 0.10, V1 engine) one series per engine: labels engine="<replica>",
//            model_name; kv_cache_usage_perc, prefix_cache_{queries,hits}_total, ...;
//            stats line per engine: "(APIServer pid=N) INFO MM-DD hh:mm:ss [loggers.py:271]
//            Engine 000: Avg prompt throughput: ..., Running: R reqs, Waiting: W reqs, GPU KV
//            cache usage: U%, Prefix cache hit rate: H%", printed only while there is traffic
//   vllm_v0  (vLLM 0.6, V0 engine) one series per server (label model_name only, replicas
//            summed); gpu_cache_usage_perc, num_requests_swapped, gpu_prefix_cache_hit_rate
//            (-1 without prefix caching, as vLLM's allocator reports); stats line "INFO MM-DD
//            hh:mm:ss metrics.py:351] Avg prompt throughput: ..., Running: R reqs, Swapped: 0
//            reqs, Pending: W reqs, GPU KV cache usage: U%, CPU KV cache usage: 0.0%." and, with
//            prefix caching, "... metrics.py:367] Prefix cache hit rate: GPU: H%, CPU: 0.00%"
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "workload/serve_engine.h"
#include "workload/serve_spec.h"

namespace ithbat::sim::workload::serve {

struct ReplicaView {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t used_blocks = 0;
  int64_t total_blocks = 1;
  const ReplicaCounters* counters = nullptr;  // borrowed for the call
};

struct MetricsContext {
  double created_s = 0;          // process start (CLOCK_REALTIME s): the *_created samples
  double prompt_throughput = 0;  // V0's avg_*_throughput gauges: the last stats interval
  double generation_throughput = 0;
};

// prometheus_client's float formatting (floatToGoString): 8.0, 1.7537953269352946e+09, +Inf.
std::string PromFloat(double v);

std::string RenderMetrics(const ServeSpec& spec, std::span<const ReplicaView> replicas,
                          const MetricsContext& ctx);

// One stats interval of one replica (or of the server, V0).
struct StatsSample {
  double prompt_throughput = 0;  // tokens/s over the interval
  double generation_throughput = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0;         // 0..1
  double prefix_hit_rate = 0;  // 0..1 (recent lookups)
};
// The lines vLLM prints for one interval (no trailing newline). `engine` is the replica (V1);
// `local_time` is "MM-DD hh:mm:ss".
std::vector<std::string> StatsLines(const ServeSpec& spec, int pid, const std::string& local_time,
                                    int64_t engine, const StatsSample& s);

}  // namespace ithbat::sim::workload::serve
