// Hugging Face Trainer (and what builds on it: TRL, axolotl, LLaMA-Factory): the python-dict log
// lines, the tqdm training bar, "Saving model checkpoint to DIR", the eval block and the final
// summary dict.
//
// The dicts carry no step. The step is derived from the training bar the Trainer refreshes on
// every optimizer step (stderr, unbuffered) — and only when the order of the Trainer's own calls
// makes it certain: at step N it updates the bar, logs the train dict, evaluates, then saves.
// So a train dict takes the bar's step only if no other train dict and no save came since the
// bar reached it; an eval dict only if no save came since; a save only if no save came since.
// Across fds (bar on stderr, dicts on a block-buffered stdout pipe) the order of arrival is not
// the order of printing, so there the bar is trusted only while dicts keep alternating with bar
// moves (see Dict). Anything else gets step -1 (never a guess).
#include <algorithm>
#include <array>
#include <string>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

using scan::Find;
using scan::npos;

struct DictPair {
  std::string_view key;
  std::string_view value;  // raw token, unquoted; empty for non-scalar values
};

// Parses "{'k': v, 'k2': 'v2', ...}" from `p` (at "{'"). Only pairs whose value is terminated by
// ',' or '}' are kept: on a cut line the last value may itself be cut ("2.59" of "2.593e-05").
size_t ParseDict(std::string_view s, size_t p, std::array<DictPair, 40>& pairs) {
  size_t n = 0;
  size_t i = p + 1;
  while (i < s.size() && n < pairs.size()) {
    scan::SkipSpaces(s, i);
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) break;
    const char q = s[i];
    const size_t key_end = s.find(q, i + 1);
    if (key_end == npos || key_end - i > 128) break;
    const std::string_view key = s.substr(i + 1, key_end - i - 1);
    i = key_end + 1;
    scan::SkipSpaces(s, i);
    if (i >= s.size() || s[i] != ':') break;
    ++i;
    scan::SkipSpaces(s, i);
    if (i >= s.size()) break;
    std::string_view value;
    const char c = s[i];
    if (c == '\'' || c == '"') {
      const size_t close = s.find(c, i + 1);
      if (close == npos) break;
      value = s.substr(i + 1, close - i - 1);
      i = close + 1;
    } else if (scan::StartsWith(s.substr(i), "tensor(")) {
      // "tensor(1.2345, device='cuda:0')": the number, then skip to the closing ')'.
      const size_t b = i + 7;
      size_t e = b;
      while (e < s.size() && s[e] != ',' && s[e] != ')') ++e;
      value = scan::Trim(s.substr(b, e - b));
      const size_t close = s.find(')', b);
      if (close == npos) break;
      i = close + 1;
    } else if (c == '[' || c == '{' || c == '(') {
      int depth = 0;
      for (; i < s.size(); ++i) {
        if (s[i] == '[' || s[i] == '{' || s[i] == '(') ++depth;
        if (s[i] == ']' || s[i] == '}' || s[i] == ')') {
          if (--depth == 0) {
            ++i;
            break;
          }
        }
        if (depth > 8) return n;
      }
      value = {};
    } else {
      const size_t b = i;
      while (i < s.size() && s[i] != ',' && s[i] != '}') ++i;
      value = scan::Trim(s.substr(b, i - b));
    }
    scan::SkipSpaces(s, i);
    if (i >= s.size()) break;  // unterminated: the value may be cut
    if (s[i] != ',' && s[i] != '}') break;
    pairs[n++] = {key, value};
    if (s[i] == '}') break;
    ++i;
  }
  return n;
}

// "checkpoint-1500" or "tmp-checkpoint-1500" as the last path component -> 1500.
int64_t StepFromCheckpointPath(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == npos ? path : path.substr(slash + 1);
  const size_t c = base.rfind("checkpoint-");
  if (c == npos) return -1;
  const auto v = scan::ParseUint(base.substr(c + 11));
  return v ? *v : -1;
}

constexpr scan::Needle kDictOpen{"{'"};
constexpr scan::Needle kCheckpoint{"checkpoint"};
constexpr scan::Needle kOptimizationSteps{"optimization steps = "};

class HfTrainerParser final : public FormatParser {
 public:
  std::string_view name() const override { return "hf_trainer"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    line_base_ = out.size();  // the per-line event cap counts Bar, Dict and Save together
    const std::string_view text = line.text;
    const LineFacts& facts = scan::FactsOf(line);
    bool recognised = false;
    int32_t rank = -1;
    bool have_prefix = false;
    auto prefix = [&]() -> scan::Prefix {
      scan::Prefix p = scan::StripPrefixes(text);
      rank = p.rank;
      have_prefix = true;
      return p;
    };
    // Cheap anchors first (memchr for single bytes, one substring search per phrase family);
    // the bar comes first on a line where the capture glued it to what followed. A bare bar gives its step
    // but does not count as recognised: any tqdm user prints bars, so they are no evidence of the Trainer
    // (while undecided, StreamParser drops the events of a line nobody recognised).
    if (text.find('%') != npos) Bar(prefix().body, line.fd, rank, out);
    if (const size_t d = Find(facts, kDictOpen, text); d != npos) {
      if (!have_prefix) prefix();
      recognised |= Dict(text, d, line.fd, rank, out);
    }
    if (const size_t c = Find(facts, kCheckpoint, text); c != npos) {
      const std::string_view head = text.substr(0, c);
      // "Saving model checkpoint to DIR" opens the logger's message; quoted in other text, it is
      // not a save.
      const bool quoted = c >= 14 && (text[c - 14] == '"' || text[c - 14] == '\'');
      if (scan::EndsWith(head, "Saving model ") && scan::StartsWith(text.substr(c + 10), " to ") && !quoted) {
        if (!have_prefix) prefix();
        Save(text.substr(c + 14), line.fd, rank, out);
        recognised = true;
      } else if (scan::EndsWith(head, "Deleting older ")) {
        recognised = true;  // save_total_limit rotation, after a save
      }
    }
    if (const size_t r = text.find('*'); r != npos) {
      if (const size_t run = Find(text, "***** Running ", r); run != npos) {
        const std::string_view what = text.substr(run + 14);
        if (scan::StartsWith(what, "Evaluation") || scan::StartsWith(what, "Prediction")) {
          in_eval_ = true;
          recognised = true;
        } else if (scan::StartsWith(what, "training")) {
          in_eval_ = false;
          recognised = true;
        }
      }
    }
    if (const size_t t = Find(facts, kOptimizationSteps, text); t != npos) {
      const auto total = scan::ParseLooseNumber(text.substr(t + 21));
      if (total && *total >= 0 && *total < 1e15) {
        train_total_ = static_cast<int64_t>(*total);
        recognised = true;
      }
    }
    return recognised;
  }

 private:
  void Bar(std::string_view body, int fd, int32_t rank, std::vector<ParsedEvent>& out) {
    scan::TqdmBar bar;
    // The Trainer's bars have no description; "Map: 45%|..." (datasets) or "Loading checkpoint
    // shards" must not be taken for the training bar.
    if (!scan::FindTqdmBar(body, bar) || !bar.desc.empty()) return;
    if (train_total_ < 0) {
      if (in_eval_) return;  // the eval loop's bar before any training bar was seen
      train_total_ = bar.total;
    }
    if (bar.total != train_total_ || bar.n == bar_step_) return;
    bar_step_ = bar.n;
    bar_fd_ = fd;
    dict_used_ = false;
    save_seen_ = false;
    if (bar.n <= 0) return;
    scan::Emitter emit(out, rank, line_base_);
    if (ParsedEvent* e = emit.Add(EventKind::kStep, "", std::nan(""), bar.n)) {
      e->attrs.emplace_back("total_steps", std::to_string(bar.total));
    }
  }

  bool Dict(std::string_view text, size_t d, int fd, int32_t rank, std::vector<ParsedEvent>& out) {
    std::array<DictPair, 40> pairs;
    const size_t n = ParseDict(text, d, pairs);
    bool summary = false;
    bool eval = false;
    bool train = false;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view k = pairs[i].key;
      if (k == "train_runtime") summary = true;
      if (scan::StartsWith(k, "eval_") || scan::StartsWith(k, "test_")) eval = true;
      if (k == "loss" || k == "learning_rate" || k == "grad_norm") train = true;
    }
    // The bar (stderr) and the dicts (stdout, through tqdm.write) may come on different fds. Into
    // a pipe Python buffers stdout, so dicts then arrive in bursts long after the bar moved on:
    // across fds the bar's count is used only while dicts keep alternating with bar moves.
    const bool same_fd = fd == bar_fd_;
    scan::Emitter emit(out, rank, line_base_);
    if (summary) {
      // The run's summary: averages over the whole run, not one step's values.
      for (size_t i = 0; i < n; ++i) {
        const auto v = scan::ParseFloat(pairs[i].value);
        if (!v) continue;
        const std::string_view k = pairs[i].key;
        std::string metric = k == "train_runtime" ? "train_runtime_seconds" : scan::SnakeCase(k);
        if (metric.empty()) continue;
        if (ParsedEvent* e = emit.Add(EventKind::kTrainMetric, metric, *v, -1))
          e->attrs.emplace_back("summary", "1");
      }
      return true;
    }
    if (eval) {
      const int64_t step = bar_step_ > 0 && !save_seen_ && (same_fd || timely_) ? bar_step_ : -1;
      for (size_t i = 0; i < n; ++i) {
        const auto v = scan::ParseFloat(pairs[i].value);
        if (!v) continue;
        const std::string_view k = pairs[i].key;
        std::string metric;
        if (scan::StartsWith(k, "eval_"))
          metric = "eval_" + scan::SnakeCase(k.substr(5));
        else if (scan::StartsWith(k, "test_"))
          metric = "eval_test_" + scan::SnakeCase(k.substr(5));
        else
          continue;  // 'epoch' and the like: the train dicts carry them
        emit.Add(EventKind::kEvalMetric, metric, *v, step);
      }
      in_eval_ = false;
      return true;
    }
    if (!train) return false;
    const bool fresh = bar_step_ > 0 && !dict_used_ && !save_seen_;
    const int64_t step = fresh && (same_fd || timely_) ? bar_step_ : -1;
    timely_ = fresh;
    if (fresh) dict_used_ = true;
    for (size_t i = 0; i < n; ++i) {
      const auto v = scan::ParseFloat(pairs[i].value);
      if (!v) continue;
      const std::string_view k = pairs[i].key;
      if (k == "loss") {
        emit.Add(EventKind::kLoss, "loss", *v, step);
      } else if (k == "learning_rate") {
        emit.Add(EventKind::kTrainMetric, "lr", *v, step);
      } else if (k == "grad_norm" || k == "epoch") {
        emit.Add(EventKind::kTrainMetric, k, *v, step);
      } else if (scan::EndsWith(k, "_loss")) {
        const std::string stem = scan::SnakeCase(k.substr(0, k.size() - 5));
        if (!stem.empty()) emit.Add(EventKind::kTrainMetric, "loss_" + stem, *v, step);
      } else {
        // TRL and friends add their own scalars (mean_token_accuracy, rewards/chosen, ...).
        const std::string metric = scan::SnakeCase(k);
        if (!metric.empty()) emit.Add(EventKind::kTrainMetric, metric, *v, step);
      }
    }
    return true;
  }

  void Save(std::string_view rest, int fd, int32_t rank, std::vector<ParsedEvent>& out) {
    // The directory is the rest of the message: the first token (trailing tqdm padding aside).
    std::string_view path = scan::Trim(rest);
    size_t e = 0;
    while (e < path.size() && !scan::IsSpace(path[e])) ++e;
    path = path.substr(0, std::min(e, kMaxEventTextBytes));
    int64_t step = StepFromCheckpointPath(path);
    if (step < 0 && bar_step_ > 0 && !save_seen_ && (fd == bar_fd_ || timely_)) step = bar_step_;
    save_seen_ = true;
    scan::Emitter emit(out, rank, line_base_);
    if (ParsedEvent* e = emit.Add(EventKind::kCheckpointBegin, "", std::nan(""), step)) {
      if (!path.empty()) e->attrs.emplace_back("path", std::string(path));
    }
  }

  size_t line_base_ = 0;     // out.size() when the current line began
  int64_t train_total_ = -1;  // the training bar's total (from the bar or "Total optimization steps")
  int64_t bar_step_ = -1;     // the training bar's latest count
  bool dict_used_ = false;    // a train dict took bar_step_ already
  bool save_seen_ = false;    // a save came after the bar reached bar_step_
  bool in_eval_ = false;      // between "***** Running Evaluation *****" and its dict
  int bar_fd_ = -1;           // the fd the training bar came on
  bool timely_ = false;       // the last train dict came right after a bar move (not in a burst)
};

}  // namespace

std::unique_ptr<FormatParser> MakeHfTrainerParser() { return std::make_unique<HfTrainerParser>(); }

}  // namespace ithbat::collect::joblog
