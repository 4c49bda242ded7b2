#pragma once
// A small world built in code for the sim_node tests (no YAML: the tests must not depend on a
// scenario file's content).
#include <string>
#include <vector>

#include "scenario/scenario.h"

namespace ithbat::sim::node::testing {

inline scenario::NicT<scenario::Plain> Nic(std::string name, std::vector<int64_t> gpus, double gbps = 400) {
  scenario::NicT<scenario::Plain> n;
  n.name = std::move(name);
  n.port = 1;
  n.rate_gbps = gbps;
  n.gpus = std::move(gpus);
  return n;
}

// Two nodes of 4 H100 each; mlx5_0 serves GPUs 0-1, mlx5_1 GPUs 2-3.
inline scenario::ResolvedScenario SmallWorld() {
  scenario::ResolvedScenario s;
  s.version = 1;
  s.name = "small";
  s.time_compression = 1;
  s.duration_s = 60;
  for (const char* name : {"n0", "n1"}) {
    scenario::NodeT<scenario::Plain> node;
    node.name = name;
    node.gpus.count = 4;
    node.gpus.model = scenario::GpuModel::kH100Sxm;
    node.nics = {Nic("mlx5_0", {0, 1}), Nic("mlx5_1", {2, 3})};
    s.nodes.push_back(node);
  }
  return s;
}

}  // namespace ithbat::sim::node::testing
