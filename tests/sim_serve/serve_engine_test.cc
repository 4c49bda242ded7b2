// The scheduling model of the simulated inference server (sim/workload/serve_engine.h) on
// simulated time: no threads, no GPU, no clock.
#include "workload/serve_engine.h"

#include <cmath>

#include <gtest/gtest.h>

#include "fake_cuda/cuda_abi.h"

namespace ithbat::sim::workload::serve {
namespace {

constexpr int64_t kSec = 1'000'000'000;

ServeSpec Busy() {
  ServeSpec s;
  s.gpus = 2;
  s.arrival_rate_rps = 30;
  s.prompt_tokens = 1500;
  s.output_tokens = 200;
  s.seed = 42;
  return s;
}

TEST(ServeEngine, NaiveRunsOneRequestPerReplicaAndTheQueueBuilds) {
  ServeSpec s = Busy();
  s.engine = scenario::Engine::kNaive;
  s.costs = DefaultServeCosts(16, 1, s.kv_bytes_per_token, s.engine);
  const SimReport r = SimulateServe(s, 60 * kSec);
  EXPECT_EQ(r.max_running, 1);
  EXPECT_GT(r.max_waiting, 20);
  EXPECT_GT(r.finished, 0);
  EXPECT_EQ(r.prefix_queries, 0u);  // a loop around generate() has no prefix cache
  EXPECT_EQ(r.mixed_steps, 0);
}

TEST(ServeEngine, ContinuousBatchingFillsTheSlots) {
  ServeSpec s = Busy();
  s.slots = 8;
  const SimReport r = SimulateServe(s, 60 * kSec);
  EXPECT_EQ(r.max_running, 8);
  EXPECT_GT(r.max_waiting, 0);
  EXPECT_GT(r.finished, 0);
  // The same load with room for it: no queue to speak of, more finished.
  ServeSpec roomy = Busy();
  roomy.slots = 256;
  const SimReport q = SimulateServe(roomy, 60 * kSec);
  EXPECT_GT(q.max_running, 8);
  EXPECT_GT(q.finished, r.finished);
}

TEST(ServeEngine, KvCapacityBoundsAdmissions) {
  ServeSpec s = Busy();
  s.slots = 256;
  s.kv_capacity_tokens = 16384;  // room for ~9 sequences of 1,700 tokens
  s.prefix_caching = false;
  const SimReport r = SimulateServe(s, 60 * kSec);
  const int64_t blocks = s.kv_capacity_tokens / s.block_size;
  EXPECT_LE(r.max_used_blocks, blocks);
  EXPECT_LE(r.max_kv_usage, 1.0);
  EXPECT_GT(r.max_kv_usage, 0.8);
  EXPECT_LT(r.max_running, 12);
  EXPECT_GT(r.max_waiting, 0);
  EXPECT_GT(r.finished, 0);
}

TEST(ServeEngine, PrefixCachingHitsOnTheSharedPrefixOnly) {
  ServeSpec s = Busy();
  s.shared_prefix_share = 0.5;
  const SimReport shared = SimulateServe(s, 30 * kSec);
  EXPECT_GT(shared.prefix_queries, 0u);
  EXPECT_GT(shared.prefix_hits, 0u);
  EXPECT_LE(static_cast<double>(shared.prefix_hits), 0.5 * static_cast<double>(shared.prefix_queries));
  EXPECT_GT(static_cast<double>(shared.prefix_hits), 0.3 * static_cast<double>(shared.prefix_queries));
  // Less prompt compute: more of the same load finishes or at least the GPU is less busy.
  s.shared_prefix_share = 0;
  const SimReport none = SimulateServe(s, 30 * kSec);
  EXPECT_GT(none.prefix_queries, 0u);
  EXPECT_EQ(none.prefix_hits, 0u);
  EXPECT_LT(shared.gpu_busy_share, none.gpu_busy_share);
  s.shared_prefix_share = 0.5;
  s.prefix_caching = false;
  const SimReport off = SimulateServe(s, 30 * kSec);
  EXPECT_EQ(off.prefix_queries, 0u);
  EXPECT_EQ(off.prefix_hits, 0u);
}

TEST(ServeEngine, ChunkedPrefillMixesPrefillWithDecodes) {
  ServeSpec s = Busy();
  s.prompt_tokens = 6000;
  const SimReport chunked = SimulateServe(s, 30 * kSec);
  EXPECT_GT(chunked.mixed_steps, 0);
  s.chunked_prefill = false;
  const SimReport whole = SimulateServe(s, 30 * kSec);
  EXPECT_EQ(whole.mixed_steps, 0);  // V0 without chunking: prefill-only or decode-only steps
  EXPECT_GT(whole.finished, 0);
}

TEST(ServeEngine, SameSeedSameRunOtherSeedOtherRun) {
  ServeSpec s = Busy();
  s.prompt_tokens.dist = scenario::Dist::kLognormal;
  s.prompt_tokens.median = 1000;
  s.prompt_tokens.sigma = 0.6;
  s.prompt_tokens.min = 10;
  s.prompt_tokens.max = 8000;
  const SimReport a = SimulateServe(s, 20 * kSec);
  const SimReport b = SimulateServe(s, 20 * kSec);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.generation_tokens, b.generation_tokens);
  s.seed = 43;
  const SimReport c = SimulateServe(s, 20 * kSec);
  EXPECT_NE(a.prompt_tokens, c.prompt_tokens);
}

TEST(ServeEngine, ArrivalsArePoissonAtTheRate) {
  ServeSpec s;
  s.arrival_rate_rps = 4;
  ArrivalGenerator gen(s, 0);
  int64_t last = 0, n = 0;
  Request r;
  while ((r = gen.Next()).arrival_ns < 1000 * kSec) {
    EXPECT_GE(r.arrival_ns, last);
    last = r.arrival_ns;
    ++n;
  }
  EXPECT_NEAR(static_cast<double>(n), 4000.0, 4 * std::sqrt(4000.0));
  s.arrival_rate_rps = 0;
  ArrivalGenerator none(s, 0);
  EXPECT_EQ(none.Next().arrival_ns, INT64_MAX);
}

TEST(ReplicaEngine, OneRequestFromPrefillToLastToken) {
  ServeSpec s;
  s.prefix_caching = true;
  ReplicaEngine e(s);
  ASSERT_TRUE(e.Enqueue(Request{1, 0, 100, 3, 32}));
  EXPECT_EQ(e.waiting(), 1);
  StepPlan p = e.Plan(kSec);
  EXPECT_EQ(p.prefill_tokens, 100);
  EXPECT_EQ(p.decode_seqs, 0);
  EXPECT_EQ(p.gpu_ns, std::max(s.costs.step_ns, 100 * s.costs.prefill_ns_per_token));
  EXPECT_EQ(e.running(), 1);
  EXPECT_EQ(e.used_blocks(), 7);  // 100 tokens in blocks of 16
  e.Finish(2 * kSec);
  EXPECT_EQ(e.counters().ttft.count, 1u);
  EXPECT_DOUBLE_EQ(e.counters().ttft.sum, 2.0);
  EXPECT_EQ(e.counters().generation_tokens, 1u);
  p = e.Plan(2 * kSec);
  EXPECT_EQ(p.prefill_tokens, 0);
  EXPECT_EQ(p.decode_seqs, 1);
  EXPECT_EQ(p.context_tokens, 101);
  e.Finish(3 * kSec);
  p = e.Plan(3 * kSec);
  e.Finish(4 * kSec);
  EXPECT_EQ(e.running(), 0);
  EXPECT_EQ(e.used_blocks(), 0);
  EXPECT_EQ(e.counters().finished_stop, 1u);
  EXPECT_EQ(e.counters().generation_tokens, 3u);
  EXPECT_EQ(e.counters().tpot.count, 2u);
  EXPECT_DOUBLE_EQ(e.counters().e2e.sum, 4.0);
  EXPECT_TRUE(e.Plan(5 * kSec).empty());
  // The next request with the same shared prefix skips its cached blocks (2 full blocks of 32).
  ASSERT_TRUE(e.Enqueue(Request{2, 5 * kSec, 100, 1, 32}));
  p = e.Plan(5 * kSec);
  EXPECT_EQ(p.prefill_tokens, 100 - 32);
  EXPECT_EQ(e.counters().prefix_hits, 32u);
  EXPECT_EQ(e.counters().prefix_queries, 200u);
}

TEST(ReplicaEngine, RequestsAreCutToTheModelAndTheCache) {
  ServeSpec s;
  s.max_model_len = 1000;
  ReplicaEngine e(s);
  ASSERT_TRUE(e.Enqueue(Request{1, 0, 5000, 5000, 0}));
  const StepPlan p = e.Plan(0);
  EXPECT_EQ(p.prefill_tokens, 999);
}

TEST(StepKernels, AddUpToTheStepAndLookLikeTheirPhase) {
  const ServeCosts c;
  auto tensor_share = [&](const StepPlan& p) {
    double t = 0, total = 0;
    for (const KernelLaunch& k : StepKernels(p, c)) {
      t += ithbat::sim::cuda::ClassifyKernel(std::string(k.name).c_str()).tensor * static_cast<double>(k.ns);
      total += static_cast<double>(k.ns);
    }
    return t / total;
  };
  auto total_ns = [&](const StepPlan& p) {
    int64_t t = 0;
    for (const KernelLaunch& k : StepKernels(p, c)) t += k.ns;
    return t;
  };
  StepPlan prefill{4096, 0, 0, 0, 0};
  prefill.gpu_ns = std::max(c.step_ns, c.prefill_ns_per_token * 4096);
  EXPECT_NEAR(static_cast<double>(total_ns(prefill)), static_cast<double>(prefill.gpu_ns), 10.0);
  StepPlan one{0, 1, 2000, 0, 0};
  one.gpu_ns = c.step_ns + c.decode_ns_per_seq + static_cast<int64_t>(c.attn_ns_per_kv_token * 2000);
  EXPECT_NEAR(static_cast<double>(total_ns(one)), static_cast<double>(one.gpu_ns), 10.0);
  StepPlan batch{0, 64, 64 * 2000, 0, 0};
  EXPECT_GT(tensor_share(prefill), 0.7);
  EXPECT_LT(tensor_share(one), 0.3);
  EXPECT_GT(tensor_share(batch), tensor_share(one));
  for (const KernelLaunch& k : StepKernels(batch, c)) EXPECT_GE(k.ns, 3000) << k.name;
  EXPECT_TRUE(StepKernels(StepPlan{}, c).empty());
}

TEST(ServeEngine, PickReplicaTakesTheLeastLoadedInTurn) {
  uint64_t turn = 0;
  const std::vector<int64_t> even = {0, 0, 0};
  EXPECT_EQ(PickReplica(even, &turn), 0u);
  EXPECT_EQ(PickReplica(even, &turn), 1u);
  EXPECT_EQ(PickReplica(even, &turn), 2u);
  EXPECT_EQ(PickReplica(even, &turn), 0u);
  const std::vector<int64_t> loaded = {5, 1, 3};
  EXPECT_EQ(PickReplica(loaded, &turn), 1u);
}

}  // namespace
}  // namespace ithbat::sim::workload::serve
