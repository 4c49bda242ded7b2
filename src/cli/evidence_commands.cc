#include "cli/evidence_commands.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "bundle/bundle.h"
#include "cli/agent_options.h"
#include "cli/diagnosis_text.h"
#include "core/file_util.h"
#include "investigate/diagnosis_json.h"
#include "remote/agent_client.h"
#include "report/report.h"
#include "store/store.h"

namespace ithbat::cli {
namespace {

constexpr int kExitDiffers = 3;
constexpr uint16_t kAgentPort = 9479;
constexpr uint16_t kHubPort = 9480;

// "NODE=VALUE" → {NODE, VALUE}; "VALUE" → {"", VALUE}. A '=' after a '/' or ':' belongs to the
// value (a path or an address can hold one).
std::pair<std::string, std::string> SplitNamed(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || s.find_first_of("/:[") < eq) return {"", s};
  return {s.substr(0, eq), s.substr(eq + 1)};
}

Result<TimeNs> ParseTimeFlag(const std::string& text, std::string_view flag) {
  auto t = ParseTimestamp(text);
  if (!t) return MakeErrorF(ErrorCode::kInvalidArgument, "{}: {}", flag, t.error().message);
  return *t;
}

Result<std::string> OptionalToken(const std::string& file) {
  if (file.empty()) return std::string();
  return ReadTokenFile(file);
}

remote::AgentClientOptions ClientOptions(const remote::HostPort& hp, const std::string& token) {
  remote::AgentClientOptions co;
  co.host = hp.host;
  co.port = hp.port;
  co.bearer_token = token;
  return co;
}

// A store that holds a copy of what a source had: nothing is dropped by age (retention is the
// source's business) and the memory bound is generous (a bundle's window, not an agent's day).
store::StoreOptions CopyStoreOptions(const std::string& data_dir = "") {
  store::StoreOptions so;
  so.data_dir = data_dir;
  so.retention = 365LL * 24 * 3600 * kNsPerSec;
  so.memory_budget_bytes = 8ull << 30;
  return so;
}

std::vector<std::string> Dumped(const std::vector<Diagnosis>& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds) out.push_back(investigate::ToJson(d).dump());
  return out;
}

}  // namespace

void AddEvidenceCommands(CLI::App& app, EvidenceCommands& st) {
  st.record_cmd = app.add_subcommand(
      "record",
      "Write one job's evidence (series, events, steps of its nodes, and the diagnoses) to a bundle file");
  auto& r = st.record;
  st.record_cmd
      ->add_option("--job", r.job,
                   "The job id as the diagnoses name it (a training job's job_id; an inference server's "
                   "job_id, else engine:port)")
      ->required();
  st.record_cmd->add_option("-o,--output", r.output, "The bundle file to write (never overwritten)")
      ->required();
  st.record_cmd->add_option(
      "--data-dir", r.data_dirs,
      "[NODE=]DIR: a stopped agent's data directory (NODE defaults to the directory's name)");
  st.record_cmd->add_option("--agent", r.agents, "[NODE=]HOST:PORT: a running agent (NODE defaults to the node name it reports, else HOST)");
  st.record_cmd->add_option("--agent-token-file", r.agent_token_file, "Bearer token file for the agents");
  st.record_cmd->add_option("--from", r.from,
                            "Window start (RFC 3339 or Unix seconds; default: the job's start)");
  st.record_cmd->add_option("--to", r.to, "Window end (default: the newest data)");
  st.record_cmd->add_option("--window", r.window, "The window's length, ending at --to (e.g. 30m)");
  st.record_cmd->add_option("--list-price", r.list_price, "List price in $/GPU-hour, for the effective price")
      ->check(CLI::NonNegativeNumber);

  st.diagnose_cmd = app.add_subcommand(
      "diagnose", "Print diagnoses: of a bundle (re-diagnosed offline), of running agents, or of a hub");
  auto& d = st.diagnose;
  st.diagnose_cmd->add_option("bundle", d.bundle, "An evidence bundle written by `ithbat record`");
  st.diagnose_cmd->add_option("--agent", d.agents, "HOST:PORT of a running agent (repeatable)");
  st.diagnose_cmd->add_option("--hub", d.hub, "HOST:PORT of a running hub");
  st.diagnose_cmd->add_option("--token-file", d.token_file, "Bearer token file for the agents or the hub");
  st.diagnose_cmd->add_flag("--json", d.json, "One schema-v1 JSON line per diagnosis (docs/diagnoses.md)");
  st.diagnose_cmd->add_option("--color", d.color, "auto, always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();

  st.report_cmd = app.add_subcommand("report", "Write the self-contained HTML report of an evidence bundle");
  st.report_cmd->add_option("bundle", st.report.bundle, "An evidence bundle written by `ithbat record`")
      ->required();
  st.report_cmd->add_option("-o,--output", st.report.output, "The HTML file to write")->required();
}

int RunEvidenceCommand(const EvidenceCommands& st, std::FILE* out, std::FILE* err) {
  if (st.record_cmd != nullptr && *st.record_cmd) return RunRecordCommand(st.record, out, err);
  if (st.diagnose_cmd != nullptr && *st.diagnose_cmd) return RunDiagnoseCommand(st.diagnose, out, err);
  if (st.report_cmd != nullptr && *st.report_cmd) return RunReportCommand(st.report, out, err);
  return -1;
}

int RunRecordCommand(const RecordCommandOptions& o, std::FILE* out, std::FILE* err) {
  if (o.data_dirs.empty() == o.agents.empty()) {
    fmt::print(err, "ithbat record: give the data with --data-dir or with --agent (one kind of source)\n");
    return 2;
  }
  bundle::RecordOptions ro;
  ro.job = o.job;
  ro.list_price_per_gpu_hour = o.list_price;
  TimeNs window = 0;
  if (!o.window.empty()) {
    auto w = ParseDuration(o.window);
    if (!w || *w <= 0) {
      fmt::print(err, "ithbat record: --window: not a positive duration: '{}'\n", o.window);
      return 2;
    }
    window = *w;
  }
  for (const auto& [flag, text, dest] :
       {std::tuple{"--from", &o.from, &ro.from}, std::tuple{"--to", &o.to, &ro.to}}) {
    if (text->empty()) continue;
    auto t = ParseTimeFlag(*text, flag);
    if (!t) {
      fmt::print(err, "ithbat record: {}\n", t.error().message);
      return 2;
    }
    *dest = *t;
  }
  if (window != 0 && !o.from.empty()) {
    fmt::print(err, "ithbat record: --window and --from both set the start: give one\n");
    return 2;
  }

  std::map<std::string, std::unique_ptr<store::Store>> stores;
  std::vector<std::string> sources;
  for (const auto& spec : o.data_dirs) {
    auto [node, dir] = SplitNamed(spec);
    if (node.empty()) node = std::filesystem::path(dir).lexically_normal().filename().string();
    if (stores.count(node) != 0) {
      fmt::print(err, "ithbat record: node '{}' given twice (name them: --data-dir NODE=DIR)\n", node);
      return 2;
    }
    if (!std::filesystem::is_directory(dir)) {
      fmt::print(err, "ithbat record: {}: not a directory\n", dir);
      return 1;
    }
    auto s = store::Store::Open(CopyStoreOptions(dir));
    if (!s) {
      fmt::print(err, "ithbat record: {}: {} (an agent still running on it holds its lock: use --agent)\n",
                 dir, s.error().message);
      return 1;
    }
    stores.emplace(node, std::move(*s));
    sources.push_back(fmt::format("data dir {} ({})", dir, node));
  }
  if (!o.agents.empty()) {
    auto token = OptionalToken(o.agent_token_file);
    if (!token) {
      fmt::print(err, "ithbat record: {}\n", token.error().message);
      return 1;
    }
    const TimeNs to = ro.to != kMaxTime ? ro.to : NowNs();
    // Without --from or --window, an agent's whole memory (its retention bounds it).
    const TimeNs from = ro.from != kMinTime ? ro.from : (window != 0 ? to - window : 0);
    // A --window over running agents ends now: the bundle's window is the one pulled.
    if (window != 0) ro.to = to;
    for (const auto& spec : o.agents) {
      auto [node, address] = SplitNamed(spec);
      auto hp = remote::ParseHostPort(address, kAgentPort);
      if (!hp) {
        fmt::print(err, "ithbat record: --agent {}: {}\n", spec, hp.error().message);
        return 2;
      }
      remote::AgentClient client(ClientOptions(*hp, *token));
      auto s = store::Store::Open(CopyStoreOptions());
      if (!s) {
        fmt::print(err, "ithbat record: {}\n", s.error().message);
        return 1;
      }
      remote::PullStats stats;
      std::string incomplete;
      if (auto p = client.PullInto(**s, from, to, &stats); !p) {
        if (!stats.reached) {
          fmt::print(err, "ithbat record: agent {}: {}\n", client.Address(), p.error().message);
          return 1;
        }
        // Part of the agent's data could not be copied: the bundle says so in its source.
        fmt::print(err, "ithbat record: agent {}: {} (the rest was copied)\n", client.Address(),
                   p.error().message);
        incomplete = fmt::format(", incomplete: {} part(s) failed", stats.errors.size());
      }
      if (node.empty()) {
        // Asked once the pull reached it (an unreachable agent costs its timeout once): the node
        // name the agent's own diagnoses use, so the bundle's name it alike; else its host.
        auto reported = client.NodeName();
        node = reported && !reported->empty() ? *reported : hp->host;
      }
      if (stores.count(node) != 0) {
        fmt::print(err, "ithbat record: node '{}' given twice (name them: --agent NODE=HOST:PORT)\n", node);
        return 2;
      }
      sources.push_back(fmt::format("agent {} ({}{})", client.Address(), node, incomplete));
      stores.emplace(node, std::move(*s));
    }
  }
  // The window's start from --window, against the end the data gives when --to is absent.
  detect::FleetView view = detect::FleetView::Owning(std::move(stores));
  if (window != 0) {
    TimeNs end = ro.to;
    if (end == kMaxTime) {
      end = kMinTime;
      for (const auto& j : detect::DiscoverJobs(view, kMinTime, kMaxTime)) end = std::max(end, j.window.end);
    }
    ro.to = end;
    ro.from = end - window;
  }
  ro.source = fmt::format("{}", fmt::join(sources, "; "));
  auto summary = bundle::WriteBundle(view, ro, o.output);
  if (!summary) {
    fmt::print(err, "ithbat record: {}\n", summary.error().message);
    return 1;
  }
  fmt::print(out,
             "{}: job {} on {} node(s), {} → {}: {} series, {} samples, {} events, {} step spans, {} "
             "diagnosis(es)\n",
             o.output, summary->meta.job, summary->meta.nodes.size(), FormatRfc3339(summary->meta.from),
             FormatRfc3339(summary->meta.to), summary->series, summary->samples, summary->events,
             summary->steps, summary->diagnoses);
  return 0;
}

int RunDiagnoseCommand(const DiagnoseCommandOptions& o, std::FILE* out, std::FILE* err) {
  const int sources = (o.bundle.empty() ? 0 : 1) + (o.agents.empty() ? 0 : 1) + (o.hub.empty() ? 0 : 1);
  if (sources != 1) {
    fmt::print(err,
               "ithbat diagnose: give one source: a bundle file, --agent HOST:PORT..., or --hub HOST:PORT\n");
    return 2;
  }
  const bool color = !o.json && UseColor(o.color, out);
  if (!o.bundle.empty()) {
    auto b = bundle::ReadBundle(o.bundle);
    if (!b) {
      fmt::print(err, "ithbat diagnose: {}\n", b.error().message);
      return 1;
    }
    const auto again =
        bundle::DiagnoseJob(b->view, b->meta.job, b->meta.from, b->meta.to, b->meta.list_price_per_gpu_hour);
    if (!o.json) {
      fmt::print(out, "bundle {}: job {}, {} → {}, {} node(s), recorded by ithbat {} from {}\n\n", o.bundle,
                 b->meta.job, FormatRfc3339(b->meta.from), FormatRfc3339(b->meta.to), b->meta.nodes.size(),
                 b->meta.ithbat_version, b->meta.source);
    }
    PrintDiagnoses(again, o.json, color, out);
    if (Dumped(again) != Dumped(b->diagnoses)) {
      fmt::print(err,
                 "ithbat diagnose: the offline re-diagnosis differs from the {} diagnosis(es) recorded in "
                 "the bundle "
                 "(recorded by ithbat {}, re-diagnosed by this one)\n",
                 b->diagnoses.size(), b->meta.ithbat_version);
      return kExitDiffers;
    }
    if (!o.json)
      fmt::print(out, "\n(the same as the {} diagnosis(es) recorded in the bundle)\n", b->diagnoses.size());
    return 0;
  }
  auto token = OptionalToken(o.token_file);
  if (!token) {
    fmt::print(err, "ithbat diagnose: {}\n", token.error().message);
    return 1;
  }
  std::vector<std::string> addresses = o.agents;
  if (!o.hub.empty()) addresses = {o.hub};
  std::vector<Diagnosis> all;
  int failures = 0;
  for (const auto& a : addresses) {
    auto hp = remote::ParseHostPort(a, o.hub.empty() ? kAgentPort : kHubPort);
    if (!hp) {
      fmt::print(err, "ithbat diagnose: {}: {}\n", a, hp.error().message);
      return 2;
    }
    remote::AgentClient client(ClientOptions(*hp, *token));
    auto ds = client.Diagnoses();
    if (!ds) {
      fmt::print(err, "ithbat diagnose: {}: {}\n", client.Address(), ds.error().message);
      ++failures;
      continue;
    }
    for (auto& d : *ds) all.push_back(std::move(d));
  }
  // "No diagnosis" is a claim about the nodes asked: when none answered it would be a false
  // all-clear, so nothing goes to stdout (stderr named each failure); when some answered, the
  // answer says it is partial.
  if (failures == static_cast<int>(addresses.size())) return 1;
  PrintDiagnoses(all, o.json, color, out);
  if (failures > 0 && !o.json) {
    fmt::print(out, "\n(partial: {} of {} did not answer, and what they would say is not above)\n", failures,
               addresses.size());
  }
  return failures == 0 ? 0 : 1;
}

int RunReportCommand(const ReportCommandOptions& o, std::FILE* out, std::FILE* err) {
  auto b = bundle::ReadBundle(o.bundle);
  if (!b) {
    fmt::print(err, "ithbat report: {}\n", b.error().message);
    return 1;
  }
  report::ReportOptions ro;
  ro.title = fmt::format("Job {}", b->meta.job);
  ro.from = b->meta.from;
  ro.to = b->meta.to;
  ro.generated_at = NowNs();
  ro.source = fmt::format("evidence bundle {} (recorded from {})",
                          std::filesystem::path(o.bundle).filename().string(), b->meta.source);
  const std::string html = report::RenderReport(b->view, b->diagnoses, ro);
  const std::string tmp = o.output + ".tmp";
  {
    // Never through a link: whatever sits at the .tmp path (a stale file, or a symlink someone
    // planted in a shared directory to make us overwrite another file) is removed, not followed,
    // and the file is created anew (O_EXCL fails on anything that reappears there).
    ::unlink(tmp.c_str());
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    std::string_view left = html;
    while (fd.valid() && !left.empty()) {
      const ssize_t n = ::write(fd.get(), left.data(), left.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      left.remove_prefix(static_cast<size_t>(n));
    }
    if (!fd.valid() || !left.empty()) {
      fmt::print(err, "ithbat report: cannot write {}: {}\n", tmp, std::strerror(errno));
      if (fd.valid()) ::unlink(tmp.c_str());
      return 1;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o.output, ec);
  if (ec) {
    fmt::print(err, "ithbat report: {}: {}\n", o.output, ec.message());
    return 1;
  }
  fmt::print(out, "{}: {} diagnosis(es), {} bytes\n", o.output, b->diagnoses.size(), html.size());
  return 0;
}

}  // namespace ithbat::cli
