// PyTorch Lightning bars, NeMo 1.x bars (lightning parser) and NeMo 2.x iteration lines (nemo2).
#include <cmath>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;
const double kNaN = std::nan("");
const std::vector<std::pair<std::string, std::string>> kEpoch0 = {{"epoch", "0"}};

TEST(LightningConformance, ColabBarWithoutGlyphs) {
  auto lines = SharedLines("training/lightning-issue3866-colab-style-bar-train-loss.txt");
  ASSERT_EQ(lines.size(), 10u);
  auto parser = MakeLightningParser();
  const auto per_line = RunLines(*parser, lines);
  // "Epoch 0:  97% 1651/1702 [13:00<00:24,  2.11it/s, loss=0.158, v_num=0, train_loss=0.149]":
  // the user-logged train_loss is the step's loss, "loss" is Lightning's running mean; the bar
  // counter is not a global step.
  const std::vector<ParsedEvent> expected = {Metric("loss_running_mean", 0.158, -1),
                                             Loss(0.149, -1, kEpoch0)};
  EXPECT_EQ(per_line.front(), expected);
  EXPECT_EQ(per_line.back(), expected);  // 1660/1702
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kLoss), 10u);
  EXPECT_EQ(Count(all, EventKind::kStep), 0u);
  EXPECT_EQ(all.size(), 20u);
}

TEST(LightningConformance, V1BarWithRefreshPairsAndCutLine) {
  auto lines = SharedLines("training/lightning-issue4225-v1-progress-bar-loss.txt");
  ASSERT_EQ(lines.size(), 14u);
  auto parser = MakeLightningParser();
  const auto per_line = RunLines(*parser, lines);
  std::vector<double> losses;
  for (const auto& e : Select(Flatten(per_line), EventKind::kLoss)) {
    EXPECT_EQ(e.step, -1);
    EXPECT_EQ(e.attrs, kEpoch0);
    losses.push_back(e.value);
  }
  // Each refresh whose count or values changed; the cut "6/18 [00:23<00:47,  3" line, the
  // "Training:" bars and the bars without a postfix give none.
  EXPECT_EQ(losses,
            (std::vector<double>{10.072, 9.947, 9.947, 9.850, 10.473, 10.473, 10.224, 10.224, 10.047}));
  EXPECT_TRUE(per_line[4].empty());
  EXPECT_TRUE(per_line[5].empty());
  EXPECT_TRUE(per_line[8].empty());
}

TEST(LightningConformance, NemoV1BarWithGlobalStep) {
  auto lines = SharedLines("training/nemo-launcher-issue55-progress-bar.txt");
  ASSERT_EQ(lines.size(), 1u);
  auto parser = MakeLightningParser();
  // "... loss=3.1, v_num=, reduced_train_loss=3.090, global_step=794.0, consumed_samples=1.63e+6]"
  EXPECT_EQ(RunLines(*parser, lines)[0],
            (std::vector<ParsedEvent>{Step(794, kNaN, kEpoch0), Metric("loss_running_mean", 3.1, 794),
                                      Loss(3.090, 794, kEpoch0), Metric("consumed_samples", 1.63e+6, 794)}));
}

TEST(LightningConformance, NemoV1BarRoundedGlobalStepThenWatchdog) {
  auto lines = SharedLines("nccl/pytorch-issue118369-nemo-progress-then-watchdog.txt");
  ASSERT_FALSE(lines.empty());
  auto parser = MakeLightningParser();
  const auto per_line = RunLines(*parser, lines);
  // global_step=3.2e+4 is rounded by the printer (the bar says 32040): no step is claimed.
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{Metric("loss_running_mean", 2.6, -1), Loss(2.590, -1, kEpoch0),
                                      Metric("consumed_samples", 2.56e+7, -1)}));
  for (size_t i = 1; i < per_line.size(); ++i) EXPECT_TRUE(per_line[i].empty());
}

TEST(Lightning, ProgressSegmentsValidationAndRanks) {
  auto p = MakeLightningParser();
  // Two refreshes of one batch: the count first, then the postfix.
  EXPECT_EQ(
      ParseOne(*p, "Epoch 2:  45%|████▌     | 45/100 [00:10<00:12,  4.4it/s, v_num=3, train_loss_step=0.51]",
               true),
      (std::vector<ParsedEvent>{Loss(0.51, -1, {{"epoch", "2"}})}));
  EXPECT_TRUE(
      ParseOne(*p, "Epoch 2:  45%|████▌     | 45/100 [00:10<00:12,  4.4it/s, v_num=3, train_loss_step=0.51]",
               true)
          .empty());
  // A validation value stays in the postfix: reported when it appears or changes.
  const auto first = ParseOne(*p,
                              "Epoch 3:   1%|          | 1/100 [00:00<00:40,  2.4it/s, v_num=3, "
                              "train_loss_step=0.40, val_loss=0.62, val_acc=0.8]",
                              true);
  EXPECT_EQ(first, (std::vector<ParsedEvent>{Loss(0.40, -1, {{"epoch", "3"}}), Eval("eval_loss", 0.62, -1),
                                             Eval("eval_acc", 0.8, -1)}));
  const auto second = ParseOne(*p,
                               "Epoch 3:   2%|▏         | 2/100 [00:00<00:40,  2.4it/s, v_num=3, "
                               "train_loss_step=0.39, val_loss=0.62, val_acc=0.8]",
                               true);
  EXPECT_EQ(second, (std::vector<ParsedEvent>{Loss(0.39, -1, {{"epoch", "3"}})}));
  // A rank prefix, an lr, a NaN loss, a user scalar.
  EXPECT_EQ(ParseOne(*p,
                     "[rank1]:Epoch 0:  10%|█         | 10/100 [00:01<00:09,  9.9it/s, loss=nan, lr=0.001, "
                     "tokens=5e+4]"),
            (std::vector<ParsedEvent>{Loss(kNaN, -1, kEpoch0, 1), Metric("lr", 0.001, -1, 1),
                                      Metric("tokens", 5e+4, -1, 1)}));
}

TEST(Lightning, CutSegmentDropsItsLastValueAndForeignBarsAreIgnored) {
  auto p = MakeLightningParser();
  EXPECT_EQ(
      ParseOne(*p,
               "Epoch 0:  10%|█         | 10/100 [00:01<00:09,  9.9it/s, v_num=1, train_loss=0.25, lr=0.0"),
      (std::vector<ParsedEvent>{Loss(0.25, -1, kEpoch0)}));
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(
      p->Parse(LineView{" 10%|█         | 10/100 [00:01<00:09,  9.9it/s, loss=0.1]"}, out));  // no "Epoch N"
  EXPECT_FALSE(p->Parse(LineView{"Map: 100%|██████████| 1000/1000 [00:01<00:00, 900.1 examples/s]"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch 3 done, loss 0.5, 100% complete"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch x:  10%|█| 10/100 [00:01<00:09, 9.9it/s, loss=0.1]"}, out));
  EXPECT_TRUE(out.empty());
}

TEST(Nemo2Conformance, IterationLines) {
  auto lines = SharedLines("training/nemo2-bionemo-pr740-iteration-lines.txt");
  ASSERT_EQ(lines.size(), 6u);
  auto parser = MakeNemo2Parser();
  const auto per_line = RunLines(*parser, lines);
  const std::vector<std::pair<std::string, std::string>> attrs = {{"total_steps", "149"}, {"epoch", "0"}};
  EXPECT_EQ(per_line[0],
            (std::vector<ParsedEvent>{
                Step(120, 0.03146, attrs), Metric("lr", 3e-05, 120), Metric("consumed_samples", 121, 120),
                Metric("global_batch_size", 1, 120), Loss(1.233, 120), Eval("eval_loss", 4.106, 120)}));
  // val_loss is unchanged on the later lines: not reported again.
  EXPECT_EQ(per_line[5], (std::vector<ParsedEvent>{Step(125, 0.03147, attrs), Metric("lr", 3e-05, 125),
                                                   Metric("consumed_samples", 126, 125),
                                                   Metric("global_batch_size", 1, 125), Loss(1.34, 125)}));
  const auto all = Flatten(per_line);
  EXPECT_EQ(Count(all, EventKind::kStep), 6u);
  EXPECT_EQ(Count(all, EventKind::kLoss), 6u);
  EXPECT_EQ(Count(all, EventKind::kEvalMetric), 1u);
}

TEST(Nemo2, NanDotZeroAndChangedValidation) {
  auto p = MakeNemo2Parser();
  const auto a = ParseOne(
      *p,
      "Training epoch 1, iteration 7/100 | lr: 1e-4 | global_step: 207 | reduced_train_loss: nan.0 | "
      "val_loss: 2.5");
  EXPECT_EQ(
      a, (std::vector<ParsedEvent>{Step(207, kNaN, {{"total_steps", "100"}, {"epoch", "1"}}),
                                   Metric("lr", 1e-4, 207), Loss(kNaN, 207), Eval("eval_loss", 2.5, 207)}));
  const auto b = ParseOne(
      *p, "Training epoch 1, iteration 8/100 | global_step: 208 | reduced_train_loss: 2.0 | val_loss: 2.4");
  EXPECT_EQ(b.back(), Eval("eval_loss", 2.4, 208));
  std::vector<ParsedEvent> out;
  EXPECT_FALSE(p->Parse(LineView{"Training epoch x, iteration 8/100 |"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Training epoch 1, step 8"}, out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace ithbat::collect::joblog
