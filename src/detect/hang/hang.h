#pragma once
// Hang: one rank stopped calling NCCL while its peers wait inside a collective for it → job:
// hang, subject that rank. Live: from the per-process NCCL call counts, before any watchdog
// fires (none may be set).
//
// Signals:
//   probes — ithbat_probe_nccl_ops_total per pid (summed over ops): every rank's count stopped
//     growing (the job's last NCCL call, on any rank, was at least kHangMinStallPeriods of the
//     job's own collective periods and at least kHangMinQuietNs ago), and the hung rank(s)
//     stopped BELOW the others: their count is under the peers' median (peers entered
//     collective #k, the hung rank never did). NCCL calls, not launches: while the launch
//     probes are duty-cycled off the agent extrapolates launch counts from the last rate, so a
//     blocked process's launch count keeps growing for a while.
//     The processes are still there: their series were sampled within kHangAliveNs of now (a
//     job that ended has no hang). A hang older than the analysis window (no call inside it)
//     counts from the window's first sample.
//     The job's series are read from the window only, never the job's whole history.
//   gpu — the peers' GPUs spin: their mean ithbat_gpu_utilization_ratio since the stop is at
//     least kHangSpinUtil (an NCCL kernel waiting for the missing rank keeps the SMs "busy";
//     a checkpoint pause or an idle job shows idle GPUs).
//   sched_io (what the hung rank does, when the sched collector runs) — its main thread's
//     off-CPU time by class since the stop (lock: futex, a deadlock; io: D sleep; sleep:
//     voluntary sleep) and its on-CPU time (a busy loop).
//
// Twins: a straggler keeps progressing (every count keeps growing: no stall); a synchronous
// checkpoint pauses all ranks at the same count with idle GPUs; a job that ended stops sampling.
#include "core/finding.h"
#include "core/time.h"
#include "detect/detector.h"

namespace ithbat::detect {

// The job's NCCL calls stopped for at least this many of its own collective periods (mean time
// between the hung rank's calls before the stop; a step has one or a few collectives, so this is
// several steps of silence, far past any straggler) ...
inline constexpr double kHangMinStallPeriods = 20;
// ... and at least this long (a job with very frequent collectives has tiny periods; a few
// seconds of silence is a hiccup, GC or a short save).
inline constexpr TimeNs kHangMinQuietNs = 10 * kNsPerSec;
// The peers' GPUs spin in the collective: mean utilisation over the stall at least this.
inline constexpr double kHangSpinUtil = 0.5;
// The job's processes still report: a series sampled within this of now (agents sample every
// second; a few missed ticks are not an exit).
inline constexpr TimeNs kHangAliveNs = 10 * kNsPerSec;

// The hung rank's main thread: when less than this share of the stall is accounted on or off
// CPU, it has been asleep without waking (off-CPU time is counted at wakeup).
inline constexpr double kHangAccountedShare = 0.1;

std::vector<Finding> DetectHang(const DetectInput& in);

}  // namespace ithbat::detect
