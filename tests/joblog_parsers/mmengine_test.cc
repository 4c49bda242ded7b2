// OpenMMLab's training lines (mmengine's LogProcessor, mmcv 1.x's TextLoggerHook). ../shared/data
// holds no OpenMMLab log, so the lines below are written here in the formats those loggers print
// (mmengine/runner/log_processor.py, mmcv/runner/hooks/logger/text.py, their CheckpointHook); the
// numbers are made up.
#include <string>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;

std::unique_ptr<FormatParser> Make() { return MakeMmengineParser(); }

const std::vector<std::pair<std::string, std::string>> kBatch50 = {
    {"epoch", "3"}, {"batch", "50"}, {"epoch_batches", "2500"}, {"source", "epoch"}};

TEST(MmengineParser, EpochBasedLineIsTheRunsBatchIndex) {
  auto p = Make();
  const auto events = ParseOne(
      *p,
      "12/05 10:00:00 - mmengine - INFO - Epoch(train)  [3][  50/2500]  base_lr: 1.0000e-02 lr: 1.0000e-02  "
      "eta: 1 day, 2:03:04  time: 1.0902  data_time: 0.0450  memory: 7892  grad_norm: 2.1000  loss_cls: "
      "0.3012  "
      "loss_bbox: 0.2420  loss: 0.5432");
  const std::vector<ParsedEvent> want = {Step(2 * 2500 + 50, std::nan(""), kBatch50),
                                         Metric("lr", 1e-2, 5050),
                                         Metric("iteration_seconds", 1.0902, 5050),
                                         Metric("data_seconds", 0.045, 5050),
                                         Metric("memory_mib", 7892, 5050),
                                         Metric("grad_norm", 2.1, 5050),
                                         Metric("loss_cls", 0.3012, 5050),
                                         Metric("loss_bbox", 0.242, 5050),
                                         Loss(0.5432, 5050)};
  EXPECT_EQ(events, want);
}

TEST(MmengineParser, IterationBasedLineIsTheIteration) {
  auto p = Make();
  const auto events =
      ParseOne(*p,
               "Iter(train) [  100/160000]  lr: 6.0000e-05  eta: 10:00:00  time: 0.2250  data_time: 0.0100  "
               "memory: 3000  decode.loss_ce: 1.2000  decode.acc_seg: 55.0000  loss: 1.2000");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0], Step(100));
  EXPECT_EQ(*Find(events, EventKind::kLoss), Loss(1.2, 100));
  EXPECT_NE(Find(events, EventKind::kTrainMetric, "loss_decode_loss_ce"), nullptr);
  EXPECT_EQ(Find(events, EventKind::kTrainMetric, "decode_acc_seg"), nullptr);  // not a loss: not read
}

TEST(MmengineParser, Mmcv1Lines) {
  auto p = Make();
  // Tab after the bracket, ", " between items, an eta holding ", " itself.
  const auto events =
      ParseOne(*p,
               "2021-08-01 10:00:00,000 - mmdet - INFO - Epoch [3][50/2500]\tlr: 2.000e-02, eta: 1 day, "
               "2:03:04, time: 1.090, data_time: 0.045, memory: 7892, loss_rpn_cls: 0.0394, loss: 0.5432");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0], Step(5050, std::nan(""), kBatch50));
  EXPECT_EQ(*Find(events, EventKind::kTrainMetric, "iteration_seconds"),
            Metric("iteration_seconds", 1.09, 5050));
  EXPECT_EQ(*Find(events, EventKind::kLoss), Loss(0.5432, 5050));
  EXPECT_EQ(Count(events, EventKind::kTrainMetric, "loss_rpn_cls"), 1u);
  const auto iter = ParseOne(*p, "Iter [200/40000]\tlr: 1.000e-02, eta: 3:00:00, time: 0.300, loss: 0.9000");
  ASSERT_FALSE(iter.empty());
  EXPECT_EQ(iter[0], Step(200));
  EXPECT_EQ(*Find(iter, EventKind::kLoss), Loss(0.9, 200));
}

TEST(MmengineParser, ValidationIsRecognisedWithoutAStep) {
  auto p = Make();
  for (const char* line :
       {"Epoch(val)  [1][ 10/500]    eta: 0:01:00  time: 0.1000  data_time: 0.0100  memory: 900",
        "Epoch(val) [1][500/500]    coco/bbox_mAP: 0.3740  data_time: 0.0100  time: 0.1000",
        "Iter(test) [20/20]    mIoU: 75.1000", "Epoch(val) [12][500]\tbbox_mAP: 0.3740"}) {
    std::vector<ParsedEvent> out;
    EXPECT_TRUE(p->Parse(LineView{line, false, 1}, out)) << line;
    EXPECT_EQ(Count(out, EventKind::kStep), 0u) << line;
    EXPECT_EQ(Count(out, EventKind::kLoss), 0u) << line;
  }
}

TEST(MmengineParser, CheckpointHookLines) {
  auto p = Make();
  auto iters = ParseOne(*p, "12/05 10:00:00 - mmengine - INFO - Saving checkpoint at 8000 iterations");
  ASSERT_EQ(iters.size(), 1u);
  EXPECT_EQ(iters[0], Ev(EventKind::kCheckpointBegin, "", std::nan(""), 8000));
  auto epochs = ParseOne(*p, "Saving checkpoint at 12 epochs");
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0], Ev(EventKind::kCheckpointBegin, "", std::nan(""), -1, {{"epoch", "12"}}));
  // Prose and other units are not a save.
  EXPECT_TRUE(ParseOne(*p, "Saving checkpoint at the end of training").empty());
  EXPECT_TRUE(ParseOne(*p, "Saving checkpoint at 12 minutes").empty());
}

TEST(MmengineParser, LookAlikesAndBrokenLinesGiveNothing) {
  auto p = Make();
  for (const char* line : {"Epoch(train) [3][50/]  loss: 1.0", "Epoch(train) [3]  loss: 1.0",
                           "Epoch(training) [3][1/2]  loss: 1.0", "Epoch 3: 100%|####| 10/10 [00:01<00:00]",
                           "MyEpoch(train) [1][1/2]  loss: 1.0", "Iter(train) [5/]",
                           "Epoch [3][99999999999999999999/2]\tloss: 1.0", ""}) {
    EXPECT_EQ(Count(ParseOne(*p, line), EventKind::kStep), 0u) << line;
  }
  // A batch past the epoch's length (a corrupt line) gives no step.
  EXPECT_EQ(Count(ParseOne(*p, "Epoch(train) [1][3/2]  loss: 1.0"), EventKind::kStep), 0u);
  // The line cut after its head: the step, nothing else.
  const auto cut = ParseOne(*p, "Epoch(train) [1][ 1/10]  lr: 1.0");
  EXPECT_EQ(Count(cut, EventKind::kStep), 1u);
}

TEST(MmengineParser, AStreamOfThemIsOwnedByMmengine) {
  StreamParserOptions o;
  o.format = "auto";
  auto sp = StreamParser::Create(std::move(o));
  ASSERT_TRUE(sp.has_value());
  std::vector<ParsedEvent> all;
  for (int i = 1; i <= 3; ++i) {
    const std::string line =
        "Epoch(train)  [1][" + std::to_string(i * 10) +
        "/90]  lr: 1.0000e-02  eta: 0:00:25  time: 0.0100  data_time: 0.0001  memory: 0  loss: " +
        std::to_string(11.0 - i);
    sp->Parse(LineView{line, false, 1}, all);
  }
  EXPECT_EQ(sp->framework(), "mmengine");
  EXPECT_EQ(Count(all, EventKind::kStep), 3u);
  EXPECT_EQ(Count(all, EventKind::kLoss), 3u);
}

}  // namespace
}  // namespace ithbat::collect::joblog
