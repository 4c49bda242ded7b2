#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/core.h>

#include "detect/breakdown/step_breakdown.h"
#include "detect/jobs.h"
#include "investigate/causes.h"
#include "report/chart.h"
#include "report/evidence_data.h"
#include "report/html.h"

namespace ithbat::report {
namespace {

// Restrained on purpose: this page is read as proof, printed, and pasted into tickets.
constexpr const char* kStyle = R"css(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1d1d1f; background: #fff; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 0; }
h3 { font-size: 15px; margin: 22px 0 8px; border-bottom: 1px solid #e3e3e3; padding-bottom: 3px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0 18px; color: #444; }
dl.meta dt { color: #777; }
dl.meta dd { margin: 0; }
nav ol { padding-left: 22px; margin: 6px 0 0; }
section.diagnosis { border-top: 3px solid #d0d0d0; margin-top: 28px; padding-top: 14px; }
section.diagnosis.job { border-top-color: #2f6aa3; }
section.diagnosis.infrastructure { border-top-color: #b3541e; }
.verdict { display: flex; flex-wrap: wrap; align-items: baseline; gap: 10px; }
.side { font-weight: 700; letter-spacing: .04em; text-transform: uppercase; font-size: 13px; padding: 2px 8px;
        border-radius: 3px; color: #fff; background: #777; }
.side.job { background: #2f6aa3; }
.side.infrastructure { background: #b3541e; }
.cause { font-size: 20px; font-weight: 600; }
.state { color: #555; }
.state .provisional { color: #8a5a00; font-weight: 600; }
p.summary { font-size: 15px; margin: 8px 0 10px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #ececec; vertical-align: top; }
th { color: #555; font-weight: 600; background: #fafafa; }
table.kv th { width: 150px; background: none; }
table.breakdown td:nth-child(2) { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.subject td { background: #fff7e6; }
tr.how th { font-weight: 400; font-size: 11px; color: #777; }
.muted, .origin, p.chart-note, p.drawn { color: #666; font-size: 12.5px; }
.origin { margin: 2px 0 8px; }
figure { margin: 16px 0 10px; }
figcaption { font-size: 13px; margin-bottom: 4px; }
figcaption code, td code { font-size: 12px; background: #f4f4f4; padding: 0 3px; border-radius: 2px; overflow-wrap: anywhere; }
table.evidence td:nth-child(2) { width: 24%; }
table.evidence td:nth-child(4) { min-width: 7em; overflow-wrap: anywhere; }
table.evidence td:nth-child(5), table.evidence td:nth-child(6) { min-width: 6em; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart .grid { stroke: #ededed; stroke-width: 1; }
svg.chart .axis { stroke: #999; stroke-width: 1; }
svg.chart .frame { fill: none; stroke: #c8c8c8; stroke-width: 1; }
svg.chart .tick { font-size: 11px; fill: #555; }
svg.chart .ylabel { font-size: 11px; fill: #444; }
svg.chart .shade { fill: #f0b429; fill-opacity: .18; }
svg.chart .legend text { font-size: 12px; fill: #333; }
svg.chart .nonfinite { font-size: 13px; font-weight: 700; }
section.none { margin-top: 28px; padding: 18px 20px; border: 1px solid #d9d9d9; border-radius: 4px; background: #fafafa; }
footer { margin-top: 36px; color: #888; font-size: 12px; }
@media print { main { padding: 0; } section.diagnosis { break-before: page; } figure { break-inside: avoid; } }
)css";

constexpr TimeNs kPadMin = 60 * kNsPerSec;  // context either side of a diagnosis window

std::string Pct(double share) { return fmt::format("{:.0f}%", 100 * share); }

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? std::string(sep) : "") + v[i];
  return s;
}

std::string VerdictClass(Verdict v) { return std::string(VerdictName(v)); }

std::string StateText(const Diagnosis& d) {
  const char* state = d.state == DiagnosisState::kOpen ? "open" : d.state == DiagnosisState::kUpdated ? "updated" : "resolved";
  return fmt::format("<span class=\"{}\">{}</span> · {}", d.provisional ? "provisional" : "confirmed",
                     d.provisional ? "provisional" : "confirmed", state);
}

// The charts' time axis for one diagnosis: its window with context either side, inside the data.
std::pair<TimeNs, TimeNs> ChartRange(const Diagnosis& d, TimeNs data_from, TimeNs data_to) {
  const TimeNs start = d.window.start, end = std::max(d.window.start, d.window.end);
  const TimeNs pad = std::max(kPadMin, end - start);
  TimeNs from = std::max(data_from, start - pad), to = std::min(data_to, end + pad);
  if (to <= from) from = data_from, to = data_to;
  return {from, to};
}

std::vector<ChartMark> Marks(const detect::FleetView& view, const Diagnosis& d, TimeNs from, TimeNs to,
                             size_t* log_lines_unmarked) {
  std::vector<ChartMark> marks;
  if (!d.subjects.job.empty()) {
    store::EventQuery q;
    q.kinds = {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd, EventKind::kError, EventKind::kLogLine};
    q.job = d.subjects.job;
    q.from = from;
    q.to = to;
    q.limit = 5'000;
    std::vector<ChartMark> logs;
    for (const auto& e : view.Events(q)) {
      switch (e.kind) {
        case EventKind::kCheckpointBegin:
        case EventKind::kCheckpointEnd: {
          std::string path;
          for (const auto& [k, v] : e.attrs) {
            if (k == "path") path = v;
          }
          marks.push_back({e.time,
                           e.kind == EventKind::kCheckpointBegin ? MarkKind::kCheckpointBegin : MarkKind::kCheckpointEnd,
                           fmt::format("{} rank {} {}", e.identity.node, e.identity.rank, path)});
          break;
        }
        case EventKind::kError:
          marks.push_back({e.time, MarkKind::kError,
                           fmt::format("{} rank {}: {} {}", e.identity.node, e.identity.rank, e.name, e.text)});
          break;
        default:
          logs.push_back({e.time, MarkKind::kLog, fmt::format("{} rank {}: {}", e.identity.node, e.identity.rank, e.text)});
      }
    }
    if (logs.size() <= kMaxLogMarks) {
      marks.insert(marks.end(), logs.begin(), logs.end());
    } else {
      *log_lines_unmarked = logs.size();
    }
  }
  // Faults of the subject nodes' GPUs, whichever job they hit.
  const std::set<std::string> nodes(d.subjects.nodes.begin(), d.subjects.nodes.end());
  store::EventQuery q;
  q.kinds = {EventKind::kXid, EventKind::kGpuEvent};
  q.from = from;
  q.to = to;
  q.limit = 5'000;
  for (const auto& e : view.Events(q)) {
    if (!nodes.empty() && !nodes.count(e.identity.node)) continue;
    marks.push_back({e.time, MarkKind::kXid,
                     e.kind == EventKind::kXid
                         ? fmt::format("{} GPU {}: Xid {} {}", e.identity.node, e.identity.gpu_index, FormatValue(e.value), e.text)
                         : fmt::format("{} GPU {}: {} {}", e.identity.node, e.identity.gpu_index, e.name, e.text)});
  }
  return marks;
}

std::string SubjectsTable(const Diagnosis& d) {
  const Subjects& s = d.subjects;
  std::string t = "<table class=\"kv subjects\">\n";
  auto row = [&](const char* name, const std::string& escaped_value) {
    t += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", name, escaped_value.empty() ? "—" : escaped_value);
  };
  row("Job", Escape(s.job));
  std::vector<std::string> v;
  for (const auto& n : s.nodes) v.push_back(Escape(n));
  row("Nodes", Join(v, ", "));
  v.clear();
  for (const auto& r : s.ranks) {
    std::string x = fmt::format("rank {}", r.rank);
    if (r.local_rank >= 0) x += fmt::format(" (local {})", r.local_rank);
    if (!r.node.empty()) x += " on " + Escape(r.node);
    if (r.pid >= 0) x += fmt::format(", pid {}", r.pid);
    v.push_back(x);
  }
  row("Ranks", Join(v, "; "));
  v.clear();
  for (const auto& g : s.gpus) {
    std::string x = Escape(g.node) + (g.index >= 0 ? fmt::format(" GPU {}", g.index) : std::string(" GPU ?"));
    if (!g.uuid.empty()) x += " <span class=\"muted\">" + Escape(g.uuid) + "</span>";
    v.push_back(x);
  }
  row("GPUs", Join(v, "; "));
  row("Resource", Escape(s.resource));
  v.clear();
  for (const auto& j : s.other_jobs) v.push_back(Escape(j));
  row("Other jobs hurt", Join(v, ", "));
  row("Window", fmt::format("{} → {} ({})", FormatTime(d.window.start), FormatTime(d.window.end),
                            FormatDuration(d.window.end - d.window.start)));
  row("Diagnosis", fmt::format("{} · opened {} · updated {}", Escape(d.id), FormatTime(d.opened_at), FormatTime(d.updated_at)));
  t += "</table>\n";
  return t;
}

std::string BreakdownSection(const detect::FleetView& view, const Diagnosis& d, const detect::JobView* job, TimeNs from,
                             TimeNs to) {
  std::string s = "<h3>Per-rank step breakdown</h3>\n";
  if (d.subjects.job.empty()) {
    return s + "<p class=\"muted\">No job: this diagnosis is about a resource, not one job's ranks.</p>\n";
  }
  if (job == nullptr) {
    return s + fmt::format("<p class=\"muted\">Job {} has no ranks tagged in this data (no probe or scheduling series carry "
                           "its id): no breakdown.</p>\n",
                           Escape(d.subjects.job));
  }
  // Over the diagnosis's window when it has one, else the charted range.
  TimeNs bf = from, bt = to;
  if (d.window.end - d.window.start >= kNsPerSec) bf = d.window.start, bt = d.window.end;
  const auto rows = detect::StepBreakdown(view, *job, bf, bt);
  if (rows.empty()) {
    return s + fmt::format("<p class=\"muted\">No rank of job {} was seen from {} to {}.</p>\n", Escape(job->id),
                           FormatTime(bf), FormatTime(bt));
  }
  std::set<int32_t> subject_ranks;
  for (const auto& r : d.subjects.ranks) subject_ranks.insert(r.rank);
  std::set<std::pair<std::string, int32_t>> subject_gpus;
  for (const auto& g : d.subjects.gpus) subject_gpus.emplace(g.node, g.index);
  const bool all_subjects = subject_ranks.size() >= job->Ranks().size();
  s += fmt::format("<p class=\"muted\">Where each rank's wall time went from {} to {} ({}); share of that time per "
                   "column. Highlighted rows are the diagnosis's ranks or GPUs.</p>\n",
                   FormatTime(bf), FormatTime(bt), FormatDuration(bt - bf));
  s += "<table class=\"breakdown\">\n<tr><th class=\"num\">Rank</th><th>Node</th><th class=\"num\">GPU</th>"
       "<th class=\"num\">Steps</th><th class=\"num\">s/step</th><th class=\"num\">Compute</th>"
       "<th class=\"num\">Collective wait</th><th class=\"num\">Host stall</th><th class=\"num\">CUDA sync</th>"
       "<th class=\"num\">I/O</th><th class=\"num\">Work/step</th></tr>\n"
       "<tr class=\"how\"><th></th><th></th><th></th><th class=\"num\">probes</th><th class=\"num\"></th>"
       "<th class=\"num\">estimated: GPU busy − wait</th><th class=\"num\">exact (NCCL profiler) or ~estimated "
       "(enqueue order), per row</th><th class=\"num\">measured: scheduler probes</th>"
       "<th class=\"num\">measured: CUDA probes</th><th class=\"num\">measured: file probes</th>"
       "<th class=\"num\">relative (sampled launches)</th></tr>\n";
  for (size_t i = 0; i < rows.size() && i < kMaxBreakdownRows; ++i) {
    const auto& r = rows[i];
    const bool subject = !all_subjects && (subject_ranks.count(r.rank.rank) || subject_gpus.count({r.gpu.node, r.gpu.index}));
    s += fmt::format(
        "<tr{}><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.0f}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        subject ? " class=\"subject\"" : "", r.rank.rank, Escape(r.rank.node), r.gpu.index >= 0 ? std::to_string(r.gpu.index) : "?",
        r.steps, r.step_seconds > 0 ? fmt::format("{:.2f}", r.step_seconds) : "—", Pct(r.compute_share),
        r.collective_wait_exact ? "" : "~", Pct(r.collective_wait_share), Pct(r.host_stall_share), Pct(r.sync_blocked_share),
        Pct(r.io_share), FormatValue(r.work_per_step));
  }
  s += "</table>\n";
  if (rows.size() > kMaxBreakdownRows) {
    s += fmt::format("<p class=\"chart-note\">{} more ranks not listed.</p>\n", rows.size() - kMaxBreakdownRows);
  }
  return s;
}

std::string Number(double v, const std::string& unit) {
  std::string s = FormatValue(v);
  if (!unit.empty()) s += " " + Escape(unit);
  return s;
}

std::string CostSection(const Diagnosis& d) {
  const Impact& im = d.impact;
  std::string s = "<h3>Cost</h3>\n<table class=\"kv cost\">\n";
  s += fmt::format("<tr><th>GPU-hours lost</th><td>{:.2f}<div class=\"origin\">GPU time the cause cost inside the "
                   "window, as the detector that found it measured it (the largest of its findings).</div></td></tr>\n",
                   im.gpu_hours_lost);
  s += fmt::format("<tr><th>Productive share</th><td>{}<div class=\"origin\">Σ over kept steps of min(step time, "
                   "baseline step time) × GPUs ÷ allocated GPU-time; never from utilisation. Baseline: {}.</div></td></tr>\n",
                   Pct(im.productive_share), im.baseline_origin.empty() ? "not stated" : Escape(im.baseline_origin));
  if (im.effective_price_per_gpu_hour > 0) {
    s += fmt::format("<tr><th>Effective price</th><td>${:.2f} per productive GPU-hour<div class=\"origin\">The "
                     "configured list price per GPU-hour ÷ the productive share.</div></td></tr>\n",
                     im.effective_price_per_gpu_hour);
  } else {
    s += "<tr><th>Effective price</th><td>—<div class=\"origin\">No list price was configured, so no price is "
         "stated.</div></td></tr>\n";
  }
  s += fmt::format("<tr><th>Expected speedup with the fix</th><td>×{:.2f}<div class=\"origin\">Step time now ÷ step "
                   "time with the cause removed{}.</div></td></tr>\n",
                   im.expected_speedup,
                   im.speedup_origin.empty()
                       ? (im.expected_speedup == 1.0 ? std::string("; no estimate is known for this cause")
                                                     : std::string())
                       : "; measured on: " + Escape(im.speedup_origin));
  s += "</table>\n";
  return s;
}

}  // namespace

std::string RenderReport(const detect::FleetView& view, const std::vector<Diagnosis>& diagnoses,
                         const ReportOptions& options) {
  const std::string title = options.title.empty() ? "Ithbat incident report" : options.title;
  TimeNs data_from = options.from, data_to = options.to;
  if (data_to <= data_from) {  // no window given: around the diagnoses
    data_from = kMaxTime, data_to = kMinTime;
    for (const auto& d : diagnoses) {
      data_from = std::min(data_from, d.window.start - kPadMin);
      data_to = std::max(data_to, d.window.end + kPadMin);
    }
    if (data_to <= data_from) data_from = data_to = 0;
  }

  std::string h;
  h.reserve(64 << 10);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // Nothing may be fetched: even a reference that slipped into the data would not load.
  h += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<main>\n", Escape(title), kStyle);
  h += fmt::format("<header>\n<h1>{}</h1>\n<dl class=\"meta\">\n", Escape(title));
  h += fmt::format("<dt>Data window</dt><dd>{} → {}{}</dd>\n", FormatTime(data_from), FormatTime(data_to),
                   data_to > data_from ? " (" + FormatDuration(data_to - data_from) + ")" : "");
  h += fmt::format("<dt>Source</dt><dd>{}</dd>\n", options.source.empty() ? "—" : Escape(options.source));
  h += fmt::format("<dt>Generated</dt><dd>{}</dd>\n", FormatTime(options.generated_at));
  h += fmt::format("<dt>Diagnoses</dt><dd>{}</dd>\n</dl>\n</header>\n", diagnoses.size());

  if (diagnoses.empty()) {
    h += "<section class=\"none\" id=\"no-diagnosis\">\n<h2>No diagnosis</h2>\n";
    h += fmt::format("<p>The diagnosis engine reached no verdict on the data from {} to {}: no detector found an "
                     "incident whose evidence met its thresholds and the two-collector rule.</p>\n",
                     FormatTime(data_from), FormatTime(data_to));
    h += "<p class=\"muted\">This says no incident was proven in this data, not that nothing went wrong outside "
         "it: signals the agents did not collect cannot be judged.</p>\n</section>\n";
  } else {
    h += "<nav>\n<h3>Diagnoses</h3>\n<ol>\n";
    for (size_t i = 0; i < diagnoses.size() && i < kMaxDiagnoses; ++i) {
      const auto& d = diagnoses[i];
      h += fmt::format("<li><b>{}</b>: {}{} — job {} — {}</li>\n", VerdictName(d.verdict), CauseName(d.cause),
                       d.provisional ? " (provisional)" : "", d.subjects.job.empty() ? "—" : Escape(d.subjects.job),
                       Escape(d.summary));
    }
    h += "</ol>\n";
    if (diagnoses.size() > kMaxDiagnoses) {
      h += fmt::format("<p class=\"chart-note\">{} more diagnoses not shown (a report shows at most {}).</p>\n",
                       diagnoses.size() - kMaxDiagnoses, kMaxDiagnoses);
    }
    h += "</nav>\n";
  }

  const auto jobs = data_to > data_from ? detect::DiscoverJobs(view, data_from, data_to) : std::vector<detect::JobView>{};
  size_t charts = 0;
  for (size_t i = 0; i < diagnoses.size() && i < kMaxDiagnoses; ++i) {
    const Diagnosis& d = diagnoses[i];
    const auto [from, to] = ChartRange(d, data_from, data_to);
    const detect::JobView* job = nullptr;
    for (const auto& j : jobs) {
      if (!d.subjects.job.empty() && j.id == d.subjects.job) job = &j;
    }
    h += fmt::format("<section class=\"diagnosis {}\" id=\"diagnosis-{}\">\n", VerdictClass(d.verdict), i + 1);
    h += fmt::format("<div class=\"verdict\"><span class=\"side {}\">{}</span><span class=\"cause\">{}</span>"
                     "<span class=\"state\">{}</span></div>\n",
                     VerdictClass(d.verdict), VerdictName(d.verdict), CauseName(d.cause), StateText(d));
    h += fmt::format("<p class=\"summary\">{}</p>\n", Escape(d.summary));
    h += SubjectsTable(d);
    h += BreakdownSection(view, d, job, from, to);

    // Evidence: the table of every item (observed against expected), then its charts.
    EvidenceContext ctx;
    ctx.view = &view;
    ctx.diagnosis = &d;
    ctx.jobs = &jobs;
    ctx.job = job;
    ctx.from = from;
    ctx.to = to;
    size_t logs_unmarked = 0;
    ctx.marks = Marks(view, d, from, to, &logs_unmarked);
    const size_t items = std::min(d.evidence.size(), kMaxEvidencePerDiagnosis);
    std::vector<EvidenceShown> shown;
    for (size_t k = 0; k < items; ++k) shown.push_back(ShowEvidence(ctx, d.evidence[k]));
    h += "<h3>Evidence</h3>\n<table class=\"evidence\">\n<tr><th>#</th><th>Signal</th><th>Collector</th><th>Subject</th>"
         "<th class=\"num\">Observed</th><th class=\"num\">Expected</th><th>Note</th><th>Shown</th></tr>\n";
    std::vector<std::string> figures;
    for (size_t k = 0; k < items; ++k) {
      const Evidence& e = d.evidence[k];
      EvidenceShown& x = shown[k];
      std::string how;
      if (x.charted && charts < kMaxChartsPerReport) {
        ++charts;
        how = fmt::format("chart E{}", k + 1);
        std::string fig = fmt::format("<figure class=\"evidence\" id=\"d{}-e{}\">\n<figcaption><b>E{}</b> <code>{}</code> — "
                                      "{} · {}: observed {} against {} expected. {}</figcaption>\n",
                                      i + 1, k + 1, k + 1, Escape(e.signal), Escape(e.collector), Escape(e.subject),
                                      Number(e.observed, e.unit), Number(e.expected, e.unit), Escape(e.note));
        fig += RenderChart(x.chart);
        fig += fmt::format("<p class=\"drawn\">{}</p>\n</figure>\n", Escape(x.drawn));
        figures.push_back(std::move(fig));
      } else {
        if (x.charted) {
          how = fmt::format("no chart: the report's chart budget ({}) is spent", kMaxChartsPerReport);
        } else {
          how = Escape(x.why_table);
          for (const auto& line : x.deltas) how += "<br><code>" + Escape(line) + "</code>";
        }
      }
      h += fmt::format("<tr><td>E{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>"
                       "<td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>\n",
                       k + 1, Escape(e.signal), Escape(e.collector), Escape(e.subject), Number(e.observed, e.unit),
                       Number(e.expected, e.unit), Escape(e.note), how);
    }
    h += "</table>\n";
    if (d.evidence.size() > items) {
      h += fmt::format("<p class=\"chart-note\">{} more evidence items not shown.</p>\n", d.evidence.size() - items);
    }
    if (!figures.empty()) {
      h += fmt::format("<p class=\"muted\">Charts span {} → {}; the diagnosis window is shaded; the job's saves, errors "
                       "and its nodes' GPU faults are vertical ticks (hover for the text).{}</p>\n",
                       FormatTime(from), FormatTime(to),
                       logs_unmarked > 0 ? fmt::format(" {} log lines of the job in this range are not marked.", logs_unmarked)
                                         : std::string());
    }
    for (const auto& f : figures) h += f;

    h += "<h3>Fix</h3>\n";
    h += fmt::format("<p>{}</p>\n", d.fix.empty() ? "—" : Escape(d.fix));
    const auto& info = investigate::InfoOf(d.cause);
    h += fmt::format("<p class=\"origin\">From the cause catalogue (docs/diagnoses.md) for <b>{}</b>: {}</p>\n",
                     CauseName(d.cause), Escape(info.meaning));
    h += CostSection(d);
    h += "</section>\n";
  }
  h += "<footer>Written by Ithbat. This file is self-contained: styles and charts are inline and it loads nothing; "
       "every value shown comes from the data named above.</footer>\n</main>\n</body>\n</html>\n";
  return h;
}

}  // namespace ithbat::report
