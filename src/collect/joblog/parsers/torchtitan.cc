// torchtitan: "[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384
// [grad_norm:  0.83]  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%", with or
// without a "[rankN]:" prefix (every rank may print it: each copy's events carry its rank), the
// checkpoint lines of its checkpointer, and the lines of torch DCP's async checkpoint process
// ("Received async checkpoint request with id=DIR" / "Submitted checkpoint save request for
// checkpoint_id=...DIR...") that torchtitan's async modes run.
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

// "step-10" as the last component of a checkpoint id -> 10.
int64_t StepFromCheckpointId(std::string_view id) {
  while (!id.empty() && id.back() == '/') id.remove_suffix(1);
  const size_t slash = id.rfind('/');
  const std::string_view base = slash == npos ? id : id.substr(slash + 1);
  if (!scan::StartsWith(base, "step-")) return -1;
  const auto v = scan::ParseUint(base.substr(5));
  return v ? *v : -1;
}

// "... in 5.53 seconds." / "... completed in 0.12s" -> seconds.
double SecondsAfterIn(std::string_view text, size_t from) {
  const size_t in = text.find("in ", from);
  if (in == npos) return std::nan("");
  size_t b = in + 3;
  size_t e = b;
  while (e < text.size() && (scan::IsDigit(text[e]) || text[e] == '.')) ++e;
  const auto v = scan::ParseFloat(text.substr(b, e - b));
  return v ? *v : std::nan("");
}

// The phrase opens the log message: at the start of the line or after the logger's "- " / ": " /
// "] " (a quote of the phrase inside other text is not the event).
bool MessageStart(std::string_view text, size_t at) {
  if (at == 0) return true;
  if (at < 2 || text[at - 1] != ' ') return false;
  const char c = text[at - 2];
  return c == '-' || c == ':' || c == ']';
}

std::string_view FirstToken(std::string_view s) {
  s = scan::Trim(s);
  size_t e = 0;
  while (e < s.size() && !scan::IsSpace(s[e])) ++e;
  return s.substr(0, e);
}

constexpr scan::Needle kStepColon{"step:"};
constexpr scan::Needle kHeckpoint{"heckpoint"};
constexpr scan::Needle kTitanTag{"[titan]"};

class TorchtitanParser final : public FormatParser {
 public:
  std::string_view name() const override { return "torchtitan"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view text = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    if (const size_t s = Find(facts, kStepColon, text); s != npos && StepLine(text, s, out)) return true;
    if (const size_t c = Find(facts, kHeckpoint, text); c != npos && CheckpointLine(text, out)) return true;
    // Every line of torchtitan's own logger carries the "[titan]" tag.
    return Find(facts, kTitanTag, text) != npos;
  }

 private:
  bool StepLine(std::string_view text, size_t s, std::vector<ParsedEvent>& out) {
    if (s > 0 && !scan::IsSpace(text[s - 1]) && text[s - 1] != ']') return false;
    const std::string_view rest = text.substr(s);
    // A trainer's "step: 3 loss: 2.1" is not torchtitan's until it has its throughput fields.
    if (Find(rest, "loss:") == npos || (Find(rest, "tps:") == npos && Find(rest, "memory:") == npos))
      return false;
    scan::PairScanner pairs(rest, scan::PairScanner::Style::kColon, 24);
    scan::KeyValue kv;
    if (!pairs.Next(kv) || kv.key != "step") return false;
    // "step: 200" or a fork's "step: 640/644 = 99.3789%".
    std::string_view step_text = kv.value;
    int64_t total = -1;
    if (const size_t slash = step_text.find('/'); slash != npos) {
      if (auto t = scan::ParseUint(step_text.substr(slash + 1))) total = *t;
      step_text = step_text.substr(0, slash);
    }
    const auto step = scan::ParseUint(step_text);
    if (!step) return false;
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e = emit.Add(EventKind::kStep, "", std::nan(""), *step)) {
      if (total >= 0) e->attrs.emplace_back("total_steps", std::to_string(total));
    }
    while (pairs.Next(kv)) {
      const std::string_view k = kv.key;
      // The line ends with "mfu: N%"; any other value at the very end was cut by the capture.
      if (scan::AtEnd(rest, kv.value) && !scan::EndsWith(kv.value, "%")) break;
      if (k == "memory") {
        if (auto bytes = scan::ParseByteSize(kv.value))
          emit.Add(EventKind::kTrainMetric, "memory_bytes", *bytes, *step);
        continue;
      }
      const auto v = scan::ParseLooseNumber(kv.value);
      if (!v) continue;
      if (k == "loss")
        emit.Add(EventKind::kLoss, "loss", *v, *step);
      else if (k == "grad_norm")
        emit.Add(EventKind::kTrainMetric, "grad_norm", *v, *step);
      else if (k == "tps")
        emit.Add(EventKind::kTrainMetric, "tokens_per_second_per_gpu", *v, *step);  // per device
      else if (k == "tflops")
        emit.Add(EventKind::kTrainMetric, "tflops", *v, *step);
      else if (k == "mfu")
        emit.Add(EventKind::kTrainMetric, "mfu", *v, *step);
      else if (k == "lr")
        emit.Add(EventKind::kTrainMetric, "lr", *v, *step);
    }
    return true;
  }

  bool CheckpointLine(std::string_view text, std::vector<ParsedEvent>& out) {
    EventKind kind;
    int64_t step = -1;
    std::string_view path;
    double seconds = std::nan("");
    bool async = false;
    if (const size_t f = Find(text, "Finished saving the checkpoint"); f != npos) {
      kind = EventKind::kCheckpointEnd;
      seconds = SecondsAfterIn(text, f + 30);
    } else if (const size_t l = Find(text, "Last step checkpoint completed"); l != npos) {
      kind = EventKind::kCheckpointEnd;
      seconds = SecondsAfterIn(text, l + 30);
    } else if (Find(text, "Saving the checkpoint") != npos) {
      kind = EventKind::kCheckpointBegin;
    } else if (const size_t a = Find(text, " checkpoint at "); a != npos && Find(text, "Saving a ") != npos) {
      // "Saving a full checkpoint at step 500", "Saving a model only checkpoint in torch.bfloat16 at
      // last step, step 10."
      kind = EventKind::kCheckpointBegin;
      const size_t st = text.rfind("step ");
      if (st != npos) {
        size_t p = st + 5;
        int64_t v = 0;
        if (scan::ReadUint(text, p, v)) step = v;
      }
    } else if (const size_t r = Find(text, "Received async checkpoint request with id=");
               r != npos && MessageStart(text, r)) {
      kind = EventKind::kCheckpointBegin;
      async = true;
      path = FirstToken(text.substr(r + 42));
    } else if (const size_t sub = Find(text, "Submitted checkpoint save request for checkpoint_id=");
               sub != npos && MessageStart(text, sub)) {
      kind = EventKind::kCheckpointEnd;
      async = true;
      const std::string_view rest = text.substr(sub + 52);
      // "_CheckpointRequestIdentifier(checkpoint_id='./outputs/checkpoint/step-1', uuid='...')" or a bare id.
      if (const size_t q = Find(rest, "checkpoint_id='"); q != npos) {
        const size_t close = rest.find('\'', q + 15);
        if (close != npos) path = rest.substr(q + 15, close - q - 15);
      } else {
        path = FirstToken(rest);
      }
    } else {
      return false;
    }
    if (!path.empty() && step < 0) step = StepFromCheckpointId(path);
    scan::Emitter emit(out, scan::StripPrefixes(text).rank);
    if (ParsedEvent* e = emit.Add(kind, "", seconds, step)) {
      if (!path.empty()) e->attrs.emplace_back("path", std::string(path.substr(0, kMaxEventTextBytes)));
      if (async) e->attrs.emplace_back("async", "1");
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<FormatParser> MakeTorchtitanParser() { return std::make_unique<TorchtitanParser>(); }

}  // namespace ithbat::collect::joblog
