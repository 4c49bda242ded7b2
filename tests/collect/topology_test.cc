// The PCIe topology map (collect/node/topology.h) over sysfs trees built in the test with real
// directories and symlinks, and over this machine's /sys.
#include <filesystem>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collect/node/topology.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect {
namespace {

namespace fs = std::filesystem;
using ::ithbat::testing::FakeSink;
using ::ithbat::testing::TempDir;
using ::testing::HasSubstr;

constexpr TimeNs kT0 = 1'800'000'000 * kNsPerSec;

// A sysfs tree: devices/<chain>, bus/pci/devices/<bdf> → device dir, class/<cls>/<name>/device.
class SysTree {
 public:
  fs::path root() const { return dir_.path() / "sys"; }
  // chain like "pci0000:00/0000:00:01.0/0000:03:00.0"; the last element is the device.
  void Device(const std::string& chain, std::string_view vendor, std::string_view cls, std::string_view numa) {
    const fs::path dir = root() / "devices" / chain;
    dir_.WriteFile(fs::relative(dir / "vendor", dir_.path()).string(), std::string(vendor) + "\n");
    dir_.WriteFile(fs::relative(dir / "class", dir_.path()).string(), std::string(cls) + "\n");
    dir_.WriteFile(fs::relative(dir / "numa_node", dir_.path()).string(), std::string(numa) + "\n");
    fs::create_directories(root() / "bus/pci/devices");
    fs::create_symlink(dir, root() / "bus/pci/devices" / dir.filename());
  }
  void Class(std::string_view cls, std::string_view name, const std::string& chain) {
    const fs::path d = root() / "class" / cls / name;
    fs::create_directories(d);
    if (!chain.empty()) fs::create_symlink(root() / "devices" / chain, d / "device");
  }

 private:
  TempDir dir_;
};

constexpr char kSwitch[] = "pci0000:00/0000:00:01.0/0000:01:00.0";
const std::string kGpu0 = std::string(kSwitch) + "/0000:02:00.0/0000:03:00.0";
const std::string kNic0 = std::string(kSwitch) + "/0000:02:01.0/0000:04:00.0";
const std::string kNicDeep = std::string(kSwitch) + "/0000:02:02.0/0000:05:00.0/0000:06:00.0";
const std::string kGpu1 = "pci0000:80/0000:80:01.0/0000:81:00.0";
const std::string kNic1 = "pci0000:80/0000:80:02.0/0000:82:00.0";

void BuildTwoSockets(SysTree& t) {
  t.Device(kSwitch, "0x1000", "0x060400", "0");
  t.Device(kGpu0, "0x10de", "0x030200", "0");
  t.Device(kNic0, "0x15b3", "0x020700", "0");
  t.Device(kNicDeep, "0x15b3", "0x020000", "0");
  t.Device(kGpu1, "0x10de", "0x030000", "1");
  t.Device(kNic1, "0x15b3", "0x020700", "1");
  t.Device("pci0000:80/0000:80:03.0/0000:83:00.0", "0x10de", "0x068000", "1");  // NVSwitch: not a GPU
  t.Class("infiniband", "mlx5_0", kNic0);
  t.Class("infiniband", "mlx5_1", kNic1);
  t.Class("net", "eth2", kNicDeep);
  t.Class("net", "ib0", kNic0);  // IPoIB on mlx5_0's function: the same NIC
  t.Class("net", "lo", "");      // virtual
}

TEST(TopologyTest, PciDeviceFromPath) {
  auto d = PciDeviceFromPath("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(d->root, "pci0000:3a");
  EXPECT_EQ(d->bus_id, "0000:3b:00.0");
  EXPECT_THAT(d->bridges, ::testing::ElementsAre("0000:3a:00.0"));
  auto v = PciDeviceFromPath("/sys/devices/pci0000:00/0000:00:03.0/virtio0");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->bus_id, "0000:00:03.0");
  EXPECT_TRUE(v->bridges.empty());
  EXPECT_FALSE(PciDeviceFromPath("/sys/devices/virtual/net/lo"));
  EXPECT_FALSE(PciDeviceFromPath("/sys/devices/pci0000:00"));
}

TEST(TopologyTest, ClassifyLink) {
  PciDevice a{"0000:03:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, 0};
  PciDevice b{"0000:04:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, 0};
  EXPECT_EQ(ClassifyLink(a, b), PciLink::kPix);
  PciDevice same_bridge{"0000:03:00.1", "pci0000:00", a.bridges, 0};
  EXPECT_EQ(ClassifyLink(a, same_bridge), PciLink::kPix);
  PciDevice deep{"0000:06:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0", "0000:02:02.0", "0000:05:00.0"}, 0};
  EXPECT_EQ(ClassifyLink(a, deep), PciLink::kPxb);
  PciDevice other_port{"0000:10:00.0", "pci0000:00", {"0000:00:02.0"}, 0};
  EXPECT_EQ(ClassifyLink(a, other_port), PciLink::kPhb);
  PciDevice other_root{"0000:20:00.0", "pci0000:20", {"0000:20:01.0"}, 0};
  EXPECT_EQ(ClassifyLink(a, other_root), PciLink::kNode);
  other_root.numa_node = 1;
  EXPECT_EQ(ClassifyLink(a, other_root), PciLink::kSys);
  // Unknown nodes: one unknown cannot be shown to share → SYS; both unknown is one node → NODE.
  a.numa_node = -1;
  EXPECT_EQ(ClassifyLink(a, other_root), PciLink::kSys);
  other_root.numa_node = -1;
  EXPECT_EQ(ClassifyLink(a, other_root), PciLink::kNode);
  EXPECT_EQ(PciLinkName(PciLink::kPxb), "PXB");
}

TEST(TopologyTest, ReadsTwoSocketTree) {
  SysTree t;
  BuildTwoSockets(t);
  std::vector<Error> errors;
  auto topo = ReadTopology(t.root(), 64, &errors);
  ASSERT_TRUE(topo) << topo.error().ToString();
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  ASSERT_EQ(topo->gpus.size(), 2u);
  EXPECT_EQ(topo->gpus[0].bus_id, "0000:03:00.0");
  EXPECT_EQ(topo->gpus[1].bus_id, "0000:81:00.0");
  ASSERT_EQ(topo->nics.size(), 3u);  // eth2, mlx5_0, mlx5_1 (ib0 is mlx5_0, lo is virtual)
  EXPECT_EQ(topo->nics[0].name, "eth2");
  EXPECT_EQ(topo->nics[1].name, "mlx5_0");
  EXPECT_EQ(topo->nics[2].name, "mlx5_1");
  EXPECT_EQ(topo->pairs.size(), 6u);
}

TEST(TopologyTest, CollectorExportsLinksClosestAndNuma) {
  SysTree t;
  BuildTwoSockets(t);
  auto c = TopologyCollector::Create({.sysfs = t.root()});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().degraded, "");
  for (const auto& d : c->Describe()) EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;

  constexpr std::string_view kInfo = "ithbat_topology_gpu_nic_info";
  EXPECT_EQ(sink.CountSeries(kInfo), 6u);
  auto expect = [&](std::string gpu, std::string nic, std::string nic_bdf, std::string link, std::string numa,
                    std::string closest) {
    EXPECT_EQ(sink.ValueAt(kInfo,
                           {{"gpu_pci_bus_id", gpu},
                            {"nic", nic},
                            {"nic_pci_bus_id", nic_bdf},
                            {"link", link},
                            {"numa_node", numa},
                            {"closest", closest}},
                           kT0),
              1.0)
        << gpu << " " << nic << " " << link << " closest=" << closest;
  };
  expect("0000:03:00.0", "mlx5_0", "0000:04:00.0", "PIX", "0", "1");
  expect("0000:03:00.0", "eth2", "0000:06:00.0", "PXB", "0", "0");
  expect("0000:03:00.0", "mlx5_1", "0000:82:00.0", "SYS", "1", "0");
  expect("0000:81:00.0", "mlx5_1", "0000:82:00.0", "PHB", "1", "1");
  expect("0000:81:00.0", "mlx5_0", "0000:04:00.0", "SYS", "0", "0");
  expect("0000:81:00.0", "eth2", "0000:06:00.0", "SYS", "0", "0");
  EXPECT_EQ(sink.ValueAt("ithbat_topology_gpu_numa_node", {{"gpu_pci_bus_id", "0000:03:00.0"}}, kT0), 0.0);
  EXPECT_EQ(sink.ValueAt("ithbat_topology_gpu_numa_node", {{"gpu_pci_bus_id", "0000:81:00.0"}}, kT0), 1.0);

  // Later ticks re-append the same values without new series.
  ASSERT_TRUE(c->Collect(kT0 + kNsPerSec));
  EXPECT_EQ(sink.CountSeries(kInfo), 6u);
  EXPECT_EQ(sink.ValueAt("ithbat_topology_gpu_numa_node", {{"gpu_pci_bus_id", "0000:81:00.0"}}, kT0 + kNsPerSec),
            1.0);
}

TEST(TopologyTest, TiesGoToLowestNicName) {
  SysTree t;
  t.Device("pci0000:00/0000:00:01.0/0000:01:00.0", "0x10de", "0x030200", "0");
  t.Device("pci0000:00/0000:00:02.0/0000:02:00.0", "0x15b3", "0x020700", "0");
  t.Device("pci0000:00/0000:00:03.0/0000:03:00.0", "0x15b3", "0x020700", "0");
  t.Class("infiniband", "mlx5_1", "pci0000:00/0000:00:02.0/0000:02:00.0");
  t.Class("infiniband", "mlx5_0", "pci0000:00/0000:00:03.0/0000:03:00.0");
  std::vector<Error> errors;
  auto topo = ReadTopology(t.root(), 64, &errors);
  ASSERT_TRUE(topo);
  ASSERT_EQ(topo->pairs.size(), 2u);
  EXPECT_EQ(topo->pairs[0].link, PciLink::kPhb);
  EXPECT_EQ(topo->pairs[1].link, PciLink::kPhb);
  EXPECT_EQ(topo->nics[topo->pairs[0].nic].name, "mlx5_0");
  EXPECT_TRUE(topo->pairs[0].closest);
  EXPECT_FALSE(topo->pairs[1].closest);
}

TEST(TopologyTest, UnknownGpuNumaNode) {
  SysTree t;
  t.Device("pci0000:00/0000:00:01.0/0000:01:00.0", "0x10de", "0x030200", "-1");
  t.Device("pci0000:80/0000:80:01.0/0000:81:00.0", "0x15b3", "0x020700", "1");
  t.Class("infiniband", "mlx5_0", "pci0000:80/0000:80:01.0/0000:81:00.0");
  auto c = TopologyCollector::Create({.sysfs = t.root()});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(sink.ValueAt("ithbat_topology_gpu_numa_node", {{"gpu_pci_bus_id", "0000:01:00.0"}}, kT0), -1.0);
  // Different roots, one node unknown → SYS (documented in topology.h).
  EXPECT_EQ(sink.ValueAt("ithbat_topology_gpu_nic_info", {{"nic", "mlx5_0"}, {"link", "SYS"}, {"closest", "1"}}, kT0),
            1.0);
}

TEST(TopologyTest, MissingTreeIsDegraded) {
  TempDir dir;
  auto c = TopologyCollector::Create({.sysfs = dir.path() / "nope"});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_THAT(c->Health().degraded, HasSubstr("no PCI tree"));
  EXPECT_EQ(sink.series_count(), 0u);
}

TEST(TopologyTest, NoGpusIsNoSeriesNoError) {
  SysTree t;
  t.Device("pci0000:00/0000:00:02.0/0000:02:00.0", "0x15b3", "0x020700", "0");
  t.Class("infiniband", "mlx5_0", "pci0000:00/0000:00:02.0/0000:02:00.0");
  auto c = TopologyCollector::Create({.sysfs = t.root()});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().degraded, "");
  EXPECT_EQ(sink.series_count(), 0u);
}

TEST(TopologyTest, RecomputesEverySixtyTicks) {
  SysTree t;
  t.Device("pci0000:00/0000:00:01.0/0000:01:00.0", "0x10de", "0x030200", "0");
  auto c = TopologyCollector::Create({.sysfs = t.root()});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  for (int i = 0; i < 59; i++) ASSERT_TRUE(c->Collect(kT0 + i * kNsPerSec));
  t.Device("pci0000:00/0000:00:02.0/0000:02:00.0", "0x10de", "0x030200", "0");
  ASSERT_TRUE(c->Collect(kT0 + 59 * kNsPerSec));
  EXPECT_EQ(sink.CountSeries("ithbat_topology_gpu_numa_node"), 1u);  // cached
  ASSERT_TRUE(c->Collect(kT0 + 60 * kNsPerSec));
  EXPECT_EQ(sink.CountSeries("ithbat_topology_gpu_numa_node"), 2u);  // re-read at tick 60
}

TEST(TopologyTest, RealSysfs) {
  std::vector<Error> errors;
  auto topo = ReadTopology("/sys", 64, &errors);
  // These machines have /sys/bus/pci; without it the real-data check would prove nothing.
  ASSERT_TRUE(topo) << topo.error().ToString();
  auto c = TopologyCollector::Create({});
  FakeSink sink;
  ASSERT_TRUE(c->Init(sink));
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->Collect(kT0));
  EXPECT_EQ(c->Health().degraded, "");
  EXPECT_EQ(sink.CountSeries("ithbat_topology_gpu_numa_node"), topo->gpus.size());
}

}  // namespace
}  // namespace ithbat::collect
