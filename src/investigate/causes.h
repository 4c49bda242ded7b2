#pragma once
// The closed set of causes (docs/diagnoses.md): for each, the side it falls on, what it means
// and the fix in one sentence. The investigator takes the fix from here, so a diagnosis and
// the documentation cannot say different things.
#include <span>
#include <string_view>

#include "core/finding.h"

namespace ithbat::investigate {

struct CauseInfo {
  Cause cause;
  Verdict verdict;            // the side a proven diagnosis of this cause falls on
  std::string_view meaning;
  std::string_view fix;
  // Steps after this cause began teach the model nothing (divergence, corruption, no learning):
  // the productive share counts them zero.
  bool wastes_steps_after_onset;
};

std::span<const CauseInfo> Causes();
const CauseInfo& InfoOf(Cause c);

}  // namespace ithbat::investigate
