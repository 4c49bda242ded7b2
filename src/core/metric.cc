#include "core/metric.h"

#include "core/labels.h"

namespace ithbat {

std::string_view MetricTypeName(MetricType t) { return t == MetricType::kCounter ? "counter" : "gauge"; }

Status ValidateMetricDesc(const MetricDesc& desc) {
  if (!IsValidMetricName(desc.name)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "invalid metric name '{}'", desc.name);
  }
  if (desc.help.empty() || desc.help.find('\n') != std::string::npos) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}' needs a one-line help text", desc.name);
  }
  std::string_view base = desc.name;
  if (desc.type == MetricType::kCounter) {
    if (!base.ends_with("_total")) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "counter '{}' must end in _total", desc.name);
    }
    base.remove_suffix(6);
  } else if (base.ends_with("_total")) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "gauge '{}' must not end in _total", desc.name);
  }
  if (!desc.unit.empty() && !base.ends_with("_" + desc.unit)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}' with unit '{}' must end in _{}", desc.name,
                      desc.unit, desc.unit);
  }
  for (const auto& l : desc.label_names) {
    if (!IsValidLabelName(l)) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}': invalid label name '{}'", desc.name, l);
    }
  }
  return Ok();
}

}  // namespace ithbat
