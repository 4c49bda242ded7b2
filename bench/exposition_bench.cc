// /metrics rendering (serve::RenderPrometheusText) on the series of a busy 8-GPU node: the
// agent's own exposition, the same with the cluster/node target labels, and with dcgm-exporter's
// names added (--dcgm-exporter-names). Compare the ratios in one run: the options are paid on
// every scrape (rendered at most every 500 ms, shared by the scrapes in between).
//
// Run: build/bench/exposition_bench
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "core/labels.h"
#include "core/metric.h"
#include "serve/exposition.h"
#include "store/store.h"

namespace {

using ithbat::LabelSet;
using ithbat::MetricDesc;
using ithbat::MetricType;
using ithbat::TimeNs;

constexpr TimeNs kT0 = 1'700'000'000LL * 1'000'000'000LL;
constexpr int kGpus = 8;

// The shape of the fake 8-GPU node's GPU series (about 1,100, promtool_check.sh counts them),
// plus 150 host and agent series without GPU labels.
std::unique_ptr<ithbat::store::Store> BusyNode() {
  auto store = ithbat::store::Store::Open(ithbat::store::StoreOptions{}).value();
  auto put = [&](const std::string& name, MetricType type, std::vector<std::pair<std::string, std::string>> labels,
                 double v) {
    MetricDesc d{name, "help text of " + name, "", type, {}};
    auto ref = store->RegisterSeries(d, LabelSet::From(labels).value()).value();
    (void)store->Append(ref, kT0, v);
  };
  for (int g = 0; g < kGpus; ++g) {
    const std::string gpu = std::to_string(g);
    const std::string uuid = "GPU-0000000" + gpu + "-aaaa-bbbb-cccc-dddddddddddd";
    put("ithbat_gpu_info", MetricType::kGauge,
        {{"gpu", gpu}, {"gpu_uuid", uuid}, {"model", "NVIDIA H100 80GB HBM3"},
         {"pci_bus_id", "00000000:1" + gpu + ":00.0"}, {"driver_version", "570.124.06"}},
        1);
    for (const char* name : {"ithbat_gpu_temperature_celsius", "ithbat_gpu_power_watts",
                             "ithbat_gpu_utilization_ratio", "ithbat_gpu_memory_used_bytes",
                             "ithbat_gpu_memory_free_bytes", "ithbat_gpu_memory_utilization_ratio"}) {
      put(name, MetricType::kGauge, {{"gpu", gpu}, {"gpu_uuid", uuid}}, 42.5);
    }
    for (const char* clock : {"graphics", "sm", "memory", "video"}) {
      put("ithbat_gpu_clock_hertz", MetricType::kGauge, {{"gpu", gpu}, {"gpu_uuid", uuid}, {"clock", clock}},
          1.98e9);
    }
    for (const char* m : {"graphics_activity", "sm_activity", "sm_occupancy", "tensor_any", "dram_bandwidth",
                          "fp16_pipe", "fp32_pipe", "fp64_pipe"}) {
      put("ithbat_gpu_gpm_ratio", MetricType::kGauge, {{"gpu", gpu}, {"gpu_uuid", uuid}, {"metric", m}}, 0.5);
    }
    for (int link = 0; link < 18; ++link) {
      for (const char* c : {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"}) {
        put("ithbat_gpu_nvlink_link_errors_total", MetricType::kCounter,
            {{"gpu", gpu}, {"gpu_uuid", uuid}, {"link", std::to_string(link)}, {"counter", c}}, 0);
      }
    }
  }
  for (int i = 0; i < 150; ++i) put("ithbat_host_series_" + std::to_string(i), MetricType::kGauge, {}, i);
  return store;
}

void Render(benchmark::State& state, const ithbat::serve::ExpositionOptions& options) {
  auto store = BusyNode();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = ithbat::serve::RenderPrometheusText(*store, kT0 - 1, options);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

void BM_Render_Plain(benchmark::State& state) { Render(state, {}); }
void BM_Render_TargetLabels(benchmark::State& state) {
  ithbat::serve::ExpositionOptions o;
  o.target_labels = {{"cluster", "prod-a"}, {"node", "gpu-node-017"}};
  Render(state, o);
}
void BM_Render_TargetLabelsAndDcgmNames(benchmark::State& state) {
  ithbat::serve::ExpositionOptions o;
  o.target_labels = {{"cluster", "prod-a"}, {"node", "gpu-node-017"}};
  o.dcgm_names = true;
  o.hostname = "gpu-node-017";
  Render(state, o);
}

BENCHMARK(BM_Render_Plain)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Render_TargetLabels)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Render_TargetLabelsAndDcgmNames)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
