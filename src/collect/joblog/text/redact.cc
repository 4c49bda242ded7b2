#include "collect/joblog/text/redact.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <cstdint>
#include <vector>

// Hand scanner, not RE2. The rules need context a regex expresses badly (the key's last word
// decides, camelCase keys, quoted/escaped/bracketed values, the scheme word of an
// Authorization value kept), and RE2 with capture groups — needed to replace only the value —
// runs its slow NFA engines. The scanner makes one pass, 16 bytes at a time between candidate
// bytes, and a rule is tried only at the bytes that can anchor it (':' and '=' for key/value
// pairs and "://" URLs, the rarest fixed byte of each token format). A line without secrets
// is never copied and nothing is allocated for it: that pass is the prefilter.
// After a rule matched, scanning resumes at the end of the secret, so the work stays linear.

namespace ithbat::collect::joblog {
namespace {

struct Span {
  size_t begin;
  size_t end;
};

// Per-byte classes, one table so the main loop is a load and a test.
enum : uint8_t {
  kSep = 1,      // ':' '='
  kTrigger = 2,  // anchors a token format, a --flag or a PEM header
};

constexpr std::array<uint8_t, 256> MakeClasses() {
  std::array<uint8_t, 256> t{};
  t[':'] = kSep;
  t['='] = kSep;
  // Each token format is found from its rarest fixed byte, not its first letter (which would
  // stop the scan at every 'e' and 's'): hf_/ghp_/github_pat_ from '_', sk-/xoxb- from '-',
  // eyJ from 'J'; AKIA/ASIA/AIza and bearer from their own first letter.
  for (unsigned char c : std::string_view("_-JAbB")) t[c] = kTrigger;
  return t;
}
constexpr std::array<uint8_t, 256> kClasses = MakeClasses();

// The next byte at or after `i` with a class: 16 bytes at a time (GCC/Clang vector extensions,
// SSE2 on x86-64, NEON on arm64), since most bytes of most lines have none. The bytes compared
// are kClasses' non-zero entries.
size_t NextCandidate(const char* p, size_t i, size_t n) {
  using V = unsigned char __attribute__((vector_size(16)));
  if constexpr (std::endian::native == std::endian::little) {
    while (i + 16 <= n) {
      V v;
      std::memcpy(&v, p + i, 16);
      const auto m = (v == ':') | (v == '=') | (v == '_') | (v == '-') | (v == 'J') | (v == 'A') | (v == 'b') |
                     (v == 'B');
      uint64_t half[2];
      static_assert(sizeof(m) == sizeof(half));
      std::memcpy(half, &m, sizeof(half));
      if (half[0] != 0) return i + static_cast<size_t>(std::countr_zero(half[0]) / 8);
      if (half[1] != 0) return i + 8 + static_cast<size_t>(std::countr_zero(half[1]) / 8);
      i += 16;
    }
  }
  while (i < n && kClasses[static_cast<unsigned char>(p[i])] == 0) ++i;
  return i;
}

inline bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
inline bool IsWord(char c) { return IsAlnum(c) || c == '_'; }
inline bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline char Lower(char c) { return IsUpper(c) ? static_cast<char>(c + ('a' - 'A')) : c; }
inline bool IsKeyChar(char c) { return IsWord(c) || c == '.' || c == '-'; }
inline bool IsSpace(char c) { return c == ' ' || c == '\t'; }
inline bool IsQuote(char c) { return c == '"' || c == '\''; }
inline bool IsBase64(char c) { return IsAlnum(c) || c == '+' || c == '/'; }
// Characters of an opaque credential (RFC 6750 b64token, plus what API keys use).
inline bool IsTokenChar(char c) {
  return IsAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=';
}
// Where an unquoted value ends.
inline bool EndsValue(char c) {
  return IsSpace(c) || c == ',' || c == ';' || c == '&' || c == ')' || c == '}' || c == ']' || IsQuote(c) ||
         c == '\\' || c == '>';
}

inline bool StartsWithNoCase(std::string_view s, size_t at, std::string_view prefix) {
  if (s.size() - at < prefix.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k) {
    if (Lower(s[at + k]) != prefix[k]) return false;
  }
  return true;
}
// Inlined byte compares: these run at every candidate byte, a memcmp call each is the cost.
inline bool StartsWith(std::string_view s, size_t at, std::string_view prefix) {
  if (s.size() - at < prefix.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k) {
    if (s[at + k] != prefix[k]) return false;
  }
  return true;
}

// kToken: a key whose last word is "token" — a number after it is a count ("#token: 1234" in
// SGLang's stats), not a credential.
enum class KeyKind { kNone, kSecret, kAuthorization, kToken };

constexpr size_t kMaxKeyBytes = 64;

// Decides by the key's last word (words split at _ . - and lower→upper case changes), so
// "hf_token", "accessToken", "DB_PASSWORD", "x-api-key" are secrets and "max_tokens",
// "tokenizer", "token_usage", "eos_token" are not.
bool EqualsLower(std::string_view word, std::string_view lower) {
  if (word.size() != lower.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (Lower(word[k]) != lower[k]) return false;
  }
  return true;
}
bool InLower(std::string_view word, std::initializer_list<std::string_view> set) {
  for (std::string_view w : set) {
    if (EqualsLower(word, w)) return true;
  }
  return false;
}

// The last word of key[0, end): words split at _ . - and at a lower→upper case change.
std::string_view LastWord(std::string_view key, size_t end) {
  while (end > 0 && (key[end - 1] == '_' || key[end - 1] == '.' || key[end - 1] == '-')) --end;
  size_t b = end;
  while (b > 0) {
    const char c = key[b - 1];
    if (c == '_' || c == '.' || c == '-') break;
    if (b < end && IsUpper(key[b]) && IsLower(c)) break;
    --b;
  }
  return key.substr(b, end - b);
}

// Decides by the key's last word, so "hf_token", "accessToken", "DB_PASSWORD", "x-api-key" are
// secrets and "max_tokens", "tokenizer", "token_usage", "eos_token" are not. Called at every
// ':' and '=' of every line, so it rejects on the last word's length and letters before any
// list is compared, and looks at the word before only for "token" and "key".
KeyKind ClassifyKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return KeyKind::kNone;
  const std::string_view last = LastWord(key, key.size());
  if (last.size() < 3 || last.size() > 13) return KeyKind::kNone;
  const size_t before_end = static_cast<size_t>(last.data() - key.data());
  const bool single = LastWord(key, before_end).empty();
  switch (Lower(last[0])) {
    case 'a':
      if (EqualsLower(last, "authorization")) return KeyKind::kAuthorization;
      if (EqualsLower(last, "apikey") || EqualsLower(last, "accesskey")) return KeyKind::kSecret;
      return KeyKind::kNone;
    case 'c':
      return InLower(last, {"credential", "credentials", "cookie"}) ? KeyKind::kSecret : KeyKind::kNone;
    case 'k':
      if (EqualsLower(last, "key") && !single &&
          InLower(LastWord(key, before_end), {"api", "access", "private", "secret", "account", "signing", "encryption",
                                              "master", "client", "session", "auth", "ssh", "storage", "sas",
                                              "subscription", "service", "license", "app"})) {
        return KeyKind::kSecret;
      }
      return KeyKind::kNone;
    case 'p':
      if (InLower(last, {"password", "passwords", "passwd", "passphrase", "privatekey"})) return KeyKind::kSecret;
      // Short words that are ordinary on their own ("pwd: /home/x", "pass: 3") count only as
      // the last word of a longer key (DB_PWD, smtp_pass).
      if (!single && InLower(last, {"pwd", "pass"})) return KeyKind::kSecret;
      return KeyKind::kNone;
    case 's':
      // sig / signature: Azure SAS "sig=", S3 presigned "X-Amz-Signature=".
      return InLower(last, {"secret", "secretkey", "sig", "signature"}) ? KeyKind::kSecret : KeyKind::kNone;
    case 't':
      if (!EqualsLower(last, "token")) return KeyKind::kNone;
      // Tokenizer vocabulary: "eos_token: </s>", "pad_token: <pad>", ... are not credentials.
      if (!single && InLower(LastWord(key, before_end),
                             {"eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "start", "end", "image",
                              "video", "audio", "vision", "additional", "decoder", "encoder", "first", "last", "next",
                              "prev", "max", "min", "num", "total", "new", "stop"})) {
        return KeyKind::kNone;
      }
      return KeyKind::kToken;
    default:
      return KeyKind::kNone;
  }
}

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  void Run() {
    if (WholeLineKeyMaterial()) return;  // all of it is one secret
    const char* p = s_.data();
    const size_t n = s_.size();
    size_t i = 0;
    while (i < n) {
      i = NextCandidate(p, i, n);
      if (i >= n) break;
      const char c = p[i];
      size_t next = 0;  // > i when a rule matched: resume there
      switch (c) {
        case ':':
          next = StartsWith(s_, i, "://") ? Url(i + 3) : KeyValue(i);
          break;
        case '=':
          next = KeyValue(i);
          break;
        case '-':
          if (StartsWith(s_, i, "-----BEGIN")) {
            next = PemBlock(i);
          } else if ((i <= floor_ || IsSpace(p[i - 1]) || IsQuote(p[i - 1])) && StartsWith(s_, i, "--")) {
            next = Flag(i + 2);
          } else {
            next = TokenFrom(i, 2, 's');  // sk-
            if (next == 0) next = TokenFrom(i, 4, 'x');  // xoxb-
          }
          break;
        case '_':
          next = TokenFrom(i, 2, 'h');                  // hf_
          if (next == 0) next = TokenFrom(i, 3, 'g');   // ghp_
          if (next == 0) next = TokenFrom(i, 6, 'g');   // github_pat_
          break;
        case 'J':
          next = TokenFrom(i, 2, 'e');  // eyJ
          break;
        default:  // A, b, B
          next = TokenFrom(i, 0, c);
      }
      i = next > i ? next : i + 1;
    }
  }

  std::vector<Span>& spans() { return spans_; }

 private:
  // Records a secret unless it is empty or already redacted (idempotence).
  size_t Add(size_t begin, size_t end) {
    if (end <= begin) return 0;
    if (StartsWith(s_, begin, kRedacted)) return begin + kRedacted.size();
    spans_.push_back({begin, end});
    floor_ = std::max(floor_, end);
    return end;
  }

  size_t RunEnd(size_t from, bool (*pred)(char), size_t max_len) const {
    size_t e = from;
    const size_t limit = std::min(s_.size(), from + max_len);
    while (e < limit && pred(s_[e])) ++e;
    return e;
  }

  // `key=value`, `key: value`, `"key": "value"`, `\"key\": \"value\"`, `'key': 'value'`.
  size_t KeyValue(size_t sep) {
    // The key, backwards from the separator over spaces, closing quotes and escapes.
    size_t e = sep;
    for (int k = 0; k < 2 && e > floor_ && IsSpace(s_[e - 1]); ++k) --e;
    for (int k = 0; k < 3 && e > floor_ && (IsQuote(s_[e - 1]) || s_[e - 1] == '\\'); ++k) --e;
    size_t b = e;
    while (b > floor_ && e - b < kMaxKeyBytes && IsKeyChar(s_[b - 1])) --b;
    if (b == e) return 0;
    if (b > floor_ && IsKeyChar(s_[b - 1])) {
      // Longer than kMaxKeyBytes (a Hydra override such as
      // model.data.storage_options.client_kwargs.aws_secret_access_key=...): the last words
      // decide, so keep the key from its first word boundary within the window.
      while (b < e && s_[b] != '.' && s_[b] != '_' && s_[b] != '-') ++b;
      if (b >= e) return 0;
      ++b;
      if (b >= e) return 0;
    }
    const KeyKind kind = ClassifyKey(s_.substr(b, e - b));
    if (kind == KeyKind::kNone) return 0;
    return Value(sep + 1, kind);
  }

  // The value that starts at `v` (after the separator).
  size_t Value(size_t v, KeyKind kind) {
    const size_t n = s_.size();
    while (v < n && IsSpace(s_[v])) ++v;
    if (v >= n) return 0;
    if (s_[v] == '=' || s_[v] == ':') return 0;  // "==", ":=", "::": not an assignment of a value
    if (StartsWith(s_, v, kRedacted)) return v + kRedacted.size();
    // Quoted, possibly with escaped quotes (a JSON string inside a logged string).
    bool escaped = false;
    size_t q = v;
    if (s_[q] == '\\' && q + 1 < n && IsQuote(s_[q + 1])) {
      escaped = true;
      ++q;
    }
    if (IsQuote(s_[q])) {
      const char quote = s_[q];
      const size_t begin = q + 1;
      size_t end = begin;
      while (end < n && s_[end] != quote) ++end;
      if (escaped && end > begin && s_[end - 1] == '\\') --end;
      size_t vb = begin;
      if (kind == KeyKind::kAuthorization) vb = SkipScheme(begin, end);
      const size_t r = Add(vb, end);
      return r == 0 ? end : std::max(r, end);
    }
    if (s_[v] == '{' || s_[v] == '[') {
      // A structured value (credentials={...}): everything up to the matching bracket.
      int depth = 0;
      size_t end = v;
      for (; end < n; ++end) {
        if (s_[end] == '{' || s_[end] == '[') ++depth;
        if (s_[end] == '}' || s_[end] == ']') {
          if (--depth == 0) {
            ++end;
            break;
          }
        }
      }
      return Add(v, end);
    }
    size_t end = v;
    bool digits = true;
    while (end < n && !EndsValue(s_[end])) digits &= IsDigit(s_[end++]);
    if (kind == KeyKind::kToken && digits) return end;
    if (kind == KeyKind::kAuthorization) {
      // "Authorization: Bearer abc": keep the scheme, redact the credential after it.
      const size_t scheme_end = SkipScheme(v, n);
      if (scheme_end != v) {
        end = scheme_end;
        while (end < n && !EndsValue(s_[end])) ++end;
        return Add(scheme_end, end);
      }
    }
    return Add(v, end);
  }

  // After an Authorization scheme word ("Bearer ", "Basic ", "token "), the credential's
  // start; `from` when the value has no scheme word.
  size_t SkipScheme(size_t from, size_t end) const {
    size_t w = from;
    while (w < end && (IsAlnum(s_[w]) || s_[w] == '-')) ++w;
    if (w == from || w - from > 24 || w >= end || !IsSpace(s_[w])) return from;
    size_t c = w;
    while (c < end && IsSpace(s_[c])) ++c;
    return c < end ? c : from;
  }

  // scheme://user:password@host — the password.
  size_t Url(size_t u) {
    const size_t n = s_.size();
    const size_t limit = std::min(n, u + 512);
    size_t colon = 0;
    for (size_t k = u; k < limit; ++k) {
      const char c = s_[k];
      if (c == '@') {
        if (colon == 0) return 0;
        return Add(colon + 1, k);
      }
      if (c == '/' || c == '?' || c == '#' || IsSpace(c) || IsQuote(c)) return 0;
      if (c == ':' && colon == 0) colon = k;
    }
    return 0;
  }

  // --password hunter2, --hf-token hf_... (the space-separated flag form; "--k=v" is KeyValue's).
  size_t Flag(size_t k) {
    const size_t n = s_.size();
    size_t e = k;
    while (e < n && e - k < kMaxKeyBytes && IsKeyChar(s_[e])) ++e;
    if (e == k || e >= n) return 0;
    size_t v = e + 1;
    if (IsQuote(s_[e])) {
      // An argv list as Python prints it: '--password', 'hunter2' (or "--api_key", "...").
      if (v < n && s_[v] == ',') ++v;
      while (v < n && IsSpace(s_[v])) ++v;
      if (v >= n || !IsQuote(s_[v])) return 0;
    } else if (s_[e] != ' ') {
      return 0;
    }
    const KeyKind kind = ClassifyKey(s_.substr(k, e - k));
    if (kind == KeyKind::kNone) return 0;
    if (v >= n || s_[v] == '-' || (IsQuote(s_[v]) && v + 1 < n && s_[v + 1] == '-')) return e;  // next flag: no value
    return Value(v, kind);
  }

  // -----BEGIN ... PRIVATE KEY----- on one line (a key inside JSON with escaped newlines):
  // everything up to -----END. The body of a multi-line block is WholeLineKeyMaterial's.
  size_t PemBlock(size_t i) {
    const size_t n = s_.size();
    const size_t header_end = s_.find("-----", i + 10);
    if (header_end == std::string_view::npos || header_end - i > 96) return 0;
    const std::string_view header = s_.substr(i, header_end - i);
    if (header.find("PRIVATE KEY") == std::string_view::npos) return 0;  // certificates are public
    const size_t body = header_end + 5;
    size_t end = s_.find("-----END", body);
    if (end == std::string_view::npos) end = n;
    return Add(body, end);
  }

  // A line that is nothing but a long base64 run with mixed case and digits: the body of a PEM
  // private key (or another key blob). Hex digests (one case) and words are kept.
  bool WholeLineKeyMaterial() {
    size_t b = 0, e = s_.size();
    while (b < e && IsSpace(s_[b])) ++b;
    while (e > b && IsSpace(s_[e - 1])) --e;
    while (e > b && s_[e - 1] == '=' && s_.size() - e < 2) --e;
    if (e - b < 40 || e - b > 128) return false;
    bool upper = false, lower = false, digit = false;
    for (size_t k = b; k < e; ++k) {
      const char c = s_[k];
      if (!IsBase64(c)) return false;
      upper |= IsUpper(c);
      lower |= IsLower(c);
      digit |= IsDigit(c);
    }
    if (!(upper && lower && digit)) return false;
    Add(b, e);
    return true;
  }

  // The token format whose first letter is `first`, `back` bytes before `i`, if a word starts there.
  size_t TokenFrom(size_t i, size_t back, char first) {
    if (i < floor_ + back) return 0;
    const size_t start = i - back;
    if (s_[start] != first || (start > floor_ && IsWord(s_[start - 1]))) return 0;
    return TokenAt(start);
  }

  // Token formats, at a word start.
  size_t TokenAt(size_t i) {
    switch (s_[i]) {
      case 'b':
      case 'B':
        if (StartsWithNoCase(s_, i, "bearer") && i + 6 < s_.size() && IsSpace(s_[i + 6])) {
          size_t t = i + 6;
          while (t < s_.size() && IsSpace(s_[t])) ++t;
          const size_t e = RunEnd(t, IsTokenChar, 8192);
          if (e - t >= 8) return Add(t, e);
        }
        return 0;
      case 'g':
        if (i + 4 <= s_.size() && s_[i + 1] == 'h' && s_[i + 3] == '_' &&
            std::string_view("pousr").find(s_[i + 2]) != std::string_view::npos) {
          return Prefixed(i, 4, 20, IsAlnum, false);
        }
        if (StartsWith(s_, i, "github_pat_")) return Prefixed(i, 11, 20, IsWord, false);
        return 0;
      case 'h':
        if (StartsWith(s_, i, "hf_")) return Prefixed(i, 3, 20, IsAlnum, true);
        return 0;
      case 's':
        if (StartsWith(s_, i, "sk-") && (i <= floor_ || s_[i - 1] != '-')) {
          return Prefixed(i, 3, 20, [](char c) { return IsWord(c) || c == '-'; }, true);
        }
        return 0;
      case 'x':
        if (StartsWith(s_, i, "xox") && i + 4 < s_.size() && std::string_view("abposre").find(s_[i + 3]) != std::string_view::npos &&
            s_[i + 4] == '-') {
          return Prefixed(i, 5, 10, [](char c) { return IsAlnum(c) || c == '-'; }, false);
        }
        return 0;
      case 'A':
        if (StartsWith(s_, i, "AKIA") || StartsWith(s_, i, "ASIA")) {
          const size_t e = RunEnd(i + 4, [](char c) { return IsUpper(c) || IsDigit(c); }, 17);
          if (e - (i + 4) == 16 && (e == s_.size() || !IsAlnum(s_[e]))) return Add(i, e);
          return 0;
        }
        if (StartsWith(s_, i, "AIza")) return Prefixed(i, 4, 30, [](char c) { return IsWord(c) || c == '-'; }, false);
        return 0;
      case 'e':
        return Jwt(i);
      default:
        return 0;
    }
  }

  // prefix + at least `min_body` body characters; `mixed` also asks for a digit or an upper-case
  // letter in the body (random keys have them; snake_case identifiers like hf_hub_download
  // stop at '_' anyway, but this keeps long lower-case words such as hf_transformersinternals).
  size_t Prefixed(size_t i, size_t prefix_len, size_t min_body, bool (*pred)(char), bool mixed) {
    const size_t b = i + prefix_len;
    const size_t e = RunEnd(b, pred, 512);
    if (e - b < min_body) return 0;
    if (e < s_.size() && IsAlnum(s_[e])) return 0;  // longer than any key: some other word
    if (mixed) {
      bool ok = false;
      for (size_t k = b; k < e && !ok; ++k) ok = IsDigit(s_[k]) || IsUpper(s_[k]);
      if (!ok) return 0;
    }
    return Add(i, e);
  }

  // header.payload.signature, both JSON parts base64url of '{"' → "eyJ".
  size_t Jwt(size_t i) {
    if (!StartsWith(s_, i, "eyJ")) return 0;
    // Every "eyJ" inside a base64url run already tried ends at the same place and fails the
    // same way: skipping them keeps a line of "-eyJ-eyJ..." linear, not quadratic.
    if (i < jwt_tried_until_) return 0;
    auto b64url = [](char c) { return IsAlnum(c) || c == '-' || c == '_'; };
    size_t e = RunEnd(i, b64url, 8192);
    jwt_tried_until_ = e;
    if (e - i < 10 || e >= s_.size() || s_[e] != '.') return 0;
    if (!StartsWith(s_, e + 1, "eyJ")) return 0;
    const size_t p = e + 1;
    e = RunEnd(p, b64url, 8192);
    if (e - p < 10 || e >= s_.size() || s_[e] != '.') return 0;
    e = RunEnd(e + 1, b64url, 8192);
    return Add(i, e);
  }

  std::string_view s_;
  std::vector<Span> spans_;
  // The end of the secrets found so far. Nothing before it is looked back at: in the output
  // those bytes are "[REDACTED]", so a key or word start that reached into them would be seen
  // differently the second time, and redaction must be idempotent (a word touching a secret
  // counts as starting after it, as it will in the output).
  size_t floor_ = 0;
  size_t jwt_tried_until_ = 0;  // the end of the base64url run the last JWT attempt scanned
};

}  // namespace

size_t SecretSafeCut(std::string_view text, size_t max) {
  if (text.size() <= max) return text.size();
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  auto token_char = [](char c) { return IsAlnum(c) || c == '_' || c == '-'; };
  if (cut == 0 || !token_char(text[cut]) || !token_char(text[cut - 1])) return cut;
  size_t b = cut;
  while (b > 0 && cut - b < 64 && token_char(text[b - 1])) --b;
  return cut - b < 64 ? b : cut;
}

size_t RedactSecrets(std::string& line) {
  Scanner scanner(line);
  scanner.Run();
  auto& spans = scanner.spans();
  if (spans.empty()) return 0;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // Overlapping findings (HF_TOKEN=hf_... matches twice) become one.
  std::vector<Span> merged;
  merged.reserve(spans.size());
  for (const Span& s : spans) {
    if (!merged.empty() && s.begin < merged.back().end) {
      merged.back().end = std::max(merged.back().end, s.end);
    } else {
      merged.push_back(s);
    }
  }
  std::string out;
  out.reserve(line.size() + merged.size() * kRedacted.size());
  size_t at = 0;
  for (const Span& s : merged) {
    out.append(line, at, s.begin - at);
    out.append(kRedacted);
    at = s.end;
  }
  out.append(line, at, std::string::npos);
  line = std::move(out);
  return merged.size();
}

}  // namespace ithbat::collect::joblog
