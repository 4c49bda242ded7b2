#pragma once
// dcgm-exporter's names for the agent's GPU counters. Operators who run dcgm-exporter today have
// dashboards and alerts that query DCGM_FI_* metrics with dcgm-exporter's labels (gpu, UUID,
// device, modelName, Hostname, ...); with `--dcgm-exporter-names` the agent's /metrics carries
// those series too, computed from its own, so the dashboards work unchanged. docs/metrics.md
// ("dcgm-exporter names") lists what is covered and what is not.
#include <span>
#include <string_view>

#include "core/metric.h"

namespace ithbat::serve {

struct LabelMatch {
  std::string_view name;  // "": matches every series
  std::string_view value;
};

struct DcgmAlias {
  std::string_view field;   // dcgm-exporter's metric name: the DCGM field's name
  std::string_view source;  // the agent's metric it is computed from
  LabelMatch match[2];      // only the source series with both labels (unused ones are "")
  double scale;             // DCGM's value = ours × scale (DCGM's units: MHz, MiB, mJ, %)
  MetricType type;
  std::string_view help;
};

// Sorted by field; each field once.
std::span<const DcgmAlias> DcgmAliases();

}  // namespace ithbat::serve
