#pragma once
// A parsed job-output event as the store keeps it: tagged with the process's identity (a rank
// the line names wins), redacted once more (a parser may join text from several lines, and it
// leaves the node), and marked with the framework that owned the stream. The agent's collector
// and `ithbat replay` both store events through this, so a replayed log is what the agent would
// have stored.
#include <string_view>

#include "collect/joblog/parsers/parser.h"
#include "core/event.h"
#include "core/identity.h"

namespace ithbat::collect::joblog {

Event StoredEvent(const Identity& identity, const ParsedEvent& parsed, TimeNs t, std::string_view framework);

}  // namespace ithbat::collect::joblog
