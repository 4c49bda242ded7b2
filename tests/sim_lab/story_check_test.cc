// The lab judges the world before the engine (issue 27): a world whose scripted fault could not
// fire before its end, whose job never reached the step its loss model scripts, that stopped at
// its cap, that ran far under its pace or whose GPUs starved though its story loads no host is
// INVALID — never PASS, MISSED or WRONG — and the four words come out of LabResult as the
// checks say. The worlds here are world.json documents written by hand, the scenarios YAML
// written here: no scenario file of the repository is named.
#include <gtest/gtest.h>

#include <fmt/core.h>
#include <fmt/format.h>

#include "lab/lab.h"
#include "lab/story_check.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"
#include "synthetic_stores.h"

namespace ithbat::sim::lab {
namespace {

// One job of 40 steps whose Xid fires at step 30, and whose loss explodes at step 35.
constexpr const char* kScenario = R"(
version: 1
name: story-test
duration_s: 100
nodes:
  - name: n1
    gpus: {count: 2}
jobs:
  - id: train
    nodes: [n1]
    gpus_per_node: 2
    steps: 40
    work: {compute_ms: 1000}
    loss: {model: drift_explode, drift_start_step: 20, explode_step: 35}
timeline:
  - {id: xid-at-30, kind: xid, node: n1, gpu: 1, xid: 79, at_step: 30, job: train}
expect:
  - verdict: job
    cause: recipe_numerics
    subjects: {job: train}
    budget: {steps: 5, from: "step:35"}
)";

struct Parsed {
  scenario::ResolvedScenario resolved;
  scenario::Expectations expect;
};

Parsed Parse(const std::string& text) {
  auto parsed = scenario::ParseScenarioText(text);
  EXPECT_TRUE(parsed.scenario.has_value()) << (parsed.issues.empty() ? "" : parsed.issues.front().ToString());
  auto expect = scenario::ParseExpectationsText(text, &*parsed.scenario);
  EXPECT_TRUE(expect.expectations.has_value());
  auto resolved = scenario::Resolve(*parsed.scenario, 1);
  EXPECT_TRUE(resolved.has_value());
  return {*resolved, *expect.expectations};
}

// world.json of a run that reached `last` steps of 40 (one step a second, planned 1 s each when
// `planned_ms` > 0), the Xid fired after step `xid_step` (-1: never), stopped for `stop_reason`.
std::string WorldJson(int last, int xid_step, const std::string& stop_reason, double achieved_s = 1.0,
                      int64_t planned_ns = 1'000'000'000) {
  const int64_t t0 = kT0;
  std::vector<std::string> steps;
  for (int s = 1; s <= last; ++s) {
    const int64_t end = t0 + static_cast<int64_t>((10 + s * achieved_s) * 1e9);
    steps.push_back(fmt::format(R"({{"step":{},"start_ns":{},"end_ns":{},"planned_ns":{}}})", s,
                                end - static_cast<int64_t>(achieved_s * 1e9), end, planned_ns));
  }
  const int64_t ended = t0 + static_cast<int64_t>((12 + last * achieved_s) * 1e9);
  const int64_t xid_at = xid_step >= 0 ? t0 + static_cast<int64_t>((10 + xid_step * achieved_s) * 1e9) : 0;
  return fmt::format(R"({{"format":1,"scenario":"story-test","seed":1,"time_compression":1,"started_ns":{},
    "ended_ns":{},"stop_reason":"{}","duration_real_s":100,
    "story":{{"cap_real_s":300,"milestones":[],"untold":{}}},
    "nodes":[{{"name":"n1","agent_url":"","gpus":[{{"index":0,"uuid":"GPU-0"}},{{"index":1,"uuid":"GPU-1"}}]}}],
    "jobs":[{{"id":"train","started_ns":{},"ended_ns":{},"scripted_start_ns":{},"held":[],
             "ranks":[{{"rank":0,"local_rank":0,"node":"n1","gpu":0,"pid":100}},{{"rank":1,"local_rank":1,"node":"n1","gpu":1,"pid":101}}],
             "steps":[{}],"saves":[]}}],
    "events":[{{"id":"xid-at-30","kind":"xid","node":"n1","gpu":1,"job":"train","started_ns":{},"ended_ns":0,"fired_step":{}}}]}})",
                     t0, ended, stop_reason,
                     stop_reason == "story_cap" ? R"(["event xid-at-30 at step 30 of job train"])" : "[]", t0 + kS,
                     ended, t0, fmt::join(steps, ","), xid_at, xid_step);
}

StoryCheck Check(const std::string& world_json, const Parsed& p) {
  auto world = ParseWorld(world_json);
  EXPECT_TRUE(world.has_value()) << world.error().message;
  Stores stores;
  stores.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, {{"gpu_uuid", "GPU-0"}}, {0.9, 0.9});
  const Evidence evidence = stores.Take();
  return CheckStory(*world, evidence, p.resolved, p.expect);
}

bool Mentions(const std::vector<std::string>& lines, std::string_view what) {
  for (const auto& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(StoryCheck, AWholeStoryIsValidAndSaysWhatHappened) {
  const Parsed p = Parse(kScenario);
  const StoryCheck s = Check(WorldJson(40, 30, "jobs_ended"), p);
  EXPECT_TRUE(s.ok()) << fmt::format("{}", fmt::join(s.invalid, "; "));
  EXPECT_TRUE(s.uncovered.empty());
  EXPECT_TRUE(Mentions(s.happened, "xid-at-30")) << fmt::format("{}", fmt::join(s.happened, "; "));
  EXPECT_TRUE(Mentions(s.happened, "train steps 1–40 (drift 20, explosion 35, NaN 40)"))
      << fmt::format("{}", fmt::join(s.happened, "; "));
  ASSERT_TRUE(s.min_pace.has_value());
  EXPECT_NEAR(*s.min_pace, 1.0, 0.01);
}

// The issue's case: the world ended before the fault could fire.
TEST(StoryCheck, AFaultThatNeverFiredMakesTheWorldInvalidWithTheReason) {
  const Parsed p = Parse(kScenario);
  const StoryCheck s = Check(WorldJson(25, -1, "duration"), p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.invalid, "event xid-at-30 (at step 30 of job train) never fired: job train reached step 25"))
      << fmt::format("{}", fmt::join(s.invalid, "; "));
  // The loss model's explosion (step 35) was not reached either, and the budget's window is open.
  EXPECT_TRUE(Mentions(s.invalid, "job train reached step 25 of the 35 where the loss explodes"));
  EXPECT_FALSE(s.uncovered.empty());
}

TEST(StoryCheck, AWorldStoppedAtItsCapSaysWhatWasUntold) {
  const Parsed p = Parse(kScenario);
  const StoryCheck s = Check(WorldJson(28, -1, "story_cap"), p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.invalid, "stopped at its cap")) << fmt::format("{}", fmt::join(s.invalid, "; "));
  EXPECT_TRUE(Mentions(s.invalid, "event xid-at-30 at step 30 of job train"));
}

TEST(StoryCheck, AWorldFarUnderItsPaceIsInvalid) {
  const Parsed p = Parse(kScenario);
  // Every step took 2.5 s where the script asks 1 s: pace 0.4.
  const StoryCheck s = Check(WorldJson(40, 30, "jobs_ended", 2.5), p);
  ASSERT_FALSE(s.ok());
  ASSERT_TRUE(s.min_pace.has_value());
  EXPECT_NEAR(*s.min_pace, 0.4, 0.01);
  EXPECT_TRUE(Mentions(s.invalid, "at 0.40× its pace")) << fmt::format("{}", fmt::join(s.invalid, "; "));
  // At 0.8 the world is valid: collectives and the machine take a little of every step.
  EXPECT_TRUE(Check(WorldJson(40, 30, "jobs_ended", 1.25), p).ok());
}

TEST(StoryCheck, WithoutPlannedStepsThePaceIsNotJudged) {
  const Parsed p = Parse(kScenario);
  const StoryCheck s = Check(WorldJson(40, 30, "jobs_ended", 3.0, 0), p);
  EXPECT_TRUE(s.ok());
  EXPECT_FALSE(s.min_pace.has_value());
}

TEST(StoryCheck, BudgetMilestonesSayHowFarTheStoryMustGo) {
  const Parsed p = Parse(kScenario);
  EXPECT_EQ(BudgetMilestones(p.resolved, p.expect), (std::vector<std::string>{"job=train,step=40"}));
  const Parsed q = Parse(R"(
version: 1
name: story-test-2
duration_s: 100
nodes: [{name: n1, gpus: {count: 2}}]
storage:
  mounts: [{name: m, path: /m, kind: shared_nfs, nodes: [n1]}]
jobs:
  - {id: train, nodes: [n1], gpus_per_node: 2, steps: 400, start_s: 5, checkpoint: {every_steps: 50, mount: m}}
timeline:
  - {id: slow, kind: storage_slowdown, mount: m, at_s: 40, bandwidth_factor: 0.1}
expect:
  - {verdict: infrastructure, cause: storage, subjects: {job: train, resource: m}, budget: {saves: 2, from: "event:slow"}}
  - {verdict: job, cause: data_imbalance, subjects: {job: train}, budget: {steps: 30}}
  - {verdict: infrastructure, cause: network, subjects: {job: train}, budget: {seconds: 30, from: start}}
)");
  EXPECT_EQ(BudgetMilestones(q.resolved, q.expect),
            (std::vector<std::string>{"event=slow,job=train,saves=2", "event=slow,job=train,steps=30", "seconds=45"}));
}

// The four words, from the checks' results.
TEST(LabOutcome, InvalidBeatsEverythingAndAnOpenWindowExcusesOnlyAMiss) {
  LabResult r;
  r.check = ScenarioCheck{};
  r.check->findings.push_back(FindingCheck{});
  r.require_diagnosis = true;
  r.diagnosis = DiagnosisCheck{};
  r.story = StoryCheck{};
  EXPECT_EQ(r.outcome(), Outcome::kPass);
  EXPECT_EQ(OutcomeName(r.outcome()), "PASS");

  ExpectedDiagnosis missed;
  missed.expected = "job: recipe_numerics (job train)";
  r.diagnosis->expected.push_back(missed);
  EXPECT_EQ(r.outcome(), Outcome::kMissed);
  r.story->uncovered.push_back("the world ended 3 steps into its budget of 5");
  EXPECT_EQ(r.outcome(), Outcome::kInvalid);  // the engine was not given its time
  r.story->uncovered.clear();

  r.diagnosis->diagnoses.push_back(Diagnosis{});
  r.diagnosis->extra.push_back(0);
  EXPECT_EQ(r.outcome(), Outcome::kWrong);  // a verdict the story does not support

  r.story->invalid.push_back("event x never fired");
  EXPECT_EQ(r.outcome(), Outcome::kInvalid);
  EXPECT_EQ(OutcomeName(r.outcome()), "INVALID");

  LabResult broken;
  broken.error = "ithbat-sim exited with 1";
  EXPECT_EQ(broken.outcome(), Outcome::kError);
}

}  // namespace
}  // namespace ithbat::sim::lab
