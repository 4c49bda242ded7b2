#include "cli/replay_command.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/diagnosis_text.h"
#include "cli/log_events.h"
#include "collect/joblog/step_spans.h"
#include "collect/joblog/stored_event.h"
#include "collect/joblog/text/line_time.h"
#include "collect/serving/normalise.h"
#include "collect/serving/serving_collector.h"
#include "core/file_util.h"
#include "investigate/diagnosis_json.h"
#include "investigate/investigator.h"
#include "store/store.h"

namespace ithbat::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitInput = 1;
constexpr int kExitUsage = 2;

// The collectors an agent runs besides the two a replay holds, and what each would have told
// the engine (docs/diagnoses.md names them in every cause's evidence).
constexpr std::pair<std::string_view, std::string_view> kAbsentCollectors[] = {
    {"gpu", "NVML counters: utilisation, clocks and their throttle reasons, memory, ECC, NVLink, Xid by GPU"},
    {"probes", "eBPF on libcuda/libnccl: launches, NCCL calls per rank, who arrives last"},
    {"sched_io", "off-CPU time and file I/O latency of the ranks"},
    {"node", "mounts, block devices, InfiniBand port counters"},
    {"host", "CPU, memory and pressure of the node"},
    {"serving", "inference servers' /metrics"},
};

// The first stamp among a file's first kReplayStampLookaheadLines lines (read raw, at most
// kReplayStampLookaheadBytes), or nullopt: the file is dated by line number then.
std::optional<TimeNs> FirstStamp(const std::string& path) {
  // Non-blocking, and regular files only: a FIFO given as a log must not hang the look-ahead.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;  // the main pass says why
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  std::string head(kReplayStampLookaheadBytes, '\0');
  size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd, head.data() + got, head.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  collect::joblog::LineClock clock(kReplayStampYear);
  std::string_view rest = head;
  for (size_t i = 0; i < kReplayStampLookaheadLines && !rest.empty(); ++i) {
    const size_t eol = rest.find('\n');
    if (auto t = clock.Read(rest.substr(0, eol))) return t;
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
  }
  return std::nullopt;
}

std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

Result<ReplayResult> Replay(const ReplayCommandOptions& options) {
  if (options.logs.empty() && options.kmsg.empty() && options.scrapes.empty())
    return MakeError(ErrorCode::kInvalidArgument,
                     "give at least one log file (or --kmsg FILE, --scrape FILE)");
  if (options.logs.size() + options.kmsg.size() + options.scrapes.size() > kReplayMaxFiles)
    return MakeErrorF(ErrorCode::kInvalidArgument, "at most {} files per replay", kReplayMaxFiles);
  if (!(options.interval_seconds > 0) || options.interval_seconds > 3600)
    return MakeError(ErrorCode::kInvalidArgument, "--interval must be above 0 and at most 3600 seconds");
  if (options.job.empty() || options.node.empty())
    return MakeError(ErrorCode::kInvalidArgument, "--job and --node must not be empty");
  if (options.times != "lines" && options.times != "stamps")
    return MakeError(ErrorCode::kInvalidArgument, "--times must be lines or stamps");
  const bool by_stamps = options.times == "stamps";

  collect::joblog::StreamParserOptions so;
  so.format = options.format;
  if (auto probe = collect::joblog::StreamParser::Create(so); !probe) return std::unexpected(probe.error());

  store::StoreOptions store_options;
  store_options.retention = 0;  // nothing is dropped by age: a replay is all history
  store_options.max_events =
      options.max_events > 0 ? std::min(options.max_events, kReplayMaxEvents) : kReplayMaxEvents;
  store_options.memory_budget_bytes = 1ull << 30;
  auto opened = store::Store::Open(store_options);
  if (!opened) return std::unexpected(opened.error());
  store::Store& store = **opened;

  // --times stamps: a file whose first kReplayStampLookaheadLines lines hold a stamp is dated by
  // its stamps; the earliest first stamp is the origin from which undated material (files without
  // stamps, scrapes) is dated by number.
  std::map<std::string, TimeNs> first_stamps;
  TimeNs origin = kReplayStart;
  if (by_stamps) {
    TimeNs earliest = kMaxTime;
    for (const auto* paths : {&options.logs, &options.kmsg}) {
      for (const auto& path : *paths) {
        if (auto t = FirstStamp(path)) {
          first_stamps[path] = *t;
          earliest = std::min(earliest, *t);
        }
      }
    }
    if (earliest != kMaxTime) origin = earliest;
  }

  ReplayResult result;
  result.start = origin;
  result.end = origin;
  const TimeNs interval = static_cast<TimeNs>(std::llround(options.interval_seconds * 1e9));
  // Saturates rather than overflows: a file of billions of lines at an hour apart ends at kMaxTime.
  const uint64_t max_steps = static_cast<uint64_t>((kMaxTime - origin - kReplayTail) / interval);
  auto time_of = [&](uint64_t line) {
    const uint64_t n = line > 0 ? line - 1 : 0;
    return origin + static_cast<TimeNs>(std::min(n, max_steps)) * interval;
  };
  // Per-file tallies by error class and (file, rank) streams are bounded: a hostile file may name
  // a new class or rank on every line.
  auto tally = [](std::map<std::string, uint64_t>& m, std::string key) {
    if (m.size() >= kReplayMaxTallyKeys && m.count(key) == 0) key = "other";
    m[key]++;
  };
  auto store_event = [&](Event e) {
    result.end = std::max(result.end, e.time);
    if (store.AppendEvent(std::move(e))) {
      result.events++;
    } else {
      result.dropped++;
    }
  };

  // The time of a file's line: its last stamp (a file dated by stamps: the lines before its first
  // stamp take that stamp's time; a stamp earlier than the one before keeps the later one, as
  // order within a file is kept), or by its number.
  struct FileClock {
    std::optional<TimeNs> stamped_from;  // the file's first stamp, when it is dated by stamps
    collect::joblog::LineClock clock{kReplayStampYear};
    TimeNs now = 0;
  };
  auto line_time = [&](const FileClock& fc, uint64_t line) {
    return fc.stamped_from ? fc.now : time_of(line);
  };

  // One file through ReadLogEvents (a parser: job output; none: a kernel log), its tally kept.
  auto replay_file = [&](const std::string& path, collect::joblog::StreamParser* parser, FileClock& fc,
                         const JobLogEventFn& on_job, const KernelLogEventFn& on_kernel, ReplayFile& file) {
    file.path = path;
    file.kernel_log = parser == nullptr;
    if (auto it = first_stamps.find(path); it != first_stamps.end()) {
      fc.stamped_from = it->second;
      fc.now = it->second;
      file.first_time = it->second;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      file.failure = std::strerror(errno);
      return;
    }
    LogReadResult read;
    LogLineFn on_line;
    if (fc.stamped_from) {
      on_line = [&](std::string_view text, uint64_t) {
        if (auto t = fc.clock.Read(text)) {
          file.stamped++;
          fc.now = std::max(fc.now, *t);
        }
      };
    }
    auto failure = ReadLogEvents(fd, path, parser, on_job, on_kernel, read, on_line);
    ::close(fd);
    file.lines = read.lines;
    file.framework = read.framework;
    file.copies = read.copies;
    if (failure) file.failure = *failure;
    if (fc.stamped_from) file.last_time = fc.now;
    result.end = std::max(result.end, read.lines > 0 ? line_time(fc, read.lines) : origin);
  };

  // Job output: one stream per file; one number per (file, rank) in place of a pid.
  collect::joblog::StepSpans spans;
  std::map<std::pair<size_t, int32_t>, int32_t> stream_ids;
  for (size_t i = 0; i < options.logs.size(); ++i) {
    ReplayFile file;
    FileClock fc;
    auto parser = collect::joblog::StreamParser::Create(so);
    replay_file(
        options.logs[i], &*parser, fc,
        [&](collect::joblog::ParsedEvent& pe, uint64_t line, bool, std::string_view framework) {
          Identity id;
          id.node = options.node;
          id.job = options.job;
          id.world_size = options.world_size;
          id.rank = pe.rank;
          auto it = stream_ids.find({i, pe.rank});
          if (it == stream_ids.end() && stream_ids.size() < kReplayMaxStreams)
            it = stream_ids.emplace(std::make_pair(i, pe.rank), static_cast<int32_t>(stream_ids.size() + 1)).first;
          // Past the bound, further streams share one number (their ranks still tell them apart).
          id.pid = it != stream_ids.end() ? it->second : static_cast<int32_t>(kReplayMaxStreams + 1);
          const TimeNs t = line_time(fc, line);
          Event e = collect::joblog::StoredEvent(id, pe, t, framework);
          file.by_kind[std::string(EventKindName(e.kind))]++;
          if (e.kind == EventKind::kError) tally(file.errors, e.name);
          if (e.kind == EventKind::kStep && e.step >= 0) {
            if (auto span = spans.Next(e.identity.job, e.identity.rank, e.step, e.value, t)) {
              (void)store.RecordStep(e.identity.job, e.identity.rank, *span);
            }
          }
          store_event(std::move(e));
        },
        [](Event, uint64_t) {}, file);
    result.files.push_back(std::move(file));
  }

  // Kernel logs: Xid events as the kmsg collector stores them, GPUs numbered by first appearance.
  for (const auto& path : options.kmsg) {
    ReplayFile file;
    FileClock fc;
    replay_file(
        path, nullptr, fc, [](collect::joblog::ParsedEvent&, uint64_t, bool, std::string_view) {},
        [&](Event e, uint64_t line) {
          e.time = line_time(fc, line);
          e.identity.node = options.node;
          // An SXid is an NVSwitch's, whose PCI address is no GPU: left unresolved, as the kmsg
          // collector leaves it (NVML lists no such device).
          const bool sxid = std::any_of(e.attrs.begin(), e.attrs.end(),
                                        [](const auto& kv) { return kv.first == "sxid" && kv.second == "1"; });
          for (const auto& [k, v] : e.attrs) {
            if (sxid || k != "pci" || v.empty()) continue;
            auto [it, fresh] = result.gpus.try_emplace(v, static_cast<int32_t>(result.gpus.size()));
            e.identity.gpu_index = it->second;
          }
          file.by_kind["xid"]++;
          tally(file.errors, fmt::format("{} {}", sxid ? "sxid" : "xid",
                                         std::isfinite(e.value) ? static_cast<int64_t>(e.value) : -1));
          store_event(std::move(e));
        },
        file);
    result.files.push_back(std::move(file));
  }

  // Saved /metrics bodies through the serving collector's own ingest (one scrape each), so the
  // series are the agent's: the same normalisation, names and labels.
  std::unique_ptr<collect::ServingCollector> serving;
  std::map<collect::serving::Engine, uint64_t> scrapes_of;
  for (const auto& path : options.scrapes) {
    ReplayFile file;
    file.path = path;
    file.scrape = true;
    const collect::serving::ExpositionLimits limits;  // the serving collector's defaults
    auto body = ReadFileBounded(path, limits.max_body_bytes);
    auto expo = body ? collect::serving::ParseExposition(*body, limits)
                     : Result<collect::serving::Exposition>(std::unexpected(body.error()));
    if (!expo) {
      file.failure = expo.error().message;
      result.files.push_back(std::move(file));
      continue;
    }
    file.lines = expo->lines;
    file.by_kind["samples"] = expo->samples.size();
    const auto engine = collect::serving::EngineOfExposition(*expo);
    if (!engine) {
      file.notes.push_back("no inference server's metrics (vllm:, sglang: or tgi_ names): not used");
      result.files.push_back(std::move(file));
      continue;
    }
    file.framework = collect::serving::EngineName(*engine);
    if (!serving) {
      serving = collect::ServingCollector::Create(collect::ServingOptions{});
      if (auto init = serving->Init(store); !init) return std::unexpected(init.error());
    }
    collect::serving::ServerInfo server;
    server.engine = *engine;
    const TimeNs t = origin + static_cast<TimeNs>(std::min(scrapes_of[*engine]++, max_steps)) * interval;
    for (const Error& e : serving->IngestScrape(server, expo, t)) file.notes.push_back(e.message);
    result.end = std::max(result.end, t);
    result.scrapes++;
    result.files.push_back(std::move(file));
  }

  // The event log keeps the newest kReplayMaxEvents and counts what it let go.
  const uint64_t let_go = store.Stats().events_dropped;
  result.dropped += let_go;
  result.events -= std::min(result.events, let_go);
  std::map<std::string, std::unique_ptr<store::Store>> stores;
  stores.emplace(options.node, std::move(*opened));
  result.view = detect::FleetView::Owning(std::move(stores));
  investigate::InvestigateOptions io;
  io.list_price_per_gpu_hour = options.list_price_per_gpu_hour;
  io.trace = &result.trace;
  result.diagnoses = investigate::DiagnoseAsOf(result.view, kMinTime, result.end + kReplayTail, io);
  return result;
}

int RunReplayCommand(const ReplayCommandOptions& options, std::FILE* out, std::FILE* err) {
  auto replayed = Replay(options);
  if (!replayed) {
    fmt::print(err, "ithbat replay: {}\n", replayed.error().message);
    return kExitUsage;
  }
  const ReplayResult& r = *replayed;
  int rc = kExitOk;
  for (const auto& f : r.files) {
    if (!f.failure.empty()) {
      fmt::print(err, "ithbat replay: {}: {}\n", f.path, f.failure);
      rc = kExitInput;
    }
  }
  if (options.json) {
    PrintDiagnoses(r.diagnoses, true, false, out);
    std::fflush(out);
    return rc;
  }

  const std::string numbered =
      fmt::format("{} {} s", r.scrapes > 0 ? "lines and scrapes" : "lines", options.interval_seconds);
  if (options.times == "stamps") {
    fmt::print(
        out,
        "replay: job {} on node {}, {} (dated by the lines' own stamps, read as UTC, a stamp without a "
        "year as of {}; material without stamps: {} apart from {})\n",
        options.job, options.node, Plural(r.files.size(), "file", "files"), kReplayStampYear, numbered,
        FormatRfc3339(r.start));
  } else {
    fmt::print(out, "replay: job {} on node {}, {} ({} apart from {}; the files' own times are not read)\n",
               options.job, options.node, Plural(r.files.size(), "file", "files"), numbered,
               FormatRfc3339(r.start));
  }
  std::set<std::string> held;
  for (const auto& f : r.files) {
    if (!f.failure.empty()) {
      fmt::print(out, "  {}: not read ({})\n", f.path, f.failure);
      continue;
    }
    if (f.scrape) {
      fmt::print(out, "  scrape {}: {}, {}{}\n", f.path, Plural(f.lines, "line", "lines"),
                 Plural(f.by_kind.contains("samples") ? f.by_kind.at("samples") : 0, "sample", "samples"),
                 f.framework.empty() ? "" : fmt::format(", {} /metrics", f.framework));
      for (const auto& note : f.notes) fmt::print(out, "    {}\n", note);
      if (!f.framework.empty()) held.insert("serving");
      continue;
    }
    std::string kinds;
    for (const auto& [k, n] : f.by_kind) kinds += fmt::format("{}{}={}", kinds.empty() ? "" : " ", k, n);
    std::string errors;
    for (const auto& [k, n] : f.errors) errors += fmt::format("{}{}×{}", errors.empty() ? "" : ", ", k, n);
    fmt::print(out, "  {}{}: {}, {}{}{}\n", f.kernel_log ? "kernel log " : "", f.path,
               Plural(f.lines, "line", "lines"),
               f.kernel_log
                   ? std::string("")
                   : fmt::format("framework {}, ", f.framework.empty() ? "none detected" : f.framework),
               kinds.empty() ? "no events" : kinds, errors.empty() ? "" : fmt::format(" ({})", errors));
    if (f.copies > 0)
      fmt::print(out, "    {} repeated a recent line of the same step (other ranks' copies): read once\n",
                 Plural(f.copies, "line", "lines"));
    if (options.times == "stamps") {
      if (f.first_time != 0) {
        fmt::print(out, "    {} stamped, {} to {}\n", Plural(f.stamped, "line", "lines"),
                   FormatRfc3339(f.first_time), FormatRfc3339(f.last_time));
      } else {
        fmt::print(out, "    no stamp in its first {} lines: dated by line number\n",
                   kReplayStampLookaheadLines);
      }
    }
    if (!f.by_kind.empty()) held.insert(f.kernel_log ? "kmsg" : "joblog");
  }
  for (const auto& [pci, index] : r.gpus)
    fmt::print(out, "  GPU {}:{} is the kernel log's PCI {}\n", options.node, index, pci);
  if (r.dropped > 0) {
    fmt::print(out,
               "  the oldest {} events were let go (a replay keeps {} at most): the diagnoses see the rest\n",
               r.dropped,
               options.max_events > 0 ? std::min(options.max_events, kReplayMaxEvents) : kReplayMaxEvents);
  }
  std::vector<std::string> absent;
  for (const auto& [name, what] : kAbsentCollectors) {
    if (!held.contains(std::string(name))) absent.push_back(fmt::format("{} ({})", name, what));
  }
  fmt::print(
      out,
      "  evidence held: {}. Not in a replay: {}. A verdict needs two collectors: what these files cannot "
      "prove is inconclusive.\n\n",
      held.empty() ? std::string("none") : fmt::format("{}", fmt::join(held, ", ")), fmt::join(absent, "; "));
  PrintDiagnoses(r.diagnoses, false, UseColor(options.color, out), out);
  if (options.trace || r.diagnoses.empty()) {
    fmt::print(out, "\nwhat the detectors measured:\n");
    if (r.trace.empty()) fmt::print(out, "  (nothing: no detector found material it reads)\n");
    for (const auto& line : r.trace) fmt::print(out, "  {}\n", line);
  }
  std::fflush(out);
  return rc;
}

}  // namespace ithbat::cli
