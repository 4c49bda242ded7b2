// Evidence bundles: writing one (ithbat record) and reading it back into stores (ithbat diagnose
// FILE, ithbat report) per sample, for one node of 8 ranks with 30 series each at 1 s samples
// over 5 and 20 minutes — the size of a typical incident window. SQLite does the work; the
// figure to watch is samples per second (docs/performance.md, "Evidence bundles").
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "store/store.h"

namespace ithbat {
namespace {

constexpr TimeNs kT0 = 1'800'000'000LL * kNsPerSec;
constexpr int kRanks = 8;
constexpr int kSeriesPerRank = 30;

detect::FleetView Fleet(int ticks) {
  store::StoreOptions o;
  o.retention = 7 * 24 * 3600 * kNsPerSec;
  o.memory_budget_bytes = 1ull << 30;
  auto s = std::move(*store::Store::Open(o));
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < kSeriesPerRank; ++k) {
      // Series 0 is the launch counter jobs are discovered from; the rest stand for the others.
      MetricDesc d{
          k == 0 ? "ithbat_probe_launches_total" : "ithbat_bench_metric_" + std::to_string(k) + "_total",
          "bench",
          "",
          MetricType::kCounter,
          {}};
      auto ref = s->RegisterSeries(d, *LabelSet::From({{"job_id", "4242"},
                                                       {"rank", std::to_string(r)},
                                                       {"pid", std::to_string(100 + r)},
                                                       {"gpu", std::to_string(r)},
                                                       {"gpu_uuid", "GPU-" + std::to_string(r)},
                                                       {"api", k == 0 ? "cuLaunchKernel" : ""}}));
      for (int t = 0; t < ticks; ++t) (void)s->Append(*ref, kT0 + t * kNsPerSec, 1000.0 * t + 7 * k + r);
    }
  }
  std::map<std::string, std::unique_ptr<store::Store>> stores;
  stores.emplace("n1", std::move(s));
  return detect::FleetView::Owning(std::move(stores));
}

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string(name) + std::to_string(::getpid()) + ".ithbat"))
      .string();
}

void BM_WriteBundle(benchmark::State& state) {
  const int ticks = static_cast<int>(state.range(0));
  const detect::FleetView view = Fleet(ticks);
  const std::string path = TempPath("ithbat-bench-write-");
  for (auto _ : state) {
    std::filesystem::remove(path);
    auto s = bundle::WriteBundle(view, bundle::RecordOptions{"4242"}, path);
    if (!s) state.SkipWithError(s.error().message.c_str());
  }
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * kRanks * kSeriesPerRank * ticks);
}

void BM_ReadBundle(benchmark::State& state) {
  const int ticks = static_cast<int>(state.range(0));
  const std::string path = TempPath("ithbat-bench-read-");
  std::filesystem::remove(path);
  if (!bundle::WriteBundle(Fleet(ticks), bundle::RecordOptions{"4242"}, path))
    state.SkipWithError("write failed");
  for (auto _ : state) {
    auto b = bundle::ReadBundle(path);
    if (!b) state.SkipWithError(b.error().message.c_str());
    benchmark::DoNotOptimize(b);
  }
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * kRanks * kSeriesPerRank * ticks);
}

BENCHMARK(BM_WriteBundle)->Arg(300)->Arg(1200)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadBundle)->Arg(300)->Arg(1200)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ithbat

BENCHMARK_MAIN();
