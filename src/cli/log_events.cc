#include "cli/log_events.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/core.h>
#include <unistd.h>

#include "collect/joblog/text/line_assembler.h"
#include "collect/joblog/text/redact.h"
#include "collect/kmsg/xid_parse.h"

namespace ithbat::cli {

std::optional<std::string> ReadLogEvents(int fd, const std::string& name,
                                         collect::joblog::StreamParser* parser, const JobLogEventFn& on_job,
                                         const KernelLogEventFn& on_kernel, LogReadResult& result,
                                         const LogLineFn& on_line) {
  collect::joblog::LineAssembler assembler(collect::joblog::kMaxLineBytes);
  std::vector<collect::joblog::AssembledLine> lines;
  std::vector<collect::joblog::ParsedEvent> events;
  std::array<char, 64 * 1024> buf;
  uint64_t line_no = 0;  // ordinary lines completed so far; progress segments belong to the next
  auto handle = [&](collect::joblog::AssembledLine& l) {
    const uint64_t number = line_no + 1;
    if (!l.progress) line_no++;
    if (on_line) on_line(l.text, number);
    if (parser == nullptr) {
      // Kernel lines are the kernel's, kept as read (the collector does not redact them).
      if (auto rec = collect::ParseKernelLogLine(l.text)) on_kernel(collect::XidEvent(*rec), number);
      return;
    }
    // Redacted before it is parsed, as the agent does (joblog_collector.cc, HandleLine).
    collect::joblog::RedactSecrets(l.text);
    events.clear();
    parser->Parse(collect::joblog::LineView{l.text, l.progress, 1}, events);
    for (auto& e : events) {
      // The same redaction the agent applies before an event is stored (docs/joblog.md).
      collect::joblog::RedactSecrets(e.text);
      for (auto& [k, v] : e.attrs) collect::joblog::RedactSecrets(v);
      on_job(e, number, l.progress, parser->framework());
    }
  };
  std::optional<std::string> failure;
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      failure = fmt::format("{}: read failed: {}", name, std::strerror(errno));
      break;
    }
    if (n == 0) break;
    lines.clear();
    assembler.Feed(std::string_view(buf.data(), static_cast<size_t>(n)), 0, lines);
    for (auto& l : lines) handle(l);
  }
  if (!failure) {
    lines.clear();
    assembler.Flush(0, lines);
    for (auto& l : lines) handle(l);
  }
  result.lines = line_no;
  result.framework = parser ? std::string(parser->framework()) : std::string("kmsg");
  result.copies = parser ? parser->copies() : 0;
  return failure;
}

}  // namespace ithbat::cli
