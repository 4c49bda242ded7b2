// A job's end as Slurm's epilog recorded it: a failed end alone is an inconclusive diagnosis
// that says how the job ended; beside another finding of the same job it joins that diagnosis
// ("… then job 77 exited with code 1") instead of being a second incident; a clean end is
// nothing.
#include "detect/scheduler/job_end.h"

#include <gtest/gtest.h>

#include "detect/detector.h"
#include "investigate/investigator.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::investigate {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

Event SlurmEvent(EventKind kind, TimeNs t, const std::string& job,
                 std::vector<std::pair<std::string, std::string>> attrs, double value = std::nan("")) {
  Event e;
  e.time = t;
  e.kind = kind;
  e.source = "slurm";
  e.name = "slurm";
  e.identity.job = job;
  e.identity.node = "n1";
  e.attrs = std::move(attrs);
  e.value = value;
  return e;
}

// Rank 0 of job 77 printed CUDA out of memory (the job's word, the joblog collector).
Event OomError() {
  Event e;
  e.time = kT0 + 30 * kS;
  e.kind = EventKind::kError;
  e.source = "joblog";
  e.name = "cuda_oom";
  e.identity.job = "77";
  e.identity.rank = 0;
  e.identity.pid = 100;
  return e;
}

// An OOM of job 77 that the out_of_memory detector finds (the GPU full, the rank stopping).
void AddOom(SyntheticFleet& f) {
  testutil::Labels rank = {{"job_id", "77"}, {"rank", "0"}, {"local_rank", "0"},  {"world_size", "1"},
                           {"pid", "100"},   {"gpu", "0"},  {"gpu_uuid", "GPU-0"}};
  std::vector<double> launches(60), used(60), total(60, 80e9);
  for (int t = 0; t < 60; ++t) {
    launches[t] = 100.0 * std::min(t, 30);
    used[t] = t < 31 ? 0.97 * 80e9 : 0;
  }
  auto launch_labels = rank;
  launch_labels.emplace_back("api", "cuLaunchKernel");
  f.Series("n1", "ithbat_probe_launches_total", MetricType::kCounter, launch_labels, launches);
  f.Series("n1", "ithbat_gpu_memory_used_bytes", MetricType::kGauge, {{"gpu", "0"}, {"gpu_uuid", "GPU-0"}},
           used);
  f.Series("n1", "ithbat_gpu_memory_total_bytes", MetricType::kGauge, {{"gpu", "0"}, {"gpu_uuid", "GPU-0"}},
           total);
  f.AddEvent("n1", OomError());
}

std::vector<Diagnosis> DiagnoseFleet(SyntheticFleet& f) {
  detect::FleetView v = f.TakeView();
  return DiagnoseAsOf(v, kMinTime, kT0 + 59 * kS, {});
}

TEST(JobEnd, AFailedEndAloneIsAnInconclusiveDiagnosisThatSaysHowItEnded) {
  SyntheticFleet f;
  f.AddEvent("n1", SlurmEvent(EventKind::kJobStart, kT0, "42", {{"user", "alice"}}));
  f.AddEvent("n1",
             SlurmEvent(EventKind::kJobEnd, kT0 + 40 * kS, "42", {{"user", "alice"}, {"exit_code", "1"}}, 1));
  auto d = DiagnoseFleet(f);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].verdict, Verdict::kInconclusive);
  EXPECT_EQ(d[0].cause, Cause::kUnknown);
  EXPECT_EQ(d[0].subjects.job, "42");
  EXPECT_EQ(d[0].subjects.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(d[0].window.start, kT0);  // from the prolog's start
  EXPECT_EQ(d[0].window.end, kT0 + 40 * kS);
  EXPECT_NE(d[0].summary.find("job 42 exited with code 1"), std::string::npos) << d[0].summary;
  ASSERT_EQ(d[0].evidence.size(), 1u);
  EXPECT_EQ(d[0].evidence[0].collector, detect::kCollectorScheduler);
  EXPECT_NE(d[0].evidence[0].note.find("(user alice)"), std::string::npos) << d[0].evidence[0].note;
}

TEST(JobEnd, ASignalIsNamedAndACleanEndIsNothing) {
  SyntheticFleet f;
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 10 * kS, "42", {{"signal", "9"}}, 137));
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 10 * kS, "43", {{"exit_code", "0"}}, 0));
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 10 * kS, "44", {}));  // outcome unknown
  auto d = DiagnoseFleet(f);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].subjects.job, "42");
  EXPECT_NE(d[0].summary.find("was ended by signal 9"), std::string::npos) << d[0].summary;
}

TEST(JobEnd, BesideAnotherFindingOfTheJobItJoinsThatDiagnosis) {
  SyntheticFleet f;
  AddOom(f);
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 35 * kS, "77", {{"exit_code", "1"}}, 1));
  auto d = DiagnoseFleet(f);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].cause, Cause::kOutOfMemory);
  EXPECT_EQ(d[0].verdict, Verdict::kJob);  // the end does not change the verdict
  EXPECT_NE(d[0].summary.find("then job 77 exited with code 1"), std::string::npos) << d[0].summary;
  bool has_end = false;
  for (const auto& e : d[0].evidence) has_end = has_end || e.collector == detect::kCollectorScheduler;
  EXPECT_TRUE(has_end);
}

TEST(JobEnd, AnotherJobsEndStaysApart) {
  SyntheticFleet f;
  AddOom(f);
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 35 * kS, "78", {{"exit_code", "2"}}, 2));
  auto d = DiagnoseFleet(f);
  ASSERT_EQ(d.size(), 2u);
}

TEST(JobEnd, TheOutOfMemoryVerdictNeedsItsOwnTwoCollectorsNotTheSchedulers) {
  // The job's word (one collector) plus Slurm's end is still one collector's OOM: the end joins
  // after the two-collector rule, so it cannot lift a verdict.
  SyntheticFleet f;
  f.AddEvent("n1", OomError());
  f.AddEvent("n1", SlurmEvent(EventKind::kJobEnd, kT0 + 35 * kS, "77", {{"exit_code", "1"}}, 1));
  auto d = DiagnoseFleet(f);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].cause, Cause::kOutOfMemory);
  EXPECT_EQ(d[0].verdict, Verdict::kInconclusive);
  EXPECT_NE(d[0].summary.find("then job 77 exited with code 1"), std::string::npos) << d[0].summary;
}

}  // namespace
}  // namespace ithbat::investigate
