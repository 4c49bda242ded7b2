// Evidence bundles: what goes in comes back exactly (series with NaN and infinities, events with
// every identity field and attrs, step spans), the diagnoses recorded are the ones an offline
// re-diagnosis of the file gives, other jobs' raw lines stay out, and files that are not
// bundles, or break the schema, are refused with a clear error.
#include "bundle/bundle.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "investigate/diagnosis_json.h"
#include "testutil/synthetic_fleet.h"
#include "testutil/testutil.h"

namespace ithbat::bundle {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

constexpr int kTicks = 60;
constexpr TimeNs kEnd = kT0 + (kTicks - 1) * kS;

Event MakeEvent(EventKind kind, const std::string& job, TimeNs t, std::string text = "") {
  Event e;
  e.time = t;
  e.kind = kind;
  e.source = "joblog";
  e.identity = Identity{"c1", "n1", job, 3, 3, 8, 4242, 3, "GPU-3"};
  e.step = 17;
  e.text = std::move(text);
  return e;
}

// The rotating straggler of job 77 (a data_imbalance diagnosis) plus events that exercise every
// column: a NaN value, attrs, non-ASCII text, another job's raw line (left out) and its save (kept).
detect::FleetView Fleet() {
  SyntheticFleet f;
  f.RotatingStraggler("n1", kTicks);
  f.Series("n1", "ithbat_test_odd_values", MetricType::kGauge, {{"gpu", "0"}},
           {1.5, std::nan(""), INFINITY, -INFINITY, 0.0});
  Event save = MakeEvent(EventKind::kCheckpointEnd, "77", kT0 + 5 * kS);
  save.attrs = {{"path", "/ckpt/step-17"}, {"bytes", "123"}};
  f.AddEvent("n1", save);
  Event nan_eval = MakeEvent(EventKind::kEvalMetric, "77", kT0 + 6 * kS);  // value NaN: the default
  nan_eval.name = "eval_perplexity";
  f.AddEvent("n1", nan_eval);
  f.AddEvent("n1", MakeEvent(EventKind::kLogLine, "77", kT0 + 7 * kS, "step 17 loss 2.5 — ok ✓"));
  f.AddEvent("n1", MakeEvent(EventKind::kLogLine, "other", kT0 + 8 * kS, "another tenant's secret line"));
  f.AddEvent("n1", MakeEvent(EventKind::kCheckpointBegin, "other", kT0 + 9 * kS));
  for (int s = 0; s < 20; ++s) f.Step("n1", "77", 0, s, kT0 + s * 2 * kS, kT0 + (s + 1) * 2 * kS);
  return f.TakeView();
}

std::vector<std::string> Dump(const std::vector<Diagnosis>& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds) out.push_back(investigate::ToJson(d).dump());
  return out;
}

TEST(Bundle, RoundTripsTheDataAndTheDiagnosis) {
  ithbat::testing::TempDir dir;
  const std::string path = (dir.path() / "incident.ithbat").string();
  const detect::FleetView view = Fleet();
  RecordOptions options{"77", kMinTime, kMaxTime, "a test", 3.5};
  auto summary = WriteBundle(view, options, path);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->meta.job, "77");
  EXPECT_GT(summary->series, 0);
  EXPECT_EQ(summary->steps, 20);
  ASSERT_EQ(summary->diagnoses, 1);

  auto b = ReadBundle(path);
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ(b->meta.format, kBundleFormat);
  EXPECT_EQ(b->meta.source, "a test");
  EXPECT_EQ(b->meta.nodes, std::vector<std::string>{"n1"});
  EXPECT_DOUBLE_EQ(b->meta.list_price_per_gpu_hour, 3.5);
  EXPECT_EQ(b->meta.from, summary->meta.from);
  EXPECT_EQ(b->meta.to, summary->meta.to);

  // Series: every sample back, NaN and infinities included.
  for (const char* sel : {R"({__name__=~".+"})", "ithbat_test_odd_values"}) {
    auto a = view.Samples("n1", sel, kMinTime, kMaxTime);
    auto c = b->view.Samples("n1", sel, kMinTime, kMaxTime);
    ASSERT_EQ(a.size(), c.size()) << sel;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first.labels, c[i].first.labels);
      ASSERT_EQ(a[i].second.size(), c[i].second.size());
      for (size_t k = 0; k < a[i].second.size(); ++k) {
        EXPECT_EQ(a[i].second[k].t, c[i].second[k].t);
        const double x = a[i].second[k].v, y = c[i].second[k].v;
        EXPECT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << x << " vs " << y;
      }
    }
  }
  auto odd = b->view.Samples("n1", "ithbat_test_odd_values", kMinTime, kMaxTime);
  ASSERT_EQ(odd.size(), 1u);
  ASSERT_EQ(odd[0].second.size(), 5u);
  EXPECT_TRUE(std::isnan(odd[0].second[1].v));
  EXPECT_EQ(odd[0].second[2].v, INFINITY);
  EXPECT_EQ(odd[0].second[3].v, -INFINITY);

  // Events: the same, but for the other job's raw line.
  auto before = view.Events(store::EventQuery{});
  auto after = b->view.Events(store::EventQuery{});
  ASSERT_EQ(after.size(), before.size() - 1);
  size_t k = 0;
  for (const auto& e : before) {
    if (e.kind == EventKind::kLogLine && e.identity.job == "other") continue;
    EXPECT_EQ(e, after[k]) << "event " << k << " " << EventKindName(e.kind);
    ++k;
  }
  for (const auto& e : after) EXPECT_EQ(e.text.find("secret"), std::string::npos);

  EXPECT_EQ(b->view.Steps("n1", "77", 0, kMinTime, kMaxTime), view.Steps("n1", "77", 0, kMinTime, kMaxTime));

  // The diagnosis: recorded = recomputed from the file = computed on the source.
  ASSERT_EQ(b->diagnoses.size(), 1u);
  EXPECT_EQ(b->diagnoses[0].cause, Cause::kDataImbalance);
  const auto again = DiagnoseJob(b->view, "77", b->meta.from, b->meta.to, b->meta.list_price_per_gpu_hour);
  EXPECT_EQ(Dump(again), Dump(b->diagnoses));
  EXPECT_EQ(Dump(DiagnoseJob(view, "77", b->meta.from, b->meta.to, 3.5)), Dump(b->diagnoses));
}

TEST(Bundle, NeverOverwritesAndNamesTheJobsItSaw) {
  ithbat::testing::TempDir dir;
  const std::string path = (dir.path() / "x.ithbat").string();
  const detect::FleetView view = Fleet();
  auto missing = WriteBundle(view, RecordOptions{"no-such-job"}, path);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("77"), std::string::npos) << missing.error().message;
  EXPECT_FALSE(std::filesystem::exists(path));

  ASSERT_TRUE(WriteBundle(view, RecordOptions{"77"}, path).has_value());
  auto again = WriteBundle(view, RecordOptions{"77"}, path);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("never overwritten"), std::string::npos);

  // A dangling link counts as taken: SQLite would otherwise create the file it points to.
  std::filesystem::create_symlink(dir.path() / "elsewhere.db", dir.path() / "link.ithbat");
  auto through_link = WriteBundle(view, RecordOptions{"77"}, (dir.path() / "link.ithbat").string());
  ASSERT_FALSE(through_link.has_value());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "elsewhere.db"));

  auto empty_job = WriteBundle(view, RecordOptions{}, (dir.path() / "y.ithbat").string());
  ASSERT_FALSE(empty_job.has_value());
  EXPECT_EQ(empty_job.error().code, ErrorCode::kInvalidArgument);
}

// A job the probes never saw and that printed nothing is still known from NVML's process list,
// tagged with the identity the agent resolved: it can be recorded.
TEST(Bundle, RecordsAJobKnownOnlyFromItsGpuProcesses) {
  ithbat::testing::TempDir dir;
  SyntheticFleet f;
  std::vector<double> used(kTicks, 40e9);
  f.Series("n1", "ithbat_gpu_process_memory_used_bytes", MetricType::kGauge,
           {{"gpu", "2"}, {"gpu_uuid", "GPU-2"}, {"pid", "5150"}, {"job_id", "slurm-4411"}, {"rank", "0"}},
           used);
  const detect::FleetView view = f.TakeView();
  const std::string path = (dir.path() / "gpu-only.ithbat").string();
  auto summary = WriteBundle(view, RecordOptions{"slurm-4411"}, path);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->meta.from, kT0);
  EXPECT_EQ(summary->meta.to, kEnd);
  EXPECT_GE(summary->series, 1);
  auto other = WriteBundle(view, RecordOptions{"slurm-9"}, (dir.path() / "other.ithbat").string());
  EXPECT_FALSE(other.has_value());
}

// A job known only from Slurm's prolog and epilog records (docs/slurm.md): its window is from
// its start to its end, and the bundle carries the end with its exit code.
TEST(Bundle, RecordsAJobKnownOnlyFromTheSchedulersRecords) {
  ithbat::testing::TempDir dir;
  SyntheticFleet f;
  for (const auto& [kind, t] :
       {std::pair{EventKind::kJobStart, kT0 + 5 * kS}, std::pair{EventKind::kJobEnd, kT0 + 25 * kS}}) {
    Event e;
    e.time = t;
    e.kind = kind;
    e.source = "slurm";
    e.identity.job = "4412";
    if (kind == EventKind::kJobEnd) e.attrs = {{"exit_code", "1"}};
    f.AddEvent("n1", e);
  }
  const detect::FleetView view = f.TakeView();
  const std::string path = (dir.path() / "slurm-only.ithbat").string();
  auto summary = WriteBundle(view, RecordOptions{"4412"}, path);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->meta.from, kT0 + 5 * kS);
  EXPECT_EQ(summary->meta.to, kT0 + 25 * kS);
  EXPECT_GE(summary->events, 2);
  EXPECT_EQ(summary->diagnoses, 1);  // the failed end: an inconclusive diagnosis
}

// An inference server has no ranks: it is found by the id its findings name — its job_id label,
// else engine:port — and its bundle re-diagnoses the same.
TEST(Bundle, RecordsAnInferenceServerByTheIdItsFindingsName) {
  ithbat::testing::TempDir dir;
  for (const bool tagged : {true, false}) {
    SCOPED_TRACE(tagged ? "job_id label" : "engine:port");
    SyntheticFleet f;
    f.InferenceServer("inf", SyntheticFleet::ServeShape{},
                      tagged ? testutil::Labels{{"job_id", "chat-ar"}} : testutil::Labels{});
    const detect::FleetView view = f.TakeView();
    const std::string id = tagged ? "chat-ar" : "vllm:8000";
    const std::string path = (dir.path() / (tagged ? "a.ithbat" : "b.ithbat")).string();
    auto summary = WriteBundle(view, RecordOptions{id}, path);
    ASSERT_TRUE(summary.has_value()) << summary.error().message;
    EXPECT_EQ(summary->meta.from, kT0);
    EXPECT_EQ(summary->meta.to, kEnd);
    ASSERT_EQ(summary->diagnoses, 1);
    auto b = ReadBundle(path);
    ASSERT_TRUE(b.has_value()) << b.error().message;
    ASSERT_EQ(b->diagnoses.size(), 1u);
    EXPECT_EQ(b->diagnoses[0].cause, Cause::kServingConfig);
    EXPECT_EQ(b->diagnoses[0].subjects.job, id);
    EXPECT_EQ(Dump(DiagnoseJob(b->view, id, b->meta.from, b->meta.to, 0)), Dump(b->diagnoses));
  }
}

TEST(Bundle, AWindowRecordsOnlyItsDataAndHistory) {
  ithbat::testing::TempDir dir;
  const std::string path = (dir.path() / "w.ithbat").string();
  RecordOptions options{"77", kT0 + 40 * kS, kEnd};
  auto summary = WriteBundle(Fleet(), options, path);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->meta.from, kT0 + 40 * kS);
  EXPECT_EQ(summary->meta.to, kEnd);
  auto b = ReadBundle(path);
  ASSERT_TRUE(b.has_value()) << b.error().message;
  // Nothing after the window's end; history before its start (counters need their last value).
  for (const auto& [v, samples] : b->view.Samples("", R"({__name__=~".+"})", kMinTime, kMaxTime)) {
    ASSERT_FALSE(samples.empty());
    EXPECT_LE(samples.back().t, kEnd);
  }
  const auto& dumped = b->view.Samples("n1", "ithbat_probe_grid_blocks_total", kMinTime, kMaxTime);
  ASSERT_FALSE(dumped.empty());
  EXPECT_EQ(dumped[0].second.front().t, kT0);
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void Sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* msg = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &msg), SQLITE_OK) << (msg ? msg : "");
  sqlite3_free(msg);
  sqlite3_close(db);
}

TEST(Bundle, RefusesWhatIsNotABundleWithAClearError) {
  ithbat::testing::TempDir dir;
  const std::string text = (dir.path() / "text.ithbat").string();
  WriteFile(text, "this is a log file, not a bundle\n");
  auto a = ReadBundle(text);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find(text), std::string::npos);

  auto missing = ReadBundle((dir.path() / "none.ithbat").string());
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);

  const std::string other = (dir.path() / "other.sqlite").string();
  Sql(other, "CREATE TABLE t (x INTEGER);");
  auto b = ReadBundle(other);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("not an Ithbat evidence bundle"), std::string::npos) << b.error().message;

  const std::string newer = (dir.path() / "newer.ithbat").string();
  ASSERT_TRUE(WriteBundle(Fleet(), RecordOptions{"77"}, newer).has_value());
  Sql(newer, "UPDATE meta SET value = 'ithbat.bundle/v9' WHERE key = 'format';");
  auto c = ReadBundle(newer);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("ithbat.bundle/v9"), std::string::npos) << c.error().message;
}

TEST(Bundle, ABrokenRowIsNamed) {
  ithbat::testing::TempDir dir;
  const std::string path = (dir.path() / "broken.ithbat").string();
  ASSERT_TRUE(WriteBundle(Fleet(), RecordOptions{"77"}, path).has_value());
  Sql(path, "UPDATE events SET kind = 'teleport' WHERE rowid = (SELECT MIN(rowid) FROM events);");
  auto a = ReadBundle(path);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("unknown kind 'teleport'"), std::string::npos) << a.error().message;

  const std::string labels = (dir.path() / "labels.ithbat").string();
  ASSERT_TRUE(WriteBundle(Fleet(), RecordOptions{"77"}, labels).has_value());
  Sql(labels, "UPDATE series SET labels = '[1,2' WHERE id = 1;");
  auto b = ReadBundle(labels);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("series 1: labels"), std::string::npos) << b.error().message;
}

// Meta rows no writer of ours makes (found by fuzz/bundle_fuzz.cc): refused with the row named,
// before any store is made for them.
TEST(Bundle, ForgedMetaIsRefused) {
  ithbat::testing::TempDir dir;
  const std::string nodes_10k = [] {
    std::string list = "[";
    for (int i = 0; i < 20'000; ++i) list += fmt::format("{}\"n{}\"", i ? "," : "", i);
    return list + "]";
  }();
  const std::pair<std::string, std::string> forged[] = {
      {"UPDATE meta SET value = '9000000000000000000' WHERE key = 'from_unix_ns';",
       "window starts after it ends"},
      {"UPDATE meta SET value = '-9223372036854775808' WHERE key = 'to_unix_ns';", "outside years"},
      {"UPDATE meta SET value = 'nan' WHERE key = 'list_price_per_gpu_hour';", "not a price"},
      {"UPDATE meta SET value = '-3' WHERE key = 'list_price_per_gpu_hour';", "not a price"},
      {"UPDATE meta SET value = '[\"n1\",\"n1\"]' WHERE key = 'nodes';", "twice"},
      {"UPDATE meta SET value = '[\"\"]' WHERE key = 'nodes';", "not a node name"},
      {"UPDATE meta SET value = '" + nodes_10k + "' WHERE key = 'nodes';", "more than the reader's limit"},
      {"UPDATE meta SET value = '' WHERE key = 'job';", "meta job"},
      {"UPDATE meta SET value = '" + std::string(100'000, 'v') + "' WHERE key = 'format';",
       "is not ithbat.bundle"},
  };
  int i = 0;
  for (const auto& [sql, why] : forged) {
    const std::string path = (dir.path() / fmt::format("forged-{}.ithbat", i++)).string();
    ASSERT_TRUE(WriteBundle(Fleet(), RecordOptions{"77"}, path).has_value());
    Sql(path, sql.c_str());
    auto b = ReadBundle(path);
    ASSERT_FALSE(b.has_value()) << sql.substr(0, 80);
    EXPECT_NE(b.error().message.find(why), std::string::npos) << b.error().message;
    EXPECT_LT(b.error().message.size(), 1024u) << "a forged value is quoted, not copied whole";
  }
}

}  // namespace
}  // namespace ithbat::bundle
