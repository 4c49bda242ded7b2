#pragma once
// Stalls: seconds-long stops of training on every rank of a job, and why.
//
// A rank is stopped in an agent tick when its GPU idles (NVML utilisation) or, while its launch
// probes are attached for the whole tick (on-fraction 1), it launched nothing: a duty-cycled
// tick's count is extrapolated from the previous on-slice and proves nothing either way. A job
// stalls when every rank is stopped for kMinStallTicks ticks in a row, between ticks where it
// ran (a job that has not started or has ended is not stalled).
//
// Classification, per job:
//  - storage (infrastructure): stalls line up with the job's saves (checkpoint events in its
//    output), and in those saves the write, fsync or close latency of the job on a SHARED mount
//    (network or FUSE file system) rose against the median of the same op's per-save means
//    over the job's earlier, not slow saves on that mount; other jobs on the mount whose
//    latency rose too are named.
//  - checkpoint_strategy (job): stalls line up with saves whose latency is at its baseline, and
//    those stalls cost at least kCheckpointStallShare of the job's wall time.
//  - input_pipeline (job): the job's GPUs idle much of steady training, its ranks' main threads
//    sleep outside CUDA (not in a collective: those are futex waits) and its data-loader workers
//    are CPU-busy.
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// A GPU at most this busy in a tick is stopped: NVML's duty cycle of a training GPU is 0.6-1
// between saves; a save or a data wait reads 0 (the lab's saves after a slowdown: 0.0-0.1).
inline constexpr double kStallIdleUtil = 0.1;
// A stall lasts at least this many consecutive ticks with every rank stopped: one tick could be
// a step boundary caught by NVML's 1/6 s sample window ("one scrape is not a pattern").
inline constexpr int kMinStallTicks = 2;
// A save window reaches this far around its checkpoint events: counters are sampled once per
// tick, so a save's increase is the difference of the samples around it (as the lab's check).
inline constexpr TimeNs kSaveSlack = 2 * kNsPerSec;
// A save is slow on a mount when one op's mean latency there is at least this multiple of the
// median of the same op's per-save means over the earlier, not slow saves: healthy saves to
// one mount vary by up to 1.5x save to save, a loaded NFS server moves fsync by 5-10x ...
inline constexpr double kStorageLatencyFactor = 3.0;
// ... and at least this much longer per call in absolute terms (a 0.1 ms close becoming 0.3 ms
// costs nothing).
inline constexpr double kMinLatencyRiseSeconds = 0.005;
// A baseline needs at least this many earlier saves on the mount with the op.
inline constexpr int kMinBaselineSaves = 1;
// checkpoint_strategy is material when the save-aligned stalls take at least this share of the
// job's wall time. Why 25%: a synchronous save every interval T costing C is the normal price
// of checkpointing, and a healthy schedule keeps C/T to a few percent up to ~10-15% for
// frequent saves (control-checkpoint-heavy-nvme: 1-2 s every ~18 s, 5-11%, is healthy); at a
// quarter of the run, async or less frequent saves give back >= 1.33x.
inline constexpr double kCheckpointStallShare = 0.25;
// checkpoint_strategy needs at least this many save-aligned stalls (one save is not a pattern).
inline constexpr int kMinCheckpointStalls = 2;
// input_pipeline: the job's GPUs' mean utilisation in steady training at most this (the lab's
// kInputMaxUtil: a healthy or straggling job's GPUs are busy over 0.6 of the time) ...
inline constexpr double kInputMaxUtil = 0.6;
// ... at least half of its ranks' main threads asleep outside CUDA (class sleep: data-loader
// queues and pipes; CUDA syncs and NCCL waits are futex "lock" sleeps) this share of the time ...
inline constexpr double kInputWaitShare = 0.25;
// ... and its loader workers (descendant processes) on a CPU at least this many CPU-seconds per
// rank-second (a keeping-up loader uses a few percent of a core).
inline constexpr double kLoaderBusyCores = 0.15;
// input_pipeline is judged over at least this much steady training (fewer ticks say little).
inline constexpr TimeNs kMinSteadyWindow = 10 * kNsPerSec;

// File systems whose latency other tenants share: a slow save there is the storage's doing.
bool IsSharedFsType(std::string_view fstype);

std::vector<Finding> DetectStalls(const DetectInput& in);

}  // namespace ithbat::detect
