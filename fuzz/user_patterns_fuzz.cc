// User pattern sets: the JSON (and the RE2 patterns in it) is the input up to the first NUL
// byte; when it is accepted, the lines after the NUL go through a parser made from it. Parse
// must refuse bad input with an error, never throw or crash.
#include <cstring>

#include "fuzz_util.h"

using ithbat::collect::joblog::LineView;
using ithbat::collect::joblog::ParsedEvent;
using ithbat::collect::joblog::UserPatterns;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view lines = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  auto patterns = UserPatterns::Parse(json);
  if (!patterns) return 0;
  (void)patterns->names();
  auto parser = patterns->MakeParser();
  ithbat::fuzz::Require(parser != nullptr, "MakeParser returned null");
  patterns = UserPatterns();  // the parser must not depend on the sets' owner
  std::vector<ParsedEvent> events;
  ithbat::fuzz::ForEachLine(lines, [&](const LineView& line) {
    const size_t before = events.size();
    parser->Parse(line, events);
    ithbat::fuzz::CheckEvents(events, before);
    if (events.size() > 4096) events.clear();
  });
  return 0;
}
