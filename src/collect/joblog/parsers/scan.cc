#include "collect/joblog/parsers/scan.h"

#include <bit>
#include <charconv>
#include <cmath>

#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "collect/joblog/parsers/parser.h"

namespace ithbat::collect::joblog::scan {


size_t Find(std::string_view hay, std::string_view needle, size_t from) {
  return FindAt(hay, needle, RarestByte(needle), from);
}

size_t FindAt(std::string_view hay, std::string_view needle, size_t pick, size_t from) {
  if (needle.empty() || from >= hay.size() || hay.size() - from < needle.size() || pick >= needle.size()) return npos;
  // glibc's memmem pays a set-up cost per call that dominates on ~100-byte lines; a memchr on
  // the needle's rarest byte and a compare around each hit is several times faster here. The
  // needle's first and last bytes are checked inline before the full compare: the rarest byte
  // of a word is still common in prose ('r' of "iteration"), and a memcmp call per hit costs
  // more than the memchr that found it.
  const size_t m = needle.size();
  const char key = needle[pick];
  const char first = needle[0];
  const char final = needle[m - 1];
  const char* const base = hay.data();
  const char* p = base + from + pick;
  const char* const last = base + hay.size() - (m - pick);  // last position for key
  while (p <= last) {
    const void* hit = memchr(p, key, static_cast<size_t>(last - p) + 1);
    if (hit == nullptr) return npos;
    const char* start = static_cast<const char*>(hit) - pick;
    if (start[0] == first && start[m - 1] == final && memcmp(start, needle.data(), m) == 0)
      return static_cast<size_t>(start - base);
    p = static_cast<const char*>(hit) + 1;
  }
  return npos;
}

}  // namespace ithbat::collect::joblog::scan

namespace ithbat::collect::joblog {

static_assert(std::endian::native == std::endian::little, "pairs are read as little-endian words");

LineFacts LineFacts::Of(std::string_view text) {
  // One byte per bucket, set with plain stores (no read-modify-write chains through the same
  // word), folded into bits at the end.
  alignas(16) uint8_t set[512] = {};
  const char* p = text.data();
  const size_t n = text.size();
  size_t i = 0;
  for (; i + 4 < n; i += 4) {
    uint32_t v0, v1;
    memcpy(&v0, p + i, 4);
    memcpy(&v1, p + i + 1, 4);
    // Pairs starting at i..i+3: low/high 16 bits of two overlapping 4-byte loads.
    set[((v0 & 0xFFFF) * 0x9E3779B1u) >> 23] = 1;
    set[((v1 & 0xFFFF) * 0x9E3779B1u) >> 23] = 1;
    set[((v0 >> 16) * 0x9E3779B1u) >> 23] = 1;
    set[((v1 >> 16) * 0x9E3779B1u) >> 23] = 1;
  }
  for (; i + 1 < n; ++i) set[PairHash(static_cast<unsigned char>(p[i]), static_cast<unsigned char>(p[i + 1]))] = 1;
  LineFacts f;
  for (size_t w = 0; w < 8; ++w) {
    uint64_t bits = 0;
#if defined(__SSE2__)
    for (size_t k = 0; k < 4; ++k) {
      const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(set + w * 64 + k * 16));
      const uint32_t m = static_cast<uint32_t>(_mm_movemask_epi8(_mm_sub_epi8(_mm_setzero_si128(), v)));
      bits |= static_cast<uint64_t>(m) << (16 * k);
    }
#else
    for (size_t k = 0; k < 64; ++k) bits |= static_cast<uint64_t>(set[w * 64 + k]) << k;
#endif
    f.pairs[w] = bits;
  }
  return f;
}

}  // namespace ithbat::collect::joblog

namespace ithbat::collect::joblog::scan {



bool ReadUint(std::string_view s, size_t& pos, int64_t& out) {
  size_t i = pos;
  int64_t v = 0;
  while (i < s.size() && IsDigit(s[i]) && i - pos < 18) {
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == pos || (i < s.size() && IsDigit(s[i]))) return false;  // none, or more than 18 digits
  pos = i;
  out = v;
  return true;
}

std::optional<int64_t> ParseUint(std::string_view s) {
  size_t pos = 0;
  int64_t v = 0;
  if (!ReadUint(s, pos, v) || pos != s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseFloat(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  // The fast path takes what both accept identically: [-]digits[.digits][e[+-]digits].
  if (i < s.size() && IsDigit(s[i])) {
    bool plain = true;
    for (size_t k = i; k < s.size() && plain; ++k) {
      const char c = s[k];
      plain = IsDigit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    }
    if (plain) {
      double v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
    }
  }
  return ParseNumber(s);
}

std::optional<double> ParseLooseNumber(std::string_view s) {
  s = Trim(s);
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  if (s.empty() || s.size() > 64) return std::nullopt;
  bool comma = false;  // a loop, not memchr: the value is a few bytes
  for (char c : s) comma |= c == ',';
  if (!comma) return ParseFloat(s);
  // Thousands separators: only between digits, so "1,2" style lists are not merged by accident
  // beyond what a human would read the same way.
  char buf[72];
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ',') {
      if (i == 0 || i + 1 >= s.size() || !IsDigit(s[i - 1]) || !IsDigit(s[i + 1])) return std::nullopt;
      continue;
    }
    buf[n++] = s[i];
  }
  return ParseFloat(std::string_view(buf, n));
}

std::optional<int64_t> ParseExactInteger(std::string_view s) {
  s = Trim(s);
  size_t pos = 0;
  int64_t v = 0;
  if (!ReadUint(s, pos, v)) return std::nullopt;
  if (pos == s.size()) return v;
  if (s[pos] != '.') return std::nullopt;
  for (++pos; pos < s.size(); ++pos) {
    if (s[pos] != '0') return std::nullopt;
  }
  return v;
}

std::optional<double> ParseByteSize(std::string_view s) {
  s = Trim(s);
  size_t i = 0;
  while (i < s.size() && (IsDigit(s[i]) || s[i] == '.' || s[i] == ',')) ++i;
  auto number = ParseLooseNumber(s.substr(0, i));
  if (!number) return std::nullopt;
  size_t u = i;
  SkipSpaces(s, u);
  size_t e = u;
  while (e < s.size() && IsAlpha(s[e])) ++e;
  const std::string_view unit = s.substr(u, e - u);
  double mult = 0;
  if (unit == "B")
    mult = 1;
  else if (unit == "KiB")
    mult = 1024.0;
  else if (unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else
    return std::nullopt;
  return *number * mult;
}

std::string SnakeCase(std::string_view key) {
  std::string out;
  out.reserve(key.size() < 64 ? key.size() : 64);
  bool pending_sep = false;
  for (char c : key) {
    const bool alnum = IsDigit(c) || IsAlpha(c);
    if (!alnum) {
      pending_sep = !out.empty();
      continue;
    }
    if (pending_sep) {
      if (out.size() + 1 >= 64) break;
      out.push_back('_');
      pending_sep = false;
    }
    if (out.size() >= 64) break;
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  }
  return out;
}

namespace {

// "2024-05-01T10:00:00[.123456789](Z|+00:00) " -> length consumed, 0 when absent.
size_t DockerTimestamp(std::string_view s) {
  if (s.size() < 21) return 0;
  auto digits = [&](size_t at, size_t n) {
    for (size_t k = 0; k < n; ++k) {
      if (!IsDigit(s[at + k])) return false;
    }
    return true;
  };
  if (!digits(0, 4) || s[4] != '-' || !digits(5, 2) || s[7] != '-' || !digits(8, 2) || s[10] != 'T' ||
      !digits(11, 2) || s[13] != ':' || !digits(14, 2) || s[16] != ':' || !digits(17, 2))
    return 0;
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i]) && i < 40) ++i;
  }
  if (i < s.size() && s[i] == 'Z') {
    ++i;
  } else if (i + 6 <= s.size() && (s[i] == '+' || s[i] == '-') && digits(i + 1, 2) && s[i + 3] == ':' &&
             digits(i + 4, 2)) {
    i += 6;
  } else {
    return 0;
  }
  if (i >= s.size() || s[i] != ' ') return 0;
  return i + 1;
}

// "May 01 10:00:00 host prog[123]: " (journald short / syslog) -> length consumed, 0 when absent.
size_t JournalHead(std::string_view s) {
  if (s.size() < 20 || !IsAlpha(s[0]) || !IsAlpha(s[1]) || !IsAlpha(s[2]) || s[3] != ' ') return 0;
  size_t i = 4;
  SkipSpaces(s, i);
  size_t d = i;
  while (i < s.size() && IsDigit(s[i]) && i - d < 2) ++i;
  if (i == d || i >= s.size() || s[i] != ' ') return 0;
  ++i;
  if (i + 8 > s.size() || !IsDigit(s[i]) || !IsDigit(s[i + 1]) || s[i + 2] != ':' || s[i + 5] != ':' ||
      !IsDigit(s[i + 7]))
    return 0;
  i += 8;
  if (i < s.size() && s[i] == '.') {  // journalctl -o short-precise
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i >= s.size() || s[i] != ' ') return 0;
  ++i;
  // host, then "prog[pid]:" or "prog:" — neither contains spaces.
  const size_t host_end = s.find(' ', i);
  if (host_end == std::string_view::npos || host_end == i || host_end - i > 255) return 0;
  size_t j = host_end + 1;
  size_t k = j;
  while (k < s.size() && k - j < 128 && s[k] != ' ' && s[k] != ':') ++k;
  if (k == j || k + 1 >= s.size() || s[k] != ':' || s[k + 1] != ' ') return 0;
  return k + 2;
}

// "[rank3]:", "[default3]:", "[1,3]<stdout>:" -> length consumed and the rank.
size_t BracketRank(std::string_view s, int32_t& rank) {
  if (s.size() < 4 || s[0] != '[') return 0;
  size_t i = 1;
  if (StartsWith(s.substr(1), "rank")) {
    i = 5;
  } else if (StartsWith(s.substr(1), "default")) {
    i = 8;
  } else if (IsDigit(s[1])) {  // Open MPI "[jobid,rank]<stdout>:"
    while (i < s.size() && IsDigit(s[i]) && i < 12) ++i;
    if (i >= s.size() || s[i] != ',') return 0;
    ++i;
    int64_t r = 0;
    if (!ReadUint(s, i, r) || r > 0x7fffffff || i >= s.size() || s[i] != ']') return 0;
    ++i;
    const std::string_view rest = s.substr(i);
    size_t used = 0;
    if (StartsWith(rest, "<stdout>:"))
      used = 9;
    else if (StartsWith(rest, "<stderr>:"))
      used = 9;
    else
      return 0;
    rank = static_cast<int32_t>(r);
    i += used;
    if (i < s.size() && s[i] == ' ') ++i;
    return i;
  } else {
    return 0;
  }
  int64_t r = 0;
  if (!ReadUint(s, i, r) || r > 0x7fffffff || i >= s.size() || s[i] != ']') return 0;
  ++i;
  if (i >= s.size() || s[i] != ':') return 0;
  ++i;
  rank = static_cast<int32_t>(r);
  return i;
}

// Slurm "srun --label": "  3: " — at most 5 digits, aligned with spaces.
size_t SrunLabel(std::string_view s, int32_t& rank) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ' && i < 6) ++i;
  int64_t r = 0;
  const size_t d = i;
  if (!ReadUint(s, i, r) || i - d > 5) return 0;
  if (i + 1 >= s.size() || s[i] != ':' || s[i + 1] != ' ') return 0;
  rank = static_cast<int32_t>(r);
  return i + 2;
}

}  // namespace

Prefix StripPrefixes(std::string_view line) {
  Prefix p;
  p.body = line;
  for (int round = 0; round < 4 && !p.body.empty(); ++round) {
    size_t used = 0;
    int32_t rank = -1;
    const char c = p.body.front();
    if (c == '[') {
      used = BracketRank(p.body, rank);
    } else if (IsDigit(c) || c == ' ') {
      used = DockerTimestamp(p.body);
      if (used == 0) used = SrunLabel(p.body, rank);
    } else if (IsAlpha(c)) {
      used = JournalHead(p.body);
    }
    if (used == 0) break;
    if (rank >= 0) p.rank = rank;
    p.body.remove_prefix(used);
  }
  return p;
}

namespace {
std::string_view Unquote(std::string_view v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}
}  // namespace

bool PairScanner::Next(KeyValue& kv) {
  const std::string_view s = text_;
  while (left_ > 0 && pos_ < s.size()) {
    // Skip separators.
    while (pos_ < s.size() && (IsSpace(s[pos_]) || s[pos_] == ',' || s[pos_] == '{' || s[pos_] == '|'))
      ++pos_;
    if (pos_ >= s.size()) break;
    const size_t key_begin = pos_;
    if (style_ == Style::kEquals) {
      while (pos_ < s.size() && s[pos_] != '=' && !IsSpace(s[pos_]) && s[pos_] != ',') ++pos_;
      if (pos_ >= s.size() || s[pos_] != '=') continue;  // a bare word: skip it
      const std::string_view key = s.substr(key_begin, pos_ - key_begin);
      ++pos_;
      const size_t v = pos_;
      while (pos_ < s.size() && s[pos_] != ',' && !IsSpace(s[pos_]) && s[pos_] != ']' && s[pos_] != '}')
        ++pos_;
      kv.key = Unquote(key);
      kv.value = Unquote(s.substr(v, pos_ - v));
      --left_;
      if (pos_ < s.size() && (s[pos_] == ']' || s[pos_] == '}')) ++pos_;
      return true;
    }
    // kColon: a quoted key may contain spaces; a bare key is one word.
    std::string_view key;
    if (s[pos_] == '"' || s[pos_] == '\'') {
      const char q = s[pos_];
      const size_t close = s.find(q, pos_ + 1);
      if (close == std::string_view::npos) break;
      key = s.substr(pos_ + 1, close - pos_ - 1);
      pos_ = close + 1;
    } else {
      while (pos_ < s.size() && s[pos_] != ':' && !IsSpace(s[pos_])) ++pos_;
      key = s.substr(key_begin, pos_ - key_begin);
    }
    if (pos_ >= s.size() || s[pos_] != ':') continue;
    ++pos_;
    SkipSpaces(s, pos_);
    const size_t v = pos_;
    while (pos_ < s.size() && !IsSpace(s[pos_])) ++pos_;
    std::string_view value = s.substr(v, pos_ - v);
    while (!value.empty() && (value.back() == ',' || value.back() == '}' || value.back() == ';'))
      value.remove_suffix(1);
    if (key.empty()) continue;
    kv.key = key;
    kv.value = Unquote(value);
    --left_;
    return true;
  }
  return false;
}

bool FieldSplitter::Next(std::string_view& field) {
  while (left_ > 0 && pos_ < text_.size()) {
    const size_t bar = text_.find('|', pos_);
    const size_t end = bar == std::string_view::npos ? text_.size() : bar;
    const std::string_view f = Trim(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    terminated_ = bar != std::string_view::npos;
    if (f.empty()) continue;
    --left_;
    field = f;
    return true;
  }
  return false;
}

bool SplitColonField(std::string_view field, KeyValue& kv) {
  const size_t colon = field.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  kv.key = Trim(field.substr(0, colon));
  kv.value = Trim(field.substr(colon + 1));
  return !kv.key.empty() && !kv.value.empty();
}

bool FindTqdmBar(std::string_view text, TqdmBar& bar) {
  size_t from = 0;
  for (int tries = 0; tries < 8; ++tries) {
    const size_t pct = text.find('%', from);
    if (pct == std::string_view::npos) return false;
    from = pct + 1;
    // 1-3 digits before '%', preceded by the start, a space or ':'.
    size_t d = pct;
    while (d > 0 && IsDigit(text[d - 1]) && pct - d < 3) --d;
    if (d == pct || (d > 0 && !(IsSpace(text[d - 1]) || text[d - 1] == ':'))) continue;
    size_t i = pct + 1;
    if (i >= text.size()) return false;
    if (text[i] == '|') {
      // The bar glyphs (UTF-8 blocks or ASCII '#') up to the closing '|'.
      const size_t close = text.find('|', i + 1);
      if (close == std::string_view::npos || close - i > 2048) continue;
      i = close + 1;
    } else if (text[i] != ' ') {
      continue;
    }
    SkipSpaces(text, i);
    int64_t n = 0;
    int64_t total = 0;
    if (!ReadUint(text, i, n) || i >= text.size() || text[i] != '/') continue;
    ++i;
    if (!ReadUint(text, i, total)) continue;
    if (i + 1 >= text.size() || text[i] != ' ' || text[i + 1] != '[') continue;
    i += 2;
    // The bracket ends at ']'; a '[' first means the segment was cut and other text glued on.
    const size_t stop = text.find_first_of("[]", i);
    const size_t close = stop != std::string_view::npos && text[stop] == ']' ? stop : std::string_view::npos;
    const size_t inner_end = stop == std::string_view::npos ? text.size() : stop;
    const std::string_view inner = text.substr(i, inner_end - i);
    // "{elapsed}<{remaining}, {rate}{, postfix}": the postfix starts after the second ", ".
    std::string_view postfix;
    const size_t c1 = inner.find(", ");
    if (c1 != std::string_view::npos) {
      const size_t c2 = inner.find(", ", c1 + 2);
      if (c2 != std::string_view::npos) postfix = inner.substr(c2 + 2);
    }
    std::string_view desc = Trim(text.substr(0, d));
    if (!desc.empty() && desc.back() == ':') desc = Trim(desc.substr(0, desc.size() - 1));
    bar.desc = desc;
    bar.n = n;
    bar.total = total;
    bar.postfix = postfix;
    bar.closed = close != std::string_view::npos;
    bar.begin = d;
    bar.end = close == std::string_view::npos ? inner_end : close + 1;
    return true;
  }
  return false;
}

ParsedEvent* Emitter::Add(EventKind kind, std::string_view name, double value, int64_t step) {
  if (out_.size() - base_ >= kMaxEventsPerLine) return nullptr;
  ParsedEvent& e = out_.emplace_back();
  e.kind = kind;
  e.name.assign(name);
  e.value = value;
  e.step = step;
  e.rank = rank_;
  return &e;
}

uint64_t Hash(std::string_view s, uint64_t seed) {
  uint64_t h = seed;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace ithbat::collect::joblog::scan
