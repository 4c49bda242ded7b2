#pragma once
// Shared by the libFuzzer targets: how an input becomes lines, and the invariants every
// parser must keep (parser.h "Bounds"). A broken invariant aborts, which libFuzzer reports as
// a crash with the input that caused it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "collect/joblog/parsers/parser.h"
#include "require.h"

namespace ithbat::fuzz {

// Splits the input the way the line assembler delivers it: at '\n'; a segment that ends in
// '\r' is a progress segment; every third line comes from stderr; each cut to kMaxLineBytes
// (the assembler's bound — parsers never see longer lines, see line_assembler_fuzz for those).
template <class F>
void ForEachLine(std::string_view input, F&& f) {
  size_t index = 0;
  while (!input.empty()) {
    size_t end = input.find('\n');
    std::string_view line = input.substr(0, end);
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + 1);
    collect::joblog::LineView view;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
      view.progress = true;
    }
    view.text = line.substr(0, collect::joblog::kMaxLineBytes);
    view.fd = index++ % 3 == 2 ? 2 : 1;
    f(view);
  }
}

inline void CheckEvents(const std::vector<collect::joblog::ParsedEvent>& events, size_t before) {
  Require(events.size() >= before, "events removed from the output");
  Require(events.size() - before <= collect::joblog::kMaxEventsPerLine, "more than kMaxEventsPerLine events");
  for (size_t i = before; i < events.size(); ++i) {
    Require(events[i].text.size() <= collect::joblog::kMaxEventTextBytes, "event text over kMaxEventTextBytes");
    Require(events[i].name.size() <= collect::joblog::kMaxLineBytes, "event name longer than a line");
  }
}

}  // namespace ithbat::fuzz
