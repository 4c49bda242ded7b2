#pragma once
// The options of `ithbat agent`: declared once as CLI11 flags, which are also the keys of the
// config file (TOML or INI, `--config PATH`): every flag `--some-key` is `some-key = ...` in
// an `[agent]` section or at the top of the file. A flag given on the command line wins over
// the file. Documented key by key in docs/configuration.md and packaging/agent.example.toml.
//
// Two steps, so that a config file with a bad value is reported the same way as a bad flag:
// CLI11 fills AgentFlags with text, ResolveAgentOptions checks and converts every value and
// names the key in its error.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/logging.h"
#include "core/result.h"
#include "core/time.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's namespace
class App;
}  // namespace CLI

namespace ithbat::collect::joblog {
class UserPatterns;
}  // namespace ithbat::collect::joblog

namespace ithbat::cli {

// The text of each option as given (defaults are the documented defaults).
struct AgentFlags {
  std::string listen;  // default "127.0.0.1:<serve::kDefaultPort>"
  std::string token_file;
  bool insecure_listen_without_token = false;  // beyond loopback without --token-file
  std::string procfs = "/proc";
  std::string sysfs = "/sys";
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string kmsg = "/dev/kmsg";
  std::string slurm_spool = "/run/ithbat/slurm";  // collect/slurm/spool.h kDefaultSlurmSpool
  std::string node;  // default: the host name
  std::string cluster;
  bool dcgm_exporter_names = false;
  std::string interval = "1s";
  std::string collect_deadline = "5s";
  std::string data_dir;
  std::string retention = "24h";
  std::string memory_budget = "256MiB";
  std::string disk_budget = "2GiB";
  std::string flush_interval = "10s";
  std::string log_format = "human";
  std::string log_level = "info";
  std::string joblog = "ebpf";
  std::string joblog_tail;  // comma-separated PATH[?job=ID&rank=N]
  std::string joblog_format = "auto";
  std::string joblog_patterns;
  std::string joblog_opt_out;  // comma-separated job:ID / user:NAME
  std::string probe_budget = "0.01";  // CUDA probes: added time per process (fraction); 0 = off
  std::string probe_cost_ns = "0";    // cost of one launch-probe hit; 0 = measured at start
  std::string sched_io = "on";        // host scheduling and file I/O probes: on|off
  // The node-local diagnosis engine's cadence; 0 = off.
  std::string diagnose_interval = "10s";
  std::string diagnose_lookback = "15m";       // how far back each round looks
  std::string diagnose_resolve_after = "2m";   // a diagnosis nothing supports this long is resolved
  std::string list_price = "0";                // $/GPU-hour for the effective price; 0 = not computed
  bool once = false;

  AgentFlags();
};

// Checked, converted options.
struct AgentOptions {
  std::string listen_address = "127.0.0.1";
  uint16_t listen_port = 0;  // 0 = any free port
  std::string token_file;    // empty = no authentication
  std::string procfs = "/proc";
  std::string sysfs = "/sys";                         // InfiniBand ports
  std::string nvml_library = "libnvidia-ml.so.1";     // soname or path; loaded with dlopen
  std::string kmsg = "/dev/kmsg";                     // kernel log for Xid lines ("" = off)
  std::string slurm_spool = "/run/ithbat/slurm";      // Slurm prolog/epilog records ("" = off)
  std::string node;
  bool node_given = false;           // --node was set: /metrics labels every series node=...
  std::string cluster;               // non-empty: /metrics labels every series cluster=...
  bool dcgm_exporter_names = false;  // /metrics also carries the GPU counters as dcgm-exporter names them
  TimeNs interval = kNsPerSec;
  TimeNs collect_deadline = 5 * kNsPerSec;
  std::string data_dir;  // empty = memory only
  TimeNs retention = 24 * 3600 * kNsPerSec;
  uint64_t memory_budget_bytes = 256ull << 20;
  uint64_t disk_budget_bytes = 2ull << 30;
  TimeNs flush_interval = 10 * kNsPerSec;
  agent::LogFormat log_format = agent::LogFormat::kHuman;
  std::string log_level = "info";
  // Job output capture (collect/joblog): mode ebpf|tail|off, files to follow, parser format,
  // user pattern sets (loaded and checked here), opt-out entries.
  std::string joblog = "ebpf";
  std::vector<std::string> joblog_tail;  // each PATH[?job=ID&rank=N], checked
  std::string joblog_format = "auto";
  std::string joblog_patterns;  // path ("" = none)
  std::shared_ptr<const collect::joblog::UserPatterns> joblog_user_patterns;  // loaded from it
  std::string joblog_opt_out;   // checked
  // CUDA/NCCL probes' overhead budget (collect/probes README "Overhead budget").
  double probe_budget = 0.01;  // [0, 1]; 0 = launch probes never duty-cycled
  double probe_cost_ns = 0;    // [0, 1e9]; 0 = self-calibration at start
  // Host scheduling and file I/O of the tracked processes (collect/sched_io).
  bool sched_io = true;
  // How often the node-local diagnosis engine runs over this node's store (0 = off:
  // /api/v1/diagnoses answers 503 and no ithbat_diagnosis_* metric is written).
  TimeNs diagnose_interval = 10 * kNsPerSec;
  TimeNs diagnose_lookback = 15 * 60 * kNsPerSec;
  TimeNs diagnose_resolve_after = 120 * kNsPerSec;
  double list_price_per_gpu_hour = 0;  // docs/diagnoses.md "Impact": effective price = list ÷ productive share
  bool once = false;
};

// Bounds on values that make no sense outside them (and would spin or overflow).
inline constexpr TimeNs kMinInterval = 10 * kNsPerMs;
inline constexpr TimeNs kMaxInterval = 3600 * kNsPerSec;

// Declares the flags on `cmd` (the `agent` subcommand), writing into `flags`, which must
// outlive the parse.
void AddAgentFlags(CLI::App& cmd, AgentFlags& flags);

// Checks and converts. Errors: kInvalidArgument with a message that starts with the key
// ("interval: ..."), so a bad value in a config file is easy to find.
Result<AgentOptions> ResolveAgentOptions(const AgentFlags& flags);

// "127.0.0.1:9479", "[::1]:9479", "0.0.0.0:0". Errors: kInvalidArgument.
struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};
Result<ListenAddress> ParseListenAddress(std::string_view text);

// Reads a secret (a bearer token, a webhook URL) from a file, never from the command line, where
// every user sees it in `ps`: the content with surrounding whitespace removed. Refuses a file that
// other users may read (kPermission, saying how to fix it), a missing or unreadable file
// (kNotFound / kIo), a symlink another user owns (FollowTrustedLinks), an empty one
// (kInvalidArgument), and files over 4 KiB (kResourceExhausted). `what` names it in errors
// ("token file").
Result<std::string> ReadSecretFile(const std::string& path, std::string_view what);
inline constexpr size_t kMaxSecretFileBytes = 4096;

// The file a secret's path leads to. A symlink is followed only when root or this process's user
// owns it: a user could otherwise point one at a file only root may read. Kubernetes mounts a
// Secret's keys as root's links (token -> ..data/token) and swaps them when the Secret changes,
// so a Secret volume works and a SIGHUP reads the new token. At most kMaxSecretFileLinks links
// (kInvalidArgument beyond); the last component of the result is not a symlink.
Result<std::string> FollowTrustedLinks(const std::string& path, std::string_view what);
inline constexpr int kMaxSecretFileLinks = 8;

// ReadSecretFile for a bearer token, which must also be sendable in an HTTP header
// (kInvalidArgument otherwise).
Result<std::string> ReadTokenFile(const std::string& path);

// Whether a listen address is reachable from this machine only: 127.0.0.0/8, ::1 (also
// bracketed, and IPv4-mapped), "localhost". A wildcard or any other name is not.
bool IsLoopbackAddress(std::string_view host);

// An agent or hub serving beyond loopback without a token serves every series, event and
// diagnosis to anyone who reaches it: refused (kInvalidArgument, saying what to do) unless the
// operator passed --insecure-listen-without-token.
Status CheckListenNeedsToken(std::string_view host, bool has_token, bool insecure_allowed);

// The names `--log-level` accepts.
bool IsValidLogLevel(std::string_view level);

// The machine's host name ("localhost" if it cannot be read).
std::string HostName();

}  // namespace ithbat::cli
