#include "report/evidence_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/core.h>
#include <fmt/format.h>

#include "core/event.h"
#include "core/metric.h"
#include "report/html.h"
#include "store/store.h"

namespace ithbat::report {
namespace {

using detect::Label;

// ---- the signal's form ----

struct Term {
  std::string metric;
  std::string matchers;  // "{...}" or ""
};

struct ParsedSignal {
  std::vector<Term> terms;
  char op = 0;         // '/' (ratio), '+' (sum) or 0 (one term)
  bool mixed = false;  // both operators: not drawn
  std::string rest;    // words after the expression ("per step")
};

bool NameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

ParsedSignal ParseSignal(std::string_view s) {
  ParsedSignal p;
  size_t i = 0;
  while (i < s.size() && NameStart(s[i])) {
    size_t j = i;
    while (j < s.size() && NameChar(s[j])) ++j;
    Term t{std::string(s.substr(i, j - i)), ""};
    if (j < s.size() && s[j] == '{') {
      size_t k = j + 1;
      bool quoted = false;
      for (; k < s.size(); ++k) {
        if (quoted) {
          if (s[k] == '\\') {
            ++k;
          } else if (s[k] == '"') {
            quoted = false;
          }
        } else if (s[k] == '"') {
          quoted = true;
        } else if (s[k] == '}') {
          break;
        }
      }
      if (k >= s.size()) break;  // unterminated matchers: the rest is words
      t.matchers = std::string(s.substr(j, k - j + 1));
      j = k + 1;
    }
    p.terms.push_back(std::move(t));
    i = j;
    if (i + 1 < s.size() && (s[i] == '/' || s[i] == '+') && NameStart(s[i + 1])) {
      if (p.op != 0 && p.op != s[i]) p.mixed = true;
      p.op = s[i];
      ++i;
      continue;
    }
    break;
  }
  p.rest = std::string(s.substr(i));
  // `a/b{op="fsync"}`: the matchers written once at the end are meant for every term.
  if (p.terms.size() > 1 && !p.terms.back().matchers.empty() &&
      std::all_of(p.terms.begin(), p.terms.end() - 1, [](const Term& t) { return t.matchers.empty(); })) {
    for (auto& t : p.terms) t.matchers = p.terms.back().matchers;
  }
  return p;
}

// ---- which series: the diagnosis's nodes, its job, its subjects ----

struct Scope {
  std::vector<std::string> nodes;  // read these stores
  std::set<std::pair<std::string, int32_t>> gpus;  // subject GPUs by (node, index)
  std::set<std::string> gpu_uuids;
  std::set<int32_t> ranks;
  std::set<std::pair<std::string, std::string>> devices;  // NIC: (node, device)
  std::string mount;
  std::string job;
  std::set<std::pair<std::string, int32_t>> job_gpus;  // the job's GPUs (empty: job unknown)
  std::set<std::string> job_uuids;
};

std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s) {
    if (c == ' ' || c == ',' || c == '(' || c == ')' || c == ';') {
      if (!w.empty()) out.push_back(std::move(w));
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) out.push_back(std::move(w));
  return out;
}

Scope MakeScope(const EvidenceContext& ctx, const Evidence& ev) {
  Scope sc;
  const Diagnosis& d = *ctx.diagnosis;
  const auto all = ctx.view->Nodes();
  const std::set<std::string> known(all.begin(), all.end());
  std::set<std::string> ev_nodes;
  std::set<std::pair<std::string, int32_t>> ev_gpus;
  std::set<int32_t> ev_ranks;
  auto node_device = [&](const std::string& w, std::set<std::string>* nodes_seen) {
    const size_t slash = w.find('/');
    if (slash == std::string::npos || slash == 0 || !known.count(w.substr(0, slash))) return;
    sc.devices.emplace(w.substr(0, slash), w.substr(slash + 1));
    if (nodes_seen) nodes_seen->insert(w.substr(0, slash));
  };
  const auto words = Words(ev.subject);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (known.count(w)) {
      ev_nodes.insert(w);
    } else if (const size_t colon = w.rfind(':'); colon != std::string::npos && known.count(w.substr(0, colon)) &&
                                                  detect::ParseInt(w.substr(colon + 1)) >= 0) {
      ev_nodes.insert(w.substr(0, colon));
      ev_gpus.emplace(w.substr(0, colon), detect::ParseInt(w.substr(colon + 1)));
    } else if (i > 0 && words[i - 1] == "rank" && detect::ParseInt(w) >= 0) {
      ev_ranks.insert(detect::ParseInt(w));
    } else if (!w.empty() && w[0] == '/') {
      sc.mount = w;
    } else {
      node_device(w, &ev_nodes);
    }
  }
  if (!d.subjects.resource.empty()) {
    if (d.subjects.resource[0] == '/') {
      if (sc.mount.empty()) sc.mount = d.subjects.resource;
    } else {
      for (const auto& w : Words(d.subjects.resource)) node_device(w, nullptr);
    }
  }
  std::set<std::string> nodes;
  for (const auto& n : ev_nodes.empty() ? std::set<std::string>(d.subjects.nodes.begin(), d.subjects.nodes.end())
                                        : ev_nodes) {
    if (known.count(n)) nodes.insert(n);
  }
  sc.nodes = nodes.empty() ? all : std::vector<std::string>(nodes.begin(), nodes.end());
  if (!ev_gpus.empty()) {
    sc.gpus = ev_gpus;
  } else {
    for (const auto& g : d.subjects.gpus) {
      if (g.index >= 0) sc.gpus.emplace(g.node, g.index);
      if (!g.uuid.empty()) sc.gpu_uuids.insert(g.uuid);
    }
  }
  if (!ev_ranks.empty()) {
    sc.ranks = ev_ranks;
  } else {
    for (const auto& r : d.subjects.ranks) sc.ranks.insert(r.rank);
  }
  sc.job = d.subjects.job;
  if (ctx.job != nullptr) {
    for (const auto& p : ctx.job->processes) {
      if (p.gpu >= 0) sc.job_gpus.emplace(p.node, p.gpu);
      if (!p.gpu_uuid.empty()) sc.job_uuids.insert(p.gpu_uuid);
    }
  }
  return sc;
}

struct Fetched {
  std::string node;
  LabelSet labels;
  MetricType type = MetricType::kGauge;
  std::string unit;
  std::vector<store::Sample> samples;
  bool subject = true;
};

// The series of one term on the scope's nodes that belong to the job, with subject flags.
std::vector<Fetched> Fetch(const EvidenceContext& ctx, const Scope& sc, const Term& term, TimeNs from, TimeNs to,
                           size_t* over_limit) {
  std::vector<Fetched> out;
  auto sel = store::SeriesSelector::Parse(term.metric + term.matchers);
  if (!sel.has_value()) return out;
  to = std::min(to, ctx.view->horizon());
  if (to < from) return out;
  for (const auto& node : sc.nodes) {
    const store::Store* st = ctx.view->StoreOf(node);
    if (st == nullptr) continue;
    auto got = st->Select(*sel, from, to);
    if (!got.has_value()) continue;
    for (auto& sd : *got) {
      const auto& ls = sd.info.labels;
      const std::string job_id = Label(ls, "job_id");
      const std::string gpu = Label(ls, "gpu"), uuid = Label(ls, "gpu_uuid");
      // Belongs to the job: its own job label, else one of its GPUs; series of neither kind
      // (a NIC port, a mount, a server) are about the node or the resource.
      if (!sc.job.empty() && !job_id.empty() && job_id != sc.job) continue;
      if (job_id.empty() && (!sc.job_gpus.empty() || !sc.job_uuids.empty()) && (!gpu.empty() || !uuid.empty())) {
        const bool in_job = (!uuid.empty() && sc.job_uuids.count(uuid)) ||
                            (!gpu.empty() && sc.job_gpus.count({node, detect::ParseInt(gpu)}));
        if (!in_job) continue;
      }
      const std::string mount = Label(ls, "mount");
      if (!sc.mount.empty() && !mount.empty() && mount != sc.mount) continue;
      if (out.size() >= kMaxSelectedSeries) {
        ++*over_limit;
        continue;
      }
      Fetched f;
      f.node = node;
      f.labels = ls;
      if (sd.info.desc != nullptr) {
        f.type = sd.info.desc->type;
        f.unit = sd.info.desc->unit;
      } else if (term.metric.ends_with("_total")) {
        f.type = MetricType::kCounter;
      }
      f.samples = std::move(sd.samples);
      // A subject when it is one of the named GPUs, ranks or ports (any named kind it carries).
      bool checked = false, matched = false;
      if ((!gpu.empty() || !uuid.empty()) && (!sc.gpus.empty() || !sc.gpu_uuids.empty())) {
        checked = true;
        matched = matched || (!uuid.empty() && sc.gpu_uuids.count(uuid)) ||
                  (!gpu.empty() && sc.gpus.count({node, detect::ParseInt(gpu)}));
      }
      if (const std::string rank = Label(ls, "rank"); !rank.empty() && !sc.ranks.empty()) {
        checked = true;
        matched = matched || sc.ranks.count(detect::ParseInt(rank));
      }
      if (const std::string dev = Label(ls, "device"); !dev.empty() && !sc.devices.empty()) {
        checked = true;
        matched = matched || sc.devices.count({node, dev});
      }
      f.subject = !checked || matched;
      out.push_back(std::move(f));
    }
  }
  // Nothing named among them: every series is the subject.
  if (std::none_of(out.begin(), out.end(), [](const Fetched& f) { return f.subject; })) {
    for (auto& f : out) f.subject = true;
  }
  std::stable_partition(out.begin(), out.end(), [](const Fetched& f) { return f.subject; });
  return out;
}

// Legend text: the node when several, then the labels whose values differ between the series.
std::vector<std::string> LegendLabels(const std::vector<const Fetched*>& series) {
  std::set<std::string> nodes;
  std::map<std::string, std::set<std::string>> values;
  for (const Fetched* f : series) {
    nodes.insert(f->node);
    for (size_t i = 0; i < f->labels.size(); ++i) values[std::string(f->labels.NameAt(i))].insert(std::string(f->labels.ValueAt(i)));
  }
  std::vector<std::string> varying;
  for (const auto& [name, vs] : values) {
    if (vs.size() > 1 || series.size() == 1) varying.push_back(name);
  }
  const bool has_who = std::any_of(varying.begin(), varying.end(), [](const std::string& n) {
    return n == "rank" || n == "gpu" || n == "device" || n == "engine_index";
  });
  // Identity details that a rank or GPU number already says.
  static const std::set<std::string> kRedundant = {"gpu_uuid", "pid", "local_rank", "world_size", "job_id", "model"};
  std::vector<std::string> out;
  for (const Fetched* f : series) {
    std::vector<std::string> parts;
    if (nodes.size() > 1 || series.size() == 1) parts.push_back(f->node);
    for (const auto& name : varying) {
      if (has_who && kRedundant.count(name)) continue;
      const std::string v = Label(f->labels, name);
      if (v.empty()) continue;
      if (name == "rank") {
        parts.push_back("rank " + v);
      } else if (name == "gpu") {
        parts.push_back("GPU " + v);
      } else {
        parts.push_back(name + "=" + v);
      }
    }
    std::string s;
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? " · " : "") + parts[i];
    out.push_back(s.empty() ? f->node : s);
  }
  return out;
}

double Growth(double prev, double now) { return now >= prev ? now - prev : now; }  // a reset: the new value grew

// The typical sampling interval of a series: a stretch several times longer is a gap (the
// agent or collector was down), drawn as a break rather than a straight line across it.
TimeNs GapThreshold(const std::vector<store::Sample>& samples) {
  std::vector<TimeNs> dts;
  for (size_t i = 1; i < samples.size(); ++i) dts.push_back(samples[i].t - samples[i - 1].t);
  if (dts.empty()) return kMaxTime;
  std::nth_element(dts.begin(), dts.begin() + dts.size() / 2, dts.end());
  return std::max<TimeNs>(3 * dts[dts.size() / 2], kNsPerSec);
}

// A counter's rate is averaged over at least kRateWindow (as a dashboard's rate[5s] would): per
// sample interval, a counter of whole events (steps, arrivals) flips between 0 and 2 per second
// and hides the level a person must compare between ranks.
constexpr TimeNs kRateWindow = 5 * kNsPerSec;

std::vector<ChartPoint> Values(const Fetched& f) {
  std::vector<ChartPoint> pts;
  const TimeNs gap = GapThreshold(f.samples);
  if (f.type == MetricType::kCounter) {
    std::vector<double> grown(f.samples.size(), 0);  // growth since the first sample, resets counted
    for (size_t i = 1; i < f.samples.size(); ++i) grown[i] = grown[i - 1] + Growth(f.samples[i - 1].v, f.samples[i].v);
    size_t segment = 0, j = 0;  // the stretch without a gap; the window's first sample
    bool drawn = false, broken = false;  // a point of this stretch drawn; a gap before the next point
    auto gap_after = [&](size_t i) { return i + 1 >= f.samples.size() || f.samples[i + 1].t - f.samples[i].t > gap; };
    for (size_t i = 1; i < f.samples.size(); ++i) {
      if (f.samples[i].t - f.samples[i - 1].t > gap) {
        segment = j = i - 1;
        drawn = false;
        broken = true;
      }
      while (j + 1 < i && f.samples[i].t - f.samples[j + 1].t >= kRateWindow) ++j;
      j = std::max(j, segment);
      const TimeNs dt = f.samples[i].t - f.samples[j].t;
      // A full window, or the stretch's only point when it is shorter than one.
      if (dt <= 0 || (dt < kRateWindow && (drawn || !gap_after(i)))) continue;
      pts.push_back({f.samples[i].t, (grown[i] - grown[j]) * kNsPerSec / static_cast<double>(dt), broken && !pts.empty()});
      drawn = true;
      broken = false;
    }
  } else {
    for (size_t i = 0; i < f.samples.size(); ++i) {
      pts.push_back({f.samples[i].t, f.samples[i].v, i > 0 && f.samples[i].t - f.samples[i - 1].t > gap});
    }
  }
  return pts;
}

// The most intervals any one series of a counter moved in: error counters that step once or
// twice are shown as deltas, not as a chart of spikes.
size_t GrowthIntervals(const std::vector<Fetched>& fs) {
  size_t most = 0;
  for (const auto& f : fs) {
    size_t n = 0;
    for (size_t i = 1; i < f.samples.size(); ++i) n += f.samples[i].v != f.samples[i - 1].v ? 1 : 0;
    most = std::max(most, n);
  }
  return most;
}

std::string YLabel(const Fetched& f) {
  if (f.type == MetricType::kCounter) {
    return (f.unit.empty() ? std::string("per second") : f.unit + " per second") + ", over 5 s";
  }
  return f.unit.empty() ? "value" : f.unit;
}

void TakeLines(const std::vector<Fetched>& fs, const std::vector<std::vector<ChartPoint>>& values, Chart& chart,
               std::string& drawn) {
  std::vector<const Fetched*> kept;
  for (size_t i = 0; i < fs.size() && kept.size() < kMaxLines; ++i) kept.push_back(&fs[i]);
  const auto names = LegendLabels(kept);
  size_t subjects = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    chart.lines.push_back({names[i], values[i], kept[i]->subject});
    subjects += kept[i]->subject ? 1 : 0;
  }
  drawn += fmt::format(" {} series drawn", kept.size());
  if (subjects < kept.size()) drawn += fmt::format(" ({} of the diagnosis's subjects coloured, {} peers grey)", subjects, kept.size() - subjects);
  if (fs.size() > kept.size()) drawn += fmt::format("; {} more not drawn (subjects first)", fs.size() - kept.size());
  drawn += ".";
}

// ---- events: the job's printed scalars and its saves ----

std::string JobOf(const EvidenceContext& ctx, const Evidence& ev) {
  if (ctx.jobs != nullptr) {
    for (const auto& w : Words(ev.subject)) {
      for (const auto& j : *ctx.jobs) {
        if (j.id == w) return w;
      }
    }
  }
  return ctx.diagnosis->subjects.job;
}

std::vector<Event> JobEvents(const EvidenceContext& ctx, const std::string& job, std::vector<EventKind> kinds,
                             TimeNs from, TimeNs to) {
  store::EventQuery q;
  q.kinds = std::move(kinds);
  q.job = job;
  q.from = from;
  q.to = to;
  q.limit = 20'000;
  return ctx.view->Events(q);
}

std::string RankName(const Event& e, bool with_node) {
  std::string s = e.identity.rank >= 0 ? fmt::format("rank {}", e.identity.rank) : fmt::format("pid {}", e.identity.pid);
  return with_node ? e.identity.node + " · " + s : s;
}

// Lines of one value per (node, rank) from events.
void EventLines(const std::vector<std::pair<const Event*, ChartPoint>>& points, bool dots, Chart& chart,
                std::string& drawn) {
  std::map<std::tuple<std::string, int32_t, int32_t>, std::vector<ChartPoint>> by;
  std::set<std::string> nodes;
  std::map<std::tuple<std::string, int32_t, int32_t>, const Event*> first;
  for (const auto& [e, p] : points) {
    const auto key = std::make_tuple(e->identity.node, e->identity.rank, e->identity.rank >= 0 ? -1 : e->identity.pid);
    by[key].push_back(p);
    first.emplace(key, e);
    nodes.insert(e->identity.node);
  }
  size_t n = 0;
  for (auto& [key, pts] : by) {
    if (n++ >= kMaxLines) break;
    std::sort(pts.begin(), pts.end(), [](const ChartPoint& a, const ChartPoint& b) { return a.t < b.t; });
    chart.lines.push_back({RankName(*first[key], nodes.size() > 1), std::move(pts), true, dots});
  }
  drawn += fmt::format(" {} line(s) drawn", std::min(by.size(), kMaxLines));
  if (by.size() > kMaxLines) drawn += fmt::format("; {} more not drawn", by.size() - kMaxLines);
  drawn += ".";
}

bool ChartSaves(const EvidenceContext& ctx, const std::string& job, EvidenceShown& out) {
  const auto events = JobEvents(ctx, job, {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd}, out.chart.from,
                                out.chart.to);
  std::map<std::pair<std::string, int32_t>, const Event*> open;
  std::vector<std::pair<const Event*, ChartPoint>> points;
  for (const auto& e : events) {
    const auto key = std::make_pair(e.identity.node, e.identity.rank >= 0 ? e.identity.rank : -e.identity.pid - 2);
    if (e.kind == EventKind::kCheckpointBegin) {
      open[key] = &e;
    } else if (auto it = open.find(key); it != open.end()) {
      points.push_back({it->second, {it->second->time, static_cast<double>(e.time - it->second->time) / kNsPerSec}});
      open.erase(it);
    }
  }
  if (points.empty()) return false;
  out.chart.y_label = "save duration, seconds";
  out.drawn = fmt::format("Duration of each save of job {} (checkpoint begin to end, a dot at its start),", job);
  EventLines(points, /*dots=*/true, out.chart, out.drawn);
  return true;
}

bool ChartScalars(const EvidenceContext& ctx, const std::string& job, const std::string& name, EvidenceShown& out) {
  std::vector<std::pair<const Event*, ChartPoint>> points;
  std::vector<Event> events;
  if (name == "loss" || name == "loss_drift") {
    events = JobEvents(ctx, job, {EventKind::kLoss}, out.chart.from, out.chart.to);
  } else {
    events = JobEvents(ctx, job, {EventKind::kTrainMetric, EventKind::kEvalMetric, EventKind::kServingMetric},
                       out.chart.from, out.chart.to);
    std::erase_if(events, [&](const Event& e) { return e.name != name; });
  }
  for (const auto& e : events) points.push_back({&e, {e.time, e.value}});
  if (points.empty()) return false;
  out.chart.y_label = name == "loss_drift" ? "loss" : name;
  out.drawn = fmt::format("The {} that job {} printed,", name == "loss_drift" ? "loss" : name, job);
  EventLines(points, /*dots=*/false, out.chart, out.drawn);
  return true;
}

// The counter deltas of the terms over the window, subjects first (a table row's content).
void Deltas(const EvidenceContext& ctx, const Scope& sc, const std::vector<Term>& terms, TimeNs from, TimeNs to,
            EvidenceShown& out) {
  // From the last sample before the window: a counter that stepped at its first instant counts.
  constexpr TimeNs kLookBack = 600 * kNsPerSec;
  for (const auto& term : terms) {
    size_t over = 0;
    const auto fs = Fetch(ctx, sc, term, from - kLookBack, to, &over);
    if (fs.empty()) continue;
    std::vector<const Fetched*> ptrs;
    for (const auto& f : fs) ptrs.push_back(&f);
    const auto names = LegendLabels(ptrs);
    size_t zero = 0, listed = 0;
    for (size_t i = 0; i < fs.size(); ++i) {
      const auto& f = fs[i];
      if (!f.subject) continue;  // the named GPUs' counters are the proof; peers' are not
      // Over (from - 1 ns, to]: a step at the window's first instant is in it.
      const auto before = detect::SampleAt(f.samples, from - 1), after = detect::SampleAt(f.samples, to);
      if (!after.has_value()) continue;
      double delta = 0;
      if (f.type == MetricType::kCounter) {
        delta = detect::CounterGrowth(f.samples, from - 1, to);
      } else {
        delta = *after - before.value_or(*after);
      }
      if (delta == 0) {
        ++zero;
        continue;
      }
      if (listed++ < kMaxDeltaRows) {
        out.deltas.push_back(fmt::format("{} {}: {:+g} (from {} to {})", term.metric, names[i], delta,
                                         before.has_value() ? FormatValue(*before) : "none", FormatValue(*after)));
      }
    }
    if (listed > kMaxDeltaRows) out.deltas.push_back(fmt::format("{}: {} more series moved", term.metric, listed - kMaxDeltaRows));
    if (zero > 0) out.deltas.push_back(fmt::format("{}: {} series unchanged", term.metric, zero));
  }
}

}  // namespace

EvidenceShown ShowEvidence(const EvidenceContext& ctx, const Evidence& ev) {
  EvidenceShown out;
  out.chart.title = ev.signal;
  out.chart.from = ctx.from;
  out.chart.to = ctx.to;
  out.chart.shade_from = ctx.diagnosis->window.start;
  out.chart.shade_to = ctx.diagnosis->window.end;
  out.chart.marks = ctx.marks;
  const ParsedSignal sig = ParseSignal(ev.signal);
  const Scope sc = MakeScope(ctx, ev);
  // The deltas of a table row cover the evidence's own window, else the diagnosis's.
  const TimeWindow dw = ev.window.end > ev.window.start ? ev.window : ctx.diagnosis->window;
  const TimeNs delta_from = dw.end > dw.start ? dw.start : ctx.from, delta_to = dw.end > dw.start ? dw.end : ctx.to;

  if (sig.terms.empty() || sig.mixed) {
    out.why_table = "the detector computed this from several signals; no single stored series or event shows it";
    return out;
  }
  if (sig.op == '+') {
    out.why_table = "counters summed over the window: their deltas prove it better than a chart";
    Deltas(ctx, sc, sig.terms, delta_from, delta_to, out);
    return out;
  }
  size_t over = 0;
  std::vector<std::vector<Fetched>> fetched;
  for (const auto& t : sig.terms) fetched.push_back(Fetch(ctx, sc, t, ctx.from, ctx.to, &over));

  if (!fetched[0].empty()) {
    const auto& num = fetched[0];
    std::vector<std::vector<ChartPoint>> values;
    if (sig.op == '/' && fetched.size() == 2 && !fetched[1].empty()) {
      // A ratio per series: the denominator with the same node and labels (else the node's only one).
      std::vector<Fetched> kept;
      for (const auto& n : num) {
        const Fetched* d = nullptr;
        size_t on_node = 0;
        const Fetched* only = nullptr;
        for (const auto& c : fetched[1]) {
          if (c.node != n.node) continue;
          ++on_node;
          only = &c;
          if (c.labels == n.labels) d = &c;
        }
        if (d == nullptr && on_node == 1) d = only;
        if (d == nullptr) continue;
        std::vector<ChartPoint> pts;
        bool skipped = false;  // intervals without a denominator since the last point: a gap
        for (size_t i = 0; i < n.samples.size(); ++i) {
          const TimeNs t = n.samples[i].t;
          double a = 0, b = 0;
          if (n.type == MetricType::kCounter) {
            if (i == 0) continue;
            a = Growth(n.samples[i - 1].v, n.samples[i].v);
            b = d->type == MetricType::kCounter ? detect::CounterGrowth(d->samples, n.samples[i - 1].t, t)
                                                : detect::SampleAt(d->samples, t).value_or(0);
            if (d->type != MetricType::kCounter) a *= kNsPerSec / static_cast<double>(t - n.samples[i - 1].t);
          } else {
            a = n.samples[i].v;
            b = d->type == MetricType::kCounter ? 0 : detect::SampleAt(d->samples, t).value_or(0);
          }
          if (b > 0) {
            pts.push_back({t, a / b, skipped && !pts.empty()});
            skipped = false;
          } else {
            skipped = true;
          }
        }
        if (pts.empty()) continue;
        kept.push_back(n);
        values.push_back(std::move(pts));
      }
      if (!kept.empty()) {
        out.charted = true;
        out.chart.y_label = fmt::format("{} ÷ {}", sig.terms[0].metric, sig.terms[1].metric);
        out.drawn = fmt::format("{} ÷ {}{}, per interval where the denominator grew;",
                                sig.terms[0].metric, sig.terms[1].metric,
                                num[0].type == MetricType::kCounter ? " (increases)" : "");
        TakeLines(kept, values, out.chart, out.drawn);
        return out;
      }
    }
    // One metric (or a ratio whose other terms have no series of that name: the first alone).
    if (num[0].type == MetricType::kCounter && GrowthIntervals(num) <= 2) {
      out.why_table = GrowthIntervals(num) == 0 ? "the counter did not move in the charted range"
                                                : "the counter stepped at most twice per series: its deltas say more than a chart";
      Deltas(ctx, sc, {sig.terms[0]}, delta_from, delta_to, out);
      return out;
    }
    for (const auto& f : num) values.push_back(Values(f));
    out.charted = true;
    out.chart.y_label = YLabel(num[0]);
    out.drawn = num[0].type == MetricType::kCounter ? fmt::format("Rate of {} per second, averaged over 5 s;", sig.terms[0].metric)
                                                    : fmt::format("{} as sampled;", sig.terms[0].metric);
    if (sig.terms.size() > 1) {
      out.drawn += fmt::format(" the evidence also weighs {}, not drawn (no matching series);",
                               ev.signal.substr(sig.terms[0].metric.size() + sig.terms[0].matchers.size() + 1));
    }
    if (!sig.rest.empty()) out.drawn += fmt::format(" the evidence (\"{}\") is derived from it;", ev.signal);
    TakeLines(num, values, out.chart, out.drawn);
    if (over > 0) out.drawn += fmt::format(" {} series past the selection limit were not read.", over);
    return out;
  }

  // No series of that name: the job's events.
  const std::string job = JobOf(ctx, ev);
  if (job != ctx.diagnosis->subjects.job && ctx.jobs != nullptr) {
    // Another job (a rerun): its own time axis, and not the diagnosis job's events on it.
    for (const auto& j : *ctx.jobs) {
      if (j.id == job && j.window.end > j.window.start) out.chart.from = j.window.start, out.chart.to = j.window.end;
    }
    out.chart.marks.clear();
  }
  if (sig.rest.empty() && !job.empty()) {
    if (sig.op == '/' && sig.terms.size() == 2 && sig.terms[0].metric == "checkpoint_begin" &&
        sig.terms[1].metric == "checkpoint_end") {
      if (ChartSaves(ctx, job, out)) {
        out.charted = true;
        return out;
      }
    } else if (sig.terms.size() == 1 && (sig.terms[0].metric == "loss" || sig.terms[0].metric == "loss_drift" ||
                                         !ParseEventKind(sig.terms[0].metric).has_value())) {
      if (ChartScalars(ctx, job, sig.terms[0].metric, out)) {
        out.charted = true;
        return out;
      }
    }
  }
  // Events counted (xid, an error class): the ticks on the charts show them; a row says how many.
  if (sig.terms.size() == 1) {
    const std::string& name = sig.terms[0].metric;
    std::vector<Event> events;
    if (auto kind = ParseEventKind(name)) {
      store::EventQuery q;
      q.kinds = {*kind};
      q.from = delta_from;
      q.to = delta_to;
      q.limit = 20'000;
      events = ctx.view->Events(q);
      std::erase_if(events, [&](const Event& e) {
        return std::find(sc.nodes.begin(), sc.nodes.end(), e.identity.node) == sc.nodes.end();
      });
    } else if (!job.empty()) {
      events = JobEvents(ctx, job, {EventKind::kError}, delta_from, delta_to);
      std::erase_if(events, [&](const Event& e) { return e.name != name; });
    }
    if (!events.empty()) {
      out.why_table = "events, marked as ticks on the charts; counted here";
      out.deltas.push_back(fmt::format("{} {} event(s) from {} to {}", events.size(), name, FormatClock(events.front().time, true),
                                       FormatClock(events.back().time, true)));
      return out;
    }
  }
  out.why_table = "no stored series or event of this name in the report's data: the detector's own aggregate";
  return out;
}

}  // namespace ithbat::report
