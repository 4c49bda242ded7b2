#pragma once
// What a resolved scenario scripts for a job, in its own steps: where it starts and ends, whether
// the script has it end within the world's duration, and the steps its loss model marks. The
// runner waits for them before it ends a world (sim/runner/story.h); the lab checks afterwards
// that they happened (sim/lab/story_check.h).
#include <cstdint>
#include <string>
#include <vector>

#include "scenario/scenario.h"

namespace ithbat::scenario {

using ResolvedJob = JobT<Plain>;

// The loss model goes NaN this many steps after its explosion (sim/workload/train_model.h).
inline constexpr int64_t kNanStepsAfterExplosion = 5;

// The first step a job runs (a resumed job starts after its resume step) and its last.
int64_t FirstStep(const ResolvedJob& job);
int64_t LastStep(const ResolvedJob& job);

// Whether the script has the job run to its last step within the scenario's duration: its start,
// start-up and steps at its nominal compute time. Collectives and saves only lengthen a step, so
// a job this says ends may still be cut by the duration on a perfect machine: the story then
// waits for it, as the files' comments say it ends.
bool ScriptedToEnd(const ResolvedScenario& s, const ResolvedJob& job);

// The steps its loss model marks (within its steps): a drift's start, the explosion and the NaN
// after it; a NaN step.
struct ScriptedStep {
  int64_t step = 0;
  const char* what = "";  // "the loss starts to drift", ...
  const char* word = "";  // the same in a word, for summaries: "drift"
};
std::vector<ScriptedStep> ScriptedLossSteps(const ResolvedJob& job);

// How the story loads the hosts' CPUs on purpose ("" = it does not): a host_cpu_contention event,
// host jitter bursts that stall ranks' threads, or a job whose data loader is slower than its GPU
// (its workers burn a core each for longer than a step: the story then asks for more cores than
// a small machine has, and sets the pace itself). Anywhere else a GPU starved of launches, or a
// job far under its pace, is the machine running the world, not the story.
std::string ScriptedHostLoad(const ResolvedScenario& s);

}  // namespace ithbat::scenario
