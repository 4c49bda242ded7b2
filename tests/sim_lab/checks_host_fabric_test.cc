// The host and fabric signal checks on synthetic stores: each passes on the signal it names and
// fails on its look-alike twin without it — a degrading link (errors, rate trained down) vs
// congestion (clean links, xmit wait, someone else's bytes); a host-starved straggler vs a
// data-imbalance one whose GPU is the busiest; a uniformly starved input pipeline vs healthy
// training and a straggler.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "sim_lab/synthetic_stores.h"

#include "lab/checks_host_fabric.h"

namespace ithbat::sim::lab {
namespace {

constexpr int kSeconds = 60;
constexpr int kOnset = 30;  // seconds after kT0

// Samples of a counter whose per-second growth is `per_s(i)`.
std::vector<double> Counter(const std::function<double(int)>& per_s) {
  std::vector<double> v(kSeconds);
  double c = 0;
  for (int i = 0; i < kSeconds; ++i) v[static_cast<size_t>(i)] = (c += per_s(i));
  return v;
}
std::vector<double> Gauge(const std::function<double(int)>& at) {
  std::vector<double> v(kSeconds);
  for (int i = 0; i < kSeconds; ++i) v[static_cast<size_t>(i)] = at(i);
  return v;
}

Labels RankLabels(int r) { return {{"job_id", "j1"}, {"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)}}; }

// One node n1, job j1 with `ranks` ranks on GPUs 0.., a step a second; one event at kOnset.
World OneJobWorld(int ranks) {
  World w;
  w.started = kT0;
  w.ended = kT0 + kSeconds * kS;
  w.nodes.push_back({"n1", "", "", {}});
  WorldJob job;
  job.id = "j1";
  job.started = kT0;
  job.ended = w.ended;
  for (int r = 0; r < ranks; ++r) job.ranks.push_back({r, r, "n1", r, "", 100 + r});
  for (int s = 0; s < kSeconds; ++s) job.steps.push_back({s + 1, kT0 + s * kS, kT0 + (s + 1) * kS});
  w.jobs.push_back(job);
  w.events.push_back({"fault", "ib_link_degrade", "n1", -1, "mlx5_1", "", "j1", kT0 + kOnset * kS, 0});
  return w;
}

// n1 with two NICs on leaf-1 (GPUs 0-1 and 2-3), a tenant on that leaf, the fault event.
scenario::ResolvedScenario FabricScenario() {
  scenario::ResolvedScenario r;
  scenario::NodeT<scenario::Plain> n;
  n.name = "n1";
  n.nics.push_back({"mlx5_0", 1, 400.0, {0, 1}, "leaf-1"});
  n.nics.push_back({"mlx5_1", 1, 400.0, {2, 3}, "leaf-1"});
  r.nodes.push_back(n);
  r.fabric.switches.push_back({"leaf-1", scenario::SwitchTier::kLeaf});
  scenario::TenantT<scenario::Plain> t;
  t.id = "team-b";
  t.kind = scenario::TenantKind::kTraining;
  t.switch_name = "leaf-1";
  r.tenants.push_back(t);
  scenario::EventT<scenario::Plain> e;
  e.id = "fault";
  r.timeline.push_back(e);
  return r;
}

scenario::ExpectedFinding Finding(scenario::Cause cause, const std::string& resource = "") {
  scenario::ExpectedFinding f;
  f.verdict = cause == scenario::Cause::kNetwork ? scenario::Verdict::kInfrastructure : scenario::Verdict::kJob;
  f.cause = cause;
  f.job = "j1";
  f.resource = resource;
  if (cause == scenario::Cause::kNetwork) {
    f.budget.unit = scenario::BudgetUnit::kSeconds;
    f.budget.value = 30;
    f.budget.from = scenario::BudgetFrom::kEvent;
    f.budget.from_event = 0;
  } else {
    f.budget.unit = scenario::BudgetUnit::kSteps;
    f.budget.value = 30;
    f.budget.from = scenario::BudgetFrom::kStart;
  }
  return f;
}

// ---- network ------------------------------------------------------------------------------

struct Fabric {
  bool errors = false;      // symbol errors and a downtrained rate on mlx5_1 after the onset
  bool wait = false;        // xmit wait on both NICs after the onset
  bool foreign = false;     // other bytes through both NICs after the onset
  bool slower = true;       // the job's steps slow down after the onset
};

Evidence FabricStores(const Fabric& fb) {
  Stores st;
  const auto after = [](int i) { return i >= kOnset; };
  for (const char* nic : {"mlx5_0", "mlx5_1"}) {
    const bool bad = std::string(nic) == "mlx5_1" && fb.errors;
    const Labels l = {{"device", nic}, {"port", "1"}};
    // Background: one symbol error early on every port.
    st.Series("n1", "ithbat_ib_symbol_errors_total", MetricType::kCounter, l,
              Counter([&](int i) { return i == 3 ? 1.0 : (bad && after(i) ? 4.0 : 0.0); }));
    st.Series("n1", "ithbat_ib_port_rate_bytes_per_second", MetricType::kGauge, l,
              Gauge([&](int i) { return bad && i >= kOnset + 5 ? 12.5e9 : 50e9; }));
    st.Series("n1", "ithbat_ib_link_downed_total", MetricType::kCounter, l, Counter([](int) { return 0.0; }));
    // A degrading link also makes its sends wait (slower transfers), as congestion does.
    st.Series("n1", "ithbat_ib_transmit_wait_total", MetricType::kCounter, l,
              Counter([&](int i) { return after(i) && (fb.wait || bad) ? 5000.0 : 1.0; }));
    // The job's own 2 GB per step per NIC, plus someone else's 1.5 GB/s after the onset.
    const double step_rate_after = fb.slower ? 0.5 : 1.0;
    st.Series("n1", "ithbat_ib_transmit_bytes_total", MetricType::kCounter, l, Counter([&](int i) {
                return (after(i) ? 2e9 * step_rate_after : 2e9) + (fb.foreign && after(i) ? 1.5e9 : 0.0);
              }));
  }
  for (int r = 0; r < 4; ++r) {
    // Steps inferred from the fifth second on: one a second, half that after the onset.
    st.Series("n1", "ithbat_probe_steps_total", MetricType::kCounter, RankLabels(r),
              Counter([&](int i) { return i < 5 ? 0.0 : (i >= kOnset && fb.slower ? 0.5 : 1.0); }));
  }
  return st.Take();
}

TEST(NetworkCheck, DegradingLinkPassesOnItsNic) {
  const World w = OneJobWorld(4);
  const Evidence ev = FabricStores({.errors = true});
  const FindingCheck c = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "n1/mlx5_1"));
  ASSERT_EQ(c.signals.size(), 2u);
  for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
  ASSERT_TRUE(c.budget.has_value());
  EXPECT_TRUE(c.budget->ok());
  // 10 errors at 4 a second after the onset: the third sample after it.
  ASSERT_TRUE(c.signals[0].first_seen.has_value());
  EXPECT_EQ(*c.signals[0].first_seen, kT0 + (kOnset + 3) * kS);
  EXPECT_TRUE(c.ok());
  // The healthy NIC next to it shows nothing.
  const FindingCheck other = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "n1/mlx5_0"));
  EXPECT_FALSE(other.signals[0].ok) << other.signals[0].observed;
  EXPECT_FALSE(other.ok());
}

TEST(NetworkCheck, CongestionIsNotALinkFault) {
  const World w = OneJobWorld(4);
  const Evidence ev = FabricStores({.wait = true, .foreign = true});
  // As a link fault on a NIC: clean, so no.
  const FindingCheck link = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "n1/mlx5_1"));
  EXPECT_FALSE(link.signals[0].ok) << link.signals[0].observed;
  EXPECT_FALSE(link.ok());
  // As congestion from the tenant on the leaf: xmit wait, clean links, foreign bytes, slower steps.
  const FindingCheck c = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "team-b"));
  ASSERT_EQ(c.signals.size(), 4u);
  for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
  ASSERT_TRUE(c.signals[0].first_seen.has_value());
  EXPECT_EQ(*c.signals[0].first_seen, kT0 + (kOnset + 1) * kS);  // the first sample after the onset
  EXPECT_TRUE(c.ok());
}

TEST(NetworkCheck, DegradingLinkIsNotCongestion) {
  const World w = OneJobWorld(4);
  const Evidence ev = FabricStores({.errors = true});
  const FindingCheck c = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "team-b"));
  ASSERT_EQ(c.signals.size(), 4u);
  EXPECT_TRUE(c.signals[0].ok) << c.signals[0].observed;   // the bad port waits too
  EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;  // but it is not clean
  EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;  // and nobody else's bytes are there
  EXPECT_FALSE(c.ok());
}

TEST(NetworkCheck, NoSlowdownNoFinding) {
  const World w = OneJobWorld(4);
  const Evidence ev = FabricStores({.errors = true, .slower = false});
  const FindingCheck c = CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "n1/mlx5_1"));
  EXPECT_TRUE(c.signals[0].ok);
  EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
  EXPECT_FALSE(c.ok());
}

TEST(NetworkCheck, UnknownResourceOrJobFails) {
  const World w = OneJobWorld(4);
  const Evidence ev = FabricStores({.errors = true});
  EXPECT_FALSE(CheckNetwork(w, ev, FabricScenario(), Finding(scenario::Cause::kNetwork, "n1/mlx5_9")).ok());
  auto f = Finding(scenario::Cause::kNetwork, "n1/mlx5_1");
  f.job = "nope";
  EXPECT_FALSE(CheckNetwork(w, ev, FabricScenario(), f).ok());
}

// ---- host_bottleneck and input_pipeline ---------------------------------------------------

enum class Kind { kHostStall, kDataImbalance, kInputBound, kHealthy };

// 4 ranks. Host stall: every 5 s one rank (rotating) reads 0 while its peers are busy and is
// last at the next collective. Data imbalance: the late rank rotates too, but every GPU stays
// busy. Input-bound: every GPU ~35% busy, every main thread asleep half the time waiting for its
// batch, the loaders burn a core each.
Evidence HostStores(Kind k) {
  Stores st;
  for (int r = 0; r < 4; ++r) {
    auto stalled = [&](int i) { return k == Kind::kHostStall && i % 5 == 0 && (i / 5) % 4 == r && i > 2; };
    st.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, {{"gpu", std::to_string(r)}}, Gauge([&](int i) {
                if (stalled(i)) return 0.0;
                return k == Kind::kInputBound ? 0.33 + 0.01 * r : 0.85;
              }));
    const bool straggles = k == Kind::kHostStall || k == Kind::kDataImbalance;
    st.Series("n1", "ithbat_probe_nccl_last_arrivals_total", MetricType::kCounter, RankLabels(r), Counter([&](int i) {
                if (k == Kind::kHostStall) return stalled(i - 1) ? 1.0 : 0.0;
                return i % 4 == r ? 1.0 : 0.0;
              }));
    st.Series("n1", "ithbat_probe_nccl_arrival_lag_seconds_total", MetricType::kCounter, RankLabels(r),
              Counter([&](int) { return straggles ? 0.1 : 0.002; }));
    Labels main = RankLabels(r);
    main.emplace_back("scope", "main");
    main.emplace_back("class", "sleep");
    st.Series("n1", "ithbat_sched_offcpu_seconds_total", MetricType::kCounter, main,
              Counter([&](int) { return k == Kind::kInputBound ? 0.5 : 0.01; }));
    Labels children = RankLabels(r);
    children.emplace_back("scope", "children");
    st.Series("n1", "ithbat_sched_oncpu_seconds_total", MetricType::kCounter, children,
              Counter([&](int) { return k == Kind::kInputBound ? 0.9 : 0.03; }));
  }
  return st.Take();
}

TEST(HostBottleneckCheck, StarvedLateRankPassesDataImbalanceFails) {
  const World w = OneJobWorld(4);
  const scenario::ResolvedScenario r;
  {
    const FindingCheck c = CheckHostBottleneck(w, HostStores(Kind::kHostStall), r, Finding(scenario::Cause::kHostBottleneck));
    ASSERT_EQ(c.signals.size(), 3u);
    for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
    // Starved samples at 5, 10, 15 s: the third is the first evidence.
    ASSERT_TRUE(c.signals[1].first_seen.has_value());
    EXPECT_EQ(*c.signals[1].first_seen, kT0 + 15 * kS);
    EXPECT_TRUE(c.ok());
  }
  {
    const FindingCheck c =
        CheckHostBottleneck(w, HostStores(Kind::kDataImbalance), r, Finding(scenario::Cause::kHostBottleneck));
    EXPECT_TRUE(c.signals[0].ok);                            // the straggler is there ...
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;  // ... but its GPU is never starved
    EXPECT_FALSE(c.ok());
  }
  {
    const FindingCheck c = CheckHostBottleneck(w, HostStores(Kind::kInputBound), r, Finding(scenario::Cause::kHostBottleneck));
    EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;  // the whole job is starved: the loader
    EXPECT_FALSE(c.ok());
  }
}

TEST(HostBottleneckCheck, DataImbalanceNeedsTheLateGpuBusyNotStarved) {
  // The twin, seen from the other check: the host-stall world rotates and waits like a data
  // straggler, but its late rank's GPU runs dry first, so data_imbalance's third signal fails.
  const World w = OneJobWorld(4);
  {
    const FindingCheck c = CheckDataImbalance(w, HostStores(Kind::kHostStall), Finding(scenario::Cause::kDataImbalance));
    ASSERT_EQ(c.signals.size(), 3u);
    EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;
    EXPECT_FALSE(c.ok());
  }
  {
    const FindingCheck c =
        CheckDataImbalance(w, HostStores(Kind::kDataImbalance), Finding(scenario::Cause::kDataImbalance));
    ASSERT_EQ(c.signals.size(), 3u);
    EXPECT_TRUE(c.signals[2].ok) << c.signals[2].observed;
  }
}

TEST(InputPipelineCheck, UniformIdlePassesHealthyAndStragglersFail) {
  const World w = OneJobWorld(4);
  const scenario::ResolvedScenario r;
  {
    const FindingCheck c = CheckInputPipeline(w, HostStores(Kind::kInputBound), r, Finding(scenario::Cause::kInputPipeline));
    ASSERT_EQ(c.signals.size(), 3u);
    for (const auto& s : c.signals) EXPECT_TRUE(s.ok) << s.name << ": " << s.observed;
    ASSERT_TRUE(c.budget.has_value());
    EXPECT_TRUE(c.budget->ok());
    EXPECT_TRUE(c.ok());
  }
  {
    const FindingCheck c = CheckInputPipeline(w, HostStores(Kind::kHealthy), r, Finding(scenario::Cause::kInputPipeline));
    EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;
    EXPECT_FALSE(c.signals[2].ok) << c.signals[2].observed;
    EXPECT_FALSE(c.ok());
  }
  for (Kind k : {Kind::kHostStall, Kind::kDataImbalance}) {
    const FindingCheck c = CheckInputPipeline(w, HostStores(k), r, Finding(scenario::Cause::kInputPipeline));
    EXPECT_FALSE(c.signals[0].ok) << c.signals[0].observed;  // busy GPUs
    EXPECT_FALSE(c.signals[1].ok) << c.signals[1].observed;  // the ranks wait for a peer, not for data
    EXPECT_FALSE(c.ok());
  }
}

}  // namespace
}  // namespace ithbat::sim::lab
