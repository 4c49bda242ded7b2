#pragma once
// Secrets out of captured text, before any raw line is stored or served (docs/joblog.md,
// "Redaction"). What is recognised: bearer/basic Authorization headers, key=value and
// key: value pairs whose key names a secret (password, passwd, secret, token, api_key,
// apikey, access_key, private_key, credentials, ...), URLs with user:password@, AWS access
// key ids (AKIA/ASIA + 16) and secret keys next to their key names, GitHub (ghp_, gho_, ghs_,
// github_pat_), Hugging Face (hf_), OpenAI/Anthropic-style (sk-...), Slack (xox?-), Google API
// keys (AIza...), JWTs (eyJ...\.eyJ...\..*), PEM private-key blocks. Each secret is replaced by
// "[REDACTED]" and the key name is kept, so the line still says what was there.
// Deliberately over-eager: a false positive hides a harmless value; a false negative leaks.
#include <cstddef>
#include <string>
#include <string_view>

namespace ithbat::collect::joblog {

inline constexpr std::string_view kRedacted = "[REDACTED]";

// Redacts `line` in place; returns how many secrets were replaced.
size_t RedactSecrets(std::string& line);

// Where to cut `text` to at most `max` bytes so that redaction still works on what is kept:
// never inside a UTF-8 sequence, and never inside a run of token characters [A-Za-z0-9_-]
// shorter than 64 bytes (a token cut short, "hf_abc" of "hf_abcdef...", would no longer be
// recognised and would leak in part). A run of 64 bytes or more before the cut is kept: it is
// longer than the minimum body of every token rule, so the kept part is still recognised.
size_t SecretSafeCut(std::string_view text, size_t max);

}  // namespace ithbat::collect::joblog
