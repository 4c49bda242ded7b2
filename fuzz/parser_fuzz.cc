// One built-in parser, by name (ITHBAT_FUZZ_PARSER, one binary per parser — fuzz/CMakeLists.txt),
// fed the input line by line with its per-stream state kept across lines.
#include "fuzz_util.h"

using ithbat::collect::joblog::FindParser;
using ithbat::collect::joblog::LineView;
using ithbat::collect::joblog::ParsedEvent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* info = FindParser(ITHBAT_FUZZ_PARSER);
  ithbat::fuzz::Require(info != nullptr, "parser " ITHBAT_FUZZ_PARSER " is not registered");
  auto parser = info->make();
  ithbat::fuzz::Require(parser != nullptr && parser->name() == ITHBAT_FUZZ_PARSER, "factory returned another parser");
  std::vector<ParsedEvent> events;
  ithbat::fuzz::ForEachLine(std::string_view(reinterpret_cast<const char*>(data), size), [&](const LineView& line) {
    const size_t before = events.size();
    parser->Parse(line, events);
    ithbat::fuzz::CheckEvents(events, before);
    if (events.size() > 4096) events.clear();
  });
  return 0;
}
