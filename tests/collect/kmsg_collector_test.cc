// The kernel-log collector following a file (the fixture in /dev/kmsg format, and files the
// tests write, truncate and rotate), writing to a FakeSink that keeps series and events.
#include "collect/kmsg/kmsg_collector.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

std::optional<std::string> Attr(const Event& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

fs::path Fixture() { return SourceDir() / "tests/collect/fixtures/kmsg/kmsg_records.txt"; }

constexpr TimeNs kT0 = 1'800'000'000 * kNsPerSec;

std::unique_ptr<KmsgCollector> Started(KmsgOptions options, FakeSink& sink) {
  auto c = KmsgCollector::Create(std::move(options));
  EXPECT_TRUE(c->Init(sink));
  EXPECT_TRUE(c->Start());
  return c;
}

void Append(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::app | std::ios::binary);
  out << text;
}

TEST(KmsgCollectorTest, DescribeFollowsTheNamingRules) {
  auto c = KmsgCollector::Create({});
  const auto descs = c->Describe();
  ASSERT_EQ(descs.size(), 2u);
  for (const auto& d : descs) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    EXPECT_TRUE(d.name.starts_with("ithbat_kmsg_")) << d.name;
  }
  EXPECT_EQ(descs[0].name, "ithbat_kmsg_xid_events_total");
  EXPECT_EQ(descs[0].label_names, (std::vector<std::string>{"xid", "owner"}));
  EXPECT_EQ(descs[1].name, "ithbat_kmsg_records_lost_total");
  EXPECT_EQ(c->name(), "kmsg");
}

TEST(KmsgCollectorTest, ReplaysTheFixtureIntoEventsAndCounters) {
  FakeSink sink;
  auto c = Started(
      KmsgOptions{.path = Fixture(),
                  .replay_from_start = true,
                  .resolver = [](std::string_view pci) { return pci == "00000000:9b:00.0" ? 4 : -1; }},
      sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_EQ(c->Health().degraded, "");
  ASSERT_EQ(sink.events().size(), 6u);
  EXPECT_EQ(c->xid_events(), 6u);

  const Event e149 = sink.events()[0];
  EXPECT_EQ(e149.kind, EventKind::kXid);
  EXPECT_EQ(e149.source, "kmsg");
  EXPECT_EQ(e149.value, 149);
  EXPECT_EQ(e149.name, "hardware");
  EXPECT_EQ(e149.time, kT0);  // a file's lines are dated when read
  EXPECT_THAT(e149.text, ::testing::StartsWith("NETIR_LINK_EVT  Fatal   XC0 i0 Link 01"));
  EXPECT_EQ(Attr(e149, "pci"), "00000009:01:00.0");
  EXPECT_EQ(Attr(e149, "mnemonic"), "NVLINK_NETIR_ERROR");
  EXPECT_EQ(e149.identity.gpu_index, -1);  // the resolver does not know this GPU

  EXPECT_EQ(sink.events()[1].value, 154);
  EXPECT_EQ(sink.events()[1].name, "unknown");

  const Event e94 = sink.events()[2];
  EXPECT_EQ(e94.value, 94);
  EXPECT_EQ(e94.identity.gpu_index, 4);
  EXPECT_EQ(e94.identity.pid, 1234);
  EXPECT_EQ(Attr(e94, "pid"), "1234");
  EXPECT_EQ(Attr(e94, "process"), "python3");
  EXPECT_EQ(e94.text, "Contained ECC error");

  const Event e13 = sink.events()[3];
  EXPECT_EQ(e13.name, "job");
  EXPECT_EQ(Attr(e13, "pid"), std::nullopt);
  EXPECT_EQ(Attr(e13, "process"), std::nullopt);

  const Event e79 = sink.events()[4];
  EXPECT_EQ(e79.value, 79);
  EXPECT_EQ(Attr(e79, "fallen_off_bus"), "1");
  EXPECT_EQ(e79.text, "GPU has fallen off the bus.");

  const Event sx = sink.events()[5];
  EXPECT_EQ(sx.value, 20034);
  EXPECT_EQ(sx.name, "unknown");
  EXPECT_EQ(Attr(sx, "sxid"), "1");
  EXPECT_EQ(Attr(sx, "mnemonic"), std::nullopt);

  const char* m = "ithbat_kmsg_xid_events_total";
  EXPECT_EQ(sink.Last(m, R"({owner="hardware",xid="149"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="unknown",xid="154"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="hardware",xid="94"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="job",xid="13"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="hardware",xid="79"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="unknown",xid="sxid_20034"})"), 1);
  EXPECT_EQ(sink.Last("ithbat_kmsg_records_lost_total"), 0);

  // Nothing new: no events, counters appended again at the new tick with the same values.
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(sink.events().size(), 6u);
  EXPECT_EQ(sink.Last(m, R"({owner="hardware",xid="149"})"), 1);
}

TEST(KmsgCollectorTest, FollowsAppendsFromTheEndNotTheHistory) {
  TempDir dir;
  const fs::path log = dir.path() / "kern.log";
  Append(log, "[1.0] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, old history\n");
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.events().size(), 0u);  // the history before Start is not replayed

  // A line written in two pieces is handled once it is complete.
  Append(log, "[2.0] NVRM: Xid (PCI:0000:01:00): 31, pid=2, na");
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_EQ(sink.events().size(), 0u);
  Append(log, "me=b, MMU Fault\n[3.0] not an xid\n");
  ASSERT_TRUE(c->Collect(kT0 + 2));
  ASSERT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(sink.events()[0].value, 31);
  EXPECT_EQ(Attr(sink.events()[0], "process"), "b");
  EXPECT_EQ(sink.events()[0].text, "MMU Fault");
  EXPECT_EQ(sink.events()[0].time, kT0 + 2);
}

TEST(KmsgCollectorTest, TruncationAndRotationReadTheNewContentFromItsStart) {
  TempDir dir;
  const fs::path log = dir.path() / "kern.log";
  Append(log, std::string(4096, 'x') + "\n");
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log}, sink);
  ASSERT_TRUE(c->Collect(kT0));

  // Truncated (logrotate copytruncate): shorter than what was read, so read from the start.
  fs::resize_file(log, 0);
  Append(log, "NVRM: Xid (PCI:0000:01:00): 48, DBE\n");
  ASSERT_TRUE(c->Collect(kT0 + 1));
  ASSERT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(sink.events()[0].value, 48);

  // Rotated: a new file under the same name.
  fs::rename(log, dir.path() / "kern.log.1");
  Append(log, "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n");
  ASSERT_TRUE(c->Collect(kT0 + 2));
  ASSERT_EQ(sink.events().size(), 2u);
  EXPECT_EQ(sink.events()[1].value, 79);
  EXPECT_EQ(sink.Last("ithbat_kmsg_xid_events_total", R"({owner="hardware",xid="48"})"), 1);
  EXPECT_EQ(sink.Last("ithbat_kmsg_xid_events_total", R"({owner="hardware",xid="79"})"), 1);
}

TEST(KmsgCollectorTest, MissingSourceIsDegradedUntilItAppears) {
  TempDir dir;
  const fs::path log = dir.path() / "later.log";
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_THAT(c->Health().degraded, HasSubstr("later.log"));
  EXPECT_EQ(c->Health().errors, 0u);
  EXPECT_TRUE(c->Health().up);
  ASSERT_TRUE(c->Collect(kT0 + 1));
  EXPECT_EQ(c->Health().errors, 0u);  // no error storm

  // A file that appears after Start is all new: read from its start.
  Append(log, "NVRM: Xid (PCI:0000:01:00): 94, Contained ECC error\n");
  ASSERT_TRUE(c->Collect(kT0 + 2));
  EXPECT_EQ(c->Health().degraded, "");
  ASSERT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(sink.events()[0].value, 94);
}

TEST(KmsgCollectorTest, OverlongLinesAreCutAndTheRestDropped) {
  TempDir dir;
  const fs::path log = dir.path() / "kern.log";
  Append(log, "");
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log, .max_line_bytes = 100}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  Append(log,
         "NVRM: Xid (PCI:0000:01:00): 13, " + std::string(500, 'a') +
             " NVRM: Xid (PCI:0000:01:00): 79, hidden in the tail\nNVRM: Xid (PCI:0000:01:00): 31, next\n");
  ASSERT_TRUE(c->Collect(kT0 + 1));
  ASSERT_EQ(sink.events().size(), 2u);
  EXPECT_EQ(sink.events()[0].value, 13);
  EXPECT_EQ(sink.events()[0].text.size(), 100u - std::string_view("NVRM: Xid (PCI:0000:01:00): 13, ").size());
  EXPECT_EQ(sink.events()[1].value, 31);
  EXPECT_EQ(c->lines_cut(), 1u);
}

TEST(KmsgCollectorTest, ReadsAreBoundedPerCollect) {
  TempDir dir;
  const fs::path log = dir.path() / "kern.log";
  std::string lines;
  for (int i = 0; i < 100; i++) lines += "NVRM: Xid (PCI:0000:01:00): 13, line\n";  // 37 bytes each
  Append(log, lines);
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log, .replay_from_start = true, .max_bytes_per_collect = 370}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.events().size(), 10u);
  for (int i = 1; i < 10; i++) ASSERT_TRUE(c->Collect(kT0 + i));
  EXPECT_EQ(sink.events().size(), 100u);
  EXPECT_EQ(sink.Last("ithbat_kmsg_xid_events_total", R"({owner="job",xid="13"})"), 100);
}

TEST(KmsgCollectorTest, XidSeriesAreBounded) {
  TempDir dir;
  const fs::path log = dir.path() / "kern.log";
  Append(log,
         "NVRM: Xid (PCI:0000:01:00): 13, a\nNVRM: Xid (PCI:0000:01:00): 31, b\n"
         "NVRM: Xid (PCI:0000:01:00): 43, c\nNVRM: Xid (PCI:0000:01:00): 500, d\n");
  FakeSink sink;
  auto c = Started(KmsgOptions{.path = log, .replay_from_start = true, .max_xid_series = 2}, sink);
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.events().size(), 4u);
  const char* m = "ithbat_kmsg_xid_events_total";
  EXPECT_EQ(sink.Last(m, R"({owner="job",xid="13"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="job",xid="31"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="job",xid="other"})"), 1);
  EXPECT_EQ(sink.Last(m, R"({owner="unknown",xid="other"})"), 1);
}

TEST(KmsgCollectorTest, LostRecordsFromSequenceGapsAndEpipe) {
  EXPECT_EQ(KmsgRecordsLost(std::nullopt, 100, false), 0u);  // first record after open
  EXPECT_EQ(KmsgRecordsLost(99, 100, false), 0u);
  EXPECT_EQ(KmsgRecordsLost(90, 100, false), 9u);
  EXPECT_EQ(KmsgRecordsLost(90, 100, true), 9u);  // EPIPE and a gap: the gap is the count
  EXPECT_EQ(KmsgRecordsLost(99, 100, true), 1u);  // EPIPE without a visible gap: at least one
  EXPECT_EQ(KmsgRecordsLost(std::nullopt, std::nullopt, true), 1u);
  EXPECT_EQ(KmsgRecordsLost(100, 5, false), 0u);  // sequence went back (new boot in a capture)
}

// The real /dev/kmsg: readable (root, or dmesg_restrict=0) or degraded; never an error, and
// without replay nothing from the boot's history comes back as an event.
TEST(KmsgCollectorTest, RealDevKmsgIsReadOrDegraded) {
  FakeSink sink;
  auto c = Started(KmsgOptions{}, sink);
  ASSERT_TRUE(c->Collect(NowNs()));
  EXPECT_TRUE(c->Health().up);
  EXPECT_EQ(c->Health().errors, 0u);
  if (!c->Health().degraded.empty()) {
    EXPECT_THAT(c->Health().degraded, HasSubstr("/dev/kmsg"));
  }
  EXPECT_EQ(sink.Last("ithbat_kmsg_records_lost_total"), 0);
}

}  // namespace
}  // namespace ithbat::collect
