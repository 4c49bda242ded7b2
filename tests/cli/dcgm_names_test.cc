// `--dcgm-exporter-names` computes each DCGM field from one of the agent's GPU metrics; the
// table names them as text, so this test holds it to what the collectors really describe.
#include "serve/dcgm_names.h"

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "cli/agent_process.h"

namespace ithbat::cli {
namespace {

TEST(DcgmNames, EverySourceAndSelectorIsAMetricTheAgentDescribes) {
  auto groups = DescribeAgentMetrics();
  ASSERT_TRUE(groups.has_value()) << groups.error().ToString();
  std::map<std::string, MetricDesc, std::less<>> described;
  for (const auto& [collector, descs] : *groups) {
    for (const MetricDesc& d : descs) described.emplace(d.name, d);
  }
  for (const serve::DcgmAlias& a : serve::DcgmAliases()) {
    auto it = described.find(a.source);
    ASSERT_NE(it, described.end()) << a.field << ": no collector describes " << a.source;
    const std::set<std::string_view> labels(it->second.label_names.begin(), it->second.label_names.end());
    EXPECT_TRUE(labels.contains("gpu") && labels.contains("gpu_uuid")) << a.source << " is not per GPU";
    for (const serve::LabelMatch& m : a.match) {
      if (m.name.empty()) continue;
      EXPECT_TRUE(labels.contains(m.name)) << a.field << ": " << a.source << " has no label " << m.name;
      EXPECT_FALSE(m.value.empty()) << a.field;
    }
    // A DCGM counter must come from a counter of ours, or from one of the two gauges that never
    // go down (remapped rows and retired pages are never given back), or rate() over it lies.
    if (a.type == MetricType::kCounter && it->second.type != MetricType::kCounter) {
      EXPECT_TRUE(a.source == "ithbat_gpu_remapped_rows" || a.source == "ithbat_gpu_retired_pages")
          << a.field << " is a counter in DCGM but " << a.source << " is not";
    }
  }
}

}  // namespace
}  // namespace ithbat::cli
