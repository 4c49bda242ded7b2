#pragma once
// Shared by the job-output capture tests: the project's own Megatron-style training lines (the
// format of Megatron-LM's iteration log, written here, not copied from anyone's log) and event
// queries over a FakeSink.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/event.h"

namespace ithbat::testing {

// One Megatron-LM iteration line: iteration `iter` of `total`, lm loss `loss`, 500 ms/iteration.
inline std::string MegatronLine(int iter, double loss, int total = 1000) {
  return fmt::format(
      " iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): 500.0 | "
      "learning rate: 3.000000E-04 | global batch size:    32 | lm loss: {:.6E} | loss scale: 1.0 | "
      "grad norm: 1.250 | number of skipped iterations:   0 | number of nan iterations:   0 |",
      iter, total, iter * 32, loss);
}

inline std::vector<Event> OfKind(const std::vector<Event>& events, EventKind kind) {
  std::vector<Event> out;
  for (const auto& e : events) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

// The loss event of `step`, or nullptr.
inline const Event* LossAt(const std::vector<Event>& events, int64_t step) {
  for (const auto& e : events) {
    if (e.kind == EventKind::kLoss && e.step == step) return &e;
  }
  return nullptr;
}

}  // namespace ithbat::testing
