// The generic key: value / key=value parser for trainers without a built-in parser.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

std::vector<ParsedEvent> One(std::string_view line, bool* fired = nullptr) {
  auto p = MakeGenericParser();
  std::vector<ParsedEvent> out;
  const bool f = p->Parse(LineView{line}, out);
  if (fired) *fired = f;
  return out;
}

const ParsedEvent* Find(const std::vector<ParsedEvent>& ev, EventKind kind, std::string_view name = {}) {
  for (const auto& e : ev) {
    if (e.kind == kind && (name.empty() || e.name == name)) return &e;
  }
  return nullptr;
}

std::optional<std::string> Attr(const ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

TEST(GenericParserTest, Registered) {
  const ParserInfo* info = FindParser("generic");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->role, ParserRole::kGeneric);
  EXPECT_EQ(info->make()->name(), "generic");
}

TEST(GenericParserTest, KeyEqualsValue) {
  bool fired = false;
  auto ev = One("step=120 loss=2.31 lr=3e-4 grad_norm=0.9 tok/s=5120", &fired);
  EXPECT_TRUE(fired);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].kind, EventKind::kStep);
  EXPECT_EQ(ev[0].step, 120);
  const ParsedEvent* loss = Find(ev, EventKind::kLoss, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_DOUBLE_EQ(loss->value, 2.31);
  EXPECT_EQ(loss->step, 120);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "lr")->value, 3e-4);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "grad_norm")->value, 0.9);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "tokens_per_second")->value, 5120);
}

TEST(GenericParserTest, ColonsPipesAndSpellings) {
  auto ev = One("iter 100: loss: 2.3 | learning_rate: 1.0e-05 | gnorm: 1.5 | tps: 9000 | mem: 12.5");
  ASSERT_NE(Find(ev, EventKind::kStep), nullptr);
  EXPECT_EQ(Find(ev, EventKind::kStep)->step, 100);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kLoss)->value, 2.3);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "lr")->value, 1e-5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "grad_norm")->value, 1.5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "tokens_per_second")->value, 9000);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "mem")->value, 12.5);
}

TEST(GenericParserTest, MultiWordKeysInPipeSeparatedFields) {
  auto ev = One("step: 5 | learning rate: 3.0E-04 | lm loss: 2.5 | grad norm: 1.2 | loss scale: 1024.0 | "
                "number of skipped iterations: 0");
  EXPECT_EQ(Find(ev, EventKind::kStep)->step, 5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "lr")->value, 3e-4);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kLoss)->value, 2.5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "grad_norm")->value, 1.2);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "loss_scale")->value, 1024);
  // A counter of skipped iterations is not a step.
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "number_of_skipped_iterations")->value, 0);
  // In prose, words before a colon stay apart: only the last word can be a key.
  bool fired = true;
  One("we saw the learning rate: fine", &fired);
  EXPECT_FALSE(fired);
}

TEST(GenericParserTest, ThousandsGroupsAndBareLoss) {
  auto ev = One("[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  tps: 7,282  mfu: 0.17%");
  EXPECT_EQ(Find(ev, EventKind::kStep)->step, 14);
  EXPECT_EQ(Find(ev, EventKind::kStep)->rank, 0);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "tokens_per_second")->value, 7282);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "mfu")->value, 0.17);
  // A JSON list separator is not a group: "a": 7, "b": 8
  auto json = One(R"j({"step": 7,"loss": 1.5})j");
  EXPECT_EQ(Find(json, EventKind::kStep)->step, 7);
  auto bare = One("iter 1631: loss 4.0863, time 561.94ms");
  EXPECT_EQ(Find(bare, EventKind::kStep)->step, 1631);
  EXPECT_DOUBLE_EQ(Find(bare, EventKind::kLoss)->value, 4.0863);
}

TEST(GenericParserTest, JsonLinesAndEval) {
  auto ev = One(R"j({"global_step": 5, "train/loss": 1.25, "eval_loss": 1.5, "val_acc": 0.8, "Train-Acc": 0.7})j");
  EXPECT_EQ(Find(ev, EventKind::kStep)->step, 5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kLoss)->value, 1.25);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kEvalMetric, "eval_loss")->value, 1.5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kEvalMetric, "eval_acc")->value, 0.8);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "train_acc")->value, 0.7);
}

TEST(GenericParserTest, TotalStepsUnitsAndExtraLosses) {
  auto ev = One("step: 5/100 | epoch: 1 | loss=1.0 | aux_loss=0.25 | step_time=350ms | mfu: 41.5%");
  const ParsedEvent* step = Find(ev, EventKind::kStep);
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->step, 5);
  EXPECT_EQ(Attr(*step, "total_steps"), "100");
  EXPECT_EQ(Attr(*step, "epoch"), "1");
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "loss_aux")->value, 0.25);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "step_time_seconds")->value, 0.35);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "mfu")->value, 41.5);
  EXPECT_DOUBLE_EQ(Find(ev, EventKind::kTrainMetric, "epoch")->value, 1);
}

TEST(GenericParserTest, LossAloneOrEpochBatchFires) {
  bool fired = false;
  auto loss = One("loss: 0.0", &fired);
  EXPECT_TRUE(fired);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].kind, EventKind::kLoss);
  EXPECT_EQ(loss[0].value, 0.0);
  EXPECT_EQ(loss[0].step, -1);

  auto nan = One("train_loss=nan.0 it=7");
  EXPECT_TRUE(std::isnan(Find(nan, EventKind::kLoss)->value));
  EXPECT_EQ(Find(nan, EventKind::kStep)->step, 7);

  auto eb = One("Epoch: 3, batch: 100, acc: 0.5", &fired);
  EXPECT_TRUE(fired);
  EXPECT_EQ(Find(eb, EventKind::kStep), nullptr);  // a per-epoch batch index is not a global step
  EXPECT_DOUBLE_EQ(Find(eb, EventKind::kTrainMetric, "acc")->value, 0.5);
  EXPECT_DOUBLE_EQ(Find(eb, EventKind::kTrainMetric, "epoch")->value, 3);
}

TEST(GenericParserTest, IdentityKeysAreNotMetrics) {
  auto ev = One("[rank3]: step=1 rank=3 pid=4242 loss=2");
  EXPECT_EQ(Find(ev, EventKind::kTrainMetric, "rank"), nullptr);
  EXPECT_EQ(Find(ev, EventKind::kTrainMetric, "pid"), nullptr);
  EXPECT_EQ(Find(ev, EventKind::kLoss)->rank, 3);
}

TEST(GenericParserTest, DoesNotFireOnProseOrPlainLogLines) {
  for (std::string_view line : {
           "",
           "2024-01-01 12:00:00 INFO pid=123 port=8080",
           "2024-01-01 12:00:00,123 - root - INFO - starting worker pid=77",
           "Note: the loss was large and the step was slow",
           "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]",
           "Error: code=5 retry=3",
           "host=node1 rank=3 world_size=8",
           "time: 12:34:56 step: started",
           "http://example.com:8080/path?step=abc",
           "step: none yet, loss: unknown",
           "version=1.2.3 step=",
       }) {
    bool fired = true;
    auto ev = One(line, &fired);
    EXPECT_FALSE(fired) << line;
    EXPECT_TRUE(ev.empty()) << line << " → " << (ev.empty() ? "" : ev[0].name);
  }
}

// A number after a loss word, closed by ':', labels the line ("Validation loss 6312:" — the
// iteration of a validation result), it is not the loss: apex issue 493's script, read by a person.
TEST(GenericParserConformance, LossWordWithNumberedLabelIsNoLoss) {
  const auto lines =
      ithbat::testing::SharedDataLines("training/apex-issue493-gradient-overflow-loss-spike.txt");
  ASSERT_EQ(lines.size(), 28u);
  ASSERT_EQ(lines[1], "Validation loss 6312:  0.149928  ");
  for (const auto& line : lines) EXPECT_TRUE(One(line).empty()) << line;
  // A step word's number may still end in ':' ("iter 100: loss 4.08").
  auto iter = One("iter 100: loss 4.08, time 12ms");
  ASSERT_NE(Find(iter, EventKind::kLoss), nullptr);
  EXPECT_DOUBLE_EQ(Find(iter, EventKind::kLoss)->value, 4.08);
  EXPECT_EQ(Find(iter, EventKind::kLoss)->step, 100);
  EXPECT_TRUE(One("train loss 12: 0.5").empty());
}

TEST(GenericParserTest, BoundedPerLine) {
  std::string line = "step=1";
  for (int i = 0; i < 60; ++i) line += " k" + std::to_string(i) + "=" + std::to_string(i);
  line += " " + std::string(60, 'a') + "=5 loss=1";
  auto ev = One(line);
  EXPECT_LE(ev.size(), 17u);  // the step plus at most 16 values
  for (const auto& e : ev) {
    EXPECT_LE(e.name.size(), 48u);
    for (char c : e.name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << e.name;
  }
  // A 16 KiB line of pairs and garbage does not blow up.
  std::string big;
  while (big.size() < kMaxLineBytes) big += "loss=1 x:y step=2 ==::== ";
  auto many = One(big);
  EXPECT_LE(many.size(), 17u);
}

}  // namespace
}  // namespace ithbat::collect::joblog
