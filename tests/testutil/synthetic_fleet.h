#pragma once
// Synthetic agent stores for tests of whatever reads stores the way the detectors do (the
// detectors, the investigator, the lab's checks): one in-memory store per node, series with one
// sample a second from a fixed time, events and step spans. Header-only: tests that include it
// link ithbat_store (through ithbat_detect or ithbat_sim_lab).
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "detect/fleet_view.h"
#include "store/store.h"

namespace ithbat::testutil {

inline constexpr TimeNs kS = kNsPerSec;
inline constexpr TimeNs kT0 = 1'800'000'000LL * kS;
using Labels = std::vector<std::pair<std::string, std::string>>;

class SyntheticFleet {
 public:
  store::Store& Node(const std::string& name) {
    auto& s = stores_[name];
    if (!s) {
      store::StoreOptions o;
      o.retention = 365LL * 24 * 3600 * kS;
      s = std::move(*store::Store::Open(o));
    }
    return *s;
  }
  // A counter/gauge series with these labels; `values[i]` at start + i × step.
  void Series(const std::string& node, const std::string& metric, MetricType type, const Labels& labels,
              const std::vector<double>& values, TimeNs start = kT0, TimeNs step = kS) {
    MetricDesc d{metric, "test series", "", type, {}};
    auto ls = LabelSet::From(labels);
    ASSERT_TRUE(ls.has_value());
    auto ref = Node(node).RegisterSeries(d, *ls);
    ASSERT_TRUE(ref.has_value()) << ref.error().message;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(Node(node).Append(*ref, start + static_cast<TimeNs>(i) * step, values[i]).has_value());
    }
  }
  void AddEvent(const std::string& node, Event e) { ASSERT_TRUE(Node(node).AppendEvent(std::move(e)).has_value()); }
  // A rank's loss event of process `pid` in job `job`.
  void Loss(const std::string& node, int32_t pid, int64_t step, double value, TimeNs t, const std::string& job = "",
            int32_t rank = 0) {
    Event e;
    e.identity.pid = pid;
    e.identity.job = job;
    e.identity.rank = rank;
    e.time = t;
    e.kind = EventKind::kLoss;
    e.source = "joblog";
    e.step = step;
    e.value = value;
    AddEvent(node, std::move(e));
  }
  void Step(const std::string& node, const std::string& job, int32_t rank, int64_t step, TimeNs start, TimeNs end) {
    ASSERT_TRUE(Node(node).RecordStep(job, rank, StepSpan{step, start, end}).has_value());
  }
  // A job ("77", 4 ranks, pids 100-103 on GPUs 0-3 of `node`) whose slowest rank rotates and
  // whose lateness follows its work — the stragglers detector's data_imbalance shape: rank t % 4
  // arrives last in tick t, 0.4 s behind, having launched kernels 1.5× as heavy (thread blocks)
  // two ticks before (its host runs ahead of its GPU by the launch queue). Ticks
  // [0, ticks) from kT0, GPUs 0.8 busy at a steady clock with no thermal event.
  void RotatingStraggler(const std::string& node, int ticks) {
    constexpr int kRanks = 4;
    for (int r = 0; r < kRanks; ++r) {
      std::vector<double> last(ticks), lag(ticks), aligned(ticks), grid(ticks), launches(ticks), util(ticks, 0.8),
          clock(ticks, 1980e6), thermal(ticks, 0);
      double l = 0, g = 0, lg = 0;
      for (int t = 0; t < ticks; ++t) {
        const bool is_last = t % kRanks == r;
        l += is_last ? 1 : 0;
        lg += is_last ? 0.4 : 0;
        g += (t + 2) % kRanks == r ? 1500 : 1000;
        last[t] = l;
        lag[t] = lg;
        aligned[t] = t + 1;
        grid[t] = g;
        launches[t] = 100.0 * (t + 1);
      }
      Labels lab = {{"job_id", "77"},
                    {"rank", std::to_string(r)},
                    {"local_rank", std::to_string(r)},
                    {"world_size", "4"},
                    {"pid", std::to_string(100 + r)},
                    {"gpu", std::to_string(r)},
                    {"gpu_uuid", "GPU-" + std::to_string(r)}};
      Series(node, "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, lab, last);
      Series(node, "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, lab, lag);
      Series(node, "ithbat_probe_nccl_aligned_total", MetricType::kCounter, lab, aligned);
      Series(node, "ithbat_probe_grid_blocks_total", MetricType::kCounter, lab, grid);
      auto launch_labels = lab;
      launch_labels.emplace_back("api", "cuLaunchKernel");
      Series(node, "ithbat_probe_launches_total", MetricType::kCounter, launch_labels, launches);
      Labels gpu = {{"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}};
      Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge, gpu, util);
      auto sm = gpu;
      sm.emplace_back("clock", "sm");
      Series(node, "ithbat_gpu_clock_hertz", MetricType::kGauge, sm, clock);
      auto ev = gpu;
      ev.emplace_back("reason", "hw_thermal_slowdown");
      Series(node, "ithbat_gpu_clock_event_active", MetricType::kGauge, ev, thermal);
    }
  }
  // An inference server (engine vllm, port 8000, pid 500; `labels` added to its series) on `node`:
  // `scrapes` scrapes a second from kT0, `engines` replicas each on its own GPU (its worker pid
  // 501 + e holds it), 0.5 requests/s of 2 s each per replica, a fifth of the time in prefill.
  struct ServeShape {
    int scrapes = 60;
    int engines = 2;
    double slots = 32;
    std::function<double(int)> running = [](int) { return 1.0; };
    std::function<double(int)> waiting = [](int) { return 3.0; };
    double kv = 0.05;  // NaN: the server exports no KV gauge (TGI)
    double util = 0.8;
  };
  void InferenceServer(const std::string& node, const ServeShape& s, const Labels& labels = {}) {
    Labels srv = {{"engine", "vllm"}, {"port", "8000"}, {"pid", "500"}};
    srv.insert(srv.end(), labels.begin(), labels.end());
    const auto n = static_cast<size_t>(s.scrapes);
    Series(node, "ithbat_serving_up", MetricType::kGauge, srv, std::vector<double>(n, 1));
    Series(node, "ithbat_serving_max_num_seqs", MetricType::kGauge, srv, std::vector<double>(n, s.slots));
    Series(node, "ithbat_serving_tensor_parallel_size", MetricType::kGauge, srv, std::vector<double>(n, 1));
    for (int e = 0; e < s.engines; ++e) {
      Labels l = srv;
      l.emplace_back("engine_index", std::to_string(e));
      std::vector<double> run, wait, kv, blocks, prefill, decode, reqs;
      for (int i = 0; i < s.scrapes; ++i) {
        run.push_back(s.running(i));
        wait.push_back(s.waiting(i));
        kv.push_back(s.kv);
        blocks.push_back(8000);
        prefill.push_back(0.2 * i);
        decode.push_back(0.8 * i);
        reqs.push_back(0.5 * i);
      }
      Series(node, "ithbat_serving_requests_running", MetricType::kGauge, l, run);
      Series(node, "ithbat_serving_requests_waiting", MetricType::kGauge, l, wait);
      if (!std::isnan(s.kv)) Series(node, "ithbat_serving_kv_cache_usage_ratio", MetricType::kGauge, l, kv);
      Series(node, "ithbat_serving_kv_cache_blocks", MetricType::kGauge, l, blocks);
      Series(node, "ithbat_serving_prefill_seconds_total", MetricType::kCounter, l, prefill);
      Series(node, "ithbat_serving_decode_seconds_total", MetricType::kCounter, l, decode);
      Series(node, "ithbat_serving_time_to_first_token_requests_total", MetricType::kCounter, l, reqs);
      const Labels gpu = {{"gpu", std::to_string(e)}, {"gpu_uuid", "GPU-" + std::to_string(e)}};
      Labels proc = gpu;
      proc.emplace_back("pid", std::to_string(501 + e));
      Series(node, "ithbat_gpu_process_memory_used_bytes", MetricType::kGauge, proc, std::vector<double>(n, 6e10));
      Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge, gpu, std::vector<double>(n, s.util));
    }
  }
  std::map<std::string, std::unique_ptr<store::Store>> TakeStores() { return std::move(stores_); }
  detect::FleetView TakeView() { return detect::FleetView::Owning(TakeStores()); }

 private:
  std::map<std::string, std::unique_ptr<store::Store>> stores_;
};

}  // namespace ithbat::testutil
