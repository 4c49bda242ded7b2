// The diagnosis engine's cost per round: every detector and the investigator over the stores of
// one node with 8 training ranks, for analysis windows of 1, 5 and 10 minutes (the stragglers
// detector looks back 10 minutes). The agent runs this every few seconds; the lab runs it once
// per replay step. Build: the bench/ programs (ITHBAT_BUILD_BENCH); with benchmarks off, link
// the build's libithbat_investigate.a, libithbat_detect.a, libithbat_store.a, libithbat_core.a with
// -lbenchmark -lfmt -lre2 -lzstd -lpthread.
#include <benchmark/benchmark.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "detect/detector.h"
#include "detect/fleet_view.h"
#include "investigate/investigator.h"
#include "store/store.h"

namespace ithbat {
namespace {

constexpr TimeNs kT0 = 1'800'000'000LL * kNsPerSec;
constexpr int kRanks = 8;

void AddSeries(store::Store& s, const std::string& metric, MetricType type,
               std::vector<std::pair<std::string, std::string>> labels, int ticks,
               const std::function<double(int)>& value) {
  MetricDesc d{metric, "bench", "", type, {}};
  auto ref = s.RegisterSeries(d, *LabelSet::From(labels));
  for (int t = 0; t < ticks; ++t) (void)s.Append(*ref, kT0 + t * kNsPerSec, value(t));
}

// One node, 8 ranks of a job whose slowest rank rotates, ticks seconds of it; the late rank's
// heavier kernels are launched two ticks before it arrives last (its host runs ahead of its GPU
// by the launch queue: what the stragglers detector's work proxy expects).
std::unique_ptr<store::Store> Node(int ticks) {
  store::StoreOptions o;
  o.retention = 7 * 24 * 3600 * kNsPerSec;
  o.memory_budget_bytes = 1ull << 30;
  auto s = std::move(*store::Store::Open(o));
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::pair<std::string, std::string>> lab = {
        {"job_id", "4242"}, {"rank", std::to_string(r)}, {"local_rank", std::to_string(r)}, {"world_size", "8"},
        {"pid", std::to_string(100 + r)}, {"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}};
    auto last = [r](int t) { return std::floor((t + (kRanks - r)) / static_cast<double>(kRanks)); };
    AddSeries(*s, "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, lab, ticks, last);
    AddSeries(*s, "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, lab, ticks,
              [&](int t) { return 0.4 * last(t); });
    AddSeries(*s, "ithbat_probe_nccl_aligned_total", MetricType::kCounter, lab, ticks, [](int t) { return t; });
    AddSeries(*s, "ithbat_probe_grid_blocks_total", MetricType::kCounter, lab, ticks,
              [&](int t) { return 1000.0 * t + 500 * last(t + 2); });
    auto launch = lab;
    launch.emplace_back("api", "cuLaunchKernel");
    AddSeries(*s, "ithbat_probe_launches_total", MetricType::kCounter, launch, ticks, [](int t) { return 100.0 * t; });
    auto nccl = lab;
    nccl.emplace_back("op", "AllReduce");
    AddSeries(*s, "ithbat_probe_nccl_ops_total", MetricType::kCounter, nccl, ticks, [](int t) { return t; });
    std::vector<std::pair<std::string, std::string>> gpu = {{"gpu", std::to_string(r)},
                                                            {"gpu_uuid", "GPU-" + std::to_string(r)}};
    AddSeries(*s, "ithbat_gpu_utilization_ratio", MetricType::kGauge, gpu, ticks, [](int) { return 0.85; });
    auto sm = gpu;
    sm.emplace_back("clock", "sm");
    AddSeries(*s, "ithbat_gpu_clock_hertz", MetricType::kGauge, sm, ticks, [](int) { return 1.98e9; });
    for (const char* reason : {"sw_power_cap", "hw_thermal_slowdown"}) {
      auto ev = gpu;
      ev.emplace_back("reason", reason);
      AddSeries(*s, "ithbat_gpu_clock_event_active", MetricType::kGauge, ev, ticks, [](int) { return 0; });
    }
  }
  for (int t = 0; t < ticks; t += 2) {
    Event e;
    e.time = kT0 + t * kNsPerSec;
    e.kind = EventKind::kLoss;
    e.identity.job = "4242";
    e.identity.rank = 0;
    e.identity.pid = 100;
    e.step = t / 2;
    e.value = 3.0 - 0.001 * t;
    (void)s->AppendEvent(e);
    (void)s->RecordStep("4242", 0, StepSpan{t / 2, kT0 + t * kNsPerSec, kT0 + (t + 2) * kNsPerSec});
  }
  return s;
}

void BM_EngineRound(benchmark::State& state) {
  const int ticks = static_cast<int>(state.range(0));
  std::map<std::string, std::unique_ptr<store::Store>> stores;
  stores.emplace("n1", Node(ticks));
  const detect::FleetView view = detect::FleetView::Owning(std::move(stores));
  const TimeNs now = kT0 + (ticks - 1) * kNsPerSec;
  size_t diagnoses = 0;
  for (auto _ : state) {
    auto d = investigate::DiagnoseAsOf(view, kMinTime, now, {});
    diagnoses = d.size();
    benchmark::DoNotOptimize(d);
  }
  state.counters["diagnoses"] = static_cast<double>(diagnoses);
  state.counters["window_s"] = ticks;
}
BENCHMARK(BM_EngineRound)->Arg(60)->Arg(300)->Arg(600)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ithbat
BENCHMARK_MAIN();
