#include "workload/train_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "scenario/rng.h"

namespace ithbat::sim::workload {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

scenario::Rng StepRng(uint64_t seed, std::string_view what, int64_t rank, int64_t step) {
  const std::string path = std::string(what) + "/" + std::to_string(rank) + "/" + std::to_string(step);
  return scenario::Rng(scenario::FieldSeed(seed, path));
}

double Tau(int64_t total_steps) { return std::max(10.0, static_cast<double>(total_steps) / 4.0); }

double Decay(const TrainLossSpec& l, int64_t step, int64_t total) {
  return l.final + (l.initial - l.final) * std::exp(-static_cast<double>(step) / Tau(total));
}

// The loss before noise, or NaN.
double LossShape(const TrainLossSpec& l, int64_t step, int64_t total) {
  switch (l.model) {
    case scenario::LossModel::kDecay:
      return Decay(l, step, total);
    case scenario::LossModel::kFlat:
      return l.initial;
    case scenario::LossModel::kNan:
      return step >= l.nan_step ? kNaN : Decay(l, step, total);
    case scenario::LossModel::kRepeatedBatch: {
      const double tau = std::max(2.0, static_cast<double>(total) / 50.0);
      return l.initial * (0.01 + 0.99 * std::exp(-static_cast<double>(step) / tau));
    }
    case scenario::LossModel::kDriftExplode: {
      if (step < l.drift_start_step) return Decay(l, step, total);
      const double base = Decay(l, l.drift_start_step, total);
      double v = base * (1.0 + 0.005 * static_cast<double>(step - l.drift_start_step));
      if (l.explode_step > 0 && step >= l.explode_step) {
        if (step >= l.explode_step + 5) return kNaN;
        v *= std::exp(static_cast<double>(step - l.explode_step + 1));
      }
      return v;
    }
  }
  return Decay(l, step, total);
}

}  // namespace

double LossAt(const TrainLossSpec& loss, int64_t step, int64_t total_steps, uint64_t seed) {
  const double shape = LossShape(loss, step, total_steps);
  if (std::isnan(shape)) return shape;
  scenario::Rng rng = StepRng(seed, "loss", 0, step);
  const double z = std::clamp(rng.Normal(), -4.0, 4.0);
  return std::max(0.0, shape * (1.0 + loss.noise * z));
}

double GradNormAt(const TrainLossSpec& loss, int64_t step, int64_t total_steps, uint64_t seed) {
  const double shape = LossShape(loss, step, total_steps);
  if (std::isnan(shape)) return kNaN;
  double g = 0.3 + 1.7 * std::exp(-static_cast<double>(step) / Tau(total_steps));
  if (loss.model == scenario::LossModel::kDriftExplode && step >= loss.drift_start_step) {
    g *= 1.0 + 0.02 * static_cast<double>(step - loss.drift_start_step);
    if (loss.explode_step > 0 && step >= loss.explode_step)
      g *= std::pow(10.0, static_cast<double>(step - loss.explode_step + 1));
  }
  if (loss.model == scenario::LossModel::kFlat) g = 0.0;  // nothing flows back
  scenario::Rng rng = StepRng(seed, "grad_norm", 0, step);
  return std::max(0.0, g * (1.0 + 0.1 * std::clamp(rng.Normal(), -3.0, 3.0)));
}

double LrAt(const TrainLrSpec& lr, int64_t step, int64_t total_steps) {
  if (lr.schedule == scenario::LrSchedule::kZero) return 0.0;
  const double s = static_cast<double>(std::max<int64_t>(step, 0));
  if (lr.warmup_steps > 0 && step < lr.warmup_steps) return lr.peak * s / static_cast<double>(lr.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(total_steps - lr.warmup_steps, 1));
  const double progress = std::clamp((s - static_cast<double>(lr.warmup_steps)) / span, 0.0, 1.0);
  switch (lr.schedule) {
    case scenario::LrSchedule::kConstant:
      return lr.peak;
    case scenario::LrSchedule::kCosine:
      return lr.peak * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
    case scenario::LrSchedule::kLinear:
      return lr.peak * (1.0 - progress);
    case scenario::LrSchedule::kZero:
      return 0.0;
  }
  return lr.peak;
}

int64_t MedianSeqLen(const scenario::Param<int64_t>& p) {
  double m = p.value;
  switch (p.dist) {
    case scenario::Dist::kFixed: m = p.value; break;
    case scenario::Dist::kUniform: m = (p.min + p.max) / 2; break;
    case scenario::Dist::kNormal: m = std::clamp(p.mean, p.min, p.max); break;
    case scenario::Dist::kLognormal: m = std::clamp(p.median, p.min, p.max); break;
    case scenario::Dist::kChoice: {
      if (p.choices.empty()) break;
      std::vector<std::pair<double, double>> cw;
      double total = 0;
      for (size_t i = 0; i < p.choices.size(); ++i) {
        const double w = p.weights.empty() ? 1.0 : p.weights[i];
        cw.emplace_back(p.choices[i], w);
        total += w;
      }
      std::sort(cw.begin(), cw.end());
      double acc = 0;
      m = cw.back().first;
      for (const auto& [v, w] : cw) {
        acc += w;
        if (acc >= total / 2) {
          m = v;
          break;
        }
      }
      break;
    }
  }
  return std::max<int64_t>(1, std::llround(m));
}

int64_t StepTokens(const TrainWorkSpec& work, uint64_t seed, int64_t rank, int64_t step) {
  if (work.packing || work.seq_len.IsFixed()) return work.sequences_per_step * MedianSeqLen(work.seq_len);
  scenario::Rng rng = StepRng(seed, "seq_len", rank, step);
  int64_t tokens = 0;
  for (int64_t i = 0; i < work.sequences_per_step; ++i)
    tokens += std::max<int64_t>(1, std::llround(scenario::Sample(work.seq_len, rng)));
  return tokens;
}

namespace {

// One transformer layer's kernels in launch order, as a profiler shows them for a bf16 Llama-like
// model on H100 (cuBLAS sm90 gemms, flash-attention 2, PyTorch elementwise/norm/reduce kernels).
struct PatternKernel {
  std::string_view name;
  bool tensor;
};
constexpr std::string_view kGemmFwd =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
constexpr std::string_view kGemmDgrad =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas";
constexpr std::string_view kGemmWgrad =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
constexpr std::string_view kFlashFwd = "flash_fwd_kernel";
constexpr std::string_view kFlashBwd = "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel";
constexpr std::string_view kRmsNormFwd = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0";
constexpr std::string_view kRmsNormBwd = "triton_red_fused__to_copy_add_div_mul_pow_sum_1";
constexpr std::string_view kElementwise = "vectorized_elementwise_kernel";
constexpr std::string_view kSiluMul = "triton_poi_fused__to_copy_mul_silu_2";
constexpr std::string_view kSiluMulBwd = "triton_poi_fused__to_copy_mul_sigmoid_silu_backward_3";
constexpr std::string_view kRotary = "triton_poi_fused_cat_mul_add_rotary_4";
constexpr std::string_view kReduce = "reduce_kernel";
constexpr std::string_view kSoftmaxLoss = "cunn_SoftMaxForward";
constexpr std::string_view kSoftmaxLossBwd = "cunn_SoftMaxBackward";
constexpr std::string_view kAdam = "multi_tensor_apply_kernel";
constexpr std::string_view kCopy = "unrolled_elementwise_kernel";

constexpr PatternKernel kForward[] = {
    {kRmsNormFwd, false}, {kGemmFwd, true},  {kRotary, false},       {kFlashFwd, true},
    {kGemmFwd, true},     {kElementwise, false}, {kRmsNormFwd, false}, {kGemmFwd, true},
    {kSiluMul, false},    {kGemmFwd, true},  {kElementwise, false},
};
constexpr PatternKernel kBackward[] = {
    {kElementwise, false}, {kGemmDgrad, true}, {kGemmWgrad, true},  {kSiluMulBwd, false},
    {kGemmDgrad, true},    {kGemmWgrad, true}, {kRmsNormBwd, false}, {kElementwise, false},
    {kGemmDgrad, true},    {kGemmWgrad, true}, {kFlashBwd, true},    {kRotary, false},
    {kGemmDgrad, true},    {kGemmWgrad, true}, {kRmsNormBwd, false}, {kReduce, false},
};
constexpr PatternKernel kOptimizer[] = {
    {kReduce, false}, {kAdam, false}, {kAdam, false}, {kCopy, false},
};

}  // namespace

std::vector<KernelPlan> PlanPhase(Phase phase, int64_t launches, int64_t total_ns, double tensor_share) {
  std::span<const PatternKernel> pattern = phase == Phase::kForward    ? std::span<const PatternKernel>(kForward)
                                           : phase == Phase::kBackward ? std::span<const PatternKernel>(kBackward)
                                                                       : std::span<const PatternKernel>(kOptimizer);
  launches = std::max<int64_t>(1, launches);
  std::vector<KernelPlan> out;
  out.reserve(static_cast<size_t>(launches));
  int64_t n_tensor = 0;
  for (int64_t i = 0; i < launches; ++i) {
    const PatternKernel& k = pattern[static_cast<size_t>(i) % pattern.size()];
    out.push_back({k.name, 0, k.tensor});
    n_tensor += k.tensor ? 1 : 0;
  }
  // The loss head: the forward's last kernel is the softmax/cross-entropy, the backward's first.
  if (phase == Phase::kForward && launches > 1) out.back() = {kSoftmaxLoss, 0, false};
  if (phase == Phase::kBackward && launches > 1) out.front() = {kSoftmaxLossBwd, 0, false};
  n_tensor = 0;
  for (const auto& k : out) n_tensor += k.tensor ? 1 : 0;
  const int64_t n_other = launches - n_tensor;
  double share = std::clamp(tensor_share, 0.0, 1.0);
  if (n_tensor == 0) share = 0;
  if (n_other == 0) share = 1;
  const double t_tensor = n_tensor > 0 ? static_cast<double>(total_ns) * share / static_cast<double>(n_tensor) : 0;
  const double t_other = n_other > 0 ? static_cast<double>(total_ns) * (1 - share) / static_cast<double>(n_other) : 0;
  int64_t sum = 0;
  for (auto& k : out) {
    k.duration_ns = static_cast<int64_t>(k.tensor ? t_tensor : t_other);
    sum += k.duration_ns;
  }
  if (!out.empty()) out.back().duration_ns += std::max<int64_t>(0, total_ns - sum);  // rounding
  return out;
}

std::vector<std::string_view> AllKernelNames() {
  return {kGemmFwd, kGemmDgrad, kGemmWgrad, kFlashFwd, kFlashBwd, kRmsNormFwd, kRmsNormBwd, kElementwise,
          kSiluMul, kSiluMulBwd, kRotary, kReduce, kSoftmaxLoss, kSoftmaxLossBwd, kAdam, kCopy};
}

GroupPlace PlaceInGroup(scenario::CommGroup group, int64_t rank, int64_t tp, int64_t pp, int64_t dp) {
  const int64_t tp_i = rank % tp;
  const int64_t dp_i = (rank / tp) % dp;
  const int64_t pp_i = rank / (tp * dp);
  auto at = [&](int64_t p, int64_t d, int64_t t) { return (p * dp + d) * tp + t; };
  GroupPlace g;
  switch (group) {
    case scenario::CommGroup::kWorld:
      g.index = 0;
      g.rank_in_group = rank;
      for (int64_t r = 0; r < tp * pp * dp; ++r) g.members.push_back(r);
      break;
    case scenario::CommGroup::kTp:
      g.index = pp_i * dp + dp_i;
      g.rank_in_group = tp_i;
      for (int64_t t = 0; t < tp; ++t) g.members.push_back(at(pp_i, dp_i, t));
      break;
    case scenario::CommGroup::kDp:
      g.index = pp_i * tp + tp_i;
      g.rank_in_group = dp_i;
      for (int64_t d = 0; d < dp; ++d) g.members.push_back(at(pp_i, d, tp_i));
      break;
    case scenario::CommGroup::kPp:
      g.index = dp_i * tp + tp_i;
      g.rank_in_group = pp_i;
      for (int64_t p = 0; p < pp; ++p) g.members.push_back(at(p, dp_i, tp_i));
      break;
  }
  return g;
}

}  // namespace ithbat::sim::workload
