// fp16 dynamic loss scalers. Three families print a skipped step:
//   DeepSpeed  "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
//              (older "[deepscale]"; ZeRO "fp16 dynamic loss scale overflow! Skipping step. ...";
//              hysteresis: "Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1")
//   apex       "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0"
//              (old FP16_Optimizer: "OVERFLOW! Skipping step. Attempted loss scale: X, reducing to Y")
//   Megatron   no message: the iteration line counts "number of skipped iterations: N" and shows
//              "loss scale: S" (fp16 warm-up skips the first iterations while the scale drops).
// The floor: DeepSpeed raises "Current loss scale already at minimum - cannot decrease scale
// anymore" (or, without raise_error_at_min_scale, prints "reducing to X" with X equal to the
// attempted scale); a scale at or below 1 is the default floor everywhere.
#include <cmath>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"
#include "collect/joblog/parsers/signals_scan.h"

namespace ithbat::collect::joblog {
namespace {

using signals::AddAttr;

constexpr uint32_t kSkipping = 1u << 0;
constexpr uint32_t kMinimum = 1u << 1;
constexpr uint32_t kSkippedIterations = 1u << 2;
constexpr std::string_view kAnchors[] = {"kipping step", "already at minimum", "skipped iterations:"};
constexpr signals::AnchorFilter kFilter{kAnchors[0], kAnchors[1], kAnchors[2]};
constexpr auto kMasks = MasksOf(kAnchors);

// apex prints one line per scaler index; the floor shows as the same scale twice in a row.
constexpr int kApexScalers = 8;

class LossScaleParser final : public FormatParser {
 public:
  LossScaleParser() {
    for (double& s : apex_last_) s = std::nan("");
  }
  std::string_view name() const override { return "loss_scale"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    if (line.facts != nullptr && !line.facts->MayContainAny(kMasks)) return false;
    const uint32_t hits = kFilter.Scan(line.text);
    if (hits == 0) return false;
    bool recognised = false;
    if (hits & kSkipping) recognised |= ParseSkip(line.text, out);
    if ((hits & kMinimum) && signals::Contains(line.text, "loss scale already at minimum")) {
      out.push_back(signals::ErrorEvent(kErrorLossScaleMin, line.text, signals::LinePrefixRank(line.text)));
      recognised = true;
    }
    if ((hits & kSkippedIterations) && !(hits & kSkipping)) recognised |= ParseMegatron(line.text, out);
    return recognised;
  }

 private:
  bool ParseSkip(std::string_view t, std::vector<ParsedEvent>& out) {
    const auto from = signals::NumberAfter(t, "Attempted loss scale:");
    auto to = signals::NumberAfter(t, "reducing loss scale to");
    if (!to) to = signals::NumberAfter(t, "reducing to");
    if (!from && !to) return false;  // "Skipping step" without scaler numbers: not a scaler line
    const int32_t rank = signals::LinePrefixRank(t);
    ParsedEvent e = signals::ErrorEvent(kErrorGradOverflow, t, rank);
    if (from) AddAttr(e, "from_scale", *from);
    if (to) AddAttr(e, "to_scale", *to);
    if (auto r = signals::DigitsAfter(t, "! Rank "); !r.empty()) AddAttr(e, "rank", r);
    const auto scaler = signals::IntAfter(t, "loss scaler ");
    if (scaler) AddAttr(e, "scaler", static_cast<double>(*scaler));
    if (auto h = signals::IntAfter(t, "hysteresis is ")) AddAttr(e, "hysteresis", static_cast<double>(*h));
    out.push_back(std::move(e));

    // With hysteresis left the scale is kept: the new scale is the attempted one.
    const double scale = to ? *to : *from;
    if (std::isfinite(scale)) out.push_back(signals::MetricEvent(EventKind::kTrainMetric, "loss_scale", scale, rank));

    bool at_min = false;
    if (to) {
      at_min = *to <= 1.0 || (from && *to >= *from);
      if (!from && scaler && *scaler >= 0 && *scaler < kApexScalers) {
        double& last = apex_last_[*scaler];
        at_min = at_min || (!std::isnan(last) && *to >= last);
        last = *to;
      }
    }
    if (at_min) {
      ParsedEvent m = signals::ErrorEvent(kErrorLossScaleMin, t, rank);
      AddAttr(m, "scale", *to);
      out.push_back(std::move(m));
    }
    return true;
  }

  // " iteration       10/ 1000000 | ... | loss scale: 8388608.0 | number of skipped iterations:  10 | ..."
  static bool ParseMegatron(std::string_view t, std::vector<ParsedEvent>& out) {
    const auto skipped = signals::IntAfter(t, "number of skipped iterations:");
    if (!skipped || *skipped <= 0) return false;
    int64_t step = -1;
    if (auto it = signals::IntAfter(t, "iteration ")) step = *it;
    const int32_t rank = signals::LinePrefixRank(t);
    const auto scale = signals::NumberAfter(t, "loss scale:");
    ParsedEvent e = signals::ErrorEvent(kErrorGradOverflow, t, rank);
    e.step = step;
    AddAttr(e, "skipped_iterations", static_cast<double>(*skipped));
    if (scale) AddAttr(e, "to_scale", *scale);
    out.push_back(std::move(e));
    if (scale && std::isfinite(*scale)) {
      out.push_back(signals::MetricEvent(EventKind::kTrainMetric, "loss_scale", *scale, rank, step));
      if (*scale <= 1.0) {
        ParsedEvent m = signals::ErrorEvent(kErrorLossScaleMin, t, rank);
        m.step = step;
        AddAttr(m, "scale", *scale);
        out.push_back(std::move(m));
      }
    }
    return true;
  }

  double apex_last_[kApexScalers];
};

}  // namespace

std::unique_ptr<FormatParser> MakeLossScaleParser() { return std::make_unique<LossScaleParser>(); }

}  // namespace ithbat::collect::joblog
