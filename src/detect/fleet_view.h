#pragma once
// What the detectors read: the stores of one or more nodes (one agent's own store, the lab's
// per-node stores after a world ran, an evidence bundle), read-only, with small query helpers —
// counter increases per series in a window, gauge means and maxima, raw samples, events.
//
// A view may be clamped to a horizon (AsOf): every query then ends at that instant, whatever
// `to` it asks for. The lab replays a finished world through clamped views to measure when a
// diagnosis first became provable; a detector cannot peek past "now" by accident.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/event.h"
#include "core/labels.h"
#include "core/time.h"
#include "store/store.h"

namespace ithbat::detect {

struct SeriesValue {
  std::string node;
  LabelSet labels;
  double value = 0;
};

// One sampled counter's value at t: the last sample at or before t (nullopt before the first).
std::optional<double> SampleAt(const std::vector<store::Sample>& samples, TimeNs t);
// One sampled counter's increase over (a, b]: from its value at a (none before its first sample:
// the first value is history) to its last sample in the window; a reset — a value below the
// previous one — counts the new value as growth, as FleetView::Increase does.
double CounterGrowth(const std::vector<store::Sample>& samples, TimeNs a, TimeNs b);

class FleetView {
 public:
  FleetView() = default;
  // Owns the stores (the lab, bundles, tests). Keyed by node name.
  static FleetView Owning(std::map<std::string, std::unique_ptr<store::Store>> stores);
  // Borrows them (the agent's own store, the hub's): they must outlive the view.
  static FleetView Borrowing(std::map<std::string, const store::Store*> stores);

  // The same stores, every query ending at `horizon` at the latest. The returned view borrows
  // from this one, which must outlive it.
  FleetView AsOf(TimeNs horizon) const;
  TimeNs horizon() const { return horizon_; }

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
  // Raw samples, for checks that scan time. A selector that does not parse selects nothing
  // (selectors are the callers' own constants; their tests cover them).
  std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> Samples(const std::string& node,
                                                                          const std::string& selector, TimeNs from,
                                                                          TimeNs to) const;
  // Events of every node matching the query, in time order; each event's identity.node is
  // filled with the node whose store held it when the collector left it empty.
  std::vector<Event> Events(const store::EventQuery& query) const;
  // Step spans of one rank of a job on `node` in [from, to].
  std::vector<StepSpan> Steps(const std::string& node, const std::string& job, int32_t rank, TimeNs from,
                              TimeNs to) const;

 private:
  std::map<std::string, const store::Store*> stores_;
  std::shared_ptr<std::vector<std::unique_ptr<store::Store>>> owned_;
  TimeNs horizon_ = kMaxTime;
};

}  // namespace ithbat::detect
