#include "investigate/diagnosis_json.h"

#include <cmath>

#include <fmt/core.h>

#include "core/time.h"

namespace ithbat::investigate {
namespace {

using nlohmann::json;

json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json WindowJson(const TimeWindow& w) { return {{"start", FormatRfc3339(w.start)}, {"end", FormatRfc3339(w.end)}}; }

// Reads a JSON object field by field, remembering the first fault with its path.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }

  const json* Field(const json& obj, const char* name, json::value_t type, bool required = true) {
    if (!ok()) return nullptr;
    if (!obj.is_object()) return Fail(path_, "is not an object");
    auto it = obj.find(name);
    if (it == obj.end()) return required ? Fail(Path(name), "is missing") : nullptr;
    const bool number = type == json::value_t::number_float;
    if (number ? !(it->is_number() || it->is_null()) : it->type() != type) {
      return Fail(Path(name), fmt::format("must be {}", number ? "a number or null" : TypeName(type)));
    }
    return &*it;
  }
  std::string String(const json& obj, const char* name, bool required = true) {
    const json* v = Field(obj, name, json::value_t::string, required);
    return v ? v->get<std::string>() : "";
  }
  double Double(const json& obj, const char* name, bool required = true) {
    const json* v = Field(obj, name, json::value_t::number_float, required);
    return v == nullptr || v->is_null() ? std::nan("") : v->get<double>();
  }
  int32_t Int(const json& obj, const char* name) {
    if (!ok()) return -1;
    auto it = obj.find(name);
    if (it == obj.end()) return Fail(Path(name), "is missing"), -1;
    if (!it->is_number_integer()) return Fail(Path(name), "must be an integer"), -1;
    return it->get<int32_t>();
  }
  bool Bool(const json& obj, const char* name) {
    const json* v = Field(obj, name, json::value_t::boolean);
    return v && v->get<bool>();
  }
  TimeNs Time(const json& obj, const char* name) {
    std::string s = String(obj, name);
    if (!ok()) return 0;
    auto t = ParseTimestamp(s);
    if (!t) return Fail(Path(name), "is not an RFC 3339 time"), 0;
    return *t;
  }
  TimeWindow Window(const json& obj, const char* name) {
    const json* w = Field(obj, name, json::value_t::object);
    if (w == nullptr) return {};
    Reader r(Path(name));
    TimeWindow out{r.Time(*w, "start"), r.Time(*w, "end")};
    Adopt(r);
    return out;
  }
  void Adopt(const Reader& r) {
    if (ok() && !r.ok()) error_ = r.error_;
  }
  std::string Path(const std::string& name) const { return path_.empty() ? name : path_ + "." + name; }
  std::nullptr_t Fail(const std::string& path, const std::string& what) {
    if (ok()) error_ = fmt::format("{} {}", path, what);
    return nullptr;
  }

 private:
  static const char* TypeName(json::value_t t) {
    switch (t) {
      case json::value_t::string: return "a string";
      case json::value_t::object: return "an object";
      case json::value_t::array: return "an array";
      case json::value_t::boolean: return "a boolean";
      default: return "a value of another type";
    }
  }
  std::string path_;
  std::string error_;
};

}  // namespace

std::string_view DiagnosisStateName(DiagnosisState s) {
  switch (s) {
    case DiagnosisState::kOpen: return "open";
    case DiagnosisState::kUpdated: return "updated";
    case DiagnosisState::kResolved: return "resolved";
  }
  return "open";
}

json ToJson(const Diagnosis& d) {
  json ranks = json::array();
  for (const auto& r : d.subjects.ranks) {
    ranks.push_back({{"rank", r.rank}, {"local_rank", r.local_rank}, {"node", r.node}, {"pid", r.pid}});
  }
  json gpus = json::array();
  for (const auto& g : d.subjects.gpus) gpus.push_back({{"node", g.node}, {"index", g.index}, {"uuid", g.uuid}});
  json evidence = json::array();
  for (const auto& e : d.evidence) {
    evidence.push_back({{"signal", e.signal},
                        {"collector", e.collector},
                        {"subject", e.subject},
                        {"observed", Number(e.observed)},
                        {"expected", Number(e.expected)},
                        {"unit", e.unit},
                        {"note", e.note},
                        {"window", WindowJson(e.window)}});
  }
  const Impact& im = d.impact;
  return {
      {"schema", kDiagnosisSchema},
      {"id", d.id},
      {"state", DiagnosisStateName(d.state)},
      {"provisional", d.provisional},
      {"verdict", VerdictName(d.verdict)},
      {"cause", CauseName(d.cause)},
      {"summary", d.summary},
      {"subjects",
       {{"job", d.subjects.job},
        {"nodes", d.subjects.nodes},
        {"ranks", ranks},
        {"gpus", gpus},
        {"resource", d.subjects.resource},
        {"other_jobs", d.subjects.other_jobs}}},
      {"window", WindowJson(d.window)},
      {"evidence", evidence},
      {"fix", d.fix},
      {"impact",
       {{"gpu_hours_lost", Number(im.gpu_hours_lost)},
        {"expected_speedup", Number(im.expected_speedup)},
        {"productive_share", Number(im.productive_share)},
        {"effective_price_per_gpu_hour", im.effective_price_per_gpu_hour > 0 ? Number(im.effective_price_per_gpu_hour) : json(nullptr)},
        {"baseline_origin", im.baseline_origin},
        {"speedup_origin", im.speedup_origin}}},
      {"opened_at", FormatRfc3339(d.opened_at)},
      {"updated_at", FormatRfc3339(d.updated_at)},
  };
}

Result<Diagnosis> DiagnosisFromJson(const json& j) {
  Reader r("");
  Diagnosis d;
  if (r.String(j, "schema") != kDiagnosisSchema && r.ok()) r.Fail("schema", fmt::format("must be \"{}\"", kDiagnosisSchema));
  d.id = r.String(j, "id");
  if (r.ok() && d.id.empty()) r.Fail("id", "is empty");
  const std::string state = r.String(j, "state");
  if (state == "open") d.state = DiagnosisState::kOpen;
  else if (state == "updated") d.state = DiagnosisState::kUpdated;
  else if (state == "resolved") d.state = DiagnosisState::kResolved;
  else if (r.ok()) r.Fail("state", "must be open, updated or resolved");
  d.provisional = r.Bool(j, "provisional");
  auto verdict = ParseVerdict(r.String(j, "verdict"));
  if (!verdict && r.ok()) r.Fail("verdict", "must be job, infrastructure or inconclusive");
  d.verdict = verdict.value_or(Verdict::kInconclusive);
  auto cause = ParseCause(r.String(j, "cause"));
  if (!cause && r.ok()) r.Fail("cause", "is not a documented cause (docs/diagnoses.md)");
  d.cause = cause.value_or(Cause::kUnknown);
  d.summary = r.String(j, "summary");
  if (const json* s = r.Field(j, "subjects", json::value_t::object)) {
    Reader sr("subjects");
    d.subjects.job = sr.String(*s, "job");
    if (const json* nodes = sr.Field(*s, "nodes", json::value_t::array)) {
      for (const auto& n : *nodes) {
        if (!n.is_string()) { sr.Fail("subjects.nodes", "must hold strings"); break; }
        d.subjects.nodes.push_back(n.get<std::string>());
      }
    }
    if (const json* ranks = sr.Field(*s, "ranks", json::value_t::array)) {
      for (size_t i = 0; i < ranks->size() && sr.ok(); ++i) {
        Reader rr(fmt::format("subjects.ranks[{}]", i));
        RankRef x{rr.Int((*ranks)[i], "rank"), rr.Int((*ranks)[i], "local_rank"), rr.String((*ranks)[i], "node"),
                  rr.Int((*ranks)[i], "pid")};
        sr.Adopt(rr);
        d.subjects.ranks.push_back(std::move(x));
      }
    }
    if (const json* gpus = sr.Field(*s, "gpus", json::value_t::array)) {
      for (size_t i = 0; i < gpus->size() && sr.ok(); ++i) {
        Reader gr(fmt::format("subjects.gpus[{}]", i));
        GpuRef g{gr.String((*gpus)[i], "node"), gr.Int((*gpus)[i], "index"), gr.String((*gpus)[i], "uuid")};
        sr.Adopt(gr);
        d.subjects.gpus.push_back(std::move(g));
      }
    }
    d.subjects.resource = sr.String(*s, "resource");
    if (const json* others = sr.Field(*s, "other_jobs", json::value_t::array)) {
      for (const auto& n : *others) {
        if (!n.is_string()) { sr.Fail("subjects.other_jobs", "must hold strings"); break; }
        d.subjects.other_jobs.push_back(n.get<std::string>());
      }
    }
    r.Adopt(sr);
  }
  d.window = r.Window(j, "window");
  if (const json* ev = r.Field(j, "evidence", json::value_t::array)) {
    for (size_t i = 0; i < ev->size() && r.ok(); ++i) {
      Reader er(fmt::format("evidence[{}]", i));
      const json& e = (*ev)[i];
      Evidence x;
      x.signal = er.String(e, "signal");
      x.collector = er.String(e, "collector");
      x.subject = er.String(e, "subject");
      x.observed = er.Double(e, "observed");
      x.expected = er.Double(e, "expected");
      x.unit = er.String(e, "unit");
      x.note = er.String(e, "note");
      x.window = er.Window(e, "window");
      r.Adopt(er);
      d.evidence.push_back(std::move(x));
    }
  }
  d.fix = r.String(j, "fix");
  if (const json* im = r.Field(j, "impact", json::value_t::object)) {
    Reader ir("impact");
    d.impact.gpu_hours_lost = ir.Double(*im, "gpu_hours_lost");
    d.impact.expected_speedup = ir.Double(*im, "expected_speedup");
    d.impact.productive_share = ir.Double(*im, "productive_share");
    const double price = ir.Double(*im, "effective_price_per_gpu_hour");
    d.impact.effective_price_per_gpu_hour = std::isnan(price) ? 0 : price;
    d.impact.baseline_origin = ir.String(*im, "baseline_origin");
    d.impact.speedup_origin = ir.String(*im, "speedup_origin");
    r.Adopt(ir);
  }
  d.opened_at = r.Time(j, "opened_at");
  d.updated_at = r.Time(j, "updated_at");
  if (!r.ok()) return MakeErrorF(ErrorCode::kInvalidArgument, "diagnosis: {}", r.error());
  return d;
}

Status ValidateDiagnosisJson(const json& j) {
  auto d = DiagnosisFromJson(j);
  if (!d) return std::unexpected(d.error());
  return {};
}

}  // namespace ithbat::investigate
