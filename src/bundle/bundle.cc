#include "bundle/bundle.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "core/file_util.h"
#include "core/version.h"
#include "detect/inference/efficiency.h"
#include "detect/jobs.h"
#include "investigate/diagnosis_json.h"
#include "store/store.h"

namespace ithbat::bundle {
namespace {

// Data before the window's start goes in too: counters need their last value before `from` to
// count growth in the window, and detectors compare against the job's own earlier behaviour.
constexpr TimeNs kHistoryBeforeWindow = 10 * 60 * kNsPerSec;

// The tables (docs/bundles.md). Times are Unix nanoseconds; a NULL sample value is NaN (SQLite
// stores NaN as NULL); labels, attrs and diagnoses are JSON text.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE metrics (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL, unit TEXT NOT NULL,
                      help TEXT NOT NULL);
CREATE TABLE series (id INTEGER PRIMARY KEY, node TEXT NOT NULL, metric_id INTEGER NOT NULL REFERENCES metrics(id),
                     labels TEXT NOT NULL);
CREATE TABLE samples (series_id INTEGER NOT NULL REFERENCES series(id), t_unix_ns INTEGER NOT NULL, value REAL);
CREATE TABLE events (node TEXT NOT NULL, t_unix_ns INTEGER NOT NULL, kind TEXT NOT NULL, source TEXT NOT NULL,
                     cluster TEXT NOT NULL, job TEXT NOT NULL, rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,
                     world_size INTEGER NOT NULL, pid INTEGER NOT NULL, gpu INTEGER NOT NULL, gpu_uuid TEXT NOT NULL,
                     step INTEGER NOT NULL, value REAL, name TEXT NOT NULL, text TEXT NOT NULL, attrs TEXT NOT NULL);
CREATE TABLE steps (node TEXT NOT NULL, job TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,
                    start_unix_ns INTEGER NOT NULL, end_unix_ns INTEGER NOT NULL);
CREATE TABLE diagnoses (ord INTEGER PRIMARY KEY, id TEXT NOT NULL, json TEXT NOT NULL);
CREATE INDEX samples_by_series ON samples (series_id, t_unix_ns);
)sql";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtCloser {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtCloser>;

const Error& AsError(const Error& e) { return e; }
const Error& AsError(const std::unexpected<Error>& e) { return e.error(); }

std::unexpected<Error> SqlError(sqlite3* db, std::string_view what) {
  return MakeErrorF(ErrorCode::kIo, "{}: {}", what, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
}

Status Exec(sqlite3* db, const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string text = msg != nullptr ? msg : "unknown error";
    sqlite3_free(msg);
    return MakeErrorF(ErrorCode::kIo, "sqlite: {}", text);
  }
  return {};
}

Result<Stmt> Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) return SqlError(db, "prepare");
  return Stmt(s);
}

void BindText(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
void BindReal(sqlite3_stmt* s, int i, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_double(s, i, v);
  }
}

Status Step(sqlite3* db, sqlite3_stmt* s, std::string_view what) {
  const int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE) return SqlError(db, what);
  return {};
}

std::string Column(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return p != nullptr ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string();
}
double ColumnReal(sqlite3_stmt* s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, i);
}

nlohmann::json LabelsJson(const LabelSet& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < labels.size(); ++i)
    j[std::string(labels.NameAt(i))] = std::string(labels.ValueAt(i));
  return j;
}

bool Concerns(const Diagnosis& d, const std::string& job) {
  return d.subjects.job == job || std::find(d.subjects.other_jobs.begin(), d.subjects.other_jobs.end(),
                                            job) != d.subjects.other_jobs.end();
}

// Writes one store's data in [from, to] under `node`.
Status WriteNode(sqlite3* db, const std::string& node, const store::Store& store, const std::string& job,
                 TimeNs from, TimeNs to, std::map<std::string, int64_t>& metric_ids, RecordSummary& summary) {
  auto selector = store::SeriesSelector::Parse(R"({__name__=~".+"})");
  if (!selector) return std::unexpected(selector.error());
  auto series = store.Select(*selector, from, to);
  if (!series) return std::unexpected(series.error());
  auto add_metric = Prepare(db, "INSERT INTO metrics (id, name, type, unit, help) VALUES (?, ?, ?, ?, ?)");
  auto add_series = Prepare(db, "INSERT INTO series (id, node, metric_id, labels) VALUES (?, ?, ?, ?)");
  auto add_sample = Prepare(db, "INSERT INTO samples (series_id, t_unix_ns, value) VALUES (?, ?, ?)");
  auto add_event =
      Prepare(db,
              "INSERT INTO events (node, t_unix_ns, kind, source, cluster, job, rank, local_rank, "
              "world_size, pid, gpu, gpu_uuid, step, value, name, text, attrs) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  auto add_step = Prepare(
      db, "INSERT INTO steps (node, job, rank, step, start_unix_ns, end_unix_ns) VALUES (?, ?, ?, ?, ?, ?)");
  for (auto* st : {&add_metric, &add_series, &add_sample, &add_event, &add_step}) {
    if (!*st) return std::unexpected((*st).error());
  }
  for (const auto& s : *series) {
    if (s.samples.empty()) continue;
    auto [it, fresh] = metric_ids.emplace(s.info.desc->name, static_cast<int64_t>(metric_ids.size() + 1));
    if (fresh) {
      sqlite3_stmt* q = add_metric->get();
      sqlite3_bind_int64(q, 1, it->second);
      BindText(q, 2, s.info.desc->name);
      BindText(q, 3, MetricTypeName(s.info.desc->type));
      BindText(q, 4, s.info.desc->unit);
      BindText(q, 5, s.info.desc->help);
      if (auto st = Step(db, q, "insert metric"); !st) return st;
    }
    const int64_t series_id = ++summary.series;
    sqlite3_stmt* q = add_series->get();
    sqlite3_bind_int64(q, 1, series_id);
    BindText(q, 2, node);
    sqlite3_bind_int64(q, 3, it->second);
    BindText(q, 4, LabelsJson(s.info.labels).dump());
    if (auto st = Step(db, q, "insert series"); !st) return st;
    for (const auto& sample : s.samples) {
      sqlite3_stmt* a = add_sample->get();
      sqlite3_bind_int64(a, 1, series_id);
      sqlite3_bind_int64(a, 2, sample.t);
      BindReal(a, 3, sample.v);
      if (auto st = Step(db, a, "insert sample"); !st) return st;
      ++summary.samples;
    }
  }

  store::EventQuery q;
  q.from = from;
  q.to = to;
  q.limit = static_cast<size_t>(kMaxEvents);
  for (const Event& e : store.Events(q)) {
    // Other jobs' raw lines are theirs; their parsed events (saves, errors, losses) stay.
    if (e.kind == EventKind::kLogLine && !e.identity.job.empty() && e.identity.job != job) continue;
    sqlite3_stmt* a = add_event->get();
    const Identity& id = e.identity;
    BindText(a, 1, node);
    sqlite3_bind_int64(a, 2, e.time);
    BindText(a, 3, EventKindName(e.kind));
    BindText(a, 4, e.source);
    BindText(a, 5, id.cluster);
    BindText(a, 6, id.job);
    sqlite3_bind_int(a, 7, id.rank);
    sqlite3_bind_int(a, 8, id.local_rank);
    sqlite3_bind_int(a, 9, id.world_size);
    sqlite3_bind_int(a, 10, id.pid);
    sqlite3_bind_int(a, 11, id.gpu_index);
    BindText(a, 12, id.gpu_uuid);
    sqlite3_bind_int64(a, 13, e.step);
    BindReal(a, 14, e.value);
    BindText(a, 15, e.name);
    BindText(a, 16, e.text);
    nlohmann::json attrs = nlohmann::json::array();
    for (const auto& [k, v] : e.attrs) attrs.push_back({k, v});
    BindText(a, 17, attrs.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (auto st = Step(db, a, "insert event"); !st) return st;
    ++summary.events;
  }

  for (const auto& [step_job, rank] : store.StepKeys()) {
    for (const StepSpan& span : store.Steps(step_job, rank, from, to)) {
      sqlite3_stmt* a = add_step->get();
      BindText(a, 1, node);
      BindText(a, 2, step_job);
      sqlite3_bind_int(a, 3, rank);
      sqlite3_bind_int64(a, 4, span.step);
      sqlite3_bind_int64(a, 5, span.start);
      sqlite3_bind_int64(a, 6, span.end);
      if (auto st = Step(db, a, "insert step"); !st) return st;
      ++summary.steps;
    }
  }
  return {};
}

Status PutMeta(sqlite3* db, const BundleMeta& m) {
  auto put = Prepare(db, "INSERT INTO meta (key, value) VALUES (?, ?)");
  if (!put) return std::unexpected(put.error());
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"format", m.format},
      {"job", m.job},
      {"from_unix_ns", std::to_string(m.from)},
      {"to_unix_ns", std::to_string(m.to)},
      {"from", FormatRfc3339(m.from)},
      {"to", FormatRfc3339(m.to)},
      {"created_unix_ns", std::to_string(m.created)},
      {"source", m.source},
      {"ithbat_version", m.ithbat_version},
      {"nodes", nlohmann::json(m.nodes).dump()},
      {"list_price_per_gpu_hour", fmt::format("{}", m.list_price_per_gpu_hour)},
  };
  for (const auto& [k, v] : rows) {
    BindText(put->get(), 1, k);
    BindText(put->get(), 2, v);
    if (auto st = Step(db, put->get(), "insert meta"); !st) return st;
  }
  return {};
}

Result<int64_t> ParseI64(const std::string& text, std::string_view what) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return MakeErrorF(ErrorCode::kInvalidArgument, "meta {}: not an integer: '{}'", what, QuoteForError(text));
}

// Times a bundle may hold: what ParseTimestamp accepts as Unix seconds (±9·10⁹ s, years
// 1685-2255), so that a window's arithmetic (to − from, from − a lookback) cannot overflow.
constexpr TimeNs kMaxAbsBundleTime = 9'000'000'000LL * kNsPerSec;
// A job spans at most this many nodes (the largest training runs published use a few thousand
// 8-GPU nodes); each gets a store when read, so a forged list must not make a million.
constexpr size_t kMaxBundleNodes = 16'384;

// The meta rows a reader relies on, checked before any row is read.
Status CheckMeta(const BundleMeta& m) {
  if (m.job.empty()) return MakeError(ErrorCode::kInvalidArgument, "meta job: empty");
  for (auto [what, t] : {std::pair{"from_unix_ns", m.from}, std::pair{"to_unix_ns", m.to},
                         std::pair{"created_unix_ns", m.created}}) {
    if (t < -kMaxAbsBundleTime || t > kMaxAbsBundleTime) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "meta {}: {} is outside years 1685-2255", what, t);
    }
  }
  if (m.from > m.to) return MakeError(ErrorCode::kInvalidArgument, "meta: the window starts after it ends");
  if (!std::isfinite(m.list_price_per_gpu_hour) || m.list_price_per_gpu_hour < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "meta list_price_per_gpu_hour: not a price (negative or not finite)");
  }
  if (m.nodes.size() > kMaxBundleNodes) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "meta nodes: {} nodes, more than the reader's limit of {}",
                      m.nodes.size(), kMaxBundleNodes);
  }
  std::set<std::string_view> seen;
  for (const std::string& node : m.nodes) {
    if (node.empty() || node.size() > 253) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "meta nodes: {} is not a node name",
                        QuoteForError(node));
    }
    if (!seen.insert(node).second) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "meta nodes: {} twice", QuoteForError(node));
    }
  }
  return {};
}

Result<int64_t> CountRows(sqlite3* db, const char* table) {
  auto q = Prepare(db, fmt::format("SELECT COUNT(*) FROM {}", table).c_str());
  if (!q) return std::unexpected(q.error());
  if (sqlite3_step(q->get()) != SQLITE_ROW) return SqlError(db, fmt::format("count {}", table));
  return sqlite3_column_int64(q->get(), 0);
}

}  // namespace

std::vector<Diagnosis> DiagnoseJob(const detect::FleetView& view, const std::string& job, TimeNs from,
                                   TimeNs to, double list_price_per_gpu_hour) {
  investigate::InvestigateOptions options;
  options.list_price_per_gpu_hour = list_price_per_gpu_hour;
  std::vector<Diagnosis> out;
  for (auto& d : investigate::DiagnoseAsOf(view, from, to, options)) {
    if (Concerns(d, job)) out.push_back(std::move(d));
  }
  return out;
}

namespace {
// `window` grows to cover `more` (or becomes it).
void Widen(std::optional<TimeWindow>& window, const TimeWindow& more) {
  window = window ? TimeWindow{std::min(window->start, more.start), std::max(window->end, more.end)} : more;
}
}  // namespace

Result<RecordSummary> WriteBundle(const detect::FleetView& view, const RecordOptions& options,
                                  const std::string& path) {
  if (options.job.empty())
    return MakeError(ErrorCode::kInvalidArgument, "a bundle is about one job: give its id");
  if (options.from != kMinTime && options.to != kMaxTime && options.from >= options.to) {
    return MakeError(ErrorCode::kInvalidArgument, "the window's start is not before its end");
  }
  std::error_code ec;
  // symlink_status: a dangling link counts as existing (SQLite would create its target).
  if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} exists: a bundle is evidence and is never overwritten",
                      path);
  }
  // Find the job and its window as the stores hold it: a training job's ranks, or an inference
  // server (named as its findings name it).
  const auto jobs = detect::DiscoverJobs(view, options.from, options.to);
  std::optional<TimeWindow> found;
  TimeNs newest = kMinTime;
  std::set<std::string> names;
  for (const auto& j : jobs) {
    if (j.id == options.job) found = j.window;
    names.insert(j.id);
    newest = std::max(newest, j.window.end);
  }
  for (const auto& s : detect::DiscoverServers(view, options.from, options.to)) {
    if (s.id == options.job) {
      Widen(found, s.window);
    }
    names.insert(s.id);
    newest = std::max(newest, s.window.end);
  }
  // A job with no probe, scheduling or output series (probes off, a job that never logged) is
  // still known from the GPU collector: NVML lists its processes, tagged with the identity the
  // agent resolved (scheduler, launcher). Its bundle then holds its GPUs' story.
  if (!found) {
    for (const auto& [v, samples] :
         view.Samples("", "ithbat_gpu_process_memory_used_bytes", options.from, options.to)) {
      if (samples.empty() || detect::Label(v.labels, "job_id") != options.job) continue;
      Widen(found, TimeWindow{samples.front().t, samples.back().t});
      newest = std::max(newest, samples.back().t);
    }
  }
  // The scheduler's own word (Slurm's prolog and epilog, docs/slurm.md): the job ran from its
  // start record to its end record, known even where no process of it was ever seen.
  {
    store::EventQuery q;
    q.kinds = {EventKind::kJobStart, EventKind::kJobEnd};
    q.job = options.job;
    q.from = options.from;
    q.to = options.to;
    for (const auto& e : view.Events(q)) {
      Widen(found, TimeWindow{e.time, e.time});
      newest = std::max(newest, e.time);
    }
  }
  if (!found) {
    return MakeErrorF(ErrorCode::kNotFound, "job {} has no process in the stores' window (jobs seen: {})",
                      options.job, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
  }
  RecordSummary summary;
  BundleMeta& meta = summary.meta;
  meta.format = std::string(kBundleFormat);
  meta.job = options.job;
  // Default window: the job's run, to the newest data of any job (a rerun that confirms or
  // clears a divergence runs after the job).
  meta.from = options.from != kMinTime ? options.from : found->start;
  meta.to = options.to != kMaxTime ? options.to : newest;
  meta.created = NowNs();
  meta.source = options.source;
  meta.ithbat_version = kVersion;
  meta.nodes = view.Nodes();
  meta.list_price_per_gpu_hour = options.list_price_per_gpu_hour;

  const std::vector<Diagnosis> diagnoses =
      DiagnoseJob(view, options.job, meta.from, meta.to, options.list_price_per_gpu_hour);

  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return SqlError(raw, fmt::format("create {}", path));
  auto fail = [&](const auto& error) -> std::unexpected<Error> {
    const Error& e = AsError(error);
    db.reset();
    std::filesystem::remove(path, ec);  // no half-written evidence left behind
    return MakeErrorF(e.code, "{}: {}", path, e.message);
  };
  for (const char* sql : {"PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF", "BEGIN"}) {
    if (auto st = Exec(db.get(), sql); !st) return fail(st.error());
  }
  if (auto st = Exec(db.get(), kSchemaSql); !st) return fail(st.error());
  if (auto st = PutMeta(db.get(), meta); !st) return fail(st.error());
  std::map<std::string, int64_t> metric_ids;
  const TimeNs data_from =
      meta.from > kMinTime + kHistoryBeforeWindow ? meta.from - kHistoryBeforeWindow : meta.from;
  for (const auto& node : meta.nodes) {
    if (auto st = WriteNode(db.get(), node, *view.StoreOf(node), options.job, data_from, meta.to, metric_ids,
                            summary);
        !st) {
      return fail(st.error());
    }
  }
  auto add = Prepare(db.get(), "INSERT INTO diagnoses (ord, id, json) VALUES (?, ?, ?)");
  if (!add) return fail(add.error());
  for (const auto& d : diagnoses) {
    sqlite3_bind_int64(add->get(), 1, ++summary.diagnoses);
    BindText(add->get(), 2, d.id);
    BindText(add->get(), 3,
             investigate::ToJson(d).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (auto st = Step(db.get(), add->get(), "insert diagnosis"); !st) return fail(st.error());
  }
  add->reset();
  if (auto st = Exec(db.get(), "COMMIT"); !st) return fail(st.error());
  if (sqlite3_close_v2(db.release()) != SQLITE_OK) return fail(MakeError(ErrorCode::kIo, "close failed"));
  return summary;
}

Result<Bundle> ReadBundle(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return MakeErrorF(ErrorCode::kNotFound, "{}: {}", path, ec.message());
  if (size > kMaxBundleBytes) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: {} bytes, more than the {} a bundle may have", path,
                      size, kMaxBundleBytes);
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return SqlError(raw, path);
  auto err = [&](const auto& error) -> std::unexpected<Error> {
    const Error& e = AsError(error);
    return MakeErrorF(e.code, "{}: {}", path, e.message);
  };

  Bundle b;
  {
    auto q = Prepare(db.get(), "SELECT key, value FROM meta");
    if (!q)
      return err(MakeError(ErrorCode::kInvalidArgument, "not an Ithbat evidence bundle (no meta table)"));
    std::map<std::string, std::string> meta;
    while (sqlite3_step(q->get()) == SQLITE_ROW && meta.size() < 1000)
      meta[Column(q->get(), 0)] = Column(q->get(), 1);
    if (meta["format"] != kBundleFormat) {
      return err(MakeErrorF(ErrorCode::kInvalidArgument, "format '{}' is not {} (a newer or a foreign file)",
                            QuoteForError(meta["format"]), kBundleFormat));
    }
    b.meta.format = meta["format"];
    b.meta.job = meta["job"];
    b.meta.source = meta["source"];
    b.meta.ithbat_version = meta["ithbat_version"];
    auto from = ParseI64(meta["from_unix_ns"], "from_unix_ns");
    auto to = ParseI64(meta["to_unix_ns"], "to_unix_ns");
    auto created = ParseI64(meta["created_unix_ns"], "created_unix_ns");
    for (auto* r : {&from, &to, &created}) {
      if (!*r) return err(r->error());
    }
    b.meta.from = *from;
    b.meta.to = *to;
    b.meta.created = *created;
    try {
      b.meta.nodes = nlohmann::json::parse(meta["nodes"]).get<std::vector<std::string>>();
      b.meta.list_price_per_gpu_hour = std::stod(meta["list_price_per_gpu_hour"]);
    } catch (const std::exception& e) {
      return err(
          MakeErrorF(ErrorCode::kInvalidArgument, "meta nodes/list price: {}", QuoteForError(e.what(), 240)));
    }
    if (auto st = CheckMeta(b.meta); !st) return err(st.error());
  }
  const std::pair<const char*, int64_t> limits[] = {{"series", kMaxSeries},
                                                    {"samples", kMaxSamples},
                                                    {"events", kMaxEvents},
                                                    {"steps", kMaxSteps},
                                                    {"diagnoses", kMaxDiagnoses}};
  for (const auto& [table, limit] : limits) {
    auto n = CountRows(db.get(), table);
    if (!n) return err(n.error());
    if (*n > limit) {
      return err(MakeErrorF(ErrorCode::kInvalidArgument, "{} {} rows, more than the reader's limit of {}",
                            table, *n, limit));
    }
  }

  std::map<std::string, std::unique_ptr<store::Store>> stores;
  for (const auto& node : b.meta.nodes) {
    store::StoreOptions options;
    options.retention = kMaxTime / 2;  // never drop anything: EnforceRetention is not called anyway
    options.memory_budget_bytes = 16ull << 30;
    options.max_series = static_cast<size_t>(kMaxSeries);
    options.max_events = static_cast<size_t>(kMaxEvents);
    auto s = store::Store::Open(options);
    if (!s) return err(s.error());
    stores.emplace(node, std::move(*s));
  }
  auto store_of = [&](const std::string& node, std::string_view table) -> Result<store::Store*> {
    auto it = stores.find(node);
    if (it == stores.end()) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "{}: node '{}' is not in meta.nodes", table, node);
    }
    return it->second.get();
  };

  // Series and their samples, in series then time order.
  std::map<int64_t, MetricDesc> metrics;
  {
    auto q = Prepare(db.get(), "SELECT id, name, type, unit, help FROM metrics");
    if (!q) return err(q.error());
    while (sqlite3_step(q->get()) == SQLITE_ROW) {
      MetricDesc d;
      d.name = Column(q->get(), 1);
      const std::string type = Column(q->get(), 2);
      if (type != "gauge" && type != "counter") {
        return err(MakeErrorF(ErrorCode::kInvalidArgument, "metrics {}: unknown type '{}'",
                              QuoteForError(d.name), QuoteForError(type)));
      }
      d.type = type == "counter" ? MetricType::kCounter : MetricType::kGauge;
      d.unit = Column(q->get(), 3);
      d.help = Column(q->get(), 4);
      metrics[sqlite3_column_int64(q->get(), 0)] = std::move(d);
    }
  }
  {
    auto q = Prepare(db.get(),
                     "SELECT s.id, s.node, s.metric_id, s.labels, p.t_unix_ns, p.value FROM series s "
                     "JOIN samples p ON p.series_id = s.id ORDER BY s.id, p.t_unix_ns");
    if (!q) return err(q.error());
    int64_t current = -1;
    store::Store* st = nullptr;
    SeriesRef ref = 0;
    int step_rc = SQLITE_ROW;
    while ((step_rc = sqlite3_step(q->get())) == SQLITE_ROW) {
      const int64_t id = sqlite3_column_int64(q->get(), 0);
      if (id != current) {
        current = id;
        auto s = store_of(Column(q->get(), 1), "series");
        if (!s) return err(s.error());
        st = *s;
        auto m = metrics.find(sqlite3_column_int64(q->get(), 2));
        if (m == metrics.end()) {
          return err(MakeErrorF(ErrorCode::kInvalidArgument, "series {}: no such metric", id));
        }
        std::vector<std::pair<std::string, std::string>> pairs;
        try {
          const nlohmann::json labels = nlohmann::json::parse(Column(q->get(), 3));
          if (!labels.is_object()) throw std::invalid_argument("not a JSON object");
          for (const auto& item : labels.items())
            pairs.emplace_back(item.key(), item.value().get<std::string>());
        } catch (const std::exception& e) {
          return err(MakeErrorF(ErrorCode::kInvalidArgument, "series {}: labels: {}", id,
                                QuoteForError(e.what(), 240)));
        }
        auto labels = LabelSet::From(pairs);
        if (!labels)
          return err(MakeErrorF(ErrorCode::kInvalidArgument, "series {}: {}", id, labels.error().message));
        auto r = st->RegisterSeries(m->second, *labels);
        if (!r) return err(MakeErrorF(r.error().code, "series {}: {}", id, r.error().message));
        ref = *r;
      }
      if (auto a = st->Append(ref, sqlite3_column_int64(q->get(), 4), ColumnReal(q->get(), 5)); !a) {
        return err(MakeErrorF(a.error().code, "series {}: sample: {}", id, a.error().message));
      }
    }
    if (step_rc != SQLITE_DONE) return err(SqlError(db.get(), "read samples"));
  }
  {
    auto q =
        Prepare(db.get(),
                "SELECT node, t_unix_ns, kind, source, cluster, job, rank, local_rank, world_size, pid, gpu, "
                "gpu_uuid, step, value, name, text, attrs FROM events ORDER BY t_unix_ns, rowid");
    if (!q) return err(q.error());
    int64_t row = 0;
    while (sqlite3_step(q->get()) == SQLITE_ROW) {
      ++row;
      sqlite3_stmt* s = q->get();
      auto st = store_of(Column(s, 0), "events");
      if (!st) return err(st.error());
      Event e;
      e.time = sqlite3_column_int64(s, 1);
      const auto kind = ParseEventKind(Column(s, 2));
      if (!kind)
        return err(MakeErrorF(ErrorCode::kInvalidArgument, "events row {}: unknown kind '{}'", row,
                              QuoteForError(Column(s, 2))));
      e.kind = *kind;
      e.source = Column(s, 3);
      e.identity.cluster = Column(s, 4);
      e.identity.job = Column(s, 5);
      e.identity.rank = sqlite3_column_int(s, 6);
      e.identity.local_rank = sqlite3_column_int(s, 7);
      e.identity.world_size = sqlite3_column_int(s, 8);
      e.identity.pid = sqlite3_column_int(s, 9);
      e.identity.gpu_index = sqlite3_column_int(s, 10);
      e.identity.gpu_uuid = Column(s, 11);
      e.step = sqlite3_column_int64(s, 12);
      e.value = ColumnReal(s, 13);
      e.name = Column(s, 14);
      e.text = Column(s, 15);
      try {
        for (const auto& pair : nlohmann::json::parse(Column(s, 16))) {
          e.attrs.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
        }
      } catch (const std::exception& ex) {
        return err(MakeErrorF(ErrorCode::kInvalidArgument, "events row {}: attrs: {}", row,
                              QuoteForError(ex.what(), 240)));
      }
      if (auto a = (*st)->AppendEvent(std::move(e)); !a) {
        return err(MakeErrorF(a.error().code, "events row {}: {}", row, a.error().message));
      }
    }
  }
  {
    auto q = Prepare(db.get(),
                     "SELECT node, job, rank, step, start_unix_ns, end_unix_ns FROM steps "
                     "ORDER BY node, job, rank, start_unix_ns, rowid");
    if (!q) return err(q.error());
    while (sqlite3_step(q->get()) == SQLITE_ROW) {
      sqlite3_stmt* s = q->get();
      auto st = store_of(Column(s, 0), "steps");
      if (!st) return err(st.error());
      StepSpan span{sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4), sqlite3_column_int64(s, 5)};
      if (auto a = (*st)->RecordStep(Column(s, 1), sqlite3_column_int(s, 2), span); !a) {
        return err(MakeErrorF(a.error().code, "steps {}/{} step {}: {}", QuoteForError(Column(s, 1)),
                              sqlite3_column_int(s, 2), span.step, a.error().message));
      }
    }
  }
  {
    auto q = Prepare(db.get(), "SELECT id, json FROM diagnoses ORDER BY ord");
    if (!q) return err(q.error());
    while (sqlite3_step(q->get()) == SQLITE_ROW) {
      const std::string id = Column(q->get(), 0);
      try {
        auto d = investigate::DiagnosisFromJson(nlohmann::json::parse(Column(q->get(), 1)));
        if (!d)
          return err(MakeErrorF(ErrorCode::kInvalidArgument, "diagnosis {}: {}", QuoteForError(id),
                                d.error().message));
        b.diagnoses.push_back(std::move(*d));
      } catch (const std::exception& e) {
        return err(MakeErrorF(ErrorCode::kInvalidArgument, "diagnosis {}: {}", QuoteForError(id),
                              QuoteForError(e.what(), 240)));
      }
    }
  }
  b.view = detect::FleetView::Owning(std::move(stores));
  return b;
}

}  // namespace ithbat::bundle
