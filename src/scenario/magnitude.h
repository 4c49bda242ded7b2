#pragma once
// Fault magnitude: one knob that scales every graded fault on a scenario's timeline between
// "no fault" (0) and "as the file wrote it" (1), for the lab's sweep (ithbat-lab --sweep):
// how small can a fault be and still leave the evidence that proves it, and what does a
// diagnosis look like just under that? Applied to a resolved scenario (after ranges are drawn),
// by the simulator (ithbat-sim run --magnitude) and by the lab's checker alike, so both see
// the same world.
//
// What scales (m = magnitude; values clamped into their valid ranges):
//   thermal_throttle    clock_factor       1 − (1 − f)·m
//   power_cap           power_limit_w      max − (max − p)·m   (max: the GPU model's limit)
//   ib_link_degrade,
//   ib_congestion,
//   storage_slowdown    bandwidth_factor   1 − (1 − f)·m
//   ib_link_degrade     symbol_errors_per_s  ·m
//   storage_slowdown    fsync_ms           base + (f − base)·m  (base: the mount's healthy fsync_ms)
//   host_cpu_contention cpu_share          ·m
//   nvlink_errors, ecc_corrected  count    ⌈count·m⌉
// What does not: discrete faults (an Xid, uncorrectable ECC, a row remap, a lost GPU, silent
// corruption, a hang) happen or not; faults written into a job (sequence-length spread, loader
// cost, the loss model) or a server (the engine) are not timeline events — their size comes
// from the ranges the file writes, drawn afresh per seed.
#include "core/result.h"
#include "scenario/scenario.h"

namespace ithbat::scenario {

inline constexpr double kMaxMagnitude = 4.0;

// Scales the timeline's graded faults in place. magnitude in [0, kMaxMagnitude]; 1 changes
// nothing. Values above 1 make faults worse, clamped to what the format allows.
Status ScaleFaultMagnitude(ResolvedScenario& scenario, double magnitude);

}  // namespace ithbat::scenario
