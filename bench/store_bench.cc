// Store benchmarks on the data people measure other stores with: one hour of a realistic
// 8-GPU node (848 series at 1 s) from ../shared/bench/gen-gpu-node.py. Every figure that
// docs/performance.md quotes is a ratio against a plain uncompressed ring measured in the
// same run, or a size (bytes per sample), which does not drift with machine load.
//
//   build/bench/store_bench                       # generates the data on first use
//   ITHBAT_BENCH_DATA=/path/node.om build/bench/store_bench
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/openmetrics_reader.h"
#include "core/labels.h"
#include "store/store.h"

namespace ithbat::bench {
namespace {

const BenchData& Data() {
  static const BenchData* data = [] {
    std::string path;
    if (const char* env = std::getenv("ITHBAT_BENCH_DATA"); env && *env) {
      path = env;
    } else {
      path = "/tmp/ithbat-bench-node-3600s-seed1.om";
      if (!std::filesystem::exists(path)) {
        std::string cmd = std::string("python3 ") + ITHBAT_SOURCE_DIR +
                          "/../shared/bench/gen-gpu-node.py --seconds 3600 --seed 1 > " + path + ".tmp && mv " +
                          path + ".tmp " + path;
        if (std::system(cmd.c_str()) != 0) {
          fprintf(stderr, "cannot generate bench data (needs ../shared/bench and python3): %s\n", cmd.c_str());
          std::exit(1);
        }
      }
    }
    auto* d = new BenchData(ReadOpenMetrics(path));
    if (!d->error.empty() || d->series.empty()) {
      fprintf(stderr, "bad bench data %s: %s\n", path.c_str(), d->error.c_str());
      std::exit(1);
    }
    return d;
  }();
  return *data;
}

// The query benchmark wants 1,000 series: the node's 848 plus copies with a `copy` label.
std::vector<const BenchSeries*> SeriesForQuery(size_t n) {
  std::vector<const BenchSeries*> out;
  const auto& d = Data();
  for (size_t i = 0; i < n; ++i) out.push_back(&d.series[i % d.series.size()]);
  return out;
}

std::unique_ptr<store::Store> OpenStore(const std::string& dir = "") {
  store::StoreOptions opts;
  opts.retention = 30LL * 24 * 3600 * kNsPerSec;
  opts.memory_budget_bytes = 4ull << 30;
  opts.data_dir = dir;
  opts.disk_budget_bytes = 64ull << 30;
  auto s = store::Store::Open(opts);
  if (!s) {
    fprintf(stderr, "store: %s\n", s.error().ToString().c_str());
    std::exit(1);
  }
  return std::move(*s);
}

std::vector<SeriesRef> RegisterAll(store::Store& s, const std::vector<const BenchSeries*>& series) {
  std::vector<SeriesRef> refs;
  for (size_t i = 0; i < series.size(); ++i) {
    auto pairs = series[i]->labels;
    if (i >= Data().series.size()) pairs.emplace_back("copy", std::to_string(i / Data().series.size()));
    auto labels = LabelSet::From(pairs);
    auto ref = s.RegisterSeries(series[i]->desc, *labels);
    if (!ref) {
      fprintf(stderr, "register %s: %s\n", series[i]->desc.name.c_str(), ref.error().ToString().c_str());
      std::exit(1);
    }
    refs.push_back(*ref);
  }
  return refs;
}

// Appends tick by tick, as the agent does: every series' sample k, then k+1.
template <class AppendFn>
void IngestByTick(const std::vector<const BenchSeries*>& series, AppendFn&& append) {
  size_t ticks = series[0]->samples.size();
  for (size_t k = 0; k < ticks; ++k) {
    for (size_t i = 0; i < series.size(); ++i) {
      const auto& smp = series[i]->samples[k];
      append(i, smp.t, smp.v);
    }
  }
}

// The baseline: per series a preallocated ring of (t, v), with the same order check.
struct PlainRing {
  std::vector<store::Sample> buf;
  size_t head = 0;
  size_t count = 0;
  explicit PlainRing(size_t cap) : buf(cap) {}
  bool Append(TimeNs t, double v) {
    if (count && buf[(head + buf.size() - 1) % buf.size()].t >= t) return false;
    buf[head] = {t, v};
    head = (head + 1) % buf.size();
    if (count < buf.size()) ++count;
    return true;
  }
  void Window(TimeNs from, TimeNs to, std::vector<store::Sample>* out) const {
    size_t start = (head + buf.size() - count) % buf.size();
    for (size_t i = 0; i < count; ++i) {
      const auto& s = buf[(start + i) % buf.size()];
      if (s.t >= from && s.t <= to) out->push_back(s);
    }
  }
};

void BM_Ingest_Store(benchmark::State& state) {
  auto series = SeriesForQuery(Data().series.size());
  uint64_t bytes = 0, samples = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto s = OpenStore();
    auto refs = RegisterAll(*s, series);
    state.ResumeTiming();
    IngestByTick(series, [&](size_t i, TimeNs t, double v) {
      auto st = s->Append(refs[i], t, v);
      benchmark::DoNotOptimize(st);
    });
    state.PauseTiming();
    auto stats = s->Stats();
    bytes = stats.sample_bytes_in_memory;
    samples = stats.samples_in_memory;
    s.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * Data().total_samples));
  state.counters["bytes_per_sample_in_memory"] = samples ? double(bytes) / double(samples) : 0;
  state.counters["samples"] = double(samples);
}
BENCHMARK(BM_Ingest_Store)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Ingest_PlainRing(benchmark::State& state) {
  auto series = SeriesForQuery(Data().series.size());
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<PlainRing> rings;
    rings.reserve(series.size());
    for (auto* s : series) rings.emplace_back(s->samples.size());
    state.ResumeTiming();
    IngestByTick(series, [&](size_t i, TimeNs t, double v) { benchmark::DoNotOptimize(rings[i].Append(t, v)); });
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * Data().total_samples));
  state.counters["bytes_per_sample_in_memory"] = double(sizeof(store::Sample));
}
BENCHMARK(BM_Ingest_PlainRing)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Query1h1000Series_Store(benchmark::State& state) {
  auto series = SeriesForQuery(1000);
  auto s = OpenStore();
  auto refs = RegisterAll(*s, series);
  IngestByTick(series, [&](size_t i, TimeNs t, double v) { (void)s->Append(refs[i], t, v); });
  TimeNs from = series[0]->samples.front().t, to = series[0]->samples.back().t;
  auto selector = store::SeriesSelector::Parse("{__name__=~\"gpu_.*\"}");
  size_t got = 0;
  for (auto _ : state) {
    auto r = s->Select(*selector, from, to);
    got = 0;
    for (const auto& sd : *r) got += sd.samples.size();
    benchmark::DoNotOptimize(got);
  }
  state.counters["series"] = 1000;
  state.counters["samples_returned"] = double(got);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * got));
}
BENCHMARK(BM_Query1h1000Series_Store)->Unit(benchmark::kMillisecond);

void BM_Query1h1000Series_PlainRing(benchmark::State& state) {
  auto series = SeriesForQuery(1000);
  std::vector<PlainRing> rings;
  rings.reserve(series.size());
  for (auto* s : series) rings.emplace_back(s->samples.size());
  IngestByTick(series, [&](size_t i, TimeNs t, double v) { rings[i].Append(t, v); });
  TimeNs from = series[0]->samples.front().t, to = series[0]->samples.back().t;
  size_t got = 0;
  for (auto _ : state) {
    std::vector<std::vector<store::Sample>> out(rings.size());
    got = 0;
    for (size_t i = 0; i < rings.size(); ++i) {
      rings[i].Window(from, to, &out[i]);
      got += out[i].size();
    }
    benchmark::DoNotOptimize(out);
  }
  state.counters["samples_returned"] = double(got);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * got));
}
BENCHMARK(BM_Query1h1000Series_PlainRing)->Unit(benchmark::kMillisecond);

// Through the sink to disk, flushing every 10 s of data as the agent does by default, then
// compacting: the figures comparable with Prometheus' and VictoriaMetrics' sealed blocks.
void BM_DiskBytesPerSample(benchmark::State& state) {
  auto series = SeriesForQuery(Data().series.size());
  double flushed_bps = 0, compacted_bps = 0;
  for (auto _ : state) {
    auto dir = std::filesystem::temp_directory_path() / ("ithbat-bench-disk-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    {
      auto s = OpenStore(dir.string());
      auto refs = RegisterAll(*s, series);
      size_t ticks = series[0]->samples.size();
      for (size_t k = 0; k < ticks; ++k) {
        for (size_t i = 0; i < series.size(); ++i) (void)s->Append(refs[i], series[i]->samples[k].t, series[i]->samples[k].v);
        if ((k + 1) % 10 == 0) (void)s->Flush();
      }
      (void)s->Flush();
      flushed_bps = double(s->Stats().bytes_on_disk) / double(Data().total_samples);
      (void)s->Compact();
      compacted_bps = double(s->Stats().bytes_on_disk) / double(Data().total_samples);
    }
    std::filesystem::remove_all(dir);
  }
  state.counters["bytes_per_sample_flushed"] = flushed_bps;
  state.counters["bytes_per_sample_compacted"] = compacted_bps;
}
BENCHMARK(BM_DiskBytesPerSample)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace ithbat::bench

BENCHMARK_MAIN();
