// StreamParser: auto-detection, forced formats, hints, de-duplication, bounds. The always-on
// parsers (errors, loss scale, serving) belong to other tests: nothing here depends on what they
// report.
#include <string>

#include <fmt/core.h>

#include "training_test_util.h"

namespace ithbat::collect::joblog {
namespace {

using namespace test;

StreamParser Make(std::string format = "auto", std::string command_line = "",
                  const UserPatterns* user = nullptr) {
  StreamParserOptions o;
  o.format = std::move(format);
  o.command_line = std::move(command_line);
  o.user_patterns = user;
  auto sp = StreamParser::Create(std::move(o));
  EXPECT_TRUE(sp.has_value());
  return std::move(*sp);
}

std::vector<ParsedEvent> Feed(StreamParser& sp, std::string_view line, bool progress = false) {
  std::vector<ParsedEvent> out;
  sp.Parse(LineView{line, progress, 1}, out);
  return out;
}

TEST(StreamParser, MixedHfAndDeepSpeedLines) {
  StreamParser sp = Make();
  EXPECT_EQ(sp.framework(), "");
  Feed(sp,
       "[2023-06-07 22:10:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[5e-05], "
       "mom=[(0.9, 0.999)]");
  Feed(sp, " 14%|█▍        | 10/70 [00:10<01:00,  1.0it/s]", true);
  const auto first = Feed(sp, "{'loss': 2.0491, 'learning_rate': 5e-05, 'epoch': 0.28}");
  EXPECT_EQ(sp.framework(), "");  // one line is not enough
  EXPECT_EQ(*Find(first, EventKind::kLoss), Loss(2.0491, 10));
  Feed(sp,
       "[2023-06-07 22:20:23,340] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
       "Skipping step. Attempted loss scale: 16, reducing to 8");
  // Until the stream is owned, a bare bar is nobody's line: its step is not reported.
  EXPECT_EQ(Find(Feed(sp, " 29%|██▊       | 20/70 [00:20<00:50,  1.0it/s]", true), EventKind::kStep),
            nullptr);
  const auto second = Feed(sp, "{'loss': 1.9, 'learning_rate': 5e-05, 'epoch': 0.29}");
  EXPECT_EQ(sp.framework(), "hf_trainer");
  EXPECT_EQ(*Find(second, EventKind::kLoss), Loss(1.9, 20));
  // Owned: the bar's steps flow.
  EXPECT_EQ(*Find(Feed(sp, " 43%|████▎     | 30/70 [00:30<00:40,  1.0it/s]", true), EventKind::kStep),
            Step(30, std::nan(""), {{"total_steps", "70"}}));
  EXPECT_EQ(sp.lines(), 7u);
  EXPECT_GE(sp.recognised_lines(), 3u);
}

TEST(StreamParser, TorchtitanWithRankPrefixesKeepsEachRanksCopy) {
  StreamParser sp = Make();
  const std::string body =
      "[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  "
      "tps: 5,856  tflops: 339.16  mfu: 34.29%";
  Feed(sp,
       "[rank0]:[titan] 2025-06-16 22:30:48,735 - root - INFO - [GC] Peforming periodical GC collection. "
       "0.06 seconds.");
  const auto r0 = Feed(sp, "[rank0]:" + body);
  EXPECT_EQ(sp.framework(), "torchtitan");
  const auto r1 = Feed(sp, "[rank1]:" + body);
  ASSERT_NE(Find(r0, EventKind::kLoss), nullptr);
  ASSERT_NE(Find(r1, EventKind::kLoss), nullptr);
  EXPECT_EQ(*Find(r0, EventKind::kLoss), Loss(6.1384, 200, {}, 0));
  EXPECT_EQ(*Find(r1, EventKind::kLoss), Loss(6.1384, 200, {}, 1));
}

TEST(StreamParser, MegatronOwnsAndGenericStops) {
  auto lines = SharedLines("training/megatron-llm-issue11-iterations.txt");
  ASSERT_EQ(lines.size(), 4u);
  StreamParser sp = Make();
  const std::string timers =
      "time (ms) | forward-compute: 193.77 | backward-compute: 73.02 | optimizer: 63.01";
  Feed(sp, timers);  // undecided: the generic parser may read it
  Feed(sp, lines[0]);
  Feed(sp, lines[1]);
  EXPECT_EQ(sp.framework(), "megatron");
  const auto after = Feed(sp, timers);
  for (const auto& e : after) {
    EXPECT_NE(e.kind, EventKind::kTrainMetric)
        << "the generic parser must not run once Megatron owns the stream";
  }
  const auto third = Feed(sp, lines[2]);
  EXPECT_EQ(*Find(third, EventKind::kLoss), Loss(2.559583E+00, 124));
  EXPECT_EQ(Count(third, EventKind::kStep), 1u);
}

TEST(StreamParser, CopiesOfALineFromRanksMergedIntoOneStreamAreReadOnce) {
  // torchrun without --tee prefixes: four ranks print the same nanoGPT line into one file.
  StreamParser sp = Make();
  const std::string line = "iter 10: loss 4.2000, time 100.00ms";
  size_t steps = 0;
  for (int rank = 0; rank < 4; ++rank) steps += Count(Feed(sp, line), EventKind::kStep);
  EXPECT_EQ(steps, 1u);
  EXPECT_EQ(sp.copies(), 3u);
  // The next step is news; so is a rank's own value for the same step (not a copy).
  EXPECT_EQ(Count(Feed(sp, "iter 11: loss 4.1000, time 100.00ms"), EventKind::kStep), 1u);
  EXPECT_EQ(Count(Feed(sp, "iter 11: loss 4.1500, time 100.00ms"), EventKind::kStep), 1u);
  // Far enough apart it is printed again, not copied (a second fit in the same process).
  for (int i = 0; i < 600; ++i) Feed(sp, "nothing to read here");
  EXPECT_EQ(Count(Feed(sp, line), EventKind::kStep), 1u);
  EXPECT_EQ(sp.copies(), 3u);
}

TEST(StreamParser, OnlyLinesStampedWithAStepAreCompared) {
  // Launcher prefixes tell ranks apart: each rank's line stays.
  StreamParser ranked = Make();
  size_t steps = 0;
  for (int rank = 0; rank < 4; ++rank)
    steps += Count(Feed(ranked, fmt::format("[rank{}]:iter 10: loss 4.2000, time 100.00ms", rank)),
                   EventKind::kStep);
  EXPECT_EQ(steps, 4u);
  EXPECT_EQ(ranked.copies(), 0u);
  // Lines without a step are each an occurrence: a save line at every save (torchtitan's carries
  // no step), an error a process repeats — here the pair of identical "[Rank 0] ... SeqNum=96125"
  // watchdog lines of pytorch #118369 (../shared/data), kept as printed.
  StreamParser saves = Make("torchtitan");
  size_t begun = 0;
  for (int i = 0; i < 3; ++i)
    begun += Count(Feed(saves,
                        "[titan] 2025-06-16 22:30:48,735 - root - INFO - Saving the checkpoint (or staging "
                        "if async is enabled)."),
                   EventKind::kCheckpointBegin);
  EXPECT_EQ(begun, 3u);
  StreamParser errors = Make();
  size_t timeouts = 0;
  for (const auto& l : SharedLines("nccl/pytorch-issue118369-nemo-progress-then-watchdog.txt"))
    timeouts += Count(Feed(errors, l), EventKind::kError, "nccl_timeout");
  EXPECT_EQ(timeouts, 5u);
  EXPECT_EQ(errors.copies(), 0u);
}

TEST(StreamParser, ForcedFormat) {
  auto lines = SharedLines("training/megatron-llm-issue11-iterations.txt");
  ASSERT_FALSE(lines.empty());
  StreamParser sp = Make("nanogpt");
  EXPECT_EQ(sp.framework(), "nanogpt");
  for (const auto& l : lines) EXPECT_EQ(Find(Feed(sp, l), EventKind::kLoss), nullptr);
  EXPECT_EQ(Select(Feed(sp, "iter 3: loss 2.5, time 10.00ms"), EventKind::kLoss),
            (std::vector<ParsedEvent>{Loss(2.5, 3)}));
  EXPECT_EQ(sp.framework(), "nanogpt");

  StreamParser mega = Make("megatron");
  EXPECT_EQ(*Find(Feed(mega, lines[0]), EventKind::kLoss), Loss(2.504220E+00, 122));
}

TEST(StreamParser, NoneRunsOnlyAlwaysOnParsers) {
  auto lines = SharedLines("training/megatron-llm-issue11-iterations.txt");
  ASSERT_FALSE(lines.empty());
  StreamParser sp = Make("none");
  for (const auto& l : lines) {
    const auto ev = Feed(sp, l);
    EXPECT_EQ(Find(ev, EventKind::kLoss), nullptr);
    EXPECT_EQ(Find(ev, EventKind::kStep), nullptr);
  }
  EXPECT_EQ(sp.framework(), "");
  EXPECT_EQ(sp.lines(), lines.size());
}

TEST(StreamParser, UnknownFormatIsRefused) {
  StreamParserOptions o;
  o.format = "tensorflow-estimator";
  auto sp = StreamParser::Create(o);
  ASSERT_FALSE(sp.has_value());
  EXPECT_EQ(sp.error().code, ErrorCode::kInvalidArgument);
}

TEST(StreamParser, CommandLineHintOrdersCandidates) {
  // A line both torchtitan (its "[titan]" tag) and nanoGPT recognise: without a hint the registry
  // order decides (torchtitan first); a nanoGPT command line puts nanoGPT first.
  const std::string line = "[titan] iter 10: loss 2.0, time 100.00ms";
  StreamParser plain = Make();
  Feed(plain, line);
  Feed(plain, line);
  EXPECT_EQ(plain.framework(), "torchtitan");

  StreamParser hinted = Make("auto", "python /src/nanoGPT/train.py config/train_gpt2.py");
  const auto ev = Feed(hinted, line);
  EXPECT_EQ(*Find(ev, EventKind::kLoss), Loss(2.0, 10));
  Feed(hinted, line);
  EXPECT_EQ(hinted.framework(), "nanogpt");

  // A hint does not decide by itself: the lines do.
  StreamParser wrong_hint = Make("auto", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2");
  Feed(wrong_hint, "iter 1: loss 2.0, time 1.00ms");
  Feed(wrong_hint, "iter 2: loss 1.9, time 1.00ms");
  EXPECT_EQ(wrong_hint.framework(), "nanogpt");
}

TEST(StreamParser, OnlyOneReadingOfALineWhileUndecided) {
  // The same line read by two frameworks gives one set of events.
  StreamParser sp = Make();
  const auto ev = Feed(sp, "[titan] iter 10: loss 2.0, time 100.00ms");
  EXPECT_EQ(Count(ev, EventKind::kLoss), 1u);
  EXPECT_EQ(Count(ev, EventKind::kStep), 1u);
}

TEST(StreamParser, UserPatternsOwnFirstAndDuplicatesCollapse) {
  auto user = UserPatterns::Parse(R"json({"pattern_sets": [{"name": "mytrainer", "patterns": [
      {"regex": "iteration\\s+(?P<step>\\d+)/.*lm loss: (?P<loss>[0-9.E+-]+)"}]}]})json");
  ASSERT_TRUE(user.has_value()) << user.error().message;
  auto lines = SharedLines("training/megatron-llm-issue11-iterations.txt");
  ASSERT_EQ(lines.size(), 4u);
  {
    StreamParser sp = Make("auto", "", &*user);
    Feed(sp, lines[0]);
    Feed(sp, lines[1]);
    EXPECT_NE(sp.framework(), "megatron");  // the user's set matched as often and goes first
    EXPECT_NE(sp.framework(), "");
  }
  {
    // Forced Megatron plus the user's set: both report the loss of iteration 122, once kept.
    StreamParser sp = Make("megatron", "", &*user);
    const auto ev = Feed(sp, lines[0]);
    EXPECT_EQ(Count(ev, EventKind::kLoss), 1u);
    EXPECT_EQ(Count(ev, EventKind::kStep), 1u);
  }
}

TEST(StreamParser, BoundedPerLine) {
  StreamParser sp = Make("hf_trainer");
  std::string line = "{'loss': 1.0";
  for (int i = 0; i < 100; ++i) line += ", 'k" + std::to_string(i) + "': " + std::to_string(i);
  line += "}";
  EXPECT_LE(Feed(sp, line).size(), kMaxEventsPerLine);
  const std::string garbage(kMaxLineBytes, '\xff');
  EXPECT_TRUE(Feed(sp, garbage).empty());
}

TEST(StreamParser, AutoDetectsEachRealLog) {
  struct Case {
    const char* file;
    const char* framework;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"training/hf-trainer-pink-issue6-loss0-gradnorm-nan-flat.txt", "hf_trainer"},
           {"training/megatron-deepspeed-bigscience-issue396-grad-norm-nan.txt", "megatron"},
           {"training/megatron-lm-issue314-checkpoint-save-then-crash.txt", "megatron"},
           {"training/lightning-issue3866-colab-style-bar-train-loss.txt", "lightning"},
           {"training/nemo2-bionemo-pr740-iteration-lines.txt", "nemo2"},
           {"training/torchtitan-pr3393-grad-norm-format.txt", "torchtitan"},
           {"training/torchtitan-pr1287-async-checkpoint-lines.txt", "torchtitan"},
           {"training/nanogpt-issue110-old-format-no-mfu.txt", "nanogpt"},
           {"training/fairseq-issue2681-train-inner.txt", "fairseq"},
       }) {
    StreamParser sp = Make();
    for (const auto& l : SharedLines(c.file)) Feed(sp, l);
    EXPECT_EQ(sp.framework(), c.framework) << c.file;
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog

namespace ithbat::collect::joblog {
namespace {

// Every prefix of every real line (a capture may cut anywhere) and seeded byte mutations of it,
// through every training parser and an auto stream: no crash, bounded output. The libFuzzer
// targets go further; this keeps the property in the ordinary test run.
TEST(TrainingParsersRobustness, CutAndMutatedRealLines) {
  std::vector<std::string> corpus;
  for (const char* f :
       {"training/hf-trainer-transformers-issue15401-checkpoint-save-lines.txt",
        "training/megatron-bridge-issue4024-moe-mtp-losses.txt",
        "training/megatron-lm-issue314-checkpoint-save-then-crash.txt",
        "training/lightning-issue4225-v1-progress-bar-loss.txt",
        "training/nemo-launcher-issue55-progress-bar.txt", "training/nemo2-bionemo-pr740-iteration-lines.txt",
        "training/torchtitan-pr1287-async-checkpoint-lines.txt",
        "training/nanogpt-issue178-healthy-start-mfu-minus100.txt",
        "training/fairseq-issue2681-train-inner.txt"}) {
    for (auto& l : test::SharedLines(f)) corpus.push_back(std::move(l));
  }
  ASSERT_GT(corpus.size(), 50u);
  std::vector<std::unique_ptr<FormatParser>> parsers;
  for (auto make : {&MakeHfTrainerParser, &MakeMegatronParser, &MakeLightningParser, &MakeNemo2Parser,
                    &MakeTorchtitanParser, &MakeNanoGptParser, &MakeFairseqParser}) {
    parsers.push_back(make());
  }
  StreamParser sp = Make();
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  auto next = [&seed]() {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  std::vector<ParsedEvent> out;
  auto feed = [&](std::string_view text) {
    for (auto& p : parsers) {
      out.clear();
      p->Parse(LineView{text, (next() & 1) != 0, 1}, out);
      ASSERT_LE(out.size(), kMaxEventsPerLine);
    }
    out.clear();
    sp.Parse(LineView{text}, out);
    ASSERT_LE(out.size(), kMaxEventsPerLine);
  };
  static constexpr char kNasty[] = {'|',  ':', '=', ',', '[',  ']',    '{', '}',
                                    '\'', '%', '/', ' ', '\0', '\xff', '9', 'e'};
  for (const auto& line : corpus) {
    for (size_t n = 0; n <= line.size(); ++n) feed(std::string_view(line).substr(0, n));
    for (int round = 0; round < 20; ++round) {
      std::string m = line;
      for (int k = 0; k < 4 && !m.empty(); ++k) m[next() % m.size()] = kNasty[next() % sizeof(kNasty)];
      feed(m);
    }
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog
