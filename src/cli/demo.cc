#include "cli/demo.h"

#include <cerrno>
#include <ctime>
#include <optional>
#include <string_view>

#include <fmt/core.h>
#include <signal.h>

#include "agent/logging.h"
#include "cli/agent_options.h"
#include "cli/agent_process.h"
#include "net/http_client.h"

namespace ithbat::cli {
namespace {

constexpr size_t kMetricsLinesShown = 12;

std::string HumanBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  return fmt::format("{:.1f} {}", bytes, kUnits[u]);
}

std::string StateText(const agent::CollectorHealth& h) {
  if (h.state == agent::CollectorState::kFailed) return "failed";
  if (!h.up) return "down";
  return h.degraded.empty() ? "up" : "degraded";
}

// Waits up to `seconds` for SIGINT/SIGTERM (blocked by the caller); true if one came.
bool WaitForStopSignal(const sigset_t& set, int seconds) {
  timespec left{seconds, 0};
  const TimeNs until = MonotonicNowNs() + seconds * kNsPerSec;
  while (true) {
    if (sigtimedwait(&set, nullptr, &left) >= 0) return true;
    if (errno != EINTR) return false;  // EAGAIN: the time is up
    const TimeNs rest = until - MonotonicNowNs();
    if (rest <= 0) return false;
    left = timespec{static_cast<time_t>(rest / kNsPerSec), static_cast<long>(rest % kNsPerSec)};
  }
}

}  // namespace

std::optional<double> LatestValue(const store::Store& store, const std::string& selector, TimeNs from,
                                  TimeNs to) {
  auto sel = store::SeriesSelector::Parse(selector);
  if (!sel) return std::nullopt;
  auto data = store.Select(*sel, from, to);
  if (!data || data->empty() || data->front().samples.empty()) return std::nullopt;
  return data->front().samples.back().v;
}

std::optional<double> CpuBusyPercent(const store::Store& store, TimeNs from, TimeNs to) {
  auto sel = store::SeriesSelector::Parse("ithbat_host_cpu_seconds_total");
  if (!sel) return std::nullopt;
  auto data = store.Select(*sel, from, to);
  if (!data) return std::nullopt;
  double total = 0;
  double idle = 0;
  for (const auto& series : *data) {
    if (series.samples.size() < 2) return std::nullopt;
    const double delta = series.samples.back().v - series.samples.front().v;
    total += delta;
    auto mode = series.info.labels.Get("mode");
    if (mode && (*mode == "idle" || *mode == "iowait")) idle += delta;
  }
  if (total <= 0) return std::nullopt;
  return 100.0 * (total - idle) / total;
}

int RunDemo(int seconds, const std::string& nvml_library) {
  // The demo's own output is the point; the agent's log lines would only bury it.
  (void)agent::SetupLogging(agent::LogFormat::kHuman, "warn");
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  AgentOptions options;
  options.listen_address = "127.0.0.1";
  options.listen_port = 0;
  options.node = HostName();
  if (!nvml_library.empty()) options.nvml_library = nvml_library;

  fmt::print("Ithbat demo: running the agent on this machine ({}) for {} s, reading {} ...\n", options.node,
             seconds, options.procfs);
  std::fflush(stdout);
  const TimeNs start = NowNs();
  auto started = AgentProcess::Start(options, /*serve=*/true);
  if (!started) {
    fmt::print(stderr, "ithbat demo: the agent did not start: {}\n", started.error().message);
    return 1;
  }
  AgentProcess& agent = **started;
  const std::string url = fmt::format("http://127.0.0.1:{}", agent.port());
  fmt::print("Serving {}/metrics (try: curl -s {}/metrics | head) - Ctrl-C ends the demo early\n\n", url,
             url);
  std::fflush(stdout);

  const bool interrupted = WaitForStopSignal(set, seconds);

  // Fetched while the server still runs, as a scraper would.
  net::HttpLimits limits;
  limits.deadline = 5 * kNsPerSec;
  net::HttpClient client(limits);
  auto res = client.Send({.url = url + "/metrics"});

  const TimeNs now = NowNs();
  const auto stats = agent.store().Stats();
  const auto health = agent.runtime().Status();
  agent.Stop();

  fmt::print("What the agent saw in {:.1f} s{}:\n", static_cast<double>(now - start) / kNsPerSec,
             interrupted ? " (interrupted)" : "");
  fmt::print("  series stored         {} ({} samples, {} compressed)\n", stats.series,
             stats.samples_in_memory, HumanBytes(static_cast<double>(stats.sample_bytes_in_memory)));
  if (auto busy = CpuBusyPercent(agent.store(), start, now)) {
    auto cpus = LatestValue(agent.store(), "ithbat_host_cpus", start, now);
    fmt::print("  CPU busy              {:.1f} %{}\n", *busy,
               cpus ? fmt::format(" of {} CPUs", static_cast<int>(*cpus)) : std::string());
  } else {
    fmt::print("  CPU busy              n/a (needs two collections; try --seconds 3 or more)\n");
  }
  auto avail = LatestValue(agent.store(), "ithbat_host_memory_available_bytes", start, now);
  auto total = LatestValue(agent.store(), "ithbat_host_memory_total_bytes", start, now);
  if (avail && total) {
    fmt::print("  memory available      {} of {}\n", HumanBytes(*avail), HumanBytes(*total));
  } else {
    fmt::print("  memory available      n/a\n");
  }
  std::string psi;
  for (std::string_view resource : {"cpu", "memory", "io"}) {
    auto v = LatestValue(agent.store(), fmt::format("ithbat_host_pressure_{}_some_avg10_ratio", resource),
                         start, now);
    if (v) psi += fmt::format("{}{} {:.1f} %", psi.empty() ? "" : ", ", resource, *v * 100);
  }
  fmt::print("  pressure (PSI avg10)  {}\n",
             psi.empty() ? "not available (kernel without PSI)" : psi + " stalled");
  if (auto load = LatestValue(agent.store(), "ithbat_host_load1", start, now)) {
    fmt::print("  load (1 min)          {:.2f}\n", *load);
  }

  auto gpus = agent.store().ListSeries(*store::SeriesSelector::Parse("ithbat_gpu_info"));
  auto gpu_series = agent.store().ListSeries(*store::SeriesSelector::Parse("{__name__=~\"ithbat_gpu_.*\"}"));
  if (gpus.empty()) {
    fmt::print("  GPUs                  none seen (no NVML library: {})\n", options.nvml_library);
  } else {
    auto model = gpus.front().labels.Get("model");
    fmt::print("  GPUs                  {} x {} through {} ({} GPU series)\n", gpus.size(),
               model ? std::string(*model) : "unknown model", options.nvml_library, gpu_series.size());
  }

  fmt::print("\nCollectors:\n");
  for (const auto& c : health) {
    fmt::print("  {:<10} {:<8} {} collects, {} errors, last took {:.2f} ms{}\n", c.name, StateText(c.health),
               c.health.collects, c.health.errors, static_cast<double>(c.health.last_duration) / kNsPerMs,
               c.health.last_error.empty() ? "" : " - " + c.health.last_error);
  }

  if (!res || res->status != 200) {
    fmt::print(stderr, "\nithbat demo: GET {}/metrics failed: {}\n", url,
               res ? fmt::format("HTTP {}", res->status) : res.error().message);
    return 1;
  }
  fmt::print("\nFirst lines of {}/metrics ({} bytes in all):\n", url, res->body.size());
  std::string_view body = res->body;
  for (size_t i = 0; i < kMetricsLinesShown && !body.empty(); i++) {
    size_t nl = body.find('\n');
    fmt::print("  {}\n", body.substr(0, nl));
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
  }
  fmt::print("  ...\n\nRun it for real: ithbat agent --listen 127.0.0.1:9479 (see README.md)\n");
  return 0;
}

}  // namespace ithbat::cli
