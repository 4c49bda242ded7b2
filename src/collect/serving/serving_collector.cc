#include "collect/serving/serving_collector.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/core.h>

#include "agent/logging.h"
#include "collect/serving/listener.h"
#include "collect/serving/workload_tie.h"
#include "core/labels.h"
#include "net/http_client.h"

namespace ithbat::collect {
namespace {

using serving::ServerInfo;

std::string ServerName(const ServerInfo& s) {
  return fmt::format("{} server pid {} port {}", serving::EngineName(s.engine), s.pid, s.port);
}

}  // namespace

Result<std::string> ScrapeMetrics(const std::string& host, uint16_t port, const ServingOptions& options) {
  try {
    net::HttpLimits limits;
    limits.connect_timeout = static_cast<TimeNs>(options.connect_timeout_ms) * kNsPerMs;
    limits.deadline = static_cast<TimeNs>(options.scrape_deadline_ms) * kNsPerMs;
    limits.max_header_bytes = options.max_header_bytes;
    limits.max_body_bytes = options.max_body_bytes;
    // A client per scrape: the servers are few, scraped once a tick, and a connection kept
    // between ticks would be one more thing a hostile server could hold.
    net::HttpClient client(limits);
    auto answer = client.Send({.url = net::HttpOrigin(host, port) + "/metrics"});
    if (!answer) {
      return MakeErrorF(answer.error().code, "GET {}:{}/metrics: {}", host, port, answer.error().message);
    }
    if (answer->status != 200) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "GET {}:{}/metrics: HTTP status {}", host, port,
                        answer->status);
    }
    return std::move(answer->body);
  } catch (const std::exception& e) {
    return MakeErrorF(ErrorCode::kUnavailable, "GET {}:{}/metrics: {}", host, port, e.what());
  } catch (...) {
    return MakeErrorF(ErrorCode::kUnavailable, "GET {}:{}/metrics: unknown exception", host, port);
  }
}

std::unique_ptr<ServingCollector> ServingCollector::Create(ServingOptions options) {
  return std::unique_ptr<ServingCollector>(new ServingCollector(std::move(options)));
}

ServingCollector::ServingCollector(ServingOptions options) : Collector("serving"), options_(std::move(options)) {
  const ServingOptions d;
  if (options_.rescan_every_ticks == 0) options_.rescan_every_ticks = d.rescan_every_ticks;
  if (options_.exec_grace_ticks == 0) options_.exec_grace_ticks = d.exec_grace_ticks;
  if (options_.connect_timeout_ms <= 0) options_.connect_timeout_ms = d.connect_timeout_ms;
  if (options_.max_header_bytes == 0) options_.max_header_bytes = d.max_header_bytes;
  if (options_.scrape_deadline_ms <= 0) options_.scrape_deadline_ms = d.scrape_deadline_ms;
  if (options_.max_body_bytes == 0) options_.max_body_bytes = d.max_body_bytes;
  if (options_.max_servers == 0) options_.max_servers = d.max_servers;
  if (options_.max_concurrent_scrapes == 0) options_.max_concurrent_scrapes = d.max_concurrent_scrapes;
  if (options_.max_series == 0) options_.max_series = d.max_series;
  options_.limits.max_body_bytes = options_.max_body_bytes;

  const std::vector<std::string> labels = {"engine", "port", "pid"};
  auto d_ = [&](std::string name, std::string help) {
    server_descs_.push_back(MetricDesc{std::move(name), std::move(help), "", MetricType::kGauge, labels});
  };
  d_("ithbat_serving_up", "1 when the inference server's /metrics was scraped and parsed this tick, else 0");
  d_("ithbat_serving_max_num_seqs", "Most requests the server runs in one batch (its slot count)");
  d_("ithbat_serving_max_num_batched_tokens",
     "Most tokens the server schedules in one step, from --max-num-batched-tokens (SGLang --chunked-prefill-size, "
     "TGI --max-batch-total-tokens)");
  d_("ithbat_serving_max_model_len",
     "Longest sequence in tokens the server accepts, from --max-model-len (SGLang --context-length, TGI "
     "--max-total-tokens)");
  d_("ithbat_serving_tensor_parallel_size", "GPUs one model replica is split over, from --tensor-parallel-size");
  d_("ithbat_serving_max_concurrent_requests", "Most requests TGI admits at once, from --max-concurrent-requests");
  d_("ithbat_serving_prefix_caching_enabled",
     "1 when prefix caching was switched on by flag, 0 when switched off (absent when no flag says)");
  d_("ithbat_serving_chunked_prefill_enabled",
     "1 when chunked prefill was switched on by flag, 0 when switched off (absent when no flag says)");
  // max_num_seqs comes from flags or from SGLang's gauge: one desc carrying every label either uses.
  server_descs_[kFlagMaxNumSeqs] = serving::ServingSeriesDesc(serving::ServingSeries::kMaxNumSeqs);
}

std::vector<MetricDesc> ServingCollector::Describe() const {
  std::vector<MetricDesc> out;
  for (size_t i = 0; i < serving::kServingSeriesCount; i++) {
    const auto s = static_cast<serving::ServingSeries>(i);
    if (s == serving::ServingSeries::kMaxNumSeqs) continue;  // declared once, below, with the server labels
    out.push_back(serving::ServingSeriesDesc(s));
  }
  out.insert(out.end(), server_descs_.begin(), server_descs_.end());
  return out;
}

Status ServingCollector::InitImpl(Sink& sink) {
  std::error_code ec;
  if (!std::filesystem::is_directory(options_.procfs, ec)) {
    return MakeErrorF(ErrorCode::kNotFound, "procfs root '{}' is not a directory{}", options_.procfs.string(),
                      ec ? ": " + ec.message() : std::string());
  }
  sink_ = &sink;
  return Ok();
}

Status ServingCollector::Discover() {
  auto pids = serving::ListPids(options_.procfs);
  if (!pids) return std::unexpected(pids.error());
  const bool rescan = ticks_ % options_.rescan_every_ticks == 0;
  if (rescan) {
    servers_.clear();
    listeners_.clear();
    tied_.clear();
    gpu_lines_stale_ = true;  // a process re-parented since is seen at the rescan
  }
  // Forget pids that exited.
  auto listed = [&](int32_t pid) { return std::binary_search(pids->begin(), pids->end(), pid); };
  std::erase_if(servers_, [&](const auto& entry) { return !listed(entry.first); });
  std::erase_if(young_pids_, [&](const auto& entry) { return !listed(entry.first); });
  std::erase_if(listeners_, [&](const auto& entry) { return !listed(entry.first); });
  std::erase_if(tied_, [&](int32_t pid) { return !listed(pid); });
  std::erase_if(tie_logged_, [&](int32_t pid) { return !listed(pid); });
  // Read the cmdline of new pids, of young ones (maybe not exec'd yet when first read), and of
  // every pid on a rescan.
  for (int32_t pid : *pids) {
    const bool seen = std::binary_search(known_pids_.begin(), known_pids_.end(), pid);
    auto young = young_pids_.find(pid);
    if (seen && !rescan && young == young_pids_.end()) continue;
    if (auto info = serving::ReadServer(options_.procfs, pid)) {
      servers_[pid] = std::move(*info);
      if (young != young_pids_.end()) young_pids_.erase(young);
    } else if (!seen) {
      young_pids_[pid] = options_.exec_grace_ticks;
    } else if (young != young_pids_.end() && --young->second == 0) {
      young_pids_.erase(young);
    }
  }
  known_pids_ = std::move(*pids);
  return Ok();
}

std::vector<int32_t> ServingCollector::ServerPids(const ServerInfo& server) const {
  // The pid kept by DedupeServers first; a server has a handful of processes, and a local user
  // who starts many look-alikes does not make the checks long.
  constexpr size_t kMaxPidsChecked = 16;
  std::vector<int32_t> pids = {server.pid};
  for (const auto& [pid, info] : servers_) {
    if (pids.size() >= kMaxPidsChecked) break;
    if (pid != server.pid && info.engine == server.engine && info.port == server.port) pids.push_back(pid);
  }
  return pids;
}

Result<bool> ServingCollector::TiedToWorkload(const ServerInfo& server) {
  if (tied_.contains(server.pid)) return true;
  if (options_.gpu_processes != nullptr &&
      (gpu_lines_stale_ || options_.gpu_processes->generation() != gpu_generation_)) {
    gpu_generation_ = options_.gpu_processes->generation();
    gpu_lines_stale_ = false;
    std::vector<int32_t> gpu_pids;
    for (const auto& p : options_.gpu_processes->Snapshot()) {
      if (p.source == "gpu") gpu_pids.push_back(p.pid);
    }
    gpu_lines_ = serving::ReadGpuProcessLines(options_.procfs, gpu_pids);
  }
  const std::vector<int32_t> pids = ServerPids(server);
  serving::WorkloadTie tie = serving::GpuTie(pids, gpu_lines_);
  if (tie.kind == serving::TieKind::kNone) {
    auto job = serving::JobTie(options_.procfs, pids);
    if (!job) return std::unexpected(job.error());
    tie = std::move(*job);
  }
  if (tie.kind == serving::TieKind::kNone) return false;
  // Said once per server process; the tie itself is checked again after each rescan.
  if (tie_logged_.insert(server.pid).second) {
    agent::GetLogger("serving")->info("{}: tied to the workload by {}; scraped", ServerName(server),
                                      tie.what);
  }
  tied_.insert(server.pid);
  return true;
}

Result<bool> ServingCollector::ListenerVerified(const ServerInfo& server) {
  const std::vector<int32_t> pids = ServerPids(server);
  for (int32_t pid : pids) {
    if (listeners_.contains({pid, server.port})) return true;
  }
  auto inodes = serving::ListeningInodes(server.port);
  if (!inodes) return std::unexpected(inodes.error());
  if (inodes->empty()) return false;
  std::optional<Error> first_error;
  for (int32_t pid : pids) {
    auto held = serving::HoldsSocket(options_.procfs, pid, *inodes);
    if (held && *held) {
      listeners_.insert({pid, server.port});
      return true;
    }
    if (!held && held.error().code != ErrorCode::kNotFound && !first_error) first_error = held.error();
  }
  if (first_error) return std::unexpected(*first_error);
  return false;
}

Status ServingCollector::CollectImpl(TimeNs tick_time) {
  append_failures_ = 0;
  first_append_error_.clear();
  over_series_bound_ = 0;
  Status discovered = Discover();
  ticks_++;
  if (!discovered) return discovered;

  std::vector<ServerInfo> all;
  for (const auto& [pid, info] : servers_) all.push_back(info);
  std::vector<ServerInfo> servers = serving::DedupeServers(std::move(all));
  if (servers.size() > options_.max_servers) {
    ReportError(Error{ErrorCode::kResourceExhausted,
                      fmt::format("{} inference servers found, scraping the first {} by pid", servers.size(),
                                  options_.max_servers)});
    servers.resize(options_.max_servers);
  }

  // Scrape only what listens where its command line says (see the header), concurrently, at
  // most max_concurrent_scrapes at a time; joined before going on.
  std::vector<Result<std::string>> bodies(servers.size(), Result<std::string>(std::string()));
  std::vector<char> verified(servers.size(), 0);
  for (size_t i = 0; i < servers.size(); i++) {
    auto listening = ListenerVerified(servers[i]);
    auto tied = listening && *listening ? TiedToWorkload(servers[i]) : Result<bool>(false);
    if (listening && *listening && tied && *tied) {
      verified[i] = 1;
    } else if (listening && *listening && tied) {
      bodies[i] =
          MakeError(ErrorCode::kPermission,
                    "not tied to the node's workload: none of its processes or their descendants is a "
                    "GPU process, and its cgroup names no Slurm job or Kubernetes pod: not scraped");
    } else if (listening && *listening) {
      bodies[i] = MakeErrorF(tied.error().code, "cannot tell whether it belongs to a job ({}): not scraped",
                             tied.error().message);
    } else if (listening) {
      bodies[i] = MakeErrorF(ErrorCode::kPermission,
                             "none of its processes holds the socket listening on port {}: not scraped (the "
                             "port is another program's, or the server is still starting)",
                             servers[i].port);
    } else {
      bodies[i] = MakeErrorF(listening.error().code, "cannot tell who listens on port {} ({}): not scraped",
                             servers[i].port, listening.error().message);
    }
  }
  {
    std::atomic<size_t> next{0};
    auto worker = [&]() {
      for (size_t i = next++; i < servers.size(); i = next++) {
        if (verified[i]) bodies[i] = ScrapeMetrics(options_.host, servers[i].port, options_);
      }
    };
    const size_t n = std::min(servers.size(), options_.max_concurrent_scrapes);
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (size_t i = 0; i + 1 < n; i++) {
      try {
        threads.emplace_back(worker);
      } catch (const std::system_error&) {
        break;  // no thread to be had: the ones we have (at least this one) do all the scrapes
      }
    }
    if (n > 0) worker();  // this thread works too
    for (std::thread& t : threads) t.join();
  }

  // Forget the state of servers that are gone (their series stay in the store).
  for (auto it = states_.begin(); it != states_.end();) {
    const bool present = std::any_of(servers.begin(), servers.end(), [&](const ServerInfo& s) {
      return ServerKey{s.engine, s.port, s.pid} == it->first;
    });
    if (present) {
      ++it;
    } else {
      series_count_ -= it->second.refs.size();
      it = states_.erase(it);
    }
  }

  for (size_t i = 0; i < servers.size(); i++) {
    const ServerInfo& server = servers[i];
    if (!bodies[i]) {
      ReportError(Error{bodies[i].error().code, fmt::format("{}: {}", ServerName(server), bodies[i].error().message)});
      EmitServer(server, false, tick_time);
      continue;
    }
    for (const Error& e :
         IngestScrape(server, serving::ParseExposition(*bodies[i], options_.limits), tick_time)) {
      ReportError(e);
    }
  }

  if (over_series_bound_ > 0) {
    ReportError(Error{ErrorCode::kResourceExhausted,
                      fmt::format("{} series beyond the bound of {} skipped", over_series_bound_, options_.max_series)});
  }
  if (append_failures_ > 0) {
    ReportError(Error{ErrorCode::kInternal,
                      fmt::format("{} appends failed this tick; first: {}", append_failures_, first_append_error_)});
  }
  return Ok();
}

std::vector<Error> ServingCollector::IngestScrape(const ServerInfo& server,
                                                  const Result<serving::Exposition>& expo, TimeNs t) {
  std::vector<Error> problems;
  if (sink_ == nullptr) {
    problems.push_back(Error{ErrorCode::kInternal, "a scrape ingested before Init: nothing written"});
    return problems;
  }
  if (!expo) {
    problems.push_back(
        Error{expo.error().code, fmt::format("{}: {}", ServerName(server), expo.error().message)});
    EmitServer(server, false, t);
    return problems;
  }
  if (expo->errors > 0) {
    problems.push_back(
        Error{ErrorCode::kParse,
              fmt::format("{}: {} malformed /metrics lines skipped; first at line {}: {}", ServerName(server),
                          expo->errors, expo->first_error_line, expo->first_error)});
  }
  if (expo->dropped_samples > 0) {
    problems.push_back(Error{ErrorCode::kResourceExhausted,
                             fmt::format("{}: {} samples beyond the bound of {} ignored", ServerName(server),
                                         expo->dropped_samples, options_.limits.max_samples)});
  }
  EmitNormalised(server, serving::Normalise(server.engine, *expo), t);
  EmitServer(server, true, t);
  return problems;
}

void ServingCollector::EmitNormalised(const ServerInfo& server, const std::vector<serving::NormalSample>& samples,
                                      TimeNs t) {
  using serving::ServingSeries;
  // The engine's own hit-ratio gauge wins; otherwise the ratio comes from the counters' deltas.
  std::map<std::pair<std::string, std::string>, std::pair<const serving::NormalSample*, const serving::NormalSample*>>
      counters;  // (engine_index, model) → (hits, queries)
  std::map<std::pair<std::string, std::string>, bool> has_gauge;
  for (const auto& s : samples) {
    if (s.series == ServingSeries::kMaxNumSeqs && server.max_num_seqs) continue;  // the flag is the truth
    const MetricDesc& desc = s.series == ServingSeries::kMaxNumSeqs ? server_descs_[kFlagMaxNumSeqs]
                                                                    : serving::ServingSeriesDesc(s.series);
    Emit(desc, server, s.engine_index, s.model, t, s.value);
    const auto key = std::make_pair(s.engine_index, s.model);
    if (s.series == ServingSeries::kPrefixCacheHitRatio) has_gauge[key] = true;
    if (s.series == ServingSeries::kPrefixCacheHitsTotal) counters[key].first = &s;
    if (s.series == ServingSeries::kPrefixCacheQueriesTotal) counters[key].second = &s;
  }
  for (const auto& [key, pair] : counters) {
    const auto [hits, queries] = pair;
    if (hits == nullptr || queries == nullptr) continue;
    ServerState& state = StateOf(server);
    if (!state.counters.contains(key) && state.counters.size() >= 64) continue;  // bound label churn
    Counters& prev = state.counters[key];
    if (prev.have && !has_gauge.contains(key)) {
      const double dh = hits->value - prev.hits, dq = queries->value - prev.queries;
      // No lookups since the last scrape, or a counter reset: no ratio this tick.
      if (dq > 0 && dh >= 0) {
        Emit(serving::ServingSeriesDesc(ServingSeries::kPrefixCacheHitRatio), server, key.first, key.second, t,
             std::min(1.0, dh / dq));
      }
    }
    prev = Counters{hits->value, queries->value, true};
  }
}

ServingCollector::ServerState& ServingCollector::StateOf(const ServerInfo& server) {
  return states_[ServerKey{server.engine, server.port, server.pid}];
}

void ServingCollector::EmitServer(const ServerInfo& server, bool up, TimeNs t) {
  auto opt = [&](ServerSeries series, const auto& value) {
    if (value) Emit(server_descs_[series], server, "", "", t, static_cast<double>(*value));
  };
  Emit(server_descs_[kUp], server, "", "", t, up ? 1.0 : 0.0);
  opt(kFlagMaxNumSeqs, server.max_num_seqs);
  opt(kFlagMaxBatchedTokens, server.max_num_batched_tokens);
  opt(kFlagMaxModelLen, server.max_model_len);
  opt(kFlagTensorParallel, server.tensor_parallel_size);
  opt(kFlagMaxConcurrent, server.max_concurrent_requests);
  opt(kFlagPrefixCaching, server.prefix_caching);
  opt(kFlagChunkedPrefill, server.chunked_prefill);
}

void ServingCollector::Emit(const MetricDesc& desc, const ServerInfo& server, std::string_view engine_index,
                            std::string_view model, TimeNs t, double value) {
  const std::string_view engine = serving::EngineName(server.engine);
  ServerState& state = StateOf(server);
  std::string key = fmt::format("{}|{}|{}", desc.name, engine_index, model);
  auto it = state.refs.find(key);
  if (it == state.refs.end()) {
    if (state.refused.contains(key)) return;
    if (series_count_ >= options_.max_series) {
      over_series_bound_++;
      return;
    }
    const std::string port = std::to_string(server.port), pid = std::to_string(server.pid);
    Result<LabelSet> labels = LabelSet::From(
        {{"engine", engine}, {"engine_index", engine_index}, {"model", model}, {"port", port}, {"pid", pid}});
    Result<SeriesRef> ref =
        labels ? sink_->RegisterSeries(desc, *labels) : Result<SeriesRef>(std::unexpected(labels.error()));
    if (!ref) {
      if (state.refused.size() < options_.max_series) state.refused.insert(key);
      ReportError(Error{ref.error().code, fmt::format("register {} for {}: {} (series skipped from now on)", desc.name,
                                                      ServerName(server), ref.error().message)});
      return;
    }
    it = state.refs.emplace(std::move(key), *ref).first;
    series_count_++;
  }
  if (Status s = sink_->Append(it->second, t, value); !s) {
    if (append_failures_++ == 0) first_append_error_ = s.error().message;
  }
}

}  // namespace ithbat::collect
