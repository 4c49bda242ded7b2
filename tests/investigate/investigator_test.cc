// The investigator's rules (docs/diagnoses.md, "Rules"), the cost, and schema v1.
#include <gtest/gtest.h>

#include "investigate/causes.h"
#include "investigate/diagnosis_json.h"
#include "investigate/impact.h"
#include "investigate/investigator.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::investigate {
namespace {

using testutil::kS;
using testutil::kT0;

Evidence Ev(std::string_view collector, std::string signal = "s") {
  Evidence e;
  e.signal = std::move(signal);
  e.collector = std::string(collector);
  e.subject = "gpu0";
  e.observed = 2;
  e.expected = 1;
  e.note = "observed twice the baseline";
  e.window = {kT0, kT0 + 10 * kS};
  return e;
}

Finding MakeFinding(Cause cause, Verdict verdict, std::string job, std::vector<Evidence> ev, TimeNs start = kT0) {
  Finding f;
  f.detector = "test";
  f.cause = cause;
  f.verdict = verdict;
  f.subjects.job = std::move(job);
  f.evidence = std::move(ev);
  f.window = {start, start + 10 * kS};
  f.provable_at = start + 5 * kS;
  f.summary = "something happened";
  return f;
}

TEST(Diagnose, AVerdictNeedsTwoCollectors) {
  detect::FleetView v;
  auto one = Diagnose({MakeFinding(Cause::kStorage, Verdict::kInfrastructure, "j", {Ev("sched_io"), Ev("sched_io", "t")})},
                      v, {}, kT0, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].verdict, Verdict::kInconclusive);
  EXPECT_EQ(one[0].cause, Cause::kStorage);  // the suspected cause stays named
  auto two = Diagnose({MakeFinding(Cause::kStorage, Verdict::kInfrastructure, "j", {Ev("sched_io"), Ev("probes")})}, v,
                      {}, kT0, {});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].verdict, Verdict::kInfrastructure);
  EXPECT_EQ(two[0].fix, InfoOf(Cause::kStorage).fix);
  EXPECT_EQ(two[0].opened_at, kT0 + 5 * kS);
}

TEST(Diagnose, ADeviceFaultExplainsTheDivergenceThatFollowsIt) {
  detect::FleetView v;
  Finding fault = MakeFinding(Cause::kGpuHardware, Verdict::kInfrastructure, "j", {Ev("gpu"), Ev("kmsg")}, kT0 + 10 * kS);
  Finding nan = MakeFinding(Cause::kRecipeNumerics, Verdict::kJob, "j", {Ev("joblog"), Ev("gpu", "ecc")}, kT0 + 11 * kS);
  nan.provisional = true;
  Finding other_job = MakeFinding(Cause::kRecipeNumerics, Verdict::kJob, "k", {Ev("joblog"), Ev("gpu")}, kT0 + 11 * kS);
  auto ds = Diagnose({fault, nan, other_job}, v, {}, kT0 + 30 * kS, {});
  ASSERT_EQ(ds.size(), 2u);
  const Diagnosis* hw = ds[0].cause == Cause::kGpuHardware ? &ds[0] : &ds[1];
  const Diagnosis* rn = ds[0].cause == Cause::kGpuHardware ? &ds[1] : &ds[0];
  EXPECT_EQ(hw->subjects.job, "j");
  EXPECT_EQ(hw->evidence.size(), 4u);  // the divergence's evidence joined as consequences
  EXPECT_NE(hw->evidence.back().note.find("consequence"), std::string::npos);
  EXPECT_EQ(rn->subjects.job, "k");  // another job's divergence is its own incident
}

TEST(Diagnose, ADivergenceBeforeTheFaultIsNotItsConsequence) {
  detect::FleetView v;
  Finding fault = MakeFinding(Cause::kGpuHardware, Verdict::kInfrastructure, "j", {Ev("gpu"), Ev("kmsg")}, kT0 + 60 * kS);
  Finding nan = MakeFinding(Cause::kRecipeNumerics, Verdict::kJob, "j", {Ev("joblog"), Ev("gpu")}, kT0);
  EXPECT_EQ(Diagnose({fault, nan}, v, {}, kT0 + 90 * kS, {}).size(), 2u);
}

TEST(Diagnose, OneMountHurtingTwoJobsIsOneIncident) {
  detect::FleetView v;
  Finding a = MakeFinding(Cause::kStorage, Verdict::kInfrastructure, "a", {Ev("sched_io"), Ev("probes")});
  Finding b = MakeFinding(Cause::kStorage, Verdict::kInfrastructure, "b", {Ev("sched_io"), Ev("probes")}, kT0 + kS);
  a.subjects.resource = b.subjects.resource = "/mnt/projects";
  a.subjects.nodes = {"n1"};
  b.subjects.nodes = {"n2"};
  auto ds = Diagnose({a, b}, v, {}, kT0 + 30 * kS, {});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].subjects.job, "a");
  EXPECT_EQ(ds[0].subjects.other_jobs, std::vector<std::string>{"b"});
  EXPECT_EQ(ds[0].subjects.nodes, (std::vector<std::string>{"n1", "n2"}));
  // A job-side cause is never merged across jobs.
  Finding c = MakeFinding(Cause::kCheckpointStrategy, Verdict::kJob, "a", {Ev("sched_io"), Ev("probes")});
  Finding d = MakeFinding(Cause::kCheckpointStrategy, Verdict::kJob, "b", {Ev("sched_io"), Ev("probes")});
  c.subjects.resource = d.subjects.resource = "/mnt/projects";
  EXPECT_EQ(Diagnose({c, d}, v, {}, kT0 + 30 * kS, {}).size(), 2u);
}

TEST(Diagnose, AnUnexplainedStragglerGivesWayToTheJobsExplainedCause) {
  detect::FleetView v;
  Finding rotation = MakeFinding(Cause::kUnknown, Verdict::kInconclusive, "j", {Ev("probes"), Ev("gpu")});
  rotation.detector = "stragglers";
  Finding network = MakeFinding(Cause::kNetwork, Verdict::kInfrastructure, "j", {Ev("node"), Ev("probes")});
  auto alone = Diagnose({rotation}, v, {}, kT0 + 30 * kS, {});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].verdict, Verdict::kInconclusive);
  EXPECT_EQ(alone[0].cause, Cause::kUnknown);
  auto both = Diagnose({rotation, network}, v, {}, kT0 + 30 * kS, {});
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(both[0].cause, Cause::kNetwork);
  // Another job's cause, or a cause only suspected (one collector), explains nothing of this job.
  Finding elsewhere = network;
  elsewhere.subjects.job = "k";
  EXPECT_EQ(Diagnose({rotation, elsewhere}, v, {}, kT0 + 30 * kS, {}).size(), 2u);
  Finding suspected = MakeFinding(Cause::kStorage, Verdict::kInfrastructure, "j", {Ev("sched_io"), Ev("sched_io", "t")});
  EXPECT_EQ(Diagnose({rotation, suspected}, v, {}, kT0 + 30 * kS, {}).size(), 2u);
  // Other detectors' unknowns (a hang without spinning peers) are not a straggler's symptom.
  Finding hang = rotation;
  hang.detector = "hang";
  EXPECT_EQ(Diagnose({hang, network}, v, {}, kT0 + 30 * kS, {}).size(), 2u);
}

TEST(Investigator, KeepsTheIdOpenUpdatedResolvedAndReopensWithANewId) {
  InvestigateOptions o;
  o.resolve_after = 60 * kS;
  Investigator inv(o);
  detect::FleetView v;
  Finding f = MakeFinding(Cause::kThermalPower, Verdict::kInfrastructure, "j", {Ev("gpu"), Ev("probes")});
  auto r1 = inv.Update({f}, v, {}, kT0);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0].state, DiagnosisState::kOpen);
  const std::string id = r1[0].id;
  auto r2 = inv.Update({f}, v, {}, kT0 + 10 * kS);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].state, DiagnosisState::kUpdated);
  EXPECT_EQ(r2[0].id, id);
  // No finding for 61 s: resolved.
  auto r3 = inv.Update({}, v, {}, kT0 + 71 * kS);
  ASSERT_EQ(r3.size(), 1u);
  EXPECT_EQ(r3[0].state, DiagnosisState::kResolved);
  // It comes back: a new incident with a new id.
  auto r4 = inv.Update({f}, v, {}, kT0 + 80 * kS);
  ASSERT_EQ(r4.size(), 1u);
  EXPECT_EQ(r4[0].state, DiagnosisState::kOpen);
  EXPECT_NE(r4[0].id, id);
}

TEST(Investigator, AProvisionalDiagnosisIsConfirmedUnderTheSameId) {
  Investigator inv({});
  detect::FleetView v;
  Finding f = MakeFinding(Cause::kRecipeNumerics, Verdict::kJob, "j", {Ev("joblog"), Ev("gpu")});
  f.provisional = true;
  auto r1 = inv.Update({f}, v, {}, kT0);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_TRUE(r1[0].provisional);
  f.provisional = false;
  auto r2 = inv.Update({f}, v, {}, kT0 + kS);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_FALSE(r2[0].provisional);
  EXPECT_EQ(r2[0].id, r1[0].id);
}

// Productive share = Σ kept steps min(step, baseline) × GPUs ÷ allocated GPU-time.
TEST(Impact, ProductiveShareAndEffectivePriceFromSteps) {
  testutil::SyntheticFleet fleet;
  // Two GPUs; ten 1 s steps, then ten 3 s steps: 40 s allocated × 2 GPUs.
  TimeNs t = kT0;
  for (int s = 1; s <= 20; ++s) {
    const TimeNs d = (s <= 10 ? 1 : 3) * kS;
    fleet.Step("n1", "j", 0, s, t, t + d);
    t += d;
  }
  detect::FleetView v = fleet.TakeView();
  detect::JobView job;
  job.id = "j";
  job.processes = {{"n1", 0, 0, 2, 100, 0, "GPU-a", kT0, t}, {"n1", 1, 1, 2, 101, 1, "GPU-b", kT0, t}};
  job.window = {kT0, t};
  Diagnosis d;
  d.cause = Cause::kStorage;
  d.window = {kT0 + 10 * kS, t};
  Finding f;
  f.lost_gpu_seconds = 40 * 3600;
  f.speedup_with_fix = 3;
  f.baseline_origin = "steps before the slowdown";
  ComputeImpact(d, {f}, v, &job, 2.0);
  // Kept: 20 steps × 1 s (baseline 1 s) × 2 GPUs = 40 of 80 GPU-seconds.
  EXPECT_NEAR(d.impact.productive_share, 0.5, 1e-9);
  EXPECT_NEAR(d.impact.effective_price_per_gpu_hour, 4.0, 1e-9);
  EXPECT_DOUBLE_EQ(d.impact.gpu_hours_lost, 40);
  EXPECT_DOUBLE_EQ(d.impact.expected_speedup, 3);
  EXPECT_NE(d.impact.baseline_origin.find("median of the 10 steps"), std::string::npos);
  // A divergence: the steps after its onset count zero.
  Diagnosis div = d;
  div.cause = Cause::kRecipeNumerics;
  div.impact = {};
  ComputeImpact(div, {}, v, &job, 0);
  EXPECT_NEAR(div.impact.productive_share, 20.0 / 80.0, 1e-9);
  EXPECT_EQ(div.impact.effective_price_per_gpu_hour, 0);  // no list price configured
}

TEST(Impact, ARolledBackStepCountsOnce) {
  testutil::SyntheticFleet fleet;
  TimeNs t = kT0;
  for (int s : {1, 2, 3, 4, 5, 6, 4, 5, 6}) {  // resumed from step 3's checkpoint
    fleet.Step("n1", "j", 0, s, t, t + kS);
    t += kS;
  }
  detect::FleetView v = fleet.TakeView();
  detect::JobView job;
  job.id = "j";
  job.processes = {{"n1", 0, 0, 1, 100, 0, "GPU-a", kT0, t}};
  job.window = {kT0, t};
  Diagnosis d;
  d.cause = Cause::kUnknown;
  d.window = {t, t};
  ComputeImpact(d, {}, v, &job, 0);
  EXPECT_NEAR(d.impact.productive_share, 6.0 / 9.0, 1e-9);
}

Diagnosis FullDiagnosis() {
  Diagnosis d;
  d.id = "dx-1234";
  d.state = DiagnosisState::kUpdated;
  d.provisional = true;
  d.verdict = Verdict::kJob;
  d.cause = Cause::kDataImbalance;
  d.summary = "the slowest rank rotates";
  d.subjects.job = "4242";
  d.subjects.nodes = {"n1", "n2"};
  d.subjects.ranks = {{3, 3, "n1", 103}};
  d.subjects.gpus = {{"n1", 3, "GPU-3"}};
  d.subjects.resource = "";
  d.window = {kT0, kT0 + 60 * kS};
  d.evidence = {Ev("probes"), Ev("joblog")};
  d.fix = "balance";
  d.impact.gpu_hours_lost = 1.5;
  d.impact.expected_speedup = 1.2;
  d.impact.productive_share = 0.8;
  d.impact.effective_price_per_gpu_hour = 2.5;
  d.impact.baseline_origin = "median";
  d.opened_at = kT0 + 5 * kS;
  d.updated_at = kT0 + 60 * kS + 123;
  return d;
}

TEST(SchemaV1, RoundTripsEveryField) {
  const Diagnosis d = FullDiagnosis();
  const auto j = ToJson(d);
  EXPECT_EQ(j["schema"], kDiagnosisSchema);
  EXPECT_EQ(j["subjects"]["gpus"][0]["uuid"], "GPU-3");
  EXPECT_EQ(j["subjects"]["ranks"][0]["local_rank"], 3);
  ASSERT_TRUE(ValidateDiagnosisJson(j).has_value());
  auto back = DiagnosisFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(back->updated_at, d.updated_at);  // nanoseconds survive
}

TEST(SchemaV1, RejectsWhatItDidNotWriteWithThePath) {
  auto j = ToJson(FullDiagnosis());
  auto broken = [&](auto edit) {
    auto k = j;
    edit(k);
    auto st = ValidateDiagnosisJson(k);
    return st.has_value() ? std::string() : st.error().message;
  };
  EXPECT_NE(broken([](auto& k) { k["cause"] = "bad_luck"; }).find("cause"), std::string::npos);
  EXPECT_NE(broken([](auto& k) { k["verdict"] = "maybe"; }).find("verdict"), std::string::npos);
  EXPECT_NE(broken([](auto& k) { k.erase("window"); }).find("window is missing"), std::string::npos);
  EXPECT_NE(broken([](auto& k) { k["subjects"]["gpus"][0]["index"] = "3"; }).find("subjects.gpus[0].index"),
            std::string::npos);
  EXPECT_NE(broken([](auto& k) { k["evidence"][1]["window"]["start"] = "yesterday"; }).find("evidence[1].window.start"),
            std::string::npos);
  EXPECT_NE(broken([](auto& k) { k["schema"] = "ithbat.diagnosis/v0"; }).find("schema"), std::string::npos);
  EXPECT_NE(broken([](auto& k) { k = nlohmann::json::array(); }).find("not an object"), std::string::npos);
}

TEST(Causes, EveryCauseHasAFixAndAMeaning) {
  for (const auto& c : Causes()) {
    EXPECT_FALSE(c.fix.empty()) << CauseName(c.cause);
    EXPECT_FALSE(c.meaning.empty()) << CauseName(c.cause);
  }
  EXPECT_EQ(Causes().size(), 20u);
}

}  // namespace
}  // namespace ithbat::investigate
