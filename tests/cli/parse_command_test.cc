// `ithbat parse`: the agent's job-output pipeline over files, as JSON lines.
#include "cli/parse_command.h"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using ::testing::HasSubstr;

struct Output {
  int rc = -1;
  std::vector<nlohmann::json> events;
  std::string err;
};

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

Output RunParse(const ParseCommandOptions& options) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  Output o;
  o.rc = RunParseCommand(options, out, err);
  const std::string text = ReadAll(out);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    o.events.push_back(nlohmann::json::parse(text.substr(start, end - start)));
    start = end + 1;
  }
  o.err = ReadAll(err);
  std::fclose(out);
  std::fclose(err);
  return o;
}

const nlohmann::json* Find(const Output& o, const std::string& kind, int64_t step) {
  for (const auto& e : o.events) {
    if (e["kind"] == kind && e.value("step", int64_t{-1}) == step) return &e;
  }
  return nullptr;
}

TEST(ParseCommandTest, NanoGptLogGivesStepsAndLossesWithLineNumbers) {
  testing::TempDir dir;
  dir.WriteFile("train.log",
                "Overriding config with config/train_gpt2.py:\n"
                "iter 10: loss 4.2000, time 100.00ms, mfu 30.00%\n"
                "iter 20: loss 3.9000, time 101.00ms, mfu 30.10%\n");
  ParseCommandOptions options;
  options.files = {(dir.path() / "train.log").string()};
  Output o = RunParse(options);
  ASSERT_EQ(o.rc, 0) << o.err;
  const nlohmann::json* loss = Find(o, "loss", 20);
  ASSERT_NE(loss, nullptr) << "no loss event for step 20";
  EXPECT_DOUBLE_EQ((*loss)["value"].get<double>(), 3.9);
  EXPECT_EQ((*loss)["line"], 3);
  EXPECT_EQ((*loss)["framework"], "nanogpt");
  EXPECT_EQ((*loss)["file"], options.files[0]);
}

// Kernel logs offline (issue 21): the real excerpts in ../shared/data/xid, read by a person
// first. The legacy message has no Xid number; the driver printed it twice.
TEST(ParseCommandTest, KernelLogGivesTheXidEventsTheAgentStores) {
  auto dir = testing::SharedDataDir();
  ASSERT_TRUE(dir.has_value()) << "../shared/data is absent";
  ParseCommandOptions options;
  options.format = "kmsg";
  options.files = {(*dir / "xid/bumblebee-issue554-fallen-off-bus-legacy.txt").string(),
                   (*dir / "xid/gpud-kmsg-test-xid-149-154-79-14.txt").string()};
  Output o = RunParse(options);
  ASSERT_EQ(o.rc, 0) << o.err;
  int legacy = 0, xid79 = 0;
  std::set<int> codes;
  for (const auto& e : o.events) {
    EXPECT_EQ(e["kind"], "xid");
    EXPECT_EQ(e["framework"], "kmsg");
    const int code = static_cast<int>(e["value"].get<double>());
    codes.insert(code);
    if (e["file"] == options.files[0]) {
      EXPECT_EQ(code, 79);
      EXPECT_EQ(e["attrs"]["legacy"], "1");
      EXPECT_EQ(e["attrs"]["pci"], "00000000:01:00.0");
      EXPECT_EQ(e["name"], "hardware");
      ++legacy;
    } else if (code == 79) {
      EXPECT_EQ(e["attrs"]["fallen_off_bus"], "1");
      ++xid79;
    }
  }
  EXPECT_EQ(legacy, 2) << "two legacy lines, four os_pci_init_handle lines that are not Xids";
  EXPECT_EQ(xid79, 2);
  EXPECT_TRUE(codes.contains(149) && codes.contains(154) && codes.contains(14)) << o.events.size();
}

TEST(ParseCommandTest, KernelLogTakesNoJobOutputOptions) {
  ParseCommandOptions options;
  options.format = "kmsg";
  options.command_line = "torchrun train.py";
  Output o = RunParse(options);
  EXPECT_EQ(o.rc, 2);
  EXPECT_THAT(o.err, HasSubstr("--format kmsg"));
}

TEST(ParseCommandTest, NanLossIsWrittenAsAString) {
  testing::TempDir dir;
  dir.WriteFile("nan.log",
                "iter 10: loss 4.2000, time 100.00ms\n"
                "iter 11: loss nan, time 100.00ms\n"
                "iter 12: loss inf, time 100.00ms\n");
  ParseCommandOptions options;
  options.files = {(dir.path() / "nan.log").string()};
  Output o = RunParse(options);
  ASSERT_EQ(o.rc, 0) << o.err;
  const nlohmann::json* nan = Find(o, "loss", 11);
  ASSERT_NE(nan, nullptr);
  EXPECT_EQ((*nan)["value"], "NaN");
  const nlohmann::json* inf = Find(o, "loss", 12);
  ASSERT_NE(inf, nullptr);
  EXPECT_EQ((*inf)["value"], "Infinity");
}

TEST(ParseCommandTest, AMissingFileIsReportedAndTheOthersAreStillParsed) {
  testing::TempDir dir;
  dir.WriteFile("ok.log", "iter 10: loss 4.2000, time 100.00ms\niter 20: loss 4.1000, time 100.00ms\n");
  ParseCommandOptions options;
  options.files = {(dir.path() / "absent.log").string(), (dir.path() / "ok.log").string()};
  options.summary = true;
  Output o = RunParse(options);
  EXPECT_EQ(o.rc, 1);
  EXPECT_THAT(o.err, HasSubstr("absent.log"));
  EXPECT_THAT(o.err, HasSubstr("ok.log: 2 lines"));
  EXPECT_NE(Find(o, "loss", 20), nullptr);
}

TEST(ParseCommandTest, UnknownFormatIsAUsageError) {
  ParseCommandOptions options;
  options.format = "no-such-trainer";
  options.files = {"/dev/null"};
  Output o = RunParse(options);
  EXPECT_EQ(o.rc, 2);
  EXPECT_THAT(o.err, HasSubstr("no-such-trainer"));
}

TEST(ParseCommandTest, ListNamesEveryBuiltinParser) {
  ParseCommandOptions options;
  options.list = true;
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  EXPECT_EQ(RunParseCommand(options, out, err), 0);
  const std::string text = ReadAll(out);
  std::fclose(out);
  std::fclose(err);
  for (const char* name : {"hf_trainer", "megatron", "torchtitan", "nanogpt", "errors", "vllm", "generic"}) {
    EXPECT_THAT(text, HasSubstr(name));
  }
}

TEST(ParseCommandTest, BinaryGarbageAndAHugeLineAreSurvived) {
  testing::TempDir dir;
  std::string junk(1 << 20, 'x');
  for (size_t i = 0; i < junk.size(); i += 97) junk[i] = static_cast<char>(i & 0xff);
  junk += "\niter 10: loss 4.2000, time 100.00ms\niter 20: loss 4.1000, time 100.00ms\n";
  dir.WriteFile("junk.log", junk);
  ParseCommandOptions options;
  options.files = {(dir.path() / "junk.log").string()};
  Output o = RunParse(options);
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(Find(o, "loss", 20), nullptr) << "lines after the garbage are still parsed";
}

TEST(ParseCommandTest, UserPatternsAreApplied) {
  testing::TempDir dir;
  dir.WriteFile("patterns.json", R"({"pattern_sets": [{"name": "inhouse", "patterns": [
      {"regex": "^TRAIN s=(?P<step>\\d+) L=(?P<loss>\\S+)$"}]}]})");
  dir.WriteFile("inhouse.log", "booting\nTRAIN s=7 L=0.25\nTRAIN s=8 L=0.24\n");
  ParseCommandOptions options;
  options.patterns_file = (dir.path() / "patterns.json").string();
  options.files = {(dir.path() / "inhouse.log").string()};
  Output o = RunParse(options);
  ASSERT_EQ(o.rc, 0) << o.err;
  const nlohmann::json* loss = Find(o, "loss", 8);
  ASSERT_NE(loss, nullptr);
  EXPECT_DOUBLE_EQ((*loss)["value"].get<double>(), 0.24);
}

TEST(ParseCommandTest, ABadPatternFileIsAUsageError) {
  testing::TempDir dir;
  dir.WriteFile("bad.json", R"({"pattern_sets": [{"name": "x", "patterns": [{"regex": "(unclosed"}]}]})");
  ParseCommandOptions options;
  options.patterns_file = (dir.path() / "bad.json").string();
  Output o = RunParse(options);
  EXPECT_EQ(o.rc, 2);
  EXPECT_THAT(o.err, HasSubstr("bad.json"));
}


TEST(ParseCommandTest, EventTextAndAttributesAreRedactedAsTheAgentStoresThem) {
  testing::TempDir dir;
  dir.WriteFile("err.log",
                "RuntimeError: CUDA error: an illegal memory access was encountered password=hunter2 "
                "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\n");
  ParseCommandOptions options;
  options.files = {(dir.path() / "err.log").string()};
  Output o = RunParse(options);
  ASSERT_EQ(o.rc, 0) << o.err;
  ASSERT_FALSE(o.events.empty()) << "a CUDA error line gives an error event";
  for (const auto& e : o.events) {
    const std::string dumped = e.dump();
    EXPECT_EQ(dumped.find("hunter2"), std::string::npos) << dumped;
    EXPECT_EQ(dumped.find("hf_AbCdEf"), std::string::npos) << dumped;
  }
}

}  // namespace
}  // namespace ithbat::cli
