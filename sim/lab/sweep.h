#pragma once
// The lab's sweep (issue 6, "What must be shown"): every scenario at several fault magnitudes,
// and a confusion matrix of the causes each run was expected to show against the causes whose
// signals it did show. Until the diagnosis engine (issue 7) gives verdicts, "shown" means: the
// signal check of that cause, run on the expected finding's subjects, saw every signal it needs
// (the budget is not judged). A look-alike pair whose twin's check also passes is where signal
// evidence alone does not tell causes apart — what the engine must resolve.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lab/evidence.h"
#include "lab/world.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::sim::lab {

// The causes a signal check exists for.
const std::vector<scenario::Cause>& CheckableCauses();

// The causes whose signals the run shows. For each expected finding, every checkable cause is
// checked on the same subjects (a storage check gets the job's checkpoint mount when the
// finding names no mount); a control (no findings) is checked once per job and per server with
// that job or server as the subject. Empty = no cause's signals (a clean run).
std::set<scenario::Cause> ShownCauses(const World& world, const Evidence& evidence,
                                      const scenario::ResolvedScenario& resolved, const scenario::Expectations& expect);

// One run of the sweep.
struct SweepRun {
  std::string scenario;
  uint64_t seed = 0;
  double magnitude = 1.0;
  bool ran = false;                       // false: the run or its read failed (error)
  std::string error;
  std::set<std::string> expected;         // cause names; {"none"} for a control
  std::set<std::string> shown;            // cause names; {"none"} when no cause's signals
};

// The matrix (rows: expected cause, columns: shown cause; a run adds one to every (e, s) pair of
// its sets), per magnitude and over all, then per run: expected, shown, missed, extra.
std::string FormatSweep(const std::vector<SweepRun>& runs);

}  // namespace ithbat::sim::lab
