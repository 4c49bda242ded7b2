#pragma once
// What the job's own output says about the network: NCCL's transport failures (the job-output
// parsers' `nccl_net_error`, with what the failure points at: docs/joblog-signals.md).
//
//  - A network finding of the job already exists (the port counters saw a link fault or
//    congestion): the failures join it as the job's own evidence (joblog).
//  - None does, and the IB transport's retries ran out (`suspect=link_or_peer`: a link or switch
//    port that stopped passing traffic, or a peer that died): a network finding on the job's
//    word alone — one collector, so an inconclusive diagnosis that says the port counters (node
//    collector) or the peer's own output decide between the two.
//  - The other side closed or refused the connection (`peer`), or the request failed on this
//    host (`local`: memory registration, GPUDirect RDMA): not the fabric. An inconclusive
//    finding without a cause that says so and names the hosts, so that no one drains a link for it.
//  - A flush after an earlier error (`consequence`) or an unknown status only adds to the above.
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// Evidence lines per finding (a 1024-rank job prints one failure per connection).
inline constexpr size_t kNetErrorMaxEvidence = 8;

// Adds to `findings` (the network detector's, for this input) what the jobs' output says.
void AddJobOutputNetworkErrors(const DetectInput& in, std::vector<Finding>& findings);

}  // namespace ithbat::detect
