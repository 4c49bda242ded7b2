// The redaction corpus (tests/joblog_text/redaction/, written independently of the scanner):
// every secret shape is gone after redaction, also when the line is cut anywhere; no ordinary
// line — the corpus's look-alikes and every real log under ../shared/data — is changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "collect/joblog/text/redact.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

struct SecretRow {
  std::string rule;
  std::string secret;
  std::string line;
};

std::filesystem::path CorpusDir() { return testing::SourceDir() / "tests" / "joblog_text" / "redaction"; }

std::vector<SecretRow> ReadSecrets() {
  std::ifstream in(CorpusDir() / "secrets.tsv");
  std::vector<SecretRow> rows;
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    const size_t a = l.find('\t');
    const size_t b = l.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      ADD_FAILURE() << "not rule<TAB>secret<TAB>line: " << l;
      continue;
    }
    rows.push_back({l.substr(0, a), l.substr(a + 1, b - a - 1), l.substr(b + 1)});
  }
  return rows;
}

std::vector<std::string> ReadOrdinary() {
  std::ifstream in(CorpusDir() / "ordinary.txt");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l[0] == '#') continue;
    lines.push_back(l);
  }
  return lines;
}

// What of `secret` survives in `out`: its 6-byte windows (the whole secret when shorter) that
// `out` holds, except windows the line also holds outside the secret (its context).
std::vector<std::string> Leaks(const SecretRow& row, const std::string& out) {
  const size_t at = row.line.find(row.secret);
  const std::string context = row.line.substr(0, at) + "\n" + row.line.substr(at + row.secret.size());
  const size_t k = std::min<size_t>(6, row.secret.size());
  std::set<std::string> leaks;
  for (size_t i = 0; i + k <= row.secret.size(); ++i) {
    const std::string w = row.secret.substr(i, k);
    if (context.find(w) != std::string::npos) continue;
    if (out.find(w) != std::string::npos) leaks.insert(w);
  }
  return {leaks.begin(), leaks.end()};
}

TEST(RedactionCorpus, HasTheShapesItPromises) {
  const auto rows = ReadSecrets();
  std::set<std::string> rules;
  for (const auto& r : rows) {
    rules.insert(r.rule);
    EXPECT_NE(r.line.find(r.secret), std::string::npos) << r.rule;
  }
  EXPECT_GE(rows.size(), 150u);
  EXPECT_GE(rules.size(), 150u);
  EXPECT_GE(ReadOrdinary().size(), 100u);
}

TEST(RedactionCorpus, NoSecretGetsThrough) {
  int leaked = 0;
  for (const SecretRow& row : ReadSecrets()) {
    std::string out = row.line;
    RedactSecrets(out);
    const auto leaks = Leaks(row, out);
    if (!leaks.empty()) {
      ++leaked;
      ADD_FAILURE() << row.rule << ": " << out << "\n  leaked: " << leaks.front();
    }
    std::string again = out;
    EXPECT_EQ(RedactSecrets(again), 0u) << "not idempotent: " << out;
  }
  EXPECT_EQ(leaked, 0);
}

// Cut anywhere from the secret's start to just past its end, the way the agent cuts: a line
// over the assembler's bound loses its unfinished last word (OpenTailStart) and is redacted;
// an event excerpt is redacted and then cut (RedactedExcerpt). Neither keeps 6 bytes of it.
TEST(RedactionCorpus, NoSecretGetsThroughACut) {
  int leaked = 0;
  for (const SecretRow& row : ReadSecrets()) {
    const size_t at = row.line.find(row.secret);
    for (size_t cut = at + 1; cut <= std::min(row.line.size(), at + row.secret.size() + 8); ++cut) {
      std::string kept = row.line.substr(0, cut);
      kept.resize(OpenTailStart(kept));
      RedactSecrets(kept);
      const std::string excerpt = RedactedExcerpt(row.line, cut);
      for (const std::string* out : {static_cast<const std::string*>(&kept), &excerpt}) {
        const auto leaks = Leaks(row, *out);
        if (!leaks.empty() && leaked++ < 20) {
          ADD_FAILURE() << row.rule << " cut at " << cut << ": " << *out << "\n  leaked: " << leaks.front();
        }
      }
    }
  }
  EXPECT_EQ(leaked, 0);
}

TEST(RedactionCorpus, OrdinaryLinesAreKept) {
  for (const std::string& line : ReadOrdinary()) {
    std::string out = line;
    EXPECT_EQ(RedactSecrets(out), 0u) << line << "\n  became: " << out;
  }
}

// Every line of every real log, metric dump and kernel log under ../shared/data (written by
// other people's systems): none holds a secret, so none may change.
TEST(RedactionCorpus, RealLogsAreKept) {
  const auto dir = testing::SharedDataDir();
  ASSERT_TRUE(dir) << "../shared/data is absent: this conformance test reads real logs from it";
  size_t files = 0, lines = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(*dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string relative = std::filesystem::relative(entry.path(), *dir).string();
    if (relative == "README.md") continue;
    ++files;
    for (const std::string& line : testing::SharedDataLines(relative)) {
      ++lines;
      std::string out = line;
      EXPECT_EQ(RedactSecrets(out), 0u) << relative << ": " << line << "\n  became: " << out;
    }
  }
  EXPECT_GT(files, 50u);
  EXPECT_GT(lines, 500u);
}

}  // namespace
}  // namespace ithbat::collect::joblog
