// The node parsers on strings with exact values, malformed input, and this machine's real
// /proc/diskstats.
#include "collect/node/node_parse.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

using ::testing::HasSubstr;

TEST(ParseDiskStatsTest, AllThreeFieldCounts) {
  auto d = ParseDiskStats(
      " 254       0 vda 29921 5680 2590522 9043 103756 16370 27428104 123275 0 19868 138528 20756 25 "
      "18898480 5451 "
      "21558 757\n"
      " 259       0 nvme0n1 1200 10 96000 350 4000 20 2048000 7000 3 5500 7350\n"
      "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n");
  ASSERT_TRUE(d) << d.error().ToString();
  ASSERT_EQ(d->size(), 3u);
  const DiskStats& vda = (*d)[0];
  EXPECT_EQ(vda.device, "vda");
  EXPECT_EQ(vda.major, 254u);
  EXPECT_EQ(vda.minor, 0u);
  EXPECT_EQ(vda.reads_completed, 29921u);
  EXPECT_EQ(vda.reads_merged, 5680u);
  EXPECT_EQ(vda.sectors_read, 2590522u);
  EXPECT_EQ(vda.read_ms, 9043u);
  EXPECT_EQ(vda.writes_completed, 103756u);
  EXPECT_EQ(vda.writes_merged, 16370u);
  EXPECT_EQ(vda.sectors_written, 27428104u);
  EXPECT_EQ(vda.write_ms, 123275u);
  EXPECT_EQ(vda.in_flight, 0u);
  EXPECT_EQ(vda.io_ms, 19868u);
  EXPECT_EQ(vda.weighted_io_ms, 138528u);
  const DiskStats& nvme = (*d)[1];
  EXPECT_EQ(nvme.device, "nvme0n1");
  EXPECT_EQ(nvme.in_flight, 3u);
  EXPECT_EQ(nvme.weighted_io_ms, 7350u);
  EXPECT_EQ((*d)[2].weighted_io_ms, 11u);
}

TEST(ParseDiskStatsTest, MalformedLinesAreErrorsNamingTheLine) {
  auto bad = ParseDiskStats(" 8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n 8 1 sda1 1 2 x 4 5 6 7 8 9 10 11\n");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kParse);
  EXPECT_THAT(bad.error().message, HasSubstr("line 2"));
  auto short_line = ParseDiskStats(" 8 0 sda 1 2\n");
  ASSERT_FALSE(short_line);
  EXPECT_THAT(short_line.error().message, HasSubstr("5 fields"));
  EXPECT_FALSE(ParseDiskStats(" 8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21\n"));
  EXPECT_FALSE(ParseDiskStats("x 0 sda 1 2 3 4 5 6 7 8 9 10 11\n"));
  EXPECT_FALSE(ParseDiskStats(std::string("\x01\xff garbage\n")));
  auto too_many = ParseDiskStats(" 8 0 a 1 2 3 4 5 6 7 8 9 10 11\n 8 1 b 1 2 3 4 5 6 7 8 9 10 11\n", 1);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code, ErrorCode::kResourceExhausted);
  auto empty = ParseDiskStats("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(ParseDiskStatsTest, VirtualDevices) {
  EXPECT_TRUE(IsVirtualDisk("loop0"));
  EXPECT_TRUE(IsVirtualDisk("ram15"));
  EXPECT_FALSE(IsVirtualDisk("vda"));
  EXPECT_FALSE(IsVirtualDisk("nvme0n1"));
  EXPECT_FALSE(IsVirtualDisk("zram0"));  // compressed swap is real I/O pressure
}

TEST(ParseDiskStatsTest, ThisMachinesRealDiskstats) {
  auto text = ReadFileBounded("/proc/diskstats", 1 << 20);
  // Every Linux kernel the agent supports has /proc/diskstats: its absence is a failure.
  ASSERT_TRUE(text) << "no /proc/diskstats here: " << text.error().ToString();
  auto d = ParseDiskStats(*text);
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_FALSE(d->empty());
}

constexpr std::string_view kMountStats =
    "device proc mounted on /proc with fstype proc\n"
    "device 10.0.0.5:/export mounted on /mnt/a\\040b with fstype nfs4 statvers=1.1\n"
    "\topts:\trw,vers=4.2\n"
    "\tage:\t100\n"
    "\tbytes:\t100 200 30 40 130 240 1 2\n"
    "\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n"
    "\txprt:\ttcp 0 0 1 0 30 9000 9000 0 9500 0 2 100 50\n"
    "\tper-op statistics\n"
    "\t        NULL: 1 1 0 44 24 0 0 0 0\n"
    "\t        READ: 1024 1024 0 184320 1073872896 100 51200 52400 0\n"
    "\t       WRITE: 32 33 1 2109440 5120 4 900 950 2\n"
    "\n"
    "device srv:/home mounted on /home with fstype nfs statvers=1.1\n"
    "\tbytes:\t1 2 3 4 5 6 7 8\n"
    "\tper-op statistics\n"
    "\t     GETATTR: 20 20 0 2400 2240 0 10 12\n"
    "device tmpfs mounted on /dev/shm with fstype tmpfs\n";

TEST(ParseMountStatsTest, NfsMountsWithBytesAndOps) {
  auto m = ParseMountStats(kMountStats);
  ASSERT_TRUE(m) << m.error().ToString();
  ASSERT_EQ(m->size(), 2u);
  const NfsMount& a = (*m)[0];
  EXPECT_EQ(a.export_name, "10.0.0.5:/export");
  EXPECT_EQ(a.mountpoint, "/mnt/a b");
  EXPECT_EQ(a.fstype, "nfs4");
  EXPECT_TRUE(a.has_bytes);
  EXPECT_EQ(a.normal_read_bytes, 100u);
  EXPECT_EQ(a.normal_write_bytes, 200u);
  EXPECT_EQ(a.direct_read_bytes, 30u);
  EXPECT_EQ(a.direct_write_bytes, 40u);
  EXPECT_EQ(a.server_read_bytes, 130u);
  EXPECT_EQ(a.server_write_bytes, 240u);
  ASSERT_EQ(a.ops.size(), 3u);
  const NfsOpStats& read = a.ops[1];
  EXPECT_EQ(read.op, "READ");
  EXPECT_EQ(read.ops, 1024u);
  EXPECT_EQ(read.transmissions, 1024u);
  EXPECT_EQ(read.major_timeouts, 0u);
  EXPECT_EQ(read.bytes_sent, 184320u);
  EXPECT_EQ(read.bytes_received, 1073872896u);
  EXPECT_EQ(read.queue_ms, 100u);
  EXPECT_EQ(read.rtt_ms, 51200u);
  EXPECT_EQ(read.execute_ms, 52400u);
  EXPECT_EQ(read.errors, 0u);
  EXPECT_EQ(a.ops[2].errors, 2u);
  EXPECT_EQ(a.ops[2].major_timeouts, 1u);
  const NfsMount& b = (*m)[1];
  EXPECT_EQ(b.fstype, "nfs");
  ASSERT_EQ(b.ops.size(), 1u);
  EXPECT_EQ(b.ops[0].op, "GETATTR");
  EXPECT_EQ(b.ops[0].errors, std::nullopt);  // 8 columns before kernel 5.3
  EXPECT_EQ(b.ops[0].execute_ms, 12u);
}

TEST(ParseMountStatsTest, Malformed) {
  auto bad_op = ParseMountStats(
      "device a:/b mounted on /c with fstype nfs4 statvers=1.1\n\tper-op statistics\n\tREAD: 1 2 x 4 5 6 7 "
      "8\n");
  ASSERT_FALSE(bad_op);
  EXPECT_EQ(bad_op.error().code, ErrorCode::kParse);
  EXPECT_THAT(bad_op.error().message, HasSubstr("line 3"));
  EXPECT_FALSE(
      ParseMountStats("device a:/b mounted on /c with fstype nfs4\n\tper-op statistics\n\tREAD: 1 2 3\n"));
  EXPECT_FALSE(ParseMountStats("device a:/b mounted on /c with fstype nfs4\n\tbytes:\t1 2\n"));
  EXPECT_FALSE(ParseMountStats("device a:/b sitting on /c\n"));
  EXPECT_FALSE(
      ParseMountStats("device a:/b mounted on /c with fstype nfs\n\tper-op statistics\n\tread 1 2\n"));
  // Garbage in a non-NFS block is not looked at.
  EXPECT_TRUE(ParseMountStats("device proc mounted on /proc with fstype proc\n\t\x01\x02 junk\n"));
  auto none = ParseMountStats("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto bounded = ParseMountStats(
      "device a:/b mounted on /c with fstype nfs\ndevice a:/d mounted on /e with fstype nfs\n", 1);
  ASSERT_FALSE(bounded);
  EXPECT_EQ(bounded.error().code, ErrorCode::kResourceExhausted);
}

TEST(ParseLustreStatsTest, BytesAndCalls) {
  auto s = ParseLustreStats(
      "snapshot_time             1700000000.123456 secs.usecs\n"
      "read_bytes                2048 samples [bytes] 4096 1048576 2147483648\n"
      "write_bytes               512 samples [bytes] 4096 1048576 536870912 123456789\n"
      "open                      300 samples [regs]\n"
      "close                     298 samples [usecs] 1 100 5000\n"
      "fsync                     7 samples [regs]\n"
      "getattr                   1000 samples [regs]\n");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->reads, 2048u);
  EXPECT_EQ(s->read_bytes, 2147483648u);
  EXPECT_EQ(s->writes, 512u);
  EXPECT_EQ(s->write_bytes, 536870912u);
  EXPECT_EQ(s->opens, 300u);
  EXPECT_EQ(s->closes, 298u);
  EXPECT_EQ(s->fsyncs, 7u);
  EXPECT_FALSE(ParseLustreStats("open lots samples [regs]\n"));
  EXPECT_FALSE(ParseLustreStats("open 3 things\n"));
  EXPECT_FALSE(ParseLustreStats("read_bytes 1 samples [bytes] 1 2 three\n"));
  auto empty = ParseLustreStats("snapshot_time 1.0 secs.usecs\n");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->read_bytes, std::nullopt);
}

TEST(ParseIbTest, StateRateCounter) {
  auto st = ParseIbEnum("4: ACTIVE\n");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->value, 4u);
  EXPECT_EQ(st->label, "ACTIVE");
  auto ps = ParseIbEnum("5: LinkUp\n");
  ASSERT_TRUE(ps);
  EXPECT_EQ(ps->value, 5u);
  EXPECT_EQ(ps->label, "LinkUp");
  EXPECT_FALSE(ParseIbEnum("ACTIVE\n"));
  EXPECT_FALSE(ParseIbEnum("x: ACTIVE\n"));
  EXPECT_FALSE(ParseIbEnum("4:\n"));

  EXPECT_EQ(ParseIbRateGbps("200 Gb/sec (4X HDR)\n").value(), 200.0);
  EXPECT_EQ(ParseIbRateGbps("2.5 Gb/sec (1X SDR)\n").value(), 2.5);
  EXPECT_EQ(ParseIbRateGbps("400 Gb/sec (4X NDR)").value(), 400.0);
  EXPECT_FALSE(ParseIbRateGbps("fast\n"));
  EXPECT_FALSE(ParseIbRateGbps("100 Mb/sec\n"));
  EXPECT_FALSE(ParseIbRateGbps("-1 Gb/sec\n"));

  EXPECT_EQ(ParseSysfsCounter("18446744073709551615\n").value(), UINT64_MAX);
  EXPECT_EQ(ParseSysfsCounter("0\n").value(), 0u);
  EXPECT_FALSE(ParseSysfsCounter("12abc\n"));
  EXPECT_FALSE(ParseSysfsCounter("\n"));
  EXPECT_FALSE(ParseSysfsCounter("-1\n"));
}

}  // namespace
}  // namespace ithbat::collect
