#pragma once
// The lab's checker until the diagnosis engine exists (issue 6, "What must be shown"): for
// each finding a scenario's `expect` block names, are the SIGNALS that prove that cause in the
// agents' stores, and how soon after the onset did they appear? Each check reads only the
// agents' stores (Evidence) for the signal itself; world.json says where to look (the job,
// its GPUs, the mount, the window) and is the clock for budgets in steps and saves.
//
// These checks are test-side judges of the simulator + collectors, not detectors: they know
// the expected cause (that is their input) and ask whether the evidence a detector would need
// is there. Thresholds are named below and documented in docs/scenarios.md ("The lab").
#include <optional>
#include <string>
#include <vector>

#include "core/time.h"
#include "lab/evidence.h"
#include "lab/world.h"
#include "scenario/expect/expect.h"
#include "scenario/scenario.h"

namespace ithbat::sim::lab {

// data_imbalance: the slowest (last-arriving) rank rotates — on every node no rank is last in
// more than this share of the aligned collectives (1.5 fair shares when that is more: two ranks) ...
inline constexpr double kRotationMaxShare = 0.5;
// ... and at least half of the node's ranks were last at least this fraction of a fair share.
inline constexpr double kRotationMinFairShare = 0.5;
// data_imbalance: ranks wait for their peers — summed arrival lag over ranks, as a share of the
// job's rank-time, at least this.
inline constexpr double kMinWaitShare = 0.01;
// storage: in a save after the onset, the mean write, fsync or close latency of the job on the
// mount at least this multiple of the same op's mean over the saves before the onset.
inline constexpr double kStorageLatencyFactor = 3.0;
// storage: the job stops during the saves after the onset — the largest launch gap in them at
// least this multiple of the largest gap outside saves, or (launch probes duty-cycled by the
// overhead budget never measure a gap across a detached slice) ...
inline constexpr double kLaunchGapFactor = 2.0;
// ... the job's GPUs' mean utilisation in them at most this share of the mean outside saves.
inline constexpr double kSaveIdleFactor = 0.6;
// serving_config: requests wait while at most this share of the server's slots run ...
inline constexpr double kServingFreeSlotShare = 0.5;
// ... in at least this share of the samples, and the first evidence is the kServingDebounce-th
// such sample (one scrape is not a pattern).
inline constexpr double kServingWaitingShare = 0.5;
inline constexpr int kServingDebounce = 5;
// serving_config: the KV cache's mean usage at most this (the memory is there, the batch is not).
inline constexpr double kServingKvHeadroom = 0.5;
// recipe_numerics: a loss above this multiple of the lowest loss so far (or not finite).
inline constexpr double kLossSpikeFactor = 3.0;
// recipe_numerics: the rerun diverges within this many steps of the original.
inline constexpr int64_t kDivergenceAlignSteps = 10;

struct SignalResult {
  std::string name;      // what must be seen, e.g. "the slowest rank rotates"
  bool ok = false;
  std::string observed;  // what the stores showed (numbers)
  std::optional<TimeNs> first_seen;  // when the signal first became evident
};

struct BudgetResult {
  std::string unit;  // steps, saves, seconds
  double allowed = 0;
  std::optional<double> used;  // unset: the signal never appeared
  bool ok() const { return used && *used <= allowed; }
};

struct FindingCheck {
  std::string expected;  // "job: data_imbalance (job ft-7b-arabic)"
  std::vector<SignalResult> signals;
  std::optional<BudgetResult> budget;
  bool skipped = false;
  std::string skip_reason;
  bool ok() const;
};

struct ScenarioCheck {
  std::vector<SignalResult> world;  // the world ran and the agents saw it
  std::vector<FindingCheck> findings;
  bool ok() const;
  bool any_skipped() const;
};

ScenarioCheck CheckScenario(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                            const scenario::Expectations& expect);

// The parts, for unit tests.
std::vector<SignalResult> CheckWorldRan(const World& world, const Evidence& evidence);
FindingCheck CheckDataImbalance(const World& world, const Evidence& evidence, const scenario::ExpectedFinding& f);
FindingCheck CheckStorage(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const scenario::ExpectedFinding& f);
FindingCheck CheckServingConfig(const World& world, const Evidence& evidence, const scenario::ExpectedFinding& f);
FindingCheck CheckRecipeNumerics(const World& world, const Evidence& evidence, const scenario::ExpectedFinding& f);
FindingCheck CheckNothing(const World& world, const Evidence& evidence);

// The look-alikes' causes (issue 6 item 8). Each takes the finding's subjects, judges the
// signals that prove that cause and sets its own budget. Thresholds live beside them.
// checks_gpu.{h,cc}: the GPU and the job's own numbers.
FindingCheck CheckThermalPower(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                               const scenario::ExpectedFinding& f);
FindingCheck CheckGpuHardware(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                              const scenario::ExpectedFinding& f);
FindingCheck CheckSilentDataCorruption(const World& world, const Evidence& evidence,
                                       const scenario::ResolvedScenario& resolved, const scenario::ExpectedFinding& f);
FindingCheck CheckNoLearning(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                             const scenario::ExpectedFinding& f);
FindingCheck CheckHang(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                       const scenario::ExpectedFinding& f);
// checks_host_fabric.{h,cc}: the host, the input pipeline and the fabric.
FindingCheck CheckNetwork(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const scenario::ExpectedFinding& f);
FindingCheck CheckHostBottleneck(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                                 const scenario::ExpectedFinding& f);
FindingCheck CheckInputPipeline(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                                const scenario::ExpectedFinding& f);

// One finding's check, whatever its cause (SKIP, with the reason, for a cause without one).
FindingCheck CheckFinding(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const scenario::ExpectedFinding& f);

}  // namespace ithbat::sim::lab
