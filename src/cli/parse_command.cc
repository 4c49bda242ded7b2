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

// Reads `fd` to the end in blocks, through the same assembler and parser the agent uses; with no
// parser, each line through the kernel-log reader the kmsg collector uses.
std::optional<std::string> ParseStream(int fd, const std::string& name, StreamParser* parser, std::FILE* out,
                                       FileResult& result) {
  LineAssembler assembler(collect::joblog::kMaxLineBytes);
  std::vector<AssembledLine> lines;
  std::vector<ParsedEvent> events;
  std::array<char, 64 * 1024> buf;
  uint64_t line_no = 0;  // ordinary lines completed so far; progress segments belong to the next
  auto handle = [&](AssembledLine& l) {
    const uint64_t number = line_no + 1;
    if (!l.progress) line_no++;
    if (parser == nullptr) {
      // Kernel lines are the kernel's, stored as read (the collector does not redact them).
      if (auto rec = collect::ParseKernelLogLine(l.text)) {
        WriteLine(KernelEventJson(collect::XidEvent(*rec), name, number), out);
        result.events++;
        result.by_kind["xid"]++;
      }
      return;
    }
    // Redacted before it is parsed, as the agent does (joblog_collector.cc, HandleLine).
    collect::joblog::RedactSecrets(l.text);
    events.clear();
    parser->Parse(LineView{l.text, l.progress, 1}, events);
    for (auto& e : events) {
      // The same redaction the agent applies before an event is stored (docs/joblog.md).
      collect::joblog::RedactSecrets(e.text);
      for (auto& [k, v] : e.attrs) collect::joblog::RedactSecrets(v);
      WriteLine(EventJson(e, name, number, l.progress, parser->framework()), out);
      result.events++;
      result.by_kind[std::string(EventKindName(e.kind))]++;
    }
  };
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fmt::format("{}: read failed: {}", name, std::strerror(errno));
    }
    if (n == 0) break;
    lines.clear();
    assembler.Feed(std::string_view(buf.data(), static_cast<size_t>(n)), 0, lines);
    for (auto& l : lines) handle(l);
  }
  lines.clear();
  assembler.Flush(0, lines);
  for (auto& l : lines) handle(l);
  result.lines = line_no;
  result.framework = parser ? std::string(parser->framework()) : std::string(kKernelLogFormat);
  return std::nullopt;
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
