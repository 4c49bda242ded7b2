// The lab's signal checks on synthetic stores: each passes on the signal it names and fails
// on the look-alike that lacks it (persistent instead of roaming, slow saves without a
// latency rise, a loss that never spikes, a rerun that diverges elsewhere).
#include "lab/signal_checks.h"
#include "lab/check_util.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim_lab/synthetic_stores.h"

namespace ithbat::sim::lab {
namespace {

World OneJobWorld(int ranks, int seconds) {
  World w;
  w.started = kT0;
  w.ended = kT0 + seconds * kS;
  w.nodes.push_back({"n1", "", "", {}});
  WorldJob job;
  job.id = "j1";
  job.started = kT0;
  job.ended = w.ended;
  for (int r = 0; r < ranks; ++r) job.ranks.push_back({r, r, "n1", r, "", 100 + r});
  for (int s = 0; s < seconds; ++s) job.steps.push_back({s, kT0 + s * kS, kT0 + (s + 1) * kS});
  w.jobs.push_back(job);
  return w;
}

scenario::ExpectedFinding Finding(scenario::Cause cause) {
  scenario::ExpectedFinding f;
  f.verdict = scenario::Verdict::kJob;
  f.cause = cause;
  f.job = "j1";
  return f;
}

// Counter values for `n` seconds where rank r gains `per_s(r, i)` each second.
template <class Fn>
std::vector<double> Counter(int n, Fn&& per_s) {
  std::vector<double> v(static_cast<size_t>(n));
  double c = 0;
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (c += per_s(i));
  return v;
}

TEST(SignalChecks, RoamingSlowestRankPassesPersistentFails) {
  for (bool roaming : {true, false}) {
    Stores st;
    const World w = OneJobWorld(4, 40);
    for (int r = 0; r < 4; ++r) {
      // Roaming: the last rank moves every second; persistent: rank 2 is always last.
      auto last = Counter(40, [&](int i) { return roaming ? (i % 4 == r ? 1.0 : 0.0) : (r == 2 ? 1.0 : 0.0); });
      st.Series("n1", "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter,
                {{"job_id", "j1"}, {"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}}, last);
      st.Series("n1", "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter,
                {{"job_id", "j1"}, {"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}},
                Counter(40, [](int) { return 0.1; }));
    }
    const Evidence ev = st.Take();
    const FindingCheck c = CheckDataImbalance(w, ev, Finding(scenario::Cause::kDataImbalance));
    ASSERT_EQ(c.signals.size(), 3u);
    EXPECT_EQ(c.signals[0].ok, roaming) << c.signals[0].observed;
    EXPECT_TRUE(c.signals[1].ok) << c.signals[1].observed;
    EXPECT_TRUE(c.signals[2].ok) << c.signals[2].observed;  // no GPU series: nothing starved
    if (roaming) {
      ASSERT_TRUE(c.signals[0].first_seen.has_value());
      // Two distinct ranks (half of 4) were last by the third sample.
      EXPECT_EQ(*c.signals[0].first_seen, kT0 + 2 * kS);
    }
  }
}

TEST(SignalChecks, AThrottledLastRankLeavesItsNodeOutOfTheRotationTest) {
  // Two findings in one job: node n2's rank 6 is last every time because its GPU is throttled;
  // node n1 rotates. Without the thermal clock event on that GPU the node counts against
  // rotation (a persistent straggler is not data imbalance).
  for (bool throttled : {true, false}) {
    Stores st;
    World w = OneJobWorld(4, 40);
    w.nodes.push_back({"n2", "", "", {}});
    for (int r = 4; r < 8; ++r) w.jobs[0].ranks.push_back({r, r - 4, "n2", r - 4, "", 100 + r});
    for (int r = 0; r < 8; ++r) {
      const std::string node = r < 4 ? "n1" : "n2";
      auto last = Counter(40, [&](int i) { return r < 4 ? (i % 4 == r ? 1.0 : 0.0) : (r == 6 ? 1.0 : 0.0); });
      st.Series(node, "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter,
                {{"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}}, last);
      st.Series(node, "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter,
                {{"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}}, Counter(40, [](int) { return 0.1; }));
    }
    st.Series("n2", "ithbat_gpu_clock_event_active", MetricType::kGauge, {{"gpu", "2"}, {"reason", "sw_thermal_slowdown"}},
              std::vector<double>(40, throttled ? 1.0 : 0.0));
    const Evidence ev = st.Take();
    const FindingCheck c = CheckDataImbalance(w, ev, Finding(scenario::Cause::kDataImbalance));
    ASSERT_FALSE(c.signals.empty());
    EXPECT_EQ(c.signals[0].ok, throttled) << c.signals[0].observed;
    if (throttled) {
      EXPECT_NE(c.signals[0].observed.find("node left out"), std::string::npos) << c.signals[0].observed;
    }
  }
}

TEST(SignalChecks, NoWaitingMeansNoImbalanceSignal) {
  Stores st;
  const World w = OneJobWorld(2, 20);
  for (int r = 0; r < 2; ++r) {
    const std::vector<std::pair<std::string, std::string>> l = {{"rank", std::to_string(r)},
                                                                {"pid", std::to_string(100 + r)}};
    st.Series("n1", "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, l,
              Counter(20, [&](int i) { return i % 2 == r ? 1.0 : 0.0; }));
    st.Series("n1", "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, l,
              Counter(20, [](int) { return 0.001; }));
  }
  const Evidence ev = st.Take();
  const FindingCheck c = CheckDataImbalance(w, ev, Finding(scenario::Cause::kDataImbalance));
  EXPECT_TRUE(c.signals[0].ok);
  EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;  // 0.1% of rank time is below kMinWaitShare
  EXPECT_FALSE(c.ok());
}

// A storage world: saves every 10 s lasting 2 s; the mount slows at 30 s.
World StorageWorld(TimeNs* onset) {
  World w = OneJobWorld(2, 60);
  for (int s = 0; s < 6; ++s) w.jobs[0].saves.push_back({s * 10, kT0 + (5 + s * 10) * kS, kT0 + (7 + s * 10) * kS});
  w.mounts.push_back({"projects", "shared_nfs", {{"n1", "/sim/nodes/n1/fs/mnt/projects/j1"}}});
  w.events.push_back({"slowdown", "storage_slowdown", "", -1, "", "projects", "", kT0 + 30 * kS, 0});
  *onset = kT0 + 30 * kS;
  return w;
}

void StorageSeries(Stores& st, bool latency_rises, bool gaps_in_saves, bool idle_in_saves = false) {
  // Per second: fsync seconds and calls; during saves 4 calls/s at 10 ms before, 400 ms after.
  auto in_save = [](int i) { return i % 10 >= 5 && i % 10 <= 7; };
  for (const char* op : {"fsync", "close"}) {
    const std::vector<std::pair<std::string, std::string>> l = {
        {"pid", "100"}, {"rank", "0"}, {"op", op}, {"mount", "/sim/nodes/n1/fs/mnt/projects"}, {"fstype", "fuse"}};
    st.Series("n1", "ithbat_io_calls_total", MetricType::kCounter, l, Counter(60, [&](int i) { return in_save(i) ? 4.0 : 0.0; }));
    st.Series("n1", "ithbat_io_seconds_total", MetricType::kCounter, l, Counter(60, [&](int i) {
                return in_save(i) ? 4.0 * ((latency_rises && i >= 30) ? 0.4 : 0.01) : 0.0;
              }));
  }
  std::vector<double> gap(60);
  for (int i = 0; i < 60; ++i) gap[static_cast<size_t>(i)] = (gaps_in_saves && i >= 30 && in_save(i)) ? 2.5 : 0.2;
  st.Series("n1", "ithbat_probe_launch_gap_max_seconds", MetricType::kGauge, {{"pid", "100"}, {"rank", "0"}}, gap);
  std::vector<double> util(60);
  for (int i = 0; i < 60; ++i) util[static_cast<size_t>(i)] = (idle_in_saves && i >= 30 && in_save(i)) ? 0.05 : 0.95;
  st.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, {{"gpu", "0"}}, util);
  Event e;
  e.time = kT0 + 7 * kS;
  e.kind = EventKind::kCheckpointEnd;
  e.identity.job = "j1";
  e.identity.pid = 100;
  ASSERT_TRUE(st.Node("n1").AppendEvent(e).has_value());
}

scenario::ResolvedScenario StorageResolved() {
  scenario::ResolvedScenario r;
  scenario::EventT<scenario::Plain> e;
  e.id = "slowdown";
  e.kind = scenario::EventKind::kStorageSlowdown;
  r.timeline.push_back(e);
  return r;
}

scenario::ExpectedFinding StorageFinding() {
  scenario::ExpectedFinding f = Finding(scenario::Cause::kStorage);
  f.verdict = scenario::Verdict::kInfrastructure;
  f.resource = "projects";
  f.budget.unit = scenario::BudgetUnit::kSaves;
  f.budget.value = 2;
  f.budget.from = scenario::BudgetFrom::kEvent;
  f.budget.from_event = 0;
  return f;
}

TEST(SignalChecks, StorageLatencyAndGapsAfterTheOnset) {
  TimeNs onset = 0;
  const World w = StorageWorld(&onset);
  Stores st;
  StorageSeries(st, true, true);
  const Evidence ev = st.Take();
  const FindingCheck c = CheckStorage(w, ev, StorageResolved(), StorageFinding());
  ASSERT_EQ(c.signals.size(), 3u);
  for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
  ASSERT_TRUE(c.budget.has_value());
  ASSERT_TRUE(c.budget->used.has_value());
  EXPECT_EQ(*c.budget->used, 1);  // the first save after the onset shows it
  EXPECT_TRUE(c.ok());
}

TEST(SignalChecks, TheStopIsSeenByIdleGpusWhenLaunchProbesWereDutyCycled) {
  for (bool idle : {true, false}) {
    TimeNs onset = 0;
    const World w = StorageWorld(&onset);
    Stores st;
    StorageSeries(st, true, /*gaps_in_saves=*/false, idle);
    const Evidence ev = st.Take();
    const FindingCheck c = CheckStorage(w, ev, StorageResolved(), StorageFinding());
    EXPECT_EQ(c.signals[1].ok, idle) << c.signals[1].observed;
  }
}

TEST(SignalChecks, SlowSavesWithoutALatencyRiseAreNotStorage) {
  TimeNs onset = 0;
  const World w = StorageWorld(&onset);
  Stores st;
  StorageSeries(st, false, true);  // a huge synchronous checkpoint on healthy storage
  const Evidence ev = st.Take();
  const FindingCheck c = CheckStorage(w, ev, StorageResolved(), StorageFinding());
  EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;
  EXPECT_FALSE(c.budget->used.has_value());
  EXPECT_FALSE(c.ok());
}

TEST(SignalChecks, DivergenceAndRerunAlignment) {
  for (int rerun_at : {803, 850}) {
    Stores st;
    World w = OneJobWorld(2, 10);
    WorldJob rerun = w.jobs[0];
    rerun.id = "j2";
    for (auto& r : rerun.ranks) r.pid += 100;
    w.jobs.push_back(rerun);
    for (int s = 700; s < 860; s += 5) {
      st.Loss("n1", 100, s, s >= 800 ? NAN : 2.0 + 0.001 * (s - 700), kT0 + s * kS, "j1");
      st.Loss("n1", 200, s, s >= rerun_at ? 50.0 : 2.0, kT0 + s * kS, "j2");
    }
    const Evidence ev = st.Take();
    scenario::ExpectedFinding f = Finding(scenario::Cause::kRecipeNumerics);
    f.provisional = true;
    f.confirm = scenario::ExpectedConfirmation{"j2", {}};
    const FindingCheck c = CheckRecipeNumerics(w, ev, f);
    ASSERT_EQ(c.signals.size(), 3u);
    EXPECT_TRUE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_TRUE(c.signals[1].ok) << c.signals[1].observed;  // no GPU series at all: no fault counted
    // 803 vs 800: rerun_at rounds up to the next logged step 805, within kDivergenceAlignSteps.
    EXPECT_EQ(c.signals[2].ok, rerun_at == 803) << c.signals[2].observed;
  }
}

TEST(SignalChecks, HardwareFaultCountsAgainstInnocence) {
  Stores st;
  const World w = OneJobWorld(1, 10);
  st.Series("n1", "ithbat_gpu_xid_errors_total", MetricType::kCounter, {{"gpu", "0"}}, {0, 0, 0, 1, 1, 1});
  st.Loss("n1", 100, 10, 2.0, kT0, "j1");
  const Evidence ev = st.Take();
  const FindingCheck c = CheckRecipeNumerics(w, ev, Finding(scenario::Cause::kRecipeNumerics));
  EXPECT_FALSE(c.signals[1].ok);
  const FindingCheck none = CheckNothing(w, ev);
  EXPECT_FALSE(none.signals[0].ok);
}

TEST(SignalChecks, ServingQueueWithFreeSlotsVersusFullBatches) {
  for (bool naive : {true, false}) {
    Stores st;
    World w = OneJobWorld(0, 60);
    w.jobs.clear();
    w.servers.push_back({"chat", "n1", 500, kT0, kT0 + 60 * kS});
    std::vector<double> running(60), waiting(60), kv(60), slots(60, 32);
    for (size_t i = 0; i < 60; ++i) {
      // Naive: one request at a time per replica (8), a queue builds; continuous: the batch fills.
      running[i] = naive ? 8 : 30;
      waiting[i] = naive ? static_cast<double>(i) : (i % 10 == 0 ? 1 : 0);
      kv[i] = naive ? 0.1 : 0.8;
    }
    const std::vector<std::pair<std::string, std::string>> l = {{"pid", "500"}, {"engine", "vllm"}};
    st.Series("n1", "ithbat_serving_requests_running", MetricType::kGauge, l, running);
    st.Series("n1", "ithbat_serving_requests_waiting", MetricType::kGauge, l, waiting);
    st.Series("n1", "ithbat_serving_kv_cache_usage_ratio", MetricType::kGauge, l, kv);
    st.Series("n1", "ithbat_serving_max_num_seqs", MetricType::kGauge, l, slots);
    const Evidence ev = st.Take();
    scenario::ExpectedFinding f = Finding(scenario::Cause::kServingConfig);
    f.job = "chat";
    const FindingCheck c = CheckServingConfig(w, ev, f);
    ASSERT_EQ(c.signals.size(), 2u);
    EXPECT_EQ(c.signals[0].ok, naive) << c.signals[0].observed;
    EXPECT_EQ(c.signals[1].ok, naive) << c.signals[1].observed;
    if (naive) {
      // waiting >= 1 from the 2nd sample; the 5th such sample is the first evidence.
      EXPECT_EQ(*c.signals[0].first_seen, kT0 + 5 * kS);
    }
    const auto world_ran = CheckWorldRan(w, ev);
    ASSERT_FALSE(world_ran.empty());
    EXPECT_TRUE(world_ran.back().ok) << world_ran.back().observed;
  }
}

TEST(Evidence, IncreaseCountsFromTheSampleBeforeTheWindowOrFromBirth) {
  Stores st;
  // An old counter sampled since kT0, and one born at kT0 + 5 s with 4 already counted.
  st.Series("n1", "ithbat_old_total", MetricType::kCounter, {{"k", "old"}}, {10, 10, 12, 12, 15, 15, 15, 16});
  st.Series("n1", "ithbat_new_total", MetricType::kCounter, {{"k", "new"}}, {4, 6, 6}, kT0 + 5 * kS);
  const Evidence ev = st.Take();
  // Window [kT0+3 s, kT0+7 s]: the old counter grows from 12 (its last sample before, at 2 s) to 16.
  auto old_inc = ev.Increase("n1", "ithbat_old_total", kT0 + 3 * kS, kT0 + 7 * kS);
  ASSERT_EQ(old_inc.size(), 1u);
  EXPECT_EQ(old_inc[0].value, 4);
  auto born_first = ev.Increase("n1", "ithbat_new_total", kT0 + 3 * kS, kT0 + 7 * kS);
  auto born_zero = ev.Increase("n1", "ithbat_new_total", kT0 + 3 * kS, kT0 + 7 * kS, Evidence::Birth::kZero);
  ASSERT_EQ(born_first.size(), 1u);
  ASSERT_EQ(born_zero.size(), 1u);
  EXPECT_EQ(born_first[0].value, 2);  // its first value is history
  EXPECT_EQ(born_zero[0].value, 6);   // its first value is growth
  EXPECT_TRUE(ev.Increase("n1", "ithbat_new_total", kT0, kT0 + 4 * kS).empty());  // no sample in the window
}

TEST(SignalChecks, WorldParsesAndDerivesDataDirs) {
  auto w = ParseWorld(R"({"scenario":"s","seed":18446744073709551615,"root":"/r","started_ns":5,"ended_ns":9,
    "nodes":[{"name":"a","agent_url":"http://127.0.0.1:1","gpus":[{"index":0,"uuid":"GPU-x"}]}],
    "jobs":[{"id":"j","ranks":[{"rank":0,"node":"a","gpu":0,"pid":7}],"steps":[{"step":1,"start_ns":5,"end_ns":6}],
             "saves":[{"step":1,"start_ns":6,"end_ns":7}]}],
    "mounts":[{"name":"m","kind":"shared_nfs","nodes":{"a":"/r/nodes/a/fs/m"}}], "events":[]})");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  EXPECT_EQ(w->seed, 18446744073709551615ULL);
  EXPECT_EQ(w->nodes[0].data_dir, "/r/nodes/a/agent");
  EXPECT_EQ(w->jobs[0].ranks[0].pid, 7);
  EXPECT_EQ(w->jobs[0].StepAt(5), 1);
  EXPECT_EQ(w->Mount("m")->node_paths[0].second, "/r/nodes/a/fs/m");
  EXPECT_FALSE(ParseWorld("[1,2]").has_value());
  EXPECT_FALSE(ParseWorld("{").has_value());
}

// A world whose set-up failed never started: judging it replayed the engine every 2 s from 1970
// (a re-judge of such a kept world ran for hours). It is an error that says why.
TEST(SignalChecks, AWorldThatNeverStartedIsNotJudged) {
  auto never = ParseWorld(R"({"scenario":"s","seed":1,"root":"/r","started_ns":0,"ended_ns":1796525915318178578,
    "stop_reason":"setup_failed","nodes":[],"jobs":[],"mounts":[],"events":[]})");
  ASSERT_FALSE(never.has_value());
  EXPECT_THAT(never.error().message, ::testing::HasSubstr("no run to judge"));
  EXPECT_THAT(never.error().message, ::testing::HasSubstr("setup_failed"));
  EXPECT_FALSE(ParseWorld(R"({"scenario":"s","started_ns":9,"ended_ns":5})").has_value());
  EXPECT_FALSE(ParseWorld(R"({"scenario":"s","started_ns":1,"ended_ns":1796525915318178578})").has_value());
  EXPECT_TRUE(ParseWorld(R"({"scenario":"s","started_ns":5,"ended_ns":5})").has_value());
}

// Where a verdict came after its budget, the lab traces the detectors as the budget ran out: the
// last instant a verdict still counted, found by bisection on the budget's own count.
TEST(SignalChecks, TheBudgetEndsJustBeforeTheStepPastIt) {
  auto w = ParseWorld(R"({"scenario":"s","started_ns":1000000000,"ended_ns":60000000000,
    "jobs":[{"id":"j","ranks":[],"steps":[
      {"step":1,"start_ns":10000000000,"end_ns":19000000000},{"step":2,"start_ns":20000000000,"end_ns":29000000000},
      {"step":3,"start_ns":30000000000,"end_ns":39000000000},{"step":4,"start_ns":40000000000,"end_ns":49000000000},
      {"step":5,"start_ns":50000000000,"end_ns":59000000000}]}]})");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  scenario::ExpectedBudget b;
  b.unit = scenario::BudgetUnit::kSteps;
  b.value = 3;
  b.from = scenario::BudgetFrom::kStart;
  const scenario::ResolvedScenario resolved;
  auto end = BudgetEnd(*w, resolved, b, w->Job("j"), w->ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_LT(*end, 40 * kNsPerSec);               // step 4 would be the fourth
  EXPECT_GE(*end, 40 * kNsPerSec - kNsPerMs);    // ... to the millisecond
  // A world that ended inside the budget: its end.
  EXPECT_EQ(BudgetEnd(*w, resolved, b, w->Job("j"), 35 * kNsPerSec), 35 * kNsPerSec);
  // No budget, or one that has not started by then: none.
  EXPECT_FALSE(BudgetEnd(*w, resolved, scenario::ExpectedBudget{}, w->Job("j"), w->ended).has_value());
  EXPECT_FALSE(BudgetEnd(*w, resolved, b, w->Job("j"), 5 * kNsPerSec).has_value());
}

}  // namespace
}  // namespace ithbat::sim::lab
