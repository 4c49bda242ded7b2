#pragma once
// Child processes of the simulator: spawn with an environment, redirections, a process group of
// their own (so one kill reaches every rank and data-loader worker under a launcher) and death
// with the parent; the `launch` and `burn` modes that ithbat-sim re-executes itself in.
//
// Everything a child needs is built before fork(): after it, only async-signal-safe calls run
// (the runner may have threads: NodeWorld/Storage helpers).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/types.h>

#include "core/result.h"
#include "runner/plan.h"

namespace ithbat::sim::runner {

struct SpawnOptions {
  std::string path;                // executable
  std::vector<std::string> argv;   // argv[0] included (may differ from path: a process's name)
  Env env;                         // added to (or replacing in) this process's environment
  std::vector<std::string> unset;  // variables removed from the inherited environment ("X_*": a prefix)
  // When not empty, only these variables of this process's environment are inherited ("X_*": a
  // prefix; WorkloadAllowList() for workloads), then `unset` and `env` apply.
  std::vector<std::string> keep_only;
  std::string output;              // stdout+stderr appended to this file ("" = /dev/null)
  bool own_process_group = true;   // setpgid(0, 0): the child leads a group of its own
  bool die_with_parent = true;     // PR_SET_PDEATHSIG SIGKILL
  int nice = 0;                    // added niceness
};
Result<pid_t> Spawn(const SpawnOptions& options);

// What a launcher must not inherit from whoever started ithbat-sim (a CI job inside Slurm or a
// pod, a shell with RANK set): launcher, rank and GPU variables and the simulator's own; the
// launcher sets the ones its style has.
const std::vector<std::string>& HostLauncherVariables();

// What a workload (launcher and its ranks, inference server, burner) may inherit from whoever
// started ithbat-sim: PATH, HOME, LANG, LC_*, TZ, TMPDIR. Everything else (CI tokens, cloud
// credentials) stays behind; the runner adds the launcher and simulator variables itself.
const std::vector<std::string>& WorkloadAllowList();

// The merged environment (environ, only `keep_only` of it when not empty, minus unset, plus env)
// as "K=V" strings. An `unset` or `keep_only` entry ending in '*' names every variable with that
// prefix.
std::vector<std::string> MergedEnvironment(const Env& env, const std::vector<std::string>& unset = {},
                                           const std::vector<std::string>& keep_only = {});

// A free TCP port on 127.0.0.1 (bound then released: the agent binds it right after).
Result<int> FreeLoopbackPort();
// GET http://127.0.0.1:<port><path> with a bounded wait; the status code and the body (at most
// max_body bytes kept), or an error when nothing answered. A minimal client: the simulator does
// not link an HTTP library.
struct HttpAnswer {
  int status = 0;
  std::string body;
};
Result<HttpAnswer> HttpGet(int port, const std::string& path, int timeout_ms, size_t max_body = 64 << 10);
Result<int> HttpGetStatus(int port, const std::string& path, int timeout_ms);
// Whether the TCP socket listening on 127.0.0.1:<port> (/proc/net/tcp) is an open file of
// process `pid`: what tells our agent or server from a foreign listener on a reused port.
bool ListenerOwnedBy(pid_t pid, int port);

// The `ithbat-sim launch --desc FILE` mode (a launcher: forks one node's ranks of a job, copies
// their output to the job's launcher-<node>.out, reports pids and exits; README.md).
int RunLauncherMode(const std::filesystem::path& desc_path);
// The `ithbat-sim burn` mode: a CPU burner with a duty cycle (busy `duty` of every period,
// periods drawn between period_min_ms and period_max_ms from seed); runs until killed.
int RunBurnMode(double duty, double period_min_ms, double period_max_ms, uint64_t seed);

// The description a launcher reads (written by the runner as jobs/<job>/launch-<node>.json).
struct LaunchRank {
  int64_t rank = 0;
  int64_t local_rank = 0;
  Env env;
};
struct LaunchDescription {
  std::string style;  // srun, torchrun, k8s
  std::string job;
  std::string node;
  std::string process_name;          // comm of the launcher
  std::vector<std::string> program;  // the rank command line
  std::string output;                // launcher-<node>.out
  std::string pids;                  // "start <rank> <host pid>" / "exit <rank> <status>" lines
  std::vector<LaunchRank> ranks;
};
std::string LaunchDescriptionToJson(const LaunchDescription& d);
Result<LaunchDescription> ParseLaunchDescription(std::string_view text);

// A launcher's report, parsed (the runner reads it for world.json).
struct PidReport {
  std::vector<std::pair<int64_t, int64_t>> started;  // rank, host pid
  std::vector<std::pair<int64_t, int64_t>> exited;   // rank, exit status (128+signal when killed)
};
PidReport ParsePidReport(std::string_view text);

}  // namespace ithbat::sim::runner
