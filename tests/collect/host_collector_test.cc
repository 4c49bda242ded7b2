// The host collector against fixture trees (tests/collect/fixtures/host) and this machine's
// real /proc, writing to a FakeSink that records what it is given.
#include "collect/host/host_collector.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include "agent/logging.h"
#include "core/metric.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect {
namespace {

namespace fs = std::filesystem;
using ::ithbat::testing::FakeSink;
using ::ithbat::testing::SourceDir;
using ::ithbat::testing::TempDir;
using ::testing::HasSubstr;

// Captures what the "host" logger writes (ReportError goes there: it is where a partial
// failure names its file, since health keeps only counts for those).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    agent::GetLogger("host")->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = agent::GetLogger("host")->sinks();
    std::erase(sinks, sink_);
  }
  std::string Text() const {
    std::string out;
    for (const auto& line : sink_->last_formatted()) out += line;
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

fs::path Fixture(std::string_view name) { return SourceDir() / "tests/collect/fixtures/host" / name; }

// A writable copy of a fixture tree, to break one file of it.
void CopyTree(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

constexpr TimeNs kT0 = 1'800'000'000 * kNsPerSec;

// Init + Start + one Collect, asserting the lifecycle calls themselves succeed.
std::unique_ptr<HostCollector> Started(const fs::path& root, FakeSink& sink, long user_hz = 100) {
  auto c = HostCollector::Create(HostOptions{.procfs = root, .user_hz = user_hz});
  EXPECT_TRUE(c->Init(sink));
  EXPECT_TRUE(c->Start());
  return c;
}

std::set<std::string> DescribedNames(const HostCollector& c) {
  std::set<std::string> names;
  for (const auto& d : c.Describe()) names.insert(d.name);
  return names;
}

// Every series the collector registered was Describe()d, with the same desc.
void ExpectOnlyDescribed(const HostCollector& c, const FakeSink& sink) {
  const auto descs = c.Describe();
  for (const auto& s : sink.series()) {
    auto it = std::find_if(descs.begin(), descs.end(), [&](const MetricDesc& d) { return d.name == s.desc.name; });
    ASSERT_NE(it, descs.end()) << s.desc.name << " was not described";
    EXPECT_EQ(it->help, s.desc.help);
    EXPECT_EQ(it->unit, s.desc.unit);
    EXPECT_EQ(it->type, s.desc.type);
    for (size_t i = 0; i < s.labels.size(); i++) {
      EXPECT_THAT(it->label_names, ::testing::Contains(std::string(s.labels.NameAt(i)))) << s.desc.name;
    }
  }
}

TEST(HostCollectorTest, DescribeFollowsTheNamingRules) {
  auto c = HostCollector::Create({});
  const auto descs = c->Describe();
  EXPECT_EQ(descs.size(), 31u);
  std::set<std::string> names;
  for (const auto& d : descs) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name << ": " << ValidateMetricDesc(d).error().ToString();
    EXPECT_TRUE(d.name.starts_with("ithbat_host_")) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate " << d.name;
  }
  EXPECT_TRUE(names.contains("ithbat_host_cpu_seconds_total"));
  EXPECT_TRUE(names.contains("ithbat_host_memory_swap_free_bytes"));
  EXPECT_TRUE(names.contains("ithbat_host_pressure_io_full_waiting_seconds_total"));
  EXPECT_TRUE(names.contains("ithbat_host_pressure_memory_some_avg10_ratio"));
  EXPECT_TRUE(names.contains("ithbat_host_major_page_faults_total"));
  EXPECT_EQ(c->name(), "host");
  // Describe does not depend on the source: a root that does not exist describes the same.
  EXPECT_EQ(DescribedNames(*HostCollector::Create(HostOptions{.procfs = "/nonexistent"})), names);
}

TEST(HostCollectorTest, DefaultsFromTheSystem) {
  auto c = HostCollector::Create({});
  EXPECT_EQ(c->options().procfs, fs::path("/proc"));
  EXPECT_EQ(c->options().user_hz, sysconf(_SC_CLK_TCK));
  EXPECT_EQ(c->options().max_file_bytes, 1u << 20);
}

TEST(HostCollectorTest, NormalTreeGivesEverySeriesInBaseUnits) {
  FakeSink sink;
  auto c = Started(Fixture("normal"), sink);
  ASSERT_TRUE(c->Collect(kT0));
  const auto h = c->Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 0u);
  EXPECT_EQ(h.degraded, "");
  EXPECT_EQ(h.last_error, "");

  // /proc/stat, jiffies → seconds at USER_HZ 100.
  const char* cpu = "ithbat_host_cpu_seconds_total";
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="user"})"), 168.71);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="nice"})"), 0.0);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="system"})"), 26.55);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="idle"})"), 913.05);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="iowait"})"), 3.87);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="irq"})"), 0.0);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="softirq"})"), 0.63);
  EXPECT_DOUBLE_EQ(*sink.Last(cpu, R"({mode="steal"})"), 0.24);
  EXPECT_EQ(sink.Last("ithbat_host_cpus"), 2.0);
  EXPECT_EQ(sink.Last("ithbat_host_context_switches_total"), 417325.0);
  EXPECT_EQ(sink.Last("ithbat_host_forks_total"), 9667.0);
  EXPECT_EQ(sink.Last("ithbat_host_procs_running"), 6.0);
  EXPECT_EQ(sink.Last("ithbat_host_procs_blocked"), 0.0);

  // /proc/meminfo, kB → bytes.
  EXPECT_EQ(sink.Last("ithbat_host_memory_total_bytes"), 24731708.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_available_bytes"), 23625000.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_free_bytes"), 20975688.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_buffers_bytes"), 54524.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_cached_bytes"), 2764020.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_dirty_bytes"), 17620.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_writeback_bytes"), 0.0);
  EXPECT_EQ(sink.Last("ithbat_host_memory_swap_total_bytes"), 8388604.0 * 1024);
  EXPECT_EQ(sink.Last("ithbat_host_memory_swap_free_bytes"), 8388000.0 * 1024);

  // PSI: microseconds → seconds, percent → ratio.
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_cpu_some_waiting_seconds_total"), 34.601805);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_cpu_some_avg10_ratio"), 0.7612);
  EXPECT_EQ(sink.Last("ithbat_host_pressure_cpu_full_waiting_seconds_total"), 0.0);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_memory_some_waiting_seconds_total"), 2.737728);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_memory_full_waiting_seconds_total"), 2.640385);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_io_some_waiting_seconds_total"), 1.234567);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_io_some_avg10_ratio"), 0.015);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_io_full_waiting_seconds_total"), 0.654321);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_io_full_avg10_ratio"), 0.005);

  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_load1"), 1.88);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_load5"), 0.61);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_load15"), 0.23);
  EXPECT_EQ(sink.Last("ithbat_host_major_page_faults_total"), 770.0);

  // 8 cpu modes + 5 stat + 9 memory + 12 pressure + 3 load + 1 vmstat, each once, at kT0.
  EXPECT_EQ(sink.series_count(), 38u);
  for (const auto& s : sink.series()) {
    ASSERT_EQ(s.samples.size(), 1u) << s.desc.name;
    EXPECT_EQ(s.samples[0].first, kT0);
  }
  ExpectOnlyDescribed(*c, sink);
  // Every described metric is produced from a complete tree.
  std::set<std::string> produced;
  for (const auto& s : sink.series()) produced.insert(s.desc.name);
  EXPECT_EQ(produced, DescribedNames(*c));
}

TEST(HostCollectorTest, LaterTicksAppendWithoutRegisteringAgain) {
  FakeSink sink;
  auto c = Started(Fixture("normal"), sink);
  ASSERT_TRUE(c->Collect(kT0));
  const size_t registrations = sink.registrations();
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  ASSERT_TRUE(c->Collect(kT0 + 2 * kNsPerSec));
  EXPECT_EQ(sink.registrations(), registrations);
  EXPECT_EQ(sink.series_count(), 38u);
  for (const auto& s : sink.series()) EXPECT_EQ(s.samples.size(), 3u) << s.desc.name;
  EXPECT_EQ(c->Health().collects, 3u);
  EXPECT_EQ(c->Health().errors, 0u);
}

TEST(HostCollectorTest, UserHzOptionScalesCpuSeconds) {
  FakeSink sink;
  auto c = Started(Fixture("normal"), sink, /*user_hz=*/250);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_cpu_seconds_total", R"({mode="user"})"), 16871.0 / 250);
}

TEST(HostCollectorTest, NoPsiIsDegradedNotAnErrorStorm) {
  FakeSink sink;
  auto c = Started(Fixture("no_psi"), sink);
  for (int i = 0; i < 5; i++) ASSERT_TRUE(c->Collect(kT0 + i * kNsPerSec));
  const auto h = c->Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 0u);
  EXPECT_THAT(h.degraded, HasSubstr("no PSI"));
  EXPECT_THAT(h.degraded, HasSubstr("pressure"));
  EXPECT_EQ(sink.CountByPrefix("ithbat_host_pressure_"), 0u);
  EXPECT_TRUE(sink.Last("ithbat_host_load1").has_value());
  EXPECT_TRUE(sink.Last("ithbat_host_memory_total_bytes").has_value());
  ExpectOnlyDescribed(*c, sink);
}

TEST(HostCollectorTest, DegradedClearsWhenPsiAppears) {
  TempDir dir;
  CopyTree(Fixture("no_psi"), dir.path());
  FakeSink sink;
  auto c = Started(dir.path(), sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_NE(c->Health().degraded, "");
  CopyTree(Fixture("normal/pressure"), dir.path() / "pressure");
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(c->Health().degraded, "");
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(sink.Last("ithbat_host_pressure_io_some_avg10_ratio").has_value());
}

TEST(HostCollectorTest, CpuPressureWithoutFullLine) {
  // Kernels before 5.13 print only "some" for cpu: no cpu "full" series, no error.
  TempDir dir;
  CopyTree(Fixture("normal"), dir.path());
  dir.WriteFile("pressure/cpu", "some avg10=2.00 avg60=1.00 avg300=0.50 total=4000000\n");
  FakeSink sink;
  auto c = Started(dir.path(), sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_cpu_some_waiting_seconds_total"), 4.0);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_host_pressure_cpu_some_avg10_ratio"), 0.02);
  EXPECT_FALSE(sink.Find("ithbat_host_pressure_cpu_full_waiting_seconds_total").has_value());
  EXPECT_EQ(sink.series_count(), 36u);
}

struct BrokenFile {
  std::string file;         // relative to the root
  std::string replacement;  // a file under fixtures/host/malformed, or "" to delete the file
  std::string expect;       // in the logged error, besides the file's path
  std::string lost_series;  // a series of the broken file: absent
  std::string kept_series;  // a series of another file: still appended
};

class HostCollectorBrokenFileTest : public ::testing::TestWithParam<BrokenFile> {};

TEST_P(HostCollectorBrokenFileTest, OneBadFileIsReportedAndTheRestCollected) {
  const BrokenFile& p = GetParam();
  TempDir dir;
  CopyTree(Fixture("normal"), dir.path());
  const fs::path broken = dir.path() / p.file;
  if (p.replacement.empty()) {
    fs::remove(broken);
  } else {
    fs::copy_file(Fixture("malformed") / p.replacement, broken, fs::copy_options::overwrite_existing);
  }
  LogCapture log;
  FakeSink sink;
  auto c = Started(dir.path(), sink);
  ASSERT_TRUE(c->Collect(kT0));  // a partial failure is not a failed Collect
  auto h = c->Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 1u);
  EXPECT_THAT(log.Text(), HasSubstr(broken.string()));
  EXPECT_THAT(log.Text(), HasSubstr(p.expect));
  EXPECT_FALSE(sink.Find(p.lost_series).has_value());
  EXPECT_TRUE(sink.Last(p.kept_series).has_value()) << p.kept_series;
  ExpectOnlyDescribed(*c, sink);

  // Next tick: one more error, still up (a count per tick, not per series).
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  h = c->Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 2u);
  EXPECT_EQ(h.degraded, "");
}

INSTANTIATE_TEST_SUITE_P(
    Files, HostCollectorBrokenFileTest,
    ::testing::Values(
        BrokenFile{"stat", "stat_truncated", "no 'ctxt' line", "ithbat_host_cpus", "ithbat_host_load1"},
        BrokenFile{"stat", "stat_nonnumeric", "'26x5'", "ithbat_host_forks_total", "ithbat_host_memory_total_bytes"},
        BrokenFile{"meminfo", "meminfo_garbage", "\\x7fELF", "ithbat_host_memory_total_bytes",
                   "ithbat_host_procs_running"},
        BrokenFile{"loadavg", "loadavg_nonnumeric", "'0.6I'", "ithbat_host_load5", "ithbat_host_cpus"},
        BrokenFile{"vmstat", "vmstat_truncated", "'pgsteal' has no value", "ithbat_host_major_page_faults_total",
                   "ithbat_host_load15"},
        BrokenFile{"pressure/memory", "pressure_memory_truncated", "no total",
                   "ithbat_host_pressure_memory_some_avg10_ratio", "ithbat_host_pressure_io_some_avg10_ratio"},
        BrokenFile{"vmstat", "", "not_found", "ithbat_host_major_page_faults_total", "ithbat_host_load1"},
        BrokenFile{"pressure/io", "", "not_found", "ithbat_host_pressure_io_some_avg10_ratio",
                   "ithbat_host_pressure_cpu_some_avg10_ratio"}));

TEST(HostCollectorTest, HugeFileIsRefusedAtTheBound) {
  TempDir dir;
  CopyTree(Fixture("normal"), dir.path());
  // 2 MiB of plausible lines: the bound (1 MiB) refuses it before any of it is parsed.
  std::string huge;
  while (huge.size() < (2u << 20)) huge += "MemTotal:       24731708 kB\n";
  dir.WriteFile("meminfo", huge);
  LogCapture log;
  FakeSink sink;
  auto c = Started(dir.path(), sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 1u);
  EXPECT_THAT(log.Text(), HasSubstr("resource_exhausted"));
  EXPECT_THAT(log.Text(), HasSubstr((dir.path() / "meminfo").string()));
  EXPECT_FALSE(sink.Find("ithbat_host_memory_total_bytes").has_value());
  EXPECT_TRUE(sink.Last("ithbat_host_cpus").has_value());
}

TEST(HostCollectorTest, EveryFileFailingFailsTheCollect) {
  TempDir dir;  // an empty root: nothing to read, PSI missing too
  FakeSink sink;
  auto c = Started(dir.path(), sink);
  auto s = c->Collect(kT0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
  const auto h = c->Health();
  EXPECT_FALSE(h.up);
  EXPECT_EQ(h.errors, 1u);  // one failed Collect, not one per file
  EXPECT_THAT(h.last_error, HasSubstr("all 4 files"));
  EXPECT_THAT(h.last_error, HasSubstr((dir.path() / "stat").string()));
  EXPECT_TRUE(sink.series().empty());

  // The files come back: the collector is up again.
  CopyTree(Fixture("normal"), dir.path());
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_TRUE(c->Health().up);
  EXPECT_EQ(c->Health().last_error, "");
  EXPECT_EQ(c->Health().degraded, "");
}

TEST(HostCollectorTest, MissingRootFailsInit) {
  FakeSink sink;
  auto c = HostCollector::Create(HostOptions{.procfs = "/nonexistent/proc"});
  auto s = c->Init(sink);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(s.error().message, HasSubstr("/nonexistent/proc"));
  EXPECT_EQ(c->Health().state, agent::CollectorState::kFailed);
}

TEST(HostCollectorTest, RefusedRegistrationIsReportedOnceAndSkipped) {
  FakeSink sink;
  sink.RefuseRegistration("ithbat_host_load1");
  LogCapture log;
  auto c = Started(Fixture("normal"), sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 1u);
  EXPECT_THAT(log.Text(), HasSubstr("ithbat_host_load1"));
  const size_t registrations = sink.registrations();
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(c->Health().errors, 1u);  // not retried every tick
  EXPECT_EQ(sink.registrations(), registrations);
  EXPECT_FALSE(sink.Find("ithbat_host_load1").has_value());
  EXPECT_EQ(sink.Find("ithbat_host_load5")->samples.size(), 2u);
}

TEST(HostCollectorTest, RefusedAppendsAreOneErrorPerTick) {
  FakeSink sink;
  auto c = Started(Fixture("normal"), sink);
  ASSERT_TRUE(c->Collect(kT0));
  // A tick older than the last one: every append is refused as out of order.
  ASSERT_TRUE(c->Collect(kT0 - kNsPerSec));
  EXPECT_EQ(c->Health().errors, 1u);
  EXPECT_TRUE(c->Health().up);
}

TEST(HostCollectorTest, RealProcParsesWithoutError) {
  // Conformance with a real kernel's formats: this machine's /proc.
  FakeSink sink;
  LogCapture log;
  auto c = Started("/proc", sink, /*user_hz=*/0);
  ASSERT_TRUE(c->Collect(kT0)) << c->Health().last_error;
  const auto h = c->Health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 0u) << log.Text();
  const bool psi = fs::exists("/proc/pressure/cpu");
  if (psi) {
    EXPECT_EQ(h.degraded, "");
    EXPECT_TRUE(sink.Last("ithbat_host_pressure_memory_some_waiting_seconds_total").has_value());
  } else {
    EXPECT_THAT(h.degraded, HasSubstr("no PSI"));
  }
  EXPECT_GE(*sink.Last("ithbat_host_cpus"), 1.0);
  EXPECT_GT(*sink.Last("ithbat_host_cpu_seconds_total", R"({mode="idle"})"), 0.0);
  EXPECT_GT(*sink.Last("ithbat_host_memory_total_bytes"), 0.0);
  EXPECT_TRUE(sink.Last("ithbat_host_load1").has_value());
  EXPECT_TRUE(sink.Last("ithbat_host_major_page_faults_total").has_value());
  // 8 cpu modes on any kernel since 2.6.11.
  for (std::string_view mode : kCpuModes) {
    const std::string labels = fmt::format("{{mode=\"{}\"}}", mode);
    EXPECT_TRUE(sink.Find("ithbat_host_cpu_seconds_total", labels).has_value()) << mode;
  }
  ExpectOnlyDescribed(*c, sink);
}

}  // namespace
}  // namespace ithbat::collect
