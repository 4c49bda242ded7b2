#pragma once
// Secrets out of captured text, before any raw line is stored or served (docs/joblog.md,
// "Redaction"). What is recognised:
//   * key=value, key: value, "key": "value", --key value, -key value, argv lists, where the
//     key names a secret by its last word (password, passwd, passphrase, secret, token,
//     api_key, access_key, private_key, credentials, auth, cookie, ...) or ends with one
//     (PGPASSWORD, clientsecret); Authorization headers keep their scheme word;
//   * URLs with user:password@ (the password may hold '@', '/', '#'), webhook URLs whose path
//     is the credential (Slack, Discord, Teams, Telegram, Zapier, ...);
//   * credentials that carry their own prefix (redact_formats.h: GitHub, GitLab, Hugging Face,
//     OpenAI, Anthropic, AWS, Google, Slack, Stripe, ~120 formats), JWTs, Azure AD client
//     secrets, PEM private-key blocks (also base64-wrapped, as in a kubeconfig);
//   * passwords given to command-line tools that name them by a short flag (mysql -pX,
//     sshpass -p X, docker login -p X, curl -u user:X, redis-cli -a X, ...), by position
//     (wandb login KEY) or in .netrc lines.
// Each secret is replaced by "[REDACTED]" and the key name is kept, so the line still says what
// was there. Values that cannot be secrets are kept: None/null/true/false, masks (***),
// placeholders (<...>, ${VAR}), paths given to a key word. Deliberately over-eager otherwise: a
// false positive hides a harmless value; a false negative leaks.
#include <cstddef>
#include <string>
#include <string_view>

namespace ithbat::collect::joblog {

inline constexpr std::string_view kRedacted = "[REDACTED]";

// Redacts `line` in place; returns how many secrets were replaced. Idempotent.
size_t RedactSecrets(std::string& line);

// An excerpt of `line` of at most `max` bytes, redacted before it is cut: the whole line is
// redacted first (a secret cut in half would no longer be recognised), then cut never inside a
// UTF-8 sequence or a "[REDACTED]" marker.
std::string RedactedExcerpt(std::string_view line, size_t max);

// For text that was cut short (a line over the assembler's bound, bytes lost in the capture):
// where its unfinished last word starts. What follows is dropped by the caller, because
// redaction cannot judge a word it sees only part of ("postgres://u:pa" of a URL password,
// "glpat-ab" of a token). The word is what follows the last space or tab; a word longer than
// kMaxOpenWordBytes (a line that is one long word, minified JSON) is cut after its last value
// delimiter instead (, ; & " ' ] } )), so a cut line never loses more than that.
inline constexpr size_t kMaxOpenWordBytes = 1024;
size_t OpenTailStart(std::string_view text);

}  // namespace ithbat::collect::joblog
