#pragma once
// Inference efficiency: per inference server (the series ithbat_serving_* of one engine, port
// and pid), whether its configuration wastes the GPUs it holds.
//
//  - serving_config (job): requests wait in the server's queue while it has room to run them:
//    (a) its batch has free slots (running at most kServingFreeSlotShare of max_num_seqs /
//    max_concurrent_requests) and the KV cache is not full: the engine does not batch what it
//    could (no continuous batching, a low batched-token budget, prefill run one request at a
//    time); or (b) every slot is busy while the KV cache is under kSlotCapKvShare full: the
//    slot limit, not memory, caps the batch. Where the server exposes no slot limit, a queue
//    beside a KV cache that is not full is reported inconclusive, naming the limit as missing.
//  - under_provisioned (job): requests wait while the server is at its capacity: the KV cache is
//    at least kServingKvFull, or every slot is busy and the KV cache is past kSlotCapKvShare (no
//    setting gives room for twice the batch). The load needs more replicas or less KV per
//    request. Needs no slot limit: a full KV cache with a queue is its own proof.
// Every pattern must hold in kServingDebounce consecutive scrapes and kServingWaitingShare of
// the scrapes. Where the material is shorter than kServingDebounce scrapes and every one shows
// the pattern (a log excerpt with one stats line), the finding is inconclusive and says how many
// more are needed.
//  - over_provisioned (job): nothing waits, the slots stay mostly empty, the server's GPUs are
//    mostly idle, and the load would fit on at most half of its GPUs at the same latency (a
//    replica filled to the concurrency one already ran, or to kOverProvisionedOccupancy of its
//    slots: small decode batches are memory-bound), respecting tensor parallelism and the KV
//    cache the load needs.
// Scrapes come from /metrics (the serving collector's ithbat_serving_* series) or, on a node
// where no server was scraped, from the stats lines a server prints (kServingMetric events of its
// captured output: vLLM's "Running: R reqs, Waiting: W reqs, GPU KV cache usage: U%", SGLang's
// "#running-req: R, token usage: U, #queue-req: W"); a log gives no slot limit, so from a log
// only under_provisioned and the inconclusive serving_config can be found.
// Each finding reports the prefill share of GPU time, the KV-cache headroom and the GPU count
// that would serve the same load.
//
// The subject: servers carry no job id unless the agent tagged one (job_id label); otherwise the
// server is named "engine:port" and its pid is given as a RankRef (rank -1) so it can be mapped.
// Its GPUs: those whose compute process is the server's pid, else (its engine workers are child
// processes) the node's GPUs holding compute processes that no training job's rank owns, when
// the node runs one server.
#include <string>
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

// A replica's slots are free when it runs at most this share of its slot count (the lab's
// threshold: a batching engine under a queue fills its slots).
inline constexpr double kServingFreeSlotShare = 0.5;
// A request queue while the KV cache is at least this full is memory-bound, not misconfigured:
// vLLM preempts running requests once it cannot allocate a block, which starts well before
// 100% (blocks are allocated ahead of the tokens that fill them).
inline constexpr double kServingKvFull = 0.9;
// serving_config needs requests waiting with free slots in at least this share of the scrapes
// of the window ...
inline constexpr double kServingWaitingShare = 0.5;
// ... and in this many consecutive scrapes (one scrape is not a pattern: a burst that arrived
// just before it is admitted at the next engine step).
inline constexpr int kServingDebounce = 5;
// over_provisioned: the queue is empty in at least this share of the scrapes ...
inline constexpr double kIdleQueueShare = 0.95;
// ... the 95th percentile of running requests is at most this share of the slots ...
inline constexpr double kOverProvisionedOccupancy = 0.25;
// ... the server's GPUs are busy at most this share of the time (a decoding GPU reads 0.8+
// busy whatever its batch: a loaded server is never below this) ...
inline constexpr double kOverProvisionedMaxUtil = 0.5;
// ... and the GPUs needed are at most this share of those held (a saving worth a change) ...
inline constexpr double kOverProvisionedGpuShare = 0.5;
// ... judged over at least this many scrapes (a steady-state claim).
inline constexpr int kOverProvisionedMinScrapes = 30;
// The GPU-count estimate fills a replica's slots to this share with batching on (headroom for
// bursts), and its KV cache to this share.
inline constexpr double kTargetSlotShare = 0.5;
inline constexpr double kTargetKvShare = 0.8;
// Every slot busy with the KV cache below this share: twice the batch would still fit in the
// target share of the cache (requests of the same length hold the same KV), so the slot limit
// is what caps the server, not its memory.
inline constexpr double kSlotCapKvShare = kTargetKvShare / 2;

std::vector<Finding> DetectInferenceEfficiency(const DetectInput& in);

// An inference server the stores know (one engine, port and pid on a node), the id its findings
// name (its job_id label, else "engine:port"), and its first and last scrape up in the window.
struct ServingEndpoint {
  std::string node, engine, port, pid;
  std::string job;  // the job_id label, "" when the agent tagged none
  std::string id;
  TimeWindow window;
  // Read from the server's printed stats lines (kServingMetric events of pid `pid` in job `job`),
  // not from /metrics; engine is the parser's ("vllm_v0", "vllm_v1", "sglang"), port is "".
  bool from_log = false;
};
// Scraped servers first; then, on nodes with none, servers known only by their stats lines.
std::vector<ServingEndpoint> DiscoverServers(const FleetView& view, TimeNs from, TimeNs to);

}  // namespace ithbat::detect
