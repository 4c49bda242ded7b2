#pragma once
// What the agents stored, read back after a world has run: one store per simulated node,
// opened from the agent's data directory (the agent flushes on exit). Small query helpers
// over store::Store for the checker: counter increases per series in a window, gauge means
// and maxima, events of a job.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/labels.h"
#include "core/result.h"
#include "lab/world.h"
#include "store/store.h"

namespace ithbat::sim::lab {

struct SeriesValue {
  std::string node;
  LabelSet labels;
  double value = 0;
};

class Evidence {
 public:
  // Opens every node's store (memory budget generous: a lab world is small). A node whose
  // data directory cannot be opened is an error: its agent never wrote anything.
  static Result<Evidence> Open(const World& world);
  // For tests: stores built in memory, keyed by node name.
  static Evidence FromStores(std::map<std::string, std::unique_ptr<store::Store>> stores);

  const store::Store* StoreOf(const std::string& node) const;
  std::vector<std::string> Nodes() const;

  // Where a counter starts when its series begins inside the window: at its first sample (a
  // lifetime or since-agent-start counter: its first value is history), or at zero (a
  // per-process counter the agent registers at its first event: the first value is growth).
  enum class Birth { kFirstSample, kZero };
  // Per matching series of `node` ("" = every node) with samples in [from, to]: the counter's
  // increase from the last sample before `from` (or from its birth, as `birth` says) to the last
  // in the window; resets — a value below the previous one — count the new value as growth.
  std::vector<SeriesValue> Increase(const std::string& node, const std::string& selector, TimeNs from, TimeNs to,
                                    Birth birth = Birth::kFirstSample) const;
  // Per matching series: the mean / the maximum of the samples in [from, to]; series without
  // samples there are left out.
  std::vector<SeriesValue> Mean(const std::string& node, const std::string& selector, TimeNs from, TimeNs to) const;
  std::vector<SeriesValue> Max(const std::string& node, const std::string& selector, TimeNs from, TimeNs to) const;
  // Raw samples, for checks that scan time.
  std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> Samples(const std::string& node, const std::string& selector,
                                                                   TimeNs from, TimeNs to) const;
  // Events of every node matching the query, in time order.
  std::vector<Event> Events(const store::EventQuery& query) const;

 private:
  std::map<std::string, std::unique_ptr<store::Store>> stores_;
};

}  // namespace ithbat::sim::lab
