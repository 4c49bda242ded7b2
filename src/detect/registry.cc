#include "detect/registry.h"

#include <array>

#include "detect/stragglers/stragglers.h"

namespace ithbat::detect {

std::span<const DetectorInfo> RegisteredDetectors() {
  static const std::array kAll{
      DetectorInfo{"stragglers", "stragglers", &DetectStragglers},
  };
  return kAll;
}

}  // namespace ithbat::detect
