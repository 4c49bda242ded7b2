// fp16 loss-scaler lines: DeepSpeed, apex, Megatron (expected events written from reading the
// shared files, not from running the parser).
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

std::vector<std::string> SharedLines(const std::string& rel) { return testing::SharedDataLines(rel); }

std::vector<ParsedEvent> RunAll(FormatParser& p, const std::vector<std::string>& lines) {
  std::vector<ParsedEvent> out;
  for (const auto& l : lines) p.Parse(LineView{l}, out);
  return out;
}

std::vector<ParsedEvent> One(FormatParser& p, std::string_view line) {
  std::vector<ParsedEvent> out;
  p.Parse(LineView{line}, out);
  return out;
}

std::optional<std::string> Attr(const ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::vector<ParsedEvent> Select(const std::vector<ParsedEvent>& events, EventKind kind, std::string_view name) {
  std::vector<ParsedEvent> out;
  for (const auto& e : events) {
    if (e.kind == kind && e.name == name) out.push_back(e);
  }
  return out;
}

TEST(LossScaleTest, RegisteredAsAlwaysOn) {
  const ParserInfo* info = FindParser("loss_scale");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->role, ParserRole::kAlwaysOn);
  EXPECT_EQ(info->make()->name(), "loss_scale");
}

TEST(LossScaleTest, DeepSpeedCollapseFile) {
  auto p = MakeLossScaleParser();
  auto events = RunAll(*p, SharedLines("training/deepspeed-overflow-loss-scale-collapse.txt"));
  // 5 OVERFLOW lines in [1] (64→32 … 4→2), 4 in [2] (one hysteresis), 1 in [3], 1 in [4].
  auto overflow = Select(events, EventKind::kError, "grad_overflow");
  ASSERT_EQ(overflow.size(), 11u);
  EXPECT_EQ(Attr(overflow[0], "from_scale"), "64");
  EXPECT_EQ(Attr(overflow[0], "to_scale"), "32");
  EXPECT_EQ(Attr(overflow[0], "rank"), "0");
  EXPECT_EQ(Attr(overflow[4], "from_scale"), "4");
  EXPECT_EQ(Attr(overflow[4], "to_scale"), "2");
  // Hysteresis: the scale is kept.
  EXPECT_EQ(Attr(overflow[5], "from_scale"), "65536");
  EXPECT_EQ(Attr(overflow[5], "to_scale"), std::nullopt);
  EXPECT_EQ(Attr(overflow[5], "hysteresis"), "2");
  EXPECT_EQ(Attr(overflow[6], "to_scale"), "32768");
  // The old [deepscale] wording, float scales.
  EXPECT_EQ(Attr(overflow[9], "from_scale"), "16777216");
  EXPECT_EQ(Attr(overflow[9], "to_scale"), "8388608");
  EXPECT_EQ(Attr(overflow[10], "from_scale"), "1");

  auto scale = Select(events, EventKind::kTrainMetric, "loss_scale");
  ASSERT_EQ(scale.size(), 11u);
  const double expected[] = {32, 16, 8, 4, 2, 65536, 32768, 16384, 8192, 8388608, 1};
  for (size_t i = 0; i < scale.size(); ++i) EXPECT_EQ(scale[i].value, expected[i]) << i;

  // Only "Attempted loss scale: 1, reducing to 1" is at the floor.
  auto at_min = Select(events, EventKind::kError, "loss_scale_min");
  ASSERT_EQ(at_min.size(), 1u);
  EXPECT_EQ(Attr(at_min[0], "scale"), "1");
}

TEST(LossScaleTest, ApexFile) {
  auto p = MakeLossScaleParser();
  auto events = RunAll(*p, SharedLines("training/apex-issue493-gradient-overflow-loss-spike.txt"));
  auto overflow = Select(events, EventKind::kError, "grad_overflow");
  ASSERT_EQ(overflow.size(), 8u);  // 256 … 2; the "NaN or Inf found" warning is not one
  EXPECT_EQ(Attr(overflow[0], "to_scale"), "256");
  EXPECT_EQ(Attr(overflow[0], "scaler"), "0");
  EXPECT_EQ(Attr(overflow[0], "from_scale"), std::nullopt);
  auto scale = Select(events, EventKind::kTrainMetric, "loss_scale");
  ASSERT_EQ(scale.size(), 8u);
  EXPECT_EQ(scale.back().value, 2.0);
  EXPECT_TRUE(Select(events, EventKind::kError, "loss_scale_min").empty());
}

TEST(LossScaleTest, MegatronFp16WarmupFile) {
  auto p = MakeLossScaleParser();
  auto events = RunAll(*p, SharedLines("training/megatron-bert-nccl-issue743-fp16-skipped-iters-timers.txt"));
  // Iteration 10 skipped all 10 iterations at scale 8388608; iteration 20's line is cut before
  // its skipped counter, so it says nothing about skipping.
  auto overflow = Select(events, EventKind::kError, "grad_overflow");
  ASSERT_EQ(overflow.size(), 1u);
  EXPECT_EQ(overflow[0].step, 10);
  EXPECT_EQ(Attr(overflow[0], "skipped_iterations"), "10");
  EXPECT_EQ(Attr(overflow[0], "to_scale"), "8388608");
  auto scale = Select(events, EventKind::kTrainMetric, "loss_scale");
  ASSERT_EQ(scale.size(), 1u);
  EXPECT_EQ(scale[0].value, 8388608.0);
  EXPECT_EQ(scale[0].step, 10);
}

TEST(LossScaleTest, MegatronWithoutSkipsIsNotOurs) {
  auto p = MakeLossScaleParser();
  // bf16 runs print "loss scale: 1.0" forever; nothing was skipped, so no event.
  auto out = One(*p,
                 " iteration      122/  250000 | consumed samples:       124928 | lm loss: 2.504220E+00 | loss scale: 1.0 "
                 "| grad norm: 0.231 | number of skipped iterations:   0 | number of nan iterations:   0 |");
  EXPECT_TRUE(out.empty());
}

TEST(LossScaleTest, DeepSpeedMinimumException) {
  auto p = MakeLossScaleParser();
  auto out = One(*p, "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, EventKind::kError);
  EXPECT_EQ(out[0].name, "loss_scale_min");
}

TEST(LossScaleTest, FloorPrintedAsSameScale) {
  auto p = MakeLossScaleParser();
  // min_loss_scale: 128 configured, raise_error_at_min_scale off: "reducing to" the same value.
  auto out = One(*p, "[deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 128, reducing to 128");
  ASSERT_EQ(Select(out, EventKind::kError, "loss_scale_min").size(), 1u);
  EXPECT_EQ(Attr(out[0], "rank"), "3");
  // apex with a floor: the same "reducing loss scale to" twice in a row.
  auto apex = MakeLossScaleParser();
  EXPECT_TRUE(Select(One(*apex, "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 64.0"),
                     EventKind::kError, "loss_scale_min")
                  .empty());
  EXPECT_EQ(Select(One(*apex, "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 64.0"),
                   EventKind::kError, "loss_scale_min")
                .size(),
            1u);
}

TEST(LossScaleTest, ZeroWordingAndOldApex) {
  auto p = MakeLossScaleParser();
  auto zero = One(*p,
                  "[2024-01-01 10:00:00,000] [INFO] [stage_1_and_2.py:1800:step] [deepspeed] fp16 dynamic loss scale "
                  "overflow! Skipping step. Attempted loss scale: 4096, reducing to 2048");
  ASSERT_EQ(Select(zero, EventKind::kError, "grad_overflow").size(), 1u);
  EXPECT_EQ(Select(zero, EventKind::kTrainMetric, "loss_scale")[0].value, 2048.0);
  auto old = One(*p, "OVERFLOW! Skipping step. Attempted loss scale: 1024.0, reducing to 512.0");
  ASSERT_EQ(Select(old, EventKind::kError, "grad_overflow").size(), 1u);
  EXPECT_EQ(Attr(old[0], "rank"), std::nullopt);
}

TEST(LossScaleTest, ForeignAndLookAlikeLines) {
  auto p = MakeLossScaleParser();
  for (std::string_view line : {
           "",
           "Skipping step because the batch was empty",
           "OVERFLOW! buffer full",
           "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}",
           "Warning: NaN or Inf found in input tensor.",
           "the scaler is already at minimum",
       }) {
    std::vector<ParsedEvent> out;
    EXPECT_FALSE(p->Parse(LineView{line}, out)) << line;
    EXPECT_TRUE(out.empty()) << line;
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog
