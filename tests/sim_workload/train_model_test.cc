#include "workload/train_model.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "fake_cuda/cuda_abi.h"

namespace ithbat::sim::workload {
namespace {

TrainLossSpec Quiet(scenario::LossModel m) {
  TrainLossSpec l;
  l.model = m;
  l.initial = 10;
  l.final = 2;
  l.noise = 0;
  return l;
}

TEST(LossModel, DecayFallsFromInitialTowardFinal) {
  const auto l = Quiet(scenario::LossModel::kDecay);
  double prev = LossAt(l, 0, 1000, 1);
  EXPECT_NEAR(prev, 10, 1e-9);
  for (int64_t s = 1; s <= 1000; ++s) {
    const double v = LossAt(l, s, 1000, 1);
    EXPECT_LT(v, prev);
    prev = v;
  }
  EXPECT_GT(prev, 2);
  EXPECT_LT(prev, 2.5);
}

TEST(LossModel, NoiseIsReproducibleAndBounded) {
  auto l = Quiet(scenario::LossModel::kFlat);
  l.noise = 0.05;
  std::set<double> seen;
  for (int64_t s = 1; s <= 200; ++s) {
    const double v = LossAt(l, s, 200, 42);
    EXPECT_EQ(v, LossAt(l, s, 200, 42));
    EXPECT_NEAR(v, 10, 10 * 0.05 * 4 + 1e-9);
    seen.insert(v);
  }
  EXPECT_GT(seen.size(), 150u);
  EXPECT_NE(LossAt(l, 7, 200, 42), LossAt(l, 7, 200, 43));
}

TEST(LossModel, DriftThenExplodeThenNaN) {
  auto l = Quiet(scenario::LossModel::kDriftExplode);
  l.drift_start_step = 100;
  l.explode_step = 200;
  const double at_drift = LossAt(l, 100, 1000, 1);
  EXPECT_LT(LossAt(l, 99, 1000, 1), LossAt(l, 98, 1000, 1));  // still learning
  EXPECT_GT(LossAt(l, 150, 1000, 1), at_drift);               // rising slowly
  EXPECT_LT(LossAt(l, 150, 1000, 1), at_drift * 1.5);
  EXPECT_GT(LossAt(l, 202, 1000, 1), 5 * LossAt(l, 199, 1000, 1));  // exploding
  EXPECT_GT(GradNormAt(l, 202, 1000, 1), 100 * GradNormAt(l, 150, 1000, 1));
  EXPECT_TRUE(std::isnan(LossAt(l, 205, 1000, 1)));
  EXPECT_TRUE(std::isnan(GradNormAt(l, 300, 1000, 1)));
}

TEST(LossModel, NanFlatRepeatedBatch) {
  auto n = Quiet(scenario::LossModel::kNan);
  n.nan_step = 50;
  EXPECT_FALSE(std::isnan(LossAt(n, 49, 100, 1)));
  EXPECT_TRUE(std::isnan(LossAt(n, 50, 100, 1)));
  EXPECT_TRUE(std::isnan(LossAt(n, 99, 100, 1)));
  const auto f = Quiet(scenario::LossModel::kFlat);
  EXPECT_DOUBLE_EQ(LossAt(f, 1, 100, 1), LossAt(f, 99, 100, 1));
  const auto r = Quiet(scenario::LossModel::kRepeatedBatch);
  EXPECT_LT(LossAt(r, 100, 1000, 1), 0.2);                      // memorised
  EXPECT_LT(LossAt(r, 100, 1000, 1), LossAt(Quiet(scenario::LossModel::kDecay), 100, 1000, 1) / 10);
}

TEST(LrSchedule, WarmupThenShape) {
  TrainLrSpec lr{scenario::LrSchedule::kCosine, 1e-3, 10};
  EXPECT_DOUBLE_EQ(LrAt(lr, 0, 110), 0);
  EXPECT_DOUBLE_EQ(LrAt(lr, 5, 110), 5e-4);
  EXPECT_DOUBLE_EQ(LrAt(lr, 10, 110), 1e-3);
  EXPECT_NEAR(LrAt(lr, 60, 110), 5e-4, 1e-12);
  EXPECT_NEAR(LrAt(lr, 110, 110), 0, 1e-12);
  lr.schedule = scenario::LrSchedule::kLinear;
  EXPECT_NEAR(LrAt(lr, 60, 110), 5e-4, 1e-12);
  EXPECT_NEAR(LrAt(lr, 85, 110), 2.5e-4, 1e-12);
  lr.schedule = scenario::LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(LrAt(lr, 100, 110), 1e-3);
  lr.schedule = scenario::LrSchedule::kZero;
  EXPECT_DOUBLE_EQ(LrAt(lr, 50, 110), 0);
}

TEST(Work, MedianAndTokens) {
  scenario::Param<int64_t> p;
  p.dist = scenario::Dist::kUniform;
  p.min = 1000;
  p.max = 3000;
  EXPECT_EQ(MedianSeqLen(p), 2000);
  scenario::Param<int64_t> c;
  c.dist = scenario::Dist::kChoice;
  c.choices = {4096, 512, 1024};
  c.weights = {1, 1, 5};
  EXPECT_EQ(MedianSeqLen(c), 1024);
  TrainWorkSpec w;
  w.seq_len = p;
  w.sequences_per_step = 8;
  w.packing = true;
  EXPECT_EQ(StepTokens(w, 1, 0, 5), 16000);
  EXPECT_EQ(StepTokens(w, 1, 3, 9), 16000);  // packing: every rank, every step the same
  w.packing = false;
  std::set<int64_t> totals;
  for (int64_t step = 1; step <= 50; ++step) {
    const int64_t t = StepTokens(w, 1, 2, step);
    EXPECT_EQ(t, StepTokens(w, 1, 2, step));  // reproducible per (seed, rank, step)
    EXPECT_GE(t, 8 * 1000);
    EXPECT_LE(t, 8 * 3000);
    totals.insert(t);
  }
  EXPECT_GT(totals.size(), 40u);
  EXPECT_NE(StepTokens(w, 1, 2, 7), StepTokens(w, 1, 3, 7));
}

TEST(Work, PhasePlanAddsUpWithTensorShare) {
  for (Phase ph : {Phase::kForward, Phase::kBackward, Phase::kOptimizer}) {
    const auto plan = PlanPhase(ph, 333, 100'000'000, 0.6);
    ASSERT_EQ(plan.size(), 333u);
    int64_t total = 0, tensor = 0;
    for (const auto& k : plan) {
      total += k.duration_ns;
      if (k.tensor) tensor += k.duration_ns;
      EXPECT_GE(k.duration_ns, 0);
    }
    EXPECT_EQ(total, 100'000'000);
    if (ph != Phase::kOptimizer) {
      EXPECT_NEAR(static_cast<double>(tensor) / total, 0.6, 0.01);
    }
  }
  const auto fwd = PlanPhase(Phase::kForward, 50, 1000000, 0.5);
  bool gemm = false, flash = false;
  for (const auto& k : fwd) {
    gemm |= k.name.starts_with("sm90_xmma_gemm_") && k.tensor;
    flash |= k.name.starts_with("flash_fwd") && k.tensor;
    if (k.name.find("elementwise") != std::string_view::npos) {
      EXPECT_FALSE(k.tensor);
    }
  }
  EXPECT_TRUE(gemm);
  EXPECT_TRUE(flash);
}

TEST(Groups, MegatronRankOrder) {
  // tp=2, dp=2, pp=2: rank = (pp_i*2 + dp_i)*2 + tp_i.
  const auto tp = PlaceInGroup(scenario::CommGroup::kTp, 5, 2, 2, 2);  // pp 1, dp 0, tp 1
  EXPECT_EQ(tp.members, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(tp.rank_in_group, 1);
  EXPECT_EQ(tp.index, 2);
  const auto dp = PlaceInGroup(scenario::CommGroup::kDp, 5, 2, 2, 2);
  EXPECT_EQ(dp.members, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(dp.rank_in_group, 0);
  const auto pp = PlaceInGroup(scenario::CommGroup::kPp, 5, 2, 2, 2);
  EXPECT_EQ(pp.members, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(pp.rank_in_group, 1);
  const auto w = PlaceInGroup(scenario::CommGroup::kWorld, 5, 2, 2, 2);
  EXPECT_EQ(w.members.size(), 8u);
  EXPECT_EQ(w.rank_in_group, 5);
}

// The names are the only contract with the fake libcuda: the kernels planned as tensor-core work
// must be the ones it classifies as gemm/attention, the others as memory-bound.
TEST(Work, KernelNamesClassifyAsPlanned) {
  for (Phase ph : {Phase::kForward, Phase::kBackward, Phase::kOptimizer}) {
    for (const auto& k : PlanPhase(ph, 64, 1'000'000, 0.6)) {
      const std::string name(k.name);
      const auto mix = cuda::ClassifyKernel(name.c_str());
      if (k.tensor) {
        EXPECT_GT(mix.tensor, 0.5f) << name;
      } else {
        EXPECT_EQ(std::string(mix.kind), "memory") << name;
      }
    }
  }
}

}  // namespace
}  // namespace ithbat::sim::workload
