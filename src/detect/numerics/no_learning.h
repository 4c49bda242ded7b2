#pragma once
// No learning: the job runs (GPU time is spent) but its loss says nothing is learnt → job:
// no_learning.
//
// Signals:
//   joblog — over the job's logged losses (divergence.h JobLosses: one per step, rank 0's):
//     * flat: at least kNoLearningMinPoints finite losses, no divergence, and the mean of the
//       last third within kNoLearningMaxDrop of the mean of the first third (either way: a loss
//       creeping UP is a drift, the divergence detector's). Without a zero learning rate it must
//       hold over at least kNoLearningMinSpanSteps logged steps of a run that started from
//       scratch (first logged step ≤ kFreshRunMaxFirstStep): a healthy run's first warm-up
//       steps can be flat, and a run resumed late in training converges by less than 5% over
//       hundreds of steps while learning fine;
//     * lr zero: every logged learning rate (train_metric lr) in the window is 0;
//     * loss printed as 0 with grad_norm 0 or non-finite: the loss is exactly 0 on every point
//       and the logged grad norms are all 0 or NaN (nothing flows backwards);
//     * memorisation: the loss collapses — last third's mean below kMemorisedLoss and more
//       than kMemorisedDrop below the first third's — as a model fitting one repeated batch does
//       (a real corpus never gets a language model's loss near zero).
//     The loss flat, lr zero, or zero loss/grad: any one of them is the job-side signal.
//   probes — the job keeps running: its processes' kernel launches and NCCL calls grow over the
//     loss window (it spends GPU time); without probes, the gpu collector's utilisation of its
//     GPUs at least kBusyUtil.
// The job must not report errors (an erroring job is another cause).
//
// Twins that must not fire: healthy training (the loss decays tens of percent) and a slow but
// learning run (drops more than kNoLearningMaxDrop over its points).
#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// Fewer than this many loss points cannot show a trend (the lab's check uses the same).
inline constexpr int kNoLearningMinPoints = 8;
// A healthy run drops tens of percent over any real stretch; noise is a few percent per point
// and averages out over a third of the points: less than 5% is flat.
inline constexpr double kNoLearningMaxDrop = 0.05;
// Without a zero learning rate, the flat stretch must span this many steps: a healthy run in
// its learning-rate warm-up moves little over its first few dozen steps.
inline constexpr int64_t kNoLearningMinSpanSteps = 100;
// A run whose first logged step is at most this started from scratch (logging every few steps
// puts the first line at step 1..10); a later first step means it resumed from a checkpoint.
inline constexpr int64_t kFreshRunMaxFirstStep = 10;
// Memorisation: the last third's mean loss below this (nats; a language model on real text
// stays above ~1) ...
inline constexpr double kMemorisedLoss = 0.05;
// ... after falling by more than this share.
inline constexpr double kMemorisedDrop = 0.95;
// A GPU this busy on average is spending time on something (NVML duty cycle).
inline constexpr double kBusyUtil = 0.3;

std::vector<Finding> DetectNoLearning(const DetectInput& in);

}  // namespace ithbat::detect
