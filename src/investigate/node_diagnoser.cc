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
  std::vector<Diagnosis> result;
  std::string failure;
  try {
    const detect::FleetView view = detect::FleetView::Borrowing({{node, &store}}).AsOf(now);
    const std::vector<detect::JobView> jobs = detect::DiscoverJobs(view, from, now);
    const std::vector<Finding> findings = detect::RunDetectors(detect::DetectInput{view, jobs, from, now});
    result = investigator_.Update(findings, view, jobs, now);
  } catch (const std::exception& e) {
    failure = e.what();
    if (failure.empty()) failure = "exception without a message";
  } catch (...) {
    failure = "unknown exception";
  }
  const TimeNs duration = MonotonicNowNs() - started;
  std::lock_guard lock(mu_);
  ++stats_.rounds;
  stats_.last_round_duration = duration;
  stats_.last_round_at = now;
  if (!failure.empty()) {
    ++stats_.errors;
    return MakeError(ErrorCode::kInternal, "diagnosis round failed: " + failure);
  }
  current_ = std::move(result);
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
