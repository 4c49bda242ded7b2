#include "investigate/node_diagnoser.h"

#include <exception>
#include <utility>

#include "detect/detector.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::investigate {

NodeDiagnoser::NodeDiagnoser(NodeDiagnoserOptions options)
    : options_(options), investigator_(options.investigate) {}

Status NodeDiagnoser::Round(const store::Store& store, const std::string& node, TimeNs now) {
  const TimeNs started = MonotonicNowNs();
  const TimeNs from = now - options_.lookback;
  auto result = investigator_.Round(detect::FleetView::Borrowing({{node, &store}}), from, now);
  const TimeNs duration = MonotonicNowNs() - started;
  std::lock_guard lock(mu_);
  ++stats_.rounds;
  stats_.last_round_duration = duration;
  stats_.last_round_at = now;
  if (!result) {
    ++stats_.errors;
    return std::unexpected(result.error());
  }
  current_ = std::move(*result);
  return Ok();
}

std::vector<Diagnosis> NodeDiagnoser::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

NodeDiagnoserStats NodeDiagnoser::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace ithbat::investigate
