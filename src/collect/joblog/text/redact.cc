#include "collect/joblog/text/redact.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collect/joblog/text/redact_formats.h"

// Hand scanner, not RE2. The rules need context a regex expresses badly (the key's last word
// decides, camelCase keys, quoted/escaped/bracketed values, the scheme word of an
// Authorization value kept, the tool a short flag belongs to), and RE2 with capture groups —
// needed to replace only the value — runs its slow NFA engines. The scanner makes one pass,
// 16 bytes at a time between candidate bytes, and a rule is tried only at the bytes that can
// anchor it (':' and '=' for key/value pairs and "://" URLs, a prefix's first separator or
// first letter for token formats). A line without secrets is never copied and nothing is
// allocated for it (a shell trace's word list aside): that pass is the prefilter. After a rule matched, scanning resumes at the
// end of the secret, so the work stays linear.

namespace ithbat::collect::joblog {
namespace {

namespace rf = redact_formats;
using namespace std::string_view_literals;

struct Span {
  size_t begin;
  size_t end;
};

// The bytes a rule can start from (see Scanner::Run).
constexpr std::string_view kCandidates = ":=_-.~JbBD" "AEGLSd";
static_assert(rf::kLetterTriggers == "AEGLSd");

constexpr std::array<bool, 256> MakeCandidates() {
  std::array<bool, 256> t{};
  for (unsigned char c : kCandidates) t[c] = true;
  return t;
}
constexpr std::array<bool, 256> kIsCandidate = MakeCandidates();

// The candidate bytes of a line, 16 at a time (GCC/Clang vector extensions: SSE2 on x86-64,
// NEON on arm64). One pass per block gives a mask of all its candidates, which Next walks bit
// by bit before loading the next block. Letters count only where a rule can start from them,
// judged from the bytes around (the rules check again, this only thins the candidates out: a
// letter is in ~a fifth of text bytes): A E G L S b B at a word start, d at a word start or
// before a space (dapi…, password 'x'), D before a space (PASSWORD 'x'), '.' between a letter
// or digit and a word byte, not inside a number (ya29.…, SG.…, hvs.…). The first byte and the
// last 16 are checked byte by byte, unfiltered.
class CandidateCursor {
 public:
  CandidateCursor(const char* p, size_t n) : p_(p), n_(n) {}

  // The first candidate at or after `i`, or n.
  size_t Next(size_t i) {
    if constexpr (std::endian::native == std::endian::little) {
      while (true) {
        if (i >= block_ && i < block_ + 16) {
          const size_t o = i - block_;
          uint64_t lo = mask_[0], hi = mask_[1];
          if (o >= 8) {
            lo = 0;
            hi &= ~uint64_t{0} << ((o - 8) * 8);
          } else {
            lo &= ~uint64_t{0} << (o * 8);
          }
          if (lo != 0) return block_ + static_cast<size_t>(std::countr_zero(lo) / 8);
          if (hi != 0) return block_ + 8 + static_cast<size_t>(std::countr_zero(hi) / 8);
          i = block_ + 16;
        }
        if (i == 0) {
          if (n_ > 0 && kIsCandidate[static_cast<unsigned char>(p_[0])]) return 0;
          i = 1;
          continue;
        }
        if (i + 17 > n_) break;
        Load(i);
      }
    }
    while (i < n_ && !kIsCandidate[static_cast<unsigned char>(p_[i])]) ++i;
    return i;
  }

 private:
  using V = unsigned char __attribute__((vector_size(16)));
  static V In(V x, unsigned char lo, unsigned char hi) {
    return reinterpret_cast<V>(static_cast<V>(x - lo) <= static_cast<unsigned char>(hi - lo));
  }
  static V Alnum(V x) { return In(x, 'a', 'z') | In(x, 'A', 'Z') | In(x, '0', '9'); }

  void Load(size_t at) {  // 1 <= at, at + 17 <= n
    V v, prev, next;
    std::memcpy(&v, p_ + at, 16);
    std::memcpy(&prev, p_ + at - 1, 16);
    std::memcpy(&next, p_ + at + 1, 16);
    const V prev_alnum = Alnum(prev);
    const V word_start = ~(prev_alnum | reinterpret_cast<V>(prev == '_') | reinterpret_cast<V>(prev == '-'));
    const V next_space = reinterpret_cast<V>(next == ' ');
    const V next_word = Alnum(next) | reinterpret_cast<V>(next == '_') | reinterpret_cast<V>(next == '-');
    const V number = In(prev, '0', '9') & In(next, '0', '9');
    const V any = reinterpret_cast<V>((v == ':') | (v == '=') | (v == '_') | (v == '-') | (v == '~') | (v == 'J'));
    const V at_start = reinterpret_cast<V>((v == 'A') | (v == 'E') | (v == 'G') | (v == 'L') | (v == 'S') | (v == 'b') |
                                           (v == 'B'));
    const V m = any | (at_start & word_start) | (reinterpret_cast<V>(v == 'd') & (word_start | next_space)) |
                (reinterpret_cast<V>(v == 'D') & next_space) |
                (reinterpret_cast<V>(v == '.') & prev_alnum & next_word & ~number);
    static_assert(sizeof(m) == sizeof(mask_));
    std::memcpy(mask_, &m, sizeof(mask_));
    block_ = at;
  }

  const char* p_;
  size_t n_;
  size_t block_ = SIZE_MAX - 16;  // no block loaded
  uint64_t mask_[2] = {0, 0};
};

inline bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsWord(char c) { return IsAlnum(c) || c == '_'; }
inline bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
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
// A byte that continues a token from the left: a prefix right after one is inside some other
// word ("task-sk-...", "my_hf_...").
inline bool ContinuesToken(char c) { return IsWord(c) || c == '-'; }
// Where a URL ends in running text.
inline bool EndsUrl(char c) { return IsSpace(c) || IsQuote(c) || c == '<' || c == '>' || c == '\\' || c == '`'; }

bool BodyChar(rf::Body body, char c) {
  switch (body) {
    case rf::Body::kAlnum:
      return IsAlnum(c);
    case rf::Body::kHex:
      return IsHex(c);
    case rf::Body::kUpperNum:
      return IsUpper(c) || IsDigit(c);
    case rf::Body::kWord:
      return IsWord(c);
    case rf::Body::kWordDash:
      return IsWord(c) || c == '-';
    case rf::Body::kWordDot:
      return IsWord(c) || c == '-' || c == '.';
    case rf::Body::kBase64:
      return IsWord(c) || c == '-' || c == '+' || c == '/' || c == '=';
  }
  return false;
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
  if (at > s.size() || s.size() - at < prefix.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k) {
    if (s[at + k] != prefix[k]) return false;
  }
  return true;
}
bool EqualsLower(std::string_view word, std::string_view lower) {
  if (word.size() != lower.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (Lower(word[k]) != lower[k]) return false;
  }
  return true;
}
bool EndsWithLower(std::string_view word, std::string_view lower) {
  return word.size() > lower.size() && EqualsLower(word.substr(word.size() - lower.size()), lower);
}
bool InLower(std::string_view word, std::initializer_list<std::string_view> set) {
  for (std::string_view w : set) {
    if (EqualsLower(word, w)) return true;
  }
  return false;
}

// ---- Token formats, indexed by the prefix's first byte ------------------------------------

// Where each format is reached from: the offset of its prefix's first separator ('_' '-' '.'),
// or 0 when it has none (reached from its first letter).
constexpr size_t SeparatorOffset(std::string_view prefix) {
  for (size_t k = 1; k < prefix.size(); ++k) {
    if (prefix[k] == '_' || prefix[k] == '-' || prefix[k] == '.') return k;
  }
  return 0;
}

// The letters some tool uses as a password flag (kToolFlags): other short flags are skipped
// before the line's words are looked at.
constexpr std::array<bool, 256> MakeToolFlagLetters() {
  std::array<bool, 256> t{};
  for (const rf::ToolFlag& tf : rf::kToolFlags) t[static_cast<unsigned char>(tf.flag)] = true;
  t['p'] = true;  // -u USER -p PASSWORD (ShortFlag)
  return t;
}
constexpr std::array<bool, 256> kIsToolFlagLetter = MakeToolFlagLetters();

constexpr size_t kFormatCount = std::size(rf::kTokenFormats);
static_assert(kFormatCount < 255);

// A format without a separator is reached only from its first letter: that letter must be one
// the cursor stops at.
static_assert([] {
  for (const rf::TokenFormat& f : rf::kTokenFormats) {
    if (SeparatorOffset(f.prefix) == 0 && rf::kLetterTriggers.find(f.prefix[0]) == std::string_view::npos) return false;
  }
  return true;
}());

// Each format's SeparatorOffset, computed once.
constexpr std::array<uint8_t, kFormatCount> kSeparatorOffsets = [] {
  std::array<uint8_t, kFormatCount> a{};
  for (size_t f = 0; f < kFormatCount; ++f) a[f] = static_cast<uint8_t>(SeparatorOffset(rf::kTokenFormats[f].prefix));
  return a;
}();

// The longest word before a prefix's first separator: a longer word cannot start a format.
constexpr size_t kMaxSeparatorOffset = [] {
  size_t m = 0;
  for (const rf::TokenFormat& f : rf::kTokenFormats) m = std::max(m, SeparatorOffset(f.prefix));
  return m;
}();

// Formats by first byte: for each byte, the indexes of the formats whose prefix starts with it,
// ended by 0xff. Built at compile time; the longest list is well under 32.
struct FormatIndex {
  std::array<std::array<uint8_t, 32>, 128> by_first{};
  constexpr FormatIndex() {
    for (auto& list : by_first) list.fill(0xff);
    for (size_t f = 0; f < kFormatCount; ++f) {
      const auto c = static_cast<unsigned char>(rf::kTokenFormats[f].prefix[0]);
      size_t k = 0;
      while (by_first[c][k] != 0xff) ++k;
      by_first[c][k] = static_cast<uint8_t>(f);
    }
  }
};
constexpr FormatIndex kFormatIndex;
static_assert([] {
  for (const auto& list : FormatIndex().by_first) {
    if (list[31] != 0xff) return false;
  }
  return true;
}());

// kToken: a key whose last word is "token" — a number after it is a count ("#token: 1234" in
// SGLang's stats), not a credential. kCookie: the value runs to the end of the header.
// kUserPass: "user:password" values (--user, --proxy-user). kAuth: a lone "auth" key, secret
// when its value is user:password or a credential blob ("auth": "dXNlcjpwYXNz" in a Docker
// config) but not "auth: none". kPwd: PWD=, a password in connection strings unless its
// value is a directory (the shell's PWD=/home/x).
// kKeyIfRandom: a lone "key=" (wandb.login(key=...)), a secret only when its value looks
// generated (16 or more, a digit in it): "key=loss" is not.
enum class KeyKind { kNone, kSecret, kAuthorization, kToken, kCookie, kUserPass, kAuth, kPwd, kKeyIfRandom };

constexpr size_t kMaxKeyBytes = 64;

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

// Tokenizer vocabulary and counts: "eos_token: </s>", "max_token: 5" are not credentials.
bool TokenizerWord(std::string_view word) {
  return InLower(word, {"eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "start", "end", "image", "video",
                        "audio", "vision", "additional", "decoder", "encoder", "first", "last", "next", "prev", "max",
                        "min", "num", "total", "new", "stop", "per", "output", "input", "prompt", "think"});
}

// Decides by the key's last word (and the word before it for "key", "token", "base"), so
// "hf_token", "accessToken", "DB_PASSWORD", "x-api-key", "PGPASSWORD" are secrets and
// "max_tokens", "tokenizer", "token_usage", "eos_token", "ssl_keyfile" are not. Called at every
// ':' and '=' of every line, so it rejects on the last word's length before any list is
// compared.
KeyKind ClassifyKey(std::string_view key, char sep) {
  if (key.empty() || key.size() > kMaxKeyBytes) return KeyKind::kNone;
  const std::string_view last = LastWord(key, key.size());
  if (last.size() < 3 || last.size() > 24) return KeyKind::kNone;
  const size_t before_end = static_cast<size_t>(last.data() - key.data());
  const std::string_view before = LastWord(key, before_end);
  const bool single = before.empty();
  // An encoding or container word last (GOOGLE_CREDENTIALS_B64, client-key-data,
  // KEYTAB_BASE64): the words before it decide.
  if (!single && std::string_view("4dcanbmr").find(Lower(last.back())) != std::string_view::npos &&
      InLower(last, {"b64", "base64", "encoded", "enc", "data", "json", "blob", "pem", "der"})) {
    return ClassifyKey(key.substr(0, before_end), sep);
  }
  switch (Lower(last[0])) {
    case 'a':
      if (EqualsLower(last, "authorization")) return KeyKind::kAuthorization;
      if (EqualsLower(last, "apikey") || EqualsLower(last, "accesskey")) return KeyKind::kSecret;
      if (EqualsLower(last, "auth")) return single ? KeyKind::kAuth : KeyKind::kSecret;  // REDISCLI_AUTH
      break;
    case 'b':
      // Rails' SECRET_KEY_BASE.
      if (EqualsLower(last, "base") && EqualsLower(before, "key") &&
          EqualsLower(LastWord(key, static_cast<size_t>(before.data() - key.data())), "secret")) {
        return KeyKind::kSecret;
      }
      break;
    case 'c':
      if (InLower(last, {"credential", "credentials", "creds"})) return KeyKind::kSecret;
      if (EqualsLower(last, "cookie")) return KeyKind::kCookie;
      break;
    case 'd':
      // Kubernetes image-pull secrets (.dockerconfigjson, .dockercfg).
      if (InLower(last, {"dockerconfigjson", "dockercfg"})) return KeyKind::kSecret;
      break;
    case 'k':
      if (EqualsLower(last, "keytab")) return KeyKind::kSecret;
      if (single && sep == '=' && EqualsLower(last, "key")) return KeyKind::kKeyIfRandom;
      if (EqualsLower(last, "key") && !single &&
          InLower(before, {"api", "access", "private", "secret", "account", "signing", "encryption", "master", "client",
                           "session", "auth", "ssh", "storage", "sas", "subscription", "service", "license", "app",
                           "admin", "shared", "primary", "secondary", "webhook", "hmac", "routing", "integration",
                           "write", "deploy", "consumer", "user"})) {
        return KeyKind::kSecret;
      }
      break;
    case 'p':
      if (InLower(last, {"password", "passwords", "passwd", "passphrase", "passcode", "privatekey", "p12", "pfx",
                         "pkcs12"}))
        return KeyKind::kSecret;
      // Short words that are ordinary on their own ("pwd: /home/x", "pass: 3 of 5") count only
      // as the last word of a longer key (DB_PWD, smtp_pass) — or PWD= in a connection string.
      if (!single && InLower(last, {"pwd", "pass"})) return KeyKind::kSecret;
      if (single && sep == '=' && EqualsLower(last, "pwd")) return KeyKind::kPwd;
      break;
    case 's':
      // sig / signature: Azure SAS "sig=", S3 presigned "X-Amz-Signature=".
      if (InLower(last, {"secret", "secrets", "secretkey", "sig", "signature", "sessionid"})) return KeyKind::kSecret;
      break;
    case 't':
      if (!EqualsLower(last, "token")) break;
      if (!single && TokenizerWord(before)) return KeyKind::kNone;
      return KeyKind::kToken;
    case 'u':
      if (single && InLower(last, {"user", "userpass"})) return KeyKind::kUserPass;
      break;
    case 'j':
      if (EqualsLower(last, "jsessionid")) return KeyKind::kSecret;
      break;
    default:
      break;
  }
  if (EqualsLower(last, "user") && EqualsLower(before, "proxy")) return KeyKind::kUserPass;
  // One word that ends with a secret word: PGPASSWORD, MYSQLPASSWD, CLIENTSECRET, HFTOKEN.
  if (last.size() > 5) {
    // Only words ending in d, e, t or y can end with one of them (checked first: this runs at
    // every ':' and '=' of every line).
    const char tail = Lower(last.back());
    if (tail != 'd' && tail != 'e' && tail != 't' && tail != 'y' && tail != 'n') return KeyKind::kNone;
    for (std::string_view suffix : {"password"sv, "passwd"sv, "passphrase"sv, "secret"sv, "apikey"sv, "accesskey"sv,
                                    "secretkey"sv, "privatekey"sv}) {
      if (EndsWithLower(last, suffix)) return KeyKind::kSecret;
    }
    if (EndsWithLower(last, "token") && !TokenizerWord(last.substr(0, last.size() - 5))) return KeyKind::kToken;
  }
  return KeyKind::kNone;
}

// A value that cannot be a secret, so redacting it would only hide information: empty,
// None/null/true/false, a mask (***, xxxx, [REDACTED] handled by the caller), a placeholder
// (<your key>, ${VAR}, $VAR, {{ var }}).
bool NotASecret(std::string_view v) {
  if (v.empty()) return true;
  if (InLower(v, {"none", "null", "nil", "true", "false", "undefined", "n/a", "unset", "empty", "no", "yes",
                  "required", "optional", "redacted", "hidden", "masked", "omitted"})) {
    return true;
  }
  if (v.size() >= 2 && std::all_of(v.begin(), v.end(), [](char c) { return c == '*'; })) return true;
  if (v.size() >= 3 && std::all_of(v.begin(), v.end(), [](char c) { return c == 'x' || c == 'X'; })) return true;
  // Masked already: "gho_****", "sk-proj-****abcd" (a tool printing the last digits).
  if (v.find("****") != std::string_view::npos) return true;
  // A placeholder's inside is words, spaces and dots (and markers: the rules still scan it,
  // and what they find inside must leave it a placeholder for redaction to stay idempotent;
  // with no ':', '=' or slash inside, nothing they find reaches past its end). <...> may also
  // hold quotes and dashes, as kubectl writes it: <set to the key 'token' in secret 'hf-secret'>.
  auto inside = [](std::string_view in, bool angle) {
    return in.size() <= 96 && std::all_of(in.begin(), in.end(), [angle](char c) {
             return IsWord(c) || c == ' ' || c == '.' || c == '[' || c == ']' ||
                    (angle && (c == '-' || IsQuote(c)));
           });
  };
  if (v.size() >= 3 && v.front() == '<' && v.back() == '>' && inside(v.substr(1, v.size() - 2), true)) return true;
  if (v.size() >= 4 && StartsWith(v, 0, "${") && v.back() == '}' && inside(v.substr(2, v.size() - 3), false)) return true;
  if (v.size() >= 5 && StartsWith(v, 0, "{{") && v.substr(v.size() - 2) == "}}" && inside(v.substr(2, v.size() - 4), false)) {
    return true;
  }
  if (v.size() >= 3 && v[0] == '$' &&
      std::all_of(v.begin() + 1, v.end(), [](char c) { return IsUpper(c) || IsDigit(c) || c == '_'; })) {
    return true;
  }
  return false;
}

// A directory or file path given where a key word is expected (ssl_key=/etc/ssl/x.pem,
// PWD=/home/u): not a secret, and redacting every path would hide where things are.
bool LooksLikePath(std::string_view v) {
  if (v.size() < 2) return false;
  if (!(v[0] == '/' || StartsWith(v, 0, "./") || StartsWith(v, 0, "~/") || StartsWith(v, 0, "../"))) return false;
  // A path with a part redacted already (/[REDACTED], /---[REDACTED] once a token in it was
  // found) is still a path: taken for a secret the second time, redaction would not be
  // idempotent. The value may end before the marker's ']' (a ']' ends an unquoted value).
  constexpr std::string_view kOpenMarker = "[REDACTED";
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.substr(i, kOpenMarker.size()) == kOpenMarker) {
      i += kOpenMarker.size();
      if (i < v.size() && v[i] != ']') return false;
      continue;  // at the ']', which the next round steps over
    }
    const char c = v[i];
    if (!(IsWord(c) || c == '/' || c == '.' || c == '-' || c == '~')) return false;
  }
  return true;
}

// A word of prose where a flag's value would be: "Using --password via the CLI is insecure".
bool ProseWord(std::string_view w) {
  return InLower(w, {"via", "is", "the", "in", "on", "of", "for", "to", "and", "or", "with", "from", "not", "flag",
                     "option", "argument", "instead", "must", "should", "will", "can", "was", "are", "be", "if",
                     "when", "only", "as", "at", "by"});
}

// A word that can be a generated key: 8 or more bytes, a digit among them, not a placeholder.
bool LooksRandom(std::string_view w) {
  return w.size() >= 8 && std::any_of(w.begin(), w.end(), IsDigit) && !NotASecret(w);
}

// A value with only digits and colons (uid:gid, host port pairs): not a user:password.
bool DigitsAndColons(std::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char c) { return IsDigit(c) || c == ':'; });
}

// Decodes up to `max` base64 characters of `s` (standard alphabet) into `out`.
void DecodeBase64Prefix(std::string_view s, size_t max, std::string& out) {
  uint32_t acc = 0;
  int bits = 0;
  for (size_t k = 0; k < s.size() && k < max; ++k) {
    const char c = s[k];
    int v;
    if (IsUpper(c)) v = c - 'A';
    else if (IsLower(c)) v = c - 'a' + 26;
    else if (IsDigit(c)) v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else break;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
}

class Scanner {
 public:
  // `nested`: a scan of part of a line on behalf of an outer scan (one level only, so that a
  // hostile line cannot make it recurse).
  explicit Scanner(std::string_view s, bool nested = false) : s_(s), nested_(nested) {}

  void Run() {
    if (WholeLineKeyMaterial()) return;
    const char* p = s_.data();
    const size_t n = s_.size();
    CandidateCursor cursor(p, n);
    size_t i = cursor.Next(0);
    while (i < n) {
      const char c = p[i];
      size_t next = 0;  // > i when a rule matched: resume there
      switch (c) {
        case ':':
          if (StartsWith(s_, i, "://")) {
            next = Url(i + 3);
          } else {
            next = TelegramBotToken(i);
            if (next == 0) next = KeyValue(i);
          }
          break;
        case '=':
          next = KeyValue(i);
          break;
        case '-':
          if (StartsWith(s_, i, "-----BEGIN")) {
            next = PemBlock(i);
          } else if (AtWordStart(i)) {
            next = Dash(i);
          } else {
            next = FromSeparator(i);
            if (next == 0) next = Mailchimp(i);
          }
          break;
        case '_':
          next = FromSeparator(i);
          break;
        case '.':
          // Every format with a '.' has a letter or digit before it and a word byte after it
          // (ya29.a0, SG.1x, hvs.CAES, .atlasv1.): a number's decimal point is skipped at once
          // (the cursor's filter, again for the bytes it checks unfiltered).
          if (i == 0 || i + 1 >= n || !IsAlnum(p[i - 1]) || !ContinuesToken(p[i + 1]) ||
              (IsDigit(p[i - 1]) && IsDigit(p[i + 1])))
            break;
          next = FromSeparator(i);
          if (next == 0) next = TerraformToken(i);
          break;
        case '~':
          next = AzureClientSecret(i);
          break;
        case 'J':
          next = Jwt(i);
          break;
        case 'b':
        case 'B':
          next = Bearer(i);
          break;
        case 'D':
          next = WordEnd(i);
          break;
        case 'd':
          next = FromLetter(i);
          if (next == 0) next = WordEnd(i);
          break;
        default:  // A E G L S
          next = FromLetter(i);
      }
      if (next > i) {
        // Resume at the end of the secret. That byte is looked at whatever the cursor's
        // filter says: after a secret every word starts afresh (floor_), as it will in the
        // output, where a "]" precedes it.
        i = next;
        if (i < n && kIsCandidate[static_cast<unsigned char>(p[i])]) continue;
      } else {
        ++i;
      }
      i = cursor.Next(i);
    }
    PgpassLine();
    CommandLineRules();
  }

  std::vector<Span>& spans() { return spans_; }

 private:
  // Records a secret unless it is empty or already redacted (idempotence).
  size_t Add(size_t begin, size_t end) {
    if (end <= begin) return 0;
    // A secret that starts with a PEM header is the block, whichever rule took its first word
    // ("Bearer -----BEGIN …", "Authorization: x -----BEGIN …"): scanning resumes after the span,
    // so a span ending inside the block would leave the key itself unread.
    if (StartsWith(s_, begin, "-----BEGIN")) end = std::max(end, PemEnd(begin));
    if (StartsWith(s_, begin, kRedacted)) return begin + kRedacted.size();
    if (begin > 0 && s_[begin - 1] == '[' && StartsWith(s_, begin, kRedacted.substr(1))) return begin + kRedacted.size() - 1;
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

  // Whether a word starts at `i`: the line's start, after a found secret, or after a byte that
  // separates words (space, quote, bracket, '=' ...), not inside a token.
  bool AtWordStart(size_t i) const { return i <= floor_ || !ContinuesToken(s_[i - 1]); }

  // ---- key/value ---------------------------------------------------------------------------

  // `key=value`, `key: value`, `"key": "value"`, `\"key\": \"value\"`, `'key': 'value'`.
  size_t KeyValue(size_t sep) {
    // The key, backwards from the separator over spaces, closing quotes and escapes.
    size_t e = sep;
    // Aligned columns (a Terraform plan, a config table) put many spaces before the separator.
    for (int k = 0; k < 64 && e > floor_ && IsSpace(s_[e - 1]); ++k) --e;
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
    const KeyKind kind = ClassifyKey(s_.substr(b, e - b), s_[sep]);
    if (kind == KeyKind::kNone) return 0;
    return Value(sep + 1, kind);
  }

  // The value that starts at `v` (after the separator).
  size_t Value(size_t v, KeyKind kind) {
    const size_t n = s_.size();
    const size_t after_sep = v;
    while (v < n && IsSpace(s_[v])) ++v;
    if (v >= n) return 0;
    if (s_[v] == '=' || s_[v] == ':') return 0;  // "==", ":=", "::": not an assignment of a value
    if (StartsWith(s_, v, kRedacted)) return v + kRedacted.size();
    // After a space (key= x, or a flag whose separator is the space: --hf-token x), the next key
    // may stand where a value would: "--hf-token api_key: x" is two secrets, not one.
    const bool after_space = v > after_sep || (after_sep > 0 && IsSpace(s_[after_sep - 1]));
    if (after_space && NextKeyAt(v)) return 0;
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
      const size_t found = spans_.size();
      const size_t r = Secret(begin, end, kind, /*quoted=*/true);
      if (r == 0) return 0;
      // A value that starts with a marker ('[REDACTED]…') adds nothing: what follows the marker
      // inside the quotes is scanned like any text (skipping to the closing quote would skip a
      // secret there, or the rest of a line whose quote never closes).
      return spans_.size() > found ? std::max(r, end) : r;
    }
    if (s_[v] == '{' || s_[v] == '[' || s_[v] == '(') {
      // A structured value (credentials={...}, auth=('user', 'pw')): up to the matching bracket.
      int depth = 0;
      size_t end = v;
      for (; end < n; ++end) {
        if (s_[end] == '{' || s_[end] == '[' || s_[end] == '(') ++depth;
        if (s_[end] == '}' || s_[end] == ']' || s_[end] == ')') {
          if (--depth == 0) {
            ++end;
            break;
          }
        }
      }
      return Add(v, end);
    }
    size_t end = v;
    if (StartsWith(s_, v, "-----BEGIN")) return PemValue(v);
    // Placeholders whose closing byte would end an unquoted value: <your key>, ${VAR}. A shell
    // default (${DB_PASSWORD:-hunter2}) is a value like any other; an error message
    // (${DB_PASSWORD:?must be set}) is not.
    if (s_[v] == '<') {
      const size_t close = s_.find('>', v);
      if (close != std::string_view::npos && close - v < 128) return Secret(v, close + 1, kind, /*quoted=*/false);
    }
    if (StartsWith(s_, v, "${")) {
      const size_t close = s_.find('}', v);
      size_t op = v + 2;
      while (close != std::string_view::npos && op < close && IsWord(s_[op])) ++op;
      // Only a name then '}' or an operator is an expansion. Anything else ("${OPE\"api…") is a
      // value like any other: its '}' may lie inside a secret found later, and the second pass,
      // finding none, must see the same value (idempotence).
      const bool expansion =
          close != std::string_view::npos && close - v < 256 && op > v + 2 &&
          (op == close || std::string_view(":-=?+").find(s_[op]) != std::string_view::npos);
      if (expansion) {
        if (op < close && s_[op] == ':') ++op;
        if (op < close && (s_[op] == '-' || s_[op] == '=')) return Secret(op + 1, close, kind, /*quoted=*/false);
        // ${VAR:?message}: the message is not a value, but it is scanned like any text (from
        // after the operator, so "VAR:" is not read as a key).
        return op + (op < close ? 1 : 0);
      }
    }
    if (kind == KeyKind::kCookie) {
      end = n;  // every cookie of the header, not just the first
    } else {
      while (end < n && !EndsValue(s_[end])) ++end;
    }
    return Secret(v, end, kind, /*quoted=*/false);
  }

  // After "key= " (a space, then something): whether that something is the next key or flag
  // of the line rather than this key's value — "password= --hf-token x", "secret= 'api_key':
  // 'x'", "PASS= PGPASSWORD=x". Taken as this key's value it would be redacted as a word and
  // the rule that starts at it (and would redact what follows) would never run. Only a key
  // that names a secret itself counts: swallowing any other word hides it, it leaks nothing.
  bool NextKeyAt(size_t v) const {
    const size_t n = s_.size();
    if (s_[v] == '-' && v + 1 < n && (s_[v + 1] == '-' || IsAlpha(s_[v + 1])) && !StartsWith(s_, v, "-----")) return true;
    size_t b = v, e;
    if (IsQuote(s_[v])) {
      b = v + 1;
      e = b;
      while (e < n && s_[e] != s_[v]) ++e;
      if (e >= n) return false;
      const size_t sep = e + 1;
      return sep < n && (s_[sep] == ':' || s_[sep] == '=') && e - b <= kMaxKeyBytes &&
             ClassifyKey(s_.substr(b, e - b), s_[sep]) != KeyKind::kNone;
    }
    e = b;
    while (e < n && e - b <= kMaxKeyBytes && IsKeyChar(s_[e])) ++e;
    return e > b && e < n && (s_[e] == ':' || s_[e] == '=') && ClassifyKey(s_.substr(b, e - b), s_[e]) != KeyKind::kNone;
  }

  // The secret in value [b, e), by the kind of its key. Returns where scanning resumes, or 0.
  // A value judged not a secret returns 0, never its end: scanning goes on inside it, so a
  // token the value holds ("user": "bob ghp_...") is still found.
  size_t Secret(size_t b, size_t e, KeyKind kind, bool quoted) {
    const std::string_view v = s_.substr(b, e - b);
    if (NotASecret(v)) return 0;
    switch (kind) {
      case KeyKind::kToken:
        if (std::all_of(v.begin(), v.end(), IsDigit)) return 0;
        break;
      case KeyKind::kAuthorization: {
        // "Authorization: Bearer abc": keep the scheme, redact the credential after it. An
        // unquoted value stopped at the space after the scheme word: look past it.
        const size_t c = SkipScheme(b, quoted ? e : s_.size());
        if (c != b && !quoted && NextKeyAt(c)) return 0;  // "Authorization: x --hf-token ..."
        if (c != b) return Add(c, quoted ? e : ValueEndAfterScheme(c));
        break;
      }
      case KeyKind::kUserPass:
      case KeyKind::kAuth: {
        const size_t colon = v.find(':');
        if (colon != std::string_view::npos) {
          if (DigitsAndColons(v)) return 0;
          return Add(b + colon + 1, e);
        }
        if (kind == KeyKind::kUserPass) return 0;
        // A lone "auth" is a credential only when it looks like one.
        if (v.size() < 12 || !std::all_of(v.begin(), v.end(), [](char c) { return IsBase64(c) || c == '='; })) return 0;
        break;
      }
      case KeyKind::kPwd:
      case KeyKind::kSecret:
        if (LooksLikePath(v)) return 0;
        break;
      case KeyKind::kKeyIfRandom:
        if (v.size() < 16 || !LooksRandom(v)) return 0;
        break;
      default:
        break;
    }
    return Add(b, e);
  }

  // The end of a PEM block that starts at `v`: after its footer's closing dashes, or the line's
  // end when it has none (the rest of the key is on the lines after).
  size_t PemEnd(size_t v) const {
    const size_t n = s_.size();
    const size_t end = s_.find("-----END", v);
    if (end == std::string_view::npos) return n;
    const size_t footer = s_.find("-----", end + 8);
    return footer == std::string_view::npos ? n : footer + 5;
  }
  // A PEM block as a value (DEPLOY_KEY=-----BEGIN ... KEY-----\n...), from `v`: through its footer.
  size_t PemValue(size_t v) { return Add(v, PemEnd(v)); }

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
  size_t ValueEndAfterScheme(size_t c) const {
    size_t end = c;
    while (end < s_.size() && !EndsValue(s_[end])) ++end;
    return end;
  }

  // ---- URLs --------------------------------------------------------------------------------

  // After "://" at `u`: a webhook whose path is the credential, or user:password@host.
  size_t Url(size_t u) {
    const size_t n = s_.size();
    const size_t limit = std::min(n, u + 2048);
    size_t end = u;
    while (end < limit && !EndsUrl(s_[end])) ++end;
    if (const size_t w = Webhook(u, end)) return w;
    // The userinfo's colon comes before any '/', '?', '#' (the user name holds none of them).
    size_t colon = 0;
    for (size_t k = u; k < end; ++k) {
      const char c = s_[k];
      if (c == ':') {
        colon = k;
        break;
      }
      if (c == '/' || c == '?' || c == '#' || c == '@') return 0;
    }
    if (colon == 0) return 0;
    // The password ends at the '@' before the host. A raw '@', '/' or '#' may be inside the
    // password (user:p@ss/w0rd#1@host), so it is the LAST '@' that a host[:port] follows (then
    // the URL's end or '/', '?', '#'). Where the path holds an '@' too (repo.git@v1.0) more is
    // hidden than the password: over-eager rather than leaking half of it.
    size_t at = std::string_view::npos;
    for (size_t k = colon + 1; k < end; ++k) {
      if (s_[k] == '@' && HostFollows(k + 1, end)) at = k;
    }
    if (at == std::string_view::npos) return 0;
    // host:8080/path?mail=a@b: the "password" is a port followed by a path, not userinfo.
    size_t d = colon + 1;
    while (d < at && IsDigit(s_[d])) ++d;
    if (d > colon + 1 && d < at && (s_[d] == '/' || s_[d] == '?' || s_[d] == '#')) return 0;
    if (NotASecret(s_.substr(colon + 1, at - colon - 1))) return at;  // guest:**@, ${PASS}
    return Add(colon + 1, at);
  }

  // Whether [h, end) starts with a host (name, IPv4 or [IPv6]) and an optional :port that no
  // '@' follows: the end, a path or query, a second host (pg-0:5432,pg-1:5432), a sentence's
  // '.'. An empty host before a path is a Unix socket (postgresql://u:pw@/db?host=/run/pg).
  bool HostFollows(size_t h, size_t end) const {
    size_t k = h;
    if (k < end && s_[k] == '[') {
      // An IPv6 literal: hex digits, ':' and '.', then an optional %zone. Anything else is no
      // host — and must not become one once a secret inside it was replaced by "[REDACTED]",
      // whose ']' would close the bracket (redaction is idempotent).
      ++k;
      while (k < end && (IsHex(s_[k]) || s_[k] == ':' || s_[k] == '.')) ++k;
      if (k < end && s_[k] == '%') {
        ++k;
        while (k < end && (IsAlnum(s_[k]) || s_[k] == '-' || s_[k] == '_' || s_[k] == '.')) ++k;
      }
      if (k >= end || s_[k] != ']') return false;
      ++k;
    } else {
      // A marker is read as host bytes: the token it replaced (a JWT, a key) was made of them,
      // and the second pass must see the host the first one saw.
      while (k < end) {
        if (IsAlnum(s_[k]) || s_[k] == '.' || s_[k] == '-' || s_[k] == '_') {
          ++k;
        } else if (StartsWith(s_, k, kRedacted)) {
          k += kRedacted.size();
        } else {
          break;
        }
      }
      if (k == h) return k < end && s_[k] == '/';
    }
    if (k < end && s_[k] == ':') {
      const size_t p = ++k;
      while (k < end && IsDigit(s_[k])) ++k;
      if (k == p) return false;
    }
    return k == end || s_[k] != '@';
  }

  // A webhook URL (host at `u`, URL end `end`): everything after its path prefix.
  size_t Webhook(size_t u, size_t end) {
    size_t host_end = u;
    while (host_end < end && s_[host_end] != '/' && s_[host_end] != ':' && s_[host_end] != '?') ++host_end;
    const std::string_view host = s_.substr(u, host_end - u);
    size_t path = host_end;
    if (path < end && s_[path] == ':') {  // a port
      while (path < end && s_[path] != '/') ++path;
    }
    for (const rf::WebhookUrl& w : rf::kWebhookUrls) {
      const bool host_ok = w.host[0] == '.' ? host.size() > w.host.size() && EndsWithLower(host, w.host)
                                            : EqualsLower(host, w.host);
      if (!host_ok || !StartsWith(s_, path, w.path)) continue;
      const size_t b = path + w.path.size();
      size_t e = b;
      while (e < end && s_[e] != '?' && s_[e] != '#') ++e;
      if (w.one_segment) {
        e = b;
        while (e < end && s_[e] != '/' && s_[e] != '?') ++e;
      }
      if (e - b < 8) return 0;
      return Add(b, e);
    }
    return 0;
  }

  // ---- command-line flags ------------------------------------------------------------------

  // A '-' at a word start: a long flag (--password x, -password x), a tool's short flag
  // (-pSECRET, -u user:pass), or a prefix token that starts with '-' (none today).
  size_t Dash(size_t i) {
    const size_t n = s_.size();
    if (StartsWith(s_, i, "--")) return Flag(i + 2);
    if (i + 1 >= n || !IsAlpha(s_[i + 1])) return 0;
    // -password x, -Token x (Go's flag package, Java tools): a name of 3 or more.
    if (i + 3 < n && IsKeyChar(s_[i + 2]) && IsKeyChar(s_[i + 3])) {
      if (const size_t r = Flag(i + 1)) return r;
      // openssl -passin pass:SECRET / -passout / -pass.
      if (const size_t r = OpensslPass(i + 1)) return r;
    }
    return ShortFlag(i);  // also -pSECRET, which reads like a long name
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
    const KeyKind kind = ClassifyKey(s_.substr(k, e - k), ' ');
    if (kind == KeyKind::kNone) return 0;
    if (v >= n || s_[v] == '-' || (IsQuote(s_[v]) && v + 1 < n && s_[v + 1] == '-')) return e;  // next flag: no value
    // "Using --password via the CLI is insecure" (docker's warning): prose, not a value.
    if (ProseWord(s_.substr(v, SpanEnd(v) - v))) return e;
    return Value(v, kind);
  }

  size_t OpensslPass(size_t k) {
    if (!(StartsWith(s_, k, "passin ") || StartsWith(s_, k, "passout ") || StartsWith(s_, k, "pass "))) return 0;
    size_t v = s_.find(' ', k) + 1;
    if (!StartsWith(s_, v, "pass:")) return 0;
    v += 5;
    size_t e = v;
    while (e < s_.size() && !IsSpace(s_[e]) && !IsQuote(s_[e])) ++e;
    return Add(v, e);
  }

  // -X at a word start, where X is a tool's password flag and the tool is named before it on
  // the line (redact_formats.h, kToolFlags).
  size_t ShortFlag(size_t i) {
    const size_t n = s_.size();
    const char letter = s_[i + 1];
    if (!kIsToolFlagLetter[static_cast<unsigned char>(letter)]) return 0;
    const bool attached = i + 2 < n && !IsSpace(s_[i + 2]) && !IsQuote(s_[i + 2]) && s_[i + 2] != ',';
    FindTools();
    for (size_t t = 0; t < std::size(rf::kToolFlags); ++t) {
      const rf::ToolFlag& tf = rf::kToolFlags[t];
      if (tf.flag != letter || tool_at_[t] >= i) continue;
      if (tf.after_login && login_after_[t] >= i) continue;
      size_t v;
      if (attached) {
        if (!tf.attached) continue;
        v = i + 2;
      } else {
        if (!tf.separate) continue;
        v = i + 2;
        // "-p SECRET", or an argv list: '-p', 'SECRET'.
        if (v < n && IsQuote(s_[v])) ++v;
        if (v < n && s_[v] == ',') ++v;
        while (v < n && IsSpace(s_[v])) ++v;
        if (v >= n || s_[v] == '-' || NextKeyAt(v)) return 0;
      }
      size_t b = v, e;
      if (v < n && IsQuote(s_[v])) {
        const char quote = s_[v];
        b = v + 1;
        e = b;
        while (e < n && s_[e] != quote) ++e;
      } else {
        e = v;
        const bool comma_inside = tf.value == rf::FlagValue::kAfterComma;
        // Shell words end at a separator, a pipe or a redirection ("-pX>out.txt").
        while (e < n && !IsSpace(s_[e]) && !IsQuote(s_[e]) && (s_[e] != ',' || comma_inside) && s_[e] != ';' &&
               s_[e] != '&' && s_[e] != '|' && s_[e] != ')' && s_[e] != ']' && s_[e] != '<' && s_[e] != '>')
          ++e;
      }
      const std::string_view value = s_.substr(b, e - b);
      if (NotASecret(value)) return 0;
      if (tf.value != rf::FlagValue::kWhole) {
        const char split = tf.value == rf::FlagValue::kAfterColon ? ':' : tf.value == rf::FlagValue::kAfterPercent ? '%' : ',';
        const size_t sep = value.find(split);
        if (sep == std::string_view::npos || DigitsAndColons(value)) return 0;
        // Scanning resumes after the secret, so the part before the separator (the user) is
        // never looked at again: when it holds a secret of its own (curl -u "… HF_TOKEN=hf_…:pw"),
        // the whole value goes.
        if (!nested_) {
          Scanner user(value.substr(0, sep), /*nested=*/true);
          user.Run();
          if (!user.spans().empty()) return Add(b, e);
        }
        return Add(b + sep + 1, e);
      }
      return Add(b, e);
    }
    // "-u USER -p PASSWORD" (a launcher passing registry or database credentials on): -p after
    // a user flag is its password, unless the value is a port or a MySQL tool is named (its
    // "-p DB" prompts for the password and DB is the database).
    if (letter == 'p' && !attached && user_flag_at_ < i && !mysql_named_) {
      size_t v = i + 2;
      while (v < n && IsSpace(s_[v])) ++v;
      if (v >= n || s_[v] == '-' || IsQuote(s_[v]) || NextKeyAt(v)) return 0;
      size_t e = v;
      while (e < n && !IsSpace(s_[e]) && !IsQuote(s_[e]) && std::string_view(",;&|)]<>").find(s_[e]) == std::string_view::npos)
        ++e;
      const std::string_view value = s_.substr(v, e - v);
      if (DigitsAndColons(value) || NotASecret(value)) return 0;
      return Add(v, e);
    }
    return 0;
  }

  // The words of the line as a shell would split it (at spaces, quotes, and the punctuation
  // of a printed argv list or a command list), with the start of each word's basename.
  static bool SplitsWords(char c) {
    return IsSpace(c) || IsQuote(c) || c == ',' || c == '(' || c == ')' || c == ';' || c == '&' || c == '|' ||
           c == '`';
  }
  template <typename F>
  void ForEachWord(F&& f) const {
    const size_t n = s_.size();
    size_t k = 0;
    while (k < n) {
      while (k < n && SplitsWords(s_[k])) ++k;
      size_t b = k;
      while (k < n && !SplitsWords(s_[k])) ++k;
      if (k == b) continue;
      size_t base = b;
      for (size_t j = b; j < k; ++j) {
        if (s_[j] == '/') base = j + 1;
      }
      if (!f(b, base, k)) return;
    }
  }

  // Where each tool of kToolFlags is first named on the line, and the first "login" word after
  // it: found once per line, the first time a short flag needs them (linear in the line).
  void FindTools() {
    if (tools_found_) return;
    tools_found_ = true;
    tool_at_.fill(std::string_view::npos);
    login_after_.fill(std::string_view::npos);
    user_flag_at_ = std::string_view::npos;
    ForEachWord([&](size_t b, size_t base, size_t end) {
      const std::string_view whole = s_.substr(b, end - b);
      if (user_flag_at_ == std::string_view::npos && !whole.empty() && whole[0] == '-' &&
          (whole == "-u" || whole == "-U" || whole == "--user" || whole == "--username" || EndsWithLower(whole, "-user") ||
           EndsWithLower(whole, "-username"))) {
        user_flag_at_ = b;
      }
      const std::string_view word = s_.substr(base, end - base);
      if (StartsWith(word, 0, "mysql") || StartsWith(word, 0, "mariadb")) mysql_named_ = true;
      if (word == "login") {
        for (size_t t = 0; t < tool_at_.size(); ++t) {
          if (tool_at_[t] < base && login_after_[t] == std::string_view::npos) login_after_[t] = base;
        }
        return true;
      }
      if (word.size() > 13) return true;
      for (size_t t = 0; t < std::size(rf::kToolFlags); ++t) {
        if (tool_at_[t] == std::string_view::npos && word == rf::kToolFlags[t].tool) tool_at_[t] = base;
      }
      return true;
    });
  }

  // After the scan: secrets given by position (wandb login KEY, aws configure set KEY VALUE,
  // sqlplus user/password@db). Only lines that read like a command — a shell trace ("+ cmd",
  // "$ cmd"), a line whose short flags already named a tool — are walked word by word.
  void CommandLineRules() {
    const size_t n = s_.size();
    size_t k0 = 0;
    while (k0 < n && IsSpace(s_[k0])) ++k0;
    bool command = tools_found_ || StartsWith(s_, k0, "$ ") || StartsWith(s_, k0, "# ") || StartsWith(s_, k0, "> ");
    if (!command && k0 < n && s_[k0] == '+') {
      size_t k = k0;
      while (k < n && s_[k] == '+') ++k;
      command = k < n && s_[k] == ' ';
    }
    if (!command) return;
    // Words as (begin, end) pairs, bounded: a command line is not thousands of words long.
    std::vector<std::pair<size_t, size_t>> words;
    ForEachWord([&](size_t b, size_t, size_t e) {
      words.push_back({b, e});
      return words.size() < 4096;
    });
    auto word = [&](size_t k) { return s_.substr(words[k].first, words[k].second - words[k].first); };
    // The nth word after `k` that is not a flag (nor the value of --host / -method).
    auto plain_after = [&](size_t k, int nth) -> size_t {
      for (size_t j = k + 1; j < words.size(); ++j) {
        const std::string_view w = word(j);
        if (w.empty()) continue;
        if (w[0] == '-') {
          if (EqualsLower(w, "--host") || EqualsLower(w, "-method") || EqualsLower(w, "--cloud")) ++j;
          continue;
        }
        if (--nth == 0) return j;
      }
      return words.size();
    };
    for (size_t k = 0; k < words.size(); ++k) {
      const std::string_view w = word(k);
      const std::string_view base = Basename(w);
      for (const rf::PositionalSecret& ps : rf::kPositionalSecrets) {
        if (base != ps.tool) continue;
        // The subcommand or flag within the next few words (ngrok config add-authtoken).
        for (size_t j = k + 1; j < words.size() && j <= k + 3; ++j) {
          if (word(j) != ps.after) continue;
          const size_t v = plain_after(j, ps.nth);
          // A key looks like one (random, 8 or more with a digit): "wandb login failed" is prose;
          // a password given by position is taken as it is.
          if (v < words.size() && (ps.nth > 1 || LooksRandom(word(v)))) Add(words[v].first, words[v].second);
          break;
        }
      }
      if (w == "configure" && k + 3 < words.size() && word(k + 1) == "set") {
        const KeyKind kind = ClassifyKey(word(k + 2), ' ');
        if (kind == KeyKind::kSecret || kind == KeyKind::kToken) Add(words[k + 3].first, words[k + 3].second);
      }
      if ((base == "sqlplus" || base == "sqlldr" || base == "expdp" || base == "impdp") && k + 1 < words.size()) {
        // user/password@db, the first plain word.
        const size_t v = plain_after(k, 1);
        if (v < words.size()) {
          const std::string_view uw = word(v);
          const size_t slash = uw.find('/');
          if (slash != std::string_view::npos && slash > 0) {
            size_t end = uw.find('@', slash);
            if (end == std::string_view::npos) end = uw.size();
            Add(words[v].first + slash + 1, words[v].first + end);
          }
        }
      }
    }
  }
  static std::string_view Basename(std::string_view w) {
    const size_t slash = w.rfind('/');
    return slash == std::string_view::npos ? w : w.substr(slash + 1);
  }
  size_t SpanEnd(size_t b) const {
    size_t e = b;
    while (e < s_.size() && !IsSpace(s_[e]) && !IsQuote(s_[e])) ++e;
    return e;
  }

  // ---- token formats -----------------------------------------------------------------------

  // At a separator ('_', '-', '.') inside a word: the formats whose prefix has that separator
  // at this offset from the word's start.
  size_t FromSeparator(size_t i) {
    size_t w = i;
    while (w > floor_ && i - w <= kMaxSeparatorOffset && IsAlnum(s_[w - 1])) --w;
    if (w == i || i - w > kMaxSeparatorOffset || !AtWordStart(w)) return 0;
    return TryFormats(w, i - w);
  }

  // At a letter that starts a prefix without a separator (AKIA, LTAI, dapi, ...).
  size_t FromLetter(size_t i) {
    if (!AtWordStart(i)) return 0;
    if (s_[i] == 'L' && StartsWith(s_, i, "LS0tLS1CRUdJTi")) return Base64PrivateKey(i);
    if (s_[i] == 'A' && i > 0 && s_[i - 1] == '"' && StartsWith(s_, i, "AUTH\" \"")) return RedisAuth(i + 6);
    return TryFormats(i, 0);
  }

  // The formats whose prefix starts at `w` with its first separator at `sep_offset` (0: any).
  size_t TryFormats(size_t w, size_t sep_offset) {
    const auto first = static_cast<unsigned char>(s_[w]);
    if (first >= 128) return 0;
    const char second = w + 1 < s_.size() ? s_[w + 1] : '\0';
    for (uint8_t f : kFormatIndex.by_first[first]) {
      if (f == 0xff) break;
      const rf::TokenFormat& tf = rf::kTokenFormats[f];
      if (tf.prefix[1] != second || (sep_offset != 0 && kSeparatorOffsets[f] != sep_offset)) continue;
      if (!StartsWith(s_, w, tf.prefix)) continue;
      if (const size_t r = Body(w, tf)) return r;
    }
    return 0;
  }

  size_t Body(size_t w, const rf::TokenFormat& tf) {
    const size_t b = w + tf.prefix.size();
    const size_t cap = tf.max_body != 0 ? tf.max_body + 1u : 4096u;
    size_t e = b;
    const size_t limit = std::min(s_.size(), b + cap);
    while (e < limit && BodyChar(tf.body, s_[e])) ++e;
    // A trailing '.' or '-' ends the sentence or the word, not the token.
    while (e > b && (s_[e - 1] == '.' || s_[e - 1] == '-') && tf.body == rf::Body::kWordDot) --e;
    const size_t len = e - b;
    if (len < tf.min_body || (tf.max_body != 0 && len > tf.max_body)) return 0;
    if (e < s_.size() && IsAlnum(s_[e])) return 0;  // longer than the format: some other word
    if (tf.mixed) {
      bool ok = false;
      for (size_t k = b; k < e && !ok; ++k) ok = IsDigit(s_[k]) || IsUpper(s_[k]);
      if (!ok) return 0;
    }
    return Add(w, e);
  }

  // "bearer <credential>" in running text (a header without its name).
  size_t Bearer(size_t i) {
    if (!AtWordStart(i) || !StartsWithNoCase(s_, i, "bearer") || i + 6 >= s_.size() || !IsSpace(s_[i + 6])) return 0;
    size_t t = i + 6;
    while (t < s_.size() && IsSpace(s_[t])) ++t;
    if (t < s_.size() && NextKeyAt(t)) return 0;  // "bearer --hf-token x": the flag's, not a token
    const size_t e = RunEnd(t, IsTokenChar, 8192);
    if (e - t >= 8) return Add(t, e);
    return 0;
  }

  // header.payload.signature, both JSON parts base64url of '{"' → "eyJ". Found from its 'J'.
  size_t Jwt(size_t j) {
    if (j < floor_ + 2 || s_[j - 2] != 'e' || s_[j - 1] != 'y') return 0;
    const size_t i = j - 2;
    if (i > floor_ && IsWord(s_[i - 1])) return 0;
    // Every "eyJ" inside a base64url run already tried ends at the same place and fails the
    // same way: skipping them keeps a line of "-eyJ-eyJ..." linear, not quadratic.
    if (i < jwt_tried_until_) return 0;
    auto b64url = [](char c) { return IsAlnum(c) || c == '-' || c == '_'; };
    size_t e = RunEnd(i, b64url, 8192);
    jwt_tried_until_ = e;
    if (e >= s_.size() || s_[e] != '.') return CredentialJson(i);
    if (e - i < 10) return 0;
    if (!StartsWith(s_, e + 1, "eyJ")) return 0;
    const size_t p = e + 1;
    e = RunEnd(p, b64url, 8192);
    if (e - p < 10 || e >= s_.size() || s_[e] != '.') return 0;
    e = RunEnd(e + 1, b64url, 8192);
    return Add(i, e);
  }

  // A base64 JSON object that holds credentials ('{"auths": ...' of a Docker config, a service
  // account key): decoded far enough to see its keys.
  size_t CredentialJson(size_t i) {
    const size_t e = RunEnd(i, [](char c) { return IsBase64(c) || c == '=' || c == '-' || c == '_'; }, 1 << 20);
    if (e - i < 40) return 0;
    std::string json;
    DecodeBase64Prefix(s_.substr(i, e - i), 4096, json);
    for (std::string_view k : {"\"auth"sv, "\"password\""sv, "\"private_key\""sv, "\"secret"sv, "token\""sv}) {
      if (json.find(k) != std::string::npos) return Add(i, e);
    }
    return 0;
  }

  // Azure AD client secret: 3 characters, a digit, "Q~", then 31–34 (Microsoft's format since
  // 2022). Found from its '~'.
  size_t AzureClientSecret(size_t t) {
    auto cls = [](char c) { return IsWord(c) || c == '-' || c == '.' || c == '~'; };
    if (t < floor_ + 5 || s_[t - 1] != 'Q' || !IsDigit(s_[t - 2])) return 0;
    const size_t b = t - 5;
    for (size_t k = b; k < t - 2; ++k) {
      if (!cls(s_[k])) return 0;
    }
    if (b > floor_ && cls(s_[b - 1])) return 0;
    size_t e = t + 1;
    while (e < s_.size() && e - t <= 35 && cls(s_[e])) ++e;
    if (e - t - 1 < 31 || e - t - 1 > 34) return 0;
    return Add(b, e);
  }

  // Where a word of exactly `len` bytes of `pred` that ends at `i` starts, or npos: the part
  // before the infix of a format found from its infix (Mailchimp's "-us", Terraform's ".atlasv1.").
  size_t WordBefore(size_t i, size_t len, bool (*pred)(char)) const {
    if (i < floor_ + len) return std::string_view::npos;
    const size_t b = i - len;
    for (size_t k = b; k < i; ++k) {
      if (!pred(s_[k])) return std::string_view::npos;
    }
    return AtWordStart(b) ? b : std::string_view::npos;
  }

  // Mailchimp: 32 hex, "-us", a data-centre number. Found from its '-'.
  size_t Mailchimp(size_t i) {
    if (!StartsWith(s_, i, "-us")) return 0;
    const size_t b = WordBefore(i, 32, IsHex);
    if (b == std::string_view::npos) return 0;
    size_t e = i + 3;
    while (e < s_.size() && e - i < 6 && IsDigit(s_[e])) ++e;
    if (e == i + 3 || (e < s_.size() && IsAlnum(s_[e]))) return 0;
    return Add(b, e);
  }

  // Terraform Cloud: 14 characters, ".atlasv1.", 60 or more. Found from its first '.'.
  size_t TerraformToken(size_t i) {
    if (!StartsWith(s_, i, ".atlasv1.")) return 0;
    const size_t b = WordBefore(i, 14, IsAlnum);
    if (b == std::string_view::npos) return 0;
    size_t e = i + 9;
    while (e < s_.size() && (IsWord(s_[e]) || s_[e] == '-')) ++e;
    if (e - (i + 9) < 60) return 0;
    return Add(b, e);
  }

  // A Telegram bot token outside a URL: 8–10 digits, ':', 35 characters starting "AA".
  size_t TelegramBotToken(size_t c) {
    size_t b = c;
    while (b > floor_ && c - b < 11 && IsDigit(s_[b - 1])) --b;
    // At a word start, or after "bot" (a URL's path quoted without its host).
    const bool after_bot = b >= floor_ + 3 && StartsWith(s_, b - 3, "bot");
    if (c - b < 8 || c - b > 10 || !(AtWordStart(b) || after_bot) || !StartsWith(s_, c + 1, "AA")) return 0;
    size_t e = c + 1;
    while (e < s_.size() && (IsWord(s_[e]) || s_[e] == '-')) ++e;
    if (e - c - 1 != 35) return 0;
    return Add(b, e);
  }

  // Redis MONITOR output: "AUTH" "password" or "AUTH" "user" "password". Both arguments are
  // redacted (the user name costs little to hide, and nothing inside them goes unscanned).
  size_t RedisAuth(size_t q) {
    size_t first = 0, last = 0;
    for (int arg = 0; arg < 2 && q < s_.size() && s_[q] == '"'; ++arg) {
      const size_t b = q + 1;
      size_t e = b;
      while (e < s_.size() && s_[e] != '"') e += s_[e] == '\\' ? 2 : 1;
      e = std::min(e, s_.size());
      if (arg == 0) first = b;
      last = e;
      q = e + 1;
      if (q < s_.size() && s_[q] == ' ') ++q;
    }
    return last > first ? Add(first, last) : 0;
  }

  // At the last letter of a word ("PASSWORD", "password", "IDENTIFIED"): a password given to
  // SQL or quoted in prose — PASSWORD 'x', password "x", IDENTIFIED BY 'x'.
  size_t WordEnd(size_t i) {
    const size_t n = s_.size();
    if (i + 2 >= n || s_[i + 1] != ' ') return 0;
    size_t w = i;
    while (w > floor_ && i - w < 12 && IsAlpha(s_[w - 1])) --w;
    if (w > floor_ && IsWord(s_[w - 1])) return 0;
    const std::string_view word = s_.substr(w, i + 1 - w);
    size_t q;
    if (EqualsLower(word, "password") || EqualsLower(word, "passwd")) {
      q = i + 2;
      if (q < n && NextKeyAt(q)) return 0;
      // A .netrc line (machine H login U password P, or "password P" on a line of its own),
      // also one a command writes (echo "machine H ..." > ~/.netrc): the next word.
      if (q < n && !IsQuote(s_[q]) && s_[q] != '=' && s_[q] != ':' && NetrcBefore(w)) {
        // A PEM block as the value: through its footer (Value), not just its first word.
        return StartsWith(s_, q, "-----BEGIN") ? Value(q, KeyKind::kSecret) : Add(q, SpanEnd(q));
      }
    } else if (EqualsLower(word, "identified") && StartsWithNoCase(s_, i + 1, " by ")) {
      q = i + 5;
    } else {
      return 0;
    }
    if (q >= n || !IsQuote(s_[q]) || NextKeyAt(q)) return 0;
    const size_t b = q + 1;
    size_t e = b;
    while (e < n && s_[e] != s_[q]) ++e;
    if (NotASecret(s_.substr(b, e - b))) return 0;
    return Add(b, e);
  }

  // Whether the text before `w` makes a .netrc line: "machine " in it, or nothing but a .netrc
  // keyword's indentation ("password P" on a line of its own).
  bool NetrcBefore(size_t w) const {
    size_t k = 0;
    while (k < w && IsSpace(s_[k])) ++k;
    return k == w || memmem(s_.data(), w, "machine ", 8) != nullptr;
  }

  // A ~/.pgpass line, hostname:port:database:username:password (no spaces; the port a number
  // or '*'): the fifth field.
  bool PgpassLine() {
    if (s_.size() < 9 || s_.size() > 1024 || memchr(s_.data(), ' ', s_.size()) != nullptr) return false;
    size_t colons[4];
    size_t found = 0;
    for (size_t k = 0; k < s_.size(); ++k) {
      if (s_[k] != ':' || (k > 0 && s_[k - 1] == '\\')) continue;
      if (found == 4) return false;
      colons[found++] = k;
    }
    if (found != 4 || colons[0] == 0) return false;
    const std::string_view port = s_.substr(colons[0] + 1, colons[1] - colons[0] - 1);
    if (port.empty() || !(port == "*" || std::all_of(port.begin(), port.end(), IsDigit))) return false;
    if (colons[3] + 1 >= s_.size()) return false;
    Add(colons[3] + 1, s_.size());
    return true;
  }

  // A PEM block base64-encoded once more (kubeconfig client-key-data, Kubernetes secrets):
  // "LS0tLS1CRUdJTi" is "-----BEGIN". Redacted when the header it encodes is a private key.
  size_t Base64PrivateKey(size_t i) {
    const size_t e = RunEnd(i, [](char c) { return IsBase64(c) || c == '='; }, 1 << 20);
    std::string header;
    DecodeBase64Prefix(s_.substr(i, e - i), 64, header);
    if (header.find("PRIVATE KEY") == std::string::npos) return e;  // a certificate: public
    return Add(i, e);
  }

  // -----BEGIN ... PRIVATE KEY----- on one line (a key inside JSON with escaped newlines):
  // everything up to -----END. The body of a multi-line block is WholeLineKeyMaterial's.
  size_t PemBlock(size_t i) {
    const size_t n = s_.size();
    const size_t header_end = s_.find("-----", i + 10);
    if (header_end == std::string_view::npos || header_end - i > 96) return 0;
    const std::string_view header = s_.substr(i, header_end - i);
    // A real header is "-----BEGIN <LABEL>-----", the label upper-case words: anything else
    // would let a "header" run over other text (and over the secrets in it) unredacted.
    for (char c : header.substr(10)) {
      if (!(IsUpper(c) || IsDigit(c) || c == ' ')) return 0;
    }
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

  std::string_view s_;
  bool nested_ = false;
  std::vector<Span> spans_;
  // The end of the secrets found so far. Nothing before it is looked back at: in the output
  // those bytes are "[REDACTED]", so a key or word start that reached into them would be seen
  // differently the second time, and redaction must be idempotent (a word touching a secret
  // counts as starting after it, as it will in the output).
  size_t floor_ = 0;
  size_t jwt_tried_until_ = 0;  // the end of the base64url run the last JWT attempt scanned
  bool tools_found_ = false;
  bool mysql_named_ = false;
  size_t user_flag_at_ = std::string_view::npos;
  // Filled by FindTools before first use; left uninitialised so a line that never needs them
  // does not pay for clearing them.
  std::array<size_t, std::size(rf::kToolFlags)> tool_at_;
  std::array<size_t, std::size(rf::kToolFlags)> login_after_;
};

bool IsDelimiter(char c) {
  return c == ',' || c == ';' || c == '&' || c == '"' || c == '\'' || c == ']' || c == '}' || c == ')';
}

}  // namespace

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
    if (!merged.empty() && s.begin <= merged.back().end) {
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

std::string RedactedExcerpt(std::string_view line, size_t max) {
  std::string text(line);
  RedactSecrets(text);
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  // Never inside a marker: "[REDAC" would read as a damaged line.
  const size_t marker = text.rfind('[', cut);
  if (marker != std::string::npos && cut - marker < kRedacted.size() &&
      std::string_view(text).substr(marker, kRedacted.size()) == kRedacted) {
    cut = marker;
  }
  text.resize(cut);
  return text;
}

size_t OpenTailStart(std::string_view text) {
  size_t b = text.size();
  while (b > 0 && !IsSpace(text[b - 1]) && text.size() - b <= kMaxOpenWordBytes) --b;
  if (text.size() - b <= kMaxOpenWordBytes) return b;
  // One long word: cut after its last value delimiter within the window.
  for (size_t k = text.size(); k > text.size() - kMaxOpenWordBytes; --k) {
    if (IsDelimiter(text[k - 1])) return k;
  }
  return text.size() - kMaxOpenWordBytes;
}

}  // namespace ithbat::collect::joblog
