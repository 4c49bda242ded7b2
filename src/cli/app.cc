#include "cli/app.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/logger.h>

#include "agent/logging.h"
#include "agent/malloc_arenas.h"
#include "agent/runtime.h"
#include "cli/agent_process.h"
#include "cli/demo.h"
#include "cli/evidence_commands.h"
#include "cli/hub_command.h"
#include "cli/parse_command.h"
#include "cli/replay_command.h"
#include "cli/scenario_command.h"
#include "cli/scenario_demo.h"
#include "cli/slurm_hook_command.h"
#include "cli/version_info.h"
#include "core/version.h"
#include "serve/dcgm_names.h"
#include "serve/http_server.h"

namespace ithbat::cli {
namespace {

// Keys at the top of a config file belong to `agent` (the only subcommand with a config so
// far), so a file for the agent needs no [agent] header; an [agent] section works too.
class AgentConfigFormat : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(input);
    for (auto& item : items) {
      if (item.parents.empty()) item.parents = {"agent"};
    }
    return items;
  }
};

struct CliState {
  AgentFlags agent;
  int demo_seconds = 5;
  std::string demo_nvml_library;
  bool demo_local = false;
  ScenarioDemoOptions demo_scenarios;
  CLI::App* agent_cmd = nullptr;
  CLI::App* demo_cmd = nullptr;
  CLI::App* version_cmd = nullptr;
  CLI::App* metrics_doc_cmd = nullptr;
  ParseCommandOptions parse;
  CLI::App* parse_cmd = nullptr;
  ReplayCommandOptions replay;
  CLI::App* replay_cmd = nullptr;
  ScenarioCheckOptions scenario_check;
  CLI::App* scenario_check_cmd = nullptr;
  EvidenceCommands evidence;  // record, diagnose, report
  HubCommand hub;
};

void BuildApp(CLI::App& app, CliState& st) {
  app.name("ithbat");
  app.description("Ithbat: a GPU node agent that tells busy from working.");
  app.set_config(
      "--config", "",
      "Config file (TOML or INI); its keys are the agent's flag names without the dashes, at the top "
      "or in an [agent] section. Flags on the command line win.");
  app.config_formatter(std::make_shared<AgentConfigFormat>());
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.require_subcommand(1);
  // `ithbat --version` says what `ithbat version` says (CLI11 prints it and ends with a newline).
  // Computed only when asked: it loads libcurl to name its version (net/curl_api.h).
  app.set_version_flag(
      "--version",
      [] {
        std::string version = VersionText();
        while (!version.empty() && version.back() == '\n') version.pop_back();
        return version;
      },
      "Print the version and build information and exit");

  st.agent_cmd =
      app.add_subcommand("agent", "Run the node agent: collect, store, serve /metrics and the JSON API");
  st.agent_cmd->fallthrough();  // so `ithbat agent --config FILE` reaches the top-level --config
  AddAgentFlags(*st.agent_cmd, st.agent);

  st.demo_cmd = app.add_subcommand(
      "demo",
      "Run scenarios through the fleet simulator with real agents and show what they found (default: the four "
      "case files and the healthy control); --local runs the agent on this machine instead");
  st.demo_cmd->add_option("scenarios", st.demo_scenarios.scenarios,
                          "Scenario files, or names of files in scenarios/ (e.g. case01-roaming-straggler)");
  st.demo_cmd->add_flag("--quick", st.demo_scenarios.quick, "Run each scenario's smaller CI configuration");
  st.demo_cmd->add_flag("--json", st.demo_scenarios.json, "One JSON line per scenario");
  st.demo_cmd->add_option("--seed", st.demo_scenarios.seed, "Seed for every scenario (default: the file's, else fresh)");
  st.demo_cmd->add_option("--slowdown", st.demo_scenarios.slowdown,
                          "Run every world this many times slower than its time compression (a machine too slow "
                          "for them; a world found INVALID is rerun slower anyway)")
      ->check(CLI::Range(1.0, 100.0));
  st.demo_cmd->add_flag("--local", st.demo_local, "Run the agent on this machine for a few seconds instead");
  st.demo_cmd->add_option("--seconds", st.demo_seconds, "With --local: how long to run")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  st.demo_cmd->add_option("--nvml-library", st.demo_nvml_library,
                          "With --local: NVML library to load (the fake one from build/sim/lib on a machine without GPUs)");

  st.version_cmd = app.add_subcommand("version", "Print the version and build information");
  // Listed for --help only: Main hands `slurm-hook` to its own parser before this one runs, so
  // that no flag of ours can make slurmd drain a node (cli/slurm_hook_command.h).
  app.add_subcommand(
         "slurm-hook",
         "Slurm Prolog/Epilog: record a job's start or end (user, account, GPUs, exit code) for the "
         "agent on this node (docs/slurm.md; `ithbat slurm-hook --help`)")
      ->allow_extras()
      ->prefix_command();
  st.metrics_doc_cmd =
      app.add_subcommand("metrics-doc", "Print docs/metrics.md: every metric the agent can produce");

  st.parse_cmd = app.add_subcommand(
      "parse", "Run the job-output parsers over log files (or stdin) and print the events as JSON lines");
  st.parse_cmd
      ->add_option("--format", st.parse.format,
                   "A parser name (see --list), auto, none, or kmsg (kernel-log lines: Xid events)")
      ->capture_default_str();
  st.parse_cmd->add_option("--patterns", st.parse.patterns_file, "User pattern sets (JSON, docs/joblog.md)");
  st.parse_cmd->add_option("--command-line", st.parse.command_line,
                           "The job's command line, a hint for format detection");
  st.parse_cmd->add_flag("--list", st.parse.list, "List the built-in parsers and exit");
  st.parse_cmd->add_flag("--summary", st.parse.summary, "Print lines, events and the detected framework per file on stderr");
  st.parse_cmd->add_option("files", st.parse.files, "Log files; - or nothing reads stdin");

  st.replay_cmd = app.add_subcommand("replay",
                                     "Run the diagnosis engine over log files, kernel-log lines and /metrics "
                                     "scrapes someone handed over, as one node's "
                                     "evidence, offline (docs/joblog.md)");
  st.replay_cmd->add_option("--job", st.replay.job, "The job id the material is filed under")
      ->capture_default_str();
  st.replay_cmd->add_option("--node", st.replay.node, "The node name it is filed under")
      ->capture_default_str();
  st.replay_cmd->add_option("--world-size", st.replay.world_size,
                            "The job's world size, when known (names the ranks that printed nothing)");
  st.replay_cmd
      ->add_option(
          "--interval", st.replay.interval_seconds,
          "Seconds between two lines of a file (logs share no clock: line n is dated n intervals in)")
      ->capture_default_str();
  st.replay_cmd
      ->add_option(
          "--times", st.replay.times,
          "lines: date line n at n intervals; stamps: by each line's own time stamp, where a file has them")
      ->check(CLI::IsMember({"lines", "stamps"}))
      ->capture_default_str();
  st.replay_cmd->add_option("--format", st.replay.format, "The job-output parser (as ithbat parse)")
      ->capture_default_str();
  st.replay_cmd->add_option("--kmsg", st.replay.kmsg,
                            "A kernel-log file (dmesg, journalctl -k, syslog); repeatable");
  st.replay_cmd->add_option(
      "--scrape", st.replay.scrapes,
      "A saved /metrics body of a vLLM, SGLang or TGI server; repeatable, in scrape order");
  st.replay_cmd->add_option("--price", st.replay.list_price_per_gpu_hour,
                            "List price per GPU-hour, for the cost");
  st.replay_cmd->add_flag("--json", st.replay.json, "Print schema v1 diagnosis lines only");
  st.replay_cmd->add_flag("--trace", st.replay.trace, "Print what each detector measured");
  st.replay_cmd->add_option("--color", st.replay.color, "auto, always or never")->capture_default_str();
  st.replay_cmd->add_option("logs", st.replay.logs, "Job output files, one process each");
  CLI::App* scenario_cmd = app.add_subcommand("scenario", "Scenario files of the simulator (docs/scenarios.md)");
  scenario_cmd->require_subcommand(1);
  st.scenario_check_cmd = scenario_cmd->add_subcommand(
      "check", "Validate scenario files: OK, or every problem as FILE:LINE:COL: FIELD: MESSAGE (exit 1)");
  st.scenario_check_cmd->add_option("files", st.scenario_check.files, "Scenario files")->required();
  st.scenario_check_cmd->add_flag("--resolve", st.scenario_check.resolve,
                                  "Also print the values one run draws, as one JSON line per file");
  st.scenario_check_cmd->add_option("--seed", st.scenario_check.seed,
                                    "Seed for --resolve (default: the file's seed, else a fresh one)");
  AddEvidenceCommands(app, st.evidence);
  AddHubCommand(app, st.hub);
}

bool IsConfigError(const CLI::ParseError& e) {
  return dynamic_cast<const CLI::ConfigError*>(&e) != nullptr ||
         dynamic_cast<const CLI::FileError*>(&e) != nullptr;
}

// CLI11 reports an unknown key of any file format as "INI was not able to parse KEY".
std::string ConfigErrorText(const CLI::ParseError& e) {
  constexpr std::string_view kUnknown = "INI was not able to parse ";
  std::string_view what = e.what();
  if (what.starts_with(kUnknown)) return fmt::format("unknown key '{}'", what.substr(kUnknown.size()));
  return std::string(what);
}

// Parses into the state BuildApp bound; returns an exit code when the command line is not to
// be run (help, usage error). CLI11 prints its own messages; config file errors get a prefix
// that says where the problem is.
std::optional<int> Parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (IsConfigError(e)) {
      fmt::print(stderr, "ithbat: config file: {}\n", ConfigErrorText(e));
      return kExitUsage;
    }
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  return std::nullopt;
}

// Blocks SIGINT, SIGTERM and SIGHUP in this thread and, because threads inherit the mask, in
// every thread started after it; the main thread then takes them with sigwait.
sigset_t BlockAgentSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a scraper that hangs up must not kill the agent
  return set;
}

int RunOnce(const AgentOptions& options) {
  auto process = AgentProcess::Start(options, /*serve=*/false);
  if (!process) {
    fmt::print(stderr, "ithbat agent: {}\n", process.error().message);
    return kExitFailure;
  }
  // Two collections: the second tick's self-metrics report how the first collection went.
  const TimeNs timeout = 3 * options.interval + 2 * options.collect_deadline;
  const bool complete = (*process)->WaitForCollects(2, timeout);
  (*process)->Stop();
  std::string text = serve::RenderPrometheusText(
      (*process)->store(), NowNs() - serve::ServerOptions{}.stale_after, ExpositionOptionsOf(options));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  if (!complete) {
    fmt::print(stderr, "ithbat agent: the collectors did not finish two collections within {} ms\n",
               timeout / kNsPerMs);
    return kExitFailure;
  }
  return kExitOk;
}

// The same command line (and so the same config file) parsed again into `st`, for SIGHUP.
Status ParseAgain(const std::vector<std::string>& args, CliState& st) {
  CLI::App app;
  BuildApp(app, st);
  std::vector<const char*> argv = {"ithbat"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}", IsConfigError(e) ? ConfigErrorText(e) : e.what());
  }
  return Ok();
}

Result<AgentOptions> ReadAgentOptionsAgain(const std::vector<std::string>& args) {
  CliState st;
  if (Status s = ParseAgain(args, st); !s) return std::unexpected(s.error());
  if (!*st.agent_cmd) return MakeError(ErrorCode::kInternal, "the command line no longer names the agent");
  return ResolveAgentOptions(st.agent);
}

// SIGHUP: the configuration read again; what a running agent can change applied, the rest
// named as waiting for a restart. A configuration that no longer reads changes nothing.
void ReloadAgent(AgentProcess& process, const std::vector<std::string>& args, spdlog::logger& log) {
  auto next = ReadAgentOptionsAgain(args);
  if (!next) {
    log.error("SIGHUP: the configuration does not read, nothing changed: {}", next.error().message);
    return;
  }
  auto later = process.Reload(*next);
  if (!later) {
    log.error("SIGHUP: nothing changed: {}", later.error().message);
    return;
  }
  log.info("SIGHUP: reloaded log level ({}) and bearer token ({}){}", next->log_level,
           next->token_file.empty() ? "none" : next->token_file,
           later->empty() ? "" : fmt::format("; changed, applied at the next start: {}", fmt::join(*later, ", ")));
}

int RunAgent(const AgentFlags& flags, const std::vector<std::string>& args) {
  auto options = ResolveAgentOptions(flags);
  if (!options) {
    fmt::print(stderr, "ithbat agent: {}\n", options.error().message);
    return kExitUsage;
  }
  if (auto s = agent::SetupLogging(options->log_format, options->log_level); !s) {
    fmt::print(stderr, "ithbat agent: {}\n", s.error().message);
    return kExitUsage;
  }
  if (options->once) return RunOnce(*options);
  // One malloc arena for all threads, set before any starts (agent/malloc_arenas.h says why).
  agent::LimitMallocArenas();

  const sigset_t signals = BlockAgentSignals();
  auto log = agent::GetLogger("cli");
  log->info("ithbat {} starting: node {}, cluster '{}', interval {} ms, data dir {}", kVersion, options->node,
            options->cluster, options->interval / kNsPerMs,
            options->data_dir.empty() ? "(memory only)" : options->data_dir);
  auto process = AgentProcess::Start(*options, /*serve=*/true);
  if (!process) {
    log->error("{}", process.error().ToString());
    fmt::print(stderr, "ithbat agent: {}\n", process.error().message);
    return kExitFailure;
  }
  int sig = 0;
  for (;;) {
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    ReloadAgent(**process, args, *log);
  }
  log->info("received {}, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*process)->Stop();
  log->info("stopped");
  return kExitOk;
}

// The section of docs/metrics.md on --dcgm-exporter-names, from the table the agent uses.
std::string DcgmNamesDoc() {
  std::string out =
      "\n## dcgm-exporter names\n\n"
      "With `--dcgm-exporter-names` (`dcgm-exporter-names = true`), /metrics also carries these series, "
      "computed "
      "from the agent's own at each scrape, named and labelled as dcgm-exporter names them: `gpu`, `UUID`, "
      "`pci_bus_id`, `device` (`nvidia<gpu>`: the agent does not read the minor number), `modelName`, "
      "`GPU_I_ID` "
      "for a MIG device (its parent's index, UUID and model), `Hostname` (the node name) and "
      "`DCGM_FI_DRIVER_VERSION`. Dashboards and alerts written for dcgm-exporter find them unchanged. Not "
      "produced, because the agent does not read them: `DCGM_FI_DEV_ENC_UTIL`, `DCGM_FI_DEV_DEC_UTIL`, "
      "`DCGM_FI_DEV_VGPU_LICENSE_STATUS`, `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`, the `*_VIOLATION` times and "
      "`DCGM_FI_DEV_XID_ERRORS` (the last Xid's number; the agent counts Xids instead).\n\n"
      "| DCGM field | type | computed from | selected by | unit |\n"
      "|---|---|---|---|---|\n";
  for (const serve::DcgmAlias& a : serve::DcgmAliases()) {
    std::string selector;
    for (const serve::LabelMatch& m : a.match) {
      if (m.name.empty()) continue;
      if (!selector.empty()) selector += ", ";
      selector += fmt::format("`{}=\"{}\"`", m.name, m.value);
    }
    std::string unit = a.scale == 1 ? "as is" : fmt::format("× {:g}", a.scale);
    if (a.scale == 1e-6) unit = "hertz → MHz";
    if (a.scale == 1.0 / (1 << 20)) unit = "bytes → MiB";
    if (a.scale == 100) unit = "ratio → %";
    if (a.scale == 1000) unit = "joules → mJ";
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", a.field, MetricTypeName(a.type), a.source,
                       selector, unit);
  }
  return out;
}

int RunMetricsDoc() {
  auto by_collector = DescribeAgentMetrics();
  if (!by_collector) {
    fmt::print(stderr, "ithbat metrics-doc: {}\n", by_collector.error().message);
    return kExitFailure;
  }
  std::string doc = agent::RenderMetricsDoc(*by_collector) + DcgmNamesDoc();
  std::fwrite(doc.data(), 1, doc.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

std::vector<std::string> SplitEmptyAssignments(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i > 0 && a.size() > 3 && a.starts_with("--") && a.ends_with('=') && a.find('=') == a.size() - 1) {
      out.emplace_back(a.substr(0, a.size() - 1));
      out.emplace_back();
    } else {
      out.emplace_back(a);
    }
  }
  return out;
}

namespace {

int MainWithArgs(int argc, const char* const* argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "slurm-hook") {
    return RunSlurmHookCommand(
        argc - 1, argv + 1, [](const char* name) { return std::getenv(name); }, stderr);
  }
  CliState st;
  CLI::App app;
  BuildApp(app, st);
  if (auto code = Parse(app, argc, argv)) return *code;
  if (*st.agent_cmd) return RunAgent(st.agent, std::vector<std::string>(argv + 1, argv + argc));
  if (*st.demo_cmd) {
    return st.demo_local ? RunDemo(st.demo_seconds, st.demo_nvml_library) : RunScenarioDemo(st.demo_scenarios);
  }
  if (*st.version_cmd) {
    fmt::print("{}", VersionText());
    return kExitOk;
  }
  if (*st.metrics_doc_cmd) return RunMetricsDoc();
  if (*st.parse_cmd) return RunParseCommand(st.parse, stdout, stderr);
  if (*st.replay_cmd) return RunReplayCommand(st.replay, stdout, stderr);
  if (*st.scenario_check_cmd) return RunScenarioCheck(st.scenario_check, stdout, stderr);
  if (int rc = RunEvidenceCommand(st.evidence, stdout, stderr); rc >= 0) return rc;
  st.hub.read_again = [args = std::vector<std::string>(argv + 1, argv + argc)]() -> Result<HubCommandOptions> {
    CliState again;
    if (Status s = ParseAgain(args, again); !s) return std::unexpected(s.error());
    return again.hub.options;
  };
  if (int rc = RunHubCommand(st.hub, stdout, stderr); rc >= 0) return rc;
  return kExitUsage;  // unreachable: a subcommand is required
}

}  // namespace

int Main(int argc, const char* const* argv) {
  // `--kmsg=` (an empty value, as a chart or a script writes it) would make CLI11 take the next
  // argument as the value (`--kmsg= --once` read "--once" as the kernel log's path and started a
  // server): the empty value is passed as an argument of its own, which CLI11 takes as given.
  const std::vector<std::string> args = SplitEmptyAssignments(argc, argv);
  std::vector<const char*> ptrs;
  ptrs.reserve(args.size());
  for (const auto& a : args) ptrs.push_back(a.c_str());
  return MainWithArgs(static_cast<int>(ptrs.size()), ptrs.data());
}

Result<AgentOptions> ParseAgentCommandLine(const std::vector<std::string>& args) {
  CliState st;
  CLI::App app;
  BuildApp(app, st);
  std::vector<const char*> argv = {"ithbat", "agent"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    if (IsConfigError(e))
      return MakeErrorF(ErrorCode::kInvalidArgument, "config file: {}", ConfigErrorText(e));
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}", e.what());
  }
  return ResolveAgentOptions(st.agent);
}

}  // namespace ithbat::cli
