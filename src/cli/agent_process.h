#pragma once
// One agent assembled in-process: the store (memory, or with history under --data-dir), the
// runtime with the host and store-statistics collectors, and optionally the HTTP server. The
// same assembly serves `ithbat agent`, `ithbat agent --once` and `ithbat demo`, so what the
// demo shows is what a deployed agent does.
//
// Lifecycle: Start() opens the store, starts collection, then (serve = true) binds the HTTP
// server; Stop() undoes it in reverse: stop serving, stop collecting (the runtime's last
// maintenance flushes), flush once more. The destructor stops. Not thread-safe: one owner.
//
// Errors from Start: the store's (e.g. kUnavailable when another agent holds the data
// directory), the token file's, the server's (kUnavailable when the address is taken).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/runtime.h"
#include "agent/logged_steps.h"
#include "agent/tracked_processes.h"
#include "cli/agent_options.h"
#include "core/metric.h"
#include "core/result.h"
#include "investigate/node_diagnoser.h"
#include "serve/http_server.h"
#include "store/store.h"

namespace ithbat::cli {

// The node-local engine's options from the agent's (lookback, resolve time, list price).
investigate::NodeDiagnoserOptions MakeDiagnoserOptions(const AgentOptions& options);

class AgentProcess {
 public:
  static Result<std::unique_ptr<AgentProcess>> Start(const AgentOptions& options, bool serve);
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // Idempotent.
  void Stop();

  // Waits until every collector that started has finished at least `collects` collections
  // (failed collectors are not waited for), at most `timeout`. False on timeout.
  bool WaitForCollects(uint64_t collects, TimeNs timeout) const;

  // What SIGHUP applies from freshly read options: the log level and format, and the bearer
  // token (its file read again; a file that is now refused keeps the old token and fails the
  // reload). Returns the settings that changed but take effect only at the next start: the
  // collectors, the store and the listening address are built once.
  Result<std::vector<std::string>> Reload(const AgentOptions& next);

  // The bound port (0 when not serving).
  uint16_t port() const;
  const store::Store& store() const { return *store_; }
  const agent::Runtime& runtime() const { return *runtime_; }
  const AgentOptions& options() const { return options_; }
  // The node-local diagnosis engine (runs when options().diagnose_interval > 0, never with --once).
  const investigate::NodeDiagnoser& diagnoser() const { return diagnoser_; }

 private:
  explicit AgentProcess(AgentOptions options)
      : options_(std::move(options)), diagnoser_(MakeDiagnoserOptions(options_)) {}
  void Maintain(TimeNs now);

  AgentOptions options_;
  std::unique_ptr<store::Store> store_;
  // Declared before the runtime: collectors hold a pointer to it until the runtime stops them.
  agent::TrackedProcesses tracked_;
  agent::LoggedSteps logged_steps_;  // joblog publishes, probes read (step numbering)
  // Declared before the runtime too: the diagnosis collector and the server borrow it.
  investigate::NodeDiagnoser diagnoser_;
  std::unique_ptr<agent::Runtime> runtime_;
  std::unique_ptr<serve::HttpServer> server_;
  bool stopped_ = false;
};

// What /metrics (and `agent --once`) add to the store's series: cluster and node labels when
// --cluster and --node were given, dcgm-exporter's names with --dcgm-exporter-names.
serve::ExpositionOptions ExpositionOptionsOf(const AgentOptions& options);

// The store options an agent with these options opens its store with.
store::StoreOptions MakeStoreOptions(const AgentOptions& options);

// Every metric the agent can produce, grouped by the collector that declares it (the runtime's
// self-metrics first), as RenderMetricsDoc wants it. Builds the collectors without starting
// anything.
Result<std::vector<std::pair<std::string, std::vector<MetricDesc>>>> DescribeAgentMetrics();

}  // namespace ithbat::cli
