#pragma once
// `ithbat parse [--format NAME|auto] [--patterns FILE] [--command-line TEXT] FILE… | -`:
// runs the agent's own job-output pipeline (line assembly with \r progress segments and ANSI
// removal, then the per-stream parsers with auto-detection) over files or stdin and prints one
// JSON line per event. It is how a user checks what Ithbat will see in their logs and tries a
// pattern set before deploying it. The JSON fields are documented in docs/joblog.md.
// `--format kmsg` reads kernel-log lines instead (dmesg, journalctl -k, /dev/kmsg records) as the
// kmsg collector does and prints its xid events: how a user checks an Xid offline.
#include <cstdio>
#include <string>
#include <vector>

namespace ithbat::cli {

struct ParseCommandOptions {
  std::string format = "auto";
  std::string patterns_file;  // user pattern sets (JSON), optional
  std::string command_line;   // the job's command line, a detection hint
  std::vector<std::string> files;  // "-" = stdin; empty = stdin
  bool list = false;          // print the built-in parsers and exit
  bool summary = false;       // a summary line per file on stderr
};

// Returns the process exit code: 0 when every input was read, 1 when one could not be (the
// others are still parsed), 2 for a bad format name or pattern file.
int RunParseCommand(const ParseCommandOptions& options, std::FILE* out, std::FILE* err);

}  // namespace ithbat::cli
