// Redaction on hostile text. The input is split into a prefix and a suffix and a known secret
// line (one per rule family, fake) is put between them as words of their own. Invariants:
// no 6 bytes of the secret that the surrounding text does not already hold survive; the
// output is idempotent; it never grows by more than its markers; an excerpt of any length is
// within its bound; a cut line's open tail is within kMaxOpenWordBytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>
#include <string_view>

#include "collect/joblog/text/redact.h"
#include "fuzz_util.h"

using ithbat::collect::joblog::kMaxOpenWordBytes;
using ithbat::collect::joblog::kRedacted;
using ithbat::collect::joblog::OpenTailStart;
using ithbat::collect::joblog::RedactedExcerpt;
using ithbat::collect::joblog::RedactSecrets;
using ithbat::fuzz::Require;

namespace {

struct Planted {
  std::string_view line;
  std::string_view secret;
};

// One per family of redact.h; every value is fake.
constexpr Planted kPlanted[] = {
    {"HF_TOKEN=hf_Q7xKp2LmN9vR4tY8wZ3aB6cD1eF5gH0j", "hf_Q7xKp2LmN9vR4tY8wZ3aB6cD1eF5gH0j"},
    {"glpat-Xy7Zk2Lm9Np4Qr8St3Uv", "glpat-Xy7Zk2Lm9Np4Qr8St3Uv"},
    {"password=Tr0ub4dor&3x", "Tr0ub4dor&3x"},
    {"'api_key': 'k3yV4lu3S3cr3t99'", "k3yV4lu3S3cr3t99"},
    {"postgres://ml:p@ss/w0rd#1@db.internal:5432/runs", "p@ss/w0rd#1"},
    {"https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/aBcDeFgHiJkLmNoPqRsTuVwX",
     "T0AB12CD3/B0EF45GH6/aBcDeFgHiJkLmNoPqRsTuVwX"},
    {"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"},
    {"AKIAQ3EGRT7HJ5KLMN2P", "AKIAQ3EGRT7HJ5KLMN2P"},
    {"--hf-token Zq8Wm3Xn7Bv2Cl5Kj9Hg", "Zq8Wm3Xn7Bv2Cl5Kj9Hg"},
    {"PGPASSWORD=pg-S3cr3t-42", "pg-S3cr3t-42"},
    {"sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr", "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr"},
    {"-----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEAx7Zk2Lm9Np4Qr8St3Uv-----END RSA PRIVATE KEY-----",
     "MIIEpAIBAAKCAQEAx7Zk2Lm9Np4Qr8St3Uv"},
    {"Abc8Q~AbCdEfGhIjKlMnOpQrStUvWxYz01234_", "Abc8Q~AbCdEfGhIjKlMnOpQrStUvWxYz01234_"},
};

// Whether 6 consecutive bytes of `secret` survive in `out` that `context` does not hold.
bool Leaks(std::string_view secret, std::string_view context, std::string_view out) {
  const size_t k = std::min<size_t>(6, secret.size());
  for (size_t i = 0; i + k <= secret.size(); ++i) {
    const std::string_view w = secret.substr(i, k);
    if (context.find(w) == std::string_view::npos && out.find(w) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Planted& planted = kPlanted[in.ConsumeIntegralInRange<size_t>(0, std::size(kPlanted) - 1)];
  const std::string prefix = in.ConsumeRandomLengthString(1 << 16);
  const std::string suffix = in.ConsumeRemainingBytesAsString();
  const std::string line = prefix + " " + std::string(planted.line) + " " + suffix;

  std::string out = line;
  const size_t secrets = RedactSecrets(out);
  Require(!Leaks(planted.secret, prefix + "\n" + suffix, out), "a planted secret survived redaction");
  Require(out.size() <= line.size() + secrets * kRedacted.size(), "redaction grew the line by more than its markers");
  std::string twice = out;
  Require(RedactSecrets(twice) == 0 && twice == out, "redaction not idempotent");

  const size_t max = size % (line.size() + 1);
  Require(RedactedExcerpt(line, max).size() <= max, "excerpt over its bound");
  const size_t tail = OpenTailStart(line);
  Require(tail <= line.size() && line.size() - tail <= kMaxOpenWordBytes, "open tail over its bound");
  return 0;
}
