#include "cli/slurm_hook_command.h"

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "cli/app.h"
#include "collect/slurm/spool.h"
#include "core/time.h"

namespace ithbat::cli {

int RunSlurmHookCommand(int argc, const char* const* argv, const collect::EnvLookup& getenv, std::FILE* err) {
  std::string which;
  std::string spool = collect::kDefaultSlurmSpool;
  bool strict = false;
  CLI::App app(
      "Record a Slurm job's start (prolog) or end (epilog) for the agent on this node (docs/slurm.md)",
      "ithbat slurm-hook");
  app.add_option(
         "event", which,
         "prolog or epilog; left out, slurmd's SLURM_SCRIPT_CONTEXT says (prolog_slurmd, epilog_slurmd)")
      ->check(CLI::IsMember({"prolog", "epilog"}));
  app.add_option("--spool-dir", spool, "Where the agent reads the records (its --slurm-spool)")
      ->capture_default_str();
  app.add_flag("--strict", strict,
               "Exit 1 on the hook's own errors (default: report them and exit 0, so a "
               "broken hook never drains the node)");
  // Whatever happens below, a job must not fail because of us: errors go to stderr (slurmd's
  // log) and the exit code is 0 unless --strict.
  auto failed = [&](std::string_view what) {
    fmt::print(err, "ithbat slurm-hook: {} (job not recorded; the job goes on)\n", what);
    return strict ? kExitFailure : kExitOk;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    for (int i = 1; i < argc; ++i) strict = strict || std::string_view(argv[i]) == "--strict";
    return failed(e.what());
  }
  if (which.empty()) {
    const char* ctx = getenv("SLURM_SCRIPT_CONTEXT");
    const std::string_view c = ctx == nullptr ? "" : ctx;
    if (c == "prolog_slurmd") {
      which = "prolog";
    } else if (c == "epilog_slurmd") {
      which = "epilog";
    } else {
      return failed(fmt::format("no event given and SLURM_SCRIPT_CONTEXT is '{}': say prolog or epilog",
                                c.substr(0, 32)));
    }
  }
  const auto event = which == "prolog" ? collect::JobHookEvent::kStart : collect::JobHookEvent::kEnd;
  auto record = collect::RecordFromEnvironment(event, getenv, NowNs());
  if (!record) return failed(record.error().message);
  if (auto s = collect::WriteSpoolRecord(spool, *record); !s) return failed(s.error().message);
  return kExitOk;
}

}  // namespace ithbat::cli
