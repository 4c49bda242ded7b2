// fairseq (fairseq-train): the train_inner progress line in its log formats —
//   simple  "2020-10-01 11:52:42 | INFO | train_inner | epoch 001:      1 / 78 loss=0.962, ppl=1.95,
//            wps=0, ups=0, wpb=1024, bsz=8, num_updates=1, lr=2.24975e-07, gnorm=0.058, ..."
//   legacy  "| epoch 001:    100 / 1000 loss=9.1, ppl=..., num_updates=100, ..."
//   tqdm    "epoch 001:  10%|###  | 100/1000 [00:10<01:30, 9.9it/s, loss=9.1, ..., num_updates=100]"
//   json    "{"epoch": 1, "update": 0.013, "loss": "0.962", ..., "num_updates": "1", ...}"
// the validation summary ("| valid on 'valid' subset | loss 4.5 | ppl 22.6 | ... | num_updates 78",
// json "valid_loss"), and the checkpoint lines ("Preparing to save checkpoint for epoch 1 @ 78
// updates", "Saved checkpoint DIR/checkpoint1.pt (epoch 1 @ 78 updates, score 4.5) (writing took
// 2.3 seconds)"). fairseq's loss is in base 2, printed as is.
#include <array>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

// "epoch 001" -> 1 (searched in `head`), -1 when absent.
int64_t EpochIn(std::string_view head) {
  const size_t e = Find(head, "epoch ");
  if (e == npos) return -1;
  size_t p = e + 6;
  int64_t v = -1;
  return scan::ReadUint(head, p, v) ? v : -1;
}

// "@ 78 updates" -> 78.
int64_t UpdatesIn(std::string_view text) {
  const size_t at = Find(text, "@ ");
  if (at == npos) return -1;
  size_t p = at + 2;
  int64_t v = -1;
  if (!scan::ReadUint(text, p, v) || !scan::StartsWith(text.substr(p), " updates")) return -1;
  return v;
}

constexpr scan::Needle kNumUpdates{"num_updates"};
constexpr scan::Needle kAvedCheckpoint{"aved checkpoint "};
constexpr scan::Needle kPreparingToSave{"Preparing to save checkpoint for epoch"};

class FairseqParser final : public FormatParser {
 public:
  std::string_view name() const override { return "fairseq"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    if (const size_t u = Find(facts, kNumUpdates, text); u != npos) {
      if (Find(text, "valid on '") != npos || Find(text, "\"valid_") != npos) return Valid(text, out);
      if (Find(text, "loss") != npos) return TrainInner(text, out);
    }
    if (const size_t s = Find(facts, kAvedCheckpoint, text);
        s != npos && s > 0 && (text[s - 1] == 'S' || text[s - 1] == 's')) {
      return Saved(text, s + 16, out);
    }
    if (const size_t p = Find(facts, kPreparingToSave, text); p != npos) {
      const int64_t updates = UpdatesIn(text.substr(p));
      scan::Emitter emit(out, scan::StripPrefixes(text).rank);
      emit.Add(EventKind::kCheckpointBegin, "", std::nan(""), updates);
      return true;
    }
    return false;
  }

 private:
  bool TrainInner(std::string_view text, std::vector<ParsedEvent>& out) {
    // The pairs start after "epoch NNN:" (simple/legacy/tqdm) or at '{' (json).
    std::string_view pairs_text;
    scan::PairScanner::Style style;
    int64_t epoch = -1;
    if (const size_t brace = text.find('{'); brace != npos && Find(text, "\"num_updates\"") != npos) {
      pairs_text = text.substr(brace);
      style = scan::PairScanner::Style::kColon;
    } else {
      const size_t e = Find(text, "epoch ");
      if (e == npos) return false;
      epoch = EpochIn(text.substr(e));
      const size_t eq = text.find('=', e);
      if (eq == npos) return false;
      // Back to the start of the first key.
      size_t b = eq;
      while (b > e && !scan::IsSpace(text[b - 1]) && text[b - 1] != ',' && text[b - 1] != '[') --b;
      pairs_text = text.substr(b);
      style = scan::PairScanner::Style::kEquals;
    }
    std::array<scan::KeyValue, 40> pairs;
    size_t n = 0;
    int64_t step = -1;
    scan::PairScanner scanner(pairs_text, style, pairs.size());
    scan::KeyValue kv;
    while (n < pairs.size() && scanner.Next(kv)) {
      if (scan::AtEnd(text, kv.value)) break;  // the line's last value may have been cut
      pairs[n++] = kv;
      if (kv.key == "num_updates") {
        if (auto v = scan::ParseExactInteger(kv.value)) step = *v;
      } else if (kv.key == "epoch" && epoch < 0) {
        if (auto v = scan::ParseExactInteger(kv.value)) epoch = *v;
      }
    }
    if (step < 0) return false;
    bool have_loss = false;
    for (size_t i = 0; i < n; ++i) have_loss |= pairs[i].key == "loss";
    if (!have_loss) return false;
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e = emit.Add(EventKind::kStep, "", std::nan(""), step)) {
      if (epoch >= 0) e->attrs.emplace_back("epoch", std::to_string(epoch));
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string_view k = pairs[i].key;
      const auto v = scan::ParseLooseNumber(pairs[i].value);
      if (!v) continue;
      if (k == "loss")
        emit.Add(EventKind::kLoss, "loss", *v, step);
      else if (k == "lr")
        emit.Add(EventKind::kTrainMetric, "lr", *v, step);
      else if (k == "gnorm")
        emit.Add(EventKind::kTrainMetric, "grad_norm", *v, step);
      else if (k == "loss_scale")
        emit.Add(EventKind::kTrainMetric, "loss_scale", *v, step);
      else if (k == "wps")
        emit.Add(EventKind::kTrainMetric, "tokens_per_second", *v, step);
      else if (k == "nll_loss")
        emit.Add(EventKind::kTrainMetric, "loss_nll", *v, step);
    }
    return true;
  }

  bool Valid(std::string_view text, std::vector<ParsedEvent>& out) {
    std::array<scan::KeyValue, 40> pairs;
    size_t n = 0;
    int64_t step = -1;
    std::string_view subset;
    const bool json = Find(text, "\"valid_") != npos;
    if (json) {
      // {"epoch": 1, "valid_loss": "4.5", "valid_ppl": "22.6", ..., "valid_num_updates": "78"}
      const size_t brace = text.find('{');
      if (brace == npos) return false;
      scan::PairScanner scanner(text.substr(brace), scan::PairScanner::Style::kColon, pairs.size());
      scan::KeyValue kv;
      while (n < pairs.size() && scanner.Next(kv)) {
        if (!scan::StartsWith(kv.key, "valid_")) continue;
        kv.key.remove_prefix(6);
        pairs[n++] = kv;
      }
    } else {
      // "... | valid on 'valid' subset | loss 4.5 | ppl 22.6 | ... | num_updates 78"
      const size_t on = Find(text, "valid on '");
      const size_t q = text.find('\'', on + 10);
      if (q != npos) subset = text.substr(on + 10, q - on - 10);
      scan::FieldSplitter fields(text.substr(on));
      std::string_view field;
      while (n < pairs.size() && fields.Next(field)) {
        const size_t sp = field.rfind(' ');
        if (sp == npos) continue;
        pairs[n++] = {scan::Trim(field.substr(0, sp)), field.substr(sp + 1)};
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (pairs[i].key == "num_updates") {
        if (auto v = scan::ParseExactInteger(pairs[i].value)) step = *v;
      }
    }
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    for (size_t i = 0; i < n; ++i) {
      const std::string_view k = pairs[i].key;
      // Throughput and counters of the validation pass are not evaluation results.
      if (k == "num_updates" || k == "wps" || k == "wpb" || k == "bsz" || k == "wall" || k == "train_wall" ||
          k == "ups" || k == "epoch")
        continue;
      const auto v = scan::ParseLooseNumber(pairs[i].value);
      if (!v) continue;
      const std::string metric = "eval_" + scan::SnakeCase(k);
      if (metric.size() <= 5) continue;
      if (ParsedEvent* e = emit.Add(EventKind::kEvalMetric, metric, *v, step)) {
        if (!subset.empty() && subset != "valid")
          e->attrs.emplace_back("subset", std::string(subset.substr(0, 64)));
      }
    }
    return true;
  }

  bool Saved(std::string_view text, size_t after, std::vector<ParsedEvent>& out) {
    // "Saved checkpoint checkpoints/checkpoint1.pt (epoch 1 @ 78 updates, score 4.5) (writing took 2.3
    // seconds)"
    const std::string_view rest = text.substr(after);
    size_t e = 0;
    while (e < rest.size() && !scan::IsSpace(rest[e])) ++e;
    const std::string_view path = rest.substr(0, e);
    const int64_t updates = UpdatesIn(rest);
    if (path.empty() || (updates < 0 && Find(rest, "(epoch ") == npos)) return false;
    double seconds = std::nan("");
    if (const size_t took = Find(rest, "writing took "); took != npos) {
      size_t b = took + 13;
      size_t x = b;
      while (x < rest.size() && (scan::IsDigit(rest[x]) || rest[x] == '.')) ++x;
      if (auto v = scan::ParseFloat(rest.substr(b, x - b))) seconds = *v;
    }
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* ev = emit.Add(EventKind::kCheckpointEnd, "", seconds, updates)) {
      ev->attrs.emplace_back("path", std::string(path.substr(0, kMaxEventTextBytes)));
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<FormatParser> MakeFairseqParser() { return std::make_unique<FairseqParser>(); }

}  // namespace ithbat::collect::joblog
