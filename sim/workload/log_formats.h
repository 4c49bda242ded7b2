#pragma once
// The lines a training rank prints, exactly as the named framework prints them (samples in
// /work/shared/data/training; the agent's parsers in src/collect/joblog/parsers read them). Pure
// string functions: the caller decides when and to which stream (LogLine::fd) a line goes.
//
//   hf_trainer  the tqdm training bar on stderr ("\r 10%|██   | 150/1500 [00:45<06:45,  3.33it/s]",
//               one refresh per step), python-dict metrics on stdout ({'loss': 2.1234,
//               'grad_norm': 0.53, 'learning_rate': 2.9e-05, 'epoch': 0.1}, averaged over the
//               logging interval), logger lines on stderr ("[INFO|trainer.py:3705] <date> >>
//               Saving model checkpoint to DIR/checkpoint-N")
//   megatron    " iteration      N/  TOTAL | consumed samples: ... | lm loss: 2.504220E+00 | ..."
//               (averaged over the interval), "saving checkpoint at iteration N to DIR" /
//               "  successfully saved checkpoint from iteration N to DIR", all on stdout
//   torchtitan  "[rank0]:[titan] <date> - root - INFO - step: N  loss:  3.24405  grad_norm: ...",
//               "Saving the checkpoint ..." / "Finished saving the checkpoint ...in X seconds."
//   nanogpt     "iter K: loss 4.2648, time 893.76ms, mfu 16.68%" (K = completed steps - 1: nanoGPT
//               counts the iteration before incrementing), "step K: train loss X, val loss Y" then
//               "saving checkpoint to DIR" before a save
#include <cstdint>
#include <string>
#include <vector>

#include "workload/train_spec.h"

namespace ithbat::sim::workload {

struct LogLine {
  int fd = 1;        // 1 stdout, 2 stderr
  std::string text;  // with its terminator ('\n', or '\r'-led for a tqdm refresh)
};

// What a metrics line reports (values already averaged by the caller where the framework does).
struct StepReport {
  int64_t step = 0;            // completed steps (1-based)
  int64_t total_steps = 0;     // the run's last step
  double loss = 0;             // averaged over the interval (hf, megatron) or this step's
  double grad_norm = 0;
  double lr = 0;
  double step_ms = 0;          // wall ms per step over the interval
  int64_t tokens = 0;          // this rank's tokens per step
  int64_t sequences = 0;       // sequences per step, all data-parallel ranks together
  int64_t nan_steps = 0;       // steps of the interval whose loss was NaN
  double elapsed_s = 0;        // since training started (the bar)
  double epoch = 0;
  double memory_gib = 0;
  double memory_share = 0;     // of the GPU's memory, 0..1
  double mfu = 0;              // 0..1
  double tflops = 0;
};

struct CheckpointReport {
  int64_t step = 0;
  std::string path;            // the step's checkpoint directory
  bool async = false;
  double seconds = 0;          // end lines: how long the save (or staging) took
};

// The framework's checkpoint directory name for a step: checkpoint-N (hf), iter_000000N
// (megatron), step-N (torchtitan), ckpt-N (nanogpt: its out/ckpt.pt, kept per step here).
std::string CheckpointDirName(scenario::LogFormat format, int64_t step);

class LogFormatter {
 public:
  // `wall_ns`: the time to print in timestamps (CLOCK_REALTIME), local time like Python's logging.
  explicit LogFormatter(scenario::LogFormat format, int rank = 0) : format_(format), rank_(rank) {}

  // Start-of-training lines (config hash = the recipe fingerprint, step counts).
  std::vector<LogLine> Header(const TrainSpec& spec, int64_t wall_ns) const;
  // The progress bar refresh of HF Trainer (empty for the others), every step.
  std::vector<LogLine> Progress(const StepReport& r) const;
  // The metrics line of a logging step.
  std::vector<LogLine> Metrics(const StepReport& r, int64_t wall_ns) const;
  std::vector<LogLine> SaveBegin(const CheckpointReport& c, const StepReport& r, int64_t wall_ns) const;
  std::vector<LogLine> SaveEnd(const CheckpointReport& c, int64_t wall_ns) const;
  // End of training (HF's summary dict; nothing for the others).
  std::vector<LogLine> Summary(const StepReport& r, double runtime_s) const;

 private:
  std::string Stamp(int64_t wall_ns) const;  // "2026-05-18 16:04:46,338"
  std::string TitanPrefix(int64_t wall_ns) const;
  scenario::LogFormat format_;
  int rank_;
};

// Python's repr() of a float (shortest round-trip; 'nan', 'inf').
std::string PyFloat(double v);
// Python's round(v, digits) then repr.
std::string PyRound(double v, int digits);

}  // namespace ithbat::sim::workload
