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
  kUnderProvisioned,
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

// A GPU as the diagnosis names it: the node, NVML's index there, and the UUID that survives
// reboots and re-indexing.
struct GpuRef {
  std::string node;
  int32_t index = -1;
  std::string uuid;
  friend bool operator==(const GpuRef&, const GpuRef&) = default;
};

// A rank as the diagnosis names it: global rank, local rank, where it ran and its process.
struct RankRef {
  int32_t rank = -1;
  int32_t local_rank = -1;
  std::string node;
  int32_t pid = -1;
  friend bool operator==(const RankRef&, const RankRef&) = default;
};

struct Subjects {
  std::string job;                       // the job the diagnosis is about ("" for a server or resource)
  std::vector<std::string> nodes;
  std::vector<RankRef> ranks;
  std::vector<GpuRef> gpus;
  std::string resource;                  // mount, NODE/NIC, switch, link, endpoint, or another job
  std::vector<std::string> other_jobs;   // blast radius: other jobs the same resource hurt
};

// What one detector concluded about one incident, with its evidence. The investigator merges
// findings into diagnoses; a finding whose evidence comes from fewer than two collectors never
// carries a verdict other than inconclusive (docs/diagnoses.md, "Rules").
struct Finding {
  std::string detector;
  Verdict verdict = Verdict::kInconclusive;
  Cause cause = Cause::kUnknown;
  Subjects subjects;
  TimeWindow window;               // when the cause acted (start of the first sign to the last)
  std::vector<Evidence> evidence;
  double confidence = 0;           // 0..1
  bool provisional = false;        // e.g. "recipe suspected" until a rerun on other GPUs
  TimeNs provable_at = 0;          // when the last signal it needs was in the store
  std::string summary;             // one sentence: what happened, with the numbers
  // The cost as the detector measured it; the investigator adds the price.
  double lost_gpu_seconds = 0;     // GPU time the cause cost inside the window
  double speedup_with_fix = 1.0;   // step time now / step time with the cause removed (1: none known)
  std::string baseline_origin;     // what "without the cause" was measured on
};

struct Impact {
  double gpu_hours_lost = 0;
  double expected_speedup = 1.0;       // step time now / step time with the cause removed
  double effective_price_per_gpu_hour = 0;
  double productive_share = 1.0;
  std::string baseline_origin;         // where the baseline step time (productive share) came from
  std::string speedup_origin;          // what the step time without the cause was measured on
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
  std::string summary;  // one sentence: what happened, with the numbers
  std::string fix;      // one sentence, from the cause catalogue (docs/diagnoses.md)
  Impact impact;
  TimeNs opened_at = 0;
  TimeNs updated_at = 0;
};

}  // namespace ithbat
