#include "workload/train_spec.h"

#include <gtest/gtest.h>

namespace ithbat::sim::workload {
namespace {

TrainSpec Full() {
  TrainSpec s;
  s.job_id = "pretrain-7b";
  s.user = "alice";
  s.recipe_fingerprint = "9f3c2a11d0e4b5c6";
  s.seed = 0xFFFFFFFFFFFFFFF0ULL;  // above int64: must survive as unsigned
  s.world_size = 16;
  s.tp = 2;
  s.pp = 2;
  s.dp = 4;
  s.steps = 500;
  s.start_step = 200;
  s.log = {scenario::LogFormat::kTorchtitan, 5, scenario::LogRanks::kAll, false, 0};
  s.work.compute_ms = 312.5;
  s.work.seq_len.dist = scenario::Dist::kLognormal;
  s.work.seq_len.median = 1500;
  s.work.seq_len.sigma = 0.4;
  s.work.seq_len.min = 64;
  s.work.seq_len.max = 8192;
  s.work.sequences_per_step = 6;
  s.work.packing = true;
  s.work.tensor_share = 0.7;
  s.work.launches_per_step = 1234;
  s.work.host_sync_every_steps = 3;
  s.work.memory_bytes = 42ULL << 30;
  s.collectives = {{scenario::CollectiveOp::kReduceScatter, 1 << 28, 2, true, scenario::CommGroup::kDp},
                   {scenario::CollectiveOp::kSendRecv, 1 << 20, 1, false, scenario::CommGroup::kPp}};
  s.data_loader = {3, 12.5};
  s.checkpoint = TrainCheckpointSpec{100, 32 << 20, "/mnt/ckpt/pretrain-7b", true};
  s.loss = {scenario::LossModel::kDriftExplode, 11, 2.5, 0.03, 300, 420, 0};
  s.lr = {scenario::LrSchedule::kLinear, 1e-4, 20};
  s.exit_code = 3;
  s.hang = TrainHangSpec{5, 77};
  s.host_jitter = {40, 1.5};
  s.nccl_timeout_ms = 6000;
  return s;
}

TEST(TrainSpec, RoundTripsEveryField) {
  const TrainSpec s = Full();
  const std::string json = TrainSpecToJson(s);
  auto back = ParseTrainSpec(json);
  ASSERT_TRUE(back) << back.error().ToString() << "\n" << json;
  EXPECT_TRUE(*back == s);
  EXPECT_EQ(TrainSpecToJson(*back), json);
  EXPECT_EQ(back->seed, s.seed);
  EXPECT_EQ(back->work.seq_len.dist, scenario::Dist::kLognormal);
  EXPECT_DOUBLE_EQ(back->work.seq_len.median, 1500);
  ASSERT_TRUE(back->checkpoint);
  EXPECT_EQ(back->checkpoint->dir, "/mnt/ckpt/pretrain-7b");
  ASSERT_TRUE(back->hang);
  EXPECT_EQ(back->hang->collective, 77);
  EXPECT_EQ(back->collectives[1].group, scenario::CommGroup::kPp);
}

TEST(TrainSpec, RoundTripsEverySeqLenDistribution) {
  for (int d = 0; d < 5; ++d) {
    TrainSpec s;
    auto& p = s.work.seq_len;
    p.dist = static_cast<scenario::Dist>(d);
    p.value = 1024;
    p.min = 100;
    p.max = 4000;
    p.mean = 2000;
    p.stddev = 300;
    p.median = 1800;
    p.sigma = 0.5;
    if (p.dist == scenario::Dist::kChoice) {
      p.choices = {512, 2048, 4096};
      p.weights = {1, 2, 1};
    }
    auto back = ParseTrainSpec(TrainSpecToJson(s));
    ASSERT_TRUE(back) << back.error().ToString();
    EXPECT_EQ(TrainSpecToJson(*back), TrainSpecToJson(s)) << "dist " << d;
  }
}

TEST(TrainSpec, DefaultsForMissingKeysAndNullOptionals) {
  auto s = ParseTrainSpec(R"({"job_id":"j","checkpoint":null,"hang":null,"work":{"seq_len":4096}})");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->world_size, 1);
  EXPECT_FALSE(s->checkpoint);
  EXPECT_FALSE(s->hang);
  EXPECT_TRUE(s->work.seq_len.IsFixed());
  EXPECT_DOUBLE_EQ(s->work.seq_len.value, 4096);
  EXPECT_EQ(s->log.format, scenario::LogFormat::kHfTrainer);
}

TEST(TrainSpec, RefusesMalformedAndInconsistentInput) {
  auto bad_json = ParseTrainSpec("{\"job_id\": ");
  ASSERT_FALSE(bad_json);
  EXPECT_EQ(bad_json.error().code, ErrorCode::kParse);
  for (const char* text : {
           "[]",
           R"({"job_idd":"x"})",                                      // unknown key
           R"({"world_size":4,"tp":2,"pp":1,"dp":1})",                // tp*pp*dp != world
           R"({"log":{"format":"deepspeed"}})",                       // unknown enum
           R"({"steps":-1})",
           R"({"work":{"tensor_share":1.5}})",
           R"({"work":{"seq_len":{"dist":"uniform","min":9,"max":3}}})",
           R"({"work":{"seq_len":{"dist":"choice"}}})",
           R"({"collectives":[{"op":"all_reduce","bytes":"big"}]})",
           R"({"checkpoint":{"every_steps":10}})",                    // no dir
           R"({"hang":{"rank":3,"collective":1}})",                   // outside a world of 1
           R"({"seed":-5})",
           R"({"exit_code":256})",
       }) {
    auto s = ParseTrainSpec(text);
    EXPECT_FALSE(s) << text;
    if (!s) {
      EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << text << ": " << s.error().ToString();
    }
  }
  EXPECT_FALSE(ParseTrainSpec(std::string(kMaxSpecBytes + 1, ' ')));
}

}  // namespace
}  // namespace ithbat::sim::workload
