#pragma once
// The agent's engine: owns the collectors, their threads and their cadence.
//
// Each collector gets one worker thread owned by the runtime; a single ticker thread wakes the
// workers at their interval (tick times are aligned to the interval grid, so every sample of a
// tick carries the same timestamp and the store's delta-of-delta time costs one bit). A
// watchdog marks a collector whose Collect runs past `collect_deadline` as down (timeout
// counted, reason logged) and skips its ticks until that Collect returns; the other collectors
// are not affected. The runtime also writes its own self-metrics each tick:
//   ithbat_collector_up{collector}, ithbat_collector_errors_total{collector},
//   ithbat_collector_timeouts_total{collector}, ithbat_collector_last_collect_duration_seconds{collector},
//   ithbat_collector_degraded{collector}
// and calls `maintenance` (store flush, retention) every `maintenance_interval` on its own
// thread, so a slow disk never delays collection.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/collector.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::agent {

struct RuntimeOptions {
  TimeNs interval = kNsPerSec;              // default collection interval
  TimeNs collect_deadline = 5 * kNsPerSec;  // watchdog: a Collect running longer is "hung"
  TimeNs maintenance_interval = 10 * kNsPerSec;
  std::function<void(TimeNs now)> maintenance;  // e.g. store Flush + EnforceRetention
  // Light work between maintenance rounds, on the maintenance thread (e.g. giving freed heap
  // pages back to the kernel): every upkeep_interval, skipped when a maintenance round is due.
  TimeNs upkeep_interval = kNsPerSec;
  std::function<void()> upkeep;
};

struct CollectorStatus {
  std::string name;
  TimeNs interval = 0;
  CollectorHealth health;
};

class Runtime {
 public:
  Runtime(Sink& sink, RuntimeOptions options);
  ~Runtime();  // stops if running
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Before Start only. interval 0 = the runtime's default.
  ithbat::Status Add(std::unique_ptr<Collector> collector, TimeNs interval = 0);
  // Inits and starts every collector. One whose Init or Start fails is logged and reported
  // down (state kFailed); the others run. Errors only if the runtime itself cannot start.
  ithbat::Status Start();
  // Stops the ticker, waits for workers up to the deadline (a hung Collect is abandoned:
  // its thread is detached and the process may exit under it), calls Stop() on collectors,
  // runs maintenance a last time.
  void Stop();

  // (Status is also this method's name, hence ithbat::Status for the return types above.)
  std::vector<CollectorStatus> Status() const;
  // Every metric the runtime and its collectors may produce (for /metrics HELP text and
  // docs/metrics.md), sorted by name.
  std::vector<MetricDesc> DescribeAll() const;
  // The same, grouped for RenderMetricsDoc: {"agent", DescribeSelf()} first, then each
  // collector in the order added.
  std::vector<std::pair<std::string, std::vector<MetricDesc>>> DescribeByCollector() const;
  // The runtime's own self-metrics.
  static std::vector<MetricDesc> DescribeSelf();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Renders docs/metrics.md: one table row per metric (name, type, unit, labels, help), grouped
// by the collector that declares it. Deterministic, so CI can diff it against the file.
std::string RenderMetricsDoc(const std::vector<std::pair<std::string, std::vector<MetricDesc>>>& by_collector);

}  // namespace ithbat::agent
