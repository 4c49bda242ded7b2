// Issue 21, "job output the engine can trust": every real log of ../shared/data/training and
// ../shared/data/nccl through the reader `ithbat parse` and `ithbat replay` use (cli/log_events.h:
// line assembler, secret redaction, one StreamParser per file with format auto), its events counted per kind
// and checked against a table that a person wrote by reading each file.
//
// The table is reviewed, never pasted from the parser's output: each count is what a person
// extracts from the lines with the vocabulary of docs/joblog-parsers.md and docs/joblog-signals.md
// (10 bar refreshes of 10 distinct batches = 10 steps; "step 20" in prose = no step; a value cut
// by the excerpt = no event). A row where the parser still disagrees with that reading keeps the
// person's count and states the parser's current one in `parser_now` with the reason: the row
// passes while the parser gives `parser_now` and fails once it changes, to be reviewed again (a
// fix makes the person's count the only one). A file of the corpus without a row, or a row whose
// file is gone, fails TableCoversTheCorpus: table and corpus stay in step.
//
// Updating: read the new or changed file, write its row from the lines, then run the test; a
// mismatch is either a parser bug (fix the parser, with a test) or a misreading (fix the row).
#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "cli/log_events.h"
#include "collect/joblog/parsers/parser.h"
#include "core/event.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

// Event counts of one file, per kind. Kinds not listed (log_line, ...) are not emitted by the
// job-output parsers.
struct Counts {
  int step = 0;
  int loss = 0;
  int train_metric = 0;
  int eval_metric = 0;
  int checkpoint_begin = 0;
  int checkpoint_end = 0;
  int error = 0;
  int serving_metric = 0;
  int other = 0;  // any other kind: always expected 0

  friend bool operator==(const Counts&, const Counts&) = default;
};

void PrintTo(const Counts& c, std::ostream* os) {
  *os << "{step=" << c.step << " loss=" << c.loss << " train_metric=" << c.train_metric
      << " eval_metric=" << c.eval_metric << " checkpoint_begin=" << c.checkpoint_begin
      << " checkpoint_end=" << c.checkpoint_end << " error=" << c.error
      << " serving_metric=" << c.serving_metric << " other=" << c.other << "}";
}

struct Row {
  std::string_view file;  // relative to ../shared/data
  Counts person;          // what a person reading the file extracts
  // Where the parser still disagrees: what it gives today, and why it is wrong (the lines).
  std::optional<Counts> parser_now = std::nullopt;
  std::string_view discrepancy = {};
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.file; }

// The folders whose every file must have a row.
constexpr std::array<std::string_view, 2> kCorpusDirs = {"training", "nccl"};

// One row per file, in directory order. The comment says what the lines hold and what gives no
// event, so the next reader checks the count against the file, not against this table.
const std::vector<Row>& Table() {
  static const std::vector<Row> rows = {
      // A user script's own prose format ("Epoch: 11", "Validation loss 6312:  0.149928",
      // "Saving model and optimizer state at iteration 6312 to ...", "Epoch 11 time 30.503 lr
      // 0.001"): no parser's format; 6312 is the iteration, never the loss. Then 8 apex
      // "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to S" lines: 8
      // grad_overflow + 8 loss_scale. "Warning: NaN or Inf found in input tensor." is no class.
      {"training/apex-issue493-gradient-overflow-loss-spike.txt", {.train_metric = 8, .error = 8}},
      // 2 HF dicts: loss + grad_norm, learning_rate, epoch each; no bar, so no step.
      {"training/axolotl-issue2004-summed-loss-gradnorm.txt", {.loss = 2, .train_metric = 6}},
      // 7 OOM messages of successive PyTorch generations, one cuda_oom each.
      {"training/cuda-oom-message-variants.txt", {.error = 7}},
      // Three excerpts. (1) An HF run: bare tqdm bars 377..382/2724 glued to 5 DeepSpeed OVERFLOW
      // lines, and one dict {'loss', 'learning_rate', 'epoch'} (its loss takes the bar's 380).
      // The bars have no description and the excerpt has one Trainer line, so HF never owns the
      // stream and a bare tqdm bar is nobody's step (docs/joblog-parsers.md): 0 steps. (2) 4
      // standalone OVERFLOW lines, the first a hysteresis one (scale kept). (3) ZeRO "[deepscale]
      // OVERFLOW" glued to a bar, a timer line (not a supported format), and "reducing to 1": 11
      // grad_overflow + loss_scale_min, 11 loss_scale + lr + epoch.
      {"training/deepspeed-overflow-loss-scale-collapse.txt", {.loss = 1, .train_metric = 13, .error = 12}},
      // 3 train_inner lines: num_updates 1..3, loss, wps (0 at update 1, as printed), lr, gnorm.
      {"training/fairseq-issue2681-train-inner.txt", {.step = 3, .loss = 3, .train_metric = 9}},
      // 3 dicts, grad_norm nan (a metric, not an error class), loss 0.0 twice (a value, no class).
      {"training/hf-trainer-modernbert-issue233-loss0-gradnorm-nan.txt", {.loss = 3, .train_metric = 9}},
      // 13 dicts like the above.
      {"training/hf-trainer-pink-issue6-loss0-gradnorm-nan-flat.txt", {.loss = 13, .train_metric = 39}},
      // Bar 1500/14754 glued to "Saving model checkpoint to .../checkpoint-1500" (step 1500, save
      // at 1500), 4 "saved in" lines (no events), a dict after the save (loss, lr, epoch), bar 2000
      // glued to "Saving model" cut before "checkpoint to": step 2000, no save.
      {"training/hf-trainer-transformers-issue15401-checkpoint-save-lines.txt",
       {.step = 2, .loss = 1, .train_metric = 2, .checkpoint_begin = 1}},
      // "***** Running Evaluation *****", an eval dict (eval_loss, eval_runtime,
      // eval_samples_per_second, eval_steps_per_second; its epoch is no eval metric), bar 40/4500
      // cut and glued to a log head (step 40), "Saving model checkpoint to data/tmp-checkpoint-…".
      {"training/hf-trainer-transformers-issue36076-eval-then-tmp-checkpoint.txt",
       {.step = 1, .eval_metric = 4, .checkpoint_begin = 1}},
      // 10 refreshes of batches 1651..1660 of epoch 0: 10 steps from the bar, each with loss
      // (train_loss) and loss_running_mean (loss=).
      {"training/lightning-issue3866-colab-style-bar-train-loss.txt",
       {.step = 10, .loss = 10, .train_metric = 10}},
      // Counts 4, 4, 5, 5, 6 (cut after "[00:23<00:47,  3": the count is whole, the postfix is
      // gone), two "Training:" bars, then a restart 0, 1, 1, 2, 2, 3, 3: steps 4, 5, 6, 1, 2, 3.
      // loss= on every refresh whose count or value changed: 9 (none on the cut line, on 0/18,
      // or on the 1/18 refresh without a postfix). v_num is an identity, no metric.
      {"training/lightning-issue4225-v1-progress-bar-loss.txt", {.step = 6, .loss = 9}},
      // 6 dicts (loss, lr, epoch), a bare bar 2588/10485 (HF owns the stream: step), a dict after
      // it (its loss at 2588).
      {"training/llava-issues-878-918-loss-diverge-hf-dicts.txt", {.step = 1, .loss = 7, .train_metric = 14}},
      // Setup lines, timers (no events), iteration 10 with all 10 iterations skipped (no lm loss,
      // legitimately: no loss_missing; Megatron fp16 skip = grad_overflow) and 6 metrics,
      // iteration 20 cut inside "number of skipp": loss, sop loss, lr, ... 6 metrics.
      {"training/megatron-bert-nccl-issue743-fp16-skipped-iters-timers.txt",
       {.step = 2, .loss = 1, .train_metric = 12, .error = 1}},
      // 3 Bridge iteration lines: lm loss, seq_load_balancing_loss, mtp_1/mtp_2 loss and 7 more.
      {"training/megatron-bridge-issue4024-moe-mtp-losses.txt", {.step = 3, .loss = 3, .train_metric = 30}},
      // Two "successfully saved checkpoint from iteration" lines; "INFO:root:Done!".
      {"training/megatron-checkpoint-save-format-reference.txt", {.checkpoint_end = 2}},
      // A line cut at its start ("d norm: nan | ..."): nothing. 3 whole iteration lines without lm
      // loss, grad norm nan, skipped 0, nan 0: 10 metrics and one loss_missing each.
      {"training/megatron-deepspeed-bigscience-issue396-grad-norm-nan.txt",
       {.step = 3, .train_metric = 30, .error = 3}},
      // 4 healthy iteration lines, 7 metrics each.
      {"training/megatron-llm-issue11-iterations.txt", {.step = 4, .loss = 4, .train_metric = 28}},
      // Save begin/end at 400, a timer table, iterations 500 and 600 (7 metrics each), save
      // begin at 600 that never ends, "Traceback (most recent call last):" (its exception line is
      // not in the excerpt).
      {"training/megatron-lm-issue314-checkpoint-save-then-crash.txt",
       {.step = 2, .loss = 2, .train_metric = 14, .checkpoint_begin = 2, .checkpoint_end = 1, .error = 1}},
      // 11 old-format "iter N: loss X, time Tms" lines.
      {"training/nanogpt-issue110-old-format-no-mfu.txt", {.step = 11, .loss = 11}},
      // 25 iter lines (mfu -100% at iter 0 is "not estimated": 24 mfu), the eval line at 250
      // (train loss, val loss), "saving checkpoint to out-sh".
      {"training/nanogpt-issue178-healthy-start-mfu-minus100.txt",
       {.step = 25, .loss = 25, .train_metric = 24, .eval_metric = 2, .checkpoint_begin = 1}},
      // One NeMo 1.x bar: global_step=794.0 exact (step 794, not the bar's 795), reduced_train_loss,
      // loss= running mean, consumed_samples.
      {"training/nemo-launcher-issue55-progress-bar.txt", {.step = 1, .loss = 1, .train_metric = 2}},
      // 6 NeMo 2 iteration lines; val_loss 4.106 printed on each but changes never: 1 eval.
      {"training/nemo2-bionemo-pr740-iteration-lines.txt",
       {.step = 6, .loss = 6, .train_metric = 18, .eval_metric = 1}},
      // DCP async checkpoint process: "Received async checkpoint request" (begin), 4 step lines
      // (memory, tps, tflops, mfu), "Submitted checkpoint save request" (end), a GC line; two Orbax
      // lines quoted from another framework for comparison (not this job's output).
      {"training/torchtitan-pr1287-async-checkpoint-lines.txt",
       {.step = 4, .loss = 4, .train_metric = 16, .checkpoint_begin = 1, .checkpoint_end = 1}},
      // 6 step lines; GC and profiler lines ("Dumping profiler traces at step 200") give none.
      {"training/torchtitan-pr1287-gc-profiler-steps.txt", {.step = 6, .loss = 6, .train_metric = 24}},
      // 8 step lines with grad_norm: 5 metrics each.
      {"training/torchtitan-pr3393-grad-norm-format.txt", {.step = 8, .loss = 8, .train_metric = 40}},

      // "CUDA error: uncorrectable ECC error encountered" and "... uncorrectable NVLink error ...";
      // the three advice lines between them are no errors.
      {"nccl/cuda-sticky-errors-ecc-nvlink-app-side.txt", {.error = 2}},
      // 3 "Sending process N closing signal SIGTERM", one "failed (exitcode: 1) local_rank: 7",
      // one "Traceback (most recent call last):" behind a "stderr: " prefix.
      {"nccl/elastic-llamafactory-issue163-sigterm-exitcode.txt", {.error = 5}},
      // The ChildFailedError block: 3 "exitcode : -6 (pid: N)" entries (the last the root cause).
      // The excerpt starts inside the traceback, so its "ChildFailedError:" line has no
      // "Traceback (most recent call last):" before it: no python_traceback.
      {"nccl/elastic-mmseg-issue3106-childfailed-sigabrt.txt", {.error = 3}},
      // 3 watchdog timeouts (ranks 0, 4, 3); the "Exception ... detected by watchdog at work"
      // follow-ups repeat them and are no class.
      {"nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt", {.error = 3}},
      // 2 watchdog timeouts behind the user's "[80746]" line numbers; 2 follow-ups.
      {"nccl/llamafactory-issue7396-watchdog-allreduce.txt", {.error = 2}},
      // DistBackendError "NCCL error in:" + "ncclUnhandledCudaError:", RuntimeError "NCCL error
      // in:" + "ncclSystemError:", a bare "NCCL error in:", 3 "NCCL WARN" lines (2 socket
      // failures, a proxy Connect failure), "failed (exitcode: 1)": 9. "Cuda failure 1 'invalid
      // argument'", the "-> 6" unwind lines and the TCPStore EOFs are no class.
      {"nccl/nccl-error-exception-variants.txt", {.error = 9}},
      // 2 IB completion WARNs; the "-> 6" unwind lines are INFO.
      {"nccl/nccl-issue1405-ib-completion-ipv6-gid.txt", {.error = 2}},
      // 2 old-format IB completion WARNs (H100-2, H100-1).
      {"nccl/nccl-issue928-ib-old-format-error4-h100.txt", {.error = 2}},
      // 5 torch 1.x watchdog timeouts (ranks 1, 3, 2, 6, 7).
      {"nccl/ofa-issue271-watchdog-old-format-1800s.txt", {.error = 5}},
      // 4 "Heartbeat monitor timed out!" (ranks 144, 1, 0, 2) and rank 144's "watchdog got stuck
      // for 600 seconds"; "preparing to dump debug info" and a cut elastic line give none.
      {"nccl/pytorch-heartbeat-monitor-timeout-watchdog-stuck.txt", {.error = 5}},
      // A NeMo 1.x bar with global_step=3.2e+4 (rounded by the printer: no step, and the bar's
      // count is not used in a global_step stream) with loss, running mean, consumed_samples,
      // glued to a watchdog timeout; 4 more timeouts.
      {"nccl/pytorch-issue118369-nemo-progress-then-watchdog.txt",
       {.loss = 1, .train_metric = 2, .error = 5}},
  };
  return rows;
}

// The events `ithbat parse` counts for this text, one stream: the same reader (cli/log_events.h)
// over a copy of the lines without their header.
Counts RunPipeline(const std::vector<std::string>& lines) {
  auto created = StreamParser::Create(StreamParserOptions{});
  if (!created) {
    ADD_FAILURE() << created.error().message;
    return {};
  }
  ithbat::testing::TempDir dir;
  std::string bytes;
  for (const auto& l : lines) {
    bytes += l;
    bytes += '\n';
  }
  dir.WriteFile("log", bytes);
  const int fd = ::open((dir.path() / "log").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "cannot open the copy";
    return {};
  }
  Counts c;
  cli::LogReadResult read;
  auto failure = cli::ReadLogEvents(
      fd, "log", &*created,
      [&](ParsedEvent& e, uint64_t, bool, std::string_view) {
        switch (e.kind) {
          case EventKind::kStep:
            c.step++;
            break;
          case EventKind::kLoss:
            c.loss++;
            break;
          case EventKind::kTrainMetric:
            c.train_metric++;
            break;
          case EventKind::kEvalMetric:
            c.eval_metric++;
            break;
          case EventKind::kCheckpointBegin:
            c.checkpoint_begin++;
            break;
          case EventKind::kCheckpointEnd:
            c.checkpoint_end++;
            break;
          case EventKind::kError:
            c.error++;
            break;
          case EventKind::kServingMetric:
            c.serving_metric++;
            break;
          default:
            c.other++;
            break;
        }
      },
      [](Event, uint64_t) {}, read);
  ::close(fd);
  EXPECT_FALSE(failure.has_value()) << *failure;
  return c;
}

std::string TestName(std::string_view file) {
  std::string name;
  for (char ch : file) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

class CorpusCounts : public ::testing::TestWithParam<Row> {};

TEST_P(CorpusCounts, EventsPerKindAsAPersonReadsThem) {
  const Row& row = GetParam();
  if (!ithbat::testing::SharedDataDir()) GTEST_SKIP() << "../shared/data is absent: no corpus to count";
  const auto lines = ithbat::testing::SharedDataLines(std::string(row.file));
  ASSERT_FALSE(lines.empty()) << row.file;
  const Counts got = RunPipeline(lines);
  if (!row.parser_now) {
    EXPECT_EQ(got, row.person) << row.file;
    return;
  }
  // An expected discrepancy: the parser's count is known wrong (see the row).
  EXPECT_NE(got, row.person) << row.file << ": the parser now agrees with the person; remove parser_now";
  EXPECT_EQ(got, *row.parser_now) << row.file << ": the parser changed (" << row.discrepancy
                                  << "); review the row";
}

INSTANTIATE_TEST_SUITE_P(SharedData, CorpusCounts, ::testing::ValuesIn(Table()),
                         [](const ::testing::TestParamInfo<Row>& info) { return TestName(info.param.file); });

TEST(CorpusCountsTable, TableCoversTheCorpus) {
  const auto dir = ithbat::testing::SharedDataDir();
  if (!dir) GTEST_SKIP() << "../shared/data is absent: no corpus to compare the table with";
  std::set<std::string> on_disk;
  for (std::string_view sub : kCorpusDirs) {
    const auto folder = *dir / sub;
    ASSERT_TRUE(std::filesystem::is_directory(folder)) << folder.string();
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.is_regular_file()) on_disk.insert(std::string(sub) + "/" + entry.path().filename().string());
    }
  }
  std::set<std::string> in_table;
  for (const Row& row : Table()) {
    EXPECT_TRUE(in_table.insert(std::string(row.file)).second) << "two rows for " << row.file;
    EXPECT_EQ(row.parser_now.has_value(), !row.discrepancy.empty())
        << row.file << ": an expected discrepancy needs both the parser's count and the reason";
  }
  for (const auto& f : on_disk) {
    EXPECT_TRUE(in_table.count(f)) << f << " has no row: read it and add the counts a person extracts";
  }
  for (const auto& f : in_table) {
    EXPECT_TRUE(on_disk.count(f)) << f << " is no longer in the corpus: remove its row";
  }
}

}  // namespace
}  // namespace ithbat::collect::joblog
