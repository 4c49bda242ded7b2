#include "report/chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/core.h>

#include "report/html.h"

namespace ithbat::report {
namespace {

// Geometry of one chart, in SVG user units (the element scales to the page width).
constexpr double kWidth = 960;
constexpr double kLeft = 64, kRight = 28, kTop = 16;
constexpr double kPlotHeight = 190;
constexpr double kAxisHeight = 36;  // tick labels, then the axis title under them
constexpr double kLegendRow = 18;
constexpr int kLegendColumns = 4;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kMinMarkGap = 10;  // between two drawn ticks of one kind (1% of the plot)
constexpr double kMinCrossGap = 5;
constexpr double kLogScaleRatio = 20;  // peak / median of positive values from which the axis is logarithmic  // between two drawn × of one line

// Colour-blind-safe, muted (Okabe–Ito without yellow, then darker variants); peers are grey.
constexpr std::array<const char*, 8> kPalette = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                                 "#56b4e9", "#e69f00", "#7a5195", "#4d4d4d"};
constexpr const char* kPeerColour = "#b9b9b9";

const char* MarkColour(MarkKind k) {
  switch (k) {
    case MarkKind::kCheckpointBegin:
    case MarkKind::kCheckpointEnd: return "#3b6ea8";
    case MarkKind::kError: return "#c0392b";
    case MarkKind::kXid: return "#7b1c1c";
    case MarkKind::kLog: return "#8a8a8a";
  }
  return "#8a8a8a";
}
const char* MarkName(MarkKind k) {
  switch (k) {
    case MarkKind::kCheckpointBegin: return "save begins";
    case MarkKind::kCheckpointEnd: return "save ends";
    case MarkKind::kError: return "job error";
    case MarkKind::kXid: return "Xid / GPU event";
    case MarkKind::kLog: return "log line";
  }
  return "event";
}
const char* MarkClass(MarkKind k) {
  switch (k) {
    case MarkKind::kCheckpointBegin: return "ckpt-begin";
    case MarkKind::kCheckpointEnd: return "ckpt-end";
    case MarkKind::kError: return "error";
    case MarkKind::kXid: return "xid";
    case MarkKind::kLog: return "log";
  }
  return "log";
}
// Lower is drawn first when marks must be left out: faults before saves before log lines.
int MarkPriority(MarkKind k) {
  switch (k) {
    case MarkKind::kXid: return 0;
    case MarkKind::kError: return 1;
    case MarkKind::kCheckpointBegin:
    case MarkKind::kCheckpointEnd: return 2;
    case MarkKind::kLog: return 3;
  }
  return 3;
}

// 1, 2 or 5 × 10^k, the smallest at least `raw`.
double NiceStep(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

TimeNs TimeStep(TimeNs span) {
  static constexpr std::array<TimeNs, 22> kSteps = {
      kNsPerSec / 10, kNsPerSec / 5, kNsPerSec / 2, kNsPerSec,      2 * kNsPerSec,    5 * kNsPerSec,
      10 * kNsPerSec, 15 * kNsPerSec, 30 * kNsPerSec, 60 * kNsPerSec, 120 * kNsPerSec, 300 * kNsPerSec,
      600 * kNsPerSec, 900 * kNsPerSec, 1800 * kNsPerSec, 3600 * kNsPerSec, 7200 * kNsPerSec, 10800 * kNsPerSec,
      21600 * kNsPerSec, 43200 * kNsPerSec, 86400 * kNsPerSec, 7 * 86400 * kNsPerSec};
  for (TimeNs s : kSteps) {
    if (span / s <= 7) return s;
  }
  return kSteps.back();
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// The first `max` code points, with an ellipsis when cut.
std::string CutToChars(std::string_view s, size_t max) {
  if (CodePoints(s) <= max || max < 2) return std::string(s);
  size_t n = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == max - 1) break;
  }
  return std::string(s.substr(0, i)) + "…";
}

// Past the palette, lines repeat its colours dashed, so that 16 lines stay tellable apart.
std::string Dash(size_t colour) {
  return colour >= kPalette.size() ? R"( stroke-dasharray="6 3")" : "";
}

}  // namespace

std::vector<ChartPoint> Downsample(const std::vector<ChartPoint>& points, size_t max_points) {
  max_points = std::max<size_t>(2, max_points - max_points % 2);
  if (points.size() <= max_points) return points;
  const size_t buckets = max_points / 2;
  std::vector<ChartPoint> out;
  out.reserve(max_points);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * points.size() / buckets, hi = (b + 1) * points.size() / buckets;
    if (lo >= hi) continue;
    // A non-finite value wins its bucket (it is evidence: a NaN loss must not vanish).
    size_t mn = lo, mx = lo;
    bool bad = false;
    for (size_t i = lo; i < hi; ++i) {
      if (!std::isfinite(points[i].v)) {
        mn = mx = i;
        bad = true;
        break;
      }
      if (points[i].v < points[mn].v) mn = i;
      if (points[i].v > points[mx].v) mx = i;
    }
    const size_t first = out.size();
    if (bad || mn == mx) {
      out.push_back(points[mn]);
    } else {
      out.push_back(points[std::min(mn, mx)]);
      out.push_back(points[std::max(mn, mx)]);
    }
    // A gap anywhere in the bucket breaks the line before it.
    bool gap = false;
    for (size_t i = lo; i < hi; ++i) gap = gap || points[i].gap_before;
    out[first].gap_before = gap;
  }
  return out;
}

std::string RenderChart(const Chart& chart) {
  const TimeNs from = chart.from, to = chart.to > chart.from ? chart.to : chart.from + kNsPerSec;
  const size_t lines = std::min(chart.lines.size(), kMaxLines);
  std::vector<std::vector<ChartPoint>> drawn(lines);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  size_t cut_points = 0;
  for (size_t i = 0; i < lines; ++i) {
    std::vector<ChartPoint> in;
    for (const auto& p : chart.lines[i].points) {
      if (p.t >= from && p.t <= to) in.push_back(p);
    }
    drawn[i] = Downsample(in);
    if (drawn[i].size() < in.size()) ++cut_points;
    for (const auto& p : drawn[i]) {
      if (!std::isfinite(p.v)) continue;
      lo = std::min(lo, p.v);
      hi = std::max(hi, p.v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  // Positive values whose peak dwarfs their typical level (a loss that explodes, a latency that
  // jumps 100×): a log axis, so that what came before the jump stays readable. Not for values
  // that merely dip towards zero: the median, not the minimum, is the reference.
  std::vector<double> finite;
  for (const auto& d : drawn) {
    for (const auto& p : d) {
      if (std::isfinite(p.v)) finite.push_back(p.v);
    }
  }
  double median = 0;
  if (!finite.empty()) {
    std::nth_element(finite.begin(), finite.begin() + finite.size() / 2, finite.end());
    median = finite[finite.size() / 2];
  }
  const bool log_scale = lo > 0 && median > 0 && hi / median >= kLogScaleRatio;
  const double llo = log_scale ? std::floor(std::log10(lo)) : 0, lhi = log_scale ? std::ceil(std::log10(hi)) : 1;
  if (lo >= 0 && lo <= hi * 0.6) lo = 0;  // rates, shares, counts: from zero unless far above it
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {  // flat: from zero, or around the value
    if (lo > 0) {
      lo = 0;
      hi *= 1.25;
    } else {
      const double pad = std::fabs(hi) > 0 ? std::fabs(hi) * 0.25 : 1;
      hi += pad;
      lo -= lo == 0 ? 0 : pad;
    }
  }
  const double ystep = NiceStep((hi - lo) / 4);
  lo = std::floor(lo / ystep + 1e-9) * ystep;
  hi = std::ceil(hi / ystep - 1e-9) * ystep;
  if (hi <= lo) hi = lo + ystep;

  auto x_of = [&](TimeNs t) {
    return kLeft + kPlotWidth * static_cast<double>(t - from) / static_cast<double>(to - from);
  };
  auto y_of = [&](double v) {
    const double share = log_scale ? (std::log10(v) - llo) / (lhi - llo) : (v - lo) / (hi - lo);
    return kTop + kPlotHeight * (1 - share);
  };
  // Value ticks: every step on a linear axis; 1, 2, 5 × each decade on a log one (1 × only
  // past three decades).
  std::vector<double> yticks;
  if (log_scale) {
    for (double k = llo; k <= lhi; ++k) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m > 1 && lhi - llo > 3) continue;
        const double v = m * std::pow(10.0, k);
        if (v <= std::pow(10.0, lhi) * (1 + 1e-9)) yticks.push_back(v);
      }
    }
  } else {
    for (double v = lo; v <= hi + ystep * 1e-6; v += ystep) yticks.push_back(std::fabs(v) < ystep * 1e-6 ? 0 : v);
  }

  // The legend: lines, then the mark kinds present, then the window.
  struct LegendItem {
    std::string swatch;  // SVG for a 22×10 swatch at (0,0)
    std::string text;    // plain text, escaped when drawn
    size_t chars = 0;    // its length in characters (UTF-8 code points)
  };
  std::vector<LegendItem> legend;
  size_t peers = 0;
  for (size_t i = 0, colour = 0; i < lines; ++i) {
    const auto& l = chart.lines[i];
    if (!l.subject) {
      ++peers;
      continue;
    }
    legend.push_back({fmt::format(R"(<line x1="0" y1="5" x2="22" y2="5" stroke="{}" stroke-width="2"{}/>)",
                                  kPalette[colour % kPalette.size()], Dash(colour)),
                      l.label});
    ++colour;
  }
  if (peers > 0) {
    legend.push_back({fmt::format(R"(<line x1="0" y1="5" x2="22" y2="5" stroke="{}" stroke-width="1.2"/>)", kPeerColour),
                      fmt::format("peers ({})", peers)});
  }
  std::vector<const ChartMark*> marks;
  for (const auto& m : chart.marks) {
    if (m.t >= from && m.t <= to) marks.push_back(&m);
  }
  std::stable_sort(marks.begin(), marks.end(), [](const ChartMark* a, const ChartMark* b) {
    return std::make_pair(MarkPriority(a->kind), a->t) < std::make_pair(MarkPriority(b->kind), b->t);
  });
  // Ticks of one kind closer than kMinMarkGap units share the first one (a job printing an error
  // every step would otherwise paint the plot red); then at most kMaxMarks, faults first.
  std::map<MarkKind, double> last_x;
  size_t merged = 0;
  std::erase_if(marks, [&](const ChartMark* m) {
    const double x = x_of(m->t);
    if (auto it = last_x.find(m->kind); it != last_x.end() && std::fabs(x - it->second) < kMinMarkGap) {
      ++merged;
      return true;
    }
    last_x[m->kind] = x;
    return false;
  });
  const size_t cut_marks = marks.size() > kMaxMarks ? marks.size() - kMaxMarks : 0;
  marks.resize(std::min(marks.size(), kMaxMarks));
  for (MarkKind k : {MarkKind::kCheckpointBegin, MarkKind::kCheckpointEnd, MarkKind::kError, MarkKind::kXid,
                     MarkKind::kLog}) {
    if (std::any_of(marks.begin(), marks.end(), [&](const ChartMark* m) { return m->kind == k; })) {
      legend.push_back({fmt::format(R"(<line x1="11" y1="0" x2="11" y2="10" stroke="{}" stroke-width="2"{}/>)",
                                    MarkColour(k), k == MarkKind::kCheckpointBegin ? R"( stroke-dasharray="3 2")" : ""),
                        MarkName(k)});
    }
  }
  const bool nonfinite = std::any_of(drawn.begin(), drawn.end(), [](const std::vector<ChartPoint>& d) {
    return std::any_of(d.begin(), d.end(), [](const ChartPoint& p) { return !std::isfinite(p.v); });
  });
  if (nonfinite) {
    legend.push_back({R"(<text class="nonfinite" x="11" y="10" text-anchor="middle" fill="#333">×</text>)",
                      "non-finite value (NaN, inf)"});
  }
  const bool shaded = chart.shade_to > chart.shade_from && chart.shade_to >= from && chart.shade_from <= to;
  if (shaded) {
    legend.push_back({R"(<rect x="0" y="0" width="22" height="10" class="shade"/>)", "diagnosis window"});
  }

  // Columns as wide as the longest label needs (about 6.6 units a character at 12 px); a label
  // longer than one column allows is cut, its full text kept in a tooltip.
  size_t longest = 0;
  for (auto& item : legend) {
    item.chars = CodePoints(item.text);
    longest = std::max(longest, item.chars);
  }
  const int columns = longest <= 28 ? kLegendColumns : longest <= 62 ? 2 : 1;
  const size_t max_chars = static_cast<size_t>((kPlotWidth / columns - 34) / 6.6);
  const size_t legend_rows = (legend.size() + columns - 1) / columns;
  const double legend_top = kTop + kPlotHeight + kAxisHeight;
  const double height = legend_top + legend_rows * kLegendRow + 4;

  std::string s = fmt::format(
      R"(<svg class="chart" viewBox="0 0 {:.0f} {:.0f}" width="{:.0f}" height="{:.0f}" role="img" aria-label="{}">)"
      "\n",
      kWidth, height, kWidth, height, Escape(chart.title));
  // Window shade first, under everything.
  if (shaded) {
    const double x0 = x_of(std::max(chart.shade_from, from)), x1 = x_of(std::min(chart.shade_to, to));
    s += fmt::format(R"(<rect class="shade" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>)"
                     "\n",
                     x0, kTop, std::max(1.0, x1 - x0), kPlotHeight);
  }
  // Value grid and labels.
  for (double v : yticks) {
    const double y = y_of(v);
    s += fmt::format(R"(<line class="grid" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/>)"
                     R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)"
                     "\n",
                     kLeft, y, kLeft + kPlotWidth, y, kLeft - 6, y + 4, FormatValue(v));
  }
  // Time ticks.
  const TimeNs tstep = TimeStep(to - from);
  for (TimeNs t = (from / tstep + (from % tstep > 0 ? 1 : 0)) * tstep; t <= to; t += tstep) {
    const double x = x_of(t);
    s += fmt::format(R"(<line class="axis" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/>)"
                     R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)"
                     "\n",
                     x, kTop + kPlotHeight, x, kTop + kPlotHeight + 4, x, kTop + kPlotHeight + 16,
                     FormatClock(t, tstep < kNsPerSec));
  }
  s += fmt::format(R"(<rect class="frame" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>)"
                   "\n",
                   kLeft, kTop, kPlotWidth, kPlotHeight);
  s += fmt::format(R"(<text class="ylabel" x="{:.1f}" y="{:.1f}">{}</text>)"
                   "\n",
                   kLeft, kTop - 4, Escape(chart.y_label + (log_scale ? " (log scale)" : "")));
  s += fmt::format(R"(<text class="ylabel" x="{:.1f}" y="{:.1f}" text-anchor="end">time (UTC)</text>)"
                   "\n",
                   kLeft + kPlotWidth, kTop + kPlotHeight + 29);
  // Event ticks: a faint line across the plot and a solid tick at its foot.
  for (const ChartMark* m : marks) {
    const double x = x_of(m->t);
    s += fmt::format(
        R"(<g class="mark {}"><title>{} {}: {}</title>)"
        R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-opacity="0.45"{}/>)"
        R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="2"/></g>)"
        "\n",
        MarkClass(m->kind), FormatClock(m->t, true), MarkName(m->kind), Escape(m->text), x, kTop, x,
        kTop + kPlotHeight, MarkColour(m->kind), m->kind == MarkKind::kCheckpointBegin ? R"( stroke-dasharray="3 2")" : "",
        x, kTop + kPlotHeight - 8, x, kTop + kPlotHeight, MarkColour(m->kind));
  }
  // Lines: peers first (underneath), then subjects in palette order.
  std::vector<size_t> colour_of(lines, 0);
  for (size_t i = 0, c = 0; i < lines; ++i) {
    if (chart.lines[i].subject) colour_of[i] = c++;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < lines; ++i) {
      const auto& l = chart.lines[i];
      if (l.subject != (pass == 1)) continue;
      const char* colour = l.subject ? kPalette[colour_of[i] % kPalette.size()] : kPeerColour;
      s += fmt::format(R"(<g class="series{}" data-series="{}"><title>{}</title>)", l.subject ? " subject" : " peer", i,
                       Escape(l.label));
      std::vector<std::pair<double, double>> run;  // the current stretch of finite values
      auto flush = [&] {
        if (run.size() == 1) {  // a lone point: a polyline of one point draws nothing
          s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"/>)", run[0].first, run[0].second, colour);
        } else if (run.size() > 1) {
          s += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"{} points=")",
                           colour, l.subject ? "1.6" : "1.1", l.subject ? Dash(colour_of[i]) : "");
          for (size_t k = 0; k < run.size(); ++k) s += fmt::format("{}{:.1f},{:.1f}", k ? " " : "", run[k].first, run[k].second);
          s += "\"/>";
        }
        run.clear();
      };
      const bool dots = drawn[i].size() <= 60;
      double last_cross = -1e9;
      for (const auto& p : drawn[i]) {
        const double x = x_of(p.t);
        if (l.dots) {
          if (std::isfinite(p.v)) {
            s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)", x, y_of(p.v), colour);
            continue;
          }
        } else if (p.gap_before) {
          flush();
        }
        if (!std::isfinite(p.v)) {
          flush();
          if (x - last_cross < kMinCrossGap) continue;
          last_cross = x;
          s += fmt::format(R"(<text class="nonfinite" x="{:.1f}" y="{:.1f}" fill="{}" text-anchor="middle">×</text>)", x,
                           kTop + 9, colour);
          continue;
        }
        const double y = y_of(p.v);
        run.emplace_back(x, y);
        if (dots && l.subject) s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="1.8" fill="{}"/>)", x, y, colour);
      }
      flush();
      s += "</g>\n";
    }
  }
  // Legend.
  for (size_t i = 0; i < legend.size(); ++i) {
    const double x = kLeft + (i % columns) * (kPlotWidth / columns);
    const double y = legend_top + (i / columns) * kLegendRow;
    std::string text = Escape(CutToChars(legend[i].text, max_chars));
    if (legend[i].chars > max_chars) text = "<title>" + Escape(legend[i].text) + "</title>" + text;
    s += fmt::format(R"svg(<g class="legend" transform="translate({:.1f},{:.1f})">{}<text x="28" y="9">{}</text></g>)svg"
                     "\n",
                     x, y, legend[i].swatch, text);
  }
  s += "</svg>\n";
  std::vector<std::string> notes;
  if (chart.lines.size() > lines) notes.push_back(fmt::format("{} more series not drawn", chart.lines.size() - lines));
  if (cut_points > 0) notes.push_back(fmt::format("{} line(s) downsampled to {} points (minimum and maximum kept per interval)", cut_points, kMaxPointsPerLine));
  if (merged > 0) notes.push_back(fmt::format("{} events share a tick with one of their kind just before", merged));
  if (cut_marks > 0) notes.push_back(fmt::format("{} more events not marked", cut_marks));
  if (!notes.empty()) {
    s += "<p class=\"chart-note\">";
    for (size_t i = 0; i < notes.size(); ++i) s += (i ? "; " : "") + notes[i];
    s += ".</p>\n";
  }
  return s;
}

}  // namespace ithbat::report
