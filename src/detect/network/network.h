#pragma once
// Network: the InfiniBand/RoCE fabric slows a job's collectives.
//
//  - link fault (infrastructure, resource "NODE/NIC"): a port's symbol or receive errors arrive
//    far faster than before, the link went down, left the ACTIVE state, or trained down to a
//    lower rate; and the training steps of every rank whose GPU talks through that NIC (GPU↔NIC
//    map: ithbat_topology_gpu_nic_info closest=1, matched on the GPU's PCI bus id) got slower.
//  - congestion (infrastructure, resource the other job when one is seen, else the fabric the
//    ports share): port_xmit_wait rises on the job's ports while every port of the job is clean
//    (no link fault), and the ranks behind the waiting ports got slower; the ports' bytes per job
//    step growing by kForeignTrafficFactor is reported as the sign of someone else's traffic, and
//    another job of these stores whose ports send faster after the onset is named. The fake libnccl raises
//    xmit wait on every port of a job when one link slows it: clean ports are what tells
//    congestion from a fault, and a job with a faulty port never gets a congestion finding.
//
// Without an onset to split at, a port's counter is judged by a trailing window against its own
// rate before that window.
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// The trailing window a counter's rise is measured over (the lab's budget for network verdicts
// is 30 s from the onset).
inline constexpr TimeNs kNetWindow = 20 * kNsPerSec;
// A counter needs this much history before the window to have a rate to compare with.
inline constexpr TimeNs kNetMinHistory = 10 * kNsPerSec;
// A rise begins at a growth that more growth follows within this span: errors of a healthy link's
// background come a few an hour, a failing link's several a second.
inline constexpr TimeNs kOnsetClusterNs = 5 * kNsPerSec;
// A link fault: at least this many symbol + receive errors in the window (a healthy link's
// background is a few an hour: the simulator's background rate is one now and then) ...
inline constexpr double kMinLinkErrors = 10;
// ... arriving at least this many times faster than before the window (a port with a known
// error history is not degrading unless it gets worse) ...
inline constexpr double kLinkErrorRateFactor = 5.0;
// ... or the port's signalling rate fell below this share of its earlier maximum (trained down
// to fewer lanes: 4X -> 2X is half), or the link went down, or left ACTIVE for two samples.
inline constexpr double kDowntrainedShare = 0.9;
// Congestion: the port's xmit wait grows at least this many times faster in the window than
// before it ...
inline constexpr double kXmitWaitFactor = 5.0;
// ... by at least this many ticks (a few stray waits on an idle port are not congestion).
inline constexpr double kMinXmitWaitTicks = 1000;
// The ranks behind the port got slower: their step rate before the onset at least this multiple
// of the rate after it (the lab's kCollectiveSlowdownFactor) ...
inline constexpr double kCollectiveSlowdownFactor = 1.15;
// ... with at least this much time on each side of the onset to measure a rate.
inline constexpr TimeNs kMinRateSpan = 5 * kNsPerSec;
// Foreign traffic: the waiting ports' bytes per job step, or another job's ports' byte rate, at
// least this multiple of what they were before the onset (a job's own bytes per step are fixed
// by its collectives).
inline constexpr double kForeignTrafficFactor = 1.15;

std::vector<Finding> DetectNetwork(const DetectInput& in);

}  // namespace ithbat::detect
