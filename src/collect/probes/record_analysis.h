#pragma once
// What the probes' per-call records say, node-wide: the ring buffer of bpf/cuda_probes.bpf.c
// carries one record per NCCL collective / point-to-point call, per communicator init and per
// host-blocking sync; this turns them into
//   - each process's step boundaries without logs (StepInference: the repeating pattern of its
//     collectives and syncs), numbered by the job's logged steps when it has any;
//   - the arrival order of the node's ranks at each collective of a communicator they share
//     (CollectiveAlignment; HOST ENQUEUE times, not GPU);
//   - NCCL calls by op and message-size bucket.
// Owned by ProbesCollector, which feeds it records as it drains the ring and reads the results
// each tick. Times are the records' clock (CLOCK_MONOTONIC); the collector converts.
//
// Not thread-safe. Bounded: one StepInference per process (bounded by its options), at most
// kMaxProcesses processes, CollectiveAlignment's own bounds, and the size table is bounded by the
// op and bucket label sets.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "collect/probes/collective_alignment.h"
#include "collect/probes/step_inference.h"
#include "core/time.h"
#include "cuda_probes_abi.h"

namespace ithbat::collect::probes {

class RecordAnalysis {
 public:
  static constexpr size_t kMaxProcesses = 1024;

  // One ring record. `op` is the probe's NCCL op label (static storage; empty for syncs).
  void Add(const cuda_probe_record& r, std::string_view op);
  // A step the job logged (any rank of its job: synchronous training aligns ranks in time), at
  // `time` in the records' clock.
  void AddLoggedStep(int32_t pid, int64_t step, TimeNs time);
  // Completes collectives whose settle time passed (call once per tick, after the drain).
  void Flush(TimeNs now);
  // Forgets a process (it exited or was detached).
  void Forget(int32_t pid);

  struct Steps {
    std::optional<int64_t> retraction;  // earlier-returned steps with index >= this are void
    std::vector<InferredStep> steps;    // StepInference::TakeSteps
  };
  Steps TakeSteps(int32_t pid);

  struct Summary {
    // Step inference.
    bool locked = false;
    uint64_t steps = 0;         // steps inferred so far (each index once)
    TimeNs last_step_ns = 0;    // duration of the newest inferred step
    double confidence = 0;      // of the newest inferred step
    bool calibrated = false;    // numbering from logged steps
    // NCCL by (op, size bucket): calls since the process was first seen.
    std::map<std::pair<std::string_view, std::string_view>, uint64_t> ops_by_size;
    // Arrival order on this node (summed over the process's communicators and ranks).
    uint64_t aligned = 0;       // collectives aligned with the node's other ranks
    uint64_t last = 0;          // of which it enqueued last
    TimeNs lag_sum = 0;         // Σ its enqueue time − the first rank's
  };
  Summary Get(int32_t pid) const;

  const CollectiveAlignment& alignment() const { return alignment_; }

 private:
  struct Proc {
    StepInference inference;
    uint64_t steps = 0;
    int64_t max_index = -1;
    TimeNs last_step_ns = 0;
    double confidence = 0;
    std::map<std::pair<std::string_view, std::string_view>, uint64_t> ops_by_size;
  };
  Proc* Find(int32_t pid, bool create);

  std::map<int32_t, std::unique_ptr<Proc>> procs_;
  CollectiveAlignment alignment_;
};

}  // namespace ithbat::collect::probes
