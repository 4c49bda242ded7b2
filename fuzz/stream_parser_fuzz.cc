// The per-stream orchestrator in auto mode: detection, ownership, de-duplication. An input
// whose first line starts with "#!" gives the command-line hint (the rest of that line).
#include "fuzz_util.h"

using ithbat::collect::joblog::LineView;
using ithbat::collect::joblog::ParsedEvent;
using ithbat::collect::joblog::StreamParser;
using ithbat::collect::joblog::StreamParserOptions;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  StreamParserOptions options;
  if (input.starts_with("#!")) {
    const size_t end = input.find('\n');
    options.command_line = std::string(input.substr(2, end == std::string_view::npos ? end : end - 2));
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + 1);
  }
  auto parser = StreamParser::Create(options);
  ithbat::fuzz::Require(parser.has_value(), "auto mode refused");
  std::vector<ParsedEvent> events;
  uint64_t lines = 0;
  ithbat::fuzz::ForEachLine(input, [&](const LineView& line) {
    const size_t before = events.size();
    parser->Parse(line, events);
    ++lines;
    ithbat::fuzz::CheckEvents(events, before);
    if (events.size() > 4096) events.clear();
  });
  ithbat::fuzz::Require(parser->lines() == lines, "line count");
  ithbat::fuzz::Require(parser->recognised_lines() <= parser->lines(), "recognised more lines than seen");
  return 0;
}
