#pragma once
// The agent's diagnosis engine on the runtime's cadence: each tick (every `diagnose-interval`)
// it runs one NodeDiagnoser round over the node's own store and writes what it found as
// metrics:
//   ithbat_diagnosis_active{verdict,cause,job_id}  1 while a diagnosis is open or updated, 0 once
//                                               resolved (written once more after it is forgotten)
//   ithbat_diagnosis_rounds_total, ithbat_diagnosis_errors_total, ithbat_diagnosis_round_seconds
// A collector rather than a thread of its own, so the round gets the runtime's worker thread,
// watchdog (a round past collect-deadline is reported hung, the agent goes on) and health.
// It lives in cli/ because it joins agent/ (the collector contract) and investigate/ (the
// engine), which do not depend on each other.
//
// Ownership: the diagnoser and the store are borrowed and must outlive the collector (the
// agent process owns all three and stops the runtime first). Errors: a round that fails is
// reported through ReportError (counted, logged rate-limited) and in
// ithbat_diagnosis_errors_total; the previous diagnoses stay served. Init fails only if the
// sink refuses a series.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/collector.h"
#include "investigate/node_diagnoser.h"
#include "store/store.h"

namespace ithbat::cli {

class DiagnosisCollector final : public agent::Collector {
 public:
  DiagnosisCollector(investigate::NodeDiagnoser& diagnoser, const store::Store& store, std::string node);

  std::vector<MetricDesc> Describe() const override;

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  // Registers (once) and returns the series of one {verdict, cause, job}.
  Result<SeriesRef> ActiveSeries(const std::string& verdict, const std::string& cause,
                                 const std::string& job);

  investigate::NodeDiagnoser& diagnoser_;
  const store::Store& store_;
  const std::string node_;
  Sink* sink_ = nullptr;
  SeriesRef rounds_{}, errors_{}, round_seconds_{};
  std::map<std::string, SeriesRef> active_refs_;  // "verdict\x1fcause\x1fjob" → series
  std::set<std::string> written_last_tick_;       // keys written last tick (a vanished one gets a 0)
};

}  // namespace ithbat::cli
