#pragma once
// Out of memory: a rank printed CUDA's out-of-memory error (the job-output parsers' `cuda_oom`
// error event: PyTorch's OutOfMemoryError and `CUDA error: out of memory` in every generation,
// docs/joblog-signals.md) and it was real:
//  - gpu collector: its GPU's memory was at least kOomMemoryShare full in the kOomLookbackNs
//    before the error (NVML used ÷ total), or the error's own capacity/free figures say the
//    request did not fit;
//  - probes: the rank, seen launching before the error, launched nothing from kOomStopNs after
//    it on (the process died or the job tore down).
// A rank that still launches kOomStopNs after the error caught it and went on (automatic
// batch-size search, a retry with a smaller batch): no finding. The verdict waits kOomStopNs
// to tell the two apart. Where neither collector has any data on the rank (no GPU memory
// sample, no launch probe: an offline replay of a log, a node without them), the error alone is
// reported: one collector, so an inconclusive diagnosis that says what is missing.
// → job: out_of_memory, subjects the job, the rank(s) and GPU(s) that printed it. Several ranks
// running out in one window are one incident (the investigator merges by job).
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// GPU memory at least this full (used ÷ total) right before the error: the allocator had
// nothing left to give (PyTorch's caching allocator keeps freed blocks, so NVML reads near full
// long before the failing request).
inline constexpr double kOomMemoryShare = 0.9;
// How far before the error the GPU's memory is read (a sample a second; the OOM's own tick may
// already show the memory released by a dying process).
inline constexpr TimeNs kOomLookbackNs = 10 * kNsPerSec;
// The rank stopped: no kernel launch growth in its series from this long after the error.
inline constexpr TimeNs kOomStopNs = 10 * kNsPerSec;

std::vector<Finding> DetectOutOfMemory(const DetectInput& in);

}  // namespace ithbat::detect
