#pragma once
// What detectors produce and the investigator turns into diagnoses. The closed set of causes
// is documented in docs/diagnoses.md; adding one means documenting its meaning, evidence and fix.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ithbat {

enum class Verdict : uint8_t { kJob, kInfrastructure, kInconclusive };

enum class Cause : uint8_t {
  // job
  kDataImbalance,
  kRecipeNumerics,
  kNoLearning,
  kServingConfig,
  kOverProvisioned,
  kInputPipeline,
  kHostBottleneck,
  kCheckpointStrategy,
  kOutOfMemory,
  kHang,
  // infrastructure
  kStorage,
  kNetwork,
  kGpuHardware,
  kThermalPower,
  kNvlink,
  kDriver,
  kSilentDataCorruption,
  kScheduler,
  // neither proven
  kUnknown,
};

std::string_view VerdictName(Verdict v);  // "job", "infrastructure", "inconclusive"
std::string_view CauseName(Cause c);      // snake_case, e.g. "data_imbalance"
std::optional<Verdict> ParseVerdict(std::string_view s);
std::optional<Cause> ParseCause(std::string_view s);

struct TimeWindow {
  TimeNs start = 0;
  TimeNs end = 0;
};

// One signal that supports a finding: what was observed against what was expected.
struct Evidence {
  std::string signal;      // series or event name
  std::string collector;   // which collector produced it (verdicts need two different ones)
  std::string subject;     // the GPU, rank, mount, port it is about
  double observed = 0;
  double expected = 0;     // baseline or peer median
  std::string unit;
  std::string note;        // one sentence a person can read
  TimeWindow window;
};

struct Subjects {
  std::string job;
  std::vector<std::string> nodes;
  std::vector<int32_t> ranks;
  std::vector<std::string> gpus;  // UUIDs
  std::string resource;           // mount, NIC/port, link, endpoint, or another job
};

struct Finding {
  std::string detector;
  Verdict verdict = Verdict::kInconclusive;
  Cause cause = Cause::kUnknown;
  Subjects subjects;
  TimeWindow window;
  std::vector<Evidence> evidence;
  double confidence = 0;  // 0..1
};

struct Impact {
  double gpu_hours_lost = 0;
  double expected_speedup = 1.0;       // step time now / step time with the cause removed
  double effective_price_per_gpu_hour = 0;
  double productive_share = 1.0;
  std::string baseline_origin;         // where the baseline step time came from
};

enum class DiagnosisState : uint8_t { kOpen, kUpdated, kResolved };

struct Diagnosis {
  std::string id;  // stable for the incident
  DiagnosisState state = DiagnosisState::kOpen;
  bool provisional = false;
  Verdict verdict = Verdict::kInconclusive;
  Cause cause = Cause::kUnknown;
  Subjects subjects;
  TimeWindow window;
  std::vector<Evidence> evidence;
  std::string fix;
  Impact impact;
  TimeNs opened_at = 0;
  TimeNs updated_at = 0;
};

}  // namespace ithbat
