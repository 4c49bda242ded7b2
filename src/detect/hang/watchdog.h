#pragma once
// Watchdog timeouts: what the job's own output says about a hang, when PyTorch's NCCL watchdog
// fired ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…, OpType=…) ran for N
// milliseconds"). Each rank that prints it was waiting, for the whole timeout, inside collective
// #SeqNum of its process group; the rank that caused the wait is one that never got there.
//
// The reports of one job, one per rank (its first timeout), are read together:
//  - desync: two ranks timed out in the SAME collective number with DIFFERENT operations
//    (rank 0 in ALLREDUCE #7753, rank 3 in BROADCAST #7753). Collectives are matched by their
//    order, so the ranks called different collectives at the same point: the code paths
//    diverged (a rank-dependent branch, a skipped barrier). The job's bug; every reporter is named.
//  - behind: the ranks timed out at different collective numbers (one op type): the ranks at
//    the lowest number are furthest behind, and what they wait for is a rank that never reached
//    even that one. Named: the ranks of the job that did not report (when the world size is
//    known), else the reporters at the lowest number (the furthest-behind ranks the material shows).
//  - one collective: every reporter waited in the same collective: the ranks that did not
//    report (world size known) are the suspects; with the world size unknown nobody is named.
// Process groups other than the default have their own numbering; torch ≥ 2.2 prints the group
// ("PG 3 Rank 0") only in some lines, so a mixture of groups reads as "behind" — stated in the
// summary as what the numbers show, never more.
//
// The job's output is one collector: by the two-collector rule (docs/diagnoses.md) this finding
// alone is an inconclusive hang that names the suspects. Where the probes saw the same job stop
// (hang.h), both findings are one incident and this one adds the job's own words to it.
#include <cstdint>
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// Evidence lines per finding: one per reporting rank up to this many, then one line for the rest
// (a 1024-rank job prints 1023 timeouts; the operator reads a few and the count).
inline constexpr size_t kWatchdogMaxEvidence = 8;
// A wait longer than a year is no watchdog's report (PyTorch's default timeout is 10 min; jobs
// raise it to hours): such a figure is ignored.
inline constexpr int64_t kWatchdogMaxWaitMs = 365LL * 24 * 3600 * 1000;

std::vector<Finding> DetectWatchdogTimeouts(const DetectInput& in);

}  // namespace ithbat::detect
