#pragma once
// The pure parts of the training rank program: what the loss, grad-norm and learning rate are at
// a step, how many tokens a rank's step carries, and how a step's compute is split into kernels.
// No I/O and no clock, so each rule is unit-tested.
//
// Randomness is the scenario format's documented PRNG (scenario/rng.h): per-step draws come from
// streams seeded by FieldSeed(seed, "<what>/<rank>/<step>"), so a run is reproducible from the
// spec alone and a rank's step does not depend on what other steps drew.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "workload/train_spec.h"

namespace ithbat::sim::workload {

// The loss every rank logs after `step` (1-based, completed steps; it is the all-reduced loss, the
// same on every rank, so it does not depend on the rank). NaN once the model says so.
//   decay          final + (initial - final) * exp(-step / tau), tau = total_steps / 4 (>= 10)
//   drift_explode  decay until drift_start_step, then rising 0.5 % per step; from explode_step
//                  multiplied by e^(step - explode_step + 1); NaN from explode_step + 5
//   flat           initial (a model that does not learn)
//   nan            decay until nan_step, NaN from it on
//   repeated_batch falls to ~1 % of initial within ~ total_steps / 10 steps (memorisation)
// Every model but nan-after multiplies by (1 + noise * z), z ~ N(0,1) drawn per step.
double LossAt(const TrainLossSpec& loss, int64_t step, int64_t total_steps, uint64_t seed);
// The gradient norm after `step`: decays from ~2 to ~0.3 with the loss, grows with a drift,
// explodes and becomes NaN with the loss.
double GradNormAt(const TrainLossSpec& loss, int64_t step, int64_t total_steps, uint64_t seed);
// The learning rate used at `step`: linear warm-up from 0 to peak over warmup_steps, then
// constant (peak), cosine (to 0 at total_steps), linear (to 0 at total_steps) or zero (always 0).
double LrAt(const TrainLrSpec& lr, int64_t step, int64_t total_steps);

// The median of a sequence-length parameter (fixed: the value; uniform: the middle; normal: the
// mean; lognormal: the median; choice: the weighted median), clamped to its bounds, >= 1.
int64_t MedianSeqLen(const scenario::Param<int64_t>& p);
// The tokens of `rank`'s batch at `step`: sequences_per_step lengths drawn from seq_len (each
// rounded, >= 1), or with packing exactly sequences_per_step × median.
int64_t StepTokens(const TrainWorkSpec& work, uint64_t seed, int64_t rank, int64_t step);

// One kernel of a phase: its name and how long it should keep the GPU busy.
struct KernelPlan {
  std::string_view name;
  int64_t duration_ns = 0;
  bool tensor = false;  // a tensor-core kernel (by name; the fake derives its activity from the name)
};
enum class Phase { kForward, kBackward, kOptimizer };
// The kernels of one phase: `launches` kernels whose durations add up to `total_ns`, a share
// `tensor_share` of it in tensor-core kernels (gemm / flash attention), the rest in elementwise,
// norm, softmax and reduction kernels, following the per-layer order of a transformer.
std::vector<KernelPlan> PlanPhase(Phase phase, int64_t launches, int64_t total_ns, double tensor_share);
// Every kernel name PlanPhase uses (the README lists them; the fake libcuda sees only these).
std::vector<std::string_view> AllKernelNames();

// Megatron rank order: rank = (pp_i * dp + dp_i) * tp + tp_i. A group of one kind: its index
// among the groups of that kind, this rank's index in it, and the global ranks in it (in order).
struct GroupPlace {
  int64_t index = 0;
  int64_t rank_in_group = 0;
  std::vector<int64_t> members;
};
GroupPlace PlaceInGroup(scenario::CommGroup group, int64_t rank, int64_t tp, int64_t pp, int64_t dp);

}  // namespace ithbat::sim::workload
