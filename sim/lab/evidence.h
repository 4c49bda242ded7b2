#pragma once
// What the agents stored, read back after a world has run: one store per simulated node,
// opened from the agent's data directory (the agent flushes on exit). The queries are the
// diagnosis engine's own (detect::FleetView): the checker and the detectors read the same way.
#include <map>
#include <memory>
#include <string>

#include "core/result.h"
#include "detect/fleet_view.h"
#include "lab/world.h"
#include "store/store.h"

namespace ithbat::sim::lab {

using detect::SeriesValue;

class Evidence : public detect::FleetView {
 public:
  // Opens every node's store (memory budget generous: a lab world is small). A node whose
  // data directory cannot be opened is an error: its agent never wrote anything.
  static Result<Evidence> Open(const World& world);
  // For tests: stores built in memory, keyed by node name.
  static Evidence FromStores(std::map<std::string, std::unique_ptr<store::Store>> stores);

 private:
  explicit Evidence(detect::FleetView v) : detect::FleetView(std::move(v)) {}
};

}  // namespace ithbat::sim::lab
