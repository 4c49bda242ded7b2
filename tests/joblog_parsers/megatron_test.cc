// Megatron-LM / Megatron-DeepSpeed / Megatron-Core parser: conformance on real logs, then lines
// written here.
#include <cmath>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;
const double kNaN = std::nan("");

ParsedEvent MStep(int64_t step, double ms, int64_t total) {
  return Step(step, ms / 1000.0, {{"total_steps", std::to_string(total)}});
}

TEST(MegatronConformance, HealthyIterations) {
  auto lines = SharedLines("training/megatron-llm-issue11-iterations.txt");
  ASSERT_EQ(lines.size(), 4u);
  auto parser = MakeMegatronParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{MStep(122, 86545.2, 250000), Metric("consumed_samples", 124928, 122),
                                      Metric("lr", 9.150E-06, 122), Metric("global_batch_size", 1024, 122),
                                      Loss(2.504220E+00, 122), Metric("loss_scale", 1.0, 122),
                                      Metric("grad_norm", 0.231, 122), Metric("skipped_iterations", 0, 122),
                                      Metric("nan_iterations", 0, 122)}));
  EXPECT_EQ(per_line[3][0], MStep(125, 89075.2, 250000));
  EXPECT_EQ(*Find(per_line[3], EventKind::kLoss), Loss(2.477393E+00, 125));
  EXPECT_EQ(*Find(per_line[3], EventKind::kTrainMetric, "grad_norm"), Metric("grad_norm", 0.356, 125));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kStep), 4u);
  EXPECT_EQ(Count(all, EventKind::kLoss), 4u);
}

TEST(MegatronConformance, LmLossAbsentDuringNanGradNorm) {
  auto lines = SharedLines("training/megatron-deepspeed-bigscience-issue396-grad-norm-nan.txt");
  ASSERT_EQ(lines.size(), 4u);
  auto parser = MakeMegatronParser();
  const auto per_line = RunLines(*parser, lines);
  // The first line is the cut tail of an iteration line ("d norm: nan | ..."): nothing.
  EXPECT_TRUE(per_line[0].empty());
  // Every iteration advanced (skipped 0, nan 0) yet no mean loss was printed: the NaN escaped
  // Megatron's counter. One loss_missing per whole line, none for the cut first line.
  std::vector<ParsedEvent> expected_errors;
  for (size_t i = 1; i < 4; ++i) {
    expected_errors.push_back(Ev(EventKind::kError, std::string(kErrorLossMissing), kNaN,
                                 5425 + static_cast<int64_t>(i), {{"grad_norm", "nan"}}));
    expected_errors.back().text = lines[i];
  }
  EXPECT_EQ(per_line[1], (std::vector<ParsedEvent>{
                             MStep(5426, 4247.9, 250000), Metric("consumed_samples", 43408, 5426),
                             Metric("consumed_tokens", 88899584, 5426), Metric("lr", 2.999E-04, 5426),
                             Metric("global_batch_size", 8, 5426), Metric("loss_scale", 1.0, 5426),
                             Metric("grad_norm", kNaN, 5426), Metric("skipped_iterations", 0, 5426),
                             Metric("nan_iterations", 0, 5426), Metric("samples_per_second", 1.883, 5426),
                             Metric("tflops", 78.36, 5426), expected_errors[0]}));
  const auto all = Flatten(per_line);
  // "lm loss" is absent from every line: no loss at all, and certainly not 0.
  EXPECT_EQ(Count(all, EventKind::kLoss), 0u);
  EXPECT_EQ(Count(all, EventKind::kStep), 3u);
  EXPECT_EQ(Select(all, EventKind::kStep).back(), MStep(5428, 4229.2, 250000));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "tflops").back(), Metric("tflops", 78.71, 5428));
  EXPECT_EQ(Select(all, EventKind::kError), expected_errors);
  EXPECT_EQ(Count(all, EventKind::kError, std::string(kErrorNanLoss)), 0u);
}

TEST(MegatronConformance, SkippedIterationsThenSopLossAndCutLine) {
  auto lines = SharedLines("training/megatron-bert-nccl-issue743-fp16-skipped-iters-timers.txt");
  auto parser = MakeMegatronParser();
  const auto all = Flatten(RunLines(*parser, lines));
  const auto steps = Select(all, EventKind::kStep);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0], MStep(10, 356.2, 1000000));
  EXPECT_EQ(steps[1], MStep(20, 140.6, 1000000));
  // Iteration 10: every iteration skipped, no lm loss.
  EXPECT_EQ(Select(all, EventKind::kLoss), (std::vector<ParsedEvent>{Loss(1.005022E+01, 20)}));
  EXPECT_EQ(
      Select(all, EventKind::kTrainMetric, "loss_scale"),
      (std::vector<ParsedEvent>{Metric("loss_scale", 8388608.0, 10), Metric("loss_scale", 32768.0, 20)}));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "loss_sop"),
            (std::vector<ParsedEvent>{Metric("loss_sop", 8.174902E-01, 20)}));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "lr"),
            (std::vector<ParsedEvent>{Metric("lr", 0.0, 10), Metric("lr", 2.020E-08, 20)}));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "grad_norm"),
            (std::vector<ParsedEvent>{Metric("grad_norm", 217.199, 20)}));
  // "number of skipp" (cut) gives nothing for iteration 20.
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "skipped_iterations"),
            (std::vector<ParsedEvent>{Metric("skipped_iterations", 10, 10)}));
  // Iteration 10 has no lm loss because its 10 iterations were all skipped (fp16 loss-scale
  // warm-up): legitimate, not loss_missing.
  EXPECT_EQ(Count(all, EventKind::kError), 0u);
}

TEST(MegatronConformance, BridgeTimestampAndExtraLosses) {
  auto lines = SharedLines("training/megatron-bridge-issue4024-moe-mtp-losses.txt");
  ASSERT_EQ(lines.size(), 3u);
  auto parser = MakeMegatronParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0], (std::vector<ParsedEvent>{
                             MStep(29, 26813.0, 6069), Metric("consumed_samples", 14848, 29),
                             Metric("lr", 5.800000E-05, 29), Metric("global_batch_size", 512, 29),
                             Loss(8.716962E-01, 29), Metric("loss_seq_load_balancing", 1.253194E+00, 29),
                             Metric("loss_mtp_1", 1.115410E+00, 29), Metric("loss_mtp_2", 1.180141E+00, 29),
                             Metric("loss_scale", 1.0, 29), Metric("grad_norm", 0.852, 29),
                             Metric("skipped_iterations", 0, 29), Metric("nan_iterations", 0, 29)}));
  EXPECT_EQ(*Find(per_line[1], EventKind::kTrainMetric, "grad_norm"), Metric("grad_norm", 1.366, 30));
  EXPECT_EQ(per_line[2][0], MStep(31, 29793.2, 6069));
  EXPECT_EQ(*Find(per_line[2], EventKind::kLoss), Loss(8.641004E-01, 31));
}

TEST(MegatronConformance, NewerSavedCheckpointWording) {
  auto lines = SharedLines("training/megatron-checkpoint-save-format-reference.txt");
  ASSERT_EQ(lines.size(), 3u);
  auto parser = MakeMegatronParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0], (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", kNaN, 845)}));
  EXPECT_EQ(per_line[1], (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", kNaN, 1,
                                                      {{"path", "./model_weights/glm4_mcore/"}})}));
  EXPECT_TRUE(per_line[2].empty());  // INFO:root:Done!
}

TEST(MegatronConformance, OldCheckpointPairThenSaveWithoutEnd) {
  auto lines = SharedLines("training/megatron-lm-issue314-checkpoint-save-then-crash.txt");
  auto parser = MakeMegatronParser();
  const auto all = Flatten(RunLines(*parser, lines));
  const std::vector<std::pair<std::string, std::string>> path = {{"path", "customer_scripts/checkpoints/3b"}};
  EXPECT_EQ(Select(all, EventKind::kCheckpointBegin),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 400, path),
                                      Ev(EventKind::kCheckpointBegin, "", kNaN, 600, path)}));
  EXPECT_EQ(Select(all, EventKind::kCheckpointEnd),
            (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", kNaN, 400, path)}));
  EXPECT_EQ(Select(all, EventKind::kLoss),
            (std::vector<ParsedEvent>{Loss(6.456435E+00, 500), Loss(6.348289E+00, 600)}));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "loss_scale").back(), Metric("loss_scale", 131072.0, 600));
}

// ---- lines written here ----

TEST(Megatron, CoreCheckpointWordingWithFormatAndRanks) {
  auto p = MakeMegatronParser();
  EXPECT_EQ(
      ParseOne(*p, "saving checkpoint at iteration     100 to /ckpt/run1 in torch_dist format"),
      (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 100, {{"path", "/ckpt/run1"}})}));
  EXPECT_EQ(
      ParseOne(*p, "  successfully saved checkpoint from iteration     100 to /ckpt/run1 [ t 1/2, p 1/1 ]"),
      (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointEnd, "", kNaN, 100, {{"path", "/ckpt/run1"}})}));
  // --async-save: the end of a scheduled save is marked async.
  EXPECT_TRUE(
      ParseOne(*p, "saving checkpoint at iteration     200 to /ckpt/run1 in torch_dist format").size() == 1);
  std::vector<ParsedEvent> scheduled;
  EXPECT_TRUE(p->Parse(LineView{"  scheduled an async checkpoint save at iteration     200 to /ckpt/run1"},
                       scheduled));
  EXPECT_TRUE(scheduled.empty());
  EXPECT_EQ(
      ParseOne(*p, "  successfully saved checkpoint from iteration     200 to /ckpt/run1 [ t 1/2, p 1/1 ]"),
      (std::vector<ParsedEvent>{
          Ev(EventKind::kCheckpointEnd, "", kNaN, 200, {{"path", "/ckpt/run1"}, {"async", "1"}})}));
  // Loading is not saving.
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{" loading checkpoint from /ckpt/run1 at iteration 100"}, out));
  EXPECT_FALSE(p->Parse(
      LineView{"  successfully loaded checkpoint from /ckpt/run1 [ t 1/2, p 1/1 ] at iteration 100"}, out));
  EXPECT_TRUE(out.empty());
}

TEST(Megatron, NanLossRankPrefixAndThroughput) {
  auto p = MakeMegatronParser();
  const auto ev =
      ParseOne(*p,
               "[rank7]: iteration       42/     100 | elapsed time per iteration (ms): 1000.0 | "
               "throughput per GPU (TFLOP/s/GPU): 412.3 | learning rate: 1.0E-04 | lm loss: nan | "
               "tokens per gpu per second (tgs): 3456.7 | number of nan iterations:   1 |");
  ParsedEvent nan_error;
  nan_error.kind = EventKind::kError;
  nan_error.name = std::string(kErrorNanLoss);
  nan_error.step = 42;
  nan_error.rank = 7;
  nan_error.attrs = {{"nan_iterations", "1"}};
  nan_error.text =
      "[rank7]: iteration       42/     100 | elapsed time per iteration (ms): 1000.0 | "
      "throughput per GPU (TFLOP/s/GPU): 412.3 | learning rate: 1.0E-04 | lm loss: nan | "
      "tokens per gpu per second (tgs): 3456.7 | number of nan iterations:   1 |";
  EXPECT_EQ(ev, (std::vector<ParsedEvent>{
                    Step(42, 1.0, {{"total_steps", "100"}}, 7), Metric("tflops", 412.3, 42, 7),
                    Metric("lr", 1.0E-04, 42, 7), Loss(kNaN, 42, {}, 7),
                    Metric("tokens_per_second_per_gpu", 3456.7, 42, 7), Metric("nan_iterations", 1, 42, 7),
                    nan_error}));
}

TEST(Megatron, ValidationLine) {
  auto p = MakeMegatronParser();
  EXPECT_EQ(
      ParseOne(*p,
               " validation loss at iteration 2000 on validation set | lm loss value: 2.315E+00 | "
               "lm loss PPL: 1.012E+01 | "),
      (std::vector<ParsedEvent>{Eval("eval_loss", 2.315E+00, 2000), Eval("eval_ppl", 1.012E+01, 2000)}));
  const auto test = ParseOne(*p, " validation loss at iteration 2000 on test set | lm loss value: 2.4E+00 |");
  ASSERT_EQ(test.size(), 1u);
  EXPECT_EQ(test[0], Ev(EventKind::kEvalMetric, "eval_loss", 2.4, 2000, {{"split", "test"}}));
}

TEST(Megatron, ForeignAndBrokenLines) {
  auto p = MakeMegatronParser();
  for (std::string_view line : {
           "Training epoch 0, iteration 120/149 | lr: 3e-05 | global_step: 120 |",  // NeMo 2
           "iteration",
           " iteration 12",
           " iteration 12/",
           " iteration 12/ 30",
           " iteration 99999999999999999999/ 30 |",
           "time (ms) | forward-compute: 193.77 | backward-compute: 73.02",
           "saving checkpoint at iteration",
           "successfully saved checkpoint from iteration x",
       }) {
    std::vector<ParsedEvent> out;
    EXPECT_FALSE(p->Parse(LineView{line}, out)) << line;
    EXPECT_TRUE(out.empty()) << line;
  }
  // A cut line keeps the fields that were terminated by " |" only.
  const auto cut = ParseOne(*p, " iteration 5/ 10 | lm loss: 2.50");
  EXPECT_EQ(cut, (std::vector<ParsedEvent>{Step(5, kNaN, {{"total_steps", "10"}})}));
  // Trailing spaces and a huge value.
  const auto big = ParseOne(*p, " iteration 6/ 10 | lm loss: 1.0E+300 |   ");
  EXPECT_EQ(big[1], Loss(1.0E+300, 6));
}

TEST(Megatron, LossMissingOnlyWhenTheCountersLeaveNoExcuse) {
  const std::string head =
      " iteration      300/  500000 | consumed samples:          300 | "
      "elapsed time per iteration (ms): 900.0 | learning rate: 1.0E-04 | global batch size:     1 | "
      "loss scale: 1.0 | ";
  auto errors = [](const std::vector<ParsedEvent>& out) { return Select(out, EventKind::kError); };
  {
    auto p = MakeMegatronParser();
    // Nothing skipped, no loss, a finite grad norm: flagged, with the grad norm as printed (a
    // mean loss <= 0 is dropped too).
    const std::string line = head + "grad norm: 0.000 | number of skipped iterations:   0 |";
    const auto e = errors(ParseOne(*p, line));
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].name, kErrorLossMissing);
    EXPECT_EQ(e[0].step, 300);
    EXPECT_EQ(e[0].attrs, (std::vector<std::pair<std::string, std::string>>{{"grad_norm", "0.000"}}));
    EXPECT_EQ(e[0].text, line);
    // No grad norm printed: no attr.
    const auto bare =
        errors(ParseOne(*p, head + "number of skipped iterations:   0 | number of nan iterations:   0 |"));
    ASSERT_EQ(bare.size(), 1u);
    EXPECT_TRUE(bare[0].attrs.empty());
    // Some iterations skipped: the interval's length is not printed, so the skips may explain it.
    EXPECT_TRUE(
        errors(ParseOne(*p, head + "number of skipped iterations:   3 | number of nan iterations:   0 |"))
            .empty());
    // nan > 0: Megatron counted it; nan_loss says so, not loss_missing.
    const auto nan =
        errors(ParseOne(*p, head + "number of skipped iterations:   0 | number of nan iterations:   2 |"));
    ASSERT_EQ(nan.size(), 1u);
    EXPECT_EQ(nan[0].name, kErrorNanLoss);
    // No whole skipped counter (cut before or inside it, or a line without counters): the line may
    // not have reached the place of the loss, or says nothing about skips.
    EXPECT_TRUE(errors(ParseOne(*p, head + "grad norm: n")).empty());
    EXPECT_TRUE(errors(ParseOne(*p, head)).empty());
    EXPECT_TRUE(errors(ParseOne(*p, head + "grad norm: nan | number of skipped iterations:   0")).empty());
    // A plain "loss" is the main loss too.
    EXPECT_TRUE(errors(ParseOne(*p, head + "loss: 2.5 | number of skipped iterations:   0 |")).empty());
  }
  {
    // A model whose main loss has another name (ICT) never prints lm loss: not flagged ...
    auto p = MakeMegatronParser();
    EXPECT_TRUE(
        errors(ParseOne(*p, head + "retriever loss: 2.1E+00 | number of skipped iterations:   0 |")).empty());
    // ... but once the stream printed lm loss, a line with only the extra loss lost its main one.
    EXPECT_TRUE(
        errors(ParseOne(*p, head + "lm loss: 9.9E+00 | sop loss: 0.8 | number of skipped iterations:   0 |"))
            .empty());
    const auto e =
        errors(ParseOne(*p, head + "sop loss: 0.8 | grad norm: nan | number of skipped iterations:   0 |"));
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].name, kErrorLossMissing);
    EXPECT_EQ(e[0].attrs, (std::vector<std::pair<std::string, std::string>>{{"grad_norm", "nan"}}));
  }
}

TEST(MegatronParser, NanIterationsAboveZeroAreTheNanLossOfThisFormat) {
  auto parser = MakeMegatronParser();
  std::vector<ParsedEvent> out;
  ASSERT_TRUE(parser->Parse(LineView{" iteration      300/  500000 | consumed samples:          300 | elapsed time per "
                                     "iteration (ms): 900.0 | learning rate: 1.0E-04 | global batch size:     1 | "
                                     "loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number "
                                     "of nan iterations:   3 |"},
                            out));
  const ParsedEvent* e = Find(out, EventKind::kError, std::string(kErrorNanLoss));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->step, 300);
  EXPECT_EQ(e->attrs, (std::vector<std::pair<std::string, std::string>>{{"nan_iterations", "3"}}));
  EXPECT_EQ(Find(out, EventKind::kLoss), nullptr) << "lm loss is absent, as Megatron prints it";
  out.clear();
  ASSERT_TRUE(parser->Parse(LineView{" iteration      301/  500000 | lm loss: 2.0E+00 | number of skipped iterations:   0 | "
                                     "number of nan iterations:   0 |"},
                            out));
  EXPECT_EQ(Find(out, EventKind::kError, std::string(kErrorNanLoss)), nullptr);
}

}  // namespace
}  // namespace ithbat::collect::joblog
