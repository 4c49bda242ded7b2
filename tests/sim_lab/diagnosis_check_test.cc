// The lab's judge of the diagnosis engine: how a diagnosis (in the agents' names: a Slurm job
// id, a mount path, engine:port) is matched to a scenario's expectation (in the scenario's
// names), and that every diagnosis line the lab prints is schema v1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "investigate/diagnosis_json.h"
#include "lab/diagnosis_check.h"
#include "lab/lab.h"
#include "synthetic_stores.h"

namespace ithbat::sim::lab {
namespace {

World TwoThingsWorld() {
  World w;
  w.started = kT0;
  w.ended = kT0 + 60 * kS;
  w.nodes = {{"n1", "", "", {}}};
  WorldJob job;
  job.id = "train";
  job.started = kT0;
  for (int r = 0; r < 2; ++r) job.ranks.push_back({r, r, "n1", r, "GPU-" + std::to_string(r), 100 + r});
  w.jobs.push_back(job);
  w.servers.push_back({"chat", "n1", 300, kT0, 0});
  w.mounts.push_back({"projects", "shared_nfs", {{"n1", "/mnt/projects"}}, {"/srv/projects"}});
  return w;
}

Evidence TwoThingsEvidence() {
  Stores s;
  for (int r = 0; r < 2; ++r) {
    s.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter,
             {{"job_id", "5551"}, {"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}, {"gpu", std::to_string(r)}},
             {1, 2, 3});
  }
  return s.Take();
}

scenario::ExpectedFinding Expect(scenario::Verdict v, scenario::Cause c, std::string job) {
  scenario::ExpectedFinding f;
  f.verdict = v;
  f.cause = c;
  f.job = std::move(job);
  return f;
}

Diagnosis Diag(Verdict v, Cause c, std::string job) {
  Diagnosis d;
  d.id = "dx-1";
  d.verdict = v;
  d.cause = c;
  d.subjects.job = std::move(job);
  d.subjects.nodes = {"n1"};
  return d;
}

TEST(MatchDiagnosis, MapsTheAgentsJobIdToTheScenariosJobByPid) {
  const World w = TwoThingsWorld();
  const Evidence e = TwoThingsEvidence();
  const JobMap jobs = MapJobs(w, e);
  ASSERT_EQ(jobs.at("5551"), "train");
  auto f = Expect(scenario::Verdict::kJob, scenario::Cause::kDataImbalance, "train");
  f.nodes = {"n1"};
  EXPECT_EQ(MatchDiagnosis(w, jobs, Diag(Verdict::kJob, Cause::kDataImbalance, "5551"), f), "");
  // Every difference is named.
  const std::string diff = MatchDiagnosis(w, jobs, Diag(Verdict::kInfrastructure, Cause::kStorage, "9999"), f);
  EXPECT_NE(diff.find("verdict infrastructure (expected job)"), std::string::npos) << diff;
  EXPECT_NE(diff.find("cause storage (expected data_imbalance)"), std::string::npos) << diff;
  EXPECT_NE(diff.find("expected train"), std::string::npos) << diff;
}

TEST(MatchDiagnosis, SubjectsTheFileNamesMustBeExactlyThere) {
  const World w = TwoThingsWorld();
  const JobMap jobs = MapJobs(w, TwoThingsEvidence());
  auto f = Expect(scenario::Verdict::kInfrastructure, scenario::Cause::kThermalPower, "train");
  f.ranks = {1};
  f.gpus = {{"n1", 1}};
  Diagnosis d = Diag(Verdict::kInfrastructure, Cause::kThermalPower, "5551");
  d.subjects.ranks = {{1, 1, "n1", 101}};
  d.subjects.gpus = {{"n1", 1, "GPU-1"}};
  EXPECT_EQ(MatchDiagnosis(w, jobs, d, f), "");
  d.subjects.gpus.push_back({"n1", 0, "GPU-0"});  // one GPU too many
  EXPECT_NE(MatchDiagnosis(w, jobs, d, f).find("gpus [n1:0,n1:1] (expected [n1:1])"), std::string::npos);
}

TEST(MatchDiagnosis, AServerIsFoundByItsPidAndAMountByAnyOfItsPaths) {
  const World w = TwoThingsWorld();
  const JobMap jobs = MapJobs(w, TwoThingsEvidence());
  Diagnosis server = Diag(Verdict::kJob, Cause::kServingConfig, "vllm:8000");
  server.subjects.ranks = {{-1, -1, "n1", 300}};
  EXPECT_EQ(MatchDiagnosis(w, jobs, server, Expect(scenario::Verdict::kJob, scenario::Cause::kServingConfig, "chat")), "");
  auto f = Expect(scenario::Verdict::kInfrastructure, scenario::Cause::kStorage, "train");
  f.resource = "projects";
  Diagnosis d = Diag(Verdict::kInfrastructure, Cause::kStorage, "5551");
  for (const char* path : {"/mnt/projects", "/srv/projects"}) {
    d.subjects.resource = path;
    EXPECT_EQ(MatchDiagnosis(w, jobs, d, f), "") << path;
  }
  d.subjects.resource = "/mnt/other";
  EXPECT_NE(MatchDiagnosis(w, jobs, d, f).find("resource /mnt/other (expected projects)"), std::string::npos);
}

TEST(MatchDiagnosis, ATenantNoAgentSeesIsMetByTheFabricButNotByAnythingElse) {
  const World w = TwoThingsWorld();
  const JobMap jobs = MapJobs(w, TwoThingsEvidence());
  auto f = Expect(scenario::Verdict::kInfrastructure, scenario::Cause::kNetwork, "train");
  f.resource = "team-b";  // a tenant: not a job, server or mount of the world
  Diagnosis d = Diag(Verdict::kInfrastructure, Cause::kNetwork, "5551");
  d.subjects.resource = "fabric via n1/mlx5_0";
  EXPECT_EQ(MatchDiagnosis(w, jobs, d, f), "");
  d.subjects.resource = "n1/mlx5_0";  // a link fault is not congestion from a tenant
  EXPECT_NE(MatchDiagnosis(w, jobs, d, f), "");
}

TEST(LabJson, EveryDiagnosisLineIsSchemaV1) {
  LabResult r;
  r.scenario = "x";
  r.check = ScenarioCheck{};
  DiagnosisCheck c;
  Diagnosis d = Diag(Verdict::kJob, Cause::kDataImbalance, "5551");
  d.window = {kT0, kT0 + 10 * kS};
  d.opened_at = d.updated_at = kT0 + 10 * kS;
  c.diagnoses = {d, d};
  c.expected.push_back({"job: data_imbalance (job train)", 0, "", kT0 + 5 * kS, std::nullopt});
  c.extra = {1};
  r.diagnosis = c;
  const std::string out = ResultJson(r);
  std::vector<std::string> lines;
  for (size_t start = 0; start <= out.size();) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    lines.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  ASSERT_EQ(lines.size(), 3u);
  auto head = nlohmann::json::parse(lines[0]);
  EXPECT_FALSE(head["diagnosis"]["ok"].get<bool>());  // one extra diagnosis
  EXPECT_EQ(head["diagnosis"]["extra"], 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    auto st = investigate::ValidateDiagnosisJson(nlohmann::json::parse(lines[i]));
    EXPECT_TRUE(st.has_value()) << st.error().message;
  }
}

}  // namespace
}  // namespace ithbat::sim::lab
