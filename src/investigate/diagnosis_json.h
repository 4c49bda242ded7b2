#pragma once
// Diagnosis schema v1 (docs/diagnoses.md, "Schema"): the one JSON form shared by `ithbat
// diagnose --json`, `ithbat demo --json`, the HTTP APIs and evidence bundles. Times are RFC 3339
// UTC strings (nanoseconds kept); a GPU is {node, index, uuid}; a rank {rank, local_rank, node,
// pid}. FromJson reads what ToJson wrote and rejects anything else with the path of the fault.
#include <string>

#include <nlohmann/json.hpp>

#include "core/finding.h"
#include "core/result.h"

namespace ithbat::investigate {

inline constexpr const char* kDiagnosisSchema = "ithbat.diagnosis/v1";

nlohmann::json ToJson(const Diagnosis& d);
Result<Diagnosis> DiagnosisFromJson(const nlohmann::json& j);
// Checks one JSON value against schema v1 (every required field, its type, enum values):
// the test every output path runs through. The error names the first offending path.
Status ValidateDiagnosisJson(const nlohmann::json& j);

std::string_view DiagnosisStateName(DiagnosisState s);  // "open", "updated", "resolved"

}  // namespace ithbat::investigate
