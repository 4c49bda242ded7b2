#pragma once
// Synthetic agent stores for the lab's check tests (testutil/synthetic_fleet.h, the detectors' own),
// handed to the checks as Evidence.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "lab/evidence.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::sim::lab {

using testutil::kS;
using testutil::kT0;
using testutil::Labels;

// The detectors' synthetic fleet, handed to the checks as the lab's Evidence.
class Stores : public testutil::SyntheticFleet {
 public:
  Evidence Take() { return Evidence::FromStores(TakeStores()); }
};

}  // namespace ithbat::sim::lab
