#pragma once
// The investigator: turns the detectors' findings into one diagnosis per incident, and keeps
// each incident's identity across rounds (opened → updated → resolved; provisional →
// confirmed). Rules (docs/diagnoses.md, "Rules"):
//  - a verdict rests on evidence from at least two different collectors; a finding with fewer
//    becomes an inconclusive diagnosis that names the suspected cause;
//  - one incident per (cause, job, resource); findings of the same incident merge;
//  - on one job, a hardware or driver fault explains what follows it (divergence, a hang,
//    other ranks' errors): those findings join the fault's diagnosis as consequences;
//  - an infrastructure resource hurting several jobs is one diagnosis naming all of them
//    (blast radius).
#include <map>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::investigate {

struct InvestigateOptions {
  double list_price_per_gpu_hour = 0;     // configuration; 0: the effective price is not computed
  TimeNs resolve_after = 120 * kNsPerSec;  // a diagnosis no finding supports for this long is resolved
  std::vector<std::string>* trace = nullptr;  // DiagnoseAsOf: the detectors' trace (detect::DetectInput)
};

// Turns one round's findings into diagnoses, without memory (offline: a bundle, the lab).
std::vector<Diagnosis> Diagnose(const std::vector<Finding>& findings, const detect::FleetView& view,
                                const std::vector<detect::JobView>& jobs, TimeNs now,
                                const InvestigateOptions& options);

// One offline round over `view` as of `now`: the jobs discovered once, every detector, Diagnose.
std::vector<Diagnosis> DiagnoseAsOf(const detect::FleetView& view, TimeNs from, TimeNs now,
                                    const InvestigateOptions& options);

// The live form: the agent and the hub call Update every round.
class Investigator {
 public:
  explicit Investigator(InvestigateOptions options) : options_(options) {}
  // Returns every diagnosis not resolved longer than resolve_after ago, in opened order.
  std::vector<Diagnosis> Update(const std::vector<Finding>& findings, const detect::FleetView& view,
                                const std::vector<detect::JobView>& jobs, TimeNs now);
  // One live round over `fleet` as of `now` looking back to `from`: the view clamped to now, the
  // jobs discovered once, every detector, Update. A detector or rule that throws does not escape:
  // the round fails with kInternal naming what was thrown (a detector that throws leaves the
  // incidents untouched). The agent's node-local engine and the hub both call this.
  Result<std::vector<Diagnosis>> Round(const detect::FleetView& fleet, TimeNs from, TimeNs now);

 private:
  InvestigateOptions options_;
  std::map<std::string, Diagnosis> by_key_;  // incident key → its newest state
  std::map<std::string, int> generation_;    // incident key → how many incidents it had (ids stay unique)
};

// The incident key of a finding: cause, job and resource.
std::string IncidentKey(const Finding& f);

}  // namespace ithbat::investigate
