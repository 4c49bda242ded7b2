#include "investigate/causes.h"

#include <array>

namespace ithbat::investigate {
namespace {

constexpr std::array<CauseInfo, 20> kCauses = {{
    {Cause::kDataImbalance, Verdict::kJob,
     "Ranks receive unequal work per step (sequence lengths, samples per batch): the slowest rank rotates "
     "and the "
     "others wait for it in every collective.",
     "Balance the work per rank: pack or bucket sequences by length so every rank gets the same tokens per "
     "step.",
     false},
    {Cause::kRecipeNumerics, Verdict::kJob,
     "The training recipe diverges (loss spike or NaN) on healthy hardware: learning rate, precision, "
     "initialisation or data.",
     "Fix the recipe: lower the learning rate or warm up longer, keep the diverging layers in higher "
     "precision, "
     "and restart from the last good checkpoint.",
     true},
    {Cause::kNoLearning, Verdict::kJob,
     "The job runs (or exits cleanly) but the model does not learn: flat loss, zero learning rate, zero or "
     "NaN "
     "gradients.",
     "Check the optimizer and schedule (a zero learning rate, frozen parameters, a loss printed as 0) before "
     "spending more GPU time.",
     true},
    {Cause::kServingConfig, Verdict::kJob,
     "An inference server keeps requests waiting while batch slots are free: its batching or scheduler "
     "configuration, not the GPU, limits it.",
     "Raise the server's concurrent-sequence and batched-token limits (or enable chunked prefill) so waiting "
     "requests fill the free slots.",
     false},
    {Cause::kOverProvisioned, Verdict::kJob,
     "An inference deployment has more GPUs than its load needs: nothing waits and the batch slots stay "
     "mostly "
     "empty.",
     "Serve the same load on fewer GPUs (the diagnosis says how many) or route more traffic to these.",
     false},
    {Cause::kUnderProvisioned, Verdict::kJob,
     "An inference deployment is at its capacity: requests queue while its KV cache is full (or every slot "
     "runs "
     "and the cache has no room for more), on GPUs that are working.",
     "Add replicas for this load, or hold less KV per request (an fp8 KV cache, a shorter maximum context, "
     "prefix "
     "caching); a higher slot limit would not help, memory is what is full.",
     false},
    {Cause::kInputPipeline, Verdict::kJob,
     "The GPUs wait for data: the ranks' main threads sleep outside CUDA while the data-loader workers are "
     "busy.",
     "Give the data loader more workers, prefetch and pinned memory, or pre-process the data offline.",
     false},
    {Cause::kHostBottleneck, Verdict::kJob,
     "One rank's host thread cannot launch work fast enough (CPU contention, Python overhead): its GPU "
     "starves "
     "and every peer waits for it.",
     "Pin the ranks to their own cores away from other processes, or use CUDA graphs to cut launch overhead.",
     false},
    {Cause::kCheckpointStrategy, Verdict::kJob,
     "Synchronous checkpoints stop training for long stretches on storage that is working normally: the save "
     "is simply too big or too frequent for a blocking write.",
     "Save asynchronously (or sharded, to local NVMe first) and less often.", false},
    {Cause::kOutOfMemory, Verdict::kJob, "A rank ran out of GPU memory and the job stopped.",
     "Reduce the micro-batch or sequence length, or enable activation checkpointing.", true},
    {Cause::kHang, Verdict::kJob,
     "The job stopped making progress: one or more ranks never entered a collective the others wait in.",
     "Inspect the named rank's stack (py-spy dump) and restart the job; the others are only waiting for it.",
     true},
    {Cause::kStorage, Verdict::kInfrastructure,
     "A shared file system got slow: write, fsync or close latency rose against its own baseline and "
     "training "
     "stalls while it saves.",
     "Move the job's checkpoints off the degraded mount (or to local NVMe) and open a ticket with the "
     "storage "
     "team naming the mount and the window.",
     false},
    {Cause::kNetwork, Verdict::kInfrastructure,
     "The fabric slowed the job's collectives: link errors or downs on the NIC its GPUs use, or congestion "
     "from "
     "other traffic on the same switch.",
     "Drain or reseat the named link (errors) or separate the jobs' traffic (congestion), and reschedule the "
     "job "
     "away from it.",
     false},
    {Cause::kGpuHardware, Verdict::kInfrastructure,
     "A GPU failed: Xid errors, uncorrectable ECC, row-remap failure or a lost GPU; other ranks' errors are "
     "consequences.",
     "Drain the named GPU's node, run the vendor diagnostics (dcgmi diag -r 3) and restart the job from the "
     "last "
     "checkpoint on healthy GPUs.",
     true},
    {Cause::kThermalPower, Verdict::kInfrastructure,
     "A GPU runs below its peers' clock because of a thermal or power-brake slowdown, and the whole job "
     "waits "
     "for it.",
     "Check the named GPU's cooling and power (fans, airflow, inlet temperature) and drain it until it holds "
     "its clock.",
     false},
    {Cause::kNvlink, Verdict::kInfrastructure,
     "An NVLink is down or erroring, so traffic between the named GPUs is slow or rerouted.",
     "Drain the node and reset or replace the named link's GPUs.", false},
    {Cause::kDriver, Verdict::kInfrastructure,
     "The GPU driver failed (driver Xids, a hung or crashed driver).",
     "Drain the node, collect nvidia-bug-report.sh, and update or reload the driver.", true},
    {Cause::kSilentDataCorruption, Verdict::kInfrastructure,
     "A GPU computes wrong results without reporting any error: the loss diverges with clean counters, and "
     "the "
     "same recipe on other GPUs does not.",
     "Take the named GPUs out of service, run the vendor's field diagnostics, and restart from a checkpoint "
     "written before the divergence.",
     true},
    {Cause::kScheduler, Verdict::kInfrastructure,
     "The scheduler placed or held the job badly (waiting on a drained node, ranks split across islands).",
     "Fix the placement constraints or the node's state in the scheduler.", false},
    {Cause::kUnknown, Verdict::kInconclusive, "The evidence does not point at one cause.",
     "Look at the evidence listed; record an evidence bundle for the people who will look next.", false},
}};

}  // namespace

std::span<const CauseInfo> Causes() { return kCauses; }

const CauseInfo& InfoOf(Cause c) {
  for (const auto& i : kCauses) {
    if (i.cause == c) return i;
  }
  return kCauses.back();
}

}  // namespace ithbat::investigate
