// PyTorch Lightning's tqdm bar "Epoch 3:  45%|###  | 1651/1702 [13:00<00:24, 2.11it/s, loss=0.158,
// v_num=0, train_loss=0.149]" (also its non-tty form without the |bar|), and NeMo 1.x, which logs
// reduced_train_loss / global_step / consumed_samples into the same bar.
//
// The bar's counter is the batch within the epoch (validation batches included in 1.x), not the
// global step, so a step is only reported when the bar prints `global_step=` as an exact integer
// (NeMo 1.x; "3.2e+4" is rounded by the printer and gives none). Lightning refreshes the bar
// twice per batch (new count with the old postfix, then the new postfix); a segment is reported
// only when its epoch, count or values differ from the last one reported.
#include <array>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

// The bar's loss, most specific first: what the user logged for the step, NeMo's reduced loss,
// then Lightning 1.x's automatic running mean "loss".
constexpr std::array<std::string_view, 5> kLossKeys = {"train_loss_step", "train_loss", "reduced_train_loss",
                                                       "training_loss", "loss"};

constexpr scan::Needle kEpoch{"Epoch "};

class LightningParser final : public FormatParser {
 public:
  std::string_view name() const override { return "lightning"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const size_t at = Find(scan::FactsOf(line), kEpoch, text);
    if (at == npos || text.find('%', at) == npos) return false;
    const scan::Prefix prefix = scan::StripPrefixes(text);
    scan::TqdmBar bar;
    if (!scan::FindTqdmBar(prefix.body, bar)) return false;
    // desc "Epoch 3" (Lightning), possibly after other text glued by the capture.
    const size_t e = bar.desc.rfind("Epoch ");
    if (e == npos) return false;
    const auto epoch = scan::ParseUint(bar.desc.substr(e + 6));
    if (!epoch) return false;
    if (bar.postfix.empty()) return true;

    std::array<scan::KeyValue, 32> pairs;
    size_t n = 0;
    scan::PairScanner scanner(bar.postfix, scan::PairScanner::Style::kEquals, pairs.size());
    uint64_t h = scan::Hash({}, static_cast<uint64_t>(*epoch) * 1000003u + static_cast<uint64_t>(bar.n));
    scan::KeyValue kv;
    while (n < pairs.size() && scanner.Next(kv)) {
      if (!bar.closed && scan::AtEnd(bar.postfix, kv.value)) break;  // cut segment: the value may be cut
      pairs[n++] = kv;
      h = scan::Hash(kv.key, h);
      h = scan::Hash(kv.value, h);
    }
    if (n == 0) return true;
    if (h == last_hash_) return true;  // the same refresh again
    last_hash_ = h;

    int64_t step = -1;
    size_t loss_index = pairs.size();
    for (std::string_view want : kLossKeys) {
      for (size_t i = 0; i < n && loss_index == pairs.size(); ++i) {
        if (pairs[i].key == want && scan::ParseFloat(pairs[i].value)) loss_index = i;
      }
      if (loss_index != pairs.size()) break;
    }
    for (size_t i = 0; i < n; ++i) {
      if (pairs[i].key == "global_step") {
        if (auto s = scan::ParseExactInteger(pairs[i].value)) step = *s;
      }
    }
    const std::string epoch_text = std::to_string(*epoch);
    scan::Emitter emit(out, prefix.rank);
    if (step >= 0) {
      if (ParsedEvent* ev = emit.Add(EventKind::kStep, "", std::nan(""), step))
        ev->attrs.emplace_back("epoch", epoch_text);
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string_view k = pairs[i].key;
      if (k == "v_num" || k == "global_step" || k == "epoch" || k == "step") continue;
      const auto v = scan::ParseLooseNumber(pairs[i].value);
      if (!v) continue;
      if (i == loss_index) {
        if (ParsedEvent* ev = emit.Add(EventKind::kLoss, "loss", *v, step))
          ev->attrs.emplace_back("epoch", epoch_text);
        continue;
      }
      if (scan::StartsWith(k, "val_") || scan::StartsWith(k, "valid_")) {
        // Validation values stay in the postfix until the next validation: report changes only.
        const std::string metric = "eval_" + scan::SnakeCase(k.substr(k.find('_') + 1));
        if (ValChanged(metric, *v)) emit.Add(EventKind::kEvalMetric, metric, *v, step);
        continue;
      }
      std::string metric;
      if (k == "loss") {
        metric = "loss_running_mean";
      } else if (k == "lr" || k == "learning_rate" || scan::StartsWith(k, "lr-") ||
                 scan::StartsWith(k, "lr_")) {
        metric = "lr";
      } else if (Find(k, "loss") != npos) {
        std::string_view stem = k;
        if (scan::StartsWith(stem, "train_")) stem.remove_prefix(6);
        if (scan::StartsWith(stem, "loss_"))
          metric = scan::SnakeCase(stem);
        else if (scan::EndsWith(stem, "_loss"))
          metric = "loss_" + scan::SnakeCase(stem.substr(0, stem.size() - 5));
        else
          metric = "loss_" + scan::SnakeCase(stem);
      } else {
        metric = scan::SnakeCase(k);  // consumed_samples, grad_norm, user-logged scalars
      }
      if (!metric.empty()) emit.Add(EventKind::kTrainMetric, metric, *v, step);
    }
    return true;
  }

 private:
  bool ValChanged(const std::string& metric, double v) {
    const uint64_t key = scan::Hash(metric);
    for (auto& slot : val_) {
      if (slot.key == key) {
        const bool changed = !(slot.value == v || (std::isnan(slot.value) && std::isnan(v)));
        slot.value = v;
        return changed;
      }
    }
    val_[val_next_] = {key, v};
    val_next_ = (val_next_ + 1) % val_.size();
    return true;
  }

  struct ValSlot {
    uint64_t key = 0;
    double value = 0;
  };
  uint64_t last_hash_ = 0;
  std::array<ValSlot, 8> val_{};
  size_t val_next_ = 0;
};

}  // namespace

std::unique_ptr<FormatParser> MakeLightningParser() { return std::make_unique<LightningParser>(); }

}  // namespace ithbat::collect::joblog
