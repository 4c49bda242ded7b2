// OpenMMLab trainers: mmengine's LogProcessor (mmdet/mmseg/mmpretrain 3.x, xtuner) and mmcv 1.x's
// TextLoggerHook (mmdet/mmseg 2.x). Their training lines:
//   mmengine  "Epoch(train)  [3][ 50/2500]  base_lr: 1.0e-02 lr: 1.0000e-02  eta: 1 day, 2:03:04
//              time: 1.0902  data_time: 0.0450  memory: 7892  grad_norm: 2.1  loss_cls: 0.3  loss: 0.5432"
//             "Iter(train) [  100/160000]  lr: ...  loss: ..."   (iteration-based loops)
//   mmcv 1.x  "Epoch [3][50/2500]\tlr: 2.000e-02, eta: 1 day, 2:03:04, time: 1.090, data_time: 0.045,
//              memory: 7892, loss_rpn_cls: 0.0394, ..., loss: 0.5432"
//             "Iter [100/160000]\tlr: ..."
// usually after the logger's own prefix ("12/05 10:00:00 - mmengine - INFO - ").
//
// Steps. An iteration-based loop prints the iteration: that is the step. An epoch-based loop
// prints the batch within the epoch (1-based) and the epoch's length: the step is the run's batch
// index, (epoch − 1) × length + batch — a global *batch* index, which is the optimizer step unless
// gradients are accumulated (the events say so: attrs epoch, batch, epoch_batches, source=epoch).
// `time` and `data_time` are means over the logging window (mmengine: the last window_size
// iterations; mmcv: the interval since the last line), not this step's: they are train metrics
// (iteration_seconds, data_seconds), and the step's value stays NaN as for a progress bar.
// `memory` is the peak CUDA memory allocated, in MiB (torch.cuda.max_memory_allocated / 2^20).
//
// Validation and test lines ("Epoch(val) [1][10/20]", "Iter(test) [..]", mmcv "Epoch(val) [1][500]")
// are recognised and give no step. Checkpoints: mmengine and mmcv's CheckpointHook print "Saving
// checkpoint at 1000 iterations" / "Saving checkpoint at 12 epochs" before the save (no end line).
#include <array>
#include <cmath>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

constexpr scan::Needle kEpoch{"Epoch"};
constexpr scan::Needle kIter{"Iter"};
constexpr scan::Needle kSavingAt{"Saving checkpoint at "};

// Beyond any real run: a line past them gives no step (and the product stays far from INT64_MAX).
constexpr int64_t kMaxEpoch = 1'000'000'000;
constexpr int64_t kMaxIter = 1'000'000'000'000;

// "[ 50/2500]" at pos (spaces inside the brackets are mmengine's padding): the two numbers, pos
// after ']'. "[500]" (mmcv's validation) gives the number alone, total −1.
bool ReadBracket(std::string_view s, size_t& pos, int64_t& n, int64_t& total) {
  if (pos >= s.size() || s[pos] != '[') return false;
  size_t p = pos + 1;
  scan::SkipSpaces(s, p);
  if (!scan::ReadUint(s, p, n)) return false;
  total = -1;
  if (p < s.size() && s[p] == '/') {
    ++p;
    if (!scan::ReadUint(s, p, total)) return false;
  }
  if (p >= s.size() || s[p] != ']') return false;
  pos = p + 1;
  return true;
}

struct Head {
  bool train = false;
  bool by_epoch = false;
  int64_t epoch = -1, n = -1, total = -1;
  size_t body = 0;  // where the "key: value" items start
};

// "Epoch(train)  [3][ 50/2500]", "Iter(train) [100/160000]", "Epoch [3][50/2500]", "Iter [100/..]",
// at `at` (the needle's offset), preceded by the start of the line or a space.
bool ReadHead(std::string_view t, size_t at, bool by_epoch, bool paren, Head& h) {
  if (at > 0 && !scan::IsSpace(t[at - 1])) return false;
  size_t p = at + (by_epoch ? 5 : 4);
  h.by_epoch = by_epoch;
  h.train = true;
  if (paren) {
    const size_t close = t.find(')', p);
    if (close == npos || close - p > 8) return false;
    const std::string_view mode = t.substr(p + 1, close - p - 1);
    if (mode != "train" && mode != "val" && mode != "test") return false;
    h.train = mode == "train";
    p = close + 1;
  } else if (p >= t.size() || t[p] != ' ') {
    return false;
  }
  scan::SkipSpaces(t, p);
  int64_t a = 0, a_total = -1;
  if (!ReadBracket(t, p, a, a_total)) return false;
  if (by_epoch) {
    if (a_total >= 0) return false;  // "[3]" then "[50/2500]"
    h.epoch = a;
    if (!ReadBracket(t, p, h.n, h.total)) return false;
    // mmcv's validation line "Epoch(val) [1][500]" has no total; a training line always has one.
    if (h.train && h.total < 0) return false;
  } else {
    h.n = a;
    h.total = a_total;
    if (h.train && h.total < 0) return false;
  }
  h.body = p;
  return true;
}

class MmengineParser final : public FormatParser {
 public:
  std::string_view name() const override { return "mmengine"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view t = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    if (const size_t c = Find(facts, kSavingAt, t); c != npos)
      return Checkpoint(t, c + kSavingAt.text.size(), out);
    // One search per word; what follows it says which head it is ("(" or " [").
    Head h;
    bool found = false;
    for (const auto& [needle, by_epoch] : {std::pair{&kEpoch, true}, std::pair{&kIter, false}}) {
      const size_t at = Find(facts, *needle, t);
      const size_t next = at == npos ? npos : at + needle->text.size();
      if (next >= t.size()) continue;
      const bool paren = t[next] == '(';
      if ((paren || t[next] == ' ') && ReadHead(t, at, by_epoch, paren, h)) {
        found = true;
        break;
      }
    }
    if (!found) return false;
    if (!h.train) return true;  // validation / test progress: recognised, no step
    return Train(t, h, out);
  }

 private:
  bool Train(std::string_view t, const Head& h, std::vector<ParsedEvent>& out) {
    int64_t step = -1;
    if (h.by_epoch) {
      if (h.epoch >= 1 && h.epoch <= kMaxEpoch && h.total > 0 && h.total <= kMaxEpoch && h.n >= 1 &&
          h.n <= h.total)
        step = (h.epoch - 1) * h.total + h.n;
    } else if (h.n >= 1 && h.n <= kMaxIter) {
      step = h.n;
    }
    scan::Emitter emit(out, scan::StripPrefixes(t).rank);
    if (step >= 0) {
      if (ParsedEvent* e = emit.Add(EventKind::kStep, "", std::nan(""), step); e != nullptr && h.by_epoch) {
        e->attrs.emplace_back("epoch", std::to_string(h.epoch));
        e->attrs.emplace_back("batch", std::to_string(h.n));
        e->attrs.emplace_back("epoch_batches", std::to_string(h.total));
        e->attrs.emplace_back("source", "epoch");
      }
    }
    // "key: value" items separated by two spaces (mmengine) or ", " (mmcv). A value holding spaces
    // (mmcv's eta "1 day, 2:03:04") leaves words the scanner skips, or reads as a key Item ignores.
    scan::PairScanner items(t.substr(h.body), scan::PairScanner::Style::kColon, 64);
    scan::KeyValue kv;
    while (items.Next(kv)) Item(kv.key, kv.value, step, emit);
    return true;
  }

  static void Item(std::string_view key, std::string_view value, int64_t step, scan::Emitter& emit) {
    const auto v = scan::ParseFloat(value);
    if (!v) return;  // eta "0:00:25", "1 day"
    if (key == "loss") {
      emit.Add(EventKind::kLoss, "loss", *v, step);
    } else if (key == "lr" || key == "grad_norm") {
      emit.Add(EventKind::kTrainMetric, key, *v, step);
    } else if (key == "time") {
      emit.Add(EventKind::kTrainMetric, "iteration_seconds", *v, step);
    } else if (key == "data_time") {
      emit.Add(EventKind::kTrainMetric, "data_seconds", *v, step);
    } else if (key == "memory") {
      emit.Add(EventKind::kTrainMetric, "memory_mib", *v, step);
    } else if (Find(key, "loss") != npos) {
      // A part of the loss: "loss_cls", mmseg's "decode.loss_ce" (→ loss_decode_loss_ce).
      std::string metric = scan::SnakeCase(key);
      if (!scan::StartsWith(metric, "loss_")) metric = "loss_" + metric;
      emit.Add(EventKind::kTrainMetric, metric, *v, step);
    }
    // base_lr (the schedule's base), accuracy fields and the like: not read.
  }

  // "Saving checkpoint at 1000 iterations" → a save begins at step 1000; "... at 12 epochs" → at the
  // end of epoch 12 (its step is not printed: -1, attr epoch).
  static bool Checkpoint(std::string_view t, size_t after, std::vector<ParsedEvent>& out) {
    size_t p = after;
    int64_t n = 0;
    if (!scan::ReadUint(t, p, n)) return false;
    const std::string_view unit = t.substr(p);
    const bool iters = scan::StartsWith(unit, " iterations");
    if (!iters && !scan::StartsWith(unit, " epochs")) return false;
    scan::Emitter emit(out, scan::StripPrefixes(t).rank);
    if (ParsedEvent* e = emit.Add(EventKind::kCheckpointBegin, "", std::nan(""), iters ? n : -1);
        e != nullptr && !iters)
      e->attrs.emplace_back("epoch", std::to_string(n));
    return true;
  }
};

}  // namespace

std::unique_ptr<FormatParser> MakeMmengineParser() { return std::make_unique<MmengineParser>(); }

}  // namespace ithbat::collect::joblog
