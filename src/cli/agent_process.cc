#include "cli/agent_process.h"

#include <chrono>
#include <thread>

#include <malloc.h>

#include "agent/logging.h"
#include "agent/store_stats_collector.h"
#include "cli/diagnosis_collector.h"
#include "collect/gpu/gpu_collector.h"
#include "collect/host/host_collector.h"
#include "collect/joblog/joblog_collector.h"
#include "collect/kmsg/kmsg_collector.h"
#include "collect/nccl_profiler/nccl_profiler_collector.h"
#include "collect/node/node_collectors.h"
#include "collect/node/topology.h"
#include "collect/probes/probes_collector.h"
#include "collect/sched_io/sched_io_collector.h"
#include "collect/serving/serving_collector.h"
#include "collect/slurm/slurm_hook_collector.h"

namespace ithbat::cli {
namespace {

// Not for --once: two ticks hold no history to diagnose, and waiting for the diagnosis
// collector's (slower) ticks would only delay the answer.
bool RunsDiagnosis(const AgentOptions& options) { return options.diagnose_interval > 0 && !options.once; }

// The collectors every agent runs. A new collector is added here and nowhere else, so the
// agent, `--once`, the demo and docs/metrics.md always agree.
// The node this agent's diagnoses name and its /api/v1/version reports: --node (the CLI defaults
// it to the host name), else the host name for options built in code.
std::string NodeNameOf(const AgentOptions& options) { return options.node.empty() ? HostName() : options.node; }

}  // namespace

serve::ExpositionOptions ExpositionOptionsOf(const AgentOptions& options) {
  serve::ExpositionOptions e;
  if (!options.cluster.empty()) e.target_labels.emplace_back("cluster", options.cluster);
  if (options.node_given) e.target_labels.emplace_back("node", NodeNameOf(options));
  e.dcgm_names = options.dcgm_exporter_names;
  e.hostname = NodeNameOf(options);
  return e;
}

namespace {

Status AddCollectors(agent::Runtime& runtime, const store::Store& store, const AgentOptions& options,
                     agent::TrackedProcesses& tracked, agent::LoggedSteps& logged_steps,
                     investigate::NodeDiagnoser& diagnoser) {
  collect::HostOptions host;
  host.procfs = options.procfs;
  if (auto s = runtime.Add(collect::HostCollector::Create(std::move(host))); !s) return s;
  // A node without NVIDIA's library (or without GPUs) still runs every other collector: the
  // GPU collector's Init fails with kNotFound, the runtime reports it down and goes on.
  collect::GpuOptions gpu;
  gpu.library = options.nvml_library;
  gpu.tracked = &tracked;
  if (auto s = runtime.Add(collect::GpuCollector::Create(std::move(gpu))); !s) return s;
  if (!options.kmsg.empty()) {
    collect::KmsgOptions kmsg;
    kmsg.path = options.kmsg;
    if (auto s = runtime.Add(collect::KmsgCollector::Create(std::move(kmsg))); !s) return s;
  }
  // Slurm's word on the node's jobs (prolog/epilog records): start, end, exit code, account.
  // `--once` reads the records without removing them: the running agent still gets them.
  if (!options.slurm_spool.empty()) {
    collect::SlurmHookOptions slurm;
    slurm.spool_dir = options.slurm_spool;
    slurm.remove_read = !options.once;
    if (auto s = runtime.Add(collect::SlurmHookCollector::Create(std::move(slurm))); !s) return s;
  }
  collect::DiskOptions disk;
  disk.procfs = options.procfs;
  if (auto s = runtime.Add(collect::DiskCollector::Create(std::move(disk))); !s) return s;
  collect::NfsOptions nfs;
  nfs.procfs = options.procfs;
  if (auto s = runtime.Add(collect::NfsCollector::Create(std::move(nfs))); !s) return s;
  collect::InfinibandOptions ib;
  ib.sysfs = options.sysfs;
  if (auto s = runtime.Add(collect::InfinibandCollector::Create(std::move(ib))); !s) return s;
  collect::TopologyOptions topology;
  topology.sysfs = options.sysfs;
  if (auto s = runtime.Add(collect::TopologyCollector::Create(std::move(topology))); !s) return s;
  // Job output: the tracked (GPU) processes' stdout/stderr through eBPF, or followed files. A
  // node where eBPF cannot load keeps the collector, degraded, with the reason in its health.
  {
    collect::joblog::JobLogOptions joblog;
    joblog.mode = collect::joblog::ParseCaptureMode(options.joblog).value_or(collect::joblog::CaptureMode::kEbpf);
    for (const auto& spec : options.joblog_tail) {
      if (auto t = collect::joblog::ParseTailSpec(spec); t) joblog.tail.push_back(std::move(*t));
    }
    joblog.format = options.joblog_format;
    joblog.patterns = options.joblog_user_patterns;
    if (auto list = collect::joblog::ParseOptOutList(options.joblog_opt_out); list) joblog.opt_out = std::move(*list);
    joblog.tracked = &tracked;
    joblog.logged_steps = &logged_steps;
    auto collector = collect::joblog::JobLogCollector::Create(std::move(joblog));
    if (!collector) return std::unexpected(collector.error());
    if (auto s = runtime.Add(std::move(*collector)); !s) return s;
  }
  // CUDA/NCCL uprobes on the same tracked processes: attached per process when it maps
  // libcuda/libnccl; a kernel that refuses leaves the collector degraded with the reason.
  {
    collect::probes::ProbesOptions probes;
    probes.tracked = &tracked;
    probes.logged_steps = &logged_steps;
    probes.budget = options.probe_budget;
    probes.cost_ns = options.probe_cost_ns;
    auto collector = collect::probes::ProbesCollector::Create(std::move(probes));
    if (!collector) return std::unexpected(collector.error());
    if (auto s = runtime.Add(std::move(*collector)); !s) return s;
  }
  // Host scheduling (off-CPU time by reason) and file I/O per mount of the same tracked
  // processes and their trees; a kernel that refuses leaves it degraded with the reason.
  if (options.sched_io) {
    collect::sched_io::SchedIoOptions sched_io;
    sched_io.tracked = &tracked;
    auto collector = collect::sched_io::SchedIoCollector::Create(std::move(sched_io));
    if (!collector) return std::unexpected(collector.error());
    if (auto s = runtime.Add(std::move(*collector)); !s) return s;
  }
  // GPU-timed collectives from jobs that opt into libnccl-profiler-ithbat.so (its shared-memory
  // ring, found through the tracked processes' maps).
  {
    collect::nccl_profiler::NcclProfilerOptions nccl_profiler;
    nccl_profiler.tracked = &tracked;
    auto collector = collect::nccl_profiler::NcclProfilerCollector::Create(std::move(nccl_profiler));
    if (!collector) return std::unexpected(collector.error());
    if (auto s = runtime.Add(std::move(*collector)); !s) return s;
  }
  // Inference servers are processes: discovered in the agent's real /proc (the pids it can
  // reach), never in the --procfs root, which is for node statistics. Scraped only when tied to
  // the workload: a GPU process in their tree (the GPU collector's list) or a job's cgroup.
  {
    collect::ServingOptions serving;
    serving.gpu_processes = &tracked;
    if (auto s = runtime.Add(collect::ServingCollector::Create(std::move(serving))); !s) return s;
  }
  if (auto s = runtime.Add(std::make_unique<agent::StoreStatsCollector>(store)); !s) return s;
  // The node-local diagnosis engine over the same store, on its own cadence; last, so its
  // rounds read what the collectors above wrote.
  if (RunsDiagnosis(options)) {
    return runtime.Add(std::make_unique<DiagnosisCollector>(diagnoser, store, NodeNameOf(options)),
                       options.diagnose_interval);
  }
  return Ok();
}

}  // namespace

store::StoreOptions MakeStoreOptions(const AgentOptions& options) {
  store::StoreOptions so;
  so.retention = options.retention;
  so.memory_budget_bytes = options.memory_budget_bytes;
  so.data_dir = options.data_dir;
  so.disk_budget_bytes = options.disk_budget_bytes;
  return so;
}

Result<std::unique_ptr<AgentProcess>> AgentProcess::Start(const AgentOptions& options, bool serve) {
  auto log = agent::GetLogger("cli");
  std::string token;
  if (serve && !options.token_file.empty()) {
    auto t = ReadTokenFile(options.token_file);
    if (!t) return std::unexpected(t.error());
    token = std::move(*t);
  }

  std::unique_ptr<AgentProcess> p(new AgentProcess(options));
  auto store = store::Store::Open(MakeStoreOptions(options));
  if (!store) {
    return MakeErrorF(store.error().code, "cannot open the store{}: {}",
                      options.data_dir.empty() ? "" : " in " + options.data_dir, store.error().message);
  }
  p->store_ = std::move(*store);
  if (!options.data_dir.empty()) {
    const auto stats = p->store_->Stats();
    log->info("store opened in {}: {} series, {} bytes on disk", options.data_dir, stats.series,
              stats.bytes_on_disk);
  }

  agent::RuntimeOptions ro;
  ro.interval = options.interval;
  ro.collect_deadline = options.collect_deadline;
  ro.maintenance_interval = options.flush_interval;
  // Between flushes, the freed heap pages go back once a second: a job printing thousands of
  // lines a second churns megabytes a second through the capture thread's and the collector's
  // allocations, and glibc keeps the freed pages mapped until trimmed (docs/performance.md,
  // "The agent's memory": 0.6-4.7 MiB less median RSS at 10,000 lines/s, no CPU change).
  ro.upkeep_interval = kNsPerSec;
  ro.upkeep = [] { malloc_trim(0); };
  AgentProcess* self = p.get();
  ro.maintenance = [self](TimeNs now) { self->Maintain(now); };
  p->runtime_ = std::make_unique<agent::Runtime>(*p->store_, std::move(ro));
  if (auto s = AddCollectors(*p->runtime_, *p->store_, options, p->tracked_, p->logged_steps_, p->diagnoser_); !s)
    return std::unexpected(s.error());
  if (auto s = p->runtime_->Start(); !s) return std::unexpected(s.error());

  if (serve) {
    serve::ServerOptions so;
    so.bind_address = options.listen_address;
    so.port = options.listen_port;
    so.bearer_token = std::move(token);
    so.node = NodeNameOf(options);
    so.exposition = ExpositionOptionsOf(options);
    const agent::Runtime* rt = p->runtime_.get();
    serve::ServerSources sources;
    sources.collectors = [rt] { return rt->Status(); };
    sources.metric_descs = [rt] { return rt->DescribeAll(); };
    if (RunsDiagnosis(options)) {
      const investigate::NodeDiagnoser* diagnoser = &p->diagnoser_;
      sources.diagnoses = [diagnoser] { return diagnoser->Current(); };
    }
    auto server = serve::HttpServer::Start(*p->store_, std::move(sources), std::move(so));
    if (!server) {
      p->Stop();
      return MakeErrorF(server.error().code, "cannot serve on {}:{}: {}", options.listen_address,
                        options.listen_port, server.error().message);
    }
    p->server_ = std::move(*server);
    const bool v6 = options.listen_address.find(':') != std::string::npos;
    log->info("listening on {}{}{}:{}{}", v6 ? "[" : "", options.listen_address, v6 ? "]" : "",
              p->server_->port(), options.token_file.empty() ? "" : " (bearer token required)");
  }
  return p;
}

AgentProcess::~AgentProcess() { Stop(); }

namespace {

// The settings a running agent cannot change (collectors, store and server are built once),
// named as in the config file, that differ between `a` and `b`.
std::vector<std::string> RestartSettingsChanged(const AgentOptions& a, const AgentOptions& b) {
  std::vector<std::string> changed;
  auto check = [&](const char* name, bool same) {
    if (!same) changed.emplace_back(name);
  };
  check("listen", a.listen_address == b.listen_address && a.listen_port == b.listen_port);
  check("procfs", a.procfs == b.procfs);
  check("sysfs", a.sysfs == b.sysfs);
  check("nvml-library", a.nvml_library == b.nvml_library);
  check("kmsg", a.kmsg == b.kmsg);
  check("node", a.node == b.node);
  check("cluster", a.cluster == b.cluster);
  check("dcgm-exporter-names", a.dcgm_exporter_names == b.dcgm_exporter_names);
  check("interval", a.interval == b.interval);
  check("collect-deadline", a.collect_deadline == b.collect_deadline);
  check("data-dir", a.data_dir == b.data_dir);
  check("retention", a.retention == b.retention);
  check("memory-budget", a.memory_budget_bytes == b.memory_budget_bytes);
  check("disk-budget", a.disk_budget_bytes == b.disk_budget_bytes);
  check("flush-interval", a.flush_interval == b.flush_interval);
  check("joblog", a.joblog == b.joblog);
  check("joblog-tail", a.joblog_tail == b.joblog_tail);
  check("joblog-format", a.joblog_format == b.joblog_format);
  check("joblog-patterns", a.joblog_patterns == b.joblog_patterns);
  check("joblog-opt-out", a.joblog_opt_out == b.joblog_opt_out);
  check("probe-budget", a.probe_budget == b.probe_budget);
  check("probe-cost-ns", a.probe_cost_ns == b.probe_cost_ns);
  check("sched-io", a.sched_io == b.sched_io);
  check("diagnose-interval", a.diagnose_interval == b.diagnose_interval);
  check("diagnose-lookback", a.diagnose_lookback == b.diagnose_lookback);
  check("diagnose-resolve-after", a.diagnose_resolve_after == b.diagnose_resolve_after);
  check("list-price", a.list_price_per_gpu_hour == b.list_price_per_gpu_hour);
  return changed;
}

}  // namespace

Result<std::vector<std::string>> AgentProcess::Reload(const AgentOptions& next) {
  // Everything that can fail first, so that a refused reload changes nothing.
  std::string token;
  if (server_ && !next.token_file.empty()) {
    auto t = ReadTokenFile(next.token_file);
    if (!t) return std::unexpected(t.error());
    token = std::move(*t);
  }
  if (auto s = agent::SetupLogging(next.log_format, next.log_level); !s) return std::unexpected(s.error());
  if (server_) server_->SetBearerToken(std::move(token));
  std::vector<std::string> later = RestartSettingsChanged(options_, next);
  options_.log_format = next.log_format;
  options_.log_level = next.log_level;
  options_.token_file = next.token_file;
  return later;
}

investigate::NodeDiagnoserOptions MakeDiagnoserOptions(const AgentOptions& options) {
  investigate::NodeDiagnoserOptions o;
  o.lookback = options.diagnose_lookback;
  o.investigate.resolve_after = options.diagnose_resolve_after;
  o.investigate.list_price_per_gpu_hour = options.list_price_per_gpu_hour;
  return o;
}

void AgentProcess::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (server_) server_->Stop();
  // The runtime's Stop runs maintenance once more, which flushes what the last ticks wrote.
  if (runtime_) runtime_->Stop();
  if (store_ && !options_.data_dir.empty()) {
    if (auto s = store_->Flush(); !s)
      agent::GetLogger("cli")->error("final flush failed: {}", s.error().ToString());
  }
}

void AgentProcess::Maintain(TimeNs now) {
  auto log = agent::GetLogger("cli");
  if (auto s = store_->Flush(); !s) log->warn("flush failed: {}", s.error().ToString());
  store_->EnforceRetention(now);
  // The store picks what is worth merging (nothing, most of the time); this runs on the
  // runtime's maintenance thread, so a long merge never delays collection. A failure leaves
  // the segments as they were.
  if (auto s = store_->Compact(); !s) log->warn("compaction failed: {}", s.error().ToString());
  // Flush and compaction make the agent's largest short-lived buffers (decoded samples, encoded
  // segments: megabytes); glibc keeps the freed pages of its heaps and arenas mapped unless they
  // sit at the top. Giving them back here, once per maintenance round, keeps the resident size
  // at what the agent holds rather than at its highest peak (docs/performance.md, "The agent's
  // memory"). It walks the free lists only: well under a millisecond for this heap.
  malloc_trim(0);
}

bool AgentProcess::WaitForCollects(uint64_t collects, TimeNs timeout) const {
  const TimeNs until = MonotonicNowNs() + timeout;
  while (true) {
    bool all = true;
    for (const auto& c : runtime_->Status()) {
      if (c.health.state == agent::CollectorState::kFailed) continue;
      if (c.health.collects + c.health.timeouts < collects) all = false;
    }
    if (all) return true;
    if (MonotonicNowNs() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

uint16_t AgentProcess::port() const { return server_ ? server_->port() : 0; }

Result<std::vector<std::pair<std::string, std::vector<MetricDesc>>>> DescribeAgentMetrics() {
  auto store = store::Store::Open(store::StoreOptions{});
  if (!store) return std::unexpected(store.error());
  agent::TrackedProcesses tracked;
  agent::LoggedSteps logged_steps;
  investigate::NodeDiagnoser diagnoser;
  agent::Runtime runtime(**store, agent::RuntimeOptions{});
  if (auto s = AddCollectors(runtime, **store, AgentOptions{}, tracked, logged_steps, diagnoser); !s)
    return std::unexpected(s.error());
  return runtime.DescribeByCollector();
}

}  // namespace ithbat::cli
