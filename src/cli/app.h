#pragma once
// The `ithbat` command line: agent, demo, version, metrics-doc. main() only calls Main(); the
// rest is this library, which the tests link.
//
// Exit codes: 0 ok; 2 usage error (unknown flag, bad value, bad config file); 1 a failure at
// run time (store, port, token file), with one clear line on stderr.
#include <string>
#include <vector>

#include "cli/agent_options.h"
#include "core/result.h"

namespace ithbat::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int Main(int argc, const char* const* argv);

// The command line as Main parses it: `--name=` (an empty value) becomes `--name` and an empty
// argument, which CLI11 takes as the value; given whole, CLI11 would take the next argument.
std::vector<std::string> SplitEmptyAssignments(int argc, const char* const* argv);

// Parses `ithbat agent <args>` exactly as Main does (flags, --config file, defaults) and
// resolves the options, without running anything. Errors: kInvalidArgument with the message
// Main would print.
Result<AgentOptions> ParseAgentCommandLine(const std::vector<std::string>& args);

}  // namespace ithbat::cli
