#include "scenario/magnitude.h"

#include <algorithm>
#include <cmath>

namespace ithbat::scenario {
namespace {

// A factor in (0, 1] moved toward 1 (no fault) by magnitude m.
// Never 0: a clock or a link at factor 0 is a different fault (a lost GPU, a link down).
double ScaleFactor(double f, double m) { return std::clamp(1.0 - (1.0 - f) * m, 0.01, 1.0); }

const NodeT<Plain>* FindNode(const ResolvedScenario& s, const std::string& name) {
  for (const auto& n : s.nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

const MountT<Plain>* FindMount(const ResolvedScenario& s, const std::string& name) {
  for (const auto& m : s.mounts) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace

Status ScaleFaultMagnitude(ResolvedScenario& s, double m) {
  if (!std::isfinite(m) || m < 0 || m > kMaxMagnitude) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "magnitude {} is outside [0, {}]", m, kMaxMagnitude);
  }
  if (m == 1.0) return Ok();  // the file as written, bit for bit
  for (auto& e : s.timeline) {
    switch (e.kind) {
      case EventKind::kThermalThrottle:
        e.clock_factor = ScaleFactor(e.clock_factor, m);
        break;
      case EventKind::kPowerCap: {
        const NodeT<Plain>* node = FindNode(s, e.node);
        if (node == nullptr) break;
        const GpuModelSpec& spec = ModelSpec(node->gpus.model);
        const double max_w = spec.power_limit_w;
        e.power_limit_w = std::clamp(max_w - (max_w - e.power_limit_w) * m, static_cast<double>(spec.min_power_limit_w),
                                     max_w);
        break;
      }
      case EventKind::kIbLinkDegrade:
        e.bandwidth_factor = ScaleFactor(e.bandwidth_factor, m);
        e.symbol_errors_per_s *= m;
        break;
      case EventKind::kIbCongestion:
        e.bandwidth_factor = ScaleFactor(e.bandwidth_factor, m);
        break;
      case EventKind::kStorageSlowdown: {
        e.bandwidth_factor = ScaleFactor(e.bandwidth_factor, m);
        const MountT<Plain>* mount = FindMount(s, e.mount);
        const double base = mount != nullptr ? mount->fsync_ms : 0.0;
        e.fsync_ms = std::max(base, base + (e.fsync_ms - base) * m);
        break;
      }
      case EventKind::kHostCpuContention:
        e.cpu_share = std::clamp(e.cpu_share * m, 0.0, 1.0);
        break;
      case EventKind::kNvlinkErrors:
      case EventKind::kEccCorrected:
        if (e.count > 0) e.count = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(e.count) * m)));
        break;
      default:
        break;  // discrete: happens or not
    }
  }
  return Ok();
}

}  // namespace ithbat::scenario
