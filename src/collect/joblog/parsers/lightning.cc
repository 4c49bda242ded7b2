// PyTorch Lightning's tqdm bar "Epoch 3:  45%|###  | 1651/1702 [13:00<00:24, 2.11it/s, loss=0.158,
// v_num=0, train_loss=0.149]" (also its non-tty form without the |bar|), and NeMo 1.x, which logs
// reduced_train_loss / global_step / consumed_samples into the same bar.
//
// Steps. Where the bar prints `global_step=` (NeMo 1.x) that is the step, and only when it is an
// exact integer ("3.2e+4" is rounded by the printer and gives none); a stream that prints it once
// never takes a step from the bar's count, so one stream never mixes two numberings. Otherwise
// the step is the bar's position over the run: the batches of the epochs before this one plus the
// count, i.e. epoch × total + count while every epoch has the same total. The count is the batch
// within the epoch (validation batches included in Lightning 1.x, several batches per optimizer
// step under gradient accumulation), so this is a global *batch* index, not the optimizer step;
// the events say so (attr source=bar). Lightning refreshes the bar twice per batch (new count
// with the old postfix, then the new postfix): one step event per count change, none for count 0
// (the epoch has not finished a batch). A segment cut by the capture still has a whole count —
// FindTqdmBar requires "n/total [" — so it gives its step; only its last postfix value is dropped.
//
// Values carry the line's step. A segment is reported only when its epoch, count or values differ
// from the last one reported (in a global_step stream: its epoch or values, the step being one of
// them). Without global_step, the first refresh of a batch still shows the previous batch's
// postfix, so its loss is the previous batch's value stamped with the new step: nothing in the
// text tells the two refreshes apart when only one of them reaches us.
//
// Checkpoints: ModelCheckpoint(verbose=True)'s "Epoch E, global step N: ... saving model to 'P'"
// line (Save below) is a save beginning; Lightning prints no line when it ends.
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
constexpr scan::Needle kSavingModelTo{"saving model to "};

// Beyond any real run (a billion epochs, a billion batches in one epoch): a bar past them gives no
// step, and below them epoch × total plus the count stays far from INT64_MAX.
constexpr int64_t kMaxBarEpoch = 1'000'000'000;
constexpr int64_t kMaxBarTotal = 1'000'000'000;

class LightningParser final : public FormatParser {
 public:
  std::string_view name() const override { return "lightning"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const size_t at = Find(scan::FactsOf(line), kEpoch, text);
    if (at == npos) return false;
    if (const size_t s = Find(scan::FactsOf(line), kSavingModelTo, text, at); s != npos)
      return Save(text, at, s, out);
    if (text.find('%', at) == npos) return false;
    const scan::Prefix prefix = scan::StripPrefixes(text);
    scan::TqdmBar bar;
    if (!scan::FindTqdmBar(prefix.body, bar)) return false;
    // desc "Epoch 3" (Lightning), possibly after other text glued by the capture.
    const size_t e = bar.desc.rfind("Epoch ");
    if (e == npos) return false;
    const auto epoch = scan::ParseUint(bar.desc.substr(e + 6));
    if (!epoch) return false;

    std::array<scan::KeyValue, 32> pairs;
    size_t n = 0;
    scan::PairScanner scanner(bar.postfix, scan::PairScanner::Style::kEquals, pairs.size());
    uint64_t h = scan::Hash({});
    scan::KeyValue kv;
    while (n < pairs.size() && scanner.Next(kv)) {
      // The key is whole even where its value was cut: it still says the stream numbers steps.
      if (kv.key == "global_step") global_steps_ = true;
      if (!bar.closed && scan::AtEnd(bar.postfix, kv.value)) break;  // cut segment: the value may be cut
      pairs[n++] = kv;
      h = scan::Hash(kv.key, h);
      h = scan::Hash(kv.value, h);
    }
    // A refresh repeats the last one when its values and its place are the same. The place is the
    // epoch and count; in a stream with global_step= it is the epoch alone (the step is among the
    // values), so the refresh that only moves the count on, still showing the previous postfix, is
    // not reported a second time.
    const uint64_t place =
        static_cast<uint64_t>(*epoch) * 1000003u + (global_steps_ ? 0u : static_cast<uint64_t>(bar.n));
    h = scan::Hash(std::string_view(reinterpret_cast<const char*>(&place), sizeof(place)), h);

    int64_t step = -1;
    scan::Emitter emit(out, prefix.rank);
    const std::string epoch_text = std::to_string(*epoch);
    if (global_steps_) {
      for (size_t i = 0; i < n; ++i) {
        if (pairs[i].key == "global_step") {
          if (auto s = scan::ParseExactInteger(pairs[i].value)) step = *s;
        }
      }
      if (step >= 0 && step != last_global_step_) {
        last_global_step_ = step;
        if (ParsedEvent* ev = emit.Add(EventKind::kStep, "", std::nan(""), step))
          ev->attrs.emplace_back("epoch", epoch_text);
      }
    } else if (*epoch <= kMaxBarEpoch && bar.total <= kMaxBarTotal) {
      const bool moved = *epoch != bar_epoch_ || bar.n != bar_n_;
      step = BarStep(*epoch, bar.n, bar.total);
      if (step >= 0 && moved) {
        // tqdm's rate is a moving average over batches, not this step's time: value NaN.
        if (ParsedEvent* ev = emit.Add(EventKind::kStep, "", std::nan(""), step)) {
          ev->attrs.emplace_back("epoch", epoch_text);
          ev->attrs.emplace_back("batch", std::to_string(bar.n));
          ev->attrs.emplace_back("epoch_batches", std::to_string(bar.total));
          ev->attrs.emplace_back("source", "bar");
        }
      }
    }

    if (n == 0) return true;
    if (h == last_hash_) return true;  // the same refresh again
    last_hash_ = h;

    size_t loss_index = pairs.size();
    for (std::string_view want : kLossKeys) {
      for (size_t i = 0; i < n && loss_index == pairs.size(); ++i) {
        if (pairs[i].key == want && scan::ParseFloat(pairs[i].value)) loss_index = i;
      }
      if (loss_index != pairs.size()) break;
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
  // ModelCheckpoint(verbose=True), printed before the save: "Epoch 3, global step 4000: 'val_loss'
  // reached 0.51234 (best 0.51234), saving model to '/ckpt/epoch=3-step=4000.ckpt' as top 1" (the
  // path is Python's repr). The save takes the global step where the stream numbers steps by it
  // (NeMo's global_step=); where steps are the bar's batch index the two numberings differ, so the
  // global step is an attr and the event has no step.
  bool Save(std::string_view text, size_t epoch_at, size_t saving_at, std::vector<ParsedEvent>& out) {
    const std::string_view head = text.substr(epoch_at, saving_at - epoch_at);
    const size_t g = head.find(", global step ");
    if (g == npos) return false;
    size_t p = g + 14;
    int64_t global_step = 0;
    if (!scan::ReadUint(head, p, global_step) || p >= head.size() || head[p] != ':') return false;
    std::string_view path = text.substr(saving_at + kSavingModelTo.text.size());
    if (!path.empty() && (path.front() == '\'' || path.front() == '"')) {
      const char quote = path.front();
      path.remove_prefix(1);
      path = path.substr(0, path.find(quote));  // cut lines keep what they have
    } else {
      path = path.substr(0, path.find(' '));
    }
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e =
            emit.Add(EventKind::kCheckpointBegin, "", std::nan(""), global_steps_ ? global_step : -1)) {
      e->attrs.emplace_back("global_step", std::to_string(global_step));
      if (!path.empty()) e->attrs.emplace_back("path", std::string(path.substr(0, kMaxEventTextBytes)));
    }
    return true;
  }

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

  // The step of the bar at (epoch, count, total), -1 for count 0; keeps the run's batch offset.
  // The epochs before the first one seen are taken to have had its total (the agent may attach
  // mid-run); an epoch the capture skipped, the total of the epoch after it. A lower epoch than
  // the last is a new fit in the same process: the offset starts again.
  int64_t BarStep(int64_t epoch, int64_t count, int64_t total) {
    if (bar_epoch_ < 0 || epoch < bar_epoch_) {
      bar_offset_ = epoch * total;
    } else if (epoch > bar_epoch_) {
      bar_offset_ += bar_total_ + (epoch - bar_epoch_ - 1) * total;
    }
    bar_epoch_ = epoch;
    bar_total_ = total;  // Lightning 1.x may change it within an epoch (validation batches added)
    bar_n_ = count;
    return count > 0 ? bar_offset_ + count : -1;
  }

  struct ValSlot {
    uint64_t key = 0;
    double value = 0;
  };
  bool global_steps_ = false;      // the stream prints NeMo's global_step=: the bar's count is not used
  int64_t last_global_step_ = -1;  // the global_step of the last step event
  int64_t bar_epoch_ = -1;         // the bar's epoch, count and total at its last refresh
  int64_t bar_n_ = -1;
  int64_t bar_total_ = 0;
  int64_t bar_offset_ = 0;  // batches of the epochs before bar_epoch_
  uint64_t last_hash_ = 0;
  std::array<ValSlot, 8> val_{};
  size_t val_next_ = 0;
};

}  // namespace

std::unique_ptr<FormatParser> MakeLightningParser() { return std::make_unique<LightningParser>(); }

}  // namespace ithbat::collect::joblog
