#pragma once
// `ithbat hub --agent HOST:PORT [--agent ...] [--once]`: the diagnosis engine over every agent's
// data at once (src/hub/README.md, docs/hub.md). Long-running, it pulls each agent every
// --interval, serves /api/v1/diagnoses, /healthz and /metrics on --listen:--port and, with
// --webhook-url-file, posts each diagnosis transition to a Slack-compatible webhook. With --once it
// runs one round, prints the diagnoses as schema-v1 JSON lines and exits.
//
// Exit codes: 0 ok; 2 a bad flag value or token file; 1 a failure at run time (port taken, or
// with --once: no agent could be reached, or the engine failed), with one line on stderr.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's namespace
class App;
}  // namespace CLI

namespace ithbat::cli {

struct HubCommandOptions {
  std::vector<std::string> agents;  // [NODE=]HOST[:PORT]
  std::string agent_token_file;
  // ADDR:PORT as the agent's --listen takes it; an address alone (the older form) takes its port
  // from --port.
  std::string listen = "127.0.0.1:9480";
  int port = 9480;            // 0 = any free port (logged)
  bool port_given = false;    // --port was on the command line
  bool listen_given = false;  // --listen was
  std::string token_file;
  bool insecure_listen_without_token = false;  // beyond loopback without --token-file
  std::string interval = "10s";
  std::string lookback = "15m";
  std::string webhook_url_file;  // the URL is a secret (a Slack webhook's path is its key): a file, never argv
  double list_price = 0;  // $/GPU-hour
  bool once = false;
  std::string log_level = "info";
  std::string log_format = "human";
};

struct HubCommand {
  HubCommandOptions options;
  CLI::App* cmd = nullptr;
  // Reads the options again from the same command line (SIGHUP); unset: SIGHUP changes nothing.
  std::function<Result<HubCommandOptions>()> read_again;
};

// Declares `hub` on `app`, writing into `hub` (which must outlive the parse).
void AddHubCommand(CLI::App& app, HubCommand& hub);
// Runs it when it was the subcommand given; -1 otherwise.
int RunHubCommand(const HubCommand& hub, std::FILE* out, std::FILE* err);

}  // namespace ithbat::cli
