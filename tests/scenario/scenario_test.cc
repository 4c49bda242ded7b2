// The scenario format v1 (src/scenario, docs/scenarios.md): every shipped file validates, every
// class of error names its field path and line, ranges draw deterministically within bounds,
// the expect block is unreachable from Scenario, hostile input fails cleanly.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "scenario/expect/expect.h"
#include "scenario/rng.h"
#include "scenario/scenario.h"
#include "testutil/testutil.h"

namespace ithbat::scenario {
namespace {

using ::testing::HasSubstr;

// A small valid scenario; line numbers below refer to it (line 1 = "version: 1").
constexpr std::string_view kBase = R"(version: 1
name: base
duration_s: 600
nodes:
  - name: n1
    gpus: {count: 8, model: H100-SXM}
    nics: [{name: mlx5_0, gpus: [0, 1]}]
  - name: n2
    gpus: {count: 8, model: H200-SXM}
storage:
  mounts:
    - {name: shared, path: /mnt/s, kind: shared_nfs, write_gbps: 2}
jobs:
  - id: train
    nodes: [n1]
    gpus_per_node: 8
    steps: 100
    work: {compute_ms: [100, 200], seq_len: {dist: lognormal, median: 1000, sigma: 0.5, min: 10, max: 8000}}
    checkpoint: {every_steps: 50, mount: shared}
    loss: {model: decay, initial: [9, 11]}
timeline:
  - {kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}
expect:
  - verdict: none
)";

std::string Replace(std::string_view text, std::string_view from, std::string_view to) {
  std::string s(text);
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture text not found: " << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::string Dump(const std::vector<Issue>& issues) {
  std::string out;
  for (const auto& i : issues) out += i.ToString("f.yaml") + "\n";
  return out;
}

// The one issue whose path is `path`; fails the test when there is none.
Issue IssueAt(const ParsedScenario& p, const std::string& path) {
  for (const auto& i : p.issues) {
    if (i.path == path) return i;
  }
  ADD_FAILURE() << "no issue at " << path << "; got:\n" << Dump(p.issues);
  return {};
}

TEST(ScenarioFiles, EveryShippedScenarioValidates) {
  auto dir = testing::SourceDir() / "scenarios";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    names.insert(e.path().filename().string());
    SCOPED_TRACE(e.path().string());
    ParsedScenario p = ParseScenarioFile(e.path().string());
    ASSERT_TRUE(p.scenario.has_value()) << Dump(p.issues);
    EXPECT_EQ(p.scenario->name + ".yaml", e.path().filename().string()) << "name matches the file";
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    ParsedExpectations x = ParseExpectationsText(text, &*p.scenario);
    ASSERT_TRUE(x.expectations.has_value()) << Dump(x.issues);
    bool control = e.path().filename().string().find("healthy") != std::string::npos ||
                   e.path().filename().string().find("control") != std::string::npos;
    EXPECT_EQ(x.expectations->expects_nothing, control);
    auto r = Resolve(*p.scenario, 42);
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
  }
  for (const char* want : {"case01-roaming-straggler.yaml", "case02-checkpoint-stall.yaml", "case03-inference-half-empty.yaml",
                           "case04-fp8-divergence.yaml", "healthy-training.yaml"}) {
    EXPECT_TRUE(names.contains(want)) << want;
  }
}

TEST(ScenarioFiles, CaseFilesSayWhatTheBriefSays) {
  auto dir = testing::SourceDir() / "scenarios";
  auto c1 = ParseScenarioFile((dir / "case01-roaming-straggler.yaml").string());
  ASSERT_TRUE(c1.scenario) << Dump(c1.issues);
  ASSERT_EQ(c1.scenario->jobs.size(), 1u);
  EXPECT_EQ(c1.scenario->jobs[0].nodes.size() * c1.scenario->jobs[0].gpus_per_node, 16u);
  // ~30% slower, not 2x: many unpacked sequences per rank, moderate tail (see the file's comment).
  const auto& w1 = c1.scenario->jobs[0].work;
  EXPECT_FALSE(w1.packing);
  EXPECT_EQ(w1.seq_len.dist, Dist::kLognormal);
  EXPECT_LE(w1.seq_len.sigma, 0.7);
  EXPECT_GE(w1.sequences_per_step, 12);

  // Case 02: at least two healthy saves before the slowdown; healthy saves take under 2 s.
  auto c2 = ParseScenarioFile((dir / "case02-checkpoint-stall.yaml").string());
  ASSERT_TRUE(c2.scenario) << Dump(c2.issues);
  const auto& j2 = c2.scenario->jobs.at(0);
  ASSERT_TRUE(j2.checkpoint);
  EXPECT_FALSE(j2.checkpoint->async);
  ASSERT_EQ(c2.scenario->timeline.size(), 1u);
  const auto& slow = c2.scenario->timeline[0];
  EXPECT_EQ(slow.kind, EventKind::kStorageSlowdown);
  EXPECT_EQ(slow.job, j2.id);
  EXPECT_GT(slow.at_step.Lower(), 2.0 * static_cast<double>(j2.checkpoint->every_steps));
  double tenant_gbps = c2.scenario->tenants.at(0).write_gbps.Upper();
  double healthy_save_s = j2.checkpoint->size_gib.Upper() * 1.073741824 / (c2.scenario->mounts.at(0).write_gbps.Lower() - tenant_gbps);
  EXPECT_LT(healthy_save_s, 2.0);

  // Case 03: naive engine, 32 slots, KV capacity small enough that ~71% empty at peak is possible.
  auto c3 = ParseScenarioFile((dir / "case03-inference-half-empty.yaml").string());
  ASSERT_TRUE(c3.scenario) << Dump(c3.issues);
  const auto& srv = c3.scenario->inference.at(0);
  EXPECT_EQ(srv.engine, Engine::kNaive);
  EXPECT_EQ(srv.slots, 32);
  EXPECT_EQ(srv.gpus, 8);
  EXPECT_LT(srv.kv_capacity_tokens.Upper(), 250000);

  // Case 04: run and rerun resume from a checkpoint the suspect GPUs never wrote; zero ECC
  // deltas; one finding, provisional then confirmed by the rerun.
  auto c4 = ParseScenarioFile((dir / "case04-fp8-divergence.yaml").string());
  ASSERT_TRUE(c4.scenario) << Dump(c4.issues);
  const auto& jobs = c4.scenario->jobs;
  ASSERT_EQ(jobs.size(), 3u);
  const auto& warmup = jobs[0];
  const auto& run = jobs[1];
  const auto& rerun = jobs[2];
  ASSERT_TRUE(run.resume_from && rerun.resume_from && rerun.rerun_of);
  EXPECT_EQ(run.resume_from->job, warmup.id);
  EXPECT_EQ(rerun.resume_from->job, warmup.id);
  EXPECT_EQ(rerun.rerun_of->job, run.id);
  EXPECT_TRUE(rerun.rerun_of->disjoint_gpus);
  for (const auto& n : warmup.nodes) EXPECT_EQ(std::count(run.nodes.begin(), run.nodes.end(), n), 0) << n;
  EXPECT_EQ(c4.scenario->background.corrected_ecc_per_hour.Upper(), 0);
  EXPECT_TRUE(c4.scenario->timeline.empty());
  std::ifstream in(dir / "case04-fp8-divergence.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto x = ParseExpectationsText(text, &*c4.scenario);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  ASSERT_EQ(x.expectations->findings.size(), 1u);
  const auto& f = x.expectations->findings[0];
  EXPECT_TRUE(f.provisional);
  ASSERT_TRUE(f.confirm);
  EXPECT_EQ(f.confirm->job, rerun.id);
  EXPECT_EQ(f.budget.from, BudgetFrom::kStep);
  EXPECT_GE(static_cast<double>(f.budget.from_step), run.loss.drift_start_step.Upper());
  // The rerun writes no recipe of its own: it runs the original's.
  EXPECT_EQ(RecipeFingerprint(*c4.scenario, 2), RecipeFingerprint(*c4.scenario, 1));
  EXPECT_NE(RecipeFingerprint(*c4.scenario, 0), RecipeFingerprint(*c4.scenario, 1)) << "the warm-up stops before the drift";
  EXPECT_EQ(rerun.loss.model, LossModel::kDriftExplode);
}

// `after` (added to v1 on 2026-12-06): another job this one follows, which must exist, not be
// itself, and not lead back to it.
TEST(ScenarioParse, AfterNamesAnotherJobWithoutACycle) {
  const std::string two = Replace(kBase, "timeline:", "  - {id: rerun, nodes: [n2], steps: 100, after: train}\ntimeline:");
  auto s = ParseScenario(two);
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->jobs[1].after, "train");
  EXPECT_EQ(s->jobs[0].after, "");
  auto none = ParseScenarioText(Replace(two, "after: train", "after: nobody"));
  EXPECT_THAT(IssueAt(none, "jobs[1].after").message, HasSubstr("no job 'nobody'"));
  auto self = ParseScenarioText(Replace(two, "after: train", "after: rerun"));
  EXPECT_THAT(IssueAt(self, "jobs[1].after").message, HasSubstr("cannot start after itself"));
  auto cycle = ParseScenarioText(
      Replace(two, "loss: {model: decay, initial: [9, 11]}", "loss: {model: decay, initial: [9, 11]}\n    after: rerun"));
  EXPECT_THAT(IssueAt(cycle, "jobs[0].after").message, HasSubstr("waits for itself"));
}

TEST(ScenarioParse, RerunInheritsTheRecipe) {
  std::string text = Replace(kBase, "timeline:", "  - {id: rerun, nodes: [n2], steps: 100, rerun_of: {job: train}}\ntimeline:");
  auto s = ParseScenario(text);
  ASSERT_TRUE(s) << s.error().ToString();
  const auto& r = s->jobs[1];
  EXPECT_EQ(r.work.compute_ms.dist, Dist::kUniform);
  EXPECT_EQ(r.work.compute_ms.max, 200);
  EXPECT_EQ(r.work.seq_len.dist, Dist::kLognormal);
  ASSERT_TRUE(r.checkpoint);
  EXPECT_EQ(r.checkpoint->every_steps, 50);
  EXPECT_EQ(r.loss.initial.min, 9);
  EXPECT_EQ(RecipeFingerprint(*s, 1), RecipeFingerprint(*s, 0));
  EXPECT_EQ(RecipeFingerprint(*s, 9), 0u);
  // What the rerun writes wins, and changes the fingerprint.
  auto o = ParseScenario(Replace(text, "rerun_of: {job: train}", "rerun_of: {job: train}, loss: {model: flat}"));
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->jobs[1].loss.model, LossModel::kFlat);
  EXPECT_EQ(o->jobs[1].work.compute_ms.max, 200);
  EXPECT_NE(RecipeFingerprint(*o, 1), RecipeFingerprint(*o, 0));
  // An inherited field is checked where the rerun runs: a mount only n1 has is not on n2.
  auto nv = ParseScenarioText(Replace(text, "kind: shared_nfs, write_gbps: 2}", "kind: shared_nfs, write_gbps: 2, nodes: [n1]}"));
  EXPECT_THAT(IssueAt(nv, "jobs[1].checkpoint.mount").message, HasSubstr("not on node 'n2'"));
  // Fingerprints see ranges as written, not draws.
  std::string other = Replace(kBase, "compute_ms: [100, 200]", "compute_ms: [100, 201]");
  EXPECT_NE(RecipeFingerprint(*ParseScenario(other), 0), RecipeFingerprint(*ParseScenario(kBase), 0));
  // Cycles do not hang.
  std::string cyc = Replace(text, "rerun_of: {job: train}", "rerun_of: {job: train, disjoint_gpus: false}");
  cyc = Replace(cyc, "loss: {model: decay, initial: [9, 11]}", "loss: {model: decay, initial: [9, 11]}\n    rerun_of: {job: rerun}");
  (void)ParseScenarioText(cyc);
}

TEST(ScenarioParse, BaseIsValidAndKeepsMarks) {
  ParsedScenario p = ParseScenarioText(kBase);
  ASSERT_TRUE(p.scenario) << Dump(p.issues);
  const Scenario& s = *p.scenario;
  EXPECT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes[1].gpus.model, GpuModel::kH200Sxm);
  EXPECT_EQ(s.jobs[0].work.compute_ms.dist, Dist::kUniform);
  EXPECT_EQ(s.jobs[0].work.seq_len.dist, Dist::kLognormal);
  EXPECT_EQ(s.marks.at("jobs[0].steps"), std::make_pair(17, 12));
  EXPECT_TRUE(s.background.enabled) << "background mess is on by default";
}

TEST(ScenarioParse, TypoIsUnknownKeyWithSuggestionAndLine) {
  auto p = ParseScenarioText(Replace(kBase, "gpus_per_node: 8", "gpus_per_nod: 8"));
  Issue i = IssueAt(p, "jobs[0].gpus_per_nod");
  EXPECT_EQ(i.line, 16);
  EXPECT_EQ(i.column, 5);
  EXPECT_THAT(i.message, HasSubstr("unknown key"));
  EXPECT_THAT(i.message, HasSubstr("did you mean gpus_per_node?"));
  EXPECT_THAT(i.ToString("f.yaml"), HasSubstr("f.yaml:16:5: jobs[0].gpus_per_nod"));
}

TEST(ScenarioParse, WrongTypes) {
  auto p = ParseScenarioText(Replace(kBase, "steps: 100", "steps: many"));
  EXPECT_EQ(IssueAt(p, "jobs[0].steps").line, 17);
  p = ParseScenarioText(Replace(kBase, "steps: 100", "steps: 10.5"));
  EXPECT_THAT(IssueAt(p, "jobs[0].steps").message, HasSubstr("not an integer"));
  p = ParseScenarioText(Replace(kBase, "nodes: [n1]", "nodes: n1"));
  EXPECT_EQ(IssueAt(p, "jobs[0].nodes").line, 15);
  p = ParseScenarioText(Replace(kBase, "model: H100-SXM", "model: H100"));
  EXPECT_THAT(IssueAt(p, "nodes[0].gpus.model").message, HasSubstr("H100-SXM, H200-SXM"));
}

TEST(ScenarioParse, OutOfRangeValues) {
  auto p = ParseScenarioText(Replace(kBase, "write_gbps: 2", "write_gbps: -2"));
  Issue i = IssueAt(p, "storage.mounts[0].write_gbps");
  EXPECT_EQ(i.line, 12);
  EXPECT_THAT(i.message, HasSubstr("out of range"));
  p = ParseScenarioText(Replace(kBase, "work: {", "work: {tensor_share: 1.5, "));
  IssueAt(p, "jobs[0].work.tensor_share");
  // A range is checked whole: its upper end above 1 is out of range too.
  p = ParseScenarioText(Replace(kBase, "work: {", "work: {tensor_share: [0.5, 1.2], "));
  EXPECT_THAT(IssueAt(p, "jobs[0].work.tensor_share").message, HasSubstr("range [0.5, 1.2]"));
  p = ParseScenarioText(Replace(kBase, "gpu: 3,", "gpu: 8,"));
  EXPECT_THAT(IssueAt(p, "timeline[0].gpu").message, HasSubstr("beyond node 'n1'"));
  p = ParseScenarioText(Replace(kBase, "gpus: [0, 1]", "gpus: [0, 9]"));
  IssueAt(p, "nodes[0].nics[0].gpus[1]");
}

TEST(ScenarioParse, UndefinedReferences) {
  auto p = ParseScenarioText(Replace(kBase, "nodes: [n1]", "nodes: [n9]"));
  EXPECT_THAT(IssueAt(p, "jobs[0].nodes[0]").message, HasSubstr("no node 'n9'"));
  p = ParseScenarioText(Replace(kBase, "mount: shared}", "mount: sharde}"));
  EXPECT_EQ(IssueAt(p, "jobs[0].checkpoint.mount").line, 19);
  p = ParseScenarioText(Replace(kBase, "node: n1, gpu: 3", "node: n7, gpu: 3"));
  IssueAt(p, "timeline[0].node");
  p = ParseScenarioText(Replace(kBase, "{kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}",
                                "{kind: rank_hang, at_step: 50, job: nojob, rank: 1, collective: 7}"));
  IssueAt(p, "timeline[0].job");
}

TEST(ScenarioParse, EventsAfterTheEndAndMisplacedFields) {
  auto p = ParseScenarioText(Replace(kBase, "at_s: 100", "at_s: [100, 700]"));
  EXPECT_THAT(IssueAt(p, "timeline[0].at_s").message, HasSubstr("after the scenario ends"));
  p = ParseScenarioText(Replace(kBase, "clock_factor: 0.6", "mount: shared"));
  EXPECT_THAT(IssueAt(p, "timeline[0].mount").message, HasSubstr("does not apply to kind thermal_throttle"));
  p = ParseScenarioText(Replace(kBase, "node: n1, gpu: 3, ", ""));
  EXPECT_THAT(IssueAt(p, "timeline[0]").message, HasSubstr("needs node"));
}

TEST(ScenarioParse, RerunSharingGpusWithOriginal) {
  std::string text = Replace(kBase, "timeline:", R"(  - id: rerun
    nodes: [n1]
    gpus_per_node: 4
    steps: 100
    rerun_of: {job: train}
timeline:)");
  auto p = ParseScenarioText(text);
  EXPECT_THAT(IssueAt(p, "jobs[1].rerun_of").message, HasSubstr("shares GPU n1:0"));
  // On the other node it is fine; saying shared GPUs are allowed is fine too.
  EXPECT_TRUE(ParseScenarioText(Replace(text, "nodes: [n1]\n    gpus_per_node: 4", "nodes: [n2]\n    gpus_per_node: 4")).scenario);
  EXPECT_TRUE(ParseScenarioText(Replace(text, "{job: train}", "{job: train, disjoint_gpus: false}")).scenario);
}

TEST(ScenarioParse, UnsupportedVersion) {
  auto p = ParseScenarioText(Replace(kBase, "version: 1", "version: 2"));
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(p.issues[0].path, "version");
  EXPECT_EQ(p.issues[0].line, 1);
  EXPECT_THAT(p.issues[0].message, HasSubstr("unsupported version '2'"));
  p = ParseScenarioText(Replace(kBase, "version: 1\n", ""));
  EXPECT_THAT(IssueAt(p, "version").message, HasSubstr("missing"));
}

TEST(ScenarioParse, AllErrorsAtOnceInFileOrder) {
  std::string text = Replace(kBase, "gpus_per_node: 8", "gpus_per_nod: 8");
  text = Replace(text, "write_gbps: 2", "write_gbps: -1");
  text = Replace(text, "at_s: 100", "at_s: 9000");
  auto p = ParseScenarioText(text);
  ASSERT_GE(p.issues.size(), 3u) << Dump(p.issues);
  IssueAt(p, "jobs[0].gpus_per_nod");
  IssueAt(p, "storage.mounts[0].write_gbps");
  IssueAt(p, "timeline[0].at_s");
  EXPECT_TRUE(std::is_sorted(p.issues.begin(), p.issues.end(), [](const Issue& a, const Issue& b) { return a.line < b.line; }));
  auto r = ParseScenario(text, "x.yaml");
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("x.yaml:16:5: jobs[0].gpus_per_nod"));
}

TEST(ScenarioParse, BadDistributions) {
  auto p = ParseScenarioText(Replace(kBase, "compute_ms: [100, 200]", "compute_ms: [300, 200]"));
  EXPECT_THAT(IssueAt(p, "jobs[0].work.compute_ms").message, HasSubstr("above max"));
  p = ParseScenarioText(Replace(kBase, "compute_ms: [100, 200]", "compute_ms: {dist: normal, mean: 100, stddev: 10}"));
  EXPECT_THAT(Dump(p.issues), HasSubstr("jobs[0].work.compute_ms.min: required key is missing"));
  p = ParseScenarioText(Replace(kBase, "compute_ms: [100, 200]", "compute_ms: {dist: gauss, mean: 1}"));
  EXPECT_THAT(IssueAt(p, "jobs[0].work.compute_ms.dist").message, HasSubstr("uniform, normal"));
  p = ParseScenarioText(Replace(kBase, "compute_ms: [100, 200]", "compute_ms: {dist: uniform, min: 1, max: 2, mean: 3}"));
  IssueAt(p, "jobs[0].work.compute_ms.mean");
}

// ---- ranges ---------------------------------------------------------------------------

TEST(ScenarioResolve, SameSeedSameValuesWithinBounds) {
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  auto a = Resolve(*s, 7);
  auto b = Resolve(*s, 7);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(ResolvedToJson(*a), ResolvedToJson(*b));
  std::set<double> compute;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto r = Resolve(*s, seed);
    ASSERT_TRUE(r);
    double c = r->jobs[0].work.compute_ms;
    EXPECT_GE(c, 100);
    EXPECT_LE(c, 200);
    EXPECT_GE(r->jobs[0].loss.initial, 9);
    EXPECT_LE(r->jobs[0].loss.initial, 11);
    EXPECT_EQ(r->seed, std::optional<uint64_t>(seed));
    compute.insert(c);
  }
  EXPECT_GT(compute.size(), 190u) << "different seeds draw different values";
  // A distribution field stays a distribution: the simulator samples it per sequence.
  EXPECT_EQ(a->jobs[0].work.seq_len.dist, Dist::kLognormal);
}

TEST(ScenarioResolve, AddingFieldsOrJobsDoesNotChangeOtherDraws) {
  auto s1 = ParseScenario(kBase);
  std::string more = Replace(kBase, "timeline:", "  - {id: other, nodes: [n2], steps: [10, 20], work: {compute_ms: [1, 5]}}\ntimeline:");
  more = Replace(more, "loss: {model: decay, initial: [9, 11]}", "loss: {model: decay, initial: [9, 11], noise: [0.01, 0.05]}");
  auto s2 = ParseScenario(more);
  ASSERT_TRUE(s1 && s2) << (s2 ? "" : s2.error().ToString());
  for (uint64_t seed : {1ULL, 99ULL, 123456789ULL}) {
    auto a = Resolve(*s1, seed);
    auto b = Resolve(*s2, seed);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->jobs[0].work.compute_ms, b->jobs[0].work.compute_ms);
    EXPECT_EQ(a->jobs[0].loss.initial, b->jobs[0].loss.initial);
  }
}

TEST(ScenarioResolve, DocumentedPrngAndDistributions) {
  // Golden values from the published references, not from the functions under test: the FNV
  // test vectors (FNV-1a-64 of "" is the offset basis, of "a" 0xaf63dc4c8601ec8c) and
  // Vigna's splitmix64.c (first output from state 0).
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  uint64_t st = 0;
  EXPECT_EQ(SplitMix64(st), 0xe220a8397b1dcdafULL);
  // One whole draw, computed independently (a few lines of Python following
  // docs/scenarios.md): seed 7, "jobs[0].work.compute_ms" uniform [100, 200], and
  // "jobs[0].loss.initial" uniform [9, 11] of kBase.
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  auto r = Resolve(*s, 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->jobs[0].work.compute_ms, 147.93093584582016);
  EXPECT_DOUBLE_EQ(r->jobs[0].loss.initial, 10.532501070178741);

  Param<int64_t> u;
  u.dist = Dist::kUniform;
  u.min = 1;
  u.max = 3;
  std::set<double> seen;
  Rng r2(5);  // NOLINT
  for (int i = 0; i < 300; ++i) seen.insert(Sample(u, r2));
  EXPECT_EQ(seen, (std::set<double>{1, 2, 3})) << "integer uniform is inclusive";
  Param<double> n;
  n.dist = Dist::kNormal;
  n.mean = 10;
  n.stddev = 100;
  n.min = 0;
  n.max = 20;
  for (int i = 0; i < 300; ++i) {
    double v = Sample(n, r2);
    EXPECT_GE(v, 0);
    EXPECT_LE(v, 20);
  }
  Param<double> c;
  c.dist = Dist::kChoice;
  c.choices = {1, 2};
  c.weights = {0, 1};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Sample(c, r2), 2);
}

// ---- the expect block -------------------------------------------------------------------

// Simulator code takes a Scenario; it must have no way to see what the checker expects.
template <class S>
concept HasExpect = requires(S s) { s.expect; };
template <class S>
concept HasExpectations = requires(S s) { s.expectations; };
static_assert(!HasExpect<Scenario> && !HasExpectations<Scenario>);
static_assert(!HasExpect<ResolvedScenario> && !HasExpectations<ResolvedScenario>);

TEST(ScenarioExpect, OnlyTheSeparateEntryPointReadsIt) {
  std::string text = Replace(kBase, "  - verdict: none\n", R"(  - verdict: infrastructure
    cause: thermal_power
    subjects: {job: train, nodes: [n1], gpus: ["n1:3"], ranks: [3]}
    budget: {steps: 30}
)");
  auto s = ParseScenario(text);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  // The block changes nothing the simulator gets: the same file without it resolves the same.
  auto without = ParseScenario(Replace(kBase, "expect:\n  - verdict: none\n", ""));
  ASSERT_TRUE(without.has_value()) << without.error().ToString();
  EXPECT_EQ(ResolvedToJson(*Resolve(*s, 1)), ResolvedToJson(*Resolve(*without, 1)));
  auto x = ParseExpectationsText(text, &*s);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  ASSERT_EQ(x.expectations->findings.size(), 1u);
  const auto& f = x.expectations->findings[0];
  EXPECT_EQ(f.verdict, Verdict::kInfrastructure);
  EXPECT_EQ(f.cause, Cause::kThermalPower);
  EXPECT_EQ(f.gpus.at(0).index, 3);
  EXPECT_EQ(f.budget.unit, BudgetUnit::kSteps);
  EXPECT_EQ(f.budget.value, 30);
}

TEST(ScenarioExpect, BadExpectations) {
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s);
  auto bad = [&](std::string_view block) {
    return ParseExpectationsText(Replace(kBase, "  - verdict: none\n", block), &*s);
  };
  EXPECT_THAT(Dump(bad("  - {verdict: job, cause: data_imbalanse}\n").issues), HasSubstr("did you mean data_imbalance?"));
  EXPECT_THAT(Dump(bad("  - {verdict: job, cause: storage}\n").issues), HasSubstr("does not go with verdict job"));
  EXPECT_THAT(Dump(bad("  - {verdict: job, cause: hang, subjects: {gpus: [\"n1:8\"]}}\n").issues), HasSubstr("beyond node"));
  EXPECT_THAT(Dump(bad("  - {verdict: job, cause: hang, budget: {minutes: 3}}\n").issues), HasSubstr("steps, saves or seconds"));
  EXPECT_THAT(Dump(bad("  - {verdict: job, cause: hang, subject: {job: train}}\n").issues), HasSubstr("did you mean subjects?"));
  EXPECT_FALSE(ParseExpectationsText(Replace(kBase, "expect:\n  - verdict: none\n", "")).expectations);
}


// ---- names, paths and sizes (they become file paths, process names and labels) -----------

TEST(ScenarioNames, NamesAreRestricted) {
  EXPECT_TRUE(IsValidName("gpu-a01.rack_3"));
  EXPECT_TRUE(IsValidName(std::string(64, 'a')));
  for (std::string bad : {std::string(""), std::string("."), std::string(".."), std::string(65, 'a'), std::string("a b"),
                          std::string("a/b"), std::string("a\x1b[31m"), std::string("n\xc3\xa9")}) {
    EXPECT_FALSE(IsValidName(bad)) << bad;
  }
  auto p = ParseScenarioText(Replace(kBase, "  - name: n1\n", "  - name: \"..\"\n"));
  EXPECT_THAT(IssueAt(p, "nodes[0].name").message, HasSubstr("is not a name"));
  p = ParseScenarioText(Replace(kBase, "id: train", "id: \"../../etc\""));
  EXPECT_THAT(IssueAt(p, "jobs[0].id").message, HasSubstr("is not a name"));
  p = ParseScenarioText(Replace(kBase, "nodes: [n1]", "nodes: [\"n1 n2\"]"));
  IssueAt(p, "jobs[0].nodes[0]");
  p = ParseScenarioText(Replace(kBase, "name: shared,", "name: \"sh/ared\","));
  IssueAt(p, "storage.mounts[0].name");
  p = ParseScenarioText(Replace(kBase, "{name: mlx5_0,", "{name: \"mlx5 0\","));
  IssueAt(p, "nodes[0].nics[0].name");
  p = ParseScenarioText(Replace(kBase, "name: base", "name: " + std::string(65, 'x')));
  IssueAt(p, "name");
  p = ParseScenarioText(Replace(kBase, "  - {kind: thermal", "  - {id: \"a b\", kind: thermal"));
  IssueAt(p, "timeline[0].id");
  p = ParseScenarioText(Replace(kBase, "id: train\n", "id: train\n    user: \"r\\tana\"\n"));
  IssueAt(p, "jobs[0].user");
}

TEST(ScenarioNames, MountPathsAreAbsoluteAndNormalised) {
  EXPECT_EQ(PathProblem("/mnt/projects"), "");
  for (const char* bad : {"mnt/s", "/", "/a/../b", "/a/./b", "/a//b", "/a/", "/..", "/a b", "/a/\x01"}) {
    EXPECT_NE(PathProblem(bad), "") << bad;
    auto p = ParseScenarioText(Replace(kBase, "path: /mnt/s", fmt::format("path: \"{}\"", bad)));
    IssueAt(p, "storage.mounts[0].path");
  }
  EXPECT_NE(PathProblem("/" + std::string(kMaxPathBytes, 'a')), "");
}

TEST(ScenarioNames, CheckpointSizeIsCapped) {
  auto p = ParseScenarioText(Replace(kBase, "{every_steps: 50, mount: shared}", "{every_steps: 50, mount: shared, size_gib: 5000}"));
  EXPECT_THAT(IssueAt(p, "jobs[0].checkpoint.size_gib").message, HasSubstr("out of range [1e-06, 4096]"));
  EXPECT_TRUE(ParseScenarioText(Replace(kBase, "{every_steps: 50, mount: shared}", "{every_steps: 50, mount: shared, size_gib: 4096}")).scenario);
}

TEST(ScenarioNames, IssuesEscapeControlCharacters) {
  Issue i{"jobs[0].\x1b[31mx", 3, 4, "unknown key '\x1b[31mx\n'"};
  std::string s = i.ToString("f\x07.yaml");
  EXPECT_EQ(s.find('\x1b'), std::string::npos);
  EXPECT_EQ(s.find('\x07'), std::string::npos);
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s, "f\\x07.yaml:3:4: jobs[0].\\x1b[31mx: unknown key '\\x1b[31mx\\n'");
  // From a real file: an unknown key with an escape sequence comes back escaped.
  auto p = ParseScenarioText(Replace(kBase, "gpus_per_node: 8", "\"gpus\\e[2J\": 8"));
  EXPECT_THAT(Dump(p.issues), HasSubstr("gpus\\x1b[2J"));
  EXPECT_EQ(Dump(p.issues).find('\x1b'), std::string::npos);
}

TEST(ScenarioParse, TenantEndIsMinusOneOrATime) {
  std::string t = Replace(kBase, "timeline:", "tenants:\n  - {id: etl, mount: shared, write_gbps: 1, end_s: -0.5}\ntimeline:");
  EXPECT_THAT(IssueAt(ParseScenarioText(t), "tenants[0].end_s").message, HasSubstr("-1"));
  EXPECT_TRUE(ParseScenarioText(Replace(t, "end_s: -0.5", "end_s: -1")).scenario);
  EXPECT_TRUE(ParseScenarioText(Replace(t, "end_s: -0.5", "end_s: 50")).scenario);
}

TEST(ScenarioParse, XidDefaultsPerEventKind) {
  std::string t = Replace(kBase, "  - {kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}\n",
                          "  - {kind: ecc_uncorrectable, at_s: 100, node: n1, gpu: 3}\n"
                          "  - {kind: ecc_uncorrectable, at_s: 110, node: n1, gpu: 4, xid: 94}\n"
                          "  - {kind: gpu_lost, at_s: 120, node: n1, gpu: 5}\n"
                          "  - {kind: thermal_throttle, at_s: 130, node: n1, gpu: 6}\n");
  auto s = ParseScenario(t);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_EQ(s->timeline[0].xid, 48);
  EXPECT_EQ(s->timeline[1].xid, 94);
  EXPECT_EQ(s->timeline[2].xid, 79);
  EXPECT_EQ(s->timeline[3].xid, 0) << "no Xid for kinds that have none";
  auto r = Resolve(*s, 3);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->timeline[0].xid, 48);
}

TEST(ScenarioParse, EventIdsAreUnique) {
  std::string t = Replace(kBase, "  - {kind: thermal_throttle, at_s: 100,", "  - {id: hot, kind: thermal_throttle, at_s: 50, node: n1, gpu: 2}\n  - {id: hot, kind: thermal_throttle, at_s: 100,");
  EXPECT_THAT(IssueAt(ParseScenarioText(t), "timeline[1].id").message, HasSubstr("used twice"));
}


TEST(ScenarioExpect, SubjectsAreCheckedAgainstTheScenario) {
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s);
  auto issues = [&](std::string_view block) {
    return Dump(ParseExpectationsText(Replace(kBase, "  - verdict: none\n", block), &*s).issues);
  };
  // train has 1 node x 8 GPUs = ranks 0..7.
  EXPECT_THAT(issues("  - {verdict: job, cause: data_imbalance, subjects: {job: train, ranks: [77]}}\n"), HasSubstr("rank 77 but job 'train' has 8 ranks"));
  EXPECT_EQ(issues("  - {verdict: job, cause: data_imbalance, subjects: {job: train, ranks: [0, 7]}}\n"), "");
  EXPECT_THAT(issues("  - {verdict: job, cause: data_imbalance, subjects: {ranks: [1]}}\n"), HasSubstr("ranks need job"));
  EXPECT_THAT(issues("  - {verdict: infrastructure, cause: storage, subjects: {resource: nonexistent}}\n"), HasSubstr("'nonexistent' is not a mount"));
  for (const char* ok : {"shared", "n1/mlx5_0", "train"}) {
    EXPECT_EQ(issues(fmt::format("  - {{verdict: infrastructure, cause: storage, subjects: {{resource: {}}}}}\n", ok)), "") << ok;
  }
  EXPECT_THAT(issues("  - {verdict: infrastructure, cause: network, subjects: {resource: n1/mlx5_9}}\n"), HasSubstr("not a mount"));
}

TEST(ScenarioExpect, VerdictNoneStandsAloneAndKeysAreStrings) {
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s);
  auto issues = [&](std::string_view block) {
    return Dump(ParseExpectationsText(Replace(kBase, "  - verdict: none\n", block), &*s).issues);
  };
  EXPECT_THAT(issues("  - {verdict: none, cause: storage}\n"), HasSubstr("expect[0].cause: verdict none takes no cause"));
  EXPECT_THAT(issues("  - {verdict: none, budget: {steps: 3}}\n"), HasSubstr("expect[0].budget: verdict none"));
  EXPECT_THAT(issues("  - {verdict: job, cause: hang, [a]: 1}\n"), HasSubstr("keys must be plain strings"));
  EXPECT_THAT(issues("  - {verdict: job, cause: hang, subjects: {[a]: 1}}\n"), HasSubstr("keys must be plain strings"));
}

TEST(ScenarioExpect, BudgetStartingPoint) {
  auto s = ParseScenario(kBase);
  ASSERT_TRUE(s);
  auto parse = [&](const std::string& text, const Scenario* sc) { return ParseExpectationsText(text, sc); };
  auto with = [&](std::string_view budget) {
    return Replace(kBase, "  - verdict: none\n", fmt::format("  - {{verdict: job, cause: hang, subjects: {{job: train}}, budget: {}}}\n", budget));
  };
  // Not written: the first timeline event (kBase has one), else the start.
  auto x = parse(with("{steps: 10}"), &*s);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  EXPECT_EQ(x.expectations->findings[0].budget.from, BudgetFrom::kEvent);
  EXPECT_EQ(x.expectations->findings[0].budget.from_event, 0);
  std::string no_events = Replace(with("{steps: 10}"), "timeline:\n  - {kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}\n", "");
  auto s2 = ParseScenario(no_events);
  ASSERT_TRUE(s2) << s2.error().ToString();
  x = parse(no_events, &*s2);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  EXPECT_EQ(x.expectations->findings[0].budget.from, BudgetFrom::kStart);
  EXPECT_EQ(parse(with("{steps: 10}"), nullptr).expectations->findings[0].budget.from, BudgetFrom::kDefault);

  x = parse(with("{saves: 2, from: start}"), &*s);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  EXPECT_EQ(x.expectations->findings[0].budget.from, BudgetFrom::kStart);
  EXPECT_EQ(x.expectations->findings[0].budget.unit, BudgetUnit::kSaves);
  x = parse(with("{seconds: 5, from: \"step:40\"}"), &*s);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  EXPECT_EQ(x.expectations->findings[0].budget.from, BudgetFrom::kStep);
  EXPECT_EQ(x.expectations->findings[0].budget.from_step, 40);
  // By id.
  std::string named = Replace(with("{steps: 3, from: \"event:hot\"}"), "  - {kind: thermal_throttle", "  - {id: hot, kind: thermal_throttle");
  auto s3 = ParseScenario(named);
  ASSERT_TRUE(s3) << s3.error().ToString();
  x = parse(named, &*s3);
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  EXPECT_EQ(x.expectations->findings[0].budget.from_event, 0);

  EXPECT_THAT(Dump(parse(with("{steps: 3, from: \"event:5\"}"), &*s).issues), HasSubstr("timeline has 1 event"));
  EXPECT_THAT(Dump(parse(with("{steps: 3, from: \"event:nope\"}"), &*s).issues), HasSubstr("no timeline event with id 'nope'"));
  EXPECT_THAT(Dump(parse(with("{steps: 3, from: \"step:500\"}"), &*s).issues), HasSubstr("beyond job 'train'"));
  EXPECT_THAT(Dump(parse(with("{steps: 3, from: later}"), &*s).issues), HasSubstr("expected start, event"));
  EXPECT_THAT(Dump(parse(with("{steps: 3, saves: 2}"), &*s).issues), HasSubstr("one budget unit"));
  EXPECT_THAT(Dump(parse(with("{from: start}"), &*s).issues), HasSubstr("expected {steps|saves|seconds"));
  std::string no_job = Replace(with("{steps: 3, from: \"step:5\"}"), "subjects: {job: train}, ", "");
  EXPECT_THAT(Dump(parse(no_job, &*s).issues), HasSubstr("needs subjects.job"));
}

TEST(ScenarioExpect, ConfirmationByARerun) {
  std::string text = Replace(kBase, "timeline:", "  - {id: rerun, nodes: [n2], steps: 100, rerun_of: {job: train}}\ntimeline:");
  auto s = ParseScenario(text);
  ASSERT_TRUE(s) << s.error().ToString();
  auto parse = [&](std::string_view block) { return ParseExpectationsText(Replace(text, "  - verdict: none\n", block), &*s); };
  auto x = parse("  - {verdict: job, cause: recipe_numerics, provisional: true, subjects: {job: train}, confirm: {job: rerun, budget: {steps: 5, from: \"step:60\"}}}\n");
  ASSERT_TRUE(x.expectations) << Dump(x.issues);
  const auto& f = x.expectations->findings.at(0);
  ASSERT_TRUE(f.confirm);
  EXPECT_EQ(f.confirm->job, "rerun");
  EXPECT_EQ(f.confirm->budget.from_step, 60);
  EXPECT_THAT(Dump(parse("  - {verdict: job, cause: recipe_numerics, subjects: {job: train}, confirm: {job: rerun}}\n").issues),
              HasSubstr("confirm goes with provisional: true"));
  EXPECT_THAT(Dump(parse("  - {verdict: job, cause: recipe_numerics, provisional: true, subjects: {job: rerun}, confirm: {job: train}}\n").issues),
              HasSubstr("is not a rerun_of the subject job"));
}


TEST(ScenarioParse, FaultEffectsTieCauseToJob) {
  auto with = [&](std::string_view event) {
    return Replace(kBase, "  - {kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}\n", event);
  };
  auto s = ParseScenario(with("  - {kind: ecc_uncorrectable, at_s: 100, node: n1, gpu: 3, effect: nan}\n"
                              "  - {kind: silent_corruption, at_step: 40, job: train, node: n1, gpu: 5, effect: loss_spike}\n"));
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_EQ(s->timeline[0].effect, FaultEffect::kNan);
  EXPECT_EQ(s->timeline[0].xid, 48);
  EXPECT_EQ(s->timeline[1].kind, EventKind::kSilentCorruption);
  EXPECT_EQ(s->timeline[1].effect, FaultEffect::kLossSpike);
  EXPECT_EQ(ParseScenario(with("  - {kind: xid, at_s: 1, node: n1, gpu: 0, xid: 31}\n"))->timeline[0].effect, FaultEffect::kNone);
  EXPECT_THAT(Dump(ParseScenarioText(with("  - {kind: silent_corruption, at_s: 1, node: n1, gpu: 0}\n")).issues), HasSubstr("needs effect"));
  IssueAt(ParseScenarioText(with("  - {kind: silent_corruption, at_s: 1, node: n1, gpu: 0, effect: none}\n")), "timeline[0].effect");
  EXPECT_THAT(IssueAt(ParseScenarioText(with("  - {kind: thermal_throttle, at_s: 1, node: n1, gpu: 0, effect: nan}\n")), "timeline[0].effect").message,
              HasSubstr("does not apply"));
  // n2 runs nothing in kBase.
  EXPECT_THAT(IssueAt(ParseScenarioText(with("  - {kind: gpu_lost, at_s: 1, node: n2, gpu: 0, effect: crash}\n")), "timeline[0].effect").message,
              HasSubstr("touch nothing"));
  EXPECT_THAT(IssueAt(ParseScenarioText(with("  - {kind: xid, at_s: 1, node: n1, gpu: 0, xid: 31, effect: boom}\n")), "timeline[0].effect").message,
              HasSubstr("none, nan, loss_spike, crash"));
}


TEST(ScenarioHostile, StrictUtf8AndNumbers) {
  for (std::string bad : {std::string("\xc0\xaf"), std::string("\xe0\x80\xaf"), std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"),
                          std::string("\xf5\x80\x80\x80"), std::string("\xf0\x80\x80\xaf")}) {
    auto p = ParseScenarioText(std::string(kBase) + "# " + bad + "\n");
    ASSERT_EQ(p.issues.size(), 1u) << Dump(p.issues);
    EXPECT_THAT(p.issues[0].message, HasSubstr("not UTF-8"));
  }
  EXPECT_TRUE(ParseScenarioText(std::string(kBase) + "# \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xf0\x9f\x98\x80 \xef\xbf\xbd\n").scenario) << "Arabic, emoji, U+FFFD";
  for (const char* seed : {"\"  +7\"", "\"+7\"", "\"7 \"", "-1", "18446744073709551616", "0x10"}) {
    auto p = ParseScenarioText(Replace(kBase, "duration_s: 600", fmt::format("duration_s: 600\nseed: {}", seed)));
    IssueAt(p, "seed");
  }
  EXPECT_EQ(*ParseScenario(Replace(kBase, "duration_s: 600", "duration_s: 600\nseed: 18446744073709551615"))->seed, UINT64_MAX);
  for (const char* bad : {"\"1,5\"", "\" 5\"", "0x10", "inf", "nan", "1e999", "++5"}) {
    IssueAt(ParseScenarioText(Replace(kBase, "steps: 100", fmt::format("steps: {}", bad))), "jobs[0].steps");
  }
  EXPECT_EQ(ParseScenario(Replace(kBase, "steps: 100", "steps: +100"))->jobs[0].steps.value, 100);
  EXPECT_EQ(ParseScenario(Replace(kBase, "steps: 100", "steps: 1e2"))->jobs[0].steps.value, 100);
}

TEST(ScenarioParse, PowerCapWithinTheModelsRange) {
  auto with = [&](std::string_view w) {
    return Replace(kBase, "{kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}",
                   fmt::format("{{kind: power_cap, at_s: 100, node: n1, gpu: 3, power_limit_w: {}}}", w));
  };
  EXPECT_TRUE(ParseScenarioText(with("450")).scenario);
  EXPECT_TRUE(ParseScenarioText(with("[200, 700]")).scenario);
  EXPECT_THAT(IssueAt(ParseScenarioText(with("800")), "timeline[0].power_limit_w").message, HasSubstr("200-700 W"));
  IssueAt(ParseScenarioText(with("[150, 400]")), "timeline[0].power_limit_w");
}


TEST(ScenarioParse, ParallelismAndCommunicatorGroups) {
  // train: 1 node x 8 GPUs = 8 ranks.
  auto with = [&](std::string_view par) { return Replace(kBase, "    checkpoint: {every_steps: 50", fmt::format("{}    checkpoint: {{every_steps: 50", par)); };
  auto s = ParseScenario(with("    parallel: {tp: 4, pp: 2}\n    collectives:\n      - {op: all_reduce, bytes: 1e6, group: tp}\n"
                              "      - {op: send_recv, bytes: 1e6, group: pp}\n"));
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->jobs[0].parallel.tp, 4);
  EXPECT_EQ(s->jobs[0].collectives[0].group, CommGroup::kTp);
  EXPECT_EQ(s->jobs[0].collectives[1].group, CommGroup::kPp);
  EXPECT_EQ(s->jobs[0].parallel.dp, 0) << "derived by the simulator: 8 / (4 x 2) = 1";
  EXPECT_THAT(IssueAt(ParseScenarioText(with("    parallel: {tp: 3}\n")), "jobs[0].parallel").message, HasSubstr("does not divide the job's 8 ranks"));
  EXPECT_THAT(IssueAt(ParseScenarioText(with("    parallel: {tp: 2, dp: 3}\n")), "jobs[0].parallel.dp").message, HasSubstr("is dp 4, not 3"));
  EXPECT_THAT(IssueAt(ParseScenarioText(with("    parallel: {tp: 2}\n    collectives: [{op: all_reduce, bytes: 1e6, group: pp}]\n")),
                      "jobs[0].collectives[0].group").message, HasSubstr("nothing to communicate"));
  IssueAt(ParseScenarioText(with("    parallel: {pp: 2}\n    collectives: [{op: send_recv, bytes: 1e6, group: dp}]\n")), "jobs[0].collectives[0].group");
  // Two nodes x 4 GPUs with tp 8 would put a tensor-parallel group across nodes.
  std::string two = Replace(with("    parallel: {tp: 8}\n"), "nodes: [n1]\n    gpus_per_node: 8", "nodes: [n1, n2]\n    gpus_per_node: 4");
  EXPECT_THAT(IssueAt(ParseScenarioText(two), "jobs[0].parallel.tp").message, HasSubstr("stays inside a node"));
}

TEST(ScenarioParse, MemoryAndServingLimits) {
  std::string srv = Replace(kBase, "timeline:", "inference:\n  - {id: chat, node: n1, gpus: 8, tensor_parallel: 2, model_gib: 140}\ntimeline:");
  auto p = ParseScenario(srv);
  ASSERT_TRUE(p) << p.error().ToString();
  EXPECT_EQ(p->inference[0].model_gib.value, 140);
  EXPECT_EQ(p->inference[0].slo_ttft_ms.value, 2000);
  EXPECT_THAT(IssueAt(ParseScenarioText(Replace(srv, "tensor_parallel: 2", "tensor_parallel: 1")), "inference[0].model_gib").message,
              HasSubstr("no room for KV"));
  EXPECT_TRUE(ParseScenarioText(Replace(srv, "node: n1", "node: n2")).scenario) << "n2 has H200s (140 GiB)";
  auto oom = ParseScenario(Replace(kBase, "work: {compute_ms", "work: {memory_gib: 120, compute_ms"));
  ASSERT_TRUE(oom) << oom.error().ToString();
  EXPECT_EQ(oom->jobs[0].work.memory_gib.value, 120) << "above the GPU's memory is allowed: an out-of-memory scenario";
}


TEST(ScenarioParse, RampsAndJitterBursts) {
  auto with = [&](std::string_view e) { return Replace(kBase, "{kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, clock_factor: 0.6}", e); };
  auto s = ParseScenario(with("{kind: ib_link_degrade, at_s: 100, node: n1, nic: mlx5_0, bandwidth_factor: 0.5, ramp_s: [60, 120], duration_s: 300}"));
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->timeline[0].ramp_s.max, 120);
  EXPECT_THAT(IssueAt(ParseScenarioText(with("{kind: storage_slowdown, at_s: 100, mount: shared, ramp_s: 500, duration_s: 300}")), "timeline[0].ramp_s").message,
              HasSubstr("longer than the event"));
  EXPECT_TRUE(ParseScenarioText(with("{kind: storage_slowdown, at_s: 100, mount: shared, ramp_s: 500}")).scenario) << "duration 0 = until the end";
  IssueAt(ParseScenarioText(with("{kind: thermal_throttle, at_s: 100, node: n1, gpu: 3, ramp_s: 5}")), "timeline[0].ramp_s");
  auto b = ParseScenario(Replace(kBase, "timeline:", "background: {host_jitter_burst_ms: [50, 200], host_jitter_bursts_per_min: 4}\ntimeline:"));
  ASSERT_TRUE(b) << b.error().ToString();
  auto r = Resolve(*b, 11);
  ASSERT_TRUE(r);
  EXPECT_GE(r->background.host_jitter_burst_ms, 50);
  EXPECT_LE(r->background.host_jitter_burst_ms, 200);
  EXPECT_EQ(r->background.host_jitter_bursts_per_min, 4);
}


TEST(ScenarioParse, QuickOverrides) {
  std::string q = Replace(kBase, "timeline:", "quick: {time_compression: 4, duration_s: 300}\ntimeline:");
  auto s = ParseScenario(q);
  ASSERT_TRUE(s) << s.error().ToString();
  Scenario quick = QuickVariant(*s);
  EXPECT_EQ(quick.duration_s.value, 300);
  EXPECT_EQ(quick.time_compression.value, 4);
  EXPECT_EQ(s->duration_s.value, 600) << "the full run is unchanged";
  Scenario same = QuickVariant(*ParseScenario(kBase));
  EXPECT_EQ(same.duration_s.value, 600);
  EXPECT_EQ(same.time_compression.value, 1);
  EXPECT_THAT(IssueAt(ParseScenarioText(Replace(q, "duration_s: 300", "duration_s: 90")), "timeline[0].at_s").message, HasSubstr("quick run ends"));
  IssueAt(ParseScenarioText(Replace(q, "duration_s: 300", "duration_s: 900")), "quick.duration_s");
}

// ---- hostile input ------------------------------------------------------------------------

TEST(ScenarioHostile, HugeFileRefused) {
  std::string big(kBase);
  big += "# " + std::string(kMaxFileBytes, 'x') + "\n";
  auto p = ParseScenarioText(big);
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_THAT(p.issues[0].message, HasSubstr("limit"));
}

TEST(ScenarioHostile, DeepNestingRefused) {
  std::string deep = "version: 1\nname: x\nnodes: " + std::string(50000, '[') + std::string(50000, ']') + "\n";
  auto p = ParseScenarioText(deep);
  ASSERT_FALSE(p.scenario);
  EXPECT_THAT(Dump(p.issues), HasSubstr("nesting deeper"));
  std::string deep_map = "version: 1\n";
  for (int i = 0; i < 200; ++i) deep_map += std::string(i * 2, ' ') + "k:\n";
  p = ParseScenarioText(deep_map);
  ASSERT_FALSE(p.scenario);
  EXPECT_THAT(Dump(p.issues), HasSubstr("nesting deeper")) << "refused for its depth, not for the unknown key";
  EXPECT_THAT(Dump(ParseExpectationsText(deep_map + std::string(400, ' ') + "expect: [{verdict: none}]\n").issues), HasSubstr("nesting deeper"));
}

TEST(ScenarioHostile, AliasBombRefused) {
  std::string bomb = "version: 1\nname: bomb\na: &a [x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'z'; ++c, ++prev) bomb += fmt::format("{0}: &{0} [*{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}]\n", c, prev);
  auto p = ParseScenarioText(bomb);
  ASSERT_FALSE(p.scenario);
  EXPECT_THAT(Dump(p.issues), HasSubstr("not allowed"));
  // With an expect block the block itself is fine; the aliases are what is refused.
  auto x = ParseExpectationsText(bomb + "expect: [{verdict: none}]\n");
  EXPECT_FALSE(x.expectations);
  EXPECT_THAT(Dump(x.issues), HasSubstr("not allowed"));
}

TEST(ScenarioHostile, GarbageNeverCrashes) {
  const std::string inputs[] = {"", "\0\0\0", "- a\n- b\n", "version: 1\n---\nversion: 1\n", "{{{{", "version: [1\n",
                                "version: 1\nname: x\nduration_s: 1\nnodes: {a: 1}\n", "version: 1\nname: x\nduration_s: 1\njobs: [1, 2]\n",
                                "version: 1\nname: x\nduration_s: 1\n? [a]\n: b\n", "version: 1\nname: x\nname: y\nduration_s: 5\n",
                                std::string("version: 1\nname: \xff\xfe\n")};
  for (const auto& in : inputs) {
    auto p = ParseScenarioText(in);
    EXPECT_FALSE(p.scenario.has_value()) << in;
    EXPECT_FALSE(p.issues.empty()) << in;
    (void)ParseExpectationsText(in);
  }
  // Every prefix of a valid file: no crash, an answer either way.
  for (size_t n = 0; n < kBase.size(); n += 7) (void)ParseScenarioText(kBase.substr(0, n));
}

// Found by fuzz/scenario_fuzz: a resume from a job whose checkpoint lacks every_steps (already
// an error) must not divide by zero; bytes that are not UTF-8 are refused with their place.
TEST(ScenarioHostile, FuzzRegressions) {
  std::string text = Replace(kBase, "checkpoint: {every_steps: 50, mount: shared}", "checkpoint: {mount: shared}");
  text = Replace(text, "timeline:", "  - {id: r, nodes: [n2], steps: 100, resume_from: {job: train, step: 10}}\ntimeline:");
  auto p = ParseScenarioText(text);
  EXPECT_THAT(IssueAt(p, "jobs[0].checkpoint.every_steps").message, HasSubstr("missing"));
  p = ParseScenarioText(Replace(kBase, "name: base", "name: ba\xffse"));
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(p.issues[0].line, 2);
  EXPECT_EQ(p.issues[0].column, 9);
  EXPECT_THAT(p.issues[0].message, HasSubstr("not UTF-8"));
}

TEST(ScenarioModels, RealLimits) {
  EXPECT_EQ(ModelSpec(GpuModel::kH100Sxm).power_limit_w, 700);
  EXPECT_EQ(ModelSpec(GpuModel::kH100Sxm).max_sm_clock_mhz, 1980);
  EXPECT_GT(ModelSpec(GpuModel::kH200Sxm).memory_bytes, ModelSpec(GpuModel::kH100Sxm).memory_bytes);
  EXPECT_EQ(ModelSpec(GpuModel::kH200Sxm).nvlink_links, 18);
}

}  // namespace
}  // namespace ithbat::scenario
