#pragma once
// Helpers every signal check shares (signal_checks.cc and the look-alike families in
// checks_*.cc): how a job's series are selected in an agent's store, its nodes and logging
// process, and the budget clock. Lab-internal: nothing outside sim/lab includes this.
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "core/labels.h"
#include "core/time.h"
#include "detect/jobs.h"
#include "lab/evidence.h"
#include "lab/signal_checks.h"
#include "lab/world.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::sim::lab {

// A label's value, or "" when absent.
std::string Label(const LabelSet& labels, std::string_view name);
// A label value quoted for a selector.
std::string Quote(std::string_view v);
// When the job ended (its last process), or the world's end when it never did.
TimeNs JobEnd(const World& world, const WorldJob& job);
// The agent names a process's job by what its scheduler says (a Slurm job id, a torchelastic run
// id, a pod) — not by the scenario's job id — so a check selects a job's series by its ranks'
// pids, which world.json has: `pid=~"101|102"` for the ranks on `node`.
std::string JobPids(const WorldJob& job, const std::string& node);
// The process whose output carries the job's log lines: rank 0 (or the lowest rank known).
int32_t LoggingPid(const WorldJob& job);
std::set<std::string> JobNodes(const WorldJob& job);
// The result of a check whose subject job is not in world.json: one failed signal saying so.
FindingCheck NoJob(const scenario::ExpectedFinding& f);
// "job: data_imbalance (job x) [resource]"
std::string Describe(const scenario::ExpectedFinding& f);
// When the budget starts counting, on the world's clock.
std::optional<TimeNs> BudgetStart(const World& world, const scenario::ResolvedScenario& resolved,
                                  const scenario::ExpectedBudget& b, const WorldJob* job);
std::string UnitName(scenario::BudgetUnit u);
// The budget used when the proving signal appeared at `seen`: steps the job started, saves it
// began, or scenario seconds, from the budget's start.
std::optional<BudgetResult> Budget(const World& world, const scenario::ResolvedScenario& resolved,
                                   const scenario::ExpectedBudget& b, const WorldJob* job,
                                   std::optional<TimeNs> seen);
// The last instant (at most limit) at which a verdict would still be within the budget: the
// allowed steps, saves or seconds counted from the budget's start. Unset without a budget or
// where the budget has not started by limit.
std::optional<TimeNs> BudgetEnd(const World& world, const scenario::ResolvedScenario& resolved,
                                const scenario::ExpectedBudget& b, const WorldJob* job, TimeNs limit);
// The first logged step whose loss is not finite or above kLossSpikeFactor × the lowest so far.
std::optional<std::pair<int64_t, TimeNs>> Divergence(const Evidence& evidence, const WorldJob& job);

}  // namespace ithbat::sim::lab
