#include "cli/parse_command.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include <fcntl.h>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/log_events.h"
#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/text/line_assembler.h"
#include "collect/joblog/text/redact.h"
#include "collect/kmsg/xid_parse.h"
#include "core/event.h"

namespace ithbat::cli {
namespace {

using collect::joblog::AssembledLine;
using collect::joblog::LineAssembler;
using collect::joblog::LineView;
using collect::joblog::ParsedEvent;
using collect::joblog::StreamParser;

constexpr int kExitOk = 0;
constexpr int kExitInput = 1;
constexpr int kExitUsage = 2;
// The one format that is not a job-output parser: kernel-log lines (dmesg, journalctl -k,
// /dev/kmsg records) read as the kmsg collector reads them.
constexpr std::string_view kKernelLogFormat = "kmsg";

// JSON has no NaN or infinities; they are written as the strings "NaN", "Infinity" and
// "-Infinity" (docs/joblog.md), which every JSON reader accepts and a person can read.
nlohmann::json NumberJson(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

nlohmann::json EventJson(const ParsedEvent& e, const std::string& file, uint64_t line, bool progress,
                         std::string_view framework) {
  nlohmann::json j;
  j["file"] = file;
  j["line"] = line;
  j["kind"] = std::string(EventKindName(e.kind));
  if (!e.name.empty()) j["name"] = e.name;
  if (e.step >= 0) j["step"] = e.step;
  if (!std::isnan(e.value) || e.kind == EventKind::kLoss || e.kind == EventKind::kTrainMetric ||
      e.kind == EventKind::kEvalMetric || e.kind == EventKind::kServingMetric) {
    j["value"] = NumberJson(e.value);
  }
  if (e.rank >= 0) j["rank"] = e.rank;
  if (!e.text.empty()) j["text"] = e.text;
  if (!e.attrs.empty()) {
    nlohmann::json a = nlohmann::json::object();
    for (const auto& [k, v] : e.attrs) a[k] = v;
    j["attrs"] = std::move(a);
  }
  if (progress) j["progress"] = true;
  j["framework"] = framework.empty() ? "" : std::string(framework);
  return j;
}

// A kernel-log event (kind xid) as the kmsg collector stores it: the same fields as a job-output
// event, framework "kmsg".
nlohmann::json KernelEventJson(const Event& e, const std::string& file, uint64_t line) {
  nlohmann::json j;
  j["file"] = file;
  j["line"] = line;
  j["kind"] = std::string(EventKindName(e.kind));
  j["name"] = e.name;
  j["value"] = NumberJson(e.value);
  if (!e.text.empty()) j["text"] = e.text;
  if (!e.attrs.empty()) {
    nlohmann::json a = nlohmann::json::object();
    for (const auto& [k, v] : e.attrs) a[k] = v;
    j["attrs"] = std::move(a);
  }
  j["framework"] = "kmsg";
  return j;
}

struct FileResult {
  uint64_t lines = 0;
  uint64_t events = 0;
  std::map<std::string, uint64_t> by_kind;
  std::string framework;
};

void WriteLine(const nlohmann::json& j, std::FILE* out) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), out);
}

// Reads `fd` to the end (log_events.h) and prints each event as a JSON line.
std::optional<std::string> ParseStream(int fd, const std::string& name, StreamParser* parser, std::FILE* out,
                                       FileResult& result) {
  LogReadResult read;
  auto failure = ReadLogEvents(
      fd, name, parser,
      [&](ParsedEvent& e, uint64_t line, bool progress, std::string_view framework) {
        WriteLine(EventJson(e, name, line, progress, framework), out);
        result.events++;
        result.by_kind[std::string(EventKindName(e.kind))]++;
      },
      [&](Event e, uint64_t line) {
        WriteLine(KernelEventJson(e, name, line), out);
        result.events++;
        result.by_kind["xid"]++;
      },
      read);
  result.lines = read.lines;
  result.framework = read.framework;
  return failure;
}

}  // namespace

int RunParseCommand(const ParseCommandOptions& options, std::FILE* out, std::FILE* err) {
  if (options.list) {
    for (const auto& p : collect::joblog::BuiltinParsers()) {
      const char* role = p.role == collect::joblog::ParserRole::kFramework ? "framework"
                         : p.role == collect::joblog::ParserRole::kAlwaysOn ? "always-on"
                                                                            : "generic";
      fmt::print(out, "{:<12} {:<10} {}\n", p.name, role, p.description);
    }
    fmt::print(out, "{:<12} {:<10} {}\n", kKernelLogFormat, "kernel",
               "NVIDIA Xid/SXid and fallen-off-the-bus lines of dmesg, journalctl -k or /dev/kmsg (--format "
               "kmsg only)");
    return kExitOk;
  }
  const bool kernel_log = options.format == kKernelLogFormat;
  if (kernel_log && (!options.patterns_file.empty() || !options.command_line.empty())) {
    fmt::print(err,
               "ithbat parse: --patterns and --command-line apply to job output, not to --format kmsg\n");
    return kExitUsage;
  }
  std::optional<collect::joblog::UserPatterns> patterns;
  if (!options.patterns_file.empty()) {
    auto loaded = collect::joblog::UserPatterns::Load(options.patterns_file);
    if (!loaded) {
      fmt::print(err, "ithbat parse: {}: {}\n", options.patterns_file, loaded.error().message);
      return kExitUsage;
    }
    patterns = std::move(*loaded);
  }
  collect::joblog::StreamParserOptions so;
  so.format = options.format;
  so.command_line = options.command_line;
  so.user_patterns = patterns ? &*patterns : nullptr;
  // Checked once up front so a bad --format is a usage error even with no input.
  if (!kernel_log) {
    if (auto probe = StreamParser::Create(so); !probe) {
      fmt::print(err, "ithbat parse: {}\n", probe.error().message);
      return kExitUsage;
    }
  }

  std::vector<std::string> files = options.files;
  if (files.empty()) files.push_back("-");
  int rc = kExitOk;
  for (const auto& file : files) {
    // Each file is its own stream (its own framework detection), as each process is in the agent.
    std::optional<StreamParser> parser;
    if (!kernel_log) {
      auto created = StreamParser::Create(so);
      if (created) parser.emplace(std::move(*created));
    }
    int fd = STDIN_FILENO;
    if (file != "-") {
      fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        fmt::print(err, "ithbat parse: {}: {}\n", file, std::strerror(errno));
        rc = kExitInput;
        continue;
      }
    }
    FileResult result;
    auto failure = ParseStream(fd, file == "-" ? "<stdin>" : file, parser ? &*parser : nullptr, out, result);
    if (fd != STDIN_FILENO) ::close(fd);
    if (failure) {
      fmt::print(err, "ithbat parse: {}\n", *failure);
      rc = kExitInput;
    }
    if (options.summary) {
      std::string kinds;
      for (const auto& [k, n] : result.by_kind) kinds += fmt::format("{}{}={}", kinds.empty() ? "" : " ", k, n);
      fmt::print(err, "{}: {} lines, {} events, framework {}{}{}\n", file, result.lines, result.events,
                 result.framework.empty() ? "(none detected)" : result.framework, kinds.empty() ? "" : ": ",
                 kinds);
    }
  }
  std::fflush(out);
  return rc;
}

}  // namespace ithbat::cli
