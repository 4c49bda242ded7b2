#pragma once
// Signal checks for the GPU and the job's own numbers: thermal_power, gpu_hardware,
// silent_data_corruption, no_learning, hang. Declared in signal_checks.h; the named thresholds
// they use are here (docs: sim/lab/README.md, "What is checked").
#include <cstdint>

#include "core/time.h"
#include "lab/signal_checks.h"

namespace ithbat::sim::lab {

// thermal_power: the subject GPU reports a thermal or power-brake clock event (never the
// power-cap or idle reasons every loaded GPU shows) in at least this share of the agent's
// samples from the onset to the job's end ...
inline constexpr double kThermalActiveShare = 0.5;
// ... the first evidence is the kThermalDebounce-th such sample in a row (one scrape is not a
// pattern) ...
inline constexpr int kThermalDebounce = 3;
// ... its mean SM clock while the job runs is at most this share of the median of the job's
// other GPUs (background clock spread is ±3%, power capping lowers every loaded GPU alike: a
// throttled GPU sits well below; 0.9 leaves three times the spread as margin) ...
inline constexpr double kThermalClockRatio = 0.9;
// ... and it is persistent, the opposite of a roaming straggler: on the subject's node the
// subject ranks together are the last arrival of at least this share of the aligned collectives
// after the onset (a rotating slowest rank gives each of n ranks ~1/n), or 1.5 fair shares where
// that is more (two ranks on a node: 75%; the most data_imbalance's rotation test allows), but
// never more than kPersistentMaxNeeded (a straggler is sometimes beaten by host jitter) ...
inline constexpr double kPersistentLastShare = 0.5;
inline constexpr double kPersistentMaxNeeded = 0.8;
// ... over at least this many aligned collectives (a share of three is noise).
inline constexpr int kPersistentMinAligned = 10;

// gpu_hardware / silent_data_corruption: a counter sampled once per agent interval (1 s) trails
// the fault it counts by up to one interval; a fault "before" the loss goes bad may be sampled
// this much after the bad loss was logged.
inline constexpr TimeNs kSampleSlackNs = 2 * kNsPerSec;

// silent_data_corruption: the confirming rerun logged losses at least this many steps past the
// original's divergence step without diverging (the recipe twin's rerun diverges within
// kDivergenceAlignSteps of it, so passing that by as much again rules it out).
inline constexpr int64_t kSdcCleanPastSteps = 2 * kDivergenceAlignSteps;

// no_learning: at least this many finite logged losses (fewer cannot show a trend) ...
inline constexpr int kNoLearningMinPoints = 8;
// ... and the mean loss over the last third of them is less than this share below the mean over
// the first third (a healthy run drops tens of percent over any real stretch; loss noise is a
// few percent per point and averages out over a third of the points).
inline constexpr double kNoLearningMaxDrop = 0.05;

// hang: the job's NCCL calls stopped for at least this many of its own collective
// periods (mean time between the hung rank's collectives before it stopped; a step has one or a
// few collectives, so this is several steps of silence, far past any straggler) ...
inline constexpr double kHangMinStallPeriods = 20;
// ... while the peers' GPUs stay busy (an NCCL kernel spinning for the missing rank): their mean
// utilisation over the stall at least this.
inline constexpr double kHangSpinUtil = 0.5;

// Share of the GPU's samples in [from, to] with a thermal or power-brake clock event active
// (never the power cap: loaded GPUs sit at it all day). CheckDataImbalance uses it to leave out
// a node whose persistent last rank is explained by its throttled GPU (a second finding).
double ThermalActiveShare(const Evidence& evidence, const std::string& node, int64_t gpu, TimeNs from, TimeNs to);

}  // namespace ithbat::sim::lab
