#include "agent/logging.h"

#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include "core/time.h"

namespace ithbat::agent {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A logger of its own writing to a string, so the tests do not depend on the global state.
struct Capture {
  explicit Capture(LogFormat format) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
    sink->set_formatter(MakeLogFormatter(format));
    logger = std::make_shared<spdlog::logger>("comp.one", sink);
    logger->set_level(spdlog::level::trace);
  }
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;
};

nlohmann::json ParseLine(const std::string& line) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON: " << line << ": " << e.what();
    return {};
  }
}

TEST(LoggingTest, JsonLinesParseAndEscape) {
  Capture c(LogFormat::kJson);
  c.logger->info("plain");
  c.logger->warn("say \"hi\"\nsecond line\\ tab\there ctrl\x01 end");
  c.logger->error("bad utf8 \xff\xfe then \xc3\xa9t\xc3\xa9 and \xe2\x82");
  const auto lines = Lines(c.out.str());
  ASSERT_EQ(lines.size(), 3u) << c.out.str();

  nlohmann::json j = ParseLine(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["logger"], "comp.one");
  EXPECT_EQ(j["msg"], "plain");
  const std::string ts = j["ts"];
  EXPECT_TRUE(ts.ends_with("Z")) << ts;
  auto parsed = ParseTimestamp(ts);
  ASSERT_TRUE(parsed) << ts;
  EXPECT_LT(std::abs(*parsed - NowNs()), 3600 * kNsPerSec);  // a sane clock reading, not a format check

  j = ParseLine(lines[1]);
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["msg"], "say \"hi\"\nsecond line\\ tab\there ctrl\x01 end");
  EXPECT_THAT(lines[1], HasSubstr("\\u0001"));

  j = ParseLine(lines[2]);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["msg"],
            "bad utf8 \xEF\xBF\xBD\xEF\xBF\xBD then \xc3\xa9t\xc3\xa9 and \xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(LoggingTest, JsonMessageIsBounded) {
  Capture c(LogFormat::kJson);
  c.logger->info("{}", std::string(kMaxLogMessageBytes * 3, 'a'));
  const auto lines = Lines(c.out.str());
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json j = ParseLine(lines[0]);
  EXPECT_EQ(j["msg"].get<std::string>().size(), kMaxLogMessageBytes);
}

TEST(LoggingTest, HumanLineLayout) {
  Capture c(LogFormat::kHuman);
  c.logger->info("collector started");
  c.logger->warn("two\nlines");
  const auto lines = Lines(c.out.str());
  ASSERT_EQ(lines.size(), 2u);
  // 2026-11-30T03:51:38.123Z info  [comp.one] collector started
  const std::string& l = lines[0];
  ASSERT_GE(l.size(), 25u);
  EXPECT_EQ(l[4], '-');
  EXPECT_EQ(l[10], 'T');
  EXPECT_EQ(l[19], '.');
  EXPECT_EQ(l[23], 'Z');
  EXPECT_TRUE(ParseTimestamp(l.substr(0, 24))) << l;
  EXPECT_EQ(l.substr(24), " info  [comp.one] collector started");
  EXPECT_EQ(lines[1].substr(24), " warn  [comp.one] two lines");
}

TEST(LoggingTest, SetupLoggingValidatesLevelAndFormat) {
  auto s = SetupLogging(LogFormat::kHuman, "loud");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);

  auto f = ParseLogFormat("xml");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("human"), LogFormat::kHuman);

  auto existing = GetLogger("setup_test");
  ASSERT_TRUE(SetupLogging(LogFormat::kJson, "debug"));
  EXPECT_EQ(existing->level(), spdlog::level::debug);
  EXPECT_EQ(GetLogger("setup_test_new")->level(), spdlog::level::debug);
  EXPECT_EQ(GetLogger("setup_test").get(), existing.get());

  // An existing logger follows the new format.
  ::testing::internal::CaptureStderr();
  existing->debug("quoted \"value\"");
  existing->flush();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(SetupLogging(LogFormat::kHuman, "info"));
  const auto lines = Lines(err);
  ASSERT_EQ(lines.size(), 1u) << err;
  nlohmann::json j = ParseLine(lines[0]);
  EXPECT_EQ(j["logger"], "setup_test");
  EXPECT_EQ(j["level"], "debug");
  EXPECT_EQ(j["msg"], "quoted \"value\"");
  EXPECT_EQ(existing->level(), spdlog::level::info);
}

}  // namespace
}  // namespace ithbat::agent
