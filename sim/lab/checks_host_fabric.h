#pragma once
// Signal checks for the host, the input pipeline and the fabric: network, host_bottleneck, input_pipeline.
// Declared in signal_checks.h; the named thresholds they use are here.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lab/signal_checks.h"

namespace ithbat::sim::lab {

// ---- network ------------------------------------------------------------------------------
// A link fault on the named NIC: after the onset at least this many symbol errors (the
// background mess of a healthy link is a few an hour, far below this in any lab run) ...
inline constexpr double kMinLinkErrors = 10;
// ... arriving at least this many times faster than on the same port before the onset (a port
// with a known error history is not "degrading" unless it gets worse) ...
inline constexpr double kLinkErrorRateFactor = 5.0;
// ... or the port's signalling rate fell below this share of what it had before (trained down
// to fewer lanes: 4X -> 2X is half), or the link went down at least once.
inline constexpr double kDowntrainedShare = 0.9;
// Congestion: the port's xmit wait (no credits to send) after the onset grows at least this
// many times faster than before it.
inline constexpr double kXmitWaitFactor = 5.0;
// Congestion: the shared fabric carries someone else's traffic — bytes the port sent per step
// of the job at least this multiple of what it sent per step before the onset (the job's own
// bytes per step do not change: the same collectives every step).
inline constexpr double kForeignTrafficFactor = 1.15;
// The job's collectives got slower: its step rate before the onset at least this multiple of
// the rate after it, on the ranks whose traffic crosses the NIC(s).
inline constexpr double kCollectiveSlowdownFactor = 1.15;

// ---- host_bottleneck ----------------------------------------------------------------------
// A rank's GPU is launch-starved in an agent sample when its utilisation is at most this (busy
// at most a fifth of the sample window: its queue ran dry) ...
inline constexpr double kStarvedUtil = 0.2;
// ... while the median of the job's other GPUs on the node is at least this (they are busy,
// waiting for it in the collective: not a step boundary, a save or a pause of the whole job).
// A data-imbalance straggler's GPU is the busiest of all, never starved.
inline constexpr double kPeerBusyUtil = 0.5;
// At least this many such samples over the job (one could be a coincidence of the 1/6 s
// utilisation window); the first evidence is the kMinStarvedSamples-th.
inline constexpr int kMinStarvedSamples = 3;
// The starved rank is the late one: it was last at a collective within kStarvedLateWindowS
// after the sample (from 1 s before: the counters are per tick) in at least this share of them.
inline constexpr double kStarvedLateShare = 0.5;
inline constexpr double kStarvedLateWindowS = 3.0;
// The job as a whole is not input-bound: its GPUs' mean utilisation in steady training is above
// kInputMaxUtil (else the host stalls are the loader's, an input_pipeline).

// ---- input_pipeline -----------------------------------------------------------------------
// The job's GPUs are idle a large share of the time: their mean utilisation in steady training
// at most this. (Judged over the job, not per GPU: a rank whose batch came first waits for the
// others inside the collective, and a GPU spinning in an NCCL kernel reads busy.)
inline constexpr double kInputMaxUtil = 0.6;
// The ranks wait for their data, not for a peer: at least half of the ranks' main threads are
// asleep outside CUDA (a data-loader queue or pipe; CUDA syncs and full launch queues are futex
// waits) at least this share of the steady-training time. A straggler's peers wait inside the
// collective instead, and a healthy job's main thread barely sleeps.
inline constexpr double kInputWaitShare = 0.25;
// The loader side is CPU-busy: the ranks' worker processes (descendants) ran at least this many
// CPU-seconds per rank-second. A keeping-up loader uses a few percent of a core; a bottleneck
// loader's workers run flat out (up to a core each, less where the host has too few cores).
inline constexpr double kLoaderBusyCores = 0.15;


// Samples in which one of the job's GPUs was launch-starved (utilisation ≤ kStarvedUtil while
// its node peers' median was ≥ kPeerBusyUtil), and in how many its rank was then the last at a
// collective within kStarvedLateWindowS. CheckHostBottleneck needs them; CheckDataImbalance
// needs their absence (a data straggler's GPU is the busiest, never starved).
struct LaunchStarvation {
  int samples = 0;
  int followed_by_last = 0;
  std::set<int64_t> ranks;
  std::vector<std::string> firsts;     // up to four "rank R at +Ts", for the report
  std::optional<TimeNs> first_seen;    // the kMinStarvedSamples-th sample
  bool HostBound() const {
    return samples >= kMinStarvedSamples &&
           static_cast<double>(followed_by_last) >= kStarvedLateShare * static_cast<double>(samples);
  }
};
LaunchStarvation CountLaunchStarvation(const Evidence& evidence, const WorldJob& job, TimeNs from, TimeNs to);

}  // namespace ithbat::sim::lab
