#pragma once
// The incident report: one self-contained HTML file an operator can mail, archive or open on an
// air-gapped site — the operator's proof in an SLA dispute (issue 7, item 6). Per diagnosis, in
// order: the verdict (side, cause, provisional or confirmed, state, subjects, window, summary),
// the per-rank step breakdown of its job, each piece of evidence as an inline SVG chart (or a
// table row where a chart makes no sense), the fix and the cost, each with where it comes from.
//
// Guarantees (tests/report): no external reference (inline CSS and SVG, no script, a
// Content-Security-Policy that forbids loading anything); every string from the data is
// HTML-escaped; the output is bounded (diagnoses, evidence items, lines, points, marks, rows).
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/time.h"
#include "detect/fleet_view.h"

namespace ithbat::report {

struct ReportOptions {
  std::string title;        // the page's heading ("" gives "Ithbat incident report")
  TimeNs from = 0, to = 0;  // the window the data covers (to <= from: taken from the diagnoses)
  TimeNs generated_at = 0;
  std::string source;       // where the data came from, e.g. a bundle path
};

// Bounds on what one report draws; what is left out is counted on the page.
inline constexpr size_t kMaxDiagnoses = 32;
inline constexpr size_t kMaxEvidencePerDiagnosis = 24;
inline constexpr size_t kMaxChartsPerReport = 64;
inline constexpr size_t kMaxBreakdownRows = 256;
inline constexpr size_t kMaxLogMarks = 40;  // more log lines than this in a chart are noise: not marked

std::string RenderReport(const detect::FleetView& view, const std::vector<Diagnosis>& diagnoses,
                         const ReportOptions& options);

}  // namespace ithbat::report
