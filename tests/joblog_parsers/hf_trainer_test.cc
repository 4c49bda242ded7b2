// Hugging Face Trainer parser: conformance on real logs of ../shared/data/training, then edge
// cases on lines written here in the same format.
#include <cmath>
#include <limits>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;
const double kNaN = std::nan("");

TEST(HfTrainerConformance, ModernBertLossZeroGradNormNan) {
  auto lines = SharedLines("training/hf-trainer-modernbert-issue233-loss0-gradnorm-nan.txt");
  ASSERT_EQ(lines.size(), 3u);
  auto parser = MakeHfTrainerParser();
  const auto per_line = RunLines(*parser, lines);
  // {'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.774074342405685e-06, 'epoch': 0.53}: no
  // progress bar in the excerpt, so no step.
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{Loss(0.2051, -1), Metric("grad_norm", kNaN, -1),
                                      Metric("lr", 9.774074342405685e-06, -1), Metric("epoch", 0.53, -1)}));
  // 'loss': 0.0 is a value here; the trailing space of the last line changes nothing.
  EXPECT_EQ(per_line[2],
            (std::vector<ParsedEvent>{Loss(0.0, -1), Metric("grad_norm", kNaN, -1),
                                      Metric("lr", 9.773318840518906e-06, -1), Metric("epoch", 0.53, -1)}));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kLoss), 3u);
  EXPECT_EQ(Count(all, EventKind::kStep), 0u);
  EXPECT_EQ(all.size(), 12u);
}

TEST(HfTrainerConformance, PinkFlatLossWithTqdmPadding) {
  auto lines = SharedLines("training/hf-trainer-pink-issue6-loss0-gradnorm-nan-flat.txt");
  ASSERT_EQ(lines.size(), 13u);
  auto parser = MakeHfTrainerParser();
  const auto all = Flatten(RunLines(*parser, lines));
  const auto losses = Select(all, EventKind::kLoss);
  ASSERT_EQ(losses.size(), 13u);
  for (const auto& l : losses) EXPECT_EQ(l, Loss(0.0, -1));
  const auto lrs = Select(all, EventKind::kTrainMetric, "lr");
  ASSERT_EQ(lrs.size(), 13u);
  EXPECT_EQ(lrs.front(), Metric("lr", 0.0005142857142857142, -1));
  EXPECT_EQ(lrs[5], Metric("lr", 0.00055, -1));
  EXPECT_EQ(lrs.back(), Metric("lr", 0.0006, -1));
  EXPECT_EQ(Count(all, EventKind::kTrainMetric, "grad_norm"), 13u);
}

TEST(HfTrainerConformance, CheckpointSaveGluedToProgressBar) {
  auto lines = SharedLines("training/hf-trainer-transformers-issue15401-checkpoint-save-lines.txt");
  ASSERT_EQ(lines.size(), 7u);
  auto parser = MakeHfTrainerParser();
  const auto per_line = RunLines(*parser, lines);
  // " 10%|...| 1500/14754 [07:07<1:02:41,  3.52it/s][INFO|trainer.py:2103] ... >> Saving model
  // checkpoint to /tmp/debug_squad/checkpoint-1500": the bar's step, then the save.
  EXPECT_EQ(per_line[0], (std::vector<ParsedEvent>{Step(1500, kNaN, {{"total_steps", "14754"}}),
                                                   Ev(EventKind::kCheckpointBegin, "", kNaN, 1500,
                                                      {{"path", "/tmp/debug_squad/checkpoint-1500"}})}));
  for (size_t i = 1; i <= 4; ++i) EXPECT_TRUE(per_line[i].empty()) << lines[i];
  // The dict after the save: the save closed step 1500 and no bar refresh came since, so its
  // step is unknown.
  EXPECT_EQ(per_line[5], (std::vector<ParsedEvent>{Loss(1.3288, -1), Metric("lr", 2.593330622204148e-05, -1),
                                                   Metric("epoch", 0.27, -1)}));
  // The last line is cut inside "Saving model": only the bar counts.
  EXPECT_EQ(per_line[6], (std::vector<ParsedEvent>{Step(2000, kNaN, {{"total_steps", "14754"}})}));
}

TEST(HfTrainerConformance, EvalBlockThenTmpCheckpoint) {
  auto lines = SharedLines("training/hf-trainer-transformers-issue36076-eval-then-tmp-checkpoint.txt");
  ASSERT_EQ(lines.size(), 7u);
  auto parser = MakeHfTrainerParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_TRUE(per_line[0].empty());  // ***** Running Evaluation *****
  EXPECT_EQ(per_line[3],
            (std::vector<ParsedEvent>{
                Eval("eval_loss", 0.7353992462158203, -1), Eval("eval_runtime", 132.7399, -1),
                Eval("eval_samples_per_second", 80.39, -1), Eval("eval_steps_per_second", 10.05, -1)}));
  // "  1%|▉  | 40/4500 [07:21<4:45:21,  3.84s/it[INFO|trainer.py:3850] " (bracket never closed).
  EXPECT_EQ(per_line[4], (std::vector<ParsedEvent>{Step(40, kNaN, {{"total_steps", "4500"}})}));
  // The temp dir names no step: the save belongs to the bar's step, which nothing else closed.
  EXPECT_EQ(per_line[5], (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, 40,
                                                      {{"path", "data/tmp-checkpoint-pe8ry7n_"}})}));
  EXPECT_TRUE(per_line[6].empty());
}

TEST(HfTrainerConformance, AxolotlDicts) {
  auto lines = SharedLines("training/axolotl-issue2004-summed-loss-gradnorm.txt");
  ASSERT_EQ(lines.size(), 2u);
  auto parser = MakeHfTrainerParser();
  const auto per_line = RunLines(*parser, lines);
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{Loss(7.9071, -1), Metric("grad_norm", 6.211667537689209, -1),
                                      Metric("lr", 4.524625433624047e-05, -1), Metric("epoch", 0.52, -1)}));
  EXPECT_EQ(per_line[1].size(), 4u);
}

TEST(HfTrainerConformance, LlavaDictsThenBarGivesStep) {
  auto lines = SharedLines("training/llava-issues-878-918-loss-diverge-hf-dicts.txt");
  auto parser = MakeHfTrainerParser();
  const auto all = Flatten(RunLines(*parser, lines));
  const auto losses = Select(all, EventKind::kLoss);
  ASSERT_EQ(losses.size(), 7u);
  EXPECT_EQ(losses.front(), Loss(1.112, -1));
  EXPECT_EQ(losses[5], Loss(1.3218, -1));
  // " 25%|██▍ | 2588/10485 [3:17:04<9:56:44,  4.53s/it] ", a blank padded line, then the dict.
  EXPECT_EQ(losses.back(), Loss(6.6635, 2588));
  EXPECT_EQ(Select(all, EventKind::kStep),
            (std::vector<ParsedEvent>{Step(2588, kNaN, {{"total_steps", "10485"}})}));
  EXPECT_EQ(*Find(Select(all, EventKind::kTrainMetric, "lr"), EventKind::kTrainMetric, "lr"),
            Metric("lr", 0.00019949993043107128, -1));
  EXPECT_EQ(Select(all, EventKind::kTrainMetric, "lr").back(), Metric("lr", 0.00017634569655424395, 2588));
}

TEST(HfTrainerConformance, DeepSpeedOverflowLinesGluedToBar) {
  // The bars carry DeepSpeed's OVERFLOW lines glued after them; a later excerpt of another run
  // (" 0%| | 9/63645") has another total and is not this run's bar.
  auto lines = SharedLines("training/deepspeed-overflow-loss-scale-collapse.txt");
  auto parser = MakeHfTrainerParser();
  const auto all = Flatten(RunLines(*parser, lines));
  std::vector<int64_t> steps;
  for (const auto& e : Select(all, EventKind::kStep)) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{377, 378, 379, 380, 381, 382}));
  EXPECT_EQ(Select(all, EventKind::kLoss), (std::vector<ParsedEvent>{Loss(2.0491, 380)}));
}

// ---- lines written here ----

TEST(HfTrainer, StepFromBarOnlyOncePerStep) {
  auto p = MakeHfTrainerParser();
  EXPECT_EQ(ParseOne(*p, "  0%|          | 0/300 [00:00<?, ?it/s]", true), std::vector<ParsedEvent>{});
  EXPECT_EQ(ParseOne(*p, " 17%|█▋        | 50/300 [00:10<00:50,  5.0it/s]", true),
            (std::vector<ParsedEvent>{Step(50, kNaN, {{"total_steps", "300"}})}));
  // The same count refreshed: nothing new.
  EXPECT_TRUE(ParseOne(*p, " 17%|█▋        | 50/300 [00:11<00:50,  5.0it/s]", true).empty());
  EXPECT_EQ(ParseOne(*p, "{'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 0.5}"),
            (std::vector<ParsedEvent>{Loss(1.25, 50), Metric("grad_norm", 0.5, 50), Metric("lr", 2e-05, 50),
                                      Metric("epoch", 0.5, 50)}));
  // A second dict with no bar refresh in between: its step is not known.
  EXPECT_EQ(ParseOne(*p, "{'loss': 1.20, 'learning_rate': 2e-05, 'epoch': 0.5}")[0], Loss(1.20, -1));
  // Eval at the same step is fine; the save closes the step.
  EXPECT_EQ(ParseOne(*p, "{'eval_loss': 1.4, 'eval_accuracy': 0.61, 'epoch': 0.5}"),
            (std::vector<ParsedEvent>{Eval("eval_loss", 1.4, 50), Eval("eval_accuracy", 0.61, 50)}));
  EXPECT_EQ(ParseOne(*p, "Saving model checkpoint to out/checkpoint-50"),
            (std::vector<ParsedEvent>{
                Ev(EventKind::kCheckpointBegin, "", kNaN, 50, {{"path", "out/checkpoint-50"}})}));
  EXPECT_TRUE(ParseOne(*p, "# see \"Saving model checkpoint to out/checkpoint-9\" above").empty());
  EXPECT_EQ(
      ParseOne(*p, "Saving model checkpoint to out/final"),
      (std::vector<ParsedEvent>{Ev(EventKind::kCheckpointBegin, "", kNaN, -1, {{"path", "out/final"}})}));
}

TEST(HfTrainer, DictsOnAnotherFdNeedAlternationWithTheBar) {
  auto bar = [](FormatParser& p, int n) {
    std::vector<ParsedEvent> out;
    const std::string seg = " 10%|#         | " + std::to_string(n) + "/1000 [00:10<01:30,  9.9it/s]";
    p.Parse(LineView{seg, true, 2}, out);
  };
  auto dict = [](FormatParser& p, double loss) {
    std::vector<ParsedEvent> out;
    const std::string line = "{'loss': " + std::to_string(loss) + ", 'epoch': 0.1}";
    p.Parse(LineView{line, false, 1}, out);
    return out.at(0).step;
  };
  {
    // Interactive (line-buffered) output: bar, dict, bar, dict. The first dict has no evidence yet.
    auto p = MakeHfTrainerParser();
    bar(*p, 10);
    EXPECT_EQ(dict(*p, 1.0), -1);
    bar(*p, 20);
    EXPECT_EQ(dict(*p, 0.9), 20);
    bar(*p, 30);
    EXPECT_EQ(dict(*p, 0.8), 30);
  }
  {
    // A block-buffered stdout pipe: the dicts come in bursts long after the bar moved on.
    auto p = MakeHfTrainerParser();
    for (int n = 10; n <= 50; n += 10) bar(*p, n);
    EXPECT_EQ(dict(*p, 1.0), -1);
    EXPECT_EQ(dict(*p, 0.9), -1);
    EXPECT_EQ(dict(*p, 0.8), -1);
    for (int n = 60; n <= 90; n += 10) bar(*p, n);
    EXPECT_EQ(dict(*p, 0.7), -1);
    EXPECT_EQ(dict(*p, 0.6), -1);
  }
}

TEST(HfTrainer, BarsWithADescriptionOrAnotherTotalAreNotTheTrainingBar) {
  auto p = MakeHfTrainerParser();
  // datasets' map bar and the shard loader come before training.
  EXPECT_TRUE(ParseOne(*p, "Map: 100%|██████████| 1000/1000 [00:01<00:00, 900.1 examples/s]").empty());
  EXPECT_TRUE(
      ParseOne(*p, "Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.30s/it]").empty());
  EXPECT_FALSE(ParseOne(*p, "[INFO|trainer.py:2000] >>   Total optimization steps = 3,000").size());
  EXPECT_EQ(ParseOne(*p, "  1%|          | 30/3000 [00:10<16:30,  3.0it/s]").size(), 1u);
  // The eval loop's bar (another total) does not move the step.
  EXPECT_TRUE(ParseOne(*p, " 50%|█████     | 20/40 [00:02<00:02,  9.0it/s]").empty());
  EXPECT_EQ(ParseOne(*p, "{'loss': 2.5, 'learning_rate': 1e-4, 'epoch': 0.01}")[0], Loss(2.5, 30));
}

TEST(HfTrainer, EvalBarBeforeAnyTrainingBarIsIgnored) {
  auto p = MakeHfTrainerParser();
  ParseOne(*p, "***** Running Evaluation *****");
  EXPECT_TRUE(ParseOne(*p, " 50%|█████     | 20/40 [00:02<00:02,  9.0it/s]").empty());
  EXPECT_EQ(ParseOne(*p, "{'eval_loss': 3.0, 'epoch': 0.0}"),
            (std::vector<ParsedEvent>{Eval("eval_loss", 3.0, -1)}));
  EXPECT_EQ(ParseOne(*p, "  0%|          | 1/500 [00:01<10:00,  1.0it/s]").size(), 1u);
}

TEST(HfTrainer, SummaryDictIsNotAStep) {
  auto p = MakeHfTrainerParser();
  const auto events = ParseOne(*p,
                               "{'train_runtime': 2583.51, 'train_samples_per_second': 12.34, "
                               "'train_steps_per_second': 0.77, 'total_flos': 1.2e+18, 'train_loss': 0.9132, "
                               "'epoch': 3.0}");
  const std::vector<std::pair<std::string, std::string>> s = {{"summary", "1"}};
  EXPECT_EQ(events,
            (std::vector<ParsedEvent>{Ev(EventKind::kTrainMetric, "train_runtime_seconds", 2583.51, -1, s),
                                      Ev(EventKind::kTrainMetric, "train_samples_per_second", 12.34, -1, s),
                                      Ev(EventKind::kTrainMetric, "train_steps_per_second", 0.77, -1, s),
                                      Ev(EventKind::kTrainMetric, "total_flos", 1.2e+18, -1, s),
                                      Ev(EventKind::kTrainMetric, "train_loss", 0.9132, -1, s),
                                      Ev(EventKind::kTrainMetric, "epoch", 3.0, -1, s)}));
}

TEST(HfTrainer, ValueSpellingsAndExtraKeys) {
  auto p = MakeHfTrainerParser();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ParseOne(*p, "{'loss': inf, 'grad_norm': -inf, 'learning_rate': 0.0, 'epoch': 1.0}"),
            (std::vector<ParsedEvent>{Loss(inf, -1), Metric("grad_norm", -inf, -1), Metric("lr", 0.0, -1),
                                      Metric("epoch", 1.0, -1)}));
  // Quoted numbers, tensors, TRL's own scalars, a list value (skipped), an auxiliary loss.
  EXPECT_EQ(ParseOne(*p,
                     "{'loss': '0.6931', 'grad_norm': tensor(1.5, device='cuda:0'), 'rewards/chosen': -0.25, "
                     "'logits': [1, 2], 'aux_loss': 0.01, 'mean_token_accuracy': 0.75}"),
            (std::vector<ParsedEvent>{Loss(0.6931, -1), Metric("grad_norm", 1.5, -1),
                                      Metric("rewards_chosen", -0.25, -1), Metric("loss_aux", 0.01, -1),
                                      Metric("mean_token_accuracy", 0.75, -1)}));
  // A huge number stays a number.
  EXPECT_EQ(ParseOne(*p, "{'loss': 1e308, 'epoch': 1}")[0], Loss(1e308, -1));
}

TEST(HfTrainer, CutDictKeepsOnlyTerminatedValues) {
  auto p = MakeHfTrainerParser();
  EXPECT_EQ(ParseOne(*p, "{'loss': 1.5, 'learning_rate': 2.5"), (std::vector<ParsedEvent>{Loss(1.5, -1)}));
  EXPECT_TRUE(ParseOne(*p, "{'loss': 1.5").empty());
  EXPECT_TRUE(ParseOne(*p, "{'lo").empty());
  EXPECT_TRUE(ParseOne(*p, "{'").empty());
  // Not a trainer's dict.
  EXPECT_TRUE(ParseOne(*p, "{'name': 'x', 'size': 3}").empty());
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"{'name': 'x', 'size': 3}"}, out));
  EXPECT_TRUE(p->Parse(LineView{"{'loss': 1.0, 'epoch': 1}"}, out));
}

TEST(HfTrainer, RankPrefix) {
  auto p = MakeHfTrainerParser();
  EXPECT_EQ(ParseOne(*p, "[default3]:{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}"),
            (std::vector<ParsedEvent>{Loss(0.5, -1, {}, 3), Metric("lr", 1e-05, -1, 3),
                                      Metric("epoch", 0.1, -1, 3)}));
  EXPECT_EQ(ParseOne(*p, "[rank1]: Saving model checkpoint to /ckpt/checkpoint-7")[0],
            Ev(EventKind::kCheckpointBegin, "", kNaN, 7, {{"path", "/ckpt/checkpoint-7"}}, 1));
}

TEST(HfTrainer, BoundedEventsPerLine) {
  std::string line = "{'loss': 1.0";
  for (int i = 0; i < 60; ++i) line += ", 'k" + std::to_string(i) + "': " + std::to_string(i);
  line += "}";
  auto p = MakeHfTrainerParser();
  EXPECT_LE(ParseOne(*p, line).size(), kMaxEventsPerLine);
  const std::string huge(kMaxLineBytes, '{');
  EXPECT_TRUE(ParseOne(*p, huge).empty());
}


TEST(HfTrainerParser, OneLineNeverGivesMoreThanTheCapAcrossBarDictAndSave) {
  // A progress bar glued to a dict with many numeric keys (TRL/GRPO dicts have dozens) and a
  // save: the per-line cap counts them together.
  std::string dict = "{";
  for (int k = 0; k < 40; ++k) dict += "'metric_" + std::to_string(k) + "': " + std::to_string(k) + ".5, ";
  dict += "'loss': 1.25, 'epoch': 0.5}";
  const std::string line = " 45%|####      | 450/1000 [01:00<01:10,  7.50it/s]" + dict +
                           " Saving model checkpoint to out/checkpoint-450";
  auto parser = MakeHfTrainerParser();
  std::vector<ParsedEvent> out;
  parser->Parse(LineView{line}, out);
  EXPECT_LE(out.size(), kMaxEventsPerLine);
  EXPECT_FALSE(out.empty());
}

}  // namespace
}  // namespace ithbat::collect::joblog
