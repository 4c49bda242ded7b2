// The Xid line parser on hand-written strings and, as a conformance test, on the real kernel
// log excerpts in ../shared/data/xid. The expectations below were written by reading those
// lines, not by running the parser.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/kmsg/xid_parse.h"
#include "testutil/testutil.h"

namespace ithbat::collect {
namespace {

namespace fs = std::filesystem;

TEST(NormalizePciIdTest, AllFormsBecomeTheEightDigitDomainForm) {
  EXPECT_EQ(NormalizePciId("PCI:0000:3b:00"), "00000000:3b:00.0");
  EXPECT_EQ(NormalizePciId("0000:3b:00"), "00000000:3b:00.0");
  EXPECT_EQ(NormalizePciId("0009:01:00"), "00000009:01:00.0");
  EXPECT_EQ(NormalizePciId("0000:8a:00.0"), "00000000:8a:00.0");
  EXPECT_EQ(NormalizePciId("00000000:3B:00.0"), "00000000:3b:00.0");  // NVML busId
  EXPECT_EQ(NormalizePciId("0000:10:1c"), "00000000:10:1c.0");
  EXPECT_EQ(NormalizePciId("0000:01:00.1"), "00000000:01:00.1");
  EXPECT_EQ(NormalizePciId("invalid"), std::nullopt);
  EXPECT_EQ(NormalizePciId(""), std::nullopt);
  EXPECT_EQ(NormalizePciId("0000:3b"), std::nullopt);
  EXPECT_EQ(NormalizePciId("0000:3bb:00"), std::nullopt);
  EXPECT_EQ(NormalizePciId("000000000:3b:00"), std::nullopt);  // 9 domain digits
  EXPECT_EQ(NormalizePciId("0000:3b:20"), std::nullopt);       // device > 0x1f
  EXPECT_EQ(NormalizePciId("0000:3b:00.8"), std::nullopt);     // function > 7
  EXPECT_EQ(NormalizePciId("0000:zz:00"), std::nullopt);
}

TEST(ParseKernelLogLineTest, DmesgLineWithPidAndName) {
  auto r = ParseKernelLogLine(
      "[12345.678] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, 79u);
  EXPECT_FALSE(r->sxid);
  EXPECT_TRUE(r->fallen_off_bus);
  EXPECT_FALSE(r->legacy);
  EXPECT_EQ(r->pci, "00000000:3b:00.0");
  EXPECT_EQ(r->pid, 4242);
  EXPECT_EQ(r->process, "python");
  EXPECT_EQ(r->message, "GPU has fallen off the bus.");
  EXPECT_EQ(r->kernel_time_us, 12'345'678'000u);
  EXPECT_EQ(r->kmsg_seq, std::nullopt);
}

TEST(ParseKernelLogLineTest, DevKmsgRecord) {
  auto r = ParseKernelLogLine(
      "4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=trainer, DBE (double bit error) ECC "
      "error "
      "detected\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, 48u);
  EXPECT_EQ(r->kmsg_seq, 1234u);
  EXPECT_EQ(r->kernel_time_us, 5'678'901u);
  EXPECT_EQ(r->pid, 77);
  EXPECT_EQ(r->process, "trainer");
  EXPECT_EQ(r->message, "DBE (double bit error) ECC error detected");  // continuation lines dropped
  EXPECT_FALSE(r->fallen_off_bus);
  // Continuation fields (with flags "c" and a longer flag column) are accepted too.
  auto c = ParseKernelLogLine("6,99,1,c,caller=T12;NVRM: Xid (PCI:0000:01:00): 31, Ch 00000001");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->code, 31u);
  EXPECT_EQ(c->kmsg_seq, 99u);
}

TEST(ParseKernelLogLineTest, SXidFromNvswitch) {
  auto r = ParseKernelLogLine(
      "[ 1234.000001] nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 46 LTSSM Fault Up");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->sxid);
  EXPECT_EQ(r->code, 20034u);
  EXPECT_EQ(r->pci, "00000000:c6:00.0");
  EXPECT_EQ(r->message, "Fatal, Link 46 LTSSM Fault Up");
  EXPECT_EQ(OwnerOf(*r), XidOwner::kUnknown);
}

TEST(ParseKernelLogLineTest, NotAnXid) {
  EXPECT_FALSE(ParseKernelLogLine(""));
  EXPECT_FALSE(ParseKernelLogLine("NVRM: Xid error: xyz, invalid data"));
  EXPECT_FALSE(ParseKernelLogLine("NVRM: Xid (invalid): some error"));  // no code
  EXPECT_FALSE(ParseKernelLogLine("NVRM: Xid (PCI:0000:01:00): , no code"));
  EXPECT_FALSE(ParseKernelLogLine("NVRM: Xid (PCI:0000:01:00): 99999999999999999999, too big"));
  EXPECT_FALSE(ParseKernelLogLine("[   1.0] usb 1-1: new high-speed USB device"));
  EXPECT_FALSE(ParseKernelLogLine("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d"));
  EXPECT_FALSE(ParseKernelLogLine("myXid (PCI:0000:01:00): 79, glued to a word"));
  EXPECT_FALSE(ParseKernelLogLine("NVRM: GPU at"));
  EXPECT_FALSE(ParseKernelLogLine("Xid ("));
  EXPECT_FALSE(ParseKernelLogLine("1,2,3;"));
  // Binary garbage never crashes and is not an Xid.
  std::string garbage;
  for (int i = 0; i < 512; i++) garbage.push_back(static_cast<char>((i * 37) & 0xff));
  EXPECT_FALSE(ParseKernelLogLine(garbage));
  // Every prefix of a real line is either an Xid or not; none crashes.
  const std::string line =
      "6,1,2,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen";
  for (size_t i = 0; i <= line.size(); i++) (void)ParseKernelLogLine(std::string_view(line).substr(0, i));
}

TEST(ParseKernelLogLineTest, LegacyFallenOffTheBusForms) {
  auto a = ParseKernelLogLine("[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->code, 79u);
  EXPECT_TRUE(a->legacy);
  EXPECT_EQ(a->pci, "00000000:01:00.0");
  EXPECT_EQ(a->message, "has fallen off the bus.");
  auto b = ParseKernelLogLine("NVRM: GPU at PCI:0000:02:00: GPU has fallen off the bus.");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->legacy);
  EXPECT_TRUE(b->fallen_off_bus);
  EXPECT_EQ(b->pci, "00000000:02:00.0");
  EXPECT_EQ(b->message, "GPU has fallen off the bus.");
}

TEST(ParseKernelLogLineTest, UnknownPidAndNewCodes) {
  auto r =
      ParseKernelLogLine("NVRM: Xid (PCI:0000:01:00): 185, pid='<unknown>', name=<unknown>, Sparing event");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, 185u);
  EXPECT_EQ(r->pid, -1);
  EXPECT_EQ(r->process, "");
  EXPECT_EQ(r->message, "Sparing event");
  EXPECT_EQ(LookupXid(185), nullptr);  // newer than the table: kept, owner unknown
  EXPECT_EQ(OwnerOf(*r), XidOwner::kUnknown);
}

TEST(XidTableTest, OwnersOfWellKnownCodes) {
  EXPECT_EQ(LookupXid(13)->owner, XidOwner::kJob);
  EXPECT_EQ(LookupXid(31)->owner, XidOwner::kJob);
  EXPECT_EQ(LookupXid(43)->owner, XidOwner::kJob);
  EXPECT_EQ(LookupXid(48)->owner, XidOwner::kHardware);
  EXPECT_EQ(LookupXid(79)->owner, XidOwner::kHardware);
  EXPECT_EQ(LookupXid(94)->owner, XidOwner::kHardware);
  EXPECT_EQ(LookupXid(119)->owner, XidOwner::kDriver);
  EXPECT_EQ(LookupXid(154)->owner, XidOwner::kUnknown);
  EXPECT_EQ(std::string(LookupXid(79)->mnemonic), "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
  EXPECT_EQ(LookupXid(0), nullptr);
  EXPECT_EQ(LookupXid(1), nullptr);
  EXPECT_EQ(XidOwnerName(XidOwner::kHardware), "hardware");
  EXPECT_EQ(XidOwnerName(XidOwner::kJob), "job");
  EXPECT_EQ(XidOwnerName(XidOwner::kDriver), "driver");
  EXPECT_EQ(XidOwnerName(XidOwner::kUnknown), "unknown");
}

// docs/xid.md documents every row of the table (it is the table people read).
TEST(XidTableTest, DocumentedInDocsXidMd) {
  std::ifstream in(testing::SourceDir() / "docs" / "xid.md");
  ASSERT_TRUE(in) << "docs/xid.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const XidInfo& info : XidTable()) {
    const std::string row = "| " + std::to_string(info.code) + " | " + std::string(info.mnemonic) + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/xid.md lacks the row for Xid " << info.code;
    const std::string owner = "| " + std::string(XidOwnerName(info.owner)) + " |";
    const size_t at = doc.find(row);
    if (at != std::string::npos) {
      const std::string line = doc.substr(at, doc.find('\n', at) - at);
      EXPECT_NE(line.find(owner), std::string::npos)
          << "docs/xid.md owner of Xid " << info.code << ": " << line;
    }
  }
}

// ---- Conformance: ../shared/data/xid ----

struct Expect {
  uint32_t code;
  std::string pci;
  int32_t pid = -1;
  std::string process;
  bool fallen_off_bus = false;
  bool legacy = false;
  std::optional<uint64_t> time_us = std::nullopt;
  std::string message_prefix = "";
};

// Data lines of a shared file: everything not starting with '#' (headers and the annotation
// lines some files interleave).
std::vector<std::string> DataLines(const std::string& name) {
  auto dir = testing::SharedDataDir();
  if (!dir) {
    ADD_FAILURE() << "../shared/data is absent (set ITHBAT_SHARED_DIR or check out shared/ next to the "
                     "source tree); the Xid conformance tests need "
                  << name;
    return {};
  }
  std::ifstream in(*dir / "xid" / name);
  if (!in) {
    ADD_FAILURE() << "cannot open " << (*dir / "xid" / name).string();
    return {};
  }
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("#")) out.push_back(line);
  }
  return out;
}

// Parses every data line and checks that exactly the expected ones are Xids, in order.
void CheckFile(const std::string& name, const std::vector<Expect>& expects, size_t data_lines) {
  SCOPED_TRACE(name);
  const auto lines = DataLines(name);
  ASSERT_EQ(lines.size(), data_lines);
  size_t next = 0;
  for (const std::string& line : lines) {
    auto r = ParseKernelLogLine(line);
    if (!r) continue;
    ASSERT_LT(next, expects.size()) << "unexpected Xid in: " << line;
    const Expect& e = expects[next++];
    SCOPED_TRACE(line);
    EXPECT_EQ(r->code, e.code);
    EXPECT_EQ(r->pci, e.pci);
    EXPECT_EQ(r->pid, e.pid);
    EXPECT_EQ(r->process, e.process);
    EXPECT_EQ(r->fallen_off_bus, e.fallen_off_bus);
    EXPECT_EQ(r->legacy, e.legacy);
    EXPECT_FALSE(r->sxid);
    if (e.time_us) {
      EXPECT_EQ(r->kernel_time_us, e.time_us);
    }
    if (!e.message_prefix.empty()) {
      EXPECT_TRUE(r->message.starts_with(e.message_prefix)) << r->message;
    }
  }
  EXPECT_EQ(next, expects.size()) << "Xid lines missed";
}

TEST(XidConformanceTest, BumblebeeLegacyFallenOffTheBus) {
  CheckFile("bumblebee-issue554-fallen-off-bus-legacy.txt",
            {
                {79, "00000000:01:00.0", -1, "", true, true, 49'261'458, "has fallen off the bus."},
                {79, "00000000:01:00.0", -1, "", true, true, 49'261'472, "has fallen off the bus."},
            },
            6);
}

TEST(XidConformanceTest, GpudKmsgTestLines) {
  CheckFile(
      "gpud-kmsg-test-xid-149-154-79-14.txt",
      {
          {149, "00000009:01:00.0", -1, "", false, false, 171'167'620'236,
           "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01"},
          {154, "00000009:01:00.0", -1, "", false, false, 171'167'621'162,
           "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"},
          {149, "00000008:01:00.0"},
          {154, "00000019:01:00.0", -1, "", false, false, std::nullopt,
           "GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"},
          {149, "00000009:01:00.0"},
          {149, "00000009:01:00.0"},
          {149, "00000008:01:00.0"},
          {154, "00000018:01:00.0"},
          {154, "00000008:01:00.0"},
          {79, "00000000:05:00.0", -1, "", true, false, 111'111'111'111'000, "GPU has fallen off the bus."},
          {79, "00000000:01:00.0", -1, "", true, false, std::nullopt, "GPU has fallen off the bus."},
          {14, "00000000:03:00.0", -1, "", false, false, std::nullopt, "Channel 00000001"},
      },
      12);
}

TEST(XidConformanceTest, GpudPr1174NvlinkAndContainedEcc) {
  CheckFile(
      "gpud-pr1174-xid149-145-94-nvlink-ecc.txt",
      {
          {149, "00000019:01:00.0", -1, "", false, false, std::nullopt,
           "NETIR Fatal XC0 i0 Link -1 (0x000fe406"},
          {149, "00000000:00:00.0", -1, "", false, false, std::nullopt,
           "NETIR_LINK_EVT Fatal XC0 i0 Link 00"},
          {145, "00000018:01:00.0", -1, "", false, false, std::nullopt, "RLW_RXPIPE Nonfatal XC0 i0 Link 13"},
          {94, "00000000:9b:00.0", 1234, "python3", false, false, std::nullopt, "Contained ECC error"},
      },
      4);
}

TEST(XidConformanceTest, GpudPr46DmesgCtime) {
  const std::string warp =
      "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter";
  CheckFile(
      "gpud-pr46-xid13-xid109-dmesg-ctime.txt",
      {
          {13, "00000000:cb:00.0", -1, "", false, false, std::nullopt, warp},
          {13, "00000000:cb:00.0", -1, "", false, false, std::nullopt, "Graphics SM Global Exception"},
          {13, "00000000:cb:00.0", -1, "", false, false, std::nullopt, "Graphics Exception: ESR 0x57c730"},
          {109, "00000000:cb:00.0", 1797828, "pt_main_thread", false, false, std::nullopt,
           "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"},
      },
      5);
  // dmesg --ctime prints wall-clock time, not the boot clock: no kernel time.
  auto r = ParseKernelLogLine(DataLines("gpud-pr46-xid13-xid109-dmesg-ctime.txt").at(4));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kernel_time_us, std::nullopt);
}

TEST(XidConformanceTest, GpudXid119GspTimeoutDump) {
  const std::string timeout = "Timeout after 6s of waiting for RPC response from GPU4 GSP!";
  const std::string pci = "00000000:9b:00.0";
  CheckFile(
      "gpud-testdata-dmesg-xid-119-gsp-timeout.txt",
      {
          {119, pci, 2024380, "nvidia-smi", false, false, std::nullopt, timeout + " Expected function 103"},
          {119, pci, 2024380, "nvidia-smi", false, false, std::nullopt,
           timeout + " Expected function 10 (FREE)"},
          {119, pci, 2024380, "nvidia-smi", false, false, std::nullopt, timeout},
          {119, pci, 1263500, "cache_mgr_main", false, false, std::nullopt, timeout},
          {119, pci, 1240590, "gpud", false, false, std::nullopt, timeout},
      },
      43);
}

TEST(XidConformanceTest, GpudMiscRealLines) {
  CheckFile(
      "gpud-testdata-misc-real-looking-xid13-xid43-xid144.txt",
      {
          {13, "00000000:38:00.0", -1, "", false, false, std::nullopt, "Graphics Exception: ESR 0x546fb0"},
          {13, "00000000:38:00.0", -1, "", false, false, std::nullopt, "Graphics Exception: ESR 0x54cfb0"},
          {43, "00000000:38:00.0", 2924364, "pt_main_thread", false, false, std::nullopt, "Ch 00000008"},
          {144, "00000000:01:00.0", -1, "", false, false, std::nullopt, "SAW_MVB Nonfatal"},
          {149, "00000000:00:00.0", -1, "", false, false, std::nullopt, "NETIR_LINK_EVT Fatal"},
          {149, "00000000:00:00.0", -1, "", false, false, std::nullopt, "NETIR_LINK_EVT Fatal"},
      },
      6);
}

TEST(XidConformanceTest, OldDriverJournalLineAndRowRemapper) {
  CheckFile("misc-xid31-old-format-and-xid63-row-remapper.txt",
            {
                {31, "00000000:01:00.0", -1, "", false, false, 966'503'025,
                 "Ch 0000000b, engmask 00000120, intr 10000000"},
                {63, "00000000:10:1c.0", 1896, "", false, false, std::nullopt,
                 "Row Remapper: New row marked for remapping, reset gpu to activate."},
            },
            2);
}

}  // namespace
}  // namespace ithbat::collect
