#include "agent/logging.h"

#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ithbat::agent {
namespace {

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// 2026-11-30T03:51:38.123Z: milliseconds are enough for a log line and keep it short.
void AppendTimestamp(std::chrono::system_clock::time_point tp, spdlog::memory_buf_t& out) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(tp.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(ms / 1000);
  int64_t frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  tm t{};
  gmtime_r(&secs, &t);
  fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900,
                 t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, frac);
}

std::string_view Payload(const spdlog::details::log_msg& msg) {
  std::string_view p(msg.payload.data(), msg.payload.size());
  return p.substr(0, kMaxLogMessageBytes);
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not valid (overlongs,
// surrogates and code points past U+10FFFF included).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else
    return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void AppendJsonString(std::string_view s, spdlog::memory_buf_t& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) {
        out.append(std::string_view("\xEF\xBF\xBD"));  // U+FFFD
        ++i;
      } else {
        out.append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append(std::string_view("\\\""));
        break;
      case '\\':
        out.append(std::string_view("\\\\"));
        break;
      case '\n':
        out.append(std::string_view("\\n"));
        break;
      case '\r':
        out.append(std::string_view("\\r"));
        break;
      case '\t':
        out.append(std::string_view("\\t"));
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

class HumanFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    AppendTimestamp(msg.time, dest);
    fmt::format_to(std::back_inserter(dest), " {:<5} [{}] ", LevelName(msg.level),
                   std::string_view(msg.logger_name.data(), msg.logger_name.size()));
    // One event, one line: a newline inside a message would split it for every log reader.
    for (char c : Payload(msg)) dest.push_back(c == '\n' ? ' ' : c);
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<HumanFormatter>(); }
};

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    dest.append(std::string_view("{\"ts\":\""));
    AppendTimestamp(msg.time, dest);
    dest.append(std::string_view("\",\"level\":\""));
    dest.append(LevelName(msg.level));
    dest.append(std::string_view("\",\"logger\":"));
    AppendJsonString(std::string_view(msg.logger_name.data(), msg.logger_name.size()), dest);
    dest.append(std::string_view(",\"msg\":"));
    AppendJsonString(Payload(msg), dest);
    dest.append(std::string_view("}\n"));
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

// Our loggers live here rather than in spdlog's registry, whose initialize_logger would put
// its own formatter on every new logger.
struct LogState {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink;
  spdlog::level::level_enum level = spdlog::level::info;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;

  LogState() : sink(std::make_shared<spdlog::sinks::stderr_sink_mt>()) {
    sink->set_formatter(std::make_unique<HumanFormatter>());
  }
};

LogState& State() {
  static auto* state = new LogState();  // never freed: detached threads may log at exit
  return *state;
}

std::optional<spdlog::level::level_enum> ParseLevel(std::string_view level) {
  if (level == "trace") return spdlog::level::trace;
  if (level == "debug") return spdlog::level::debug;
  if (level == "info") return spdlog::level::info;
  if (level == "warn" || level == "warning") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  if (level == "critical") return spdlog::level::critical;
  if (level == "off") return spdlog::level::off;
  return std::nullopt;
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "human") return LogFormat::kHuman;
  if (text == "json") return LogFormat::kJson;
  return MakeErrorF(ErrorCode::kInvalidArgument, "unknown log format '{}' (human, json)", text);
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  return std::make_unique<HumanFormatter>();
}

Status SetupLogging(LogFormat format, std::string_view level) {
  const auto parsed = ParseLevel(level);
  if (!parsed) {
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "unknown log level '{}' (trace, debug, info, warn, error, critical, off)", level);
  }
  LogState& state = State();
  {
    std::lock_guard lock(state.mu);
    state.sink->set_formatter(MakeLogFormatter(format));
    state.level = *parsed;
    for (auto& [name, logger] : state.loggers) logger->set_level(*parsed);
  }
  // Code that logs through spdlog's free functions (spdlog::info) lands in the same stream and
  // format; a second format in a JSON log would break whoever parses it.
  spdlog::set_default_logger(GetLogger("ithbat"));
  return Ok();
}

std::shared_ptr<spdlog::logger> GetLogger(std::string_view component) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  if (auto it = state.loggers.find(component); it != state.loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(std::string(component), state.sink);
  logger->set_level(state.level);
  // Warnings and errors reach the journal at once even if the process dies right after.
  logger->flush_on(spdlog::level::warn);
  state.loggers.emplace(std::string(component), logger);
  return logger;
}

}  // namespace ithbat::agent
