// The disk, NFS/Lustre and InfiniBand collectors against fixture trees
// (tests/collect/fixtures/node), missing roots and broken files, with a FakeSink.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collect/node/node_collectors.h"
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

fs::path Fixture(std::string_view name) { return SourceDir() / "tests/collect/fixtures/node" / name; }
constexpr TimeNs kT0 = 1'800'000'000 * kNsPerSec;

template <typename C>
void ExpectValidDescribe(const C& c, std::string_view prefix, size_t count) {
  const auto descs = c.Describe();
  EXPECT_EQ(descs.size(), count);
  std::set<std::string> names;
  for (const auto& d : descs) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name << ": " << ValidateMetricDesc(d).error().ToString();
    EXPECT_TRUE(d.name.starts_with(prefix)) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate " << d.name;
  }
}

// Every registered series was described with the same desc and label names.
template <typename C>
void ExpectOnlyDescribed(const C& c, const FakeSink& sink) {
  const auto descs = c.Describe();
  for (const auto& s : sink.series()) {
    auto it =
        std::find_if(descs.begin(), descs.end(), [&](const MetricDesc& d) { return d.name == s.desc.name; });
    ASSERT_NE(it, descs.end()) << s.desc.name;
    EXPECT_EQ(it->help, s.desc.help);
    for (size_t i = 0; i < s.labels.size(); i++) {
      EXPECT_THAT(it->label_names, ::testing::Contains(std::string(s.labels.NameAt(i)))) << s.desc.name;
    }
  }
}

template <typename C, typename O>
std::unique_ptr<C> Started(O options, FakeSink& sink) {
  auto c = C::Create(std::move(options));
  EXPECT_TRUE(c->Init(sink));
  EXPECT_TRUE(c->Start());
  return c;
}

// ---- Disk ----

TEST(DiskCollectorTest, Describe) {
  auto c = DiskCollector::Create({});
  ExpectValidDescribe(*c, "ithbat_disk_", 9);
  EXPECT_EQ(c->name(), "disk");
}

TEST(DiskCollectorTest, FixtureInBaseUnitsWithoutVirtualDevices) {
  FakeSink sink;
  auto c = Started<DiskCollector>(DiskOptions{.procfs = Fixture("normal")}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_EQ(c->Health().degraded, "");
  const std::string vda = R"({device="vda"})";
  EXPECT_EQ(sink.Last("ithbat_disk_reads_completed_total", vda), 29921);
  EXPECT_EQ(sink.Last("ithbat_disk_writes_completed_total", vda), 103756);
  EXPECT_EQ(sink.Last("ithbat_disk_read_bytes_total", vda), 2590522.0 * 512);
  EXPECT_EQ(sink.Last("ithbat_disk_written_bytes_total", vda), 27428104.0 * 512);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_disk_read_time_seconds_total", vda), 9.043);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_disk_write_time_seconds_total", vda), 123.275);
  EXPECT_EQ(sink.Last("ithbat_disk_io_in_progress", vda), 0);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_disk_io_time_seconds_total", vda), 19.868);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_disk_io_time_weighted_seconds_total", vda), 138.528);
  const std::string nvme = R"({device="nvme0n1"})";
  EXPECT_EQ(sink.Last("ithbat_disk_io_in_progress", nvme), 3);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_disk_io_time_weighted_seconds_total", nvme), 7.35);
  EXPECT_TRUE(sink.Last("ithbat_disk_reads_completed_total", R"({device="vda1"})"));
  EXPECT_TRUE(sink.Last("ithbat_disk_reads_completed_total", R"({device="zram0"})"));
  EXPECT_FALSE(sink.Last("ithbat_disk_reads_completed_total", R"({device="loop1"})"));
  EXPECT_FALSE(sink.Last("ithbat_disk_reads_completed_total", R"({device="ram0"})"));
  EXPECT_EQ(sink.CountSeries("ithbat_disk_reads_completed_total"), 4u);
  ExpectOnlyDescribed(*c, sink);

  // A second tick appends to the same series.
  const size_t n = sink.series_count();
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(sink.series_count(), n);
  EXPECT_EQ(sink.series()[0].samples.size(), 2u);
}

TEST(DiskCollectorTest, IncludeVirtual) {
  FakeSink sink;
  auto c = Started<DiskCollector>(DiskOptions{.procfs = Fixture("normal"), .include_virtual = true}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.Last("ithbat_disk_reads_completed_total", R"({device="loop1"})"), 52);
  EXPECT_EQ(sink.CountSeries("ithbat_disk_reads_completed_total"), 7u);
}

TEST(DiskCollectorTest, MissingRootFailsInitMissingFileIsDegraded) {
  FakeSink sink;
  auto bad = DiskCollector::Create(DiskOptions{.procfs = "/nonexistent/proc"});
  EXPECT_FALSE(bad->Init(sink));

  TempDir dir;
  auto c = Started<DiskCollector>(DiskOptions{.procfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_THAT(c->Health().degraded, HasSubstr("diskstats"));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(sink.series().empty());
}

TEST(DiskCollectorTest, MalformedFileIsReportedByName) {
  for (const char* bad : {"diskstats_bad_number", "diskstats_short"}) {
    SCOPED_TRACE(bad);
    TempDir dir;
    fs::copy_file(Fixture("malformed") / bad, dir.path() / "diskstats");
    FakeSink sink;
    auto c = Started<DiskCollector>(DiskOptions{.procfs = dir.path()}, sink);
    ASSERT_TRUE(c->Collect(kT0));
    const auto h = c->Health();
    EXPECT_EQ(h.errors, 1u);
    EXPECT_THAT(h.last_error, HasSubstr("diskstats"));
    EXPECT_THAT(h.last_error, HasSubstr("line 1"));
    EXPECT_TRUE(sink.series().empty());
  }
}

TEST(DiskCollectorTest, ThisMachinesProc) {
  ASSERT_TRUE(fs::exists("/proc/diskstats")) << "no /proc/diskstats on this Linux machine";
  FakeSink sink;
  auto c = Started<DiskCollector>(DiskOptions{}, sink);
  ASSERT_TRUE(c->Collect(NowNs()));
  EXPECT_EQ(c->Health().errors, 0u) << c->Health().last_error;
  ExpectOnlyDescribed(*c, sink);
}

TEST(DiskCollectorTest, DeviceCountIsBounded) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 10; i++)
    text += " 8 " + std::to_string(i) + " sd" + std::to_string(i) + " 1 0 0 0 0 0 0 0 0 0 0\n";
  dir.WriteFile("diskstats", text);
  FakeSink sink;
  auto c = Started<DiskCollector>(DiskOptions{.procfs = dir.path(), .max_devices = 3}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_EQ(sink.CountSeries("ithbat_disk_reads_completed_total"), 3u);
  EXPECT_EQ(c->Health().errors, 1u);  // reported once, not every tick
}

// ---- NFS / Lustre ----

TEST(NfsCollectorTest, Describe) {
  auto c = NfsCollector::Create({});
  const auto descs = c->Describe();
  EXPECT_EQ(descs.size(), 12u);
  for (const auto& d : descs) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    EXPECT_TRUE(d.name.starts_with("ithbat_nfs_") || d.name.starts_with("ithbat_lustre_")) << d.name;
  }
  EXPECT_EQ(c->name(), "nfs");
}

TEST(NfsCollectorTest, FixtureMountsOpsAndLustre) {
  FakeSink sink;
  auto c = Started<NfsCollector>(NfsOptions{.procfs = Fixture("normal")}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 0u) << c->Health().last_error;
  EXPECT_EQ(c->Health().degraded, "");

  const std::string m = R"({export="10.0.0.5:/export/datasets",mountpoint="/mnt/datasets"})";
  EXPECT_EQ(sink.Last("ithbat_nfs_read_bytes_total", m), 1073741824.0 + 4096);
  EXPECT_EQ(sink.Last("ithbat_nfs_written_bytes_total", m), 2097152.0 + 8192);
  EXPECT_EQ(sink.Last("ithbat_nfs_server_read_bytes_total", m), 1073750016);
  EXPECT_EQ(sink.Last("ithbat_nfs_server_written_bytes_total", m), 2105344);
  const std::string read = R"({export="10.0.0.5:/export/datasets",mountpoint="/mnt/datasets",op="READ"})";
  EXPECT_EQ(sink.Last("ithbat_nfs_rpc_operations_total", read), 1024);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_nfs_rpc_rtt_seconds_total", read), 51.2);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_nfs_rpc_execute_seconds_total", read), 52.4);
  EXPECT_EQ(sink.Last("ithbat_nfs_rpc_errors_total", read), 0);
  const std::string write = R"({export="10.0.0.5:/export/datasets",mountpoint="/mnt/datasets",op="WRITE"})";
  EXPECT_EQ(sink.Last("ithbat_nfs_rpc_major_timeouts_total", write), 1);
  EXPECT_EQ(sink.Last("ithbat_nfs_rpc_errors_total", write), 2);
  for (const char* op : {"COMMIT", "OPEN", "CLOSE", "GETATTR", "LOOKUP"}) {
    EXPECT_TRUE(sink.Last(
        "ithbat_nfs_rpc_operations_total",
        fmt::format(R"({{export="10.0.0.5:/export/datasets",mountpoint="/mnt/datasets",op="{}"}})", op)))
        << op;
  }
  // NULL and SEQUENCE are not in the exported list.
  EXPECT_EQ(sink.CountSeries("ithbat_nfs_rpc_operations_total"), 7u + 4u);

  // The v3 mount: escaped mount point, no errors column.
  const std::string home = R"({export="10.0.0.6:/home",mountpoint="/home/my user",op="GETATTR"})";
  EXPECT_EQ(sink.Last("ithbat_nfs_rpc_operations_total", home), 20);
  EXPECT_DOUBLE_EQ(*sink.Last("ithbat_nfs_rpc_rtt_seconds_total", home), 0.010);
  EXPECT_FALSE(sink.Last("ithbat_nfs_rpc_errors_total", home));

  const std::string fs = R"({fs="scratch-ffff8f2a3c4e5000"})";
  EXPECT_EQ(sink.Last("ithbat_lustre_read_bytes_total", fs), 2147483648.0);
  EXPECT_EQ(sink.Last("ithbat_lustre_written_bytes_total", fs), 536870912.0);
  EXPECT_EQ(sink.Last("ithbat_lustre_operations_total", R"({fs="scratch-ffff8f2a3c4e5000",op="open"})"), 300);
  EXPECT_EQ(sink.Last("ithbat_lustre_operations_total", R"({fs="scratch-ffff8f2a3c4e5000",op="close"})"),
            298);
  EXPECT_EQ(sink.Last("ithbat_lustre_operations_total", R"({fs="scratch-ffff8f2a3c4e5000",op="fsync"})"), 7);
  EXPECT_EQ(sink.Last("ithbat_lustre_operations_total", R"({fs="scratch-ffff8f2a3c4e5000",op="read"})"),
            2048);
  ExpectOnlyDescribed(*c, sink);
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_EQ(c->Health().errors, 0u);
}

TEST(NfsCollectorTest, FallsBackToPid1Mountstats) {
  TempDir dir;
  dir.WriteFile("1/mountstats",
                "device s:/x mounted on /x with fstype nfs4 statvers=1.1\n\tbytes:\t1 2 3 4 5 6 7 8\n");
  FakeSink sink;
  auto c = Started<NfsCollector>(NfsOptions{.procfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.Last("ithbat_nfs_read_bytes_total", R"({export="s:/x",mountpoint="/x"})"), 4);
  EXPECT_EQ(c->Health().degraded, "");
}

// A container given the host's /proc (--procfs /host/proc, hostPID): self is the container's
// own mount namespace, init's is the node's.
TEST(NfsCollectorTest, UnderAnotherProcRootInitsMountsAreTheNodes) {
  TempDir dir;
  dir.WriteFile("1/mountstats",
                "device s:/x mounted on /x with fstype nfs4 statvers=1.1\n\tbytes:\t1 2 3 4 5 6 7 8\n");
  dir.WriteFile("self/mountstats", "device overlay mounted on / with fstype overlay\n");
  FakeSink sink;
  auto c = Started<NfsCollector>(NfsOptions{.procfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.Last("ithbat_nfs_read_bytes_total", R"({export="s:/x",mountpoint="/x"})"), 4);
}

TEST(NfsCollectorTest, NoMountstatsIsDegradedNoNfsMountsIsFine) {
  TempDir dir;
  FakeSink sink;
  auto c = Started<NfsCollector>(NfsOptions{.procfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_THAT(c->Health().degraded, HasSubstr("mountstats"));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(sink.series().empty());

  dir.WriteFile("self/mountstats", "device proc mounted on /proc with fstype proc\n");
  ASSERT_TRUE(c->Collect(kT0 + 2));
  EXPECT_EQ(c->Health().degraded, "");
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(sink.series().empty());
}

TEST(NfsCollectorTest, MalformedMountstatsAndLustreAreReportedByName) {
  TempDir dir;
  fs::create_directories(dir.path() / "self");
  fs::copy_file(Fixture("malformed") / "mountstats_bad_op", dir.path() / "self" / "mountstats");
  dir.WriteFile("fs/lustre/llite/fs1/stats", "open many samples [regs]\n");
  dir.WriteFile("fs/lustre/llite/fs2/stats", "open 3 samples [regs]\n");
  FakeSink sink;
  auto c = Started<NfsCollector>(NfsOptions{.procfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  const auto h = c->Health();
  EXPECT_EQ(h.errors, 2u);
  EXPECT_THAT(h.last_error, HasSubstr("fs1/stats"));
  // The good Lustre fs is still collected.
  EXPECT_EQ(sink.Last("ithbat_lustre_operations_total", R"({fs="fs2",op="open"})"), 3);
  EXPECT_FALSE(sink.Last("ithbat_nfs_rpc_operations_total"));
}

// ---- InfiniBand ----

TEST(InfinibandCollectorTest, Describe) {
  auto c = InfinibandCollector::Create({});
  ExpectValidDescribe(*c, "ithbat_ib_", 14);
  EXPECT_EQ(c->name(), "infiniband");
}

TEST(InfinibandCollectorTest, FixturePortsInBytes) {
  FakeSink sink;
  auto c = Started<InfinibandCollector>(InfinibandOptions{.sysfs = Fixture("sysfs")}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 0u) << c->Health().last_error;
  EXPECT_EQ(c->Health().degraded, "");
  const std::string p = R"({device="mlx5_0",port="1"})";
  EXPECT_EQ(sink.Last("ithbat_ib_receive_bytes_total", p), 4'000'000);    // 1000000 words x 4
  EXPECT_EQ(sink.Last("ithbat_ib_transmit_bytes_total", p), 10'000'000);  // 2500000 words x 4
  EXPECT_EQ(sink.Last("ithbat_ib_receive_packets_total", p), 40000);
  EXPECT_EQ(sink.Last("ithbat_ib_transmit_packets_total", p), 90000);
  EXPECT_EQ(sink.Last("ithbat_ib_transmit_wait_total", p), 777);
  EXPECT_EQ(sink.Last("ithbat_ib_symbol_errors_total", p), 3);
  EXPECT_EQ(sink.Last("ithbat_ib_link_downed_total", p), 1);
  EXPECT_EQ(sink.Last("ithbat_ib_link_error_recovery_total", p), 2);
  EXPECT_EQ(sink.Last("ithbat_ib_receive_errors_total", p), 0);
  EXPECT_EQ(sink.Last("ithbat_ib_excessive_buffer_overrun_errors_total", p), 0);
  EXPECT_EQ(sink.Last("ithbat_ib_port_state", R"({device="mlx5_0",port="1",state="ACTIVE"})"), 4);
  EXPECT_EQ(sink.Last("ithbat_ib_port_physical_state", R"({device="mlx5_0",port="1",state="LinkUp"})"), 5);
  EXPECT_EQ(sink.Last("ithbat_ib_port_rate_bytes_per_second", p), 25e9);  // 200 Gb/s
  EXPECT_EQ(sink.Last("ithbat_ib_hw_counters_total", R"({counter="out_of_buffer",device="mlx5_0",port="1"})"),
            12);
  EXPECT_EQ(sink.Last("ithbat_ib_hw_counters_total",
                      R"({counter="local_ack_timeout_err",device="mlx5_0",port="1"})"),
            5);
  EXPECT_FALSE(sink.Last("ithbat_ib_hw_counters_total", R"({counter="lifespan",device="mlx5_0",port="1"})"));
  EXPECT_EQ(sink.CountSeries("ithbat_ib_hw_counters_total"), 3u);

  // The down port with only the data counters: no errors for the missing ones.
  const std::string q = R"({device="mlx5_1",port="1"})";
  EXPECT_EQ(sink.Last("ithbat_ib_receive_bytes_total", q), 0);
  EXPECT_EQ(sink.Last("ithbat_ib_port_state", R"({device="mlx5_1",port="1",state="DOWN"})"), 1);
  EXPECT_EQ(sink.Last("ithbat_ib_port_physical_state", R"({device="mlx5_1",port="1",state="Disabled"})"), 3);
  EXPECT_EQ(sink.Last("ithbat_ib_port_rate_bytes_per_second", q), 12.5e9);
  EXPECT_FALSE(sink.Last("ithbat_ib_symbol_errors_total", q));
  ExpectOnlyDescribed(*c, sink);
}

TEST(InfinibandCollectorTest, NoDevicesIsDegradedQuietly) {
  TempDir dir;
  FakeSink sink;
  auto c = Started<InfinibandCollector>(InfinibandOptions{.sysfs = dir.path()}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_THAT(c->Health().degraded, HasSubstr("class/infiniband"));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(c->Health().up);
  EXPECT_TRUE(sink.series().empty());
  EXPECT_FALSE(InfinibandCollector::Create(InfinibandOptions{.sysfs = "/nonexistent/sys"})->Init(sink));
}

TEST(InfinibandCollectorTest, ThisMachinesSysfs) {
  FakeSink sink;
  auto c = Started<InfinibandCollector>(InfinibandOptions{}, sink);
  ASSERT_TRUE(c->Collect(NowNs()));
  EXPECT_TRUE(c->Health().up);
  ExpectOnlyDescribed(*c, sink);
}

TEST(InfinibandCollectorTest, MalformedAttributesAreReportedByName) {
  struct Case {
    const char* fixture;
    const char* target;
  };
  for (const Case& k : {Case{"ib_state_bad", "state"}, Case{"ib_rate_bad", "rate"},
                        Case{"ib_counter_bad", "counters/symbol_error"},
                        Case{"ib_counter_bad", "hw_counters/out_of_buffer"}}) {
    SCOPED_TRACE(k.target);
    TempDir dir;
    fs::copy(Fixture("sysfs"), dir.path(), fs::copy_options::recursive);
    const fs::path port = dir.path() / "class/infiniband/mlx5_0/ports/1";
    fs::copy_file(Fixture("malformed") / k.fixture, port / k.target, fs::copy_options::overwrite_existing);
    FakeSink sink;
    auto c = Started<InfinibandCollector>(InfinibandOptions{.sysfs = dir.path()}, sink);
    ASSERT_TRUE(c->Collect(kT0));
    const auto h = c->Health();
    EXPECT_EQ(h.errors, 1u);
    EXPECT_THAT(h.last_error, HasSubstr(k.target));
    EXPECT_TRUE(h.up);
    // The rest of the port is still there.
    EXPECT_EQ(sink.Last("ithbat_ib_receive_bytes_total", R"({device="mlx5_0",port="1"})"), 4'000'000);
  }
}

TEST(InfinibandCollectorTest, HwCountersAreBounded) {
  TempDir dir;
  const std::string port = "class/infiniband/mlx5_0/ports/1/";
  dir.WriteFile(port + "state", "4: ACTIVE\n");
  for (int i = 0; i < 20; i++) dir.WriteFile(port + "hw_counters/c" + std::to_string(10 + i), "1\n");
  FakeSink sink;
  auto c = Started<InfinibandCollector>(InfinibandOptions{.sysfs = dir.path(), .max_hw_counters_per_port = 5},
                                        sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.CountSeries("ithbat_ib_hw_counters_total"), 5u);
  EXPECT_EQ(c->Health().errors, 0u);
}

}  // namespace
}  // namespace ithbat::collect
