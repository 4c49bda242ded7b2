// The HTML incident report (src/report): content order, one chart per chartable piece of
// evidence with a line per subject series, the window shaded, the job's events marked, counters
// as rates and ratios, table rows where a chart makes no sense, escaping of hostile data, no
// external reference, the empty report, and the bounds (lines, points, diagnoses).
#include "report/report.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fmt/core.h>
#include <string>
#include <vector>

#include "report/chart.h"
#include "report/html.h"
#include "sample_incident.h"

namespace ithbat::report {
namespace {

using testutil::kS;
using testutil::kT0;

size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

// The text of the <figure> of evidence `k` (1-based) of diagnosis 1, or "" when there is none.
std::string Figure(const std::string& html, int k) {
  const auto start = html.find("<figure class=\"evidence\" id=\"d1-e" + std::to_string(k) + "\"");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</figure>", start) - start);
}

// The numbers of a polyline's points attribute.
std::vector<std::pair<double, double>> Points(const std::string& polyline) {
  std::vector<std::pair<double, double>> out;
  const auto p = polyline.find("points=\"");
  if (p == std::string::npos) return out;
  const std::string pts = polyline.substr(p + 8, polyline.find('"', p + 8) - p - 8);
  size_t i = 0;
  while (i < pts.size()) {
    size_t used = 0;
    const double x = std::stod(pts.substr(i), &used);
    i += used + 1;  // the comma
    const double y = std::stod(pts.substr(i), &used);
    i += used + 1;  // the space
    out.emplace_back(x, y);
  }
  return out;
}

std::vector<std::string> Polylines(const std::string& s) {
  std::vector<std::string> out;
  for (size_t p = s.find("<polyline"); p != std::string::npos; p = s.find("<polyline", p + 1)) {
    out.push_back(s.substr(p, s.find("/>", p) - p));
  }
  return out;
}

ReportOptions SampleOptions() {
  ReportOptions o;
  o.title = "Sample";
  o.from = kT0;
  o.to = kT0 + testutil::kSampleTicks * kS;
  o.generated_at = o.to;
  o.source = "test";
  return o;
}

std::string SampleReport(const std::vector<Diagnosis>& ds = {testutil::SampleDiagnosis()},
                         ReportOptions o = SampleOptions()) {
  testutil::SyntheticFleet fleet;
  testutil::BuildSampleFleet(fleet);
  const auto view = fleet.TakeView();
  return RenderReport(view, ds, o);
}

TEST(Report, VerdictAndCauseComeFirstThenBreakdownEvidenceFixCost) {
  const std::string html = SampleReport();
  const auto verdict = html.find("<span class=\"side infrastructure\">infrastructure</span>");
  const auto cause = html.find("<span class=\"cause\">storage</span>");
  const auto confirmed = html.find("<span class=\"confirmed\">confirmed</span> · open");
  const auto breakdown = html.find("<h3>Per-rank step breakdown</h3>");
  const auto evidence = html.find("<h3>Evidence</h3>");
  const auto first_svg = html.find("<svg");
  const auto fix = html.find("<h3>Fix</h3>");
  const auto cost = html.find("<h3>Cost</h3>");
  ASSERT_NE(verdict, std::string::npos);
  ASSERT_NE(cause, std::string::npos);
  ASSERT_NE(confirmed, std::string::npos);
  ASSERT_NE(breakdown, std::string::npos);
  ASSERT_NE(first_svg, std::string::npos);
  EXPECT_LT(verdict, cause);
  EXPECT_LT(cause, breakdown);
  EXPECT_LT(breakdown, evidence);
  EXPECT_LT(evidence, first_svg);
  EXPECT_LT(first_svg, fix);
  EXPECT_LT(fix, cost);
  // Subjects, the fix with its origin, the cost with its origins.
  EXPECT_NE(html.find("rank 2 (local 2) on gpu-a01, pid 102"), std::string::npos);
  EXPECT_NE(html.find("gpu-a01 GPU 1 <span class=\"muted\">GPU-1</span>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>Resource</th><td>/mnt/ckpt</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>Other jobs hurt</th><td>78</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("Move checkpoints off the degraded mount"), std::string::npos);
  EXPECT_NE(html.find("From the cause catalogue (docs/diagnoses.md) for <b>storage</b>"), std::string::npos);
  EXPECT_NE(html.find("$3.59 per productive GPU-hour"), std::string::npos);
  EXPECT_NE(html.find("×1.12"), std::string::npos);
  EXPECT_NE(html.find("measured on: the saves before the incident on the same mount"), std::string::npos);
  EXPECT_NE(html.find("Baseline: median of 40 steps before the incident"), std::string::npos);
}

TEST(Report, BreakdownListsEveryRankAndSaysWhatIsEstimated) {
  const std::string html = SampleReport();
  const auto start = html.find("<table class=\"breakdown\">");
  ASSERT_NE(start, std::string::npos);
  const std::string table = html.substr(start, html.find("</table>", start) - start);
  EXPECT_EQ(Count(table, "<tr><td class=\"num\">"), 2u);           // ranks 0 and 3
  EXPECT_EQ(Count(table, "<tr class=\"subject\"><td class=\"num\">"), 2u);  // ranks 1 and 2
  // No NCCL profiler series in the sample: the collective wait is estimated, marked ~.
  EXPECT_EQ(Count(table, "~"), 5u);  // 4 rows + the header's "~estimated"
  EXPECT_NE(table.find("estimated: GPU busy − wait"), std::string::npos);
  // The rotating straggler's 0.4 s lag every 4th tick: ~10% of each rank's time, plus the I/O of ranks 1-2.
  EXPECT_NE(table.find("45%"), std::string::npos);
}

TEST(Report, OneChartPerChartableEvidenceTableRowsForTheRest) {
  const std::string html = SampleReport();
  EXPECT_EQ(Count(html, "<svg"), 5u);
  EXPECT_EQ(Count(html, "</svg>"), 5u);
  for (int k = 1; k <= 5; ++k) EXPECT_NE(Figure(html, k), "") << "evidence " << k << " has no chart";
  EXPECT_EQ(Figure(html, 6), "");
  EXPECT_EQ(Figure(html, 7), "");
  // E6, summed error counters: their deltas, the Xid of GPU 2 first; E7: said to have no series.
  EXPECT_NE(html.find("<code>ithbat_gpu_xid_errors_total GPU 2: +1 (from 0 to 1)</code>"), std::string::npos);
  EXPECT_NE(html.find("<code>ithbat_gpu_ecc_errors_total: 2 series unchanged</code>"), std::string::npos);
  EXPECT_NE(html.find("no stored series or event of this name"), std::string::npos);
}

TEST(Report, ALineForEachSubjectSeriesPeersGrey) {
  const std::string html = SampleReport();
  // E3, GPU utilisation on gpu-a01: GPUs 1 and 2 are the subjects, 0 and 3 their peers.
  const std::string util = Figure(html, 3);
  EXPECT_EQ(Count(util, "<g class=\"series subject\""), 2u);
  EXPECT_EQ(Count(util, "<g class=\"series peer\""), 2u);
  EXPECT_EQ(Count(util, "<polyline"), 4u);
  EXPECT_NE(util.find("<title>GPU 1</title><polyline"), std::string::npos);
  EXPECT_NE(util.find("<title>GPU 2</title><polyline"), std::string::npos);
  EXPECT_NE(util.find(">GPU 1</text>"), std::string::npos);  // in the legend
  EXPECT_NE(util.find(">peers (2)</text>"), std::string::npos);
  // Every line spans the range: 120 samples a line.
  for (const auto& pl : Polylines(util)) EXPECT_EQ(Points(pl).size(), 120u);
}

TEST(Report, CountersAreDrawnAsRatesAndRatiosOfIncreases) {
  const std::string html = SampleReport();
  // E4: the lag counter grows 0.4 s in one tick of four: over 5 s windows a rate of 0.08 or 0.16
  // per second (axis to 0.2), neither the raw 0.4 per tick nor its running total (up to 48).
  const std::string lag = Figure(html, 4);
  EXPECT_NE(lag.find(">0.2</text>"), std::string::npos);
  EXPECT_EQ(lag.find(">0.4</text>"), std::string::npos);
  EXPECT_EQ(lag.find(">50</text>"), std::string::npos);
  EXPECT_NE(lag.find(">per second, over 5 s</text>"), std::string::npos);
  // 120 samples: the first full 5 s window ends at the 6th; one point a sample after it.
  for (const auto& pl : Polylines(lag)) EXPECT_EQ(Points(pl).size(), 115u);
  // E1: fsync seconds per call — 1.2 on ranks 1-2 in the window, 0.2 elsewhere; the axis tops at 1.5.
  const std::string io = Figure(html, 1);
  EXPECT_NE(io.find(">1.5</text>"), std::string::npos);
  EXPECT_EQ(io.find(">2</text>"), std::string::npos);
  EXPECT_EQ(Count(io, "<g class=\"series subject\""), 2u);
  // fsyncs only during the two saves (and one every 20 s): the line breaks where no call was
  // made instead of joining the saves across the idle time, two stretches or more a series.
  EXPECT_GE(Count(io, "<polyline"), 8u);
  // E2: the saves from their begin/end events, 5 s each; E5: the loss rank 0 printed.
  EXPECT_NE(Figure(html, 2).find("save duration, seconds"), std::string::npos);
  EXPECT_EQ(Count(Figure(html, 2), "<polyline"), 0u);  // separate saves: dots, not a line
  EXPECT_EQ(Count(Figure(html, 2), "r=\"3.5\""), 2u);
  EXPECT_NE(Figure(html, 5).find("<g class=\"series subject\" data-series=\"0\"><title>rank 0</title>"), std::string::npos);
  EXPECT_EQ(Count(Figure(html, 5), "<polyline"), 1u);
}

TEST(Report, WindowShadedAndEventsMarked) {
  const std::string html = SampleReport();
  // The axis spans the data (kT0 .. kT0+120 s): the window starts 50 s in, at 64 + 868 × 50/120.
  const std::string x = fmt::format("<rect class=\"shade\" x=\"{:.1f}\"", 64 + 868.0 * 50 / 120);
  for (int k = 1; k <= 5; ++k) {
    const std::string fig = Figure(html, k);
    EXPECT_NE(fig.find(x), std::string::npos) << "evidence " << k;
    EXPECT_EQ(Count(fig, "<g class=\"mark ckpt-begin\">"), 2u) << "evidence " << k;
    EXPECT_EQ(Count(fig, "<g class=\"mark ckpt-end\">"), 2u) << "evidence " << k;
    EXPECT_EQ(Count(fig, "<g class=\"mark error\">"), 1u) << "evidence " << k;
    EXPECT_EQ(Count(fig, "<g class=\"mark xid\">"), 1u) << "evidence " << k;
  }
  EXPECT_NE(html.find("nccl_timeout watchdog caught collective operation timeout"), std::string::npos);
}

TEST(Report, HostileDataComesOutInert) {
  testutil::SyntheticFleet fleet;
  const std::string evil = "<script>alert(1)</script>";
  fleet.Series("n1", "ithbat_test_gauge", MetricType::kGauge, {{"job_id", evil}, {"name", "</text>" + evil}},
               {1, 2, 3});
  fleet.Series("n1", "ithbat_test_gauge", MetricType::kGauge, {{"job_id", evil}, {"name", "ok"}}, {3, 2, 1});
  const auto view = fleet.TakeView();
  Diagnosis d;
  d.verdict = Verdict::kJob;
  d.cause = Cause::kHang;
  d.subjects.job = evil;
  d.subjects.nodes = {"n1"};
  d.subjects.resource = "\" onmouseover=\"alert(1)";
  d.summary = evil;
  d.fix = "<b>bold</b>";
  d.window = {kT0, kT0 + 2 * kS};
  Evidence e;
  e.signal = "ithbat_test_gauge";
  e.subject = "n1";
  e.note = "<img src=x onerror=alert(1)> see https://evil.example/x.png";
  e.unit = "<u>";
  d.evidence = {e};
  ReportOptions o;
  o.title = evil;
  o.source = "javascript:alert(1)//<iframe src=http://evil.example>";
  o.from = kT0;
  o.to = kT0 + 3 * kS;
  const std::string html = RenderReport(view, {d}, o);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<iframe"), std::string::npos);
  EXPECT_EQ(html.find("<b>bold"), std::string::npos);
  EXPECT_EQ(html.find("<u>"), std::string::npos);
  EXPECT_EQ(html.find("\" onmouseover"), std::string::npos);
  EXPECT_EQ(html.find("://"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(1)&gt; see https&#58;//evil.example/x.png"), std::string::npos);
  // The hostile label is in the chart's legend, as text.
  ASSERT_EQ(Count(html, "<svg"), 1u);
  EXPECT_NE(html.find(">name=&lt;/text&gt;&lt;script&gt;"), std::string::npos);
}

TEST(Report, NoExternalReferenceAnywhere) {
  const std::string html = SampleReport();
  EXPECT_EQ(html.find("://"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_NE(html.find("content=\"default-src 'none'; style-src 'unsafe-inline'\""), std::string::npos);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
}

TEST(Report, NoDiagnosisPage) {
  const std::string html = SampleReport({});
  EXPECT_NE(html.find("<h2>No diagnosis</h2>"), std::string::npos);
  EXPECT_NE(html.find("2027-01-15 08:00:00 UTC"), std::string::npos);  // the window it looked at
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<section class=\"diagnosis"), std::string::npos);
  EXPECT_NE(html.find("<dt>Diagnoses</dt><dd>0</dd>"), std::string::npos);
}

TEST(Report, LongSeriesAreDownsampledKeepingTheirSpike) {
  testutil::SyntheticFleet fleet;
  std::vector<double> v(20'000, 1.0);
  v[12'345] = 10;  // one spike a downsampler must keep (10× the level: a linear axis)
  fleet.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, {{"gpu", "0"}}, v, kT0, 10 * kNsPerMs);
  const auto view = fleet.TakeView();
  Diagnosis d;
  d.cause = Cause::kUnknown;
  d.subjects.nodes = {"n1"};
  d.window = {kT0 + 100 * kS, kT0 + 150 * kS};
  d.evidence = {testutil::SampleEvidence("ithbat_gpu_utilization_ratio", "gpu", "n1", 10, 1, "ratio", "")};
  ReportOptions o;
  o.from = kT0;
  o.to = kT0 + 200 * kS;
  const std::string html = RenderReport(view, {d}, o);
  const auto lines = Polylines(html);
  ASSERT_EQ(lines.size(), 1u);
  const auto pts = Points(lines[0]);
  EXPECT_LE(pts.size(), kMaxPointsPerLine);
  EXPECT_GE(pts.size(), 200u);  // flat stretches give one point per interval, not two
  double top = 1e9;
  for (const auto& [x, y] : pts) top = std::min(top, y);
  // The spike survives: it tops the 0..10 axis, at the plot's upper edge (y = 16).
  EXPECT_NEAR(top, 16, 0.06);
  EXPECT_NE(html.find("downsampled to 600 points"), std::string::npos);
}

TEST(Report, AtMostSixteenLinesSubjectsFirst) {
  testutil::SyntheticFleet fleet;
  for (int g = 0; g < 40; ++g) {
    fleet.Series("n1", "ithbat_gpu_utilization_ratio", MetricType::kGauge, {{"gpu", std::to_string(g)}},
                 {0.5, 0.6, 0.7});
  }
  const auto view = fleet.TakeView();
  Diagnosis d;
  d.subjects.nodes = {"n1"};
  d.subjects.gpus = {GpuRef{"n1", 33, ""}, GpuRef{"n1", 39, ""}};
  d.window = {kT0, kT0 + 2 * kS};
  d.evidence = {testutil::SampleEvidence("ithbat_gpu_utilization_ratio", "gpu", "n1", 0, 0, "ratio", "")};
  ReportOptions o;
  o.from = kT0;
  o.to = kT0 + 3 * kS;
  const std::string html = RenderReport(view, {d}, o);
  EXPECT_EQ(Count(html, "<g class=\"series"), kMaxLines);
  EXPECT_EQ(Count(html, "<g class=\"series subject\""), 2u);
  EXPECT_NE(html.find("<title>GPU 33</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>GPU 39</title>"), std::string::npos);
  EXPECT_NE(html.find("24 more not drawn (subjects first)"), std::string::npos);
}

TEST(Report, OutputIsBoundedWhateverTheInput) {
  Diagnosis d = testutil::SampleDiagnosis();
  while (d.evidence.size() < 60) d.evidence.push_back(d.evidence[d.evidence.size() % 5]);
  d.summary = std::string(1 << 20, 'x');  // a megabyte of summary
  const std::vector<Diagnosis> many(100, d);
  const std::string html = SampleReport(many);
  EXPECT_LE(Count(html, "<svg"), kMaxChartsPerReport);
  EXPECT_EQ(Count(html, "<section class=\"diagnosis"), kMaxDiagnoses);
  EXPECT_NE(html.find("68 more diagnoses not shown"), std::string::npos);
  EXPECT_NE(html.find("36 more evidence items not shown"), std::string::npos);
  EXPECT_NE(html.find("chart budget (64) is spent"), std::string::npos);
  EXPECT_LT(html.size(), 8u << 20);
}

TEST(Chart, DownsampleKeepsExtremesInOrder) {
  std::vector<ChartPoint> in;
  for (int i = 0; i < 10'000; ++i) in.push_back({static_cast<TimeNs>(i), std::sin(i / 100.0)});
  in[777].v = -5;
  in[9'001].v = std::nan("");
  const auto out = Downsample(in, 600);
  EXPECT_LE(out.size(), 600u);
  EXPECT_GE(out.size(), 300u);
  bool low = false, nan = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(out[i - 1].t, out[i].t);
    }
    low = low || out[i].v == -5;
    nan = nan || std::isnan(out[i].v);
  }
  EXPECT_TRUE(low);
  EXPECT_TRUE(nan);
  EXPECT_EQ(Downsample({{1, 1}, {2, 2}}, 600).size(), 2u);
}

TEST(Chart, NonFiniteValuesBreakTheLineAndAreMarked) {
  Chart c;
  c.from = 0;
  c.to = 10 * kS;
  c.lines = {{"loss", {{1 * kS, 1}, {2 * kS, 2}, {3 * kS, std::nan("")}, {4 * kS, 2}, {5 * kS, 1}}, true}};
  const std::string svg = RenderChart(c);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(Count(svg, "class=\"nonfinite\""), 2u);  // the × on the plot and in the legend
  EXPECT_NE(svg.find(">non-finite value (NaN, inf)</text>"), std::string::npos);
}

TEST(Chart, ValuesSpanningDecadesGetALogAxis) {
  Chart c;
  c.from = 0;
  c.to = 4 * kS;
  c.lines = {{"loss", {{0, 3}, {1 * kS, 2.5}, {2 * kS, 2.4}, {3 * kS, 700}}, true}};
  const std::string log = RenderChart(c);
  EXPECT_NE(log.find("(log scale)"), std::string::npos);
  for (const char* tick : {">1</text>", ">10</text>", ">100</text>", ">1000</text>"}) {
    EXPECT_NE(log.find(tick), std::string::npos) << tick;
  }
  // 2.5 and 2.4 stay apart on it (on a linear 0..800 axis they would share a pixel row).
  const auto pts = Points(Polylines(log).at(0));
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_GT(pts[2].second - pts[1].second, 0.5);
  c.lines[0].points[3].v = 30;  // a peak 11× the median: linear
  EXPECT_EQ(RenderChart(c).find("(log scale)"), std::string::npos);
  // Values that dip towards zero (0.001 against a typical 0.1) are not a reason for a log axis.
  c.lines[0].points = {{0, 0.1}, {1 * kS, 0.12}, {2 * kS, 0.001}, {3 * kS, 0.15}};
  EXPECT_EQ(RenderChart(c).find("(log scale)"), std::string::npos);
}

TEST(Chart, DenseEventsShareTicksAndMarksAreBounded) {
  Chart c;
  c.from = 0;
  c.to = 100 * kS;
  c.lines = {{"x", {{0, 1}, {100 * kS, 2}}, true}};
  // 300 errors within 0.4 s (3.5 units of the 868-unit plot: under one tick's gap of 10), then
  // one every 2 s (17.4 units apart): the burst is one tick, the others are all drawn.
  for (int i = 0; i < 300; ++i) c.marks.push_back({10 * kS + i * kNsPerMs, MarkKind::kError, "e"});
  for (int i = 0; i < 40; ++i) c.marks.push_back({20 * kS + i * 2 * kS, MarkKind::kError, "e"});
  const std::string dense = RenderChart(c);
  EXPECT_EQ(Count(dense, "<g class=\"mark error\">"), 41u);
  EXPECT_NE(dense.find("299 events share a tick"), std::string::npos);
  // Past kMaxMarks, faults win over saves and log lines: three kinds of 80 ticks 1.25 s apart
  // (10.85 units: none merged) and one Xid: 241 ticks, 41 left out, never the Xid.
  Chart wide = c;
  wide.marks.clear();
  for (MarkKind k : {MarkKind::kLog, MarkKind::kCheckpointBegin, MarkKind::kCheckpointEnd}) {
    for (int i = 0; i < 80; ++i) wide.marks.push_back({i * 1250 * kNsPerMs, k, "x"});
  }
  wide.marks.push_back({55 * kS, MarkKind::kXid, "xid"});
  const std::string many = RenderChart(wide);
  EXPECT_EQ(Count(many, "<g class=\"mark xid\">"), 1u);
  EXPECT_EQ(Count(many, "<g class=\"mark "), kMaxMarks);
  EXPECT_EQ(Count(many, "<g class=\"mark log\">"), 39u);  // log lines go first
  EXPECT_NE(many.find("41 more events not marked"), std::string::npos);
}

TEST(Html, EscapeCutsLongTextAndDropsControls) {
  EXPECT_EQ(Escape("a<b>&\"'\x01\x7f:x://y"), "a&lt;b&gt;&amp;&quot;&#39;:x&#58;//y");
  const std::string long_text(kMaxTextBytes + 100, 'a');
  EXPECT_EQ(Escape(long_text), std::string(kMaxTextBytes, 'a') + "…");
  // Not cut inside a UTF-8 sequence.
  std::string utf8(kMaxTextBytes - 1, 'a');
  utf8 += "é";  // 2 bytes: crosses the limit
  EXPECT_EQ(Escape(utf8), std::string(kMaxTextBytes - 1, 'a') + "…");
  EXPECT_EQ(FormatValue(1.98e9), "1.98G");
  EXPECT_EQ(FormatValue(12345), "12.3k");
  EXPECT_EQ(FormatValue(0.766), "0.766");
  EXPECT_EQ(FormatValue(1234), "1234");
  EXPECT_EQ(FormatValue(999.97), "1000");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

}  // namespace
}  // namespace ithbat::report
