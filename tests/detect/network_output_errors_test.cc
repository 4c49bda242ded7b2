// NCCL transport failures in a job's output: what each one points at decides the finding
// (network suspected, not the fabric, or nothing of its own).
#include <gtest/gtest.h>

#include "detect/detector.h"
#include "detect/network/output_errors.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::detect {
namespace {

using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

FleetView Build(const std::vector<std::string>& suspects) {
  SyntheticFleet f;
  for (size_t i = 0; i < suspects.size(); ++i) {
    Event e;
    e.time = kT0 + static_cast<TimeNs>(i) * kS;
    e.kind = EventKind::kError;
    e.source = "joblog";
    e.name = "nccl_net_error";
    e.identity.job = "5";
    e.identity.rank = static_cast<int32_t>(i);
    e.identity.pid = 200 + static_cast<int32_t>(i);
    e.attrs = {
        {"host", "n1"},
        {"peer", "10.0.0.9"},
        {"transport", "ib"},
        {"suspect", suspects[i]},
        {"status_name", suspects[i] == "link_or_peer" ? "IBV_WC_RETRY_EXC_ERR" : "IBV_WC_WR_FLUSH_ERR"}};
    f.AddEvent("n1", e);
  }
  return f.TakeView();
}

std::vector<Finding> Network(const FleetView& v) {
  std::vector<Finding> out;
  for (auto& f : RunDetectors(v, kMinTime, kT0 + 100 * kS))
    if (f.detector == "network") out.push_back(std::move(f));
  return out;
}

TEST(NetworkOutputErrors, RetriesExhaustedSuspectTheNetworkOnTheJobsWord) {
  auto f = Network(Build({"link_or_peer", "link_or_peer", "consequence"}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kNetwork);
  EXPECT_EQ(f[0].subjects.job, "5");
  EXPECT_EQ(f[0].subjects.ranks.size(), 2u);
  for (const auto& e : f[0].evidence) EXPECT_EQ(e.collector, "joblog");  // one collector: inconclusive
  EXPECT_NE(f[0].summary.find("or a peer that died"), std::string::npos) << f[0].summary;
}

TEST(NetworkOutputErrors, APeerThatClosedIsNotTheFabric) {
  auto f = Network(Build({"peer"}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, Cause::kUnknown);
  EXPECT_EQ(f[0].verdict, Verdict::kInconclusive);
}

TEST(NetworkOutputErrors, AFlushAloneIsNoFindingOfItsOwn) {
  EXPECT_TRUE(Network(Build({"consequence"})).empty());
}

TEST(NetworkOutputErrors, EvidenceIsBounded) {
  auto f = Network(Build(std::vector<std::string>(50, "link_or_peer")));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].evidence.size(), kNetErrorMaxEvidence + 1);
}

}  // namespace
}  // namespace ithbat::detect
