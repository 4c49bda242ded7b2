#pragma once
// Process-wide logging on spdlog, to stderr, in one of two formats:
//   human: 2026-11-30T03:51:38.123Z info  [component] message
//   json:  {"ts":"2026-11-30T03:51:38.123Z","level":"info","logger":"component","msg":"message"}
// Each component logs through its own named logger (GetLogger) so the name shows in every
// line; all loggers share one stderr sink, so a later SetupLogging re-formats them all.
//
// Lifecycle: call SetupLogging once at startup (before threads start logging); GetLogger may
// be called from any thread at any time, also before SetupLogging (the human format at level
// info is the default then).
#include <memory>
#include <string_view>

#include <spdlog/formatter.h>
#include <spdlog/logger.h>

#include "core/result.h"

namespace ithbat::agent {

enum class LogFormat { kHuman, kJson };

// "human" / "json". Errors: kInvalidArgument for anything else.
Result<LogFormat> ParseLogFormat(std::string_view text);

// Points every logger (existing and future) at stderr with the given format and level
// ("trace", "debug", "info", "warn", "error", "critical", "off"), and makes spdlog's default
// logger (spdlog::info(...)) one of them, named "ithbat". Errors: kInvalidArgument for an
// unknown level (nothing is changed then).
Status SetupLogging(LogFormat format, std::string_view level);

// The logger named `component`, created on first use with the current sink and level. Never
// null; the returned logger lives for the process.
std::shared_ptr<spdlog::logger> GetLogger(std::string_view component);

// The formatter behind a format, for tests and for sinks other than stderr. Messages are
// bounded (kMaxLogMessageBytes) and, in JSON, invalid UTF-8 is replaced with U+FFFD so every
// line parses.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format);
inline constexpr size_t kMaxLogMessageBytes = 16 * 1024;

}  // namespace ithbat::agent
