// torchtitan, nanoGPT and fairseq parsers: conformance on real logs, then lines written here.
#include <cmath>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;
const double kNaN = std::nan("");
const double kGiB = 1024.0 * 1024 * 1024;

std::vector<ParsedEvent> Titan(int64_t step, double loss, double grad_norm, double mem_gib, double tps,
                               double tflops, double mfu, int32_t rank = 0) {
  std::vector<ParsedEvent> v = {Step(step, kNaN, {}, rank), Loss(loss, step, {}, rank)};
  if (!std::isnan(grad_norm)) v.push_back(Metric("grad_norm", grad_norm, step, rank));
  v.push_back(Metric("memory_bytes", mem_gib * kGiB, step, rank));
  v.push_back(Metric("tokens_per_second_per_gpu", tps, step, rank));
  v.push_back(Metric("tflops", tflops, step, rank));
  v.push_back(Metric("mfu", mfu, step, rank));
  return v;
}

TEST(TorchtitanConformance, OlderFormatWithoutGradNorm) {
  auto lines = SharedLines("training/torchtitan-pr1287-gc-profiler-steps.txt");
  ASSERT_EQ(lines.size(), 10u);
  auto parser = MakeTorchtitanParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_TRUE(per_line[0].empty());  // [GC] line
  EXPECT_EQ(per_line[1], Titan(200, 6.1384, kNaN, 49.66, 5856, 339.16, 34.29));
  EXPECT_TRUE(per_line[2].empty());  // profiler dump
  EXPECT_EQ(per_line[4], Titan(210, 6.0388, kNaN, 49.66, 5593, 323.92, 32.75));
  EXPECT_EQ(per_line[9], Titan(250, 5.8383, kNaN, 49.66, 5862, 339.48, 34.33));
  EXPECT_EQ(Count(Flatten(per_line), EventKind::kStep), 6u);
}

TEST(TorchtitanConformance, NewerFormatWithGradNorm) {
  auto lines = SharedLines("training/torchtitan-pr3393-grad-norm-format.txt");
  ASSERT_EQ(lines.size(), 8u);
  auto parser = MakeTorchtitanParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0], Titan(14, 3.24405, 0.8319, 9.46, 7282, 0.52, 0.17));
  EXPECT_EQ(per_line[7], Titan(21, 3.00867, 0.6348, 9.46, 7304, 0.52, 0.17));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kLoss), 8u);
  EXPECT_EQ(Count(all, EventKind::kTrainMetric, "grad_norm"), 8u);
}

TEST(TorchtitanConformance, AsyncCheckpointProcessLines) {
  auto lines = SharedLines("training/torchtitan-pr1287-async-checkpoint-lines.txt");
  ASSERT_EQ(lines.size(), 11u);
  auto parser = MakeTorchtitanParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_TRUE(per_line[0].empty());  // Waiting for checkpoint save request...
  const std::vector<std::pair<std::string, std::string>> attrs = {{"path", "./outputs/checkpoint/step-1"},
                                                                  {"async", "1"}};
  EXPECT_EQ(per_line[1], (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 1, attrs, 0)}));
  EXPECT_EQ(per_line[2], Titan(10, 9.9493, kNaN, 49.66, 2397, 138.80, 14.03));
  EXPECT_EQ(per_line[5], Titan(40, 7.3309, kNaN, 49.66, 5881, 340.60, 34.44));
  EXPECT_EQ(per_line[6], (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", kNaN, 1, attrs, 0)}));
  EXPECT_TRUE(per_line[7].empty());
  // The Orbax lines quoted for comparison are not torchtitan's.
  EXPECT_TRUE(per_line[9].empty());
  EXPECT_TRUE(per_line[10].empty());
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kStep), 4u);
  EXPECT_EQ(all.size(), 2u + 4 * 6);
}

TEST(Torchtitan, RanksCheckpointWordingAndCutLines) {
  auto p = MakeTorchtitanParser();
  const std::string body =
      "[titan] 2025-06-16 22:30:50,322 - root - INFO - step:  5  loss:  7.1  memory: 12.00GiB(13.00%)  tps: "
      "1,234  tflops: 10.50  mfu: 1.00%";
  EXPECT_EQ(ParseOne(*p, "[rank0]:" + body), Titan(5, 7.1, kNaN, 12.0, 1234, 10.5, 1.0, 0));
  EXPECT_EQ(ParseOne(*p, "[rank3]:" + body), Titan(5, 7.1, kNaN, 12.0, 1234, 10.5, 1.0, 3));
  EXPECT_EQ(ParseOne(*p, body), Titan(5, 7.1, kNaN, 12.0, 1234, 10.5, 1.0, -1));
  // A fork's "step: 640/644 = 99.3789%" and no tflops.
  EXPECT_EQ(ParseOne(*p,
                     "[rank0]:2025-04-01 00:25:47,084 - root - INFO - step: 640/644 = 99.3789%  loss:  "
                     "6.2116  memory: 87.04GiB(93.48%)  tps: 52,142  mfu: 3.09%"),
            (std::vector<ParsedEvent>{Step(640, kNaN, {{"total_steps", "644"}}, 0), Loss(6.2116, 640, {}, 0),
                                      Metric("memory_bytes", 87.04 * kGiB, 640, 0),
                                      Metric("tokens_per_second_per_gpu", 52142, 640, 0),
                                      Metric("mfu", 3.09, 640, 0)}));
  EXPECT_EQ(ParseOne(*p,
                     "[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - Saving the checkpoint (or "
                     "staging if async is enabled)."),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, -1, {}, 0)}));
  EXPECT_EQ(ParseOne(*p,
                     "[rank0]:2025-04-01 00:25:59,616 - root - INFO - Finished saving the checkpoint (or "
                     "staging if async is enabled)in 5.53 seconds."),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", 5.53, -1, {}, 0)}));
  EXPECT_EQ(
      ParseOne(*p, "[titan] 2025-01-01 00:00:00,000 - root - INFO - Saving a full checkpoint at step 500"),
      (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 500)}));
  // Cut inside the last field: that value is dropped.
  const auto cut =
      ParseOne(*p, "[titan] x - root - INFO - step: 6  loss:  7.0  memory: 12.00GiB(13.00%)  tps: 1,2");
  EXPECT_EQ(cut, (std::vector<ParsedEvent>{Step(6), Loss(7.0, 6), Metric("memory_bytes", 12.0 * kGiB, 6)}));
  // The DCP phrases quoted inside other text are not the events.
  EXPECT_TRUE(ParseOne(*p,
                       "#  \"Received async checkpoint request with id=...\" / \"Submitted checkpoint save "
                       "request for checkpoint_id=...\"")
                  .empty());
  // A plain "step: 3 loss: 2.1" is some other trainer's.
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"step: 3 loss: 2.1"}, out));
  EXPECT_FALSE(p->Parse(
      LineView{
          "I0608 20:54:47.918725 1 checkpoint_manager.py:1512] [process=0] Saving checkpoint at step 19"},
      out));
  EXPECT_TRUE(out.empty());
}

TEST(NanoGptConformance, NewFormatWithMfuSentinelEvalAndSave) {
  auto lines = SharedLines("training/nanogpt-issue178-healthy-start-mfu-minus100.txt");
  ASSERT_EQ(lines.size(), 27u);
  auto parser = MakeNanoGptParser();
  const auto per_line = RunLines(*parser, lines);
  // "iter 0: loss 4.2648, time 9371.81ms, mfu -100.00%": the sentinel is not an MFU.
  EXPECT_EQ(per_line[0], (std::vector<ParsedEvent>{Step(0, 9371.81 / 1000.0), Loss(4.2648, 0)}));
  EXPECT_EQ(per_line[1], (std::vector<ParsedEvent>{Step(10, 893.76 / 1000.0), Loss(3.2202, 10),
                                                   Metric("mfu", 16.68, 10)}));
  EXPECT_EQ(per_line[24], (std::vector<ParsedEvent>{Step(240, 895.31 / 1000.0), Loss(1.6524, 240),
                                                    Metric("mfu", 16.62, 240)}));
  EXPECT_EQ(per_line[25],
            (std::vector<ParsedEvent>{Eval("eval_train_loss", 1.5440, 250), Eval("eval_loss", 1.7220, 250)}));
  EXPECT_EQ(per_line[26],
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 250, {{"path", "out-sh"}})}));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kStep), 25u);
  EXPECT_EQ(Count(all, EventKind::kTrainMetric, "mfu"), 24u);
}

TEST(NanoGptConformance, OldFormatWithoutMfu) {
  auto lines = SharedLines("training/nanogpt-issue110-old-format-no-mfu.txt");
  ASSERT_EQ(lines.size(), 11u);
  auto parser = MakeNanoGptParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0], (std::vector<ParsedEvent>{Step(1631, 561.94 / 1000.0), Loss(4.0863, 1631)}));
  EXPECT_EQ(per_line[10], (std::vector<ParsedEvent>{Step(1641, 567.31 / 1000.0), Loss(3.9748, 1641)}));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kLoss), 11u);
  EXPECT_EQ(Count(all, EventKind::kTrainMetric), 0u);
}

TEST(NanoGpt, EdgeCases) {
  auto p = MakeNanoGptParser();
  EXPECT_EQ(ParseOne(*p, "[rank2]:iter 5: loss nan, time 100.00ms, mfu 30.00%"),
            (std::vector<ParsedEvent>{Step(5, 0.1, {}, 2), Loss(kNaN, 5, {}, 2), Metric("mfu", 30.0, 5, 2)}));
  // Cut: the loss is only trusted when ", time" follows.
  EXPECT_EQ(ParseOne(*p, "iter 6: loss 4.2"), (std::vector<ParsedEvent>{Step(6)}));
  EXPECT_EQ(ParseOne(*p, "iter 7: loss 4.2, time 100.00ms, mfu 3"),
            (std::vector<ParsedEvent>{Step(7, 0.1), Loss(4.2, 7)}));
  // A save with no eval line just before it: the step is not known.
  EXPECT_EQ(ParseOne(*p, "saving checkpoint to out"),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, -1, {{"path", "out"}})}));
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"iter 5 loss 4.2"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Jupiter 5: loss 4.2, time 1ms"}, out));
  EXPECT_FALSE(p->Parse(LineView{"step 5: loss 4.2"}, out));
  EXPECT_TRUE(out.empty());
}

TEST(FairseqConformance, TrainInnerSimpleFormat) {
  auto lines = SharedLines("training/fairseq-issue2681-train-inner.txt");
  ASSERT_EQ(lines.size(), 3u);
  auto parser = MakeFairseqParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{Step(1, kNaN, {{"epoch", "1"}}), Loss(0.962, 1),
                                      Metric("tokens_per_second", 0, 1), Metric("lr", 2.24975e-07, 1),
                                      Metric("grad_norm", 0.058, 1)}));
  EXPECT_EQ(per_line[2],
            (std::vector<ParsedEvent>{Step(3, kNaN, {{"epoch", "1"}}), Loss(0.953, 3),
                                      Metric("tokens_per_second", 2413.9, 3), Metric("lr", 4.74925e-07, 3),
                                      Metric("grad_norm", 0.065, 3)}));
  EXPECT_EQ(Count(Flatten(per_line), EventKind::kStep), 3u);
}

TEST(Fairseq, OtherLogFormatsValidAndCheckpoints) {
  auto p = MakeFairseqParser();
  // Legacy pipe prefix.
  EXPECT_EQ(ParseOne(*p,
                     "| epoch 002:    100 / 1000 loss=9.1, ppl=549.1, wps=1200, num_updates=1100, lr=0.0005, "
                     "gnorm=1.2, loss_scale=64, wall=50"),
            (std::vector<ParsedEvent>{Step(1100, kNaN, {{"epoch", "2"}}), Loss(9.1, 1100),
                                      Metric("tokens_per_second", 1200, 1100), Metric("lr", 0.0005, 1100),
                                      Metric("grad_norm", 1.2, 1100), Metric("loss_scale", 64, 1100)}));
  // tqdm format.
  EXPECT_EQ(ParseOne(*p,
                     "epoch 001:  10%|█         | 100/1000 [00:10<01:30,  9.9it/s, loss=8.5, nll_loss=8.1, "
                     "num_updates=100, lr=1e-4]"),
            (std::vector<ParsedEvent>{Step(100, kNaN, {{"epoch", "1"}}), Loss(8.5, 100),
                                      Metric("loss_nll", 8.1, 100), Metric("lr", 1e-4, 100)}));
  // json format.
  EXPECT_EQ(
      ParseOne(
          *p,
          "2020-10-01 11:52:42 | INFO | train_inner | {\"epoch\": 1, \"update\": 0.013, \"loss\": \"0.962\", "
          "\"num_updates\": \"1\", \"lr\": \"2.24975e-07\", \"gnorm\": \"0.058\", \"wall\": \"8\"}"),
      (std::vector<ParsedEvent>{Step(1, kNaN, {{"epoch", "1"}}), Loss(0.962, 1), Metric("lr", 2.24975e-07, 1),
                                Metric("grad_norm", 0.058, 1)}));
  // Validation summaries.
  EXPECT_EQ(ParseOne(*p,
                     "2020-10-01 11:55:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 0.95 | "
                     "ppl 1.93 | wps 5000 | wpb 1024 | bsz 8 | num_updates 78"),
            (std::vector<ParsedEvent>{Eval("eval_loss", 0.95, 78), Eval("eval_ppl", 1.93, 78)}));
  EXPECT_EQ(
      ParseOne(
          *p,
          "{\"epoch\": 1, \"valid_loss\": \"4.5\", \"valid_ppl\": \"22.6\", \"valid_num_updates\": \"78\"}"),
      (std::vector<ParsedEvent>{Eval("eval_loss", 4.5, 78), Eval("eval_ppl", 22.6, 78)}));
  // Checkpoints.
  EXPECT_EQ(ParseOne(*p,
                     "2020-10-01 11:55:01 | INFO | fairseq.checkpoint_utils | Preparing to save checkpoint "
                     "for epoch 1 @ 78 updates"),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 78)}));
  EXPECT_EQ(
      ParseOne(*p,
               "2020-10-01 11:55:03 | INFO | fairseq.checkpoint_utils | Saved checkpoint "
               "checkpoints/checkpoint1.pt (epoch 1 @ 78 updates, score 4.5) (writing took 2.3 seconds)"),
      (std::vector<ParsedEvent>{
          Ev(EventKind::kCheckpointEnd, "", 2.3, 78, {{"path", "checkpoints/checkpoint1.pt"}})}));
  // Cut: the last value is dropped; no num_updates, no step line.
  const auto cut = ParseOne(*p, "epoch 001:      4 / 78 loss=0.95, num_updates=4, lr=4.7");
  EXPECT_EQ(cut, (std::vector<ParsedEvent>{Step(4, kNaN, {{"epoch", "1"}}), Loss(0.95, 4)}));
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"epoch 001:      4 / 78 loss=0.95, lr=4.7e-07, wall=1"}, out));
  EXPECT_FALSE(p->Parse(LineView{"num_updates"}, out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace ithbat::collect::joblog
