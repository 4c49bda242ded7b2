#pragma once
// The raw captured text, kept on the node only: a bounded ring of redacted lines (oldest
// dropped first when the byte budget is reached). Only parsed values leave the agent by
// default; this ring is what `ithbat record` may put into an evidence bundle and what an
// operator can read locally when the agent is configured to serve it. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/time.h"

namespace ithbat::collect::joblog {

struct RawLine {
  TimeNs time = 0;
  int32_t pid = -1;
  int32_t fd = -1;
  std::string text;  // already redacted
};

class RawRing {
 public:
  explicit RawRing(size_t budget_bytes = 4u << 20);
  // Redacts `line.text` (RedactSecrets) and appends it; returns secrets replaced.
  size_t Append(RawLine line);
  // Appends a line whose text the caller has already redacted (the collector redacts each
  // line once, before the ring and the parsers read it).
  void AppendRedacted(RawLine line);
  // Lines with time in [from, to), oldest first, optionally of one pid (pid < 0: all). When
  // more than max_lines match, the newest max_lines are returned (the end of a log is what
  // explains a failure).
  std::vector<RawLine> Read(TimeNs from, TimeNs to, int32_t pid = -1, size_t max_lines = 10000) const;
  size_t bytes() const;  // text bytes plus kLineOverheadBytes per line
  uint64_t dropped_lines() const;

 private:
  // Counted per line on top of its text, so a flood of empty lines is bounded too.
  static constexpr size_t kLineOverheadBytes = sizeof(RawLine);
  size_t budget_bytes_;
  mutable std::mutex mu_;
  std::deque<RawLine> lines_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace ithbat::collect::joblog
