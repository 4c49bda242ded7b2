// nanoGPT (karpathy/nanoGPT train.py): "iter 10: loss 4.2648, time 893.76ms[, mfu 16.68%]" (the mfu
// field came later; "-100.00%" is its "not estimated yet" sentinel), the eval line "step 250: train
// loss 1.5440, val loss 1.7220" and "saving checkpoint to DIR", which train.py prints right after
// the eval line of the same iteration (so the save takes that step).
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

// "<word> N: " at `at` (word boundary before it) -> N and the offset after ": ".
bool Head(std::string_view text, size_t at, size_t word_len, int64_t& n, size_t& after) {
  if (at > 0 && !(scan::IsSpace(text[at - 1]) || text[at - 1] == ':' || text[at - 1] == ']')) return false;
  size_t p = at + word_len;
  if (!scan::ReadUint(text, p, n)) return false;
  if (p + 1 >= text.size() || text[p] != ':' || text[p + 1] != ' ') return false;
  after = p + 2;
  return true;
}

constexpr scan::Needle kIterSpace{"iter "};
constexpr scan::Needle kStepSpace{"step "};
constexpr scan::Needle kSavingCheckpointTo{"saving checkpoint to "};

class NanoGptParser final : public FormatParser {
 public:
  std::string_view name() const override { return "nanogpt"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    const bool after_eval = after_eval_;
    after_eval_ = false;
    if (const size_t i = Find(facts, kIterSpace, text); i != npos) {
      int64_t iter = 0;
      size_t after = 0;
      if (Head(text, i, 5, iter, after) && scan::StartsWith(text.substr(after), "loss ")) {
        return Iter(text, after, iter, out);
      }
    }
    if (const size_t s = Find(facts, kStepSpace, text); s != npos) {
      int64_t step = 0;
      size_t after = 0;
      if (Head(text, s, 5, step, after) && scan::StartsWith(text.substr(after), "train loss ")) {
        return Eval(text, after, step, out);
      }
    }
    if (const size_t c = Find(facts, kSavingCheckpointTo, text); c != npos) {
      const std::string_view path = scan::Trim(text.substr(c + 21)).substr(0, kMaxEventTextBytes);
      scan::Emitter emit(out, scan::StripPrefixes(text).rank);
      if (ParsedEvent* e =
              emit.Add(EventKind::kCheckpointBegin, "", std::nan(""), after_eval ? eval_step_ : -1)) {
        if (!path.empty()) e->attrs.emplace_back("path", std::string(path));
      }
      return true;
    }
    return false;
  }

 private:
  // "loss 4.2648, time 893.76ms, mfu 16.68%": comma-separated "name value" parts.
  bool Iter(std::string_view text, size_t after, int64_t iter, std::vector<ParsedEvent>& out) {
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    const size_t step_index = out.size();
    emit.Add(EventKind::kStep, "", std::nan(""), iter);
    std::string_view rest = text.substr(after);
    for (int parts = 0; parts < 8 && !rest.empty(); ++parts) {
      const size_t comma = rest.find(',');
      const std::string_view part = scan::Trim(rest.substr(0, comma));
      rest = comma == npos ? std::string_view() : rest.substr(comma + 1);
      const size_t sp = part.find(' ');
      if (sp == npos) continue;
      const std::string_view key = part.substr(0, sp);
      std::string_view value = scan::Trim(part.substr(sp + 1));
      if (key == "time" && scan::EndsWith(value, "ms")) {
        if (auto ms = scan::ParseFloat(value.substr(0, value.size() - 2)); ms && !out.empty()) {
          out[step_index].value = *ms / 1000.0;
        }
      } else if (key == "loss") {
        // ", time ..." always follows: a loss at the end of the line was cut by the capture.
        if (comma == npos) continue;
        if (auto v = scan::ParseFloat(value)) emit.Add(EventKind::kLoss, "loss", *v, iter);
      } else if (key == "mfu") {
        if (!scan::EndsWith(value, "%")) continue;
        auto v = scan::ParseLooseNumber(value);
        if (v && *v >= 0) emit.Add(EventKind::kTrainMetric, "mfu", *v, iter);  // -100: not estimated yet
      }
    }
    return true;
  }

  bool Eval(std::string_view text, size_t after, int64_t step, std::vector<ParsedEvent>& out) {
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    std::string_view rest = text.substr(after);
    for (int parts = 0; parts < 8 && !rest.empty(); ++parts) {
      const size_t comma = rest.find(',');
      const std::string_view part = scan::Trim(rest.substr(0, comma));
      rest = comma == npos ? std::string_view() : rest.substr(comma + 1);
      const size_t sp = part.rfind(' ');
      if (sp == npos) continue;
      const auto v = scan::ParseFloat(part.substr(sp + 1));
      if (!v) continue;
      const std::string_view key = part.substr(0, sp);
      if (key == "val loss")
        emit.Add(EventKind::kEvalMetric, "eval_loss", *v, step);
      else if (key == "train loss")
        emit.Add(EventKind::kEvalMetric, "eval_train_loss", *v, step);
    }
    eval_step_ = step;
    after_eval_ = true;
    return true;
  }

  int64_t eval_step_ = -1;
  bool after_eval_ = false;  // the previous line was the eval line
};

}  // namespace

std::unique_ptr<FormatParser> MakeNanoGptParser() { return std::make_unique<NanoGptParser>(); }

}  // namespace ithbat::collect::joblog
