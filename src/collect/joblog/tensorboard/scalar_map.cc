// TensorBoard tags → the log parsers' vocabulary (parser.h), so the same loss read from an
// event file and from stdout is one kind of event. The tables hold the spellings of the
// writers people use (HF Trainer's TensorBoard callback, Lightning, Megatron's writer,
// torchtitan, plain SummaryWriter scripts); the rest keeps its own snake_case name.
#include <algorithm>

#include "collect/joblog/tensorboard/tensorboard.h"

namespace ithbat::collect::joblog::tensorboard {
namespace {

constexpr size_t kMaxNameBytes = 64;

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Lower case, with ' ' and '-' as '_' ("lm loss" → "lm_loss", "grad-norm" → "grad_norm"); '/'
// is kept so the tables can tell "train/loss" from "eval/loss".
std::string Normalize(std::string_view tag) {
  std::string out;
  out.reserve(tag.size());
  for (char c : tag) {
    if (IsUpper(c)) {
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if (c == ' ' || c == '-') {
      out.push_back('_');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// snake_case: camelCase split, every run of other characters one '_', bounded.
std::string SnakeCase(std::string_view text) {
  std::string out;
  bool sep = false;
  for (size_t i = 0; i < text.size() && out.size() < kMaxNameBytes; ++i) {
    const char c = text[i];
    if (IsLower(c) || IsDigit(c) || IsUpper(c)) {
      if (IsUpper(c) && i > 0 && (IsLower(text[i - 1]) || IsDigit(text[i - 1]))) sep = true;
      if (sep && !out.empty()) out.push_back('_');
      sep = false;
      if (out.size() < kMaxNameBytes) out.push_back(IsUpper(c) ? static_cast<char>(c - 'A' + 'a') : c);
    } else {
      sep = true;
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

struct Mapping {
  std::string_view tag;  // normalized
  EventKind kind;
  std::string_view name;
};

constexpr Mapping kMappings[] = {
    // training loss
    {"loss", EventKind::kLoss, "loss"},
    {"train/loss", EventKind::kLoss, "loss"},
    {"train_loss", EventKind::kLoss, "loss"},
    {"train_loss_step", EventKind::kLoss, "loss"},  // Lightning's per-step series
    {"loss/train", EventKind::kLoss, "loss"},
    {"training/loss", EventKind::kLoss, "loss"},
    {"training_loss", EventKind::kLoss, "loss"},
    {"lm_loss", EventKind::kLoss, "loss"},  // Megatron
    {"train/lm_loss", EventKind::kLoss, "loss"},
    {"loss_metrics/global_avg_loss", EventKind::kLoss, "loss"},  // torchtitan
    // learning rate
    {"lr", EventKind::kTrainMetric, "lr"},
    {"learning_rate", EventKind::kTrainMetric, "lr"},
    {"train/lr", EventKind::kTrainMetric, "lr"},
    {"train/learning_rate", EventKind::kTrainMetric, "lr"},
    {"optimizer/lr", EventKind::kTrainMetric, "lr"},
    {"lr_adam", EventKind::kTrainMetric, "lr"},  // Lightning LearningRateMonitor
    {"lr_adamw", EventKind::kTrainMetric, "lr"},
    {"lr_sgd", EventKind::kTrainMetric, "lr"},
    // gradient norm
    {"grad_norm", EventKind::kTrainMetric, "grad_norm"},
    {"train/grad_norm", EventKind::kTrainMetric, "grad_norm"},
    {"gradient_norm", EventKind::kTrainMetric, "grad_norm"},
    {"train/gradient_norm", EventKind::kTrainMetric, "grad_norm"},
    {"optimizer/grad_norm", EventKind::kTrainMetric, "grad_norm"},
    // loss scale, epoch, step time, utilisation
    {"loss_scale", EventKind::kTrainMetric, "loss_scale"},
    {"train/loss_scale", EventKind::kTrainMetric, "loss_scale"},
    {"epoch", EventKind::kTrainMetric, "epoch"},
    {"train/epoch", EventKind::kTrainMetric, "epoch"},
    {"iteration_time", EventKind::kTrainMetric, "step_time_seconds"},
    {"step_time", EventKind::kTrainMetric, "step_time_seconds"},
    {"train/step_time", EventKind::kTrainMetric, "step_time_seconds"},
    {"mfu", EventKind::kTrainMetric, "mfu"},
    {"mfu(%)", EventKind::kTrainMetric, "mfu"},
    {"tflops", EventKind::kTrainMetric, "tflops"},
    // throughput
    {"tps", EventKind::kTrainMetric, "tokens_per_second"},
    {"tokens_per_second", EventKind::kTrainMetric, "tokens_per_second"},
    {"tokens_per_sec", EventKind::kTrainMetric, "tokens_per_second"},
    {"train/tokens_per_second", EventKind::kTrainMetric, "tokens_per_second"},
    {"throughput/tps", EventKind::kTrainMetric, "tokens_per_second"},
    {"throughput/tokens_per_second", EventKind::kTrainMetric, "tokens_per_second"},
    {"throughput(tps)", EventKind::kTrainMetric, "tokens_per_second"},  // torchtitan
    {"samples_per_second", EventKind::kTrainMetric, "samples_per_second"},
    {"samples_per_sec", EventKind::kTrainMetric, "samples_per_second"},
    {"train/samples_per_second", EventKind::kTrainMetric, "samples_per_second"},
    {"throughput/samples_per_second", EventKind::kTrainMetric, "samples_per_second"},
    // evaluation loss
    {"eval/loss", EventKind::kEvalMetric, "eval_loss"},
    {"eval_loss", EventKind::kEvalMetric, "eval_loss"},
    {"val_loss", EventKind::kEvalMetric, "eval_loss"},
    {"val/loss", EventKind::kEvalMetric, "eval_loss"},
    {"valid/loss", EventKind::kEvalMetric, "eval_loss"},
    {"valid_loss", EventKind::kEvalMetric, "eval_loss"},
    {"validation/loss", EventKind::kEvalMetric, "eval_loss"},
    {"validation_loss", EventKind::kEvalMetric, "eval_loss"},
    {"loss/val", EventKind::kEvalMetric, "eval_loss"},
    {"loss/eval", EventKind::kEvalMetric, "eval_loss"},
    {"loss/validation", EventKind::kEvalMetric, "eval_loss"},
    {"lm_loss_validation", EventKind::kEvalMetric, "eval_loss"},  // Megatron
    {"eval/lm_loss", EventKind::kEvalMetric, "eval_loss"},
};

// Prefixes that make any metric an evaluation one: "eval/accuracy" → eval_accuracy.
constexpr std::string_view kEvalPrefixes[] = {"eval/", "eval_", "val/", "val_", "valid/", "valid_",
                                              "validation/", "validation_"};

}  // namespace

std::optional<ParsedEvent> ScalarToEvent(const Scalar& scalar) {
  const std::string_view tag = std::string_view(scalar.tag).substr(0, kMaxTagBytes);
  const std::string norm = Normalize(tag);
  ParsedEvent ev;
  ev.step = scalar.step;
  ev.value = scalar.value;
  const auto it = std::find_if(std::begin(kMappings), std::end(kMappings),
                               [&](const Mapping& m) { return m.tag == norm; });
  if (it != std::end(kMappings)) {
    ev.kind = it->kind;
    ev.name = std::string(it->name);
  } else {
    std::string_view rest = tag;
    ev.kind = EventKind::kTrainMetric;
    for (std::string_view p : kEvalPrefixes) {
      if (norm.starts_with(p) && norm.size() > p.size()) {
        ev.kind = EventKind::kEvalMetric;
        rest = tag.substr(p.size());
        break;
      }
    }
    std::string name = SnakeCase(rest);
    if (name.empty()) return std::nullopt;
    if (ev.kind == EventKind::kEvalMetric) {
      name = "eval_" + name;
      if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
    }
    ev.name = std::move(name);
  }
  ev.attrs.emplace_back("tag", std::string(tag));
  return ev;
}

}  // namespace ithbat::collect::joblog::tensorboard
