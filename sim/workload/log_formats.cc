#include "workload/log_formats.h"


#include "workload/train_model.h"

#include <cmath>
#include <ctime>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::sim::workload {
namespace {

using scenario::LogFormat;

std::string Hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const auto s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

// Python's '{:.6E}'.format(v): NaN prints as "NAN", inf as "INF".
std::string PyExp(double v, int digits) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  return fmt::format("{:.{}E}", v, digits);
}
std::string PyFixed(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.{}f}", v, digits);
}

// Python's f"{n:,}": 7282 -> "7,282".
std::string Thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // fmt's "{}" is the shortest round-trip form with Python's switch to exponent notation (below
  // 1e-4, from 1e16); Python adds ".0" to an integral value.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string PyRound(double v, int digits) {
  if (!std::isfinite(v)) return PyFloat(v);
  const double m = std::pow(10.0, digits);
  return PyFloat(std::round(v * m) / m);
}

std::string CheckpointDirName(LogFormat format, int64_t step) {
  switch (format) {
    case LogFormat::kHfTrainer: return fmt::format("checkpoint-{}", step);
    case LogFormat::kMegatron: return fmt::format("iter_{:07}", step);
    case LogFormat::kTorchtitan: return fmt::format("step-{}", step);
    case LogFormat::kNanogpt: return fmt::format("ckpt-{}", step);
  }
  return fmt::format("step{}", step);
}

std::string LogFormatter::Stamp(int64_t wall_ns) const {
  const time_t secs = static_cast<time_t>(wall_ns / 1'000'000'000);
  struct tm tm {};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{},{:03}", buf, (wall_ns / 1'000'000) % 1000);
}

std::string LogFormatter::TitanPrefix(int64_t wall_ns) const {
  return fmt::format("[rank{}]:[titan] {} - root - INFO - ", rank_, Stamp(wall_ns));
}

std::vector<LogLine> LogFormatter::Header(const TrainSpec& spec, int64_t wall_ns) const {
  std::vector<LogLine> out;
  const int64_t total = spec.start_step + spec.steps;
  const int64_t gbs = spec.work.sequences_per_step * spec.dp;
  const std::string hash = spec.recipe_fingerprint.empty() ? "0" : spec.recipe_fingerprint;
  switch (format_) {
    case LogFormat::kHfTrainer: {
      const std::string p = fmt::format("[INFO|trainer.py:2314] {} >> ", Stamp(wall_ns));
      out.push_back({2, fmt::format("[INFO|trainer.py:2262] {} >> Training config hash: {}\n", Stamp(wall_ns), hash)});
      out.push_back({2, p + "***** Running training *****\n"});
      out.push_back({2, p + fmt::format("  Num examples = {}\n", total * gbs)});
      out.push_back({2, p + "  Num Epochs = 1\n"});
      out.push_back({2, p + fmt::format("  Instantaneous batch size per device = {}\n", spec.work.sequences_per_step)});
      out.push_back({2, p + fmt::format("  Total train batch size (w. parallel, distributed & accumulation) = {}\n", gbs)});
      out.push_back({2, p + "  Gradient Accumulation steps = 1\n"});
      out.push_back({2, p + fmt::format("  Total optimization steps = {}\n", total)});
      if (spec.start_step > 0) {
        out.push_back({2, p + "  Continuing training from checkpoint, will skip to saved global_step\n"});
        out.push_back({2, p + fmt::format("  Continuing training from global step {}\n", spec.start_step)});
      }
      break;
    }
    case LogFormat::kMegatron:
      out.push_back({1, "------------------------ arguments ------------------------\n"});
      out.push_back({1, fmt::format("  config_hash ..................................... {}\n", hash)});
      out.push_back({1, fmt::format("  global_batch_size ............................... {}\n", gbs)});
      out.push_back({1, fmt::format("  micro_batch_size ................................ {}\n", spec.work.sequences_per_step)});
      out.push_back({1, fmt::format("  pipeline_model_parallel_size .................... {}\n", spec.pp)});
      out.push_back({1, fmt::format("  tensor_model_parallel_size ...................... {}\n", spec.tp)});
      out.push_back({1, fmt::format("  train_iters ..................................... {}\n", total)});
      out.push_back({1, fmt::format("  world_size ...................................... {}\n", spec.world_size)});
      out.push_back({1, "-------------------- end of arguments ---------------------\n"});
      if (spec.start_step > 0)
        out.push_back({1, fmt::format("  successfully loaded checkpoint from iteration {}\n", spec.start_step)});
      out.push_back({1, fmt::format("[after dataloaders are built] datetime: {} \n", Stamp(wall_ns).substr(0, 19))});
      out.push_back({1, "done with setup ...\n"});
      out.push_back({1, "training ...\n"});
      break;
    case LogFormat::kTorchtitan:
      out.push_back({1, TitanPrefix(wall_ns) + fmt::format("Config hash: {}\n", hash)});
      out.push_back({1, TitanPrefix(wall_ns) + fmt::format("Building 3-D device mesh with [dp_shard, tp, pp], [{}, {}, {}]\n", spec.dp, spec.tp, spec.pp)});
      if (spec.start_step > 0)
        out.push_back({1, TitanPrefix(wall_ns) + fmt::format("Loading the checkpoint from step-{}.\n", spec.start_step)});
      out.push_back({1, TitanPrefix(wall_ns) + fmt::format("Training starts at step {}\n", spec.start_step + 1)});
      break;
    case LogFormat::kNanogpt:
      out.push_back({1, fmt::format("config hash: {}\n", hash)});
      out.push_back({1, fmt::format("tokens per iteration will be: {}\n",
                                    gbs * MedianSeqLen(spec.work.seq_len))});
      if (spec.start_step > 0) out.push_back({1, "Resuming training from out\n"});
      break;
  }
  return out;
}

std::vector<LogLine> LogFormatter::Progress(const StepReport& r) const {
  if (format_ != LogFormat::kHfTrainer) return {};
  const int64_t total = std::max<int64_t>(r.total_steps, 1);
  const int pct = static_cast<int>(100 * r.step / total);
  constexpr int kWidth = 40;
  const int fill8 = static_cast<int>(kWidth * 8 * r.step / total);
  std::string bar;
  static const char* kPartial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  for (int i = 0; i < fill8 / 8; ++i) bar += "█";
  int cells = fill8 / 8;
  if (cells < kWidth) {
    bar += kPartial[fill8 % 8];
    if (fill8 % 8 != 0) ++cells;
  }
  bar.append(static_cast<size_t>(kWidth - cells), ' ');
  const double per_s = r.step_ms > 0 ? 1000.0 / r.step_ms : 0;
  const double remaining = per_s > 0 ? static_cast<double>(total - r.step) / per_s : 0;
  const std::string rate = per_s >= 1 || per_s == 0 ? fmt::format("{:.2f}it/s", per_s) : fmt::format("{:.2f}s/it", 1 / per_s);
  return {{2, fmt::format("\r{:3}%|{}| {}/{} [{}<{}, {}]", pct, bar, r.step, total, Hms(r.elapsed_s), Hms(remaining), rate)}};
}

std::vector<LogLine> LogFormatter::Metrics(const StepReport& r, int64_t wall_ns) const {
  switch (format_) {
    case LogFormat::kHfTrainer:
      return {{1, fmt::format("{{'loss': {}, 'grad_norm': {}, 'learning_rate': {}, 'epoch': {}}}\n", PyRound(r.loss, 4),
                              PyFloat(r.grad_norm), PyFloat(r.lr), PyRound(r.epoch, 2))}};
    case LogFormat::kMegatron:
      return {{1, fmt::format(" iteration {:8}/{:8} | consumed samples: {:12} | elapsed time per iteration (ms): {:.1f} | "
                              "learning rate: {} | global batch size: {:5} | lm loss: {} | loss scale: 1.0 | grad norm: {} | "
                              "number of skipped iterations: {:3} | number of nan iterations: {:3} |\n",
                              r.step, r.total_steps, r.step * r.sequences, r.step_ms, PyExp(r.lr, 3), r.sequences,
                              PyExp(r.loss, 6), PyFixed(r.grad_norm, 3), 0, r.nan_steps)}};
    case LogFormat::kTorchtitan: {
      const double tps = r.step_ms > 0 ? static_cast<double>(r.tokens) * 1000.0 / r.step_ms : 0;
      return {{1, TitanPrefix(wall_ns) +
                      fmt::format("step: {}  loss: {:>8}  grad_norm: {:>7}  memory: {:.2f}GiB({:.2f}%)  tps: {}  "
                                  "tflops: {:.2f}  mfu: {:.2f}%\n",
                                  r.step, PyFixed(r.loss, 5), PyFixed(r.grad_norm, 4), r.memory_gib, 100 * r.memory_share,
                                  Thousands(static_cast<int64_t>(tps)), r.tflops,
                                  100 * r.mfu)}};
    }
    case LogFormat::kNanogpt: {
      const double mfu = r.step <= 5 ? -100.0 : 100 * r.mfu;
      return {{1, fmt::format("iter {}: loss {}, time {:.2f}ms, mfu {:.2f}%\n", r.step - 1, PyFixed(r.loss, 4), r.step_ms, mfu)}};
    }
  }
  return {};
}

std::vector<LogLine> LogFormatter::SaveBegin(const CheckpointReport& c, const StepReport& r, int64_t wall_ns) const {
  switch (format_) {
    case LogFormat::kHfTrainer:
      return {{2, fmt::format("[INFO|trainer.py:3705] {} >> Saving model checkpoint to {}\n", Stamp(wall_ns), c.path)}};
    case LogFormat::kMegatron: {
      std::vector<LogLine> out{{1, fmt::format("saving checkpoint at iteration {:7} to {} in torch_dist format\n", c.step,
                                               c.path.substr(0, c.path.rfind('/')))}};
      if (c.async) out.push_back({1, fmt::format("scheduled an async checkpoint save at iteration {:7} to {}\n", c.step,
                                                 c.path.substr(0, c.path.rfind('/')))});
      return out;
    }
    case LogFormat::kTorchtitan:
      return {{1, TitanPrefix(wall_ns) + "Saving the checkpoint (or staging if async is enabled).\n"}};
    case LogFormat::kNanogpt:
      return {{1, fmt::format("step {}: train loss {}, val loss {}\n", c.step, PyFixed(r.loss, 4),
                              PyFixed(r.loss * 1.05, 4))},
              {1, fmt::format("saving checkpoint to {}\n", c.path)}};
  }
  return {};
}

std::vector<LogLine> LogFormatter::SaveEnd(const CheckpointReport& c, int64_t wall_ns) const {
  switch (format_) {
    case LogFormat::kHfTrainer:
      return {{2, fmt::format("[INFO|modeling_utils.py:3042] {} >> Model weights saved in {}/model.safetensors\n",
                              Stamp(wall_ns), c.path)}};
    case LogFormat::kMegatron:
      return {{1, fmt::format("  successfully saved checkpoint from iteration {:7} to {} [ t 1/1, p 1/1 ]\n", c.step,
                              c.path.substr(0, c.path.rfind('/')))}};
    case LogFormat::kTorchtitan:
      return {{1, TitanPrefix(wall_ns) +
                      fmt::format("Finished saving the checkpoint (or staging if async is enabled)in {:.2f} seconds.\n",
                                  c.seconds)}};
    case LogFormat::kNanogpt:
      return {};
  }
  return {};
}

std::vector<LogLine> LogFormatter::Summary(const StepReport& r, double runtime_s) const {
  if (format_ != LogFormat::kHfTrainer) return {};
  const double sps = runtime_s > 0 ? static_cast<double>(r.step) / runtime_s : 0;
  return {{2, "\n"},
          {1, fmt::format("{{'train_runtime': {}, 'train_samples_per_second': {}, 'train_steps_per_second': {}, "
                          "'train_loss': {}, 'epoch': {}}}\n",
                          PyRound(runtime_s, 4), PyRound(sps * static_cast<double>(r.sequences), 3), PyRound(sps, 3),
                          PyFloat(r.loss), PyRound(r.epoch, 2))}};
}

}  // namespace ithbat::sim::workload
