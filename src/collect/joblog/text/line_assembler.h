#pragma once
// Bytes a process wrote → lines, per (pid, fd). The capture hands over write() payloads as
// they come (a line may span writes; a write may hold many lines, or an 8 KiB block of a
// block-buffered Python stdout). Handles:
//   * "\n" and "\r\n" end a line;
//   * a bare "\r" ends a progress segment (tqdm, Lightning bars redraw with \r): each segment
//     is emitted with progress = true; the segment a "\n" ends is an ordinary line;
//   * ANSI escape sequences (CSI, OSC, two-byte ESC) and other control bytes except \t are
//     removed, also when a sequence is split across writes;
//   * a line longer than the bound is cut at the bound, emitted with truncated = true, and the
//     rest of it (up to its end) is dropped and counted — memory stays O(bound). A cut line
//     also loses its unfinished last word (redact.h, OpenTailStart): redaction cannot judge
//     half a secret.
// A "\r" is only known to be bare when the next byte arrives (it may be the first half of a
// "\r\n" split across writes), so a progress segment is emitted one byte late: when the next
// write starts (tqdm's next refresh begins with "\r" anyway) or at Flush. Repeated "\r" count as
// one; empty progress segments are not emitted. Empty "\n"-terminated lines are.
// Not thread-safe: one assembler per (pid, fd), used by one thread.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ithbat::collect::joblog {

struct AssembledLine {
  std::string text;       // without terminator, escapes removed
  TimeNs time = 0;        // time of the write that completed the line
  bool progress = false;  // ended by a bare \r
  bool truncated = false; // cut at the bound, or bytes after it were lost
};

class LineAssembler {
 public:
  explicit LineAssembler(size_t max_line_bytes = 16 * 1024);

  // Appends the lines `bytes` completes to `out`.
  void Feed(std::string_view bytes, TimeNs t, std::vector<AssembledLine>& out);
  // Emits the pending partial line, if any, as complete (the process exited, the file ended).
  void Flush(TimeNs t, std::vector<AssembledLine>& out);
  // Emits the pending partial line, if any, as cut (truncated, its unfinished last word
  // dropped): the bytes that followed it were lost.
  void Cut(TimeNs t, std::vector<AssembledLine>& out);

  size_t pending_bytes() const { return pending_.size(); }
  uint64_t lines() const { return lines_; }
  uint64_t truncated_lines() const { return truncated_lines_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }  // beyond the bound

 private:
  enum class Escape : uint8_t { kNone, kEsc, kCsi, kOsc, kOscEsc };
  // An escape sequence longer than this is not one (binary garbage starting with ESC): the
  // state machine gives up and the bytes count as dropped, so it never swallows a whole stream.
  static constexpr size_t kMaxEscapeBytes = 256;
  void Emit(TimeNs t, bool progress, std::vector<AssembledLine>& out, bool cut);
  void End(TimeNs t, std::vector<AssembledLine>& out, bool cut);
  void EndLine(TimeNs t, bool progress, std::vector<AssembledLine>& out);
  // Consumes one byte while inside an escape sequence; false when `c` ended the sequence
  // abnormally and must be processed as ordinary input.
  bool EscapeByte(unsigned char c);

  size_t max_line_bytes_;
  std::string pending_;
  bool cutting_ = false;       // the current line hit the bound: drop until its end
  bool pending_cr_ = false;    // the previous byte was \r (a \n right after makes it \r\n)
  TimeNs cr_time_ = 0;         // time of the write that held that \r
  Escape escape_ = Escape::kNone;
  size_t escape_bytes_ = 0;
  uint64_t lines_ = 0;
  uint64_t truncated_lines_ = 0;
  uint64_t dropped_bytes_ = 0;
};

}  // namespace ithbat::collect::joblog
