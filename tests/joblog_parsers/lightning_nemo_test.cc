// PyTorch Lightning bars, NeMo 1.x bars (lightning parser) and NeMo 2.x iteration lines (nemo2).
#include <cmath>

#include <fmt/core.h>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;
const double kNaN = std::nan("");
const std::vector<std::pair<std::string, std::string>> kEpoch0 = {{"epoch", "0"}};

// A step derived from the bar: the run's batch index (epochs before × their totals + count).
ParsedEvent BarStep(int64_t step, int64_t epoch, int64_t batch, int64_t total, int32_t rank = -1) {
  return Step(step, kNaN,
              {{"epoch", std::to_string(epoch)},
               {"batch", std::to_string(batch)},
               {"epoch_batches", std::to_string(total)},
               {"source", "bar"}},
              rank);
}

TEST(LightningConformance, ColabBarWithoutGlyphs) {
  auto lines = SharedLines("training/lightning-issue3866-colab-style-bar-train-loss.txt");
  ASSERT_EQ(lines.size(), 10u);
  auto parser = MakeLightningParser();
  const auto per_line = RunLines(*parser, lines);
  // "Epoch 0:  97% 1651/1702 [13:00<00:24,  2.11it/s, loss=0.158, v_num=0, train_loss=0.149]":
  // batch 1651 of epoch 0 is the run's batch 1651; the user-logged train_loss is the step's loss,
  // "loss" is Lightning's running mean.
  EXPECT_EQ(per_line.front(),
            (std::vector<ParsedEvent>{BarStep(1651, 0, 1651, 1702), Metric("loss_running_mean", 0.158, 1651),
                                      Loss(0.149, 1651, kEpoch0)}));
  EXPECT_EQ(per_line.back(),
            (std::vector<ParsedEvent>{BarStep(1660, 0, 1660, 1702), Metric("loss_running_mean", 0.158, 1660),
                                      Loss(0.149, 1660, kEpoch0)}));
  const auto all = Flatten(per_line);
  std::vector<int64_t> steps;
  for (const auto& e : Select(all, EventKind::kStep)) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1651, 1652, 1653, 1654, 1655, 1656, 1657, 1658, 1659, 1660}));
  EXPECT_EQ(Count(all, EventKind::kLoss), 10u);
  EXPECT_EQ(all.size(), 30u);
}

TEST(LightningConformance, V1BarWithRefreshPairsCutLineAndRestart) {
  auto lines = SharedLines("training/lightning-issue4225-v1-progress-bar-loss.txt");
  ASSERT_EQ(lines.size(), 14u);
  auto parser = MakeLightningParser();
  const auto per_line = RunLines(*parser, lines);
  const auto all = Flatten(per_line);
  // One step per count change: 4, 5, the cut "6/18 [00:23<00:47,  3" (its count is whole), then
  // the pasted restart ("Training:" bars are not the epoch bar; 0/18 has finished no batch).
  std::vector<int64_t> steps;
  for (const auto& e : Select(all, EventKind::kStep)) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 5, 6, 1, 2, 3}));
  EXPECT_EQ(per_line[0].front(), BarStep(4, 0, 4, 18));
  EXPECT_EQ(per_line[4], (std::vector<ParsedEvent>{BarStep(6, 0, 6, 18)}));  // the cut line: no value
  EXPECT_TRUE(per_line[5].empty());                                          // Training: 0it
  EXPECT_TRUE(per_line[6].empty());                                          // Training:   0%| 0/18
  EXPECT_TRUE(per_line[7].empty());                                          // Epoch 0:   0%| 0/18
  EXPECT_EQ(per_line[8], (std::vector<ParsedEvent>{BarStep(1, 0, 1, 18)}));  // no postfix yet
  // Each refresh whose count or values changed gives the loss, stamped with the bar's step; the
  // first refresh of a batch repeats the previous batch's value (the count moves first).
  std::vector<std::pair<int64_t, double>> losses;
  for (const auto& e : Select(all, EventKind::kLoss)) {
    EXPECT_EQ(e.attrs, kEpoch0);
    losses.emplace_back(e.step, e.value);
  }
  EXPECT_EQ(losses, (std::vector<std::pair<int64_t, double>>{{4, 10.072},
                                                             {4, 9.947},
                                                             {5, 9.947},
                                                             {5, 9.850},
                                                             {1, 10.473},
                                                             {2, 10.473},
                                                             {2, 10.224},
                                                             {3, 10.224},
                                                             {3, 10.047}}));
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
  // Two refreshes of one batch: the count first, then the postfix. Epoch 2 is the first seen: the
  // epochs before it are taken to have had its total (the agent attached mid-run).
  EXPECT_EQ(
      ParseOne(*p, "Epoch 2:  45%|████▌     | 45/100 [00:10<00:12,  4.4it/s, v_num=3, train_loss_step=0.51]",
               true),
      (std::vector<ParsedEvent>{BarStep(245, 2, 45, 100), Loss(0.51, 245, {{"epoch", "2"}})}));
  EXPECT_TRUE(
      ParseOne(*p, "Epoch 2:  45%|████▌     | 45/100 [00:10<00:12,  4.4it/s, v_num=3, train_loss_step=0.51]",
               true)
          .empty());
  // A validation value stays in the postfix: reported when it appears or changes.
  const auto first = ParseOne(*p,
                              "Epoch 3:   1%|          | 1/100 [00:00<00:40,  2.4it/s, v_num=3, "
                              "train_loss_step=0.40, val_loss=0.62, val_acc=0.8]",
                              true);
  EXPECT_EQ(first, (std::vector<ParsedEvent>{BarStep(301, 3, 1, 100), Loss(0.40, 301, {{"epoch", "3"}}),
                                             Eval("eval_loss", 0.62, 301), Eval("eval_acc", 0.8, 301)}));
  const auto second = ParseOne(*p,
                               "Epoch 3:   2%|▏         | 2/100 [00:00<00:40,  2.4it/s, v_num=3, "
                               "train_loss_step=0.39, val_loss=0.62, val_acc=0.8]",
                               true);
  EXPECT_EQ(second, (std::vector<ParsedEvent>{BarStep(302, 3, 2, 100), Loss(0.39, 302, {{"epoch", "3"}})}));
  // A rank prefix, an lr, a NaN loss, a user scalar; epoch 0 after epoch 3 is a new fit.
  EXPECT_EQ(ParseOne(*p,
                     "[rank1]:Epoch 0:  10%|█         | 10/100 [00:01<00:09,  9.9it/s, loss=nan, lr=0.001, "
                     "tokens=5e+4]"),
            (std::vector<ParsedEvent>{BarStep(10, 0, 10, 100, 1), Loss(kNaN, 10, kEpoch0, 1),
                                      Metric("lr", 0.001, 10, 1), Metric("tokens", 5e+4, 10, 1)}));
}

TEST(Lightning, CutSegmentDropsItsLastValueAndForeignBarsAreIgnored) {
  auto p = MakeLightningParser();
  // Cut inside the postfix: the count is whole (" [" follows it), the last value may be cut.
  EXPECT_EQ(
      ParseOne(*p,
               "Epoch 0:  10%|█         | 10/100 [00:01<00:09,  9.9it/s, v_num=1, train_loss=0.25, lr=0.0"),
      (std::vector<ParsedEvent>{BarStep(10, 0, 10, 100), Loss(0.25, 10, kEpoch0)}));
  std::vector<ParsedEvent> out;
  // Cut inside the count or right after it ("11/1" may be "11/100", "11" may be "115"): no bar.
  EXPECT_FALSE(p->Parse(LineView{"Epoch 0:  11%|█         | 11/1"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch 0:  11%|█         | 11"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch 0:  11%|█         | 11/100"}, out));
  EXPECT_FALSE(
      p->Parse(LineView{" 10%|█         | 10/100 [00:01<00:09,  9.9it/s, loss=0.1]"}, out));  // no "Epoch N"
  EXPECT_FALSE(p->Parse(LineView{"Map: 100%|██████████| 1000/1000 [00:01<00:00, 900.1 examples/s]"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch 3 done, loss 0.5, 100% complete"}, out));
  EXPECT_FALSE(p->Parse(LineView{"Epoch x:  10%|█| 10/100 [00:01<00:09, 9.9it/s, loss=0.1]"}, out));
  EXPECT_FALSE(
      p->Parse(LineView{"Validation sanity check:  50%|█████     | 1/2 [00:00<00:00,  9.9it/s]"}, out));
  EXPECT_TRUE(out.empty());
}

TEST(Lightning, BarStepAcrossEpochsAndTotalChanges) {
  auto p = MakeLightningParser();
  auto bar = [](int epoch, int n, int total, std::string_view postfix = "") {
    return fmt::format("Epoch {}:  50%|█████     | {}/{} [00:10<00:10,  1.00it/s{}{}]", epoch, n, total,
                       postfix.empty() ? "" : ", ", postfix);
  };
  // Epoch 0 of a Lightning 1.x run: 100 training + 20 validation batches on the bar.
  EXPECT_EQ(ParseOne(*p, bar(0, 119, 120)), (std::vector<ParsedEvent>{BarStep(119, 0, 119, 120)}));
  EXPECT_EQ(ParseOne(*p, bar(0, 120, 120)), (std::vector<ParsedEvent>{BarStep(120, 0, 120, 120)}));
  // Epoch 1 starts: count 0 has finished no batch; its values carry no step.
  EXPECT_EQ(ParseOne(*p, bar(1, 0, 100, "loss=0.5, v_num=1")),
            (std::vector<ParsedEvent>{Ev(EventKind::kLoss, "loss", 0.5, -1, {{"epoch", "1"}})}));
  // No validation this epoch: the total drops to 100, and the index goes on from 120, not from
  // 1 × 100 (that would go back to 101).
  EXPECT_EQ(ParseOne(*p, bar(1, 1, 100)), (std::vector<ParsedEvent>{BarStep(121, 1, 1, 100)}));
  // The second refresh of one batch (same count, new postfix) gives no second step.
  EXPECT_EQ(ParseOne(*p, bar(1, 1, 100, "loss=0.4, v_num=1")),
            (std::vector<ParsedEvent>{Ev(EventKind::kLoss, "loss", 0.4, 121, {{"epoch", "1"}})}));
  EXPECT_EQ(ParseOne(*p, bar(1, 100, 100)), (std::vector<ParsedEvent>{BarStep(220, 1, 100, 100)}));
  // Epoch 3 after a lost epoch 2: the missed epoch is taken to have had the next one's total.
  EXPECT_EQ(ParseOne(*p, bar(3, 5, 120)), (std::vector<ParsedEvent>{BarStep(345, 3, 5, 120)}));
  // Absurd counters give no step (and no overflow).
  EXPECT_TRUE(ParseOne(*p, bar(0, 5, 120).replace(6, 1, "9999999999")).empty());
}

TEST(Lightning, NemoGlobalStepWinsOverTheBarCount) {
  auto p = MakeLightningParser();
  const std::string head = "Epoch 0:   1%|          | ";
  // NeMo 1.x: the exact global_step is the step; the double refresh gives it once.
  EXPECT_EQ(
      ParseOne(
          *p, head + "795/77225 [9:07:58<878:01:48, 41.36s/it, reduced_train_loss=3.090, global_step=794.0]"),
      (std::vector<ParsedEvent>{Step(794, kNaN, kEpoch0), Loss(3.090, 794, kEpoch0)}));
  EXPECT_EQ(
      ParseOne(
          *p, head + "796/77225 [9:08:39<878:01:07, 41.36s/it, reduced_train_loss=3.090, global_step=794.0]"),
      (std::vector<ParsedEvent>{}));
  EXPECT_EQ(
      ParseOne(
          *p, head + "796/77225 [9:08:39<878:01:07, 41.36s/it, reduced_train_loss=3.080, global_step=795.0]"),
      (std::vector<ParsedEvent>{Step(795, kNaN, kEpoch0), Loss(3.080, 795, kEpoch0)}));
  // Once the stream printed global_step, a bar without it (no postfix yet, or a rounded value)
  // gives no step from its count: one stream, one numbering.
  EXPECT_TRUE(ParseOne(*p, head + "797/77225 [9:09:20<878:00:26, 41.36s/it]").empty());
  EXPECT_EQ(
      ParseOne(*p,
               head + "798/77225 [9:10:01<877:59:45, 41.36s/it, reduced_train_loss=3.070, global_step=8e+2]"),
      (std::vector<ParsedEvent>{Loss(3.070, -1, kEpoch0)}));
  // A segment cut inside the global_step value: the key alone says how the stream numbers steps.
  auto fresh = MakeLightningParser();
  EXPECT_EQ(
      ParseOne(*fresh,
               head + "799/77225 [9:10:42<877:59:04, 41.36s/it, reduced_train_loss=3.060, global_step=79"),
      (std::vector<ParsedEvent>{Loss(3.060, -1, kEpoch0)}));
}

TEST(Lightning, ModelCheckpointVerboseLineIsASaveBeginning) {
  // ModelCheckpoint(verbose=True) prints this before it saves (format of its _update_best_and_save).
  const std::string save =
      "Epoch 3, global step 4000: 'val_loss' reached 0.51234 (best 0.51234), saving model to "
      "'/ckpt/epoch=3-step=4000.ckpt' as top 1";
  const ParsedEvent bar_stream = Ev(EventKind::kCheckpointBegin, "", kNaN, -1,
                                    {{"global_step", "4000"}, {"path", "/ckpt/epoch=3-step=4000.ckpt"}});
  // A stream numbering steps by the bar's batch index: the global step is another numbering.
  auto p = MakeLightningParser();
  EXPECT_EQ(ParseOne(*p, save), (std::vector<ParsedEvent>{bar_stream}));
  // A NeMo stream (global_step= in its bar): the save takes the step.
  auto nemo = MakeLightningParser();
  ParseOne(*nemo,
           "Epoch 3:   1%|          | 10/77225 [00:10<00:10, 1.00it/s, reduced_train_loss=3.090, "
           "global_step=3999.0]");
  ParsedEvent at_step = bar_stream;
  at_step.step = 4000;
  EXPECT_EQ(ParseOne(*nemo, save), (std::vector<ParsedEvent>{at_step}));
  // A line cut inside the path keeps what it has; "was not in top 1" saves nothing.
  EXPECT_EQ(
      ParseOne(*p, "Epoch 3, global step 4000: 'val_loss' reached 0.51 (best 0.51), saving model to '/ck"),
      (std::vector<ParsedEvent>{
          Ev(EventKind::kCheckpointBegin, "", kNaN, -1, {{"global_step", "4000"}, {"path", "/ck"}})}));
  EXPECT_TRUE(ParseOne(*p, "Epoch 3, global step 4200: 'val_loss' was not in top 1").empty());
  // Prose naming a save is not one.
  EXPECT_TRUE(ParseOne(*p, "Epoch 3 done, saving model to disk").empty());
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
