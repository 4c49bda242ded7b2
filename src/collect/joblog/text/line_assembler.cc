#include "collect/joblog/text/line_assembler.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collect/joblog/text/redact.h"

namespace ithbat::collect::joblog {
namespace {

constexpr unsigned char kEscByte = 0x1b;
constexpr unsigned char kBel = 0x07;

// Bytes that are plain text: everything but C0 controls and DEL. Bytes >= 0x80 are kept (UTF-8;
// whoever serves the text as JSON repairs invalid sequences there).
inline bool IsText(unsigned char c) { return c >= 0x20 && c != 0x7f; }

// The end of the run of text bytes starting at p[i], eight bytes at a time while no byte in
// the word is a control byte (SWAR: a byte below 0x20, or equal to 0x7f).
size_t TextRunEnd(const unsigned char* p, size_t i, size_t n) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  constexpr uint64_t kHigh = 0x8080808080808080ull;
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    const uint64_t below_space = (w - kOnes * 0x20) & ~w & kHigh;
    const uint64_t del = w ^ (kOnes * 0x7f);
    const uint64_t is_del = (del - kOnes) & ~del & kHigh;
    if ((below_space | is_del) != 0) break;
    i += 8;
  }
  while (i < n && IsText(p[i])) ++i;
  return i;
}

}  // namespace

LineAssembler::LineAssembler(size_t max_line_bytes) : max_line_bytes_(std::max<size_t>(max_line_bytes, 1)) {}

void LineAssembler::Emit(TimeNs t, bool progress, std::vector<AssembledLine>& out, bool cut) {
  if (cut) {
    // The line continues past what is kept: its last word is unfinished, and redaction cannot
    // judge half a word (half a URL password, half a token), so it is dropped (redact.h,
    // OpenTailStart). A line that is one unfinished word keeps what OpenTailStart allows.
    const size_t keep = OpenTailStart(pending_);
    dropped_bytes_ += pending_.size() - keep;
    pending_.resize(keep);
  }
  AssembledLine line;
  line.text = std::move(pending_);
  line.time = t;
  line.progress = progress;
  line.truncated = cut;
  pending_.clear();
  ++lines_;
  if (cut) ++truncated_lines_;
  out.push_back(std::move(line));
}

// A terminator: emit what is pending unless the line was already emitted when it hit the
// bound (cutting_), and start a new line.
void LineAssembler::EndLine(TimeNs t, bool progress, std::vector<AssembledLine>& out) {
  if (cutting_) {
    cutting_ = false;
  } else if (!pending_.empty() || !progress) {
    Emit(t, progress, out, /*cut=*/false);
  }
}

bool LineAssembler::EscapeByte(unsigned char c) {
  if (++escape_bytes_ > kMaxEscapeBytes) {
    escape_ = Escape::kNone;
    return false;
  }
  switch (escape_) {
    case Escape::kEsc:
      if (c == '[') {
        escape_ = Escape::kCsi;
      } else if (c == ']') {
        escape_ = Escape::kOsc;
      } else if (c >= 0x20 && c <= 0x2f) {
        // intermediate byte of an nF sequence (ESC ( B): the final byte follows
      } else if (c < 0x20) {
        escape_ = Escape::kNone;  // ESC then a control: a lone ESC, the control still counts
        return false;
      } else {
        escape_ = Escape::kNone;  // two-byte sequence (ESC 7, ESC M, ...)
      }
      return true;
    case Escape::kCsi:
      if (c >= 0x40 && c <= 0x7e) {
        escape_ = Escape::kNone;
      } else if (c < 0x20) {
        escape_ = Escape::kNone;  // malformed: never let a CSI swallow a line end
        return false;
      }
      return true;
    case Escape::kOsc:
      if (c == kBel) {
        escape_ = Escape::kNone;
      } else if (c == kEscByte) {
        escape_ = Escape::kOscEsc;
      } else if (c == '\n' || c == '\r') {
        escape_ = Escape::kNone;
        return false;
      }
      return true;
    case Escape::kOscEsc:
      // ESC \ is the string terminator; anything else after ESC starts a new escape.
      escape_ = Escape::kEsc;
      if (c == '\\') {
        escape_ = Escape::kNone;
        return true;
      }
      escape_bytes_ = 1;
      return EscapeByte(c);
    case Escape::kNone:
      break;
  }
  return false;
}

void LineAssembler::Feed(std::string_view bytes, TimeNs t, std::vector<AssembledLine>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (escape_ != Escape::kNone) {
      if (EscapeByte(p[i])) {
        ++i;
        continue;
      }
      // Not part of the sequence: fall through and handle p[i] as ordinary input.
    }
    const unsigned char c = p[i];
    if (pending_cr_) {
      if (c == '\r') {  // "\r\r": still one terminator
        ++i;
        continue;
      }
      pending_cr_ = false;
      if (c == '\n') {  // "\r\n": an ordinary line end
        EndLine(t, /*progress=*/false, out);
        ++i;
        continue;
      }
      EndLine(cr_time_, /*progress=*/true, out);
    }
    if (IsText(c)) {
      // Fast path: the run of plain text up to the next control byte, appended at once.
      const size_t j = TextRunEnd(p, i + 1, n);
      const size_t run = j - i;
      if (cutting_) {
        dropped_bytes_ += run;
      } else {
        const size_t room = max_line_bytes_ - pending_.size();
        const size_t take = std::min(run, room);
        pending_.append(bytes.data() + i, take);
        if (take < run) {
          // The line outgrew the bound: emit the cut line now (its end may never come) and
          // drop the rest of it.
          dropped_bytes_ += run - take;
          cutting_ = true;
          Emit(t, /*progress=*/false, out, /*cut=*/true);
        }
      }
      i = j;
      continue;
    }
    ++i;
    switch (c) {
      case '\n':
        EndLine(t, /*progress=*/false, out);
        break;
      case '\r':
        pending_cr_ = true;
        cr_time_ = t;
        break;
      case '\t':
        if (cutting_) {
          ++dropped_bytes_;
        } else if (pending_.size() < max_line_bytes_) {
          pending_.push_back('\t');
        } else {
          ++dropped_bytes_;
          cutting_ = true;
          Emit(t, /*progress=*/false, out, /*cut=*/true);
        }
        break;
      case kEscByte:
        escape_ = Escape::kEsc;
        escape_bytes_ = 0;
        break;
      default:
        break;  // other control bytes (BEL, backspace, NUL, ...) are removed
    }
  }
}

void LineAssembler::Flush(TimeNs t, std::vector<AssembledLine>& out) { End(t, out, /*cut=*/false); }

void LineAssembler::Cut(TimeNs t, std::vector<AssembledLine>& out) { End(t, out, /*cut=*/true); }

void LineAssembler::End(TimeNs t, std::vector<AssembledLine>& out, bool cut) {
  escape_ = Escape::kNone;
  if (pending_cr_) {
    // A progress segment its "\r" ended: complete, whatever comes next.
    pending_cr_ = false;
    EndLine(cr_time_, /*progress=*/true, out);
    return;
  }
  if (cutting_) {
    cutting_ = false;
    return;
  }
  if (!pending_.empty()) Emit(t, /*progress=*/false, out, cut);
}

}  // namespace ithbat::collect::joblog
