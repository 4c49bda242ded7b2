#pragma once
// The diagnosis engine judged against a scenario's `expect` block: the detectors and the
// investigator (src/detect, src/investigate) run over the agents' stores — knowing nothing of
// the scenario — and the lab compares what they concluded with what the file says happened:
// verdict, cause and subjects, nothing on controls, and how soon the first verdict came (the
// world replayed through views clamped to successive instants).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/finding.h"
#include "lab/evidence.h"
#include "lab/signal_checks.h"
#include "lab/world.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::sim::lab {

// The replay's step: the engine is run as of every this many seconds of the world.
inline constexpr TimeNs kReplayStepNs = 2 * kNsPerSec;
// A first hit between two replays is narrowed down by bisection to this resolution.
inline constexpr TimeNs kReplayResolutionNs = 50 * kNsPerMs;

struct ExpectedDiagnosis {
  std::string expected;               // "job: data_imbalance (job ft-7b-arabic)"
  std::optional<size_t> matched;      // index into DiagnosisCheck::diagnoses
  std::string mismatch;               // why no diagnosis matched (closest one's differences)
  std::optional<TimeNs> first_verdict;  // replay: when a matching diagnosis first appeared
  std::optional<BudgetResult> budget;
  bool ok() const { return matched.has_value() && (!budget || budget->ok()); }
};

struct DiagnosisCheck {
  std::vector<Diagnosis> diagnoses;       // the engine's at the end of the world
  std::vector<ExpectedDiagnosis> expected;
  std::vector<size_t> extra;              // diagnoses no expectation matched
  int replays = 0;
  double engine_seconds = 0;              // CPU time of the engine over all replays
  // Where an expected diagnosis is missing: what the detectors measured at the end of the world
  // (detect::DetectInput::trace), so that a miss in a CI log says why.
  std::vector<std::string> trace;
  bool ok() const;
};

// With replay, the engine also runs as of every kReplayStepNs from the world's start to find
// when each expected diagnosis first appeared.
DiagnosisCheck CheckDiagnoses(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                              const scenario::Expectations& expect, bool replay);

// The agents' job ids (a Slurm id, a run id) → the scenario's job or server they belong to, by
// the pids the agents tagged.
using JobMap = std::map<std::string, std::string>;
JobMap MapJobs(const World& world, const Evidence& evidence);

// Whether diagnosis `d` is expectation `f`: verdict, cause, job, and each subject the file
// names. Returns "" when it is, else the differences.
std::string MatchDiagnosis(const World& world, const JobMap& jobs, const Diagnosis& d, const scenario::ExpectedFinding& f);

std::string FormatDiagnosisCheck(const DiagnosisCheck& c);

}  // namespace ithbat::sim::lab
