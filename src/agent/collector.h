#pragma once
// The contract between a source and the agent. A collector reads one source (NVML, /proc,
// eBPF maps, a log) and writes to a Sink. The runtime owns threads and cadence: it calls
// Collect(tick_time) from a worker thread it owns; a collector spawns no thread of its own
// unless it must block on the kernel (and then says so in its README).
//
// Lifecycle: Init(sink) → Start() → Collect(t)… → Stop(). The public methods are non-virtual
// fronts that add the same state machine, timing and error accounting to every collector;
// sources implement the protected *Impl methods.
//
// Errors: a Collect that returns an error counts one error and marks the collector down until
// a later Collect succeeds. Partial failures (one malformed file among ten) go through
// ReportError(): counted and logged, the collector stays up. A Collect that does not return
// within the runtime's deadline is marked down by the watchdog; the other collectors go on.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::agent {

enum class CollectorState : uint8_t { kCreated, kInitialized, kRunning, kStopped, kFailed };

struct CollectorHealth {
  CollectorState state = CollectorState::kCreated;
  bool up = false;                  // the last Collect finished in time without error
  uint64_t collects = 0;
  uint64_t errors = 0;              // failed Collects + ReportError calls + watchdog timeouts
  uint64_t timeouts = 0;            // Collects the watchdog found running past the deadline
  TimeNs last_duration = 0;         // ns, of the last finished Collect
  TimeNs last_success = 0;          // tick time of the last successful Collect
  std::string last_error;           // the last error of the latest Collect (whole or partial); empty when it had none
  std::string degraded;             // why the source works only in part ("" = fully working)
};

class Collector {
 public:
  virtual ~Collector() = default;
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  const std::string& name() const { return name_; }
  // Every metric this collector may produce (schemas are data: /metrics HELP lines and
  // docs/metrics.md come from here). Must not depend on what the source holds.
  virtual std::vector<MetricDesc> Describe() const = 0;

  Status Init(Sink& sink);
  Status Start();
  Status Collect(TimeNs tick_time);
  void Stop();

  CollectorHealth Health() const;
  // Called by the runtime's watchdog when a Collect runs past its deadline.
  void MarkTimedOut(std::string_view reason);

 protected:
  explicit Collector(std::string name) : name_(std::move(name)) {}

  virtual Status InitImpl(Sink& sink) = 0;
  virtual Status StartImpl() { return Ok(); }
  virtual Status CollectImpl(TimeNs tick_time) = 0;
  virtual void StopImpl() {}

  // A partial failure: counted, logged (rate-limited per collector), the collector stays up.
  void ReportError(const Error& error);
  // Why the source works only in part ("" clears it): shown in health and self-metrics.
  void SetDegraded(std::string reason);

 private:
  std::string name_;
  mutable std::mutex mu_;
  CollectorHealth health_;
  TimeNs last_logged_error_ = 0;    // monotonic ns of the last logged error line (0 = never)
  uint64_t suppressed_errors_ = 0;  // error lines not logged since then (rate limit)
  bool partial_error_this_collect_ = false;  // ReportError was called during the current Collect
};

}  // namespace ithbat::agent
