#pragma once
// Private helpers of the always-on parsers (loss scaler, errors, serving), the generic parser
// and user pattern sets. Everything here works on string_views of the line and allocates
// nothing, so a parser can run these checks on every line of every process.
#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog::signals {

// Substring search: scan::Find (a vectorised two-byte filter; glibc memmem pays a set-up cost per
// call that dominates on ~100-byte lines). An empty needle is found at `from`, as memmem does.
inline size_t Find(std::string_view hay, std::string_view needle, size_t from = 0) {
  if (from > hay.size()) return std::string_view::npos;
  if (needle.empty()) return from;
  return scan::Find(hay, needle, from);
}
inline bool Contains(std::string_view hay, std::string_view needle) {
  return Find(hay, needle) != std::string_view::npos;
}

constexpr bool IsDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
constexpr bool IsWordChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '_'; }

inline std::string_view SkipSpaces(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}
inline std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The longest prefix of `s` that a number can be spelt with ([0-9A-Za-z.+-]: digits, exponent,
// nan/inf spellings).
inline std::string_view NumberToken(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (IsDigit(s[i]) || IsAlpha(s[i]) || s[i] == '.' || s[i] == '+' || s[i] == '-')) ++i;
  return s.substr(0, i);
}
// ParseNumber with a fast path: plain decimals go through std::from_chars (no locale, no
// strtod), everything else (nan/inf spellings, "+1") through ParseNumber.
std::optional<double> Num(std::string_view tok);

// A run of digits with an optional leading '-', as an integer (nullopt when absent or > 18 digits).
std::optional<int64_t> LeadingInt(std::string_view s, size_t* consumed = nullptr);

// The text right after the first `key` in `line` (npos-safe: empty view + false when absent).
inline std::optional<std::string_view> After(std::string_view line, std::string_view key, size_t from = 0) {
  const size_t p = Find(line, key, from);
  if (p == std::string_view::npos) return std::nullopt;
  return line.substr(p + key.size());
}
// The number / integer printed after `key` (spaces skipped).
std::optional<double> NumberAfter(std::string_view line, std::string_view key);
std::optional<int64_t> IntAfter(std::string_view line, std::string_view key);
// The digits printed after `key` (spaces skipped), as text; empty when none.
std::string_view DigitsAfter(std::string_view line, std::string_view key);

// "20.00 MiB", "1.95 GiB", "0 bytes", "512 KiB" at the start of `s` → bytes. `consumed` gets
// the length read. Binary units (PyTorch prints KiB/MiB/GiB); KB/MB/GB are read as the same.
std::optional<int64_t> ParseSizePrefix(std::string_view s, size_t* consumed = nullptr);

// The rank a prefix names: "[rank3]:" (torch ≥ 2.2 per-rank stderr), "[default3]:" (torchrun
// --tee/--log-dir), "3: " at the start (srun --label); -1 when none. Looks at the first 96 bytes.
int32_t LinePrefixRank(std::string_view line);
// The line without launcher prefixes: "[rankN]:", "[defaultN]:", "N: ", "stderr: ", "stdout: "
// (repeatedly, at the start), so a message can be matched at its own start.
std::string_view StripLauncherPrefixes(std::string_view line);

// The line redacted, then cut to `max` bytes, never in the middle of a UTF-8 sequence (redact.h,
// RedactedExcerpt).
std::string CutText(std::string_view line, size_t max = kMaxEventTextBytes);
// A value for an attribute: integers without ".0", others in shortest round-trip form.
std::string FormatNumber(double v);
// "SIGKILL" for -9 etc. (a negative exit code of a child = killed by that signal); "" if unknown.
std::string_view SignalName(int64_t signo);

// Which of up to 32 anchors (each >= 4 bytes) occur in a text. Every anchor holds all of its
// 4-byte windows at offsets 0..s-1, s = (shortest anchor - 3) capped at 8, so only every s-th
// position of the text needs looking at: a 4-byte window there is hashed into a 4096-bit table
// and only table hits are compared. With long anchors (>= 11 bytes) a foreign line costs one
// table probe per 8 bytes and no allocation; this is each parser's first, cheap test.
class AnchorFilter {
 public:
  static constexpr size_t kMaxAnchors = 32;
  static constexpr size_t kMaxStride = 8;

  constexpr AnchorFilter(std::initializer_list<std::string_view> anchors) {
    size_t shortest = SIZE_MAX;
    for (std::string_view a : anchors) {
      if (count_ == kMaxAnchors || a.size() < 4) continue;  // a programming error; skipped, not UB
      anchors_[count_++] = a;
      if (a.size() < shortest) shortest = a.size();
    }
    if (count_ == 0) return;
    min_len_ = shortest;
    stride_ = std::min(kMaxStride, shortest - 3);
    // Windows sorted by hash bucket (insertion sort: at most 256 of them, built at compile time).
    for (size_t a = 0; a < count_; ++a) {
      for (size_t off = 0; off < stride_; ++off) {
        Window w{Head(anchors_[a].substr(off)), static_cast<uint8_t>(a), static_cast<uint8_t>(off)};
        size_t pos = windows_count_++;
        while (pos > 0 && Hash(windows_[pos - 1].head) > Hash(w.head)) {
          windows_[pos] = windows_[pos - 1];
          --pos;
        }
        windows_[pos] = w;
      }
    }
    size_t w = 0;
    for (uint32_t b = 0; b <= kBuckets; ++b) {
      while (w < windows_count_ && Hash(windows_[w].head) < b) ++w;
      bucket_start_[b] = static_cast<uint16_t>(w);
    }
    for (size_t i = 0; i < windows_count_; ++i) {
      const uint32_t h = Hash(windows_[i].head);
      table_[h >> 6] |= uint64_t{1} << (h & 63);
    }
  }

  // Bit i is set when anchors[i] occurs in `text`.
  uint32_t Scan(std::string_view text) const {
    const size_t n = text.size();
    if (count_ == 0 || n < min_len_) return 0;
    uint32_t found = 0;
    const char* p = text.data();
    for (size_t q = 0; q + 4 <= n; q += stride_) {
      uint32_t w;
      std::memcpy(&w, p + q, 4);
      const uint32_t h = Hash(w);
      if (((table_[h >> 6] >> (h & 63)) & 1) == 0) continue;
      for (size_t i = bucket_start_[h]; i < bucket_start_[h + 1]; ++i) {
        const Window& win = windows_[i];
        if (win.head != w || q < win.offset) continue;
        const std::string_view a = anchors_[win.anchor];
        const size_t start = q - win.offset;
        if (a.size() <= n - start && std::memcmp(p + start, a.data(), a.size()) == 0) found |= uint32_t{1} << win.anchor;
      }
    }
    return found;
  }

 private:
  static_assert(std::endian::native == std::endian::little, "Head() assumes little-endian loads");
  static constexpr int kBits = 12;
  static constexpr uint32_t kBuckets = 1u << kBits;
  static constexpr uint32_t Hash(uint32_t w) { return (w * 0x9E3779B1u) >> (32 - kBits); }
  static constexpr uint32_t Head(std::string_view a) {
    return static_cast<uint32_t>(static_cast<unsigned char>(a[0])) |
           static_cast<uint32_t>(static_cast<unsigned char>(a[1])) << 8 |
           static_cast<uint32_t>(static_cast<unsigned char>(a[2])) << 16 |
           static_cast<uint32_t>(static_cast<unsigned char>(a[3])) << 24;
  }
  struct Window {
    uint32_t head = 0;
    uint8_t anchor = 0;
    uint8_t offset = 0;
  };

  uint64_t table_[kBuckets / 64] = {};
  uint16_t bucket_start_[kBuckets + 1] = {};
  Window windows_[kMaxAnchors * kMaxStride] = {};
  size_t windows_count_ = 0;
  std::string_view anchors_[kMaxAnchors] = {};
  size_t count_ = 0;
  size_t min_len_ = 0;
  size_t stride_ = 1;
};

// The first position >= `from` where the two bytes a0a1 or b0b1 occur; npos when none. 16 bytes
// per step with GCC vector extensions (SSE2 on x86-64, NEON on arm64), for short needles the
// anchor filter cannot skip over ("loss").
size_t FindEitherPair(std::string_view text, size_t from, char a0, char a1, char b0, char b1);

// Builders of the events every parser here emits.
ParsedEvent ErrorEvent(std::string_view cls, std::string_view line, int32_t rank);
ParsedEvent MetricEvent(EventKind kind, std::string_view name, double value, int32_t rank, int64_t step = -1);
// Built in place: no temporary strings moved into the pair.
inline void AddAttr(ParsedEvent& e, std::string_view key, std::string_view value) {
  e.attrs.emplace_back(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple(value));
}
inline void AddAttr(ParsedEvent& e, std::string_view key, double value) {
  e.attrs.emplace_back(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple(FormatNumber(value)));
}

}  // namespace ithbat::collect::joblog::signals
