#include "cli/hub_command.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/logger.h>

#include "agent/logging.h"
#include "cli/agent_options.h"
#include "cli/app.h"
#include "core/version.h"
#include "hub/hub.h"
#include "hub/hub_server.h"
#include "investigate/diagnosis_json.h"
#include "notify/webhook.h"

namespace ithbat::cli {
namespace {

// Bounds that keep a typo from spinning (an interval of 1 ns) or holding a day of every node in
// memory by accident.
constexpr TimeNs kMinHubInterval = 100 * kNsPerMs;
constexpr TimeNs kMaxHubInterval = 3600 * kNsPerSec;
constexpr TimeNs kMinLookback = 10 * kNsPerSec;
constexpr TimeNs kMaxLookback = 24 * 3600 * kNsPerSec;
// --once waits this long at most for the webhook to take its messages before exiting.
constexpr TimeNs kOnceFlushTimeout = 15 * kNsPerSec;

struct Resolved {
  hub::HubOptions hub;
  hub::HubServerOptions server;
  std::string webhook_url;
  agent::LogFormat log_format = agent::LogFormat::kHuman;
};

// One grammar with the agent: --listen ADDR:PORT ("[v6]:PORT" for IPv6). A value with no colon
// or with several outside brackets (0.0.0.0, ::) is an address alone, the hub's older form,
// whose port comes from --port.
bool HasPort(std::string_view listen) {
  return listen.starts_with('[') || std::count(listen.begin(), listen.end(), ':') == 1;
}

Result<TimeNs> Duration(std::string_view key, const std::string& text, TimeNs min, TimeNs max) {
  auto d = ParseDuration(text);
  if (!d) return MakeErrorF(ErrorCode::kInvalidArgument, "--{}: {}", key, d.error().message);
  if (*d < min || *d > max) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "--{}: {} is outside [{} ms, {} s]", key, text,
                      min / kNsPerMs, max / kNsPerSec);
  }
  return *d;
}

Result<Resolved> Resolve(const HubCommandOptions& o) {
  Resolved r;
  if (o.agents.empty()) return MakeError(ErrorCode::kInvalidArgument, "give at least one --agent HOST:PORT");
  auto targets = hub::ParseAgentTargets(o.agents);
  if (!targets) return std::unexpected(targets.error());
  r.hub.agents = std::move(*targets);
  auto interval = Duration("interval", o.interval, kMinHubInterval, kMaxHubInterval);
  if (!interval) return std::unexpected(interval.error());
  r.hub.interval = *interval;
  auto lookback = Duration("lookback", o.lookback, kMinLookback, kMaxLookback);
  if (!lookback) return std::unexpected(lookback.error());
  r.hub.lookback = *lookback;
  if (!std::isfinite(o.list_price) || o.list_price < 0 || o.list_price > 1e6) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "--list-price: {} is not a price in $/GPU-hour",
                      o.list_price);
  }
  r.hub.investigate.list_price_per_gpu_hour = o.list_price;
  if (!o.agent_token_file.empty()) {
    auto t = ReadTokenFile(o.agent_token_file);
    if (!t) return MakeErrorF(ErrorCode::kInvalidArgument, "--agent-token-file: {}", t.error().message);
    r.hub.agent_token = std::move(*t);
  }
  if (!o.token_file.empty()) {
    auto t = ReadTokenFile(o.token_file);
    if (!t) return MakeErrorF(ErrorCode::kInvalidArgument, "--token-file: {}", t.error().message);
    r.server.bearer_token = std::move(*t);
  }
  if (o.port < 0 || o.port > 65535)
    return MakeErrorF(ErrorCode::kInvalidArgument, "--port: {} is not a port", o.port);
  if (o.listen.empty()) return MakeError(ErrorCode::kInvalidArgument, "--listen: empty address");
  std::string address = o.listen;
  int port = o.port;
  if (HasPort(o.listen)) {
    auto l = ParseListenAddress(o.listen);
    if (!l) return MakeErrorF(ErrorCode::kInvalidArgument, "--listen: {}", l.error().message);
    if (o.port_given && o.listen_given && l->port != o.port) {
      return MakeErrorF(ErrorCode::kInvalidArgument,
                        "--listen {} and --port {} disagree: give the port once, in --listen ADDR:PORT",
                        o.listen, o.port);
    }
    address = l->host;
    // --port alone (the older form) still moves the default address's port.
    port = o.port_given && !o.listen_given ? o.port : l->port;
  }
  if (Status s =
          CheckListenNeedsToken(address, !r.server.bearer_token.empty(), o.insecure_listen_without_token);
      !s) {
    return std::unexpected(s.error());
  }
  r.server.bind_address = address;
  r.server.port = static_cast<uint16_t>(port);
  auto format = agent::ParseLogFormat(o.log_format);
  if (!format) return MakeErrorF(ErrorCode::kInvalidArgument, "--log-format: {}", format.error().message);
  r.log_format = *format;
  if (!o.webhook_url_file.empty()) {
    auto url = ReadSecretFile(o.webhook_url_file, "webhook URL file");
    if (!url) return MakeErrorF(ErrorCode::kInvalidArgument, "--webhook-url-file: {}", url.error().message);
    r.webhook_url = std::move(*url);
  }
  return r;
}

hub::NotifyCounters NotifierCounters(const notify::WebhookNotifier* n) {
  if (!n) return {};
  const notify::WebhookStats s = n->Stats();
  return hub::NotifyCounters{true, s.sent, s.failed, s.dropped, s.retries, s.queued};
}

// The notifier the hub's observer and /metrics use, replaceable while the hub runs (SIGHUP with
// another webhook URL).
class NotifierSlot {
 public:
  void Swap(std::unique_ptr<notify::WebhookNotifier> next, std::string url) {
    std::unique_ptr<notify::WebhookNotifier> old;
    {
      std::lock_guard lock(mu_);
      old = std::exchange(notifier_, std::move(next));
      url_ = std::move(url);
    }
    if (old) old->Stop();  // its queue is flushed or given up, outside the lock
  }
  void Observe(const std::vector<Diagnosis>& ds) {
    std::lock_guard lock(mu_);
    if (notifier_) notifier_->Observe(ds);
  }
  hub::NotifyCounters Counters() const {
    std::lock_guard lock(mu_);
    return NotifierCounters(notifier_.get());
  }
  std::string url() const {
    std::lock_guard lock(mu_);
    return url_;
  }
  // For --once, before any thread runs.
  notify::WebhookNotifier* Get() { return notifier_.get(); }
  void Stop() { Swap(nullptr, ""); }

 private:
  mutable std::mutex mu_;
  std::unique_ptr<notify::WebhookNotifier> notifier_;
  std::string url_;
};

Result<std::unique_ptr<notify::WebhookNotifier>> StartNotifier(const std::string& url) {
  notify::WebhookOptions wo;
  wo.url = url;
  return notify::WebhookNotifier::Start(wo);
}

// SIGHUP: the options read again; the log level, the hub's own bearer token and the webhook
// applied, the rest (agents, their token, interval, lookback, address) named as waiting for a
// restart. Options that no longer read, or a webhook that does not start, change nothing.
void ReloadHub(const HubCommand& hub, const Resolved& running, hub::HubServer& server, NotifierSlot& slot,
               spdlog::logger& log) {
  if (!hub.read_again) return;
  auto options = hub.read_again();
  if (!options) {
    log.error("SIGHUP: the options do not read, nothing changed: {}", options.error().message);
    return;
  }
  auto next = Resolve(*options);
  if (!next) {
    log.error("SIGHUP: nothing changed: {}", next.error().message);
    return;
  }
  std::unique_ptr<notify::WebhookNotifier> notifier;
  const bool webhook_changed = next->webhook_url != slot.url();
  if (webhook_changed && !next->webhook_url.empty()) {
    auto n = StartNotifier(next->webhook_url);
    if (!n) {
      log.error("SIGHUP: nothing changed: --webhook-url-file: {}", n.error().message);
      return;
    }
    notifier = std::move(*n);
  }
  if (auto s = agent::SetupLogging(next->log_format, options->log_level); !s) {
    log.error("SIGHUP: nothing changed: --log-level: {}", s.error().message);
    return;
  }
  server.SetBearerToken(next->server.bearer_token);
  if (webhook_changed) slot.Swap(std::move(notifier), next->webhook_url);
  std::vector<std::string> later;
  auto check = [&](const char* name, bool same) {
    if (!same) later.emplace_back(name);
  };
  std::vector<std::string> a, b;
  for (const auto& t : running.hub.agents) a.push_back(t.Address() + "=" + t.node);
  for (const auto& t : next->hub.agents) b.push_back(t.Address() + "=" + t.node);
  check("--agent", a == b);
  check("--agent-token-file", running.hub.agent_token == next->hub.agent_token);
  check("--interval", running.hub.interval == next->hub.interval);
  check("--lookback", running.hub.lookback == next->hub.lookback);
  check("--list-price",
        running.hub.investigate.list_price_per_gpu_hour == next->hub.investigate.list_price_per_gpu_hour);
  check("--listen/--port",
        running.server.bind_address == next->server.bind_address && running.server.port == next->server.port);
  log.info("SIGHUP: reloaded log level ({}), bearer token ({}), webhook ({}){}", options->log_level,
           next->server.bearer_token.empty() ? "none" : "set",
           next->webhook_url.empty() ? "none" : (webhook_changed ? "replaced" : "unchanged"),
           later.empty() ? "" : fmt::format("; changed, applied at the next start: {}", fmt::join(later, ", ")));
}

int RunOnce(hub::Hub& h, notify::WebhookNotifier* notifier, std::FILE* out, std::FILE* err) {
  const Status st = h.Round(NowNs());
  size_t reached = 0;
  for (const hub::AgentState& a : h.Agents()) {
    if (a.up) ++reached;
    const remote::PullStats& p = a.last_pull;
    if (a.up) {
      fmt::print(err,
                 "ithbat hub: agent {} (node {}): up; pulled {} series, {} samples, {} events, {} steps\n",
                 a.target.Address(), a.target.node, p.series, p.samples_appended, p.events_appended,
                 p.steps_recorded);
    }
    if (!a.last_error.empty())
      fmt::print(err, "ithbat hub: agent {} (node {}): {}\n", a.target.Address(), a.target.node,
                 a.last_error);
  }
  if (!st) {
    fmt::print(err, "ithbat hub: {}\n", st.error().message);
    return kExitFailure;
  }
  for (const Diagnosis& d : h.Current()) {
    const std::string line =
        investigate::ToJson(d).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    fmt::print(out, "{}\n", line);
  }
  std::fflush(out);
  if (notifier && !notifier->Flush(kOnceFlushTimeout)) {
    fmt::print(err, "ithbat hub: the webhook did not take every message within {} s\n",
               kOnceFlushTimeout / kNsPerSec);
  }
  if (reached == 0) {
    fmt::print(err, "ithbat hub: no agent could be reached\n");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void AddHubCommand(CLI::App& app, HubCommand& hub) {
  HubCommandOptions& o = hub.options;
  hub.cmd = app.add_subcommand(
      "hub",
      "Pull every agent's data and run the diagnosis engine over all nodes at once (job-wide and cross-job "
      "findings); serve /api/v1/diagnoses (docs/hub.md)");
  hub.cmd
      ->add_option(
          "--agent", o.agents,
          "An agent to pull: HOST:PORT, HOST (port 9479) or NODE=HOST:PORT to name its node; repeatable")
      ->required();
  hub.cmd->add_option("--agent-token-file", o.agent_token_file,
                      "File holding the bearer token the agents require");
  hub.cmd
      ->add_option(
          "--listen", o.listen,
          "Address and port to serve on (ADDR:PORT, as the agent's --listen; port 0 = any free port, "
          "logged)")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.listen_given = true; });
  hub.cmd
      ->add_option("--port", o.port,
                   "Port to serve on when --listen gives an address alone, or with the default --listen (the "
                   "older form; prefer --listen ADDR:PORT)")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.port_given = true; });
  hub.cmd->add_option(
      "--token-file", o.token_file,
      "File holding a bearer token required on every path but /healthz (must not be world-readable)");
  hub.cmd->add_option("--interval", o.interval, "How often to pull the agents and run the engine")
      ->capture_default_str();
  hub.cmd->add_option("--lookback", o.lookback, "How much of each node's data to keep and analyse")
      ->capture_default_str();
  hub.cmd->add_flag("--insecure-listen-without-token", o.insecure_listen_without_token,
                    "Serve on a --listen address beyond loopback without --token-file (refused otherwise)");
  hub.cmd->add_option(
      "--webhook-url-file", o.webhook_url_file,
      "File holding a Slack-compatible incoming webhook URL (http:// or https://; must not be "
      "world-readable) told when a diagnosis opens, is confirmed or resolves");
  hub.cmd
      ->add_option("--list-price", o.list_price,
                   "List price in $/GPU-hour, for the effective price (0: not computed)")
      ->capture_default_str();
  hub.cmd->add_flag("--once", o.once, "Run one round, print the diagnoses as schema-v1 JSON lines, exit");
  hub.cmd->add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  hub.cmd->add_option("--log-format", o.log_format, "Log format on stderr: human or json")
      ->capture_default_str();
}

int RunHubCommand(const HubCommand& hub, std::FILE* out, std::FILE* err) {
  if (!hub.cmd || !*hub.cmd) return -1;
  auto resolved = Resolve(hub.options);
  if (!resolved) {
    fmt::print(err, "ithbat hub: {}\n", resolved.error().message);
    return kExitUsage;
  }
  if (auto s = agent::SetupLogging(resolved->log_format, hub.options.log_level); !s) {
    fmt::print(err, "ithbat hub: --log-level: {}\n", s.error().message);
    return kExitUsage;
  }
  auto log = agent::GetLogger("hub");

  // Stop signals are taken by sigwait on this thread; every thread started after inherits the
  // mask. A client that hangs up must not kill the hub (SIGPIPE).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // reloads (ReloadHub)
  if (!hub.options.once) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  NotifierSlot slot;
  if (!resolved->webhook_url.empty()) {
    auto n = StartNotifier(resolved->webhook_url);
    if (!n) {
      fmt::print(err, "ithbat hub: --webhook-url-file: {}\n", n.error().message);
      return kExitUsage;
    }
    slot.Swap(std::move(*n), resolved->webhook_url);
  }
  auto created = hub::Hub::Create(resolved->hub);
  if (!created) {
    fmt::print(err, "ithbat hub: {}\n", created.error().message);
    return kExitUsage;
  }
  hub::Hub& h = **created;
  h.SetObserver([&slot](const std::vector<Diagnosis>& ds) { slot.Observe(ds); });

  if (hub.options.once) return RunOnce(h, slot.Get(), out, err);

  auto server = hub::HubServer::Start(
      h, [&slot] { return slot.Counters(); }, resolved->server);
  if (!server) {
    fmt::print(err, "ithbat hub: {}\n", server.error().message);
    return kExitFailure;
  }
  const bool v6 = resolved->server.bind_address.find(':') != std::string::npos;
  log->info("ithbat {} hub: {} agent(s), interval {} ms, lookback {} s; listening on {}{}{}:{}{}", kVersion,
            resolved->hub.agents.size(), resolved->hub.interval / kNsPerMs,
            resolved->hub.lookback / kNsPerSec, v6 ? "[" : "", resolved->server.bind_address, v6 ? "]" : "",
            (*server)->port(), resolved->server.bearer_token.empty() ? "" : " (bearer token required)");
  const std::string& bind = resolved->server.bind_address;
  if (resolved->server.bearer_token.empty() && !IsLoopbackAddress(bind)) {
    log->warn("serving on {} without --token-file (--insecure-listen-without-token): anyone who can reach it "
              "reads every node's diagnoses",
              bind);
  }
  h.Start();
  int sig = 0;
  for (;;) {
    if (sigwait(&stop_signals, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    ReloadHub(hub, *resolved, **server, slot, *log);
  }
  log->info("received {}, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  h.Stop();
  (*server)->Stop();
  slot.Stop();
  log->info("stopped");
  return kExitOk;
}

}  // namespace ithbat::cli
