#include "serve/api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/event.h"
#include "core/version.h"
#include "investigate/diagnosis_json.h"
#include "serve/text_format.h"

namespace ithbat::serve {
namespace {

using nlohmann::json;

// Label values and event text come from the outside world and need not be valid UTF-8;
// nlohmann would throw on dump, so invalid bytes become U+FFFD instead.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiResponse Success(const json& data) {
  json body = {{"status", "success"}, {"data", data}};
  return ApiResponse{200, std::string(kJsonContentType), Dump(body)};
}

ApiResponse BadRequest(const Error& error) { return ErrorResponse(400, "bad_request", error.message); }

// Strict parameters: a misspelt name ("strat") or a repeated one is an error rather than a
// silently ignored filter that returns more than the caller asked for.
Status CheckParams(const QueryParams& params, std::initializer_list<std::string_view> allowed) {
  for (auto it = params.begin(); it != params.end(); it = params.upper_bound(it->first)) {
    const std::string& name = it->first;
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
      return MakeErrorF(ErrorCode::kInvalidArgument, "unknown parameter '{}' (expected one of: {})",
                        name.substr(0, 64), list);
    }
    if (params.count(name) > 1) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "parameter '{}' given more than once", name);
    }
  }
  return Ok();
}

const std::string* Find(const QueryParams& params, std::string_view name) {
  auto it = params.find(std::string(name));
  return it == params.end() ? nullptr : &it->second;
}

// Error messages quote the offending text, cut so that a huge value does not echo back whole.
std::string Quote(std::string_view text) {
  constexpr size_t kMaxQuoted = 128;
  if (text.size() <= kMaxQuoted) return std::string(text);
  return fmt::format("{}…", text.substr(0, kMaxQuoted));
}

Result<TimeNs> ParseTimeParam(std::string_view name, std::string_view text) {
  // core's ParseTimestamp multiplies Unix seconds into nanoseconds; keep it inside int64.
  if (text.find('T') == std::string_view::npos) {
    double secs = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), secs);
    if (ec == std::errc() && ptr == text.data() + text.size() && !(std::fabs(secs) < 9.2e9)) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "parameter '{}': '{}' is out of range", name,
                        Quote(text));
    }
  }
  auto t = ParseTimestamp(text);
  if (!t) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "parameter '{}': {} (expected RFC 3339 or Unix seconds)",
                      name, Quote(t.error().message));
  }
  return *t;
}

Result<std::optional<TimeNs>> OptionalTime(const QueryParams& params, std::string_view name) {
  const std::string* text = Find(params, name);
  if (!text) return std::optional<TimeNs>();
  auto t = ParseTimeParam(name, *text);
  if (!t) return std::unexpected(t.error());
  return std::optional<TimeNs>(*t);
}

Result<int64_t> ParseIntParam(std::string_view name, std::string_view text, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "parameter '{}': '{}' is not an integer in [{}, {}]", name,
                      Quote(text), min, max);
  }
  return v;
}

struct Window {
  TimeNs from = 0;
  TimeNs to = 0;
};

// start/end with defaults; start after end is an error rather than an empty answer.
Result<Window> ParseWindow(const QueryParams& params, TimeNs default_from, TimeNs default_to) {
  auto start = OptionalTime(params, "start");
  if (!start) return std::unexpected(start.error());
  auto end = OptionalTime(params, "end");
  if (!end) return std::unexpected(end.error());
  Window w;
  w.to = end->value_or(default_to);
  if (start->has_value()) {
    w.from = **start;
  } else if (end->has_value() && default_from != kMinTime) {
    // Only end given: the default window ends there.
    w.from = w.to - (default_to - default_from);
  } else {
    w.from = default_from;
  }
  if (w.from > w.to) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "start ({}) is after end ({})", FormatRfc3339(w.from),
                      FormatRfc3339(w.to));
  }
  return w;
}

json LabelsJson(const LabelSet& labels) {
  json out = json::object();
  for (size_t i = 0; i < labels.size(); ++i)
    out[std::string(labels.NameAt(i))] = std::string(labels.ValueAt(i));
  return out;
}

json EventJson(const Event& e) {
  json j = {{"time", FormatRfc3339(e.time)}, {"time_unix_ns", e.time}, {"kind", EventKindName(e.kind)}};
  const Identity& id = e.identity;
  if (!id.cluster.empty()) j["cluster"] = id.cluster;
  if (!id.node.empty()) j["node"] = id.node;
  if (!id.job.empty()) j["job"] = id.job;
  if (id.rank >= 0) j["rank"] = id.rank;
  if (id.local_rank >= 0) j["local_rank"] = id.local_rank;
  if (id.world_size >= 0) j["world_size"] = id.world_size;
  if (id.pid >= 0) j["pid"] = id.pid;
  if (id.gpu_index >= 0) j["gpu"] = id.gpu_index;
  if (!id.gpu_uuid.empty()) j["gpu_uuid"] = id.gpu_uuid;
  j["step"] = e.step >= 0 ? json(e.step) : json(nullptr);
  // An event's NaN means "no value" (the default); numbers travel as strings so that ±Inf do.
  j["value"] = std::isnan(e.value) ? json(nullptr) : json(FormatSampleValue(e.value));
  j["name"] = e.name;
  j["text"] = e.text;
  json attrs = json::object();
  for (const auto& [k, v] : e.attrs) attrs[k] = v;
  j["attrs"] = std::move(attrs);
  j["source"] = e.source;
  return j;
}

void AppendStepJson(std::string& out, const StepSpan& s) {
  out += fmt::format(R"({{"step":{},"start":"{}","end":"{}","start_unix_ns":{},"end_unix_ns":{},)"
                     R"("duration_seconds":{}}})",
                     s.step, FormatRfc3339(s.start), FormatRfc3339(s.end), s.start, s.end,
                     FormatUnixSeconds(s.end - s.start));
}

}  // namespace

std::string_view ErrorCodeForStatus(int status) {
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "request_timeout";
    case 413:
      return "payload_too_large";
    case 414:
      return "uri_too_long";
    case 416:
      return "range_not_satisfiable";
    case 422:
      return "limit_exceeded";
    case 431:
      return "headers_too_large";
    case 500:
      return "internal";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal" : "bad_request";
  }
}

ApiResponse ErrorResponse(int status, std::string_view code, std::string_view message) {
  json body = {{"status", "error"}, {"error", {{"code", code}, {"message", message}}}};
  return ApiResponse{status, std::string(kJsonContentType), Dump(body)};
}

ApiResponse ServeSeries(const store::Store& store, const QueryParams& params, const ServerOptions& options,
                        TimeNs now) {
  if (auto ok = CheckParams(params, {"match", "start", "end"}); !ok) return BadRequest(ok.error());
  const std::string* match = Find(params, "match");
  if (!match || match->empty()) {
    return ErrorResponse(400, "bad_request", "parameter 'match' (a series selector) is required");
  }
  auto selector = store::SeriesSelector::Parse(*match);
  if (!selector) {
    return ErrorResponse(400, "bad_request", fmt::format("bad selector: {}", selector.error().message));
  }
  auto window = ParseWindow(params, now - kDefaultQueryWindow, now);
  if (!window) return BadRequest(window.error());

  // Count before decoding anything: the series limit protects the memory the answer needs.
  size_t matching = store.ListSeries(*selector).size();
  if (matching > options.max_series_per_query) {
    return ErrorResponse(422, "limit_exceeded",
                         fmt::format("the selector matches {} series, more than the limit of {}; narrow it "
                                     "with more label matchers",
                                     matching, options.max_series_per_query));
  }
  auto data = store.Select(*selector, window->from, window->to);
  if (!data) {
    const Error& e = data.error();
    if (e.code == ErrorCode::kInvalidArgument) return ErrorResponse(400, "bad_request", e.message);
    if (e.code == ErrorCode::kResourceExhausted) return ErrorResponse(422, "limit_exceeded", e.message);
    return ErrorResponse(500, "internal", e.message);
  }
  size_t samples = 0;
  for (const auto& s : *data) samples += s.samples.size();
  if (data->size() > options.max_series_per_query || samples > options.max_samples_per_query) {
    return ErrorResponse(
        422, "limit_exceeded",
        fmt::format("the query returns {} series with {} samples, more than the limits of {} "
                    "series and {} samples; narrow the selector or the time window",
                    data->size(), samples, options.max_series_per_query, options.max_samples_per_query));
  }

  // Samples are written as text directly: a json tree per sample would cost ~10x the answer's
  // size in memory for a large query. Values are strings (Prometheus' convention) so that NaN
  // and ±Inf survive JSON; their text never needs escaping.
  std::string out = R"({"status":"success","data":[)";
  out.reserve(out.size() + samples * 32 + data->size() * 128);
  for (size_t i = 0; i < data->size(); ++i) {
    const store::SeriesData& s = (*data)[i];
    if (i) out += ',';
    json head = {{"metric", s.info.desc ? s.info.desc->name : std::string()},
                 {"labels", LabelsJson(s.info.labels)},
                 {"type", s.info.desc ? MetricTypeName(s.info.desc->type) : std::string_view("gauge")},
                 {"unit", s.info.desc ? s.info.desc->unit : std::string()}};
    std::string head_text = Dump(head);
    head_text.pop_back();  // reopen the object to add the samples
    out += head_text;
    out += R"(,"samples":[)";
    for (size_t k = 0; k < s.samples.size(); ++k) {
      if (k) out += ',';
      out += '[';
      out += FormatUnixSeconds(s.samples[k].t);
      out += ",\"";
      out += FormatSampleValue(s.samples[k].v);
      out += "\"]";
    }
    out += "]}";
  }
  out += "]}";
  return ApiResponse{200, std::string(kJsonContentType), std::move(out)};
}

ApiResponse ServeEvents(const store::Store& store, const QueryParams& params) {
  if (auto ok = CheckParams(params, {"kind", "job", "rank", "pid", "gpu", "start", "end", "limit"}); !ok) {
    return BadRequest(ok.error());
  }
  store::EventQuery query;
  if (const std::string* kinds = Find(params, "kind")) {
    std::string_view rest = *kinds;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      auto kind = ParseEventKind(item);
      if (!kind) {
        return ErrorResponse(400, "bad_request",
                             fmt::format("parameter 'kind': unknown event kind '{}'", Quote(item)));
      }
      if (query.kinds.size() >= static_cast<size_t>(kEventKindCount)) {
        return ErrorResponse(400, "bad_request", "parameter 'kind': too many kinds");
      }
      query.kinds.push_back(*kind);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (const std::string* job = Find(params, "job")) query.job = *job;
  struct IntFilter {
    std::string_view name;
    int32_t* target;
  };
  for (IntFilter f :
       {IntFilter{"rank", &query.rank}, IntFilter{"pid", &query.pid}, IntFilter{"gpu", &query.gpu}}) {
    if (const std::string* text = Find(params, f.name)) {
      auto v = ParseIntParam(f.name, *text, 0, INT32_MAX);
      if (!v) return BadRequest(v.error());
      *f.target = static_cast<int32_t>(*v);
    }
  }
  auto window = ParseWindow(params, kMinTime, kMaxTime);
  if (!window) return BadRequest(window.error());
  query.from = window->from;
  query.to = window->to;
  query.limit = kDefaultEventLimit;
  if (const std::string* text = Find(params, "limit")) {
    auto v = ParseIntParam("limit", *text, 1, kMaxEventLimit);
    if (!v) return BadRequest(v.error());
    query.limit = static_cast<size_t>(*v);
  }
  json data = json::array();
  for (const Event& e : store.Events(query)) data.push_back(EventJson(e));
  return Success(data);
}

ApiResponse ServeSteps(const store::Store& store, const QueryParams& params, TimeNs now) {
  if (auto ok = CheckParams(params, {"job", "rank", "start", "end", "at"}); !ok)
    return BadRequest(ok.error());
  const std::string* job = Find(params, "job");
  const std::string* rank_text = Find(params, "rank");
  if (!job || job->empty() || !rank_text) {
    return ErrorResponse(400, "bad_request", "parameters 'job' and 'rank' are required");
  }
  auto rank = ParseIntParam("rank", *rank_text, -1, INT32_MAX);
  if (!rank) return BadRequest(rank.error());
  auto r = static_cast<int32_t>(*rank);

  if (const std::string* at_text = Find(params, "at")) {
    if (Find(params, "start") || Find(params, "end")) {
      return ErrorResponse(400, "bad_request", "give either 'at' or 'start'/'end', not both");
    }
    auto at = ParseTimeParam("at", *at_text);
    if (!at) return BadRequest(at.error());
    auto step = store.StepAt(*job, r, *at);
    if (!step) return Success(nullptr);
    auto span = store.FindStep(*job, r, *step);
    if (!span) return Success(json{{"step", *step}});
    std::string out = R"({"status":"success","data":)";
    AppendStepJson(out, *span);
    out += '}';
    return ApiResponse{200, std::string(kJsonContentType), std::move(out)};
  }

  auto window = ParseWindow(params, now - kDefaultQueryWindow, now);
  if (!window) return BadRequest(window.error());
  std::vector<StepSpan> spans = store.Steps(*job, r, window->from, window->to);
  if (spans.size() > kMaxStepsPerQuery) {
    return ErrorResponse(422, "limit_exceeded",
                         fmt::format("the window holds {} steps, more than the limit of {}; narrow it",
                                     spans.size(), kMaxStepsPerQuery));
  }
  std::string out = R"({"status":"success","data":[)";
  out.reserve(out.size() + spans.size() * 160);
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i) out += ',';
    AppendStepJson(out, spans[i]);
  }
  out += "]}";
  return ApiResponse{200, std::string(kJsonContentType), std::move(out)};
}

ApiResponse ServeMetricList(const store::Store& store, const std::vector<MetricDesc>& declared) {
  struct Entry {
    MetricDesc desc;
    bool stored = false;
  };
  std::map<std::string, Entry> by_name;
  for (const MetricDesc& d : declared) by_name.try_emplace(d.name, Entry{d, false});
  // What the store holds wins: it is what /metrics shows.
  for (MetricDesc& d : store.Metrics()) {
    std::string name = d.name;
    by_name.insert_or_assign(std::move(name), Entry{std::move(d), true});
  }
  json data = json::array();
  for (const auto& [name, e] : by_name) {
    data.push_back({{"name", name},
                    {"type", MetricTypeName(e.desc.type)},
                    {"unit", e.desc.unit},
                    {"help", e.desc.help},
                    {"labels", e.desc.label_names},
                    {"stored", e.stored}});
  }
  return Success(data);
}

std::string_view CollectorStateName(agent::CollectorState state) {
  switch (state) {
    case agent::CollectorState::kCreated:
      return "created";
    case agent::CollectorState::kInitialized:
      return "initialized";
    case agent::CollectorState::kRunning:
      return "running";
    case agent::CollectorState::kStopped:
      return "stopped";
    case agent::CollectorState::kFailed:
      return "failed";
  }
  return "unknown";
}

ApiResponse ServeHealth(const std::vector<agent::CollectorStatus>& collectors) {
  json list = json::array();
  json down = json::array();
  for (const auto& c : collectors) {
    const agent::CollectorHealth& h = c.health;
    list.push_back(
        {{"name", c.name},
         {"state", CollectorStateName(h.state)},
         {"up", h.up},
         {"collects", h.collects},
         {"errors", h.errors},
         {"timeouts", h.timeouts},
         {"last_error", h.last_error},
         {"degraded", h.degraded},
         {"last_success", h.last_success > 0 ? json(FormatRfc3339(h.last_success)) : json(nullptr)}});
    if (!h.up) down.push_back(c.name);
  }
  // Always "ok": the agent answers, so it is alive; a down collector is reported, not fatal.
  json body = {{"status", "ok"}, {"collectors", std::move(list)}, {"down", std::move(down)}};
  return ApiResponse{200, std::string(kJsonContentType), Dump(body)};
}

ApiResponse ServeVersion(std::string_view node) {
  json body = {{"version", kVersion}, {"api", "v1"}};
  if (!node.empty()) body["node"] = node;
  return ApiResponse{200, std::string(kJsonContentType), Dump(body)};
}

ApiResponse ServeDiagnoses(bool enabled, const std::vector<Diagnosis>& diagnoses) {
  if (!enabled) {
    return ErrorResponse(503, ErrorCodeForStatus(503),
                         "diagnosis is off on this agent (diagnose-interval = 0)");
  }
  json list = json::array();
  for (const auto& d : diagnoses) list.push_back(investigate::ToJson(d));
  json body = {{"schema", investigate::kDiagnosisSchema}, {"diagnoses", std::move(list)}};
  return ApiResponse{200, std::string(kJsonContentType), Dump(body)};
}

}  // namespace ithbat::serve
