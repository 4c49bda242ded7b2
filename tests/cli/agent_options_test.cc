#include "cli/agent_options.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/agent_process.h"
#include "cli/app.h"
#include "collect/joblog/parsers/parser.h"
#include "serve/http_server.h"
#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kEveryKey = R"(# every key the agent reads
listen = "0.0.0.0:9500"
token-file = "/etc/ithbat/token"
procfs = "/host/proc"
sysfs = "/host/sys"
nvml-library = "/opt/nvidia/lib/libnvidia-ml.so.1"
kmsg = "/var/log/kern.log"
node = "gpu-node-17"
cluster = "prod-a"
interval = "250ms"
collect-deadline = "2s"
data-dir = "/var/lib/ithbat"
retention = "7d"
memory-budget = "64MiB"
disk-budget = "10GB"
flush-interval = "30s"
log-format = "json"
log-level = "debug"
diagnose-interval = "30s"
diagnose-lookback = "20m"
diagnose-resolve-after = "5m"
list-price = 2.5
)";

void ExpectEveryKey(const AgentOptions& o) {
  EXPECT_EQ(o.listen_address, "0.0.0.0");
  EXPECT_EQ(o.listen_port, 9500);
  EXPECT_EQ(o.token_file, "/etc/ithbat/token");
  EXPECT_EQ(o.procfs, "/host/proc");
  EXPECT_EQ(o.sysfs, "/host/sys");
  EXPECT_EQ(o.nvml_library, "/opt/nvidia/lib/libnvidia-ml.so.1");
  EXPECT_EQ(o.kmsg, "/var/log/kern.log");
  EXPECT_EQ(o.node, "gpu-node-17");
  EXPECT_EQ(o.cluster, "prod-a");
  EXPECT_EQ(o.interval, 250 * kNsPerMs);
  EXPECT_EQ(o.collect_deadline, 2 * kNsPerSec);
  EXPECT_EQ(o.data_dir, "/var/lib/ithbat");
  EXPECT_EQ(o.retention, 7 * 24 * 3600 * kNsPerSec);
  EXPECT_EQ(o.memory_budget_bytes, 64ull << 20);
  EXPECT_EQ(o.disk_budget_bytes, 10'000'000'000ull);
  EXPECT_EQ(o.flush_interval, 30 * kNsPerSec);
  EXPECT_EQ(o.log_format, agent::LogFormat::kJson);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.diagnose_interval, 30 * kNsPerSec);
  EXPECT_EQ(o.diagnose_lookback, 20 * 60 * kNsPerSec);
  EXPECT_EQ(o.diagnose_resolve_after, 5 * 60 * kNsPerSec);
  EXPECT_DOUBLE_EQ(o.list_price_per_gpu_hour, 2.5);
  EXPECT_FALSE(o.once);
}

TEST(AgentOptionsTest, DefaultsAreTheDocumentedOnes) {
  auto o = ParseAgentCommandLine({});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->listen_address, "127.0.0.1");
  EXPECT_EQ(o->listen_port, serve::kDefaultPort);
  EXPECT_EQ(o->token_file, "");
  EXPECT_EQ(o->procfs, "/proc");
  EXPECT_EQ(o->sysfs, "/sys");
  EXPECT_EQ(o->nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(o->kmsg, "/dev/kmsg");
  EXPECT_EQ(o->node, HostName());
  EXPECT_EQ(o->cluster, "");
  EXPECT_EQ(o->interval, kNsPerSec);
  EXPECT_EQ(o->collect_deadline, 5 * kNsPerSec);
  EXPECT_EQ(o->data_dir, "");
  EXPECT_EQ(o->retention, 24 * 3600 * kNsPerSec);
  EXPECT_EQ(o->memory_budget_bytes, 256ull << 20);
  EXPECT_EQ(o->disk_budget_bytes, 2ull << 30);
  EXPECT_EQ(o->flush_interval, 10 * kNsPerSec);
  EXPECT_EQ(o->log_format, agent::LogFormat::kHuman);
  EXPECT_EQ(o->log_level, "info");
  EXPECT_EQ(o->diagnose_interval, 10 * kNsPerSec);
  EXPECT_EQ(o->diagnose_lookback, 15 * 60 * kNsPerSec);
  EXPECT_EQ(o->diagnose_resolve_after, 2 * 60 * kNsPerSec);
  EXPECT_EQ(o->list_price_per_gpu_hour, 0);
  EXPECT_FALSE(o->once);
}

TEST(AgentOptionsTest, DiagnosisLookbackResolveTimeAndListPriceAreChecked) {
  // A lookback under the detectors' 10-minute window would blind them.
  for (const char* bad : {"9m", "2d", "soon"}) {
    auto o = ParseAgentCommandLine({"--diagnose-lookback", bad});
    ASSERT_FALSE(o) << bad;
    EXPECT_THAT(o.error().message, StartsWith("diagnose-lookback: ")) << bad;
  }
  EXPECT_TRUE(ParseAgentCommandLine({"--diagnose-lookback", "10m"}));
  EXPECT_FALSE(ParseAgentCommandLine({"--diagnose-resolve-after", "0s"}));
  for (const char* bad : {"-1", "free", "nan", "2.5$", ""}) {
    auto o = ParseAgentCommandLine({"--list-price", bad});
    ASSERT_FALSE(o) << bad;
    EXPECT_THAT(o.error().message, StartsWith("list-price: ")) << bad;
  }
  auto priced = ParseAgentCommandLine({"--list-price", "3.10"});
  ASSERT_TRUE(priced) << priced.error().ToString();
  EXPECT_DOUBLE_EQ(priced->list_price_per_gpu_hour, 3.10);
  // ... and they reach the engine.
  const investigate::NodeDiagnoserOptions d = MakeDiagnoserOptions(*priced);
  EXPECT_DOUBLE_EQ(d.investigate.list_price_per_gpu_hour, 3.10);
  EXPECT_EQ(d.lookback, 15 * 60 * kNsPerSec);
  EXPECT_EQ(d.investigate.resolve_after, 2 * 60 * kNsPerSec);
}

TEST(AgentOptionsTest, DiagnoseIntervalZeroTurnsItOffAndBoundsAreChecked) {
  for (const char* off : {"0", "0s"}) {
    auto o = ParseAgentCommandLine({"--diagnose-interval", off});
    ASSERT_TRUE(o) << off << ": " << o.error().ToString();
    EXPECT_EQ(o->diagnose_interval, 0) << off;
  }
  auto one = ParseAgentCommandLine({"--diagnose-interval", "1s"});
  ASSERT_TRUE(one) << one.error().ToString();
  EXPECT_EQ(one->diagnose_interval, kNsPerSec);
  for (const char* bad : {"500ms", "2h", "often"}) {
    auto o = ParseAgentCommandLine({"--diagnose-interval", bad});
    ASSERT_FALSE(o) << bad;
    EXPECT_THAT(o.error().message, StartsWith("diagnose-interval: ")) << bad;
  }
}

TEST(AgentOptionsTest, ConfigFileWithEveryKeyAtTheTop) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", kEveryKey);
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()});
  ASSERT_TRUE(o) << o.error().ToString();
  ExpectEveryKey(*o);
}

TEST(AgentOptionsTest, ConfigFileWithAnAgentSection) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", std::string("[agent]\n") + kEveryKey);
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()});
  ASSERT_TRUE(o) << o.error().ToString();
  ExpectEveryKey(*o);
}

TEST(AgentOptionsTest, IniSyntaxWorksToo) {
  testing::TempDir dir;
  dir.WriteFile("agent.ini", "; INI comment\n[agent]\ninterval=2s\nnode=n1\n");
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.ini").string()});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->interval, 2 * kNsPerSec);
  EXPECT_EQ(o->node, "n1");
}

TEST(AgentOptionsTest, ExampleConfigShippedInPackagingParses) {
  auto o =
      ParseAgentCommandLine({"--config", (testing::SourceDir() / "packaging/agent.example.toml").string()});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->listen_port, serve::kDefaultPort);
  EXPECT_EQ(o->data_dir, "/var/lib/ithbat");
}

TEST(AgentOptionsTest, FlagsOverrideTheFile) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", kEveryKey);
  auto o = ParseAgentCommandLine({"--interval", "5s", "--config", (dir.path() / "agent.toml").string(),
                                  "--node", "other", "--log-format=human"});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_EQ(o->interval, 5 * kNsPerSec);
  EXPECT_EQ(o->node, "other");
  EXPECT_EQ(o->log_format, agent::LogFormat::kHuman);
  EXPECT_EQ(o->cluster, "prod-a");  // from the file
}

TEST(AgentOptionsTest, BadDurationInTheFileNamesTheKey) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", "flush-interval = \"ten seconds\"\n");
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(o.error().message, StartsWith("flush-interval:"));
  EXPECT_THAT(o.error().message, HasSubstr("ten seconds"));
}

TEST(AgentOptionsTest, BadSizeNamesTheKey) {
  auto o = ParseAgentCommandLine({"--memory-budget", "lots"});
  ASSERT_FALSE(o);
  EXPECT_THAT(o.error().message, StartsWith("memory-budget:"));
  auto d = ParseAgentCommandLine({"--disk-budget", "5XB"});
  ASSERT_FALSE(d);
  EXPECT_THAT(d.error().message, StartsWith("disk-budget:"));
}

TEST(AgentOptionsTest, OutOfRangeValuesAreRefused) {
  auto zero = ParseAgentCommandLine({"--interval", "0s"});
  ASSERT_FALSE(zero);
  EXPECT_THAT(zero.error().message, StartsWith("interval:"));
  auto tiny = ParseAgentCommandLine({"--memory-budget", "1KiB"});
  ASSERT_FALSE(tiny);
  EXPECT_THAT(tiny.error().message, StartsWith("memory-budget:"));
}

TEST(AgentOptionsTest, BadEnumsNameTheKey) {
  auto f = ParseAgentCommandLine({"--log-format", "xml"});
  ASSERT_FALSE(f);
  EXPECT_THAT(f.error().message, StartsWith("log-format:"));
  auto l = ParseAgentCommandLine({"--log-level", "loud"});
  ASSERT_FALSE(l);
  EXPECT_THAT(l.error().message, StartsWith("log-level:"));
}

TEST(AgentOptionsTest, UnknownKeyInTheFileIsAnError) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", "listen = \"127.0.0.1:1\"\nintervall = \"1s\"\n");
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()});
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().message, "config file: unknown key 'agent.intervall'");
}

TEST(AgentOptionsTest, MissingConfigFileIsAnError) {
  auto o = ParseAgentCommandLine({"--config", "/nonexistent/agent.toml"});
  ASSERT_FALSE(o);
  EXPECT_THAT(o.error().message, HasSubstr("/nonexistent/agent.toml"));
}

TEST(AgentOptionsTest, OnceIsAFlagNotAConfigKey) {
  auto o = ParseAgentCommandLine({"--once"});
  ASSERT_TRUE(o) << o.error().ToString();
  EXPECT_TRUE(o->once);
  testing::TempDir dir;
  dir.WriteFile("agent.toml", "once = true\n");
  EXPECT_FALSE(ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()}));
}

TEST(AgentOptionsTest, UnknownFlagIsAnError) { EXPECT_FALSE(ParseAgentCommandLine({"--bogus"})); }

TEST(ListenAddressTest, Forms) {
  auto v4 = ParseListenAddress("127.0.0.1:9479");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9479);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  auto name = ParseListenAddress("localhost:80");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->host, "localhost");
  for (const char* bad : {"", "9479", "127.0.0.1", "127.0.0.1:", ":9479", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:80x", "a b:1", "[]:1"}) {
    EXPECT_FALSE(ParseListenAddress(bad)) << bad;
  }
  auto o = ParseAgentCommandLine({"--listen", "nowhere"});
  ASSERT_FALSE(o);
  EXPECT_THAT(o.error().message, StartsWith("listen:"));
}

TEST(TokenFileTest, PrivateFileIsRead) {
  testing::TempDir dir;
  dir.WriteFile("token", "  s3cr3t-Token_value+/=  \n");
  const auto path = (dir.path() / "token").string();
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  auto t = ReadTokenFile(path);
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_EQ(*t, "s3cr3t-Token_value+/=");
  // Group-readable is allowed (a monitoring group may share it); only world-readable is not.
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  EXPECT_TRUE(ReadTokenFile(path));
}

TEST(TokenFileTest, WorldReadableFileIsRefusedWithTheFix) {
  testing::TempDir dir;
  dir.WriteFile("token", "abc\n");
  const auto path = (dir.path() / "token").string();
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto t = ReadTokenFile(path);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::kPermission);
  EXPECT_THAT(t.error().message, HasSubstr("readable by every user"));
  EXPECT_THAT(t.error().message, HasSubstr("chmod 600 " + path));
}

TEST(TokenFileTest, BadContentIsRefused) {
  testing::TempDir dir;
  auto write = [&](const char* name, std::string_view content) {
    dir.WriteFile(name, content);
    const auto path = (dir.path() / name).string();
    EXPECT_EQ(chmod(path.c_str(), 0600), 0);
    return path;
  };
  auto empty = ReadTokenFile(write("empty", " \n"));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  auto two_lines = ReadTokenFile(write("two", "abc\ndef\n"));
  ASSERT_FALSE(two_lines);
  EXPECT_EQ(two_lines.error().code, ErrorCode::kInvalidArgument);
  auto control = ReadTokenFile(write("ctl", std::string_view("ab\0c", 4)));
  ASSERT_FALSE(control);
  auto big = ReadTokenFile(write("big", std::string(kMaxSecretFileBytes + 1, 'a')));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ErrorCode::kResourceExhausted);
  auto missing = ReadTokenFile((dir.path() / "missing").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto directory = ReadTokenFile(dir.path().string());
  ASSERT_FALSE(directory);
}

}  // namespace
}  // namespace ithbat::cli

namespace ithbat::cli {
namespace {

TEST(AgentOptionsJobLogTest, DefaultsCaptureWithEbpfAndDetectTheFormat) {
  auto o = ParseAgentCommandLine({});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->joblog, "ebpf");
  EXPECT_EQ(o->joblog_format, "auto");
  EXPECT_TRUE(o->joblog_tail.empty());
  EXPECT_EQ(o->joblog_user_patterns, nullptr);
}

TEST(AgentOptionsJobLogTest, EveryJobLogKeyFromAConfigFile) {
  testing::TempDir dir;
  dir.WriteFile("patterns.json", R"({"pattern_sets": [{"name": "inhouse", "patterns": [
      {"regex": "^TRAIN s=(?P<step>\\d+) L=(?P<loss>\\S+)$"}]}]})");
  dir.WriteFile("agent.toml", "joblog = \"tail\"\n"
                              "joblog-tail = \"/var/log/train.log?job=77&rank=0,/var/log/eval.log\"\n"
                              "joblog-format = \"megatron\"\n"
                              "joblog-patterns = \"" + (dir.path() / "patterns.json").string() + "\"\n"
                              "joblog-opt-out = \"job:1234,user:alice\"\n");
  auto o = ParseAgentCommandLine({"--config", (dir.path() / "agent.toml").string()});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->joblog, "tail");
  ASSERT_EQ(o->joblog_tail.size(), 2u);
  EXPECT_EQ(o->joblog_format, "megatron");
  ASSERT_NE(o->joblog_user_patterns, nullptr);
  EXPECT_EQ(o->joblog_user_patterns->names(), std::vector<std::string>{"inhouse"});
  EXPECT_EQ(o->joblog_opt_out, "job:1234,user:alice");
}

TEST(AgentOptionsJobLogTest, BadValuesNameTheirKey) {
  auto mode = ParseAgentCommandLine({"--joblog", "strace"});
  ASSERT_FALSE(mode);
  EXPECT_THAT(mode.error().message, StartsWith("joblog: "));
  auto format = ParseAgentCommandLine({"--joblog-format", "no-such-trainer"});
  ASSERT_FALSE(format);
  EXPECT_THAT(format.error().message, StartsWith("joblog-format: "));
  auto opt_out = ParseAgentCommandLine({"--joblog-opt-out", "team:ml"});
  ASSERT_FALSE(opt_out);
  EXPECT_THAT(opt_out.error().message, StartsWith("joblog-opt-out: "));
  auto patterns = ParseAgentCommandLine({"--joblog-patterns", "/nonexistent/patterns.json"});
  ASSERT_FALSE(patterns);
  EXPECT_THAT(patterns.error().message, StartsWith("joblog-patterns: "));
  testing::TempDir dir;
  dir.WriteFile("bad.json", R"({"pattern_sets": [{"name": "x", "patterns": [{"regex": "(unclosed"}]}]})");
  auto bad_regex = ParseAgentCommandLine({"--joblog-patterns", (dir.path() / "bad.json").string()});
  ASSERT_FALSE(bad_regex);
  EXPECT_THAT(bad_regex.error().message, StartsWith("joblog-patterns: "));
}

TEST(ListenTest, OnlyLoopbackIsLoopback) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackAddress(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "10.0.0.7", "128.0.0.1", "::ffff:10.0.0.1", "gpu-a07",
                           "localhost.example.com", ""}) {
    EXPECT_FALSE(IsLoopbackAddress(host)) << host;
  }
}

TEST(ListenTest, BeyondLoopbackNeedsATokenOrTheInsecureFlag) {
  auto refused = ParseAgentCommandLine({"--listen", "0.0.0.0:9479"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.error().message, HasSubstr("--token-file"));
  EXPECT_THAT(refused.error().message, HasSubstr("--insecure-listen-without-token"));
  EXPECT_TRUE(ParseAgentCommandLine({"--listen", "0.0.0.0:9479", "--insecure-listen-without-token"}));
  EXPECT_TRUE(ParseAgentCommandLine({"--listen", "[::1]:9479"}));
  // With a token file it is the operator's choice (the file is read when the agent starts).
  EXPECT_TRUE(ParseAgentCommandLine({"--listen", "10.0.0.7:9479", "--token-file", "/etc/ithbat/token"}));
}

TEST(SecretFileTest, AWebhookUrlIsReadLikeAToken) {
  testing::TempDir dir;
  dir.WriteFile("url", "https://hooks.slack.com/services/T000/B000/XXXX\n");
  const auto path = (dir.path() / "url").string();
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  auto url = ReadSecretFile(path, "webhook URL file");
  ASSERT_TRUE(url) << url.error().ToString();
  EXPECT_EQ(*url, "https://hooks.slack.com/services/T000/B000/XXXX");
  ASSERT_EQ(chmod(path.c_str(), 0604), 0);
  auto open = ReadSecretFile(path, "webhook URL file");
  ASSERT_FALSE(open);
  EXPECT_EQ(open.error().code, ErrorCode::kPermission);
  EXPECT_THAT(open.error().message, StartsWith("webhook URL file "));
  // A symlink another user owns is not followed (a user could point it at a file only root may
  // read); root's are, as Kubernetes mounts a Secret (token -> ..data/token -> the file).
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  std::filesystem::create_symlink(path, dir.path() / "users-link");
  ASSERT_EQ(lchown((dir.path() / "users-link").c_str(), 65534, 65534), 0);
  auto users = ReadSecretFile((dir.path() / "users-link").string(), "webhook URL file");
  ASSERT_FALSE(users);
  EXPECT_EQ(users.error().code, ErrorCode::kPermission);
  EXPECT_THAT(users.error().message, HasSubstr("owned by uid 65534"));
  std::filesystem::create_directories(dir.path() / "..2026_12_07");
  std::filesystem::rename(path, dir.path() / "..2026_12_07" / "url");
  std::filesystem::create_directory_symlink("..2026_12_07", dir.path() / "..data");
  std::filesystem::create_symlink("..data/url", dir.path() / "secret-url");
  auto k8s = ReadSecretFile((dir.path() / "secret-url").string(), "webhook URL file");
  ASSERT_TRUE(k8s) << k8s.error().ToString();
  EXPECT_EQ(*k8s, "https://hooks.slack.com/services/T000/B000/XXXX");
  // The file at the end is held to the same rules.
  ASSERT_EQ(chmod((dir.path() / "..2026_12_07" / "url").c_str(), 0644), 0);
  EXPECT_FALSE(ReadSecretFile((dir.path() / "secret-url").string(), "webhook URL file"));
  // A loop ends.
  std::filesystem::create_symlink("loop-b", dir.path() / "loop-a");
  std::filesystem::create_symlink("loop-a", dir.path() / "loop-b");
  auto loop = ReadSecretFile((dir.path() / "loop-a").string(), "webhook URL file");
  ASSERT_FALSE(loop);
  EXPECT_THAT(loop.error().message, HasSubstr("more than 8 symlinks"));
}

}  // namespace
}  // namespace ithbat::cli
