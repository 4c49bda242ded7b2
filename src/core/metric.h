#pragma once
// A metric's self-description, declared once by the collector that produces it (schemas are
// data): /metrics HELP/TYPE lines and docs/metrics.md are generated from these.
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat {

enum class MetricType { kGauge, kCounter };
std::string_view MetricTypeName(MetricType t);  // "gauge" / "counter"

struct MetricDesc {
  std::string name;   // full name, Prometheus conventions: ithbat_<source>_<what>_<unit>[_total]
  std::string help;   // one sentence, ends without a period
  std::string unit;   // base unit as a name suffix: seconds, bytes, ratio, celsius, joules, watts, hertz, ... ("" = none)
  MetricType type = MetricType::kGauge;
  std::vector<std::string> label_names;  // the labels every series of this metric carries (documentation)
};

// Checks the Prometheus naming conventions: a valid name, counters end in "_total", a unit
// appears as the suffix (before "_total"), help text present and on one line.
Status ValidateMetricDesc(const MetricDesc& desc);

}  // namespace ithbat
