#include "core/event.h"

#include <array>
#include <bit>

namespace ithbat {
namespace {
constexpr std::array<std::string_view, kEventKindCount> kNames = {
    "step", "loss", "train_metric", "eval_metric", "checkpoint_begin", "checkpoint_end", "xid", "gpu_event",
    "log_line", "error", "process_start", "process_exit", "job_start", "job_end", "collector_state", "serving_metric",
};
}  // namespace

std::string_view EventKindName(EventKind k) { return kNames[static_cast<size_t>(k)]; }

std::optional<EventKind> ParseEventKind(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<EventKind>(i);
  }
  return std::nullopt;
}

bool operator==(const Event& a, const Event& b) {
  bool values_equal = (std::isnan(a.value) && std::isnan(b.value)) ||
                      std::bit_cast<uint64_t>(a.value) == std::bit_cast<uint64_t>(b.value);
  return a.time == b.time && a.kind == b.kind && a.identity == b.identity && a.source == b.source &&
         a.step == b.step && values_equal && a.name == b.name && a.text == b.text && a.attrs == b.attrs;
}

}  // namespace ithbat
