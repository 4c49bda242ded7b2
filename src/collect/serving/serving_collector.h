#pragma once
// The serving collector: finds inference servers (vLLM, SGLang, TGI) on the node from their
// command lines, scrapes each one's Prometheus /metrics over loopback, and writes the
// normalised ithbat_serving_* series (normalise.h) plus, per server, ithbat_serving_up and the
// limits it was started with (flags, discovery.h).
//
// Discovery cadence: every Collect lists the numeric entries of the proc root (one readdir)
// and reads the cmdline only of pids not seen before; every rescan_every_ticks Collects it
// forgets what it knew and reads every cmdline again (a pid reused between two ticks, or a
// cmdline rewritten by the process, shows up then). A pid that names no server when it first
// appears is read again on its next exec_grace_ticks ticks: a launcher forks, then execs the
// server, and a pid caught between the two still shows the launcher's cmdline (a lab run on a
// loaded 2-core host found its server 30 s late that way).
//
// Threads: scrapes block on the network, so a Collect runs up to max_concurrent_scrapes of
// them on short-lived threads it joins before returning; no thread outlives a Collect. One
// scrape (net::HttpClient) is bounded by connect_timeout_ms, scrape_deadline_ms (the whole
// exchange, against a server that trickles), max_header_bytes and max_body_bytes; the body is
// never decompressed.
//
// Who is scraped: a server found by its command line is scraped only when one of its processes
// holds a socket listening on its port in the agent's network namespace (listener.h): a
// process anyone can name `vllm serve --port P` must not send a root agent to another program's
// port P. Otherwise the server is reported (kPermission) and ithbat_serving_up is 0. The
// sockets are the kernel's (netlink), the descriptors are read under procfs. And it is scraped
// only when it belongs to the node's workload (workload_tie.h): one of its processes or their
// descendants is a GPU process (ServingOptions::gpu_processes, NVML's list), or its cgroup names
// a Slurm job or a Kubernetes pod. An untied server is reported (kPermission) and not contacted.
//
// Roots: ServingOptions::procfs (default /proc) must be the /proc of the pid namespace the
// servers live in, and host (default 127.0.0.1) must reach their ports: run the agent in the
// host's network and pid namespaces, or point procfs at a fixture tree in tests.
//
// Lifecycle (agent::Collector): Create → Init(sink) checks that procfs is a directory
// (kNotFound) → Collect(t)… on the runtime's worker thread, one at a time. The sink must
// outlive the collector.
//
// Errors: a proc root that cannot be listed fails the Collect. A server whose scrape or parse
// fails is one ReportError naming it (engine, port, pid) and ithbat_serving_up 0; the others go
// on. Malformed lines in a body are counted and reported once per scrape; the good lines are
// used. A series the sink refuses, or one beyond max_series, is reported and skipped.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "agent/collector.h"
#include "agent/tracked_processes.h"
#include "collect/serving/discovery.h"
#include "collect/serving/exposition.h"
#include "collect/serving/normalise.h"
#include "collect/serving/workload_tie.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect {

struct ServingOptions {
  std::filesystem::path procfs = "/proc";
  std::string host = "127.0.0.1";
  uint32_t rescan_every_ticks = 30;
  uint32_t exec_grace_ticks = 2;  // 0 = the default
  int connect_timeout_ms = 500;
  int scrape_deadline_ms = 2000;
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = 8 << 20;
  size_t max_servers = 32;
  size_t max_concurrent_scrapes = 4;
  size_t max_series = 4096;
  serving::ExpositionLimits limits;
  // The node's GPU processes: the GPU collector publishes NVML's process lists here (source
  // "gpu"). nullptr = none known: only a job's cgroup ties a server to the workload. Must
  // outlive the collector.
  const agent::TrackedProcesses* gpu_processes = nullptr;
};

// GET http://host:port/metrics, bounded as described above. Errors: kUnavailable (connection
// refused), kIo (reset, or not HTTP), kResourceExhausted (headers or body over their bounds),
// kTimeout (deadline), kInvalidArgument (an HTTP status other than 200). Never throws.
Result<std::string> ScrapeMetrics(const std::string& host, uint16_t port, const ServingOptions& options);

class ServingCollector final : public agent::Collector {
 public:
  // Never fails; zero or negative bounds in options mean the defaults.
  static std::unique_ptr<ServingCollector> Create(ServingOptions options);

  std::vector<MetricDesc> Describe() const override;
  const ServingOptions& options() const { return options_; }

  // One server's /metrics body, scraped at t and parsed (ParseExposition with options().limits),
  // into the sink: what Collect does with every scrape it makes, public for `ithbat replay
  // --scrape` (a body someone saved, parsed once to tell its engine). Needs Init. Writes the
  // normalised series and ithbat_serving_up (0 when the parse failed: a body over max_body_bytes)
  // and returns the problems an agent would report: the parse's failure, malformed lines
  // skipped, samples over the bound ignored.
  std::vector<Error> IngestScrape(const serving::ServerInfo& server, const Result<serving::Exposition>& expo,
                                  TimeNs t);

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  enum ServerSeries : uint8_t {
    kUp, kFlagMaxNumSeqs, kFlagMaxBatchedTokens, kFlagMaxModelLen, kFlagTensorParallel, kFlagMaxConcurrent,
    kFlagPrefixCaching, kFlagChunkedPrefill, kServerSeriesCount,
  };
  struct Counters {
    double hits = 0;
    double queries = 0;
    bool have = false;
  };

  explicit ServingCollector(ServingOptions options);

  Status Discover();
  // Whether one of the server's processes (its pid, then others with its engine and port: a
  // vLLM API server's workers share its command line) holds the socket listening on its port
  // (listener.h). Only a positive answer is cached, until the next rescan or the pid's exit.
  Result<bool> ListenerVerified(const serving::ServerInfo& server);
  // The processes of a server: its pid first, then others with its engine and port (at most 16).
  std::vector<int32_t> ServerPids(const serving::ServerInfo& server) const;
  // Whether the server belongs to the node's workload (workload_tie.h). Only a positive answer
  // is cached, until the next rescan or the pid's exit.
  Result<bool> TiedToWorkload(const serving::ServerInfo& server);
  void Emit(const MetricDesc& desc, const serving::ServerInfo& server, std::string_view engine_index,
            std::string_view model, TimeNs t, double value);
  void EmitServer(const serving::ServerInfo& server, bool up, TimeNs t);
  void EmitNormalised(const serving::ServerInfo& server, const std::vector<serving::NormalSample>& samples, TimeNs t);

  ServingOptions options_;
  std::vector<MetricDesc> server_descs_;  // by ServerSeries
  Sink* sink_ = nullptr;
  uint64_t ticks_ = 0;
  std::vector<int32_t> known_pids_;                      // sorted: the pids the last Collect listed
  std::map<int32_t, uint32_t> young_pids_;               // non-server pid → cmdline reads still due
  std::map<int32_t, serving::ServerInfo> servers_;       // the servers among them
  std::set<std::pair<int32_t, uint16_t>> listeners_;     // (pid, port) seen holding the port's listening socket
  std::set<int32_t> tied_;                               // server pids found tied to the workload
  std::set<int32_t> tie_logged_;                         // server pids whose tie was logged
  uint64_t gpu_generation_ = 0;                          // of gpu_processes when gpu_pids_ was taken
  std::vector<serving::GpuProcessLine> gpu_lines_;       // the GPU processes and their ancestors
  bool gpu_lines_stale_ = true;                          // read again at the next check (a rescan)
  // What is kept per server (engine, port, pid), dropped when the server is gone so that
  // restarts (new pids) do not pile up state.
  struct ServerState {
    std::unordered_map<std::string, SeriesRef> refs;  // series key → ref
    std::unordered_set<std::string> refused;          // series keys the sink refused
    std::map<std::pair<std::string, std::string>, Counters> counters;  // (engine_index, model) → last scrape
  };
  using ServerKey = std::tuple<serving::Engine, uint16_t, int32_t>;
  ServerState& StateOf(const serving::ServerInfo& server);
  std::map<ServerKey, ServerState> states_;
  size_t series_count_ = 0;  // refs across states_
  size_t append_failures_ = 0;
  std::string first_append_error_;
  size_t over_series_bound_ = 0;
};

}  // namespace ithbat::collect
