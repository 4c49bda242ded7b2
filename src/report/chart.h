#pragma once
// One evidence chart as inline SVG: lines over time (one per rank or GPU), the diagnosis window
// shaded, the job's events as vertical ticks, time and value axes and a legend. Pure drawing:
// what to draw is decided in evidence_data.h. Bounded: at most kMaxLines lines of at most
// kMaxPointsPerLine points each and kMaxMarks event ticks, whatever the input holds.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/time.h"

namespace ithbat::report {

inline constexpr size_t kMaxLines = 16;
inline constexpr size_t kMaxPointsPerLine = 600;
inline constexpr size_t kMaxMarks = 200;

struct ChartPoint {
  TimeNs t = 0;
  double v = 0;
  bool gap_before = false;  // no data between the previous point and this one: the line breaks
};

struct ChartLine {
  std::string label;             // legend text (data: escaped when drawn)
  std::vector<ChartPoint> points;  // in time order; non-finite values are drawn as × at the top
  bool subject = true;           // a subject of the diagnosis (coloured) or a peer (grey)
  bool dots = false;             // separate occurrences (one save, one eval): dots, never joined
};

enum class MarkKind { kCheckpointBegin, kCheckpointEnd, kError, kXid, kLog };

struct ChartMark {
  TimeNs t = 0;
  MarkKind kind = MarkKind::kLog;
  std::string text;  // hover text (data: escaped when drawn)
};

struct Chart {
  std::string title;     // e.g. the signal
  std::string y_label;   // e.g. "rate, /s"
  TimeNs from = 0, to = 0;          // the time axis
  TimeNs shade_from = 0, shade_to = 0;  // the diagnosis window (not drawn when empty)
  std::vector<ChartLine> lines;
  std::vector<ChartMark> marks;
};

// Min/max per bucket: at most `max_points` points (an even number ≥ 2), keeping every bucket's
// extremes in time order so that spikes survive. Returns the input when it is small enough.
std::vector<ChartPoint> Downsample(const std::vector<ChartPoint>& points, size_t max_points = kMaxPointsPerLine);

// The <svg> element (no XML namespace attribute: inline SVG in HTML needs none, and the
// document holds no URL). Lines beyond kMaxLines, points beyond kMaxPointsPerLine and marks
// beyond kMaxMarks are not drawn; the caption under the chart says how many were left out.
std::string RenderChart(const Chart& chart);

}  // namespace ithbat::report
