#include "core/metric.h"

#include <gtest/gtest.h>

#include "core/event.h"
#include "core/finding.h"
#include "core/identity.h"
#include "core/result.h"

namespace ithbat {
namespace {

MetricDesc Desc(std::string name, MetricType type, std::string unit = "") {
  return MetricDesc{std::move(name), "some help", std::move(unit), type, {}};
}

TEST(ValidateMetricDescTest, FollowsPrometheusNamingConventions) {
  EXPECT_TRUE(ValidateMetricDesc(Desc("ithbat_host_cpu_seconds_total", MetricType::kCounter, "seconds")));
  EXPECT_TRUE(ValidateMetricDesc(Desc("ithbat_host_memory_free_bytes", MetricType::kGauge, "bytes")));
  EXPECT_TRUE(ValidateMetricDesc(Desc("ithbat_host_load1", MetricType::kGauge)));
  // counters end in _total, gauges do not
  EXPECT_FALSE(ValidateMetricDesc(Desc("ithbat_host_forks", MetricType::kCounter)));
  EXPECT_FALSE(ValidateMetricDesc(Desc("ithbat_host_forks_total", MetricType::kGauge)));
  // the unit is the suffix (before _total)
  EXPECT_FALSE(ValidateMetricDesc(Desc("ithbat_host_memory_free", MetricType::kGauge, "bytes")));
  EXPECT_FALSE(ValidateMetricDesc(Desc("ithbat_x_total_seconds", MetricType::kCounter, "seconds")));
  // names and help
  EXPECT_FALSE(ValidateMetricDesc(Desc("bad-name", MetricType::kGauge)));
  MetricDesc no_help = Desc("ithbat_x", MetricType::kGauge);
  no_help.help = "";
  EXPECT_FALSE(ValidateMetricDesc(no_help));
  no_help.help = "two\nlines";
  EXPECT_FALSE(ValidateMetricDesc(no_help));
  MetricDesc bad_label = Desc("ithbat_x", MetricType::kGauge);
  bad_label.label_names = {"ok", "not ok"};
  EXPECT_FALSE(ValidateMetricDesc(bad_label));
}

TEST(IdentityTest, OnlyKnownPartsBecomeLabels) {
  Identity id;
  EXPECT_TRUE(id.ToLabelPairs().empty());
  id.job = "1234";
  id.rank = 0;
  id.pid = 4242;
  id.gpu_index = 3;
  id.gpu_uuid = "GPU-abc";
  id.node = "node-1";  // node and cluster are target labels, not series labels
  auto pairs = id.ToLabelPairs();
  std::vector<std::pair<std::string, std::string>> want = {
      {"job_id", "1234"}, {"rank", "0"}, {"pid", "4242"}, {"gpu", "3"}, {"gpu_uuid", "GPU-abc"}};
  EXPECT_EQ(pairs, want);
}

TEST(NamesTest, EventKindsCausesAndVerdictsRoundTrip) {
  for (int k = 0; k < kEventKindCount; ++k) {
    auto kind = static_cast<EventKind>(k);
    EXPECT_EQ(ParseEventKind(EventKindName(kind)), kind);
  }
  EXPECT_FALSE(ParseEventKind("no_such_kind"));
  for (auto v : {Verdict::kJob, Verdict::kInfrastructure, Verdict::kInconclusive}) {
    EXPECT_EQ(ParseVerdict(VerdictName(v)), v);
  }
  for (int c = 0; c <= static_cast<int>(Cause::kUnknown); ++c) {
    auto cause = static_cast<Cause>(c);
    EXPECT_EQ(ParseCause(CauseName(cause)), cause) << CauseName(cause);
  }
  EXPECT_EQ(CauseName(Cause::kDataImbalance), "data_imbalance");
  EXPECT_EQ(CauseName(Cause::kSilentDataCorruption), "silent_data_corruption");
}

TEST(EventTest, EqualityTreatsNaNValuesAsEqual) {
  Event a;
  a.time = 5;
  a.kind = EventKind::kLoss;
  Event b = a;
  EXPECT_EQ(a, b);  // both NaN by default
  b.value = 1.5;
  EXPECT_FALSE(a == b);
}

TEST(ResultTest, ErrnoErrorCarriesContextAndText) {
  auto e = ErrnoError(ErrorCode::kIo, "open /x", ENOENT);
  EXPECT_EQ(e.error().code, ErrorCode::kIo);
  EXPECT_NE(e.error().message.find("open /x"), std::string::npos);
  EXPECT_NE(e.error().message.find("No such file"), std::string::npos);
  EXPECT_EQ(e.error().ToString().substr(0, 3), "io:");
}

}  // namespace
}  // namespace ithbat
