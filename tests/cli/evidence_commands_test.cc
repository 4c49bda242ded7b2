// `ithbat record`, `ithbat diagnose` and `ithbat report` as functions: a bundle written from a
// stopped agent's data directory re-diagnoses to the same result (exit 0), a tampered one says it
// differs (exit 3), usage errors are exit 2, and the terminal text leads with the verdict, keeps
// colour off unless asked and never passes control characters from the data through.
#include "cli/evidence_commands.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "cli/diagnosis_text.h"
#include "core/file_util.h"
#include "serve/http_server.h"
#include "store/store.h"
#include "testutil/synthetic_fleet.h"
#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using testutil::kS;
using testutil::kT0;

// Captures what a command writes to a FILE*.
struct Capture {
  std::FILE* f = std::tmpfile();
  ~Capture() { std::fclose(f); }
  std::string Text() {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    return out;
  }
};

// A stopped agent's data directory holding the rotating-straggler job "77" on node n1.
std::string WriteDataDir(const std::filesystem::path& dir) {
  testutil::SyntheticFleet fleet;
  fleet.RotatingStraggler("n1", 60);
  auto stores = fleet.TakeStores();
  store::StoreOptions o;
  o.data_dir = (dir / "n1").string();
  o.retention = 365LL * 24 * 3600 * kS;
  auto disk = store::Store::Open(o);
  EXPECT_TRUE(disk.has_value());
  const store::Store& mem = *stores.at("n1");
  auto sel = store::SeriesSelector::Parse(R"({__name__=~".+"})");
  auto all = mem.Select(*sel, kMinTime, kMaxTime);
  EXPECT_TRUE(all.has_value());
  for (const auto& s : *all) {
    auto ref = (*disk)->RegisterSeries(*s.info.desc, s.info.labels);
    EXPECT_TRUE(ref.has_value());
    for (const auto& x : s.samples) EXPECT_TRUE((*disk)->Append(*ref, x.t, x.v).has_value());
  }
  EXPECT_TRUE((*disk)->Flush().has_value());
  return o.data_dir;
}

TEST(EvidenceCommands, RecordThenDiagnoseGivesTheRecordedDiagnosis) {
  ithbat::testing::TempDir dir;
  const std::string data = WriteDataDir(dir.path());
  const std::string bundle = (dir.path() / "b.ithbat").string();
  RecordCommandOptions r;
  r.job = "77";
  r.output = bundle;
  r.data_dirs = {data};  // the node is named after the directory: n1
  Capture out, err;
  ASSERT_EQ(RunRecordCommand(r, out.f, err.f), 0) << err.Text();
  EXPECT_NE(out.Text().find("1 diagnosis(es)"), std::string::npos) << out.Text();

  DiagnoseCommandOptions d;
  d.bundle = bundle;
  d.color = "never";
  Capture out2, err2;
  ASSERT_EQ(RunDiagnoseCommand(d, out2.f, err2.f), 0) << err2.Text();
  const std::string text = out2.Text();
  EXPECT_NE(text.find("job: data_imbalance"), std::string::npos) << text;
  EXPECT_NE(text.find("the same as the 1 diagnosis(es) recorded"), std::string::npos) << text;
  EXPECT_EQ(text.find("\x1b["), std::string::npos);

  d.json = true;
  Capture out3, err3;
  ASSERT_EQ(RunDiagnoseCommand(d, out3.f, err3.f), 0);
  const std::string json = out3.Text();
  EXPECT_EQ(json.find("bundle "), std::string::npos);  // JSON lines only
  EXPECT_NE(json.find("\"schema\":\"ithbat.diagnosis/v1\""), std::string::npos) << json;

  // A link planted where the report writes its temporary file (a shared directory) is removed,
  // never written through.
  dir.WriteFile("victim", "precious\n");
  std::filesystem::create_symlink(dir.path() / "victim", dir.path() / "r.html.tmp");
  ReportCommandOptions rep{bundle, (dir.path() / "r.html").string()};
  Capture out5, err5;
  ASSERT_EQ(RunReportCommand(rep, out5.f, err5.f), 0) << err5.Text();
  EXPECT_EQ(*ReadFileBounded(dir.path() / "victim", 64), "precious\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "r.html.tmp"));
  std::ifstream html(rep.output);
  std::stringstream ss;
  ss << html.rdbuf();
  EXPECT_NE(ss.str().find("<svg"), std::string::npos);

  // Tampered evidence: the recorded verdict no longer matches what the data says.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(bundle.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE diagnoses SET json = replace(json, '\"verdict\":\"job\"', "
                         "'\"verdict\":\"infrastructure\"')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  d.json = false;
  Capture out4, err4;
  EXPECT_EQ(RunDiagnoseCommand(d, out4.f, err4.f), 3);
  EXPECT_NE(err4.Text().find("differs from the 1 diagnosis(es) recorded"), std::string::npos) << err4.Text();
}

TEST(EvidenceCommands, RecordFromARunningAgentOverItsApi) {
  // A running agent's HTTP API over the rotating-straggler store of node n1.
  testutil::SyntheticFleet fleet;
  fleet.RotatingStraggler("n1", 60);
  serve::ServerOptions so;
  so.port = 0;
  auto server = serve::HttpServer::Start(fleet.Node("n1"), {}, so);
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  ithbat::testing::TempDir dir;
  RecordCommandOptions r;
  r.job = "77";
  r.output = (dir.path() / "live.ithbat").string();
  r.agents = {fmt::format("n1=127.0.0.1:{}", (*server)->port())};
  // The synthetic data lies at kT0 (2027): the window must say so, the default ends now.
  r.from = std::to_string(kT0 / kNsPerSec);
  r.to = std::to_string(kT0 / kNsPerSec + 120);
  Capture out, err;
  ASSERT_EQ(RunRecordCommand(r, out.f, err.f), 0) << err.Text();
  EXPECT_NE(out.Text().find("1 diagnosis(es)"), std::string::npos) << out.Text();

  DiagnoseCommandOptions d;
  d.bundle = r.output;
  d.json = true;
  Capture out2, err2;
  ASSERT_EQ(RunDiagnoseCommand(d, out2.f, err2.f), 0) << err2.Text();
  EXPECT_NE(out2.Text().find("\"cause\":\"data_imbalance\""), std::string::npos) << out2.Text();
  EXPECT_NE(out2.Text().find("\"n1\""), std::string::npos) << "the node is named as given";

  // Given by address only: the node is named as the agent names it (its --node), so the bundle's
  // diagnoses name the node the agent's own did.
  serve::ServerOptions named = so;
  named.node = "gpu-a07";
  auto reporting = serve::HttpServer::Start(fleet.Node("n1"), {}, named);
  ASSERT_TRUE(reporting.has_value()) << reporting.error().ToString();
  RecordCommandOptions by_address = r;
  by_address.output = (dir.path() / "by-address.ithbat").string();
  by_address.agents = {fmt::format("127.0.0.1:{}", (*reporting)->port())};
  Capture out4, err4;
  ASSERT_EQ(RunRecordCommand(by_address, out4.f, err4.f), 0) << err4.Text();
  DiagnoseCommandOptions d4 = d;
  d4.bundle = by_address.output;
  Capture out5, err5;
  ASSERT_EQ(RunDiagnoseCommand(d4, out5.f, err5.f), 0) << err5.Text();
  EXPECT_NE(out5.Text().find("\"gpu-a07\""), std::string::npos) << out5.Text();
  EXPECT_EQ(out5.Text().find("127.0.0.1"), std::string::npos) << out5.Text();

  // An agent that is not there: exit 1 with its address, no file left behind.
  RecordCommandOptions gone = r;
  gone.output = (dir.path() / "gone.ithbat").string();
  gone.agents = {"127.0.0.1:1"};
  Capture out3, err3;
  EXPECT_EQ(RunRecordCommand(gone, out3.f, err3.f), 1);
  EXPECT_NE(err3.Text().find("127.0.0.1:1"), std::string::npos) << err3.Text();
  EXPECT_FALSE(std::filesystem::exists(gone.output));
}

TEST(EvidenceCommands, UsageErrorsAreExitTwoAndMissingSourcesExitOne) {
  Capture out, err;
  RecordCommandOptions r;
  r.job = "77";
  r.output = "/nonexistent/x.ithbat";
  EXPECT_EQ(RunRecordCommand(r, out.f, err.f), 2);  // no source
  r.data_dirs = {"/nonexistent/dir"};
  EXPECT_EQ(RunRecordCommand(r, out.f, err.f), 1);
  r.window = "soon";
  EXPECT_EQ(RunRecordCommand(r, out.f, err.f), 2);

  DiagnoseCommandOptions d;
  EXPECT_EQ(RunDiagnoseCommand(d, out.f, err.f), 2);  // no source
  d.bundle = "/nonexistent/b.ithbat";
  d.hub = "127.0.0.1:1";
  EXPECT_EQ(RunDiagnoseCommand(d, out.f, err.f), 2);  // two sources
  d.hub.clear();
  EXPECT_EQ(RunDiagnoseCommand(d, out.f, err.f), 1);
  EXPECT_NE(err.Text().find("/nonexistent/b.ithbat"), std::string::npos);
}

TEST(EvidenceCommands, AnAgentThatDoesNotAnswerIsNeverReportedHealthy) {
  // Nobody answered: no "no diagnosis" all-clear on stdout, the reason on stderr, exit 1.
  DiagnoseCommandOptions d;
  d.agents = {"127.0.0.1:1"};
  Capture out, err;
  EXPECT_EQ(RunDiagnoseCommand(d, out.f, err.f), 1);
  EXPECT_EQ(out.Text(), "");
  EXPECT_NE(err.Text().find("127.0.0.1:1"), std::string::npos) << err.Text();
  d.json = true;
  Capture jout, jerr;
  EXPECT_EQ(RunDiagnoseCommand(d, jout.f, jerr.f), 1);
  EXPECT_EQ(jout.Text(), "");

  // One of two answered (with nothing to report): the answer says it is partial.
  testutil::SyntheticFleet fleet;
  serve::ServerOptions so;
  so.port = 0;
  serve::ServerSources sources;
  sources.diagnoses = [] { return std::vector<Diagnosis>{}; };
  auto server = serve::HttpServer::Start(fleet.Node("n1"), sources, so);
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  DiagnoseCommandOptions two;
  two.agents = {fmt::format("127.0.0.1:{}", (*server)->port()), "127.0.0.1:1"};
  Capture pout, perr;
  EXPECT_EQ(RunDiagnoseCommand(two, pout.f, perr.f), 1);
  EXPECT_NE(pout.Text().find("partial: 1 of 2 did not answer"), std::string::npos) << pout.Text();
}

TEST(DiagnosisText, VerdictFirstColourOnlyWhenAskedNoControlCharacters) {
  Diagnosis d;
  d.id = "dx-1";
  d.verdict = Verdict::kInfrastructure;
  d.cause = Cause::kStorage;
  d.subjects.job = "job\x1b[2Jevil";
  d.summary = "stalled";
  d.evidence.push_back({"ithbat_io_seconds_total", "sched_io", "/mnt", 1.5, 0.25, "s", "slow\rnote", {}});
  d.fix = "Move the checkpoints.";
  const std::string plain = FormatDiagnosisText(d, false);
  EXPECT_EQ(plain.rfind("infrastructure: storage", 0), 0u) << plain;
  EXPECT_EQ(plain.find('\x1b'), std::string::npos) << plain;
  EXPECT_EQ(plain.find('\r'), std::string::npos);
  EXPECT_NE(plain.find("job?[2Jevil"), std::string::npos);
  EXPECT_NE(plain.find("observed 1.5 vs expected 0.25 s"), std::string::npos) << plain;
  const std::string coloured = FormatDiagnosisText(d, true);
  EXPECT_NE(coloured.find("\x1b[1;31minfrastructure: storage"), std::string::npos) << coloured;
  EXPECT_NE(FormatDiagnosesText({}, false).find("no diagnosis"), std::string::npos);
}

}  // namespace
}  // namespace ithbat::cli
