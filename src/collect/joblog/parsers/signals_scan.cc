#include "collect/joblog/parsers/signals_scan.h"

#include "collect/joblog/text/redact.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace ithbat::collect::joblog::signals {

std::optional<int64_t> LeadingInt(std::string_view s, size_t* consumed) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && s[i] == '-') {
    negative = true;
    ++i;
  }
  const size_t digits_start = i;
  int64_t v = 0;
  while (i < s.size() && IsDigit(s[i])) {
    if (i - digits_start >= 18) return std::nullopt;
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == digits_start) return std::nullopt;
  if (consumed != nullptr) *consumed = i;
  return negative ? -v : v;
}

std::optional<double> Num(std::string_view tok) {
  if (!tok.empty() && tok.size() <= 64 && (IsDigit(tok[0]) || (tok[0] == '-' && tok.size() > 1 && IsDigit(tok[1])))) {
    double v = 0;
    const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec == std::errc() && end == tok.data() + tok.size()) return v;
  }
  return ParseNumber(tok);
}

std::optional<double> NumberAfter(std::string_view line, std::string_view key) {
  auto rest = After(line, key);
  if (!rest) return std::nullopt;
  std::string_view tok = NumberToken(SkipSpaces(*rest));
  // A sentence may end right after the number ("reducing to 16384.0." is not printed, but a
  // cut line may end in '.').
  while (!tok.empty() && tok.back() == '.') tok.remove_suffix(1);
  return Num(tok);
}

std::optional<int64_t> IntAfter(std::string_view line, std::string_view key) {
  auto rest = After(line, key);
  if (!rest) return std::nullopt;
  return LeadingInt(SkipSpaces(*rest));
}

std::string_view DigitsAfter(std::string_view line, std::string_view key) {
  auto rest = After(line, key);
  if (!rest) return {};
  std::string_view s = SkipSpaces(*rest);
  size_t i = 0;
  while (i < s.size() && i < 20 && IsDigit(s[i])) ++i;
  return s.substr(0, i);
}

std::optional<int64_t> ParseSizePrefix(std::string_view s, size_t* consumed) {
  size_t i = 0;
  while (i < s.size() && (IsDigit(s[i]) || s[i] == '.')) ++i;
  if (i == 0 || i > 24) return std::nullopt;
  auto num = ParseNumber(s.substr(0, i));
  if (!num || !std::isfinite(*num) || *num < 0) return std::nullopt;
  size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  size_t k = j;
  while (k < s.size() && IsAlpha(s[k])) ++k;
  const std::string_view unit = s.substr(j, k - j);
  double mult = 0;
  if (unit == "bytes" || unit == "byte" || unit == "B") {
    mult = 1;
  } else if (unit == "KiB" || unit == "KB") {
    mult = 1024.0;
  } else if (unit == "MiB" || unit == "MB") {
    mult = 1024.0 * 1024;
  } else if (unit == "GiB" || unit == "GB") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "TiB" || unit == "TB") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  const double bytes = *num * mult;
  if (bytes > 9.0e18) return std::nullopt;
  if (consumed != nullptr) *consumed = k;
  return static_cast<int64_t>(std::llround(bytes));
}

namespace {
// "[<word><digits>]:" at `p` in `s`; returns the rank and the length consumed.
std::optional<int32_t> BracketRank(std::string_view s, std::string_view word, size_t* len) {
  if (s.size() < word.size() + 3 || s[0] != word[0] || !s.starts_with(word)) return std::nullopt;
  size_t used = 0;
  auto n = LeadingInt(s.substr(word.size()), &used);
  if (!n || *n < 0 || *n > 1'000'000) return std::nullopt;
  const size_t close = word.size() + used;
  if (s.size() < close + 2 || s[close] != ']' || s[close + 1] != ':') return std::nullopt;
  *len = close + 2;
  return static_cast<int32_t>(*n);
}
}  // namespace

int32_t LinePrefixRank(std::string_view line) {
  const std::string_view head = line.substr(0, 96);
  size_t len = 0;
  for (size_t p = 0; p < head.size(); ++p) {
    const void* hit = std::memchr(head.data() + p, '[', head.size() - p);
    if (hit == nullptr) break;
    p = static_cast<size_t>(static_cast<const char*>(hit) - head.data());
    const std::string_view at = line.substr(p);
    if (auto r = BracketRank(at, "[rank", &len)) return *r;
    if (auto r = BracketRank(at, "[default", &len)) return *r;
  }
  // srun --label: "12: text" at the very start.
  size_t used = 0;
  if (auto n = LeadingInt(line, &used); n && *n >= 0 && used <= 5 && line.size() > used + 1 &&
                                         line[used] == ':' && line[used + 1] == ' ')
    return static_cast<int32_t>(*n);
  return -1;
}

std::string_view StripLauncherPrefixes(std::string_view line) {
  for (int round = 0; round < 4; ++round) {
    const std::string_view before = line;
    size_t len = 0;
    if (line.empty()) break;
    const char c = line.front();
    if (c == '[' && (BracketRank(line, "[rank", &len) || BracketRank(line, "[default", &len))) {
      line.remove_prefix(len);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    } else if (c == 's' && (line.starts_with("stderr: ") || line.starts_with("stdout: "))) {
      line.remove_prefix(8);
    } else if (IsDigit(c) || c == '-') {
      size_t used = 0;
      if (auto n = LeadingInt(line, &used); n && *n >= 0 && used <= 5 && line.size() > used + 1 &&
                                             line[used] == ':' && line[used + 1] == ' ')
        line.remove_prefix(used + 2);
    }
    if (line.size() == before.size()) break;
  }
  return line;
}

std::string CutText(std::string_view line, size_t max) {
  // Redacted before the cut (a secret cut in half would no longer be recognised), cut never
  // inside a UTF-8 sequence. The agent hands parsers redacted lines already; `ithbat parse`,
  // tests and any other caller get the same guarantee here.
  return RedactedExcerpt(line, max);
}

std::string FormatNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

size_t FindEitherPair(std::string_view text, size_t from, char a0, char a1, char b0, char b1) {
  using V16 = unsigned char __attribute__((vector_size(16)));
  const size_t n = text.size();
  const char* p = text.data();
  if (n < 17) {
    for (size_t i = from; i + 2 <= n; ++i) {
      if ((p[i] == a0 && p[i + 1] == a1) || (p[i] == b0 && p[i + 1] == b1)) return i;
    }
    return std::string_view::npos;
  }
  V16 sa0, sa1, sb0, sb1;
  std::memset(&sa0, a0, 16);
  std::memset(&sa1, a1, 16);
  std::memset(&sb0, b0, 16);
  std::memset(&sb1, b1, 16);
  // Pair starts i..i+15 per block; the last block is moved back to end at the text's end and
  // the starts before `i` it covers again are masked off.
  for (size_t i = from; i + 1 < n;) {
    size_t block = i;
    unsigned skip = 0;
    if (block + 17 > n) {
      block = n - 17;
      skip = static_cast<unsigned>(i - block);
    }
    V16 v0, v1;
    std::memcpy(&v0, p + block, 16);
    std::memcpy(&v1, p + block + 1, 16);
    const auto m = ((v0 == sa0) & (v1 == sa1)) | ((v0 == sb0) & (v1 == sb1));
    uint64_t half[2];
    std::memcpy(half, &m, 16);
    if (skip >= 8) {
      half[0] = 0;
      half[1] &= ~uint64_t{0} << ((skip - 8) * 8);
    } else {
      half[0] &= ~uint64_t{0} << (skip * 8);
    }
    if (half[0] != 0) return block + static_cast<size_t>(std::countr_zero(half[0]) >> 3);
    if (half[1] != 0) return block + 8 + static_cast<size_t>(std::countr_zero(half[1]) >> 3);
    i = block + 16;
  }
  return std::string_view::npos;
}

std::string_view SignalName(int64_t signo) {
  switch (signo) {
    case 1: return "SIGHUP";
    case 2: return "SIGINT";
    case 3: return "SIGQUIT";
    case 4: return "SIGILL";
    case 5: return "SIGTRAP";
    case 6: return "SIGABRT";
    case 7: return "SIGBUS";
    case 8: return "SIGFPE";
    case 9: return "SIGKILL";
    case 10: return "SIGUSR1";
    case 11: return "SIGSEGV";
    case 12: return "SIGUSR2";
    case 13: return "SIGPIPE";
    case 14: return "SIGALRM";
    case 15: return "SIGTERM";
    default: return "";
  }
}

ParsedEvent ErrorEvent(std::string_view cls, std::string_view line, int32_t rank) {
  ParsedEvent e;
  e.kind = EventKind::kError;
  e.name = std::string(cls);
  e.text = CutText(line);
  e.rank = rank;
  return e;
}

ParsedEvent MetricEvent(EventKind kind, std::string_view name, double value, int32_t rank, int64_t step) {
  ParsedEvent e;
  e.kind = kind;
  e.name = std::string(name);
  e.value = value;
  e.rank = rank;
  e.step = step;
  return e;
}

}  // namespace ithbat::collect::joblog::signals
