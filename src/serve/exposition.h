#pragma once
// The Prometheus text exposition (format 0.0.4) of the store's newest samples, and what an
// operator can add to it: target labels (cluster, node) and dcgm-exporter's names for the GPU
// counters (dcgm_names.h), so dashboards built for dcgm-exporter work on the agent unchanged.
#include <string>
#include <utility>
#include <vector>

#include "core/time.h"
#include "store/store.h"

namespace ithbat::serve {

struct ExpositionOptions {
  // Put on every series that has no label of that name, in this order (the agent's --cluster
  // and --node). Prometheus keeps them as they are: neither name is one it sets itself.
  std::vector<std::pair<std::string, std::string>> target_labels;
  // Also expose the GPU counters under dcgm-exporter's metric and label names.
  bool dcgm_names = false;
  std::string hostname;  // dcgm-exporter's Hostname label (the node name)
};

// Families sorted by name, series by their labels (two renders of one store are identical),
// HELP/TYPE from the descs; series silent since stale_before are left out. The dcgm-exporter
// families, when asked for, follow the agent's own.
std::string RenderPrometheusText(const store::Store& store, TimeNs stale_before,
                                 const ExpositionOptions& options = {});

}  // namespace ithbat::serve
