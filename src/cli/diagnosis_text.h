#pragma once
// Diagnoses for a person at a terminal (`ithbat diagnose`): the verdict first, then what is
// involved, when, why (each piece of evidence observed against expected), the fix and the cost.
// Colour is ANSI SGR, on only when asked (the command decides from --color and isatty).
#include <cstdio>
#include <string>
#include <vector>

#include "core/finding.h"

namespace ithbat::cli {

std::string FormatDiagnosisText(const Diagnosis& d, bool color);
// Every diagnosis, separated by a blank line; "no diagnosis" when there is none.
std::string FormatDiagnosesText(const std::vector<Diagnosis>& ds, bool color);

// --color auto|always|never: "auto" colours a terminal unless NO_COLOR is set.
bool UseColor(const std::string& mode, std::FILE* out);
// Every diagnosis to `out`: schema v1 lines (json), else as FormatDiagnosesText.
void PrintDiagnoses(const std::vector<Diagnosis>& ds, bool json, bool color, std::FILE* out);

}  // namespace ithbat::cli
