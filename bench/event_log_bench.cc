// The event log with sealed blocks against the same log holding every event unsealed (the form
// it had before blocks: one packed entry each), on what a busy job sends it: a Megatron-style
// iteration kept 20 times a second as one step event and six metric events (the agent beside a
// job printing 10,000 lines/s, docs/performance.md "The agent's memory"). Both run in the same
// process: the ratios are the figures to compare, not the absolute times.
//
//   build/bench/event_log_bench
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "store/event_log.h"

namespace ithbat::bench {
namespace {

// 15 minutes at 20 kept iterations a second: what the live agent's engine looks back over.
constexpr int64_t kIterations = 15 * 60 * 20;

const std::vector<Event>& JobEvents() {
  static const std::vector<Event> events = [] {
    std::vector<Event> out;
    const char* names[] = {"loss_lm", "learning_rate", "grad_norm", "loss_scale", "step_time", "samples"};
    for (int64_t i = 1; i <= kIterations; ++i) {
      Event s;
      s.time = 1'700'000'000'000'000'000 + i * 50'000'000;
      s.kind = EventKind::kStep;
      s.identity.node = "gpu-node-0001";
      s.identity.job = "4242";
      s.identity.rank = 0;
      s.identity.local_rank = 0;
      s.identity.world_size = 8;
      s.identity.pid = 31337;
      s.identity.gpu_index = 0;
      s.identity.gpu_uuid = "GPU-0b5e7a4c-1d2e-3f40-5162-738495a6b7c8";
      s.source = "joblog";
      s.name = "iteration";
      s.step = i * 500;
      s.attrs = {{"total_steps", "1000000"}};
      out.push_back(s);
      for (const char* name : names) {
        Event m = s;
        m.kind = EventKind::kTrainMetric;
        m.name = name;
        m.attrs.clear();
        m.value = 3.0 + static_cast<double>(i % 97) / 1000;
        out.push_back(m);
      }
    }
    return out;
  }();
  return events;
}

// range(0): 1 seals blocks (the default), 0 never seals (every event one packed entry).
store::EventLog::Sealing SealingOf(const benchmark::State& state) {
  store::EventLog::Sealing s;
  if (state.range(0) == 0) s.events_per_block = s.max_head_blocks = SIZE_MAX / 4;
  return s;
}

void Fill(store::EventLog& log) {
  for (const Event& e : JobEvents()) log.Append(e);
}

void BM_EventLogAppend(benchmark::State& state) {
  double bytes_per_event = 0;
  for (auto _ : state) {
    store::EventLog log(10'000'000, 1024, 0, SealingOf(state));
    Fill(log);
    bytes_per_event = double(log.bytes()) / double(log.size());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * JobEvents().size()));
  state.counters["bytes_per_event"] = bytes_per_event;
  state.counters["events"] = double(JobEvents().size());
}
BENCHMARK(BM_EventLogAppend)->ArgName("sealed")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// What the numerics detectors ask each round: one job's training metrics over the window.
void BM_EventLogQueryJobMetrics(benchmark::State& state) {
  store::EventLog log(10'000'000, 1024, 0, SealingOf(state));
  Fill(log);
  const store::EventQuery query{.kinds = {EventKind::kTrainMetric}, .job = "4242", .limit = 1'000'000};
  size_t got = 0;
  for (auto _ : state) {
    got = log.Query(query).size();
    benchmark::DoNotOptimize(got);
  }
  state.counters["events_returned"] = double(got);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * got));
}
BENCHMARK(BM_EventLogQueryJobMetrics)->ArgName("sealed")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// A narrow question over the whole log: the last minute's steps (the window is at the newest
// end, so blocks before it are skipped by their time range).
void BM_EventLogQueryLastMinuteSteps(benchmark::State& state) {
  store::EventLog log(10'000'000, 1024, 0, SealingOf(state));
  Fill(log);
  const TimeNs newest = JobEvents().back().time;
  const store::EventQuery query{.kinds = {EventKind::kStep}, .from = newest - 60'000'000'000, .to = newest};
  size_t got = 0;
  for (auto _ : state) {
    got = log.Query(query).size();
    benchmark::DoNotOptimize(got);
  }
  state.counters["events_returned"] = double(got);
}
BENCHMARK(BM_EventLogQueryLastMinuteSteps)->ArgName("sealed")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ithbat::bench

BENCHMARK_MAIN();
