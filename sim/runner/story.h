#pragma once
// When a world's story has happened, so that the world does not end before it (issue 27).
//
// A scenario says what happens in steps (a loss that explodes at step 800, an Xid at step 120, a
// rerun that must pass step 815) and how long the world lasts in seconds. The two agree only when
// this machine keeps the world's pace; on a slower one the duration ends the world before its
// story. So the runner ends a world at the later of its duration and the moment its story is
// told — every step event fired, every job the script runs to its end ended, every step a job's
// own loss model scripts reached, every milestone the caller names reached — and never after a
// hard cap (kStoryCapFactor times the planned real duration): a world that needs more runs at
// under a third of its pace, and its evidence is the machine's, not the story's.
//
// Milestones the caller names (the lab derives them from the `expect` budgets: how far the story
// must go for a budget to be judged, never what the answer is) are strings:
//   job=ID,step=N               the job reached step N
//   event=ID,job=J,steps=N      N steps of job J after the event fired
//   event=ID,job=J,saves=N      N checkpoint saves of job J began after the event fired
//   event=ID,seconds=S          S scenario seconds after the event fired
//   seconds=S                   S scenario seconds after the world started
// A milestone of a job that ended, or of an event that can no longer fire, counts as reached:
// the lab's story check says what was missed.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "scenario/scenario.h"
#include "scenario/script.h"

namespace ithbat::sim::runner {

// The world never runs longer than this many times its planned real duration.
inline constexpr double kStoryCapFactor = 3.0;
// After the last milestone the world goes on this many real seconds: the agents sample once a
// second and the last step's samples must reach their stores.
inline constexpr double kStoryTailRealS = 3.0;

struct StoryMilestone {
  std::string job;     // the job whose steps or saves count ("" for seconds)
  std::string event;   // counted from this event's firing ("" = from the job's start or the world's)
  int64_t step = -1;   // the job reaches this step (absolute)
  int64_t steps = 0;   // ... or this many steps after the event
  int64_t saves = 0;   // ... or this many saves after the event
  double seconds = 0;  // ... or this many scenario seconds after the event (or the world's start)
  std::string why;     // for the log: what the story still waits for
};

Result<StoryMilestone> ParseMilestone(std::string_view text);
std::string FormatMilestone(const StoryMilestone& m);

// The milestones the scenario itself implies (no expectation needed): every job scripted to end
// reaches its last step, and every loss moment it scripts is reached. Step events are the
// runner's own (they fire when their step comes).
std::vector<StoryMilestone> ImplicitMilestones(const scenario::ResolvedScenario& s);

}  // namespace ithbat::sim::runner
