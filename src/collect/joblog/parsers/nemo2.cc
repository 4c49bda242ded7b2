// NeMo 2.x (nemo.lightning progress printer): "Training epoch 0, iteration 120/149 | lr: 3e-05 |
// consumed_samples: 121 | global_batch_size: 1 | global_step: 120 | reduced_train_loss: 1.233 |
// train_step_timing in s: 0.03146 | val_loss: 4.106". A NaN loss is printed "nan.0".
//
// The step is the printed global_step (else the iteration), as printed. val_loss stays in every
// line until the next validation, so it is reported when it changes (including the first time).
#include <array>
#include <cmath>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

constexpr scan::Needle kTrainingEpoch{"Training epoch "};

class Nemo2Parser final : public FormatParser {
 public:
  std::string_view name() const override { return "nemo2"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const size_t at = Find(scan::FactsOf(line), kTrainingEpoch, text);
    if (at == npos) return false;
    size_t pos = at + 15;
    int64_t epoch = 0;
    int64_t iteration = 0;
    int64_t total = -1;
    if (!scan::ReadUint(text, pos, epoch)) return false;
    if (!scan::StartsWith(text.substr(pos), ", iteration ")) return false;
    pos += 12;
    if (!scan::ReadUint(text, pos, iteration)) return false;
    if (pos < text.size() && text[pos] == '/') {
      ++pos;
      if (!scan::ReadUint(text, pos, total)) total = -1;
    }
    const std::string_view rest = text.substr(pos);

    // First pass: the step and the step time, which every other event carries.
    int64_t step = iteration;
    double step_seconds = std::nan("");
    scan::FieldSplitter fields(rest);
    std::string_view field;
    while (fields.Next(field)) {
      scan::KeyValue kv;
      if (!scan::SplitColonField(field, kv)) continue;
      if (kv.key == "global_step") {
        if (auto s = scan::ParseExactInteger(kv.value)) step = *s;
      } else if (kv.key == "train_step_timing in s") {
        if (auto v = scan::ParseFloat(kv.value)) step_seconds = *v;
      }
    }
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e = emit.Add(EventKind::kStep, "", step_seconds, step)) {
      if (total >= 0) e->attrs.emplace_back("total_steps", std::to_string(total));
      e->attrs.emplace_back("epoch", std::to_string(epoch));
    }
    scan::FieldSplitter again(rest);
    while (again.Next(field)) {
      scan::KeyValue kv;
      if (!scan::SplitColonField(field, kv)) continue;
      const std::string_view k = kv.key;
      if (k == "global_step" || k == "train_step_timing in s") continue;
      const auto v = scan::ParseLooseNumber(kv.value);
      if (!v) continue;
      if (k == "reduced_train_loss" || k == "train_loss") {
        emit.Add(EventKind::kLoss, "loss", *v, step);
      } else if (k == "lr") {
        emit.Add(EventKind::kTrainMetric, "lr", *v, step);
      } else if (scan::StartsWith(k, "val_")) {
        const std::string metric = "eval_" + scan::SnakeCase(k.substr(4));
        if (ValChanged(metric, *v)) emit.Add(EventKind::kEvalMetric, metric, *v, step);
      } else {
        const std::string metric = scan::SnakeCase(k);  // consumed_samples, global_batch_size, ...
        if (!metric.empty()) emit.Add(EventKind::kTrainMetric, metric, *v, step);
      }
    }
    return true;
  }

 private:
  bool ValChanged(const std::string& metric, double v) {
    const uint64_t key = scan::Hash(metric);
    for (auto& slot : val_) {
      if (slot.used && slot.key == key) {
        const bool changed = !(slot.value == v || (std::isnan(slot.value) && std::isnan(v)));
        slot.value = v;
        return changed;
      }
    }
    val_[val_next_] = {key, v, true};
    val_next_ = (val_next_ + 1) % val_.size();
    return true;
  }

  struct ValSlot {
    uint64_t key = 0;
    double value = 0;
    bool used = false;
  };
  std::array<ValSlot, 8> val_{};
  size_t val_next_ = 0;
};

}  // namespace

std::unique_ptr<FormatParser> MakeNemo2Parser() { return std::make_unique<Nemo2Parser>(); }

}  // namespace ithbat::collect::joblog
