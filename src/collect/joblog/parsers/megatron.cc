// Megatron-LM, Megatron-DeepSpeed and Megatron-Core/Bridge: the " iteration N/ M | key: value |"
// progress line, the checkpoint save start/end lines (old "at iteration" and new "from
// iteration" wording), and the "validation loss at iteration N" line.
#include <algorithm>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"
#include "collect/joblog/text/redact.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

// "to DIR" after the iteration number: the first whitespace-free token.
std::string_view PathAfterTo(std::string_view rest) {
  const size_t to = Find(rest, " to ");
  if (to == npos) return {};
  size_t b = to + 4;
  scan::SkipSpaces(rest, b);
  size_t e = b;
  while (e < rest.size() && !scan::IsSpace(rest[e])) ++e;
  return rest.substr(b, e - b);
}

// Reads "   400" after an anchor; -1 when absent.
int64_t IterationAfter(std::string_view text, size_t pos) {
  scan::SkipSpaces(text, pos);
  int64_t v = -1;
  if (!scan::ReadUint(text, pos, v)) return -1;
  return v;
}

constexpr scan::Needle kIteration{"iteration"};
constexpr scan::Needle kDatetime{"] datetime: "};

class MegatronParser final : public FormatParser {
 public:
  std::string_view name() const override { return "megatron"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    const size_t it = Find(facts, kIteration, text);
    if (it == npos) {
      // Banner lines that only Megatron prints ("[after dataloaders are built] datetime: ...").
      return Find(facts, kDatetime, text) != npos && text.find('[') != npos;
    }
    // The first "iteration" of every line we know is the one after the line's own phrase.
    const std::string_view head = text.substr(0, it);
    if (scan::EndsWith(head, "checkpoint at ")) return Checkpoint(text, it - 14, out);
    if (scan::EndsWith(head, "checkpoint from ")) return Checkpoint(text, it - 16, out);
    if (scan::EndsWith(head, "scheduled an async checkpoint save at ")) {
      // --async-save: the save begun by "saving checkpoint at iteration N" goes on in the
      // background; its "successfully saved" line comes later and is marked async.
      async_iteration_ = IterationAfter(text, it + 9);
      return async_iteration_ >= 0;
    }
    if (scan::EndsWith(head, "validation loss at ")) return Validation(text, it - 19, out);
    return Iteration(text, it, out);
  }

 private:
  bool Iteration(std::string_view text, size_t it, std::vector<ParsedEvent>& out) {
    // The line starts with "iteration": only spaces, launcher prefixes and one "[timestamp]" may
    // come before it (NeMo 2's "Training epoch 0, iteration 5/10 |" is not Megatron's line).
    const scan::Prefix prefix = scan::StripPrefixes(text.substr(0, it));
    std::string_view head = scan::Trim(prefix.body);
    if (!head.empty() && head.front() == '[' && head.back() == ']' && head.find(']') == head.size() - 1)
      head = {};
    if (!head.empty()) return false;
    size_t pos = it + 9;
    scan::SkipSpaces(text, pos);
    int64_t iteration = 0;
    int64_t total = 0;
    if (!scan::ReadUint(text, pos, iteration)) return false;
    scan::SkipSpaces(text, pos);
    if (pos >= text.size() || text[pos] != '/') return false;
    ++pos;
    scan::SkipSpaces(text, pos);
    if (!scan::ReadUint(text, pos, total)) return false;
    scan::SkipSpaces(text, pos);
    if (pos >= text.size() || text[pos] != '|') return false;

    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    const size_t step_index = out.size();
    if (ParsedEvent* e = emit.Add(EventKind::kStep, "", std::nan(""), iteration)) {
      e->attrs.emplace_back("total_steps", std::to_string(total));
    }
    bool have_lm_loss = false;
    bool other_loss = false;    // "sop loss", "mtp_1 loss", ...: a loss field that is not the main one
    bool skipped_zero = false;  // "number of skipped iterations:   0 |" was printed
    double nan_iterations = 0;
    std::string_view grad_norm;  // as printed
    scan::FieldSplitter fields(text.substr(pos));
    std::string_view field;
    while (fields.Next(field)) {
      scan::KeyValue kv;
      // Every field of the line ends with " |"; one that does not was cut by the capture.
      if (!fields.terminated() || !scan::SplitColonField(field, kv)) continue;
      const auto value = scan::ParseLooseNumber(kv.value);
      if (!value) continue;
      const std::string_view k = kv.key;
      const char* metric = nullptr;
      double v = *value;
      if (k == "elapsed time per iteration (ms)") {
        out[step_index].value = v / 1000.0;
        continue;
      } else if (k == "lm loss" || (k == "loss" && !have_lm_loss)) {
        have_lm_loss = true;
        seen_lm_loss_ = true;
        emit.Add(EventKind::kLoss, "loss", v, iteration);
        continue;
      } else if (k == "learning rate") {
        metric = "lr";
      } else if (k == "loss scale") {
        metric = "loss_scale";
      } else if (k == "grad norm") {
        metric = "grad_norm";
        grad_norm = kv.value;
      } else if (k == "params norm") {
        metric = "params_norm";
      } else if (k == "consumed samples") {
        metric = "consumed_samples";
      } else if (k == "consumed tokens") {
        metric = "consumed_tokens";
      } else if (k == "global batch size") {
        metric = "global_batch_size";
      } else if (k == "number of skipped iterations") {
        metric = "skipped_iterations";
        skipped_zero = v == 0;
      } else if (k == "number of nan iterations") {
        metric = "nan_iterations";
        nan_iterations = v;
      } else if (k == "samples per second") {
        metric = "samples_per_second";
      } else if (k == "TFLOPs" || k == "throughput per GPU (TFLOP/s/GPU)" || k == "TFLOP/s/GPU" ||
                 k == "tflops") {
        metric = "tflops";
      } else if (k == "tokens per second" || k == "tokens/s" || k == "tokens per sec") {
        metric = "tokens_per_second";
      } else if (k == "tokens per gpu per second (tgs)" || k == "tgs") {
        metric = "tokens_per_second_per_gpu";
      } else if (scan::EndsWith(k, " loss") || scan::EndsWith(k, "_loss")) {
        // Extra losses: "mtp_1 loss" -> loss_mtp_1, "seq_load_balancing_loss" -> loss_seq_load_balancing.
        const std::string stem = scan::SnakeCase(k.substr(0, k.size() - 5));
        if (!stem.empty()) emit.Add(EventKind::kTrainMetric, "loss_" + stem, v, iteration);
        other_loss = true;
        continue;
      }
      if (metric != nullptr) emit.Add(EventKind::kTrainMetric, metric, v, iteration);
    }
    // Megatron never prints a NaN loss: `lm loss` disappears from the line and this
    // per-interval counter goes above 0. That is the NaN-loss error of this format.
    if (nan_iterations > 0) {
      if (ParsedEvent* e = emit.Add(EventKind::kError, kErrorNanLoss, std::nan(""), iteration)) {
        e->attrs.emplace_back("nan_iterations", std::to_string(static_cast<int64_t>(std::min(nan_iterations, 9.0e18))));
        e->text = RedactedExcerpt(text, kMaxEventTextBytes);
      }
    }
    // Megatron prints a loss only when its mean over the interval's advanced iterations is > 0:
    // a NaN (or a sum <= 0) drops the field without a word. Its nan counter counts only NaNs of
    // *skipped* iterations (the fp16 scaler's, hence nan <= skipped): a NaN of a bf16/fp32 run
    // goes uncounted. A loss is legitimately absent when the interval's iterations were all
    // skipped (fp16 loss-scale warm-up: "number of skipped iterations: 10" on a 10-iteration
    // interval). The interval's length is not printed, so only "number of skipped iterations: 0"
    // proves that every iteration advanced: then a missing loss is flagged. With skipped > 0 it is
    // not (a partly skipped interval that lost its loss goes unreported); with nan > 0, nan_loss
    // above says it. The skipped counter comes after the loss fields in every Megatron version
    // (-LM, -DeepSpeed, -Core/Bridge), so a line whose skipped field is whole (closed by " |") got
    // past the place of the loss: a line cut earlier, or with no counter, is not flagged; a line
    // whose start was cut never gets here (it must start with "iteration"). A model whose main
    // loss has another name (ICT's "retriever loss") prints no `lm loss` at all: a line with
    // another loss field is flagged only once this stream has printed `lm loss` or `loss`.
    if (skipped_zero && !have_lm_loss && nan_iterations == 0 && (!other_loss || seen_lm_loss_)) {
      if (ParsedEvent* e = emit.Add(EventKind::kError, kErrorLossMissing, std::nan(""), iteration)) {
        if (!grad_norm.empty()) {
          const auto g = scan::ParseLooseNumber(grad_norm);
          e->attrs.emplace_back("grad_norm",
                                g && std::isnan(*g) ? std::string("nan") : std::string(grad_norm));
        }
        e->text = RedactedExcerpt(text, kMaxEventTextBytes);
      }
    }
    return true;
  }

  bool Checkpoint(std::string_view text, size_t anchor, std::vector<ParsedEvent>& out) {
    // "saving checkpoint at iteration N to DIR [in FMT format]" begins a save;
    // "successfully saved checkpoint {at,from} iteration N [to DIR [ t 1/2, p 1/1 ]]" ends it.
    const std::string_view head = text.substr(0, anchor);
    EventKind kind;
    if (scan::EndsWith(head, "successfully saved ")) {
      kind = EventKind::kCheckpointEnd;
    } else if (scan::EndsWith(head, "saving ")) {
      kind = EventKind::kCheckpointBegin;
    } else {
      return false;  // "loading checkpoint at iteration", "finished loading checkpoint from iteration"...
    }
    const size_t after =
        anchor + (text[anchor + 11] == 'a' ? 23 : 25);  // past "checkpoint at/from iteration"
    const int64_t iteration = IterationAfter(text, after);
    if (iteration < 0) return false;
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e = emit.Add(kind, "", std::nan(""), iteration)) {
      const std::string_view path = PathAfterTo(text.substr(after));
      if (!path.empty()) e->attrs.emplace_back("path", std::string(path.substr(0, kMaxEventTextBytes)));
      if (kind == EventKind::kCheckpointEnd && iteration == async_iteration_)
        e->attrs.emplace_back("async", "1");
    }
    return true;
  }

  bool Validation(std::string_view text, size_t anchor, std::vector<ParsedEvent>& out) {
    // " validation loss at iteration 100 on validation set | lm loss value: 2.3E+00 | lm loss PPL: 9.9E+00 |"
    const size_t after = anchor + 28;
    const int64_t iteration = IterationAfter(text, after);
    if (iteration < 0) return false;
    const size_t bar = text.find('|', after);
    if (bar == npos) return true;
    const std::string_view head = text.substr(after, bar - after);
    const bool test_set = Find(head, "test set") != npos;
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    scan::FieldSplitter fields(text.substr(bar));
    std::string_view field;
    while (fields.Next(field)) {
      scan::KeyValue kv;
      if (!scan::SplitColonField(field, kv)) continue;
      const auto value = scan::ParseLooseNumber(kv.value);
      if (!value) continue;
      std::string metric;
      if (kv.key == "lm loss value") {
        metric = "eval_loss";
      } else if (kv.key == "lm loss PPL") {
        metric = "eval_ppl";
      } else {
        std::string_view k = kv.key;
        if (scan::EndsWith(k, " value")) k.remove_suffix(6);
        metric = "eval_" + scan::SnakeCase(k);
      }
      if (ParsedEvent* e = emit.Add(EventKind::kEvalMetric, metric, *value, iteration)) {
        if (test_set) e->attrs.emplace_back("split", "test");
      }
    }
    return true;
  }

  int64_t async_iteration_ = -1;  // the iteration of the last scheduled async save
  bool seen_lm_loss_ = false;     // an iteration line of this stream carried `lm loss` (or `loss`)
};

}  // namespace

std::unique_ptr<FormatParser> MakeMegatronParser() { return std::make_unique<MegatronParser>(); }

}  // namespace ithbat::collect::joblog
