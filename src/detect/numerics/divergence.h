#pragma once
// Divergence: the job's loss blows up (non-finite, or far above its lowest so far). Is it the
// recipe or the hardware?
//
// 1. The spike (joblog): the first logged loss that is not finite or above kLossSpikeFactor ×
//    the lowest loss logged before it. A finite spike must be confirmed by the next logged point
//    (kSpikeHoldFactor: one noisy point is not a pattern); a non-finite loss is final at once.
//    Reported with what came before it: loss drift (the last finite loss before the spike over
//    the lowest) and grad-norm growth (train_metric grad_norm: median of the kGradTailPoints
//    before the spike over the median of the points before those) where logged.
// 2. Hardware innocence (gpu): counter DELTAS over the job's window on every GPU its ranks use
//    (hardware_faults.h GpuDeltasOf: Xid, uncorrectable ECC, new remaps, remap pending/failure,
//    lost, NVLink errors, thermal/power-brake clock events). A constant pre-existing count is
//    history and does not move a delta.
//      - a hard fault moved (Xid other than job-class, ECC, remaps, lost): NOTHING here. The
//        fault is hardware_faults' finding, which lists this loss as its consequence, and the
//        investigator lets the device fault absorb the divergence of the same job. Emitting a
//        provisional recipe_numerics as well would only add a wrong diagnosis to be retracted.
//      - only soft signs moved (NVLink errors, thermal/power brake): an INCONCLUSIVE finding —
//        the hardware is not proven innocent, nor proven guilty.
//      - clean: job, recipe_numerics, PROVISIONAL ("recipe suspected").
// 3. Confirmation by a rerun of the same recipe. The stores hold no command line, config file
//    or log header (the joblog collector stores parsed events only; identity carries job, rank
//    and GPU), so the recipe FINGERPRINT is: the same world size, and the same loss curve — at
//    least kMinMatchPoints logged steps in common before the divergence (aligned by step
//    number) whose median relative difference is at most kLossMatchTolerance. The rerun must
//    run on DISJOINT GPUs (no UUID, or node+index where UUIDs are unknown, in common) and must
//    not have resumed from a checkpoint the suspect job wrote (its first logged step − 1 is
//    not a step at which the suspect job logged a finished checkpoint).
//      - the rerun diverges within kDivergenceAlignSteps of the original's step → job:
//        recipe_numerics, confirmed (provisional = false);
//      - the rerun logs a finite loss kSdcCleanPastSteps past the original's divergence step
//        without diverging → infrastructure: silent_data_corruption, confirmed, subjects the
//        original's GPUs (nothing in the stores says which one of them computed wrong).
//    Of two runs of one recipe that both diverge, the earlier-started carries the finding and
//    the later is named in its evidence as the confirming rerun (one incident, one finding).
#include <cstdint>
#include <optional>
#include <vector>

#include "core/event.h"
#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// A healthy run's loss only falls after its first few steps; noise is a few percent. Three
// times the lowest so far is far outside noise and what the lab's signal check uses.
inline constexpr double kLossSpikeFactor = 3.0;
// A finite spike is confirmed by the next logged point: still non-finite or above
// kSpikeHoldFactor × the lowest before the spike. A misprinted line or a one-batch outlier snaps
// back to the curve at once (noise is a few percent); a model whose state was damaged is still
// far above it a step later even when it recovers over the next steps.
inline constexpr double kSpikeHoldFactor = 1.5;
// The loss "drifted" before the spike when its last finite value was this far above the lowest
// (noise is a few percent; a recipe's instability creeps up tens of percent first, a sudden
// break — a bad GPU, a bad batch — does not).
inline constexpr double kDriftFactor = 1.2;
// Grad-norm points compared before the spike (tail) against the points before them.
inline constexpr int kGradTailPoints = 10;
// Two runs diverging within this many steps of each other diverge "at the same point": a
// recipe's instability is set by the data order and schedule, drawn with a few steps' jitter.
inline constexpr int64_t kDivergenceAlignSteps = 10;
// A rerun clean this many steps past the original's divergence rules out the recipe (a
// recipe's rerun diverges within kDivergenceAlignSteps; passing that by as much again is clear).
inline constexpr int64_t kSdcCleanPastSteps = 2 * kDivergenceAlignSteps;
// The same recipe: at least this many common logged steps before the divergence ...
inline constexpr int kMinMatchPoints = 10;
// ... whose losses differ by at most this share in the median (two runs of one recipe from
// one checkpoint differ by their noise, a few percent; different recipes by tens of percent).
inline constexpr double kLossMatchTolerance = 0.10;

// The job's logged losses (its logging process; the job's other processes if that one logged
// none), one per step (the last logged), in step order. Losses without a step are left out.
std::vector<Event> JobLosses(const FleetView& view, const JobView& job, TimeNs from, TimeNs to);

struct LossBreak {
  int64_t step = -1;
  TimeNs time = 0;       // when the spike was logged
  TimeNs confirmed = 0;  // when the point that confirmed it was logged
  double value = 0;
  double lowest = 0;     // lowest finite loss before it
  size_t index = 0;      // in the losses
};
// The first divergence in step-ordered losses (see 1. above).
std::optional<LossBreak> FirstDivergence(const std::vector<Event>& losses, double factor);

std::vector<Finding> DetectDivergence(const DetectInput& in);

}  // namespace ithbat::detect
