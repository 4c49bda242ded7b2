#pragma once
// Typed events: what happened at one instant (a step ended, a checkpoint began, an Xid, a
// process exit), tagged with identity when collected. Samples are numbers over time; events
// are facts with meaning, kept in the store's event log.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/identity.h"
#include "core/time.h"

namespace ithbat {

enum class EventKind : uint8_t {
  kStep,             // a training step completed (step, value = step seconds if known)
  kLoss,             // training loss (value)
  kTrainMetric,      // another scalar the job printed: lr, grad_norm, tokens_per_second (name)
  kEvalMetric,       // an evaluation scalar (name, value)
  kCheckpointBegin,  // a save started (attrs: path)
  kCheckpointEnd,    // a save finished (attrs: path, bytes)
  kXid,              // NVIDIA Xid/SXid from the kernel log or NVML (value = code)
  kGpuEvent,         // other NVML critical events (name)
  kLogLine,          // a raw captured line (text), redacted before it is stored
  kError,            // an error the job reported (name = class: oom, nccl_timeout, nan_loss, ...)
  kProcessStart,
  kProcessExit,      // value = exit code
  kJobStart,
  kJobEnd,
  kCollectorState,   // a collector went down or came back (name = collector, text = reason)
  kServingMetric,    // an inference server's periodic stats line (name: running_requests, ...)
  // New kinds go at the end: the store's event log keeps the number.
};
inline constexpr int kEventKindCount = static_cast<int>(EventKind::kServingMetric) + 1;

std::string_view EventKindName(EventKind k);  // snake_case: "step", "checkpoint_begin", ...
std::optional<EventKind> ParseEventKind(std::string_view name);

struct Event {
  TimeNs time = 0;
  EventKind kind = EventKind::kLogLine;
  Identity identity;
  std::string source;  // the collector that saw it
  int64_t step = -1;   // training step when known at collection time
  double value = std::nan("");
  std::string name;    // metric name or class, depending on kind
  std::string text;    // free text (bounded by the store)
  std::vector<std::pair<std::string, std::string>> attrs;

  friend bool operator==(const Event& a, const Event& b);  // NaN values compare equal
};

// One step of one rank: [start, end) on the realtime clock.
struct StepSpan {
  int64_t step = -1;
  TimeNs start = 0;
  TimeNs end = 0;
  friend bool operator==(const StepSpan&, const StepSpan&) = default;
};

}  // namespace ithbat
