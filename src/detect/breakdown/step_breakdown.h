#pragma once
// The per-rank step breakdown: for each rank of a job over a window, where its time went —
// compute, waiting for its peers at collectives, host stalls, file I/O — and the work it received.
// Not a detector (it concludes nothing): the view a person reads first, and the base the report
// draws (docs/diagnoses.md). Every share is of the rank's wall time in the window.
//
// Sources, and how exact each is:
//  - collective wait: with the NCCL profiler plugin on (ithbat_nccl_wait_seconds_total) the GPU
//    time this rank's collectives waited for the node's other ranks — exact; otherwise estimated
//    from the host enqueue order the probes see: per tick, the latest local arrival lag minus
//    this rank's own (the time its collective sat enqueued before the last peer arrived);
//  - compute: NVML utilisation (a duty cycle: the share of time a kernel ran) minus the
//    collective wait, estimated;
//  - host stall: the main thread off CPU waiting for a CPU (runnable) or in uninterruptible
//    sleep (io), from the scheduler probes; and host time blocked in CUDA syncs (probes);
//  - I/O: seconds inside write/fsync/close (scheduler/file probes);
//  - work: thread blocks launched per step (the work proxy; launch probes are duty-cycled, so
//    it compares ranks, it is not an absolute) and steps from the probes' step inference.
#include <cstdint>
#include <string>
#include <vector>

#include "core/finding.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::detect {

struct RankBreakdown {
  RankRef rank;
  GpuRef gpu;
  double seconds = 0;               // the window the shares are of
  double steps = 0;                 // inferred by the probes in the window
  double step_seconds = 0;          // seconds / steps (0 when no step)
  double compute_share = 0;         // kernels running, less the collective wait
  double collective_wait_share = 0;
  bool collective_wait_exact = false;  // from the NCCL profiler plugin's GPU timestamps
  double host_stall_share = 0;      // main thread runnable or in D state
  double sync_blocked_share = 0;    // host inside CUDA synchronising calls
  double io_share = 0;              // inside write/fsync/close
  double work_per_step = 0;         // thread blocks launched per step (relative)
};

// One entry per process of the job seen in [from, to], ordered by rank.
std::vector<RankBreakdown> StepBreakdown(const FleetView& view, const JobView& job, TimeNs from, TimeNs to);

// A fixed-width text table of the breakdown (ithbat-lab --breakdown; later `ithbat diagnose`).
std::string FormatBreakdown(const std::vector<RankBreakdown>& rows);

}  // namespace ithbat::detect
