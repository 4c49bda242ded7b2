#pragma once
// The lab judges the world before it judges the engine (issue 27): did the story the file
// scripts happen? A world that ran on a machine too slow for it can end before its fault fires,
// or starve its GPUs of launches the story never scripted, and the engine's answer on such a
// world says nothing about the engine. Its result is INVALID, with the reason, never PASS, MISSED
// or WRONG.
//
// Judged from world.json (what the simulator did) and the scenario; the engine's evidence is read
// only to count the host starvation it would see:
//  - every timeline event fired (the time and, for a step event, the step it fired at);
//  - every job started, and reached the steps its own loss model scripts (a drift, an explosion,
//    a NaN) unless it ended by itself before them;
//  - the world did not stop at its cap with its story untold (sim/runner/story.h);
//  - the jobs kept their pace: the median step against the median step the script asks of them
//    (the ranks' planned compute, or their data loader's pace), at least kMinPace, over the steps
//    before the first timeline event (the healthy part: a fault that slows the job is the story);
//  - a world whose story scripts no host load shows no GPU starved of launches while its peers
//    are busy (what host_bottleneck reads) on any node kMinStarvedSamples times or more before its
//    first timeline event (after it an idle GPU may be the story: a hung rank, a lost GPU). Where the
//    story loads the hosts (scenario::ScriptedHostLoad) neither starvation nor pace is judged:
//    both are then the story's (an input-bound job's loaders ask for a core per rank);
//  - budget windows: the world ran long enough for each expected verdict's budget. A window the
//    world ended inside makes the world INVALID only where the verdict did not come in time.
#include <optional>
#include <string>
#include <vector>

#include "lab/evidence.h"
#include "lab/signal_checks.h"
#include "lab/world.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::sim::lab {

// Below half the pace its script asks, a world's step time is the machine's: its hosts lag their
// GPUs by more than the step itself, the order of arrivals at collectives is the scheduler's,
// and the probes' duty cycle counts a fraction of what it counts at pace. A quiet 2-core machine
// runs the shipped worlds at 0.74–0.90 of it, and at the same with one core kept busy (the rest is
// the collectives and the hosts' own work, which the planned step leaves out); case04 ran at
// about 0.29 before the simulator was made lighter (issue 27).
inline constexpr double kMinPace = 0.5;
// The pace is judged over at least this many steps before the first timeline event.
inline constexpr int kMinPaceSteps = 5;

struct JobPace {
  std::string job;
  int steps = 0;           // steps judged
  double scripted_s = 0;   // median scripted step, scenario seconds
  double achieved_s = 0;   // median achieved step, scenario seconds
  double pace() const { return achieved_s > 0 ? scripted_s / achieved_s : 0; }
};

struct StoryCheck {
  std::vector<SignalResult> items;    // the story as it happened, one line each ([ok]/[NO])
  std::vector<std::string> invalid;   // why the story did not happen (non-empty: INVALID)
  std::vector<std::string> uncovered; // budget windows the world ended inside
  std::vector<std::string> happened;  // short lines for a summary: "slowdown at 64 s (step 252)"
  std::vector<JobPace> paces;
  std::optional<double> min_pace;     // the slowest job's pace (unset: no job judged)
  double real_s = 0;                  // how long the world ran, real seconds
  double planned_real_s = 0;          // how long its script planned
  int starved = 0;                    // starved samples the job's host explains (host_bottleneck's)
  int starved_contended = 0;          // ... and those that came while the starved rank waited for a CPU
  std::string host_load;              // how the story loads the hosts ("" = it does not)
  bool ok() const { return invalid.empty(); }
};

StoryCheck CheckStory(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                      const scenario::Expectations& expect);

// The story milestones (sim/runner/story.h) the expectations' budgets need: how far each subject
// job must go, how many saves or seconds after an event, for each budget to be judged. Never the
// answer: only how long the story must run.
std::vector<std::string> BudgetMilestones(const scenario::ResolvedScenario& resolved,
                                          const scenario::Expectations& expect);

}  // namespace ithbat::sim::lab
