#include "core/finding.h"

#include <array>
#include <utility>

namespace ithbat {
namespace {
constexpr std::array<std::pair<Cause, std::string_view>, 20> kCauses = {{
    {Cause::kDataImbalance, "data_imbalance"},
    {Cause::kRecipeNumerics, "recipe_numerics"},
    {Cause::kNoLearning, "no_learning"},
    {Cause::kServingConfig, "serving_config"},
    {Cause::kOverProvisioned, "over_provisioned"},
    {Cause::kUnderProvisioned, "under_provisioned"},
    {Cause::kInputPipeline, "input_pipeline"},
    {Cause::kHostBottleneck, "host_bottleneck"},
    {Cause::kCheckpointStrategy, "checkpoint_strategy"},
    {Cause::kOutOfMemory, "out_of_memory"},
    {Cause::kHang, "hang"},
    {Cause::kStorage, "storage"},
    {Cause::kNetwork, "network"},
    {Cause::kGpuHardware, "gpu_hardware"},
    {Cause::kThermalPower, "thermal_power"},
    {Cause::kNvlink, "nvlink"},
    {Cause::kDriver, "driver"},
    {Cause::kSilentDataCorruption, "silent_data_corruption"},
    {Cause::kScheduler, "scheduler"},
    {Cause::kUnknown, "unknown"},
}};
}  // namespace

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kJob: return "job";
    case Verdict::kInfrastructure: return "infrastructure";
    case Verdict::kInconclusive: return "inconclusive";
  }
  return "inconclusive";
}

std::optional<Verdict> ParseVerdict(std::string_view s) {
  for (auto v : {Verdict::kJob, Verdict::kInfrastructure, Verdict::kInconclusive}) {
    if (VerdictName(v) == s) return v;
  }
  return std::nullopt;
}

std::string_view CauseName(Cause c) {
  for (const auto& [cause, name] : kCauses) {
    if (cause == c) return name;
  }
  return "unknown";
}

std::optional<Cause> ParseCause(std::string_view s) {
  for (const auto& [cause, name] : kCauses) {
    if (name == s) return cause;
  }
  return std::nullopt;
}

}  // namespace ithbat
