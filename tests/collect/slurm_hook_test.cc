// Slurm's prolog/epilog records: from slurmd's environment to the spool file, and from the spool
// to the agent's events and counters — with the hostile cases (a forged spool, a symlink, a
// FIFO, an oversized or malformed record, a value with control bytes).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/slurm/job_record.h"
#include "collect/slurm/slurm_hook_collector.h"
#include "collect/slurm/spool.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect {
namespace {

namespace fs = std::filesystem;
using ::ithbat::testing::FakeSink;
using ::ithbat::testing::TempDir;
using ::testing::HasSubstr;

constexpr TimeNs kT0 = 1'800'000'000 * kNsPerSec;

EnvLookup EnvOf(std::map<std::string, std::string> env) {
  return [env = std::move(env)](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// What Debian 12's slurmd gives an epilog for a batch script that ran `exit 3` (measured).
std::map<std::string, std::string> EpilogEnv() {
  return {{"SLURM_JOB_ID", "42"},           {"SLURM_JOB_USER", "alice"},
          {"SLURM_JOB_UID", "1001"},        {"SLURM_JOB_GID", "1001"},
          {"SLURM_JOB_PARTITION", "gpu"},   {"SLURM_CLUSTER_NAME", "c1"},
          {"SLURMD_NODENAME", "node1"},     {"SLURM_SCRIPT_CONTEXT", "epilog_slurmd"},
          {"SLURM_JOB_EXIT_CODE2", "3:0"},  {"SLURM_JOB_EXIT_CODE", "768"},
          {"SLURM_JOB_DERIVED_EC", "0"},    {"SLURM_JOB_GPUS", "0,1"},
          {"SLURM_JOB_ACCOUNT", "research"}};
}

std::optional<std::string> Attr(const Event& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

TEST(SlurmExitCodeTest, ParsesBothFormsSlurmWrites) {
  auto a = ParseSlurmExitCode2("3:0");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->exit_code, 3);
  EXPECT_EQ(a->signal, 0);
  auto b = ParseSlurmExitCode2("0:9");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->signal, 9);
  auto raw = ParseWaitStatus("768");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->exit_code, 3);
  EXPECT_EQ(raw->signal, 0);
  auto killed = ParseWaitStatus("9");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->signal, 9);
  for (const char* bad : {"", "3", "3:", ":9", "256:0", "0:200", "-1:0", "3:0x", "a:b"}) {
    EXPECT_FALSE(ParseSlurmExitCode2(bad)) << bad;
  }
  for (const char* bad : {"", "-1", "70000", "12a"}) EXPECT_FALSE(ParseWaitStatus(bad)) << bad;
}

TEST(SlurmRecordTest, EpilogEnvironmentBecomesARecordWithTheExitCode) {
  auto r = RecordFromEnvironment(JobHookEvent::kEnd, EnvOf(EpilogEnv()), kT0);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->job_id, "42");
  EXPECT_EQ(r->user, "alice");
  EXPECT_EQ(r->uid, 1001);
  EXPECT_EQ(r->account, "research");
  EXPECT_EQ(r->partition, "gpu");
  EXPECT_EQ(r->gpus, "0,1");
  EXPECT_EQ(r->node, "node1");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->signal);
  EXPECT_EQ(r->derived_exit_code, 0);
  EXPECT_TRUE(r->Failed());
  EXPECT_EQ(r->OutcomeText(), "exit code 3");
}

TEST(SlurmRecordTest, SignalAndRawStatusFallback) {
  auto env = EpilogEnv();
  env["SLURM_JOB_EXIT_CODE2"] = "0:9";
  auto r = RecordFromEnvironment(JobHookEvent::kEnd, EnvOf(env), kT0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->signal, 9);
  EXPECT_FALSE(r->exit_code);
  EXPECT_EQ(r->OutcomeText(), "signal 9 (SIGKILL)");
  // An older slurmd without EXIT_CODE2: the raw wait status.
  env.erase("SLURM_JOB_EXIT_CODE2");
  env["SLURM_JOB_EXIT_CODE"] = "256";
  r = RecordFromEnvironment(JobHookEvent::kEnd, EnvOf(env), kT0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 1);
}

TEST(SlurmRecordTest, PrologHasNoExitCodeAndBadValuesAreLeftOut) {
  auto env = EpilogEnv();
  env["SLURM_JOB_USER"] = "eve\nforged=1";           // a control byte: not a value we keep
  env["SLURM_JOB_ACCOUNT"] = std::string(300, 'a');  // over the bound
  env["SLURM_JOB_UID"] = "12x";
  auto r = RecordFromEnvironment(JobHookEvent::kStart, EnvOf(env), kT0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->user, "");
  EXPECT_EQ(r->account, "");
  EXPECT_EQ(r->uid, -1);
  EXPECT_FALSE(r->exit_code);
  EXPECT_FALSE(r->Failed());
}

TEST(SlurmRecordTest, NoJobIdIsAnError) {
  auto env = EpilogEnv();
  env.erase("SLURM_JOB_ID");
  EXPECT_FALSE(RecordFromEnvironment(JobHookEvent::kStart, EnvOf(env), kT0));
  env["SLURM_JOB_ID"] = "../../etc";
  auto r = RecordFromEnvironment(JobHookEvent::kStart, EnvOf(env), kT0);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("SLURM_JOB_ID"));
}

TEST(SlurmRecordTest, JsonRoundTripAndStrictParse) {
  auto r = RecordFromEnvironment(JobHookEvent::kEnd, EnvOf(EpilogEnv()), kT0);
  ASSERT_TRUE(r);
  auto back = ParseRecord(RecordToJson(*r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, *r);
  EXPECT_EQ(RecordFileName(*r), "01800000000000000000-42-end.json");
  for (const char* bad : {
           "",
           "[]",
           "{}",
           R"({"version":2,"event":"end","time_ns":1,"job_id":"1"})",
           R"({"version":1,"event":"stop","time_ns":1,"job_id":"1"})",
           R"({"version":1,"event":"end","time_ns":-5,"job_id":"1"})",
           R"({"version":1,"event":"end","time_ns":1,"job_id":"a/b"})",
           R"({"version":1,"event":"end","time_ns":1,"job_id":"1","exit_code":300})",
           R"({"version":1,"event":"end","time_ns":1,"job_id":"1","exit_code":1,"signal":9})",
           R"({"version":1,"event":"start","time_ns":1,"job_id":"1","exit_code":1})",
           R"({"version":1,"event":"end","time_ns":1,"job_id":"1","user":"a\u0001b"})",
           R"({"version":1,"event":"end","time_ns":1,"job_id":"1","user":7})",
       }) {
    EXPECT_FALSE(ParseRecord(bad)) << bad;
  }
  EXPECT_FALSE(ParseRecord(std::string(kMaxRecordBytes + 1, ' ')));
}

class SpoolTest : public ::testing::Test {
 protected:
  fs::path Spool() const { return tmp_.path() / "run" / "slurm"; }
  SlurmJobRecord Record(JobHookEvent e, std::map<std::string, std::string> env, TimeNs t) {
    auto r = RecordFromEnvironment(e, EnvOf(std::move(env)), t);
    EXPECT_TRUE(r);
    return *r;
  }
  std::unique_ptr<SlurmHookCollector> Collector(FakeSink& sink, bool remove_read = true) {
    SlurmHookOptions o;
    o.spool_dir = Spool();
    o.remove_read = remove_read;
    auto c = SlurmHookCollector::Create(o);
    EXPECT_TRUE(c->Init(sink));
    EXPECT_TRUE(c->Start());
    return c;
  }
  TempDir tmp_;
};

TEST_F(SpoolTest, WriterCreatesAPrivateSpoolAndTheCollectorTurnsRecordsIntoEvents) {
  auto start_env = EpilogEnv();
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, start_env, kT0)));
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kEnd, EpilogEnv(), kT0 + 60 * kNsPerSec)));
  struct stat st {};
  ASSERT_EQ(stat(Spool().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  FakeSink sink;
  auto c = Collector(sink);
  // Before the records were read: one running job would be counted after the first tick.
  ASSERT_TRUE(c->Collect(kT0 + 61 * kNsPerSec));
  const auto events = sink.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, EventKind::kJobStart);
  EXPECT_EQ(events[0].identity.job, "42");
  EXPECT_EQ(events[0].identity.node, "");  // the agent's own name, filled by the store
  EXPECT_EQ(Attr(events[0], "slurm_node"), "node1");
  EXPECT_EQ(events[0].time, kT0);
  EXPECT_EQ(Attr(events[0], "account"), "research");
  EXPECT_EQ(Attr(events[0], "gpus"), "0,1");
  EXPECT_EQ(Attr(events[0], "user"), "alice");
  EXPECT_EQ(events[1].kind, EventKind::kJobEnd);
  EXPECT_EQ(events[1].value, 3);
  EXPECT_EQ(Attr(events[1], "exit_code"), "3");
  EXPECT_EQ(events[1].text, "Slurm job 42 ended: exit code 3");
  EXPECT_EQ(sink.Last("ithbat_slurm_job_starts_total"), 1);
  EXPECT_EQ(sink.Last("ithbat_slurm_job_ends_total", R"({outcome="failed"})"), 1);
  EXPECT_EQ(sink.Last("ithbat_slurm_job_ends_total", R"({outcome="completed"})"), 0);
  EXPECT_EQ(sink.Last("ithbat_slurm_jobs_running"), 0);
  EXPECT_EQ(c->records_read(), 2u);
  // Read records are removed: nothing repeats.
  EXPECT_TRUE(fs::is_empty(Spool()));
  ASSERT_TRUE(c->Collect(kT0 + 62 * kNsPerSec));
  EXPECT_EQ(sink.events().size(), 2u);
}

TEST_F(SpoolTest, SignaledEndAndARunningJob) {
  auto env = EpilogEnv();
  env["SLURM_JOB_EXIT_CODE2"] = "0:9";
  auto other = EpilogEnv();
  other["SLURM_JOB_ID"] = "43";
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, other, kT0)));
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kEnd, env, kT0 + kNsPerSec)));
  FakeSink sink;
  auto c = Collector(sink);
  ASSERT_TRUE(c->Collect(kT0 + 2 * kNsPerSec));
  const auto events = sink.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].value, 128 + 9);
  EXPECT_EQ(Attr(events[1], "signal"), "9");
  EXPECT_EQ(sink.Last("ithbat_slurm_job_ends_total", R"({outcome="signaled"})"), 1);
  EXPECT_EQ(sink.Last("ithbat_slurm_jobs_running"), 1);
}

TEST_F(SpoolTest, OnceModeReadsWithoutTakingTheRecords) {
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, EpilogEnv(), kT0)));
  FakeSink sink;
  auto c = Collector(sink, /*remove_read=*/false);
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  ASSERT_TRUE(c->Collect(kT0 + 2 * kNsPerSec));
  EXPECT_EQ(sink.events().size(), 1u);  // once, not once per tick
  EXPECT_FALSE(fs::is_empty(Spool()));  // still there for the running agent
}

TEST_F(SpoolTest, HostileEntriesAreRemovedUnreadAndCounted) {
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, EpilogEnv(), kT0)));
  tmp_.WriteFile("run/slurm/00000000000000000001-1-end.json", "{not json");
  tmp_.WriteFile("run/slurm/00000000000000000002-1-end.json", std::string(kMaxRecordBytes + 10, ' '));
  tmp_.WriteFile("secret", "root's secret");
  fs::create_symlink(tmp_.path() / "secret", Spool() / "00000000000000000003-1-end.json");
  ASSERT_EQ(mkfifo((Spool() / "00000000000000000004-1-end.json").c_str(), 0600), 0);
  tmp_.WriteFile("run/slurm/.tmp-1-00000000000000000005-1-end.json", "half");  // a writer mid-way
  FakeSink sink;
  auto c = Collector(sink);
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));  // a FIFO does not block the collector
  EXPECT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(c->records_rejected(), 4u);
  EXPECT_EQ(sink.Last("ithbat_slurm_hook_records_rejected_total"), 4);
  EXPECT_THAT(c->Health().last_error, HasSubstr("removed"));
  EXPECT_TRUE(fs::exists(tmp_.path() / "secret"));  // the link's target is untouched
  EXPECT_TRUE(fs::exists(Spool() / ".tmp-1-00000000000000000005-1-end.json"));
}

TEST_F(SpoolTest, AnUntrustedSpoolIsNeitherReadNorWritten) {
  ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, EpilogEnv(), kT0)));
  ASSERT_EQ(chmod(Spool().c_str(), 0777), 0);
  FakeSink sink;
  auto c = Collector(sink);
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(sink.events().size(), 0u);
  EXPECT_THAT(c->Health().degraded, HasSubstr("writable by group or others"));
  auto w = WriteSpoolRecord(Spool(), Record(JobHookEvent::kEnd, EpilogEnv(), kT0));
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::kPermission);
  // Fixed: read again, degraded cleared.
  ASSERT_EQ(chmod(Spool().c_str(), 0700), 0);
  ASSERT_TRUE(c->Collect(kT0 + 2 * kNsPerSec));
  EXPECT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(c->Health().degraded, "");
  // A symlinked spool is refused too.
  fs::create_symlink(Spool(), tmp_.path() / "link");
  EXPECT_FALSE(CheckSpoolDirectory(tmp_.path() / "link"));
}

TEST_F(SpoolTest, NoSpoolIsQuietAndAFullSpoolDropsNewRecords) {
  FakeSink sink;
  auto c = Collector(sink);
  ASSERT_TRUE(c->Collect(kT0));  // Slurm's hooks not installed here: no error, not degraded
  EXPECT_EQ(c->Health().degraded, "");
  EXPECT_EQ(c->Health().errors, 0u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, EpilogEnv(), kT0 + i), 3));
  }
  auto full = WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, EpilogEnv(), kT0 + 10), 3);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(full.error().message, HasSubstr("dropped"));
}

TEST_F(SpoolTest, ManyRecordsAreReadABoundedBatchPerTickInTimeOrder) {
  for (int i = 0; i < 300; ++i) {
    auto env = EpilogEnv();
    env["SLURM_JOB_ID"] = std::to_string(1000 + i);
    ASSERT_TRUE(WriteSpoolRecord(Spool(), Record(JobHookEvent::kStart, env, kT0 + (300 - i) * kNsPerSec)));
  }
  FakeSink sink;
  auto c = Collector(sink);
  ASSERT_TRUE(c->Collect(kT0 + 400 * kNsPerSec));
  auto events = sink.events();
  ASSERT_EQ(events.size(), 256u);
  EXPECT_EQ(events.front().identity.job, "1299");  // the oldest first
  ASSERT_TRUE(c->Collect(kT0 + 401 * kNsPerSec));
  EXPECT_EQ(sink.events().size(), 300u);
  EXPECT_EQ(sink.Last("ithbat_slurm_jobs_running"), 300);
}

}  // namespace
}  // namespace ithbat::collect
