// `key: value` / `key=value` lines of trainers no built-in parser knows ("step=120 loss=2.31
// lr=3e-4", "{"step": 5, "loss": 1.2}", "iter 100: loss: 2.3 | tok/s: 5120"). Runs only while no
// framework owns the stream. A line fires only with a step-ish key (step, iter, iteration,
// global_step, it, update, ...), a loss-ish key (any key containing "loss"), or both epoch and
// batch; otherwise "pid=123 port=8080" lines and prose would turn into metrics.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"
#include "collect/joblog/parsers/signals_scan.h"

namespace ithbat::collect::joblog {
namespace {

using signals::AddAttr;
using signals::IsAlpha;
using signals::IsDigit;

constexpr size_t kMaxKeyBytes = 48;
constexpr size_t kMaxPairs = 32;          // pairs read from one line
constexpr size_t kMaxGenericEvents = 16;  // events emitted for one line

// Trivially constructible: a line's pairs live in an uninitialised stack array.
struct Pair {
  const char* key;
  size_t key_len;
  double value;
  char unit;      // 'm' = ms, 's' = seconds, '%', or 0
  int64_t total;  // "step: 5/100" → 100; -1 when absent
  std::string_view Key() const { return {key, key_len}; }
};

// Byte classes, one table lookup per byte in the scan loop.
enum : uint8_t { kKeyChar = 1, kBoundary = 2, kValueEnd = 4, kLetter = 8 };
constexpr std::array<uint8_t, 256> kClass = [] {
  std::array<uint8_t, 256> c{};
  for (int b = 0; b < 256; ++b) {
    const char ch = static_cast<char>(b);
    if (IsAlpha(ch)) c[b] |= kKeyChar | kLetter;
    if (IsDigit(ch) || ch == '_' || ch == '.' || ch == '/' || ch == '-') c[b] |= kKeyChar;
    for (char x : std::string_view(" \t|,{([;'\":")) {
      if (ch == x) c[b] |= kBoundary;
    }
    for (char x : std::string_view(" \t,|;)]}'\"")) {
      if (ch == x) c[b] |= kValueEnd;
    }
  }
  return c;
}();
inline bool Is(char c, uint8_t cls) { return (kClass[static_cast<unsigned char>(c)] & cls) != 0; }
bool IsValueEnd(char c) { return Is(c, kValueEnd); }

// A line can only fire with a step-ish, loss-ish or epoch key: one pass of these anchors rejects
// everything else before any key is read.
constexpr std::string_view kGateAnchors[] = {"step", "Step", "STEP", "iter", "Iter", "ITER", "loss", "Loss", "LOSS",
                                             "poch", "POCH", "pdat", " it=", " it:", "\tit=", "|it=", "'it'", "\"it\""};
constexpr signals::AnchorFilter kGate{kGateAnchors[0],  kGateAnchors[1],  kGateAnchors[2],  kGateAnchors[3],
                                      kGateAnchors[4],  kGateAnchors[5],  kGateAnchors[6],  kGateAnchors[7],
                                      kGateAnchors[8],  kGateAnchors[9],  kGateAnchors[10], kGateAnchors[11],
                                      kGateAnchors[12], kGateAnchors[13], kGateAnchors[14], kGateAnchors[15],
                                      kGateAnchors[16], kGateAnchors[17]};
// The same anchors as pair masks: when the line's facts rule them all out, the scan is skipped.
constexpr auto kGateMasks = MasksOf(kGateAnchors);
constexpr auto kGatePicks = [] {
  std::array<size_t, std::size(kGateAnchors)> picks{};
  for (size_t i = 0; i < picks.size(); ++i) picks[i] = scan::RarestByte(kGateAnchors[i]);
  return picks;
}();

// A key at `i` starts a field: line start (after indentation), or after '|' ',' ';' '{'.
bool FieldStart(std::string_view t, size_t i) {
  size_t k = i;
  while (k > 0 && t[k - 1] == ' ') --k;
  if (k == 0) return true;
  const char c = t[k - 1];
  return c == '|' || c == ',' || c == ';' || c == '{';
}

// Lower-case snake_case of a key, ≤ kMaxKeyBytes; empty when it has no letters.
size_t SnakeCase(std::string_view key, char* out) {
  size_t n = 0;
  bool letter = false;
  for (char c : key) {
    if (n == kMaxKeyBytes) break;
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if ((c >= 'a' && c <= 'z') || IsDigit(c)) {
      letter |= c >= 'a';
      out[n++] = c;
    } else if (n > 0 && out[n - 1] != '_') {
      out[n++] = '_';
    }
  }
  while (n > 0 && out[n - 1] == '_') --n;
  return letter ? n : 0;
}

// What a (snake_case) key means; one binary search per key.
enum class KeyRole : uint8_t { kOther, kStep, kIdentity, kTokens, kSamples, kLoss, kLr, kGradNorm, kStepTime };
struct KeyEntry {
  std::string_view name;
  KeyRole role;
};
// Identity keys name a process or a place, not a training quantity; kept sorted by name.
constexpr KeyEntry kKeys[] = {
    {"avg_loss", KeyRole::kLoss},
    {"batch_loss", KeyRole::kLoss},
    {"batch_time", KeyRole::kStepTime},
    {"device", KeyRole::kIdentity},
    {"dt", KeyRole::kStepTime},
    {"gid", KeyRole::kIdentity},
    {"global_iter", KeyRole::kStep},
    {"global_rank", KeyRole::kIdentity},
    {"global_step", KeyRole::kStep},
    {"globalstep", KeyRole::kStep},
    {"gnorm", KeyRole::kGradNorm},
    {"gpu", KeyRole::kIdentity},
    {"grad_l2_norm", KeyRole::kGradNorm},
    {"grad_norm", KeyRole::kGradNorm},
    {"grad_norm_total", KeyRole::kGradNorm},
    {"gradnorm", KeyRole::kGradNorm},
    {"id", KeyRole::kIdentity},
    {"it", KeyRole::kStep},
    {"iter", KeyRole::kStep},
    {"iter_time", KeyRole::kStepTime},
    {"iteration", KeyRole::kStep},
    {"job_id", KeyRole::kIdentity},
    {"learning_rate", KeyRole::kLr},
    {"learningrate", KeyRole::kLr},
    {"line", KeyRole::kIdentity},
    {"lineno", KeyRole::kIdentity},
    {"lm_loss", KeyRole::kLoss},
    {"local_rank", KeyRole::kIdentity},
    {"loss", KeyRole::kLoss},
    {"loss_train", KeyRole::kLoss},
    {"lr", KeyRole::kLr},
    {"max_steps", KeyRole::kIdentity},
    {"mean_loss", KeyRole::kLoss},
    {"node", KeyRole::kIdentity},
    {"node_rank", KeyRole::kIdentity},
    {"num_updates", KeyRole::kStep},
    {"pid", KeyRole::kIdentity},
    {"port", KeyRole::kIdentity},
    {"ppid", KeyRole::kIdentity},
    {"rank", KeyRole::kIdentity},
    {"reduced_train_loss", KeyRole::kLoss},
    {"running_loss", KeyRole::kLoss},
    {"samples_per_sec", KeyRole::kSamples},
    {"samples_per_second", KeyRole::kSamples},
    {"samples_s", KeyRole::kSamples},
    {"samples_sec", KeyRole::kSamples},
    {"seed", KeyRole::kIdentity},
    {"sps", KeyRole::kSamples},
    {"step", KeyRole::kStep},
    {"step_time", KeyRole::kStepTime},
    {"step_time_s", KeyRole::kStepTime},
    {"tid", KeyRole::kIdentity},
    {"time_per_iter", KeyRole::kStepTime},
    {"time_per_step", KeyRole::kStepTime},
    {"tok_per_sec", KeyRole::kTokens},
    {"tok_s", KeyRole::kTokens},
    {"tok_sec", KeyRole::kTokens},
    {"tokens_per_s", KeyRole::kTokens},
    {"tokens_per_sec", KeyRole::kTokens},
    {"tokens_per_second", KeyRole::kTokens},
    {"tokens_s", KeyRole::kTokens},
    {"tokens_sec", KeyRole::kTokens},
    {"toks_s", KeyRole::kTokens},
    {"total_loss", KeyRole::kLoss},
    {"total_steps", KeyRole::kIdentity},
    {"tps", KeyRole::kTokens},
    {"train_loss", KeyRole::kLoss},
    {"train_loss_step", KeyRole::kLoss},
    {"train_step", KeyRole::kStep},
    {"trainer_global_step", KeyRole::kStep},
    {"training_loss", KeyRole::kLoss},
    {"uid", KeyRole::kIdentity},
    {"update", KeyRole::kStep},
    {"v_num", KeyRole::kIdentity},
    {"version", KeyRole::kIdentity},
    {"world_size", KeyRole::kIdentity},
    {"wps", KeyRole::kTokens}};
static_assert(std::is_sorted(std::begin(kKeys), std::end(kKeys),
                             [](const KeyEntry& x, const KeyEntry& y) { return x.name < y.name; }));

KeyRole Classify(std::string_view k) {
  const auto it = std::lower_bound(std::begin(kKeys), std::end(kKeys), k,
                                   [](const KeyEntry& e, std::string_view key) { return e.name < key; });
  return it != std::end(kKeys) && it->name == k ? it->role : KeyRole::kOther;
}

// Reads the value after a separator into `p`; false when it is not a number. `colon_ends`:
// "iter 100: ..." — a ':' may follow a value that came without separator.
bool ReadValue(std::string_view v, size_t* consumed, Pair& p, bool colon_ends = false) {
  const size_t start_size = v.size();
  v = signals::SkipSpaces(v);
  if (!v.empty() && (v[0] == '\'' || v[0] == '"')) v.remove_prefix(1);
  if (v.empty() || !(IsDigit(v[0]) || v[0] == '-' || v[0] == '+' || v[0] == '.' || IsAlpha(v[0]))) return false;
  std::string_view tok = signals::NumberToken(v);
  if (tok.empty() || tok.size() > 40) return false;
  p.unit = 0;
  p.total = -1;
  std::optional<double> num = signals::Num(tok);
  if (!num) {
    for (std::string_view unit : {"ms", "sec", "s"}) {
      if (tok.size() > unit.size() && tok.ends_with(unit)) {
        num = signals::Num(tok.substr(0, tok.size() - unit.size()));
        if (num) {
          p.unit = unit == "ms" ? 'm' : 's';
          break;
        }
      }
    }
  }
  if (!num) return false;
  p.value = *num;
  std::string_view rest = v.substr(tok.size());
  // Thousands groups: "tps: 7,282" (a ',' then exactly three digits, no space).
  if (rest.size() >= 4 && rest[0] == ',' && tok.size() <= 3 &&
      tok.find_first_not_of("0123456789") == std::string_view::npos) {
    int64_t whole = static_cast<int64_t>(*num);
    while (rest.size() >= 4 && rest[0] == ',' && IsDigit(rest[1]) && IsDigit(rest[2]) && IsDigit(rest[3]) &&
           (rest.size() == 4 || !IsDigit(rest[4])) && whole < 1'000'000'000'000'000) {
      whole = whole * 1000 + (rest[1] - '0') * 100 + (rest[2] - '0') * 10 + (rest[3] - '0');
      rest.remove_prefix(4);
    }
    p.value = static_cast<double>(whole);
  }
  if (rest.starts_with("%")) {
    p.unit = '%';
    rest.remove_prefix(1);
  } else if (rest.starts_with("/") && rest.size() > 1 && IsDigit(rest[1])) {
    size_t used = 0;
    p.total = signals::LeadingInt(rest.substr(1), &used).value_or(-1);
    rest.remove_prefix(1 + used);
  } else if (p.unit == 0) {
    // "12 ms" / "0.5 s" with a space.
    for (std::string_view unit : {" ms", " s"}) {
      if (rest.starts_with(unit) && (rest.size() == unit.size() || IsValueEnd(rest[unit.size()]))) {
        p.unit = unit == " ms" ? 'm' : 's';
        rest.remove_prefix(unit.size());
        break;
      }
    }
  }
  if (!rest.empty() && !IsValueEnd(rest[0]) && !(colon_ends && rest[0] == ':' && (rest.size() == 1 || rest[1] == ' ')))
    return false;  // "12:34:56", "1.2.3", "5x"
  *consumed = start_size - rest.size();
  return true;
}

class GenericParser final : public FormatParser {
 public:
  std::string_view name() const override { return "generic"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view t = line.text;
    if (std::memchr(t.data(), ':', t.size()) == nullptr && std::memchr(t.data(), '=', t.size()) == nullptr) return false;
    bool gate = false;
    if (line.facts != nullptr) {
      // The facts rule most anchors out; the few left are searched for one by one.
      for (size_t a = 0; a < std::size(kGateAnchors) && !gate; ++a)
        gate = line.facts->MayContain(kGateMasks[a]) && scan::FindAt(t, kGateAnchors[a], kGatePicks[a]) != scan::npos;
    } else {
      gate = kGate.Scan(t) != 0;
    }
    if (!gate && !t.starts_with("it=") && !t.starts_with("it:")) return false;

    Pair pairs[kMaxPairs];
    size_t count = 0;
    const size_t n = t.size();
    for (size_t i = 0; i < n && count < kMaxPairs;) {
      if (!Is(t[i], kLetter) || (i > 0 && !Is(t[i - 1], kBoundary))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n && j - i <= kMaxKeyBytes && Is(t[j], kKeyChar)) ++j;
      if (j - i > kMaxKeyBytes) {  // not a key: skip the whole run
        while (j < n && Is(t[j], kKeyChar)) ++j;
        i = j;
        continue;
      }
      // "| learning rate: 3e-4 | lm loss: 2.3 |": at the start of a field, a key may be up to
      // five words, if the words end in ':' or '='.
      if (FieldStart(t, i) && j + 1 < n && t[j] == ' ' && Is(t[j + 1], kLetter)) {
        size_t e = j;
        for (int words = 1; words < 5 && e + 1 < n && t[e] == ' ' && Is(t[e + 1], kLetter); ++words) {
          size_t w = e + 1;
          while (w < n && w - i <= kMaxKeyBytes && Is(t[w], kKeyChar)) ++w;
          if (w - i > kMaxKeyBytes) break;
          e = w;
          if (e < n && (t[e] == ':' || t[e] == '=')) {
            j = e;
            break;
          }
        }
      }
      std::string_view key = t.substr(i, j - i);
      while (!key.empty() && (key.back() == '.' || key.back() == '-' || key.back() == '/')) key.remove_suffix(1);
      size_t k = j;
      if (k < n && (t[k] == '\'' || t[k] == '"')) ++k;
      while (k < n && t[k] == ' ' && k - j < 2) ++k;
      size_t consumed = 0;
      bool ok = false;
      Pair& p = pairs[count];
      if (k < n && (t[k] == ':' || t[k] == '=') && (k + 1 >= n || (t[k + 1] != '=' && t[k + 1] != ':'))) {
        ok = ReadValue(t.substr(k + 1), &consumed, p);
        consumed += k + 1;
      } else if (k > j && k < n && IsDigit(t[k])) {
        // "iter 100: loss 4.08, ..." — only step and loss words take a value without separator.
        // A ':' may close the number of a step word ("iter 100:" labels the line) but not that of
        // a loss word: in "Validation loss 6312:  0.1499" the number is part of the label (an
        // iteration), not the loss.
        char buf[kMaxKeyBytes];
        const size_t len = SnakeCase(key, buf);
        const KeyRole role = Classify(std::string_view(buf, len));
        if (role == KeyRole::kStep || role == KeyRole::kLoss) {
          ok = ReadValue(t.substr(k), &consumed, p, /*colon_ends=*/role == KeyRole::kStep);
          consumed += k;
        }
      }
      if (ok) {
        p.key = key.data();
        p.key_len = key.size();
        ++count;
        i = consumed;
      } else {
        i = j;
      }
    }
    if (count == 0) return false;
    return Emit(t, std::span<const Pair>(pairs, count), out);
  }

 private:
  static bool Emit(std::string_view t, std::span<const Pair> pairs, std::vector<ParsedEvent>& out) {
    struct Named {
      char name[kMaxKeyBytes];
      size_t len;
      KeyRole role;
    };
    Named names[kMaxPairs];
    int64_t step = -1;
    int64_t total = -1;
    bool loss = false, epoch = false, batch = false;
    std::optional<double> epoch_value;
    for (size_t i = 0; i < pairs.size(); ++i) {
      names[i].len = SnakeCase(pairs[i].Key(), names[i].name);
      const std::string_view k(names[i].name, names[i].len);
      names[i].role = Classify(k);
      if (step < 0 && names[i].role == KeyRole::kStep && pairs[i].value >= 0 &&
          pairs[i].value == std::floor(pairs[i].value) && pairs[i].value < 9e15) {
        step = static_cast<int64_t>(pairs[i].value);
        total = pairs[i].total;
      }
      if (k.find("loss") != std::string_view::npos) loss = true;
      if (k == "epoch") {
        epoch = true;
        epoch_value = pairs[i].value;
      }
      if (k == "batch" || k == "batch_idx" || k == "batch_index") batch = true;
    }
    if (step < 0 && !loss && !(epoch && batch)) return false;

    const int32_t rank = signals::LinePrefixRank(t);
    const size_t first = out.size();
    auto room = [&] { return out.size() - first < kMaxGenericEvents; };
    if (step >= 0) {
      ParsedEvent e = signals::MetricEvent(EventKind::kStep, "", std::nan(""), rank, step);
      if (total >= 0) AddAttr(e, "total_steps", static_cast<double>(total));
      if (epoch_value) AddAttr(e, "epoch", *epoch_value);
      out.push_back(std::move(e));
    }
    bool have_loss = false;
    for (size_t i = 0; i < pairs.size() && room(); ++i) {
      const std::string_view k(names[i].name, names[i].len);
      const KeyRole role = names[i].role;
      if (k.empty() || role == KeyRole::kStep || role == KeyRole::kIdentity) continue;
      const Pair& p = pairs[i];
      EventKind kind = EventKind::kTrainMetric;
      std::string name;
      double value = p.value;
      if (role == KeyRole::kTokens) {
        name = "tokens_per_second";
      } else if (role == KeyRole::kSamples) {
        name = "samples_per_second";
      } else if (role == KeyRole::kLoss) {
        if (have_loss) continue;
        have_loss = true;
        kind = EventKind::kLoss;
        name = "loss";
      } else if (role == KeyRole::kLr) {
        name = "lr";
      } else if (role == KeyRole::kGradNorm) {
        name = "grad_norm";
      } else if (role == KeyRole::kStepTime || (k == "time" && (p.unit == 'm' || p.unit == 's'))) {
        name = "step_time_seconds";
        if (p.unit == 'm') value /= 1000.0;
      } else if (k.starts_with("eval_") || k.starts_with("val_") || k.starts_with("valid_") ||
                 k.starts_with("validation_") || k.starts_with("test_")) {
        kind = EventKind::kEvalMetric;
        name = "eval_" + std::string(k.substr(k.find('_') + 1));
      } else if (const size_t at = k.find("loss"); at != std::string_view::npos) {
        // "aux_loss" → "loss_aux", "loss_kl" stays.
        if (at == 0) {
          name = std::string(k);
        } else {
          std::string part(k.substr(0, at));
          while (!part.empty() && part.back() == '_') part.pop_back();
          name = "loss_" + part + std::string(k.substr(at + 4));
        }
      } else {
        name = std::string(k);
      }
      if (name.size() > kMaxKeyBytes) continue;
      out.push_back(signals::MetricEvent(kind, name, value, rank, step));
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<FormatParser> MakeGenericParser() { return std::make_unique<GenericParser>(); }

}  // namespace ithbat::collect::joblog
