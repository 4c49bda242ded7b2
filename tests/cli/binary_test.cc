// The built `ithbat` binary, run as a user would: output and exit codes.
#include <csignal>
#include <cstdio>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/app.h"
#include "core/version.h"
#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout only
  std::string all;  // stdout and stderr together
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string Capture(const std::string& command, int* exit_code) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

RunResult Ithbat(const std::string& args) {
  const std::string bin = Quote(testing::IthbatBinary().string());
  RunResult r;
  int ignored = 0;
  r.out = Capture(bin + " " + args + " 2>/dev/null </dev/null", &ignored);
  r.all = Capture(bin + " " + args + " 2>&1 </dev/null", &r.exit_code);
  return r;
}

TEST(IthbatBinaryTest, VersionPrintsVersionAndBuild) {
  RunResult r = Ithbat("version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith(std::string("ithbat ") + kVersion + "\n"));
  EXPECT_THAT(r.out, HasSubstr("build:"));
  EXPECT_THAT(r.out, HasSubstr("CLI11 2."));
}

TEST(IthbatBinaryTest, VersionFlagSaysWhatTheVersionCommandSays) {
  // Operators and packaging scripts try `--version` first; it needs no subcommand.
  RunResult flag = Ithbat("--version");
  RunResult command = Ithbat("version");
  EXPECT_EQ(flag.exit_code, 0) << flag.all;
  EXPECT_THAT(flag.out, StartsWith(std::string("ithbat ") + kVersion + "\n"));
  EXPECT_EQ(flag.out, command.out);
}

TEST(IthbatBinaryTest, NoSubcommandIsAUsageError) {
  RunResult r = Ithbat("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, HasSubstr("subcommand"));
}

TEST(IthbatBinaryTest, HelpExitsZero) {
  RunResult r = Ithbat("agent --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--listen"));
  EXPECT_THAT(r.out, HasSubstr("--token-file"));
}

TEST(IthbatBinaryTest, UnknownFlagIsAUsageError) {
  RunResult r = Ithbat("agent --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, HasSubstr("--no-such-flag"));
}

TEST(IthbatBinaryTest, BadValueIsAUsageErrorNamingTheKey) {
  RunResult r = Ithbat("agent --once --interval soon");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, HasSubstr("interval: invalid duration 'soon'"));
}

// `--kmsg=` is an empty value, not "take the next argument": CLI11 alone would read the
// following flag as the kernel log's path (and here run a collection instead of refusing).
TEST(IthbatBinaryTest, AnEmptyAssignedValueDoesNotSwallowTheNextArgument) {
  RunResult r = Ithbat("agent --kmsg= --interval=soon --once");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, HasSubstr("interval: invalid duration 'soon'"));
  const char* argv[] = {"ithbat", "agent", "--kmsg=", "--cluster=a=b", "--node=", "--=", "x="};
  EXPECT_EQ(SplitEmptyAssignments(7, argv),
            (std::vector<std::string>{"ithbat", "agent", "--kmsg", "", "--cluster=a=b", "--node", "",
                                      "--=", "x="}));
}

TEST(IthbatBinaryTest, BadConfigFileIsAUsageError) {
  testing::TempDir dir;
  dir.WriteFile("agent.toml", "[agent]\nretention = \"forever\"\n");
  RunResult r = Ithbat("agent --once --config " + Quote((dir.path() / "agent.toml").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, HasSubstr("retention:"));
}

TEST(IthbatBinaryTest, WorldReadableTokenFileIsARuntimeFailure) {
  testing::TempDir dir;
  dir.WriteFile("token", "abc\n");
  const auto token = (dir.path() / "token").string();
  ASSERT_EQ(chmod(token.c_str(), 0644), 0);
  RunResult r = Ithbat("agent --listen 127.0.0.1:0 --token-file " + Quote(token));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, HasSubstr("readable by every user"));
}

TEST(IthbatBinaryTest, ServingBeyondLoopbackWithoutATokenIsRefused) {
  RunResult agent = Ithbat("agent --once --listen 0.0.0.0:0");
  EXPECT_EQ(agent.exit_code, 2);
  EXPECT_THAT(agent.all, HasSubstr("--insecure-listen-without-token"));
  RunResult hub = Ithbat("hub --once --agent 127.0.0.1:1 --listen :: --port 0");
  EXPECT_EQ(hub.exit_code, 2);
  EXPECT_THAT(hub.all, HasSubstr("--insecure-listen-without-token"));
}

TEST(IthbatBinaryTest, AgentAndHubShareOneFlagGrammar) {
  // The same flag for the same thing: an operator who set up one can set up the other.
  RunResult agent = Ithbat("agent --help");
  RunResult hub = Ithbat("hub --help");
  for (const char* flag :
       {"--listen", "--token-file", "--log-level", "--log-format", "--insecure-listen-without-token"}) {
    EXPECT_THAT(agent.out, HasSubstr(flag)) << "agent";
    EXPECT_THAT(hub.out, HasSubstr(flag)) << "hub";
  }
  // --listen ADDR:PORT as the agent reads it: 0.0.0.0:0 is beyond loopback, so refused untokened.
  RunResult beyond = Ithbat("hub --once --agent 127.0.0.1:1 --listen 0.0.0.0:0");
  EXPECT_EQ(beyond.exit_code, 2);
  EXPECT_THAT(beyond.all, HasSubstr("--insecure-listen-without-token"));
  RunResult disagree = Ithbat("hub --once --agent 127.0.0.1:1 --listen 127.0.0.1:9000 --port 9001");
  EXPECT_EQ(disagree.exit_code, 2);
  EXPECT_THAT(disagree.all, HasSubstr("give the port once"));
  // --port alone, as before --listen took a port: it moves the default address's port.
  RunResult port_only = Ithbat("hub --once --agent 127.0.0.1:1 --port 0");
  EXPECT_NE(port_only.exit_code, 2) << port_only.all;
  EXPECT_THAT(port_only.all, ::testing::Not(HasSubstr("disagree")));
  RunResult format = Ithbat("hub --once --agent 127.0.0.1:1 --log-format yaml");
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_THAT(format.all, HasSubstr("--log-format"));
}

TEST(IthbatBinaryTest, TheWebhookUrlComesFromAPrivateFileNeverTheCommandLine) {
  RunResult argv = Ithbat("hub --once --agent 127.0.0.1:1 --webhook-url http://127.0.0.1:1/hook");
  EXPECT_EQ(argv.exit_code, 2);  // no such flag any more
  testing::TempDir dir;
  dir.WriteFile("url", "http://127.0.0.1:1/services/T0/B0/secret\n");
  const auto url = (dir.path() / "url").string();
  ASSERT_EQ(chmod(url.c_str(), 0644), 0);
  RunResult open = Ithbat("hub --once --agent 127.0.0.1:1 --webhook-url-file " + Quote(url));
  EXPECT_EQ(open.exit_code, 2);
  EXPECT_THAT(open.all, HasSubstr("readable by every user"));
  EXPECT_THAT(open.all, ::testing::Not(HasSubstr("secret")));
}

TEST(IthbatBinaryTest, AddressInUseIsARuntimeFailure) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  RunResult r = Ithbat("agent --listen 127.0.0.1:" + std::to_string(port));
  close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, HasSubstr("cannot serve on 127.0.0.1:" + std::to_string(port)));
}

TEST(IthbatBinaryTest, LockedDataDirIsARuntimeFailure) {
  testing::TempDir dir;
  const std::string data = Quote((dir.path() / "data").string());
  const std::string bin = Quote(testing::IthbatBinary().string());
  // The first agent holds the directory; `echo $$; exec` gives us its pid (the shell becomes it).
  FILE* first = popen(
      ("echo $$; exec " + bin + " agent --listen 127.0.0.1:0 --data-dir " + data + " 2>&1").c_str(), "r");
  ASSERT_NE(first, nullptr);
  char line[1024];
  ASSERT_NE(fgets(line, sizeof(line), first), nullptr);
  const pid_t pid = std::stoi(line);
  bool listening = false;
  while (!listening && fgets(line, sizeof(line), first) != nullptr) {
    listening = std::string_view(line).find("listening on") != std::string_view::npos;
  }
  ASSERT_TRUE(listening);
  RunResult r = Ithbat("agent --listen 127.0.0.1:0 --data-dir " + data);
  kill(pid, SIGTERM);
  while (fgets(line, sizeof(line), first) != nullptr) {
  }
  pclose(first);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, HasSubstr("cannot open the store"));
}

TEST(IthbatBinaryTest, OnceCollectsAndPrintsMetrics) {
  RunResult r = Ithbat("agent --once --interval 200ms --log-level warn");
  EXPECT_EQ(r.exit_code, 0) << r.all;
  EXPECT_THAT(r.out, HasSubstr("# TYPE ithbat_host_cpu_seconds_total counter"));
  EXPECT_THAT(r.out, HasSubstr("ithbat_collector_up{collector=\"host\"} 1"));
}

TEST(IthbatBinaryTest, MetricsDocIsMarkdown) {
  RunResult r = Ithbat("metrics-doc");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("ithbat_host_memory_total_bytes"));
  EXPECT_THAT(r.out, HasSubstr("ithbat_collector_up"));
}

}  // namespace
}  // namespace ithbat::cli
