#pragma once
// Cheap hand-written scanners shared by the line parsers. Internal to the parsers folder; other
// parser files may include it (read-only: the functions below are a stable contract, extend by
// adding, never by changing a meaning).
//
// Why not RE2 for these: the hot line shapes ("key: value | key: value", "key=value, ...",
// "[rank3]: ...") are fixed enough that a linear scan is several times faster than a regex and
// allocates nothing. Every function works on std::string_view, never reads past the view, never
// allocates (except SnakeCase, which returns a short string on matched lines only) and is total:
// malformed input gives "not found", never a crash.
#include <array>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collect/joblog/parsers/parser.h"

namespace ithbat::collect::joblog {

// Which adjacent byte pairs a line holds, as a 512-bit Bloom set: one pass over the line, then a
// parser proves that a needle is absent (one of its pairs is missing) with a few word tests
// instead of a substring search. Only ever a necessary condition: MayContain() false means the
// needle occurs nowhere in the line (nor in any part of it); true means "search".
struct LineFacts {
  using Mask = std::array<uint64_t, 8>;
  static constexpr uint32_t PairHash(unsigned char a, unsigned char b) {
    return ((static_cast<uint32_t>(a) | static_cast<uint32_t>(b) << 8) * 0x9E3779B1u) >> 23;
  }
  // The pairs of `needle` (empty for a needle shorter than 2 bytes: then always "may").
  static constexpr Mask MaskOf(std::string_view needle) {
    Mask m{};
    for (size_t i = 0; i + 1 < needle.size(); ++i) {
      const uint32_t h = PairHash(static_cast<unsigned char>(needle[i]), static_cast<unsigned char>(needle[i + 1]));
      m[h >> 6] |= uint64_t{1} << (h & 63);
    }
    return m;
  }
  static LineFacts Of(std::string_view text);

  bool MayContain(const Mask& m) const {
    uint64_t missing = 0;
    for (size_t i = 0; i < 8; ++i) missing |= m[i] & ~pairs[i];
    return missing == 0;
  }
  template <size_t N>
  bool MayContainAny(const std::array<Mask, N>& masks) const {
    for (const Mask& m : masks) {
      if (MayContain(m)) return true;
    }
    return false;
  }

  Mask pairs{};
};

template <size_t N>
constexpr std::array<LineFacts::Mask, N> MasksOf(const std::string_view (&needles)[N]) {
  std::array<LineFacts::Mask, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = LineFacts::MaskOf(needles[i]);
  return out;
}

}  // namespace ithbat::collect::joblog

namespace ithbat::collect::joblog::scan {

inline constexpr size_t npos = std::string_view::npos;

// How common a byte is in log text (lower = rarer): Find() looks for the needle's rarest byte
// with memchr, so a foreign line usually costs one memchr that finds nothing.
constexpr int CommonnessOf(unsigned char c) {
  constexpr std::string_view kLowerByFrequency = "etaoinsrhldcumfpgwybvkxjqz";
  constexpr std::string_view kLogPunctuation = ":,.|=-_/()";
  if (c == ' ') return 100;
  if (c >= '0' && c <= '9') return 50;
  if (c >= 'A' && c <= 'Z') return 12;
  if (c >= 'a' && c <= 'z') return 40 - static_cast<int>(kLowerByFrequency.find(static_cast<char>(c)));
  if (kLogPunctuation.find(static_cast<char>(c)) != std::string_view::npos) return 45;
  return 5;  // brackets, braces, quotes, '*', '%': rare in ordinary text
}
struct CommonnessTable {
  uint8_t v[256];
  constexpr CommonnessTable() : v() {
    for (int c = 0; c < 256; ++c) v[c] = static_cast<uint8_t>(CommonnessOf(static_cast<unsigned char>(c)));
  }
};
inline constexpr CommonnessTable kCommonness;
// The position of the needle's rarest byte (the first of equals); 0 for an empty needle.
constexpr size_t RarestByte(std::string_view needle) {
  size_t pick = 0;
  int best = 1 << 30;
  for (size_t i = 0; i < needle.size(); ++i) {
    const int c = kCommonness.v[static_cast<unsigned char>(needle[i])];
    if (c < best) {
      best = c;
      pick = i;
    }
  }
  return pick;
}

// A needle with its pair mask, built at compile time: `constexpr Needle kX{"text"};`.
struct Needle {
  std::string_view text;
  LineFacts::Mask mask;
  size_t rare;  // RarestByte(text)
  constexpr Needle(std::string_view t) : text(t), mask(LineFacts::MaskOf(t)), rare(RarestByte(t)) {}  // NOLINT: implicit on purpose
};

// `line.facts`, or (a parser called without them) facts that rule nothing out: computing them
// costs a pass over the line, which pays only when several parsers share it.
inline const LineFacts& FactsOf(const LineView& line) {
  static constexpr LineFacts kAnything = [] {
    LineFacts f;
    f.pairs.fill(~uint64_t{0});
    return f;
  }();
  return line.facts != nullptr ? *line.facts : kAnything;
}

// Position of `needle` in `hay` at or after `from` (memmem), npos when absent or needle empty.
size_t Find(std::string_view hay, std::string_view needle, size_t from = 0);
// Find() with the position of the byte memchr looks for given (RarestByte(needle), or any
// position of the needle: the result is the same, only the speed differs).
size_t FindAt(std::string_view hay, std::string_view needle, size_t pick, size_t from = 0);
inline bool Contains(std::string_view hay, std::string_view needle) { return Find(hay, needle) != npos; }
// Find() behind the facts' test: npos at once when the line cannot hold the needle. `hay` must be
// (part of) the line the facts describe.
inline size_t Find(const LineFacts& facts, const Needle& needle, std::string_view hay, size_t from = 0) {
  return facts.MayContain(needle.mask) ? FindAt(hay, needle.text, needle.rare, from) : npos;
}
// Inline: called with literals on every line, where the compiler turns the compare into a few
// loads instead of a memcmp call.
inline bool StartsWith(std::string_view s, std::string_view prefix) { return s.starts_with(prefix); }
inline bool EndsWith(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsSpace(char c) { return c == ' ' || c == '\t'; }
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Spaces and tabs at both ends. Inline, as SkipSpaces: called per field and value of every
// matched line.
inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}
inline void SkipSpaces(std::string_view s, size_t& pos) {
  while (pos < s.size() && IsSpace(s[pos])) ++pos;
}

// An unsigned decimal integer at `pos` (no sign, no spaces skipped), at most 18 digits; on success
// advances `pos` past the digits.
bool ReadUint(std::string_view s, size_t& pos, int64_t& out);
// The whole of `s` as an unsigned integer (at most 18 digits), nullopt otherwise.
std::optional<int64_t> ParseUint(std::string_view s);

// ParseNumber() with a fast path: plain decimal/scientific text is converted with
// std::from_chars (correctly rounded, several times faster than strtod); NaN/inf spellings and
// anything unusual go to ParseNumber(), so the accepted set and the values are the same.
std::optional<double> ParseFloat(std::string_view s);

// A number as frameworks print it for humans: ParseNumber() spellings (nan, nan.0, inf, 1e-05)
// plus thousands separators ("2,397", "1,234.56") and one trailing '%' (the number is returned
// as printed, not divided by 100). nullopt for anything else.
std::optional<double> ParseLooseNumber(std::string_view s);

// An integer value printed as a float with no lost precision: "794", "794.0", "794.00". Refuses
// scientific notation ("3.2e+4" is rounded by the printer, so the exact step is unknown) and
// non-zero fractions.
std::optional<int64_t> ParseExactInteger(std::string_view s);

// Byte count of a size printed with a binary/decimal unit: "9.46GiB", "12.3 GB", "512MiB".
// nullopt when the unit is missing or unknown.
std::optional<double> ParseByteSize(std::string_view s);

// `key` lower-cased, runs of non-alphanumerics turned into one '_', leading/trailing '_'
// dropped, cut to 64 bytes: "mtp_1 loss" -> "mtp_1_loss", "rewards/chosen" -> "rewards_chosen",
// "TFLOP/s/GPU" -> "tflop_s_gpu". Empty when nothing alphanumeric remains.
std::string SnakeCase(std::string_view key);

// The prefixes launchers and log shippers put before a process's own text, skipped in any
// order (at most 4 of them): a Docker `logs -t` RFC 3339 timestamp ("2024-05-01T10:00:00.123Z "),
// a journald/syslog head ("May 01 10:00:00 host prog[123]: "), torchrun's "[rank3]:" and
// "[default3]:" (--tee / log_line_prefix_template), Slurm `srun --label` "3: " (with alignment
// spaces), and Open MPI `--tag-output` "[1,3]<stdout>:". `rank` is the rank the innermost rank
// prefix names (-1 when none); `body` is what follows the prefixes.
struct Prefix {
  int32_t rank = -1;
  std::string_view body;
};
Prefix StripPrefixes(std::string_view line);

// Iterates "key<sep>value" pairs of one line in the common shapes:
//   kEquals  "loss=0.158, v_num=0, train_loss=0.149"   (pairs split by ',' or whitespace)
//   kColon   "loss:  9.9493  memory: 49.66GiB(52.28%)"  (key is the word(s) before ':', value the
//            next whitespace-free token)
// Keys are returned as printed (no case change); values are the raw token (caller parses).
// Quoted keys/values ("'loss': 0.1", "\"num_updates\": \"100\"") are unquoted. Bounded by
// the view; at most `max_pairs` pairs are produced.
struct KeyValue {
  std::string_view key;
  std::string_view value;
};
class PairScanner {
 public:
  enum class Style : uint8_t { kEquals, kColon };
  PairScanner(std::string_view text, Style style, size_t max_pairs = 48)
      : text_(text), style_(style), left_(max_pairs) {}
  // The next pair, false at the end.
  bool Next(KeyValue& kv);

 private:
  std::string_view text_;
  size_t pos_ = 0;
  Style style_;
  size_t left_;
};

// Splits "a | b | c" on '|' one field at a time (fields trimmed, empty ones skipped). The Megatron
// and NeMo 2 iteration lines and fairseq's pipe format are made of such fields.
class FieldSplitter {
 public:
  explicit FieldSplitter(std::string_view text, size_t max_fields = 64) : text_(text), left_(max_fields) {}
  bool Next(std::string_view& field);
  // Whether the field Next() returned was followed by a '|'. A line cut by the capture ends in
  // an unterminated field whose value may itself be cut ("2.50" of "2.504220E+00").
  bool terminated() const { return terminated_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  size_t left_;
  bool terminated_ = false;
};
// "learning rate: 1.0E-04" -> key "learning rate", value "1.0E-04" (split at the last ':').
bool SplitColonField(std::string_view field, KeyValue& kv);

// A tqdm progress segment "[desc: ] 45%|####  | 45/3000 [00:10<11:00, 4.5it/s, k=v, ...]" or its
// non-tty form "45% 45/3000 [...]". Found anywhere in `text`; `desc` is the text before the
// percentage (trimmed, without the ':'), `postfix` the "k=v, ..." part inside the brackets (empty
// when none; the bracket may be cut). Counts are the integers printed.
struct TqdmBar {
  std::string_view desc;
  int64_t n = -1;
  int64_t total = -1;
  std::string_view postfix;
  bool closed = false;  // the ']' was seen (else the segment is cut and so may be the last value)
  size_t begin = 0;     // offset of the percentage in `text`
  size_t end = 0;       // offset just past the bar: past its "]", or where the cut bracket stops
};
bool FindTqdmBar(std::string_view text, TqdmBar& bar);

// Appends events of one line for one parser, stamping each with the line's step and rank and
// never more than kMaxEventsPerLine since construction (later ones are dropped: a line is not
// allowed to flood the store).
class Emitter {
 public:
  Emitter(std::vector<ParsedEvent>& out, int32_t rank) : out_(out), base_(out.size()), rank_(rank) {}
  // A parser that emits from several helpers for one line passes the size `out` had when the
  // line began, so the cap counts the whole line, not each helper's share.
  Emitter(std::vector<ParsedEvent>& out, int32_t rank, size_t line_base)
      : out_(out), base_(std::min(line_base, out.size())), rank_(rank) {}
  // Returns the appended event (for attrs), or nullptr when the per-line cap is reached.
  ParsedEvent* Add(EventKind kind, std::string_view name, double value, int64_t step);
  size_t count() const { return out_.size() - base_; }

 private:
  std::vector<ParsedEvent>& out_;
  size_t base_;
  int32_t rank_;
};

// Whether `part` (a view into `text`) runs to the very end of `text`: on a line cut by the
// capture, such a value may be cut too, so parsers drop it where the format always terminates
// its values (", ", " |", "]").
inline bool AtEnd(std::string_view text, std::string_view part) {
  return part.data() + part.size() == text.data() + text.size();
}

// Cheap 64-bit FNV-1a, for "did this change" state without keeping text.
uint64_t Hash(std::string_view s, uint64_t seed = 1469598103934665603ULL);

}  // namespace ithbat::collect::joblog::scan
