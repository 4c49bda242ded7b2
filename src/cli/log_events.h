#pragma once
// Reading a log file the way the agent reads a process's output, for the offline commands
// (`ithbat parse`, `ithbat replay`): blocks through the same line assembler (\r progress
// segments, ANSI removed, bounded lines), each line redacted before it is parsed and each event's
// text and attributes after, as the agent does (docs/joblog.md) — or, for kernel logs, each line
// through the kmsg collector's Xid reader.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "collect/joblog/parsers/parser.h"
#include "core/event.h"

namespace ithbat::cli {

struct LogReadResult {
  uint64_t lines = 0;     // ordinary lines (progress segments belong to the line they end in)
  std::string framework;  // the parser's detected framework at the end ("kmsg" for kernel logs)
  uint64_t copies = 0;    // lines that repeated a recent line's events (ranks merged into one file)
};

// A job-output event, with the 1-based number of the line it came from (a \r progress segment
// carries the number of the line it belongs to) and the framework that owned the stream then.
using JobLogEventFn = std::function<void(collect::joblog::ParsedEvent& event, uint64_t line, bool progress,
                                         std::string_view framework)>;
// A kernel-log Xid event as the kmsg collector builds it (time not set), with its line number.
using KernelLogEventFn = std::function<void(Event event, uint64_t line)>;
// Every line as read (before redaction and parsing), with its number: called before the events
// of that line are delivered.
using LogLineFn = std::function<void(std::string_view text, uint64_t line)>;

// Reads `fd` to its end. With a parser, every line goes through it and `on_job` sees each event;
// without, every line through the kernel-log reader and `on_kernel` sees each Xid. Returns an
// error message when a read fails (what was read before is delivered).
std::optional<std::string> ReadLogEvents(int fd, const std::string& name,
                                         collect::joblog::StreamParser* parser, const JobLogEventFn& on_job,
                                         const KernelLogEventFn& on_kernel, LogReadResult& result,
                                         const LogLineFn& on_line = {});

}  // namespace ithbat::cli
