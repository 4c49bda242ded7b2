#pragma once
// The list of detectors (registry.cc): adding a detector means adding its family header and one
// line there, and documenting its cause in docs/diagnoses.md.
#include <span>

#include "detect/detector.h"

namespace ithbat::detect {

std::span<const DetectorInfo> RegisteredDetectors();

}  // namespace ithbat::detect
