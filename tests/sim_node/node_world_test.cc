// NodeWorld: every file it writes is read back with the agent's own parsers (node, kmsg, host,
// topology), counters only move forward, events change exactly what they should, and the
// background mess is a function of the seed.
#include "node/node_world.h"

#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "collect/gpu/nvml_abi.h"
#include "collect/host/proc_parse.h"
#include "collect/kmsg/xid_parse.h"
#include "collect/node/node_parse.h"
#include "collect/node/topology.h"
#include "core/file_util.h"
#include "sim_node/sim_node_testutil.h"
#include "testutil/testutil.h"

namespace ithbat::sim::node {
namespace {

namespace fs = std::filesystem;
namespace nv = ::ithbat::nvml;
using ithbat::testing::TempDir;
using scenario::EventKind;

constexpr int64_t kStart = 1'800'000'000'000'000'000;  // a fixed run start (CLOCK_REALTIME ns)
constexpr int64_t kSec = 1'000'000'000;

std::string Read(const fs::path& p) {
  auto t = ReadFileBounded(p, 1 << 20);
  EXPECT_TRUE(t.has_value()) << p << ": " << (t ? "" : t.error().message);
  return t ? *t : std::string();
}

uint64_t Counter(const fs::path& port, std::string_view name) {
  auto v = collect::ParseSysfsCounter(Read(port / "counters" / name));
  EXPECT_TRUE(v.has_value()) << name;
  return v ? *v : 0;
}

class NodeWorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scenario_ = testing::SmallWorld();
    std::vector<net::NicSlot> slots;
    for (size_t n = 0; n < scenario_.nodes.size(); ++n) {
      for (const auto& nic : scenario_.nodes[n].nics) {
        net::NicSlot s{};
        std::snprintf(s.node, sizeof(s.node), "%s", scenario_.nodes[n].name.c_str());
        std::snprintf(s.name, sizeof(s.name), "%s", nic.name.c_str());
        s.node_id = static_cast<uint32_t>(n);
        s.port = 1;
        s.rate_bps = static_cast<uint64_t>(nic.rate_gbps * 1e9);
        slots.push_back(s);
      }
    }
    const char* why = nullptr;
    ASSERT_TRUE(net_.Create((dir_.path() / "net.state").c_str(), slots.data(),
                            static_cast<uint32_t>(slots.size()), &why))
        << why;
  }

  NodeWorld::Options Opts(size_t node, uint64_t seed = 7, const fs::path& root = {}) {
    NodeWorld::Options o;
    o.dir = (root.empty() ? dir_.path() : root) / "nodes" / scenario_.nodes[node].name;
    o.scenario = &scenario_;
    o.node_index = node;
    o.seed = seed;
    o.net = &net_;
    o.nic_slots = {static_cast<uint32_t>(2 * node), static_cast<uint32_t>(2 * node + 1)};
    o.run_start_ns = kStart;
    return o;
  }

  std::unique_ptr<NodeWorld> Make(size_t node, uint64_t seed = 7, const fs::path& root = {}) {
    auto w = NodeWorld::Create(Opts(node, seed, root));
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return w ? std::move(*w) : nullptr;
  }

  static scenario::EventT<scenario::Plain> Ev(EventKind kind, std::string node, int64_t gpu,
                                              std::string nic = "") {
    scenario::EventT<scenario::Plain> e;
    e.id = "e1";
    e.kind = kind;
    e.node = std::move(node);
    e.gpu = gpu;
    e.nic = std::move(nic);
    e.at_s = 1;
    return e;
  }

  TempDir dir_;
  scenario::ResolvedScenario scenario_;
  net::NetStateMapping net_;
};

TEST_F(NodeWorldTest, FakeStateHasTheNodesGpusWithDistinctUuids) {
  auto w0 = Make(0);
  auto w1 = Make(1);
  ASSERT_TRUE(w0 && w1);
  auto st = FakeState::Open(w0->state_path().string());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ((*st)->gpu_count(), 4u);
  std::set<std::string> uuids;
  for (const auto* w : {w0.get(), w1.get()}) {
    ASSERT_EQ(w->gpus().size(), 4u);
    for (const auto& g : w->gpus()) uuids.insert(g.uuid);
  }
  EXPECT_EQ(uuids.size(), 8u);
  auto c = (*st)->Config(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_STREQ(c->name, "NVIDIA H100 80GB HBM3");
}

TEST_F(NodeWorldTest, TopologyMapsEachGpuToTheNicTheScenarioNames) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  std::vector<Error> errors;
  auto topo = collect::ReadTopology(w->sysfs(), 64, &errors);
  ASSERT_TRUE(topo.has_value()) << topo.error().message;
  EXPECT_TRUE(errors.empty()) << errors.front().message;
  ASSERT_EQ(topo->gpus.size(), 4u);
  ASSERT_EQ(topo->nics.size(), 2u);
  // GPU bus ids are NVML's (the agent joins them).
  std::map<std::string, size_t> gpu_of_bus;
  for (const auto& g : w->gpus()) gpu_of_bus[*collect::NormalizePciId(g.pci_bus_id)] = g.index;
  size_t closest = 0;
  for (const auto& p : topo->pairs) {
    const auto bus = collect::NormalizePciId(topo->gpus[p.gpu].bus_id);
    ASSERT_TRUE(bus && gpu_of_bus.count(*bus)) << topo->gpus[p.gpu].bus_id;
    const size_t gpu = gpu_of_bus[*bus];
    const std::string& nic = topo->nics[p.nic].name;
    const std::string want = gpu < 2 ? "mlx5_0" : "mlx5_1";
    if (nic == want) {
      EXPECT_EQ(p.link, collect::PciLink::kPix) << gpu << " " << nic;
      EXPECT_TRUE(p.closest) << gpu << " " << nic;
      ++closest;
    } else {
      EXPECT_NE(p.link, collect::PciLink::kPix) << gpu << " " << nic;
      EXPECT_FALSE(p.closest) << gpu << " " << nic;
    }
  }
  EXPECT_EQ(closest, 4u);
}

TEST_F(NodeWorldTest, InfinibandFilesParseAndCountWordsAsHcasDo) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  net::NicSlot* slot = net_.nic(0);
  const fs::path port = w->sysfs() / "class" / "infiniband" / "mlx5_0" / "ports" / "1";
  auto state = collect::ParseIbEnum(Read(port / "state"));
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->value, 4u);
  auto phys = collect::ParseIbEnum(Read(port / "phys_state"));
  ASSERT_TRUE(phys.has_value());
  EXPECT_EQ(phys->value, 5u);
  auto rate = collect::ParseIbRateGbps(Read(port / "rate"));
  ASSERT_TRUE(rate.has_value());
  EXPECT_DOUBLE_EQ(*rate, 400.0);
  for (const char* f : {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                        "port_xmit_wait", "symbol_error", "link_downed", "link_error_recovery",
                        "port_rcv_errors", "excessive_buffer_overrun_errors"}) {
    EXPECT_EQ(Counter(port, f), 0u) << f;
  }
  // Traffic the fake NCCL counted, then a tick: data counters are 4-octet words.
  uint64_t prev_x = 0, prev_r = 0, prev_w = 0;
  for (int i = 1; i <= 5; ++i) {
    net::Add(&slot->tx_bytes, 1'000'000ull * i);
    net::Add(&slot->rx_bytes, 3'000'000ull * i);
    net::Add(&slot->tx_wait_ns, 5'000'000ull);
    ASSERT_TRUE(w->Tick(kStart + i * kSec / 4).has_value());
    const uint64_t x = Counter(port, "port_xmit_data");
    const uint64_t r = Counter(port, "port_rcv_data");
    const uint64_t wt = Counter(port, "port_xmit_wait");
    EXPECT_EQ(x, net::Load(&slot->tx_bytes) / 4);
    EXPECT_EQ(r, net::Load(&slot->rx_bytes) / 4);
    EXPECT_GT(x, prev_x);
    EXPECT_GT(r, prev_r);
    EXPECT_GT(wt, prev_w);
    prev_x = x;
    prev_r = r;
    prev_w = wt;
  }
  // The other NIC saw nothing.
  const fs::path other = w->sysfs() / "class" / "infiniband" / "mlx5_1" / "ports" / "1";
  EXPECT_EQ(Counter(other, "port_xmit_data"), 0u);
}

TEST_F(NodeWorldTest, HostFilesAreTheRealHostsAndParse) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->Tick(kStart + kSec).has_value());
  auto stat = collect::ParseProcStat(Read(w->procfs() / "stat"));
  ASSERT_TRUE(stat.has_value()) << stat.error().message;
  EXPECT_GT(stat->cpus, 0u);
  auto mem = collect::ParseMemInfo(Read(w->procfs() / "meminfo"));
  ASSERT_TRUE(mem.has_value()) << mem.error().message;
  EXPECT_TRUE(collect::ParseLoadAvg(Read(w->procfs() / "loadavg")).has_value());
  EXPECT_TRUE(collect::ParseVmStat(Read(w->procfs() / "vmstat")).has_value());
  if (fs::exists("/proc/pressure/io")) {
    EXPECT_TRUE(collect::ParsePressure(Read(w->procfs() / "pressure" / "io")).has_value());
  }
}

TEST_F(NodeWorldTest, EarlierXidIsOneKmsgLineDatedBeforeTheRun) {
  scenario_.background.earlier_xid = 31;
  auto w = Make(0);
  ASSERT_TRUE(w);
  const std::string text = Read(w->kmsg());
  std::vector<collect::XidRecord> xids;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    auto r = collect::ParseKernelLogLine(line);
    ASSERT_TRUE(r.has_value()) << line;
    xids.push_back(*r);
  }
  ASSERT_EQ(xids.size(), 1u);
  EXPECT_EQ(xids[0].code, 31u);
  ASSERT_GE(w->earlier_xid_gpu(), 0);
  EXPECT_EQ(xids[0].pci,
            *collect::NormalizePciId(w->gpus()[static_cast<size_t>(w->earlier_xid_gpu())].pci_bus_id));
  ASSERT_TRUE(xids[0].kernel_time_us.has_value());
  ASSERT_TRUE(xids[0].kmsg_seq.has_value());
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  EXPECT_LT(*xids[0].kernel_time_us, static_cast<uint64_t>(ts.tv_sec) * 1'000'000);
  // Nothing live: no NVML event for it.
  auto st = FakeState::Open(w->state_path().string());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ((*st)->layout().events.head, 0u);
}

TEST_F(NodeWorldTest, ThermalThrottleCapsTheClockWithAThermalReasonAndEndRestores) {
  scenario_.background.clock_spread_pct = 0;
  auto w = Make(0);
  ASSERT_TRUE(w);
  auto before = w->state().Config(1);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->clock_cap_mhz, 0u);
  auto e = Ev(EventKind::kThermalThrottle, "n0", 1);
  e.clock_factor = 0.6;
  ASSERT_TRUE(w->StartEvent(e, kStart + kSec).has_value());
  auto c = w->state().Config(1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->clock_cap_mhz,
            static_cast<uint32_t>(std::lround(before->max_clock_mhz[nv::NVML_CLOCK_SM] * 0.6)));
  EXPECT_NE(c->forced_clock_event_reasons & nv::nvmlClocksEventReasonSwThermalSlowdown, 0u);
  EXPECT_GT(c->temp_offset_c, 0);
  // What NVML derives: a hot GPU, thermal reason, clock at most the cap under load.
  const int64_t now = RealtimeNs();
  ASSERT_TRUE(w->state().AddBusyInterval(1, now - kSec, now + kSec, 1.0, 0.5, 0.5).has_value());
  Derived d;
  auto& slot = w->state().layout().gpus[1];
  ASSERT_TRUE(ComputeDerived(w->state().layout(), slot, *c, now, &d));
  EXPECT_LE(d.sm_clock_mhz, c->clock_cap_mhz);
  EXPECT_NE(d.clock_event_reasons & nv::nvmlClocksEventReasonSwThermalSlowdown, 0u);
  EXPECT_GE(d.temperature_c, c->sw_thermal_slowdown_c);
  // Other GPUs untouched.
  auto other = w->state().Config(0);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->clock_cap_mhz, 0u);
  EXPECT_EQ(other->forced_clock_event_reasons, 0u);
  ASSERT_TRUE(w->EndEvent(e, kStart + 2 * kSec).has_value());
  auto after = w->state().Config(1);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->clock_cap_mhz, 0u);
  EXPECT_EQ(after->forced_clock_event_reasons, 0u);
  EXPECT_EQ(after->temp_offset_c, 0);
}

TEST_F(NodeWorldTest, EccUncorrectableCountsLogsXid48AndPendsARemap) {
  scenario_.background.earlier_xid = 0;
  scenario_.background.old_row_remap = false;
  auto w = Make(0);
  ASSERT_TRUE(w);
  auto e = Ev(EventKind::kEccUncorrectable, "n0", 2);
  ASSERT_TRUE(w->StartEvent(e, kStart + kSec).has_value());
  auto c = w->state().Config(2);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(
      c->ecc[nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED][nv::NVML_VOLATILE_ECC][nv::NVML_MEMORY_LOCATION_DRAM],
      1u);
  EXPECT_EQ(c->remap_unc, 1u);
  EXPECT_EQ(c->remap_pending, 1u);
  const std::string text = Read(w->kmsg());
  auto r = collect::ParseKernelLogLine(text.substr(0, text.find('\n')));
  ASSERT_TRUE(r.has_value()) << text;
  EXPECT_EQ(r->code, 48u);
  EXPECT_EQ(r->pci, *collect::NormalizePciId(w->gpus()[2].pci_bus_id));
  // NVML events: the DBE event and the Xid 48, both on GPU 2.
  const auto& ring = w->state().layout().events;
  bool xid48 = false;
  for (uint64_t i = 0; i < ring.head; ++i) {
    EXPECT_EQ(ring.entries[i].gpu, 2u);
    xid48 |= ring.entries[i].type == nv::nvmlEventTypeXidCriticalError && ring.entries[i].data == 48;
  }
  EXPECT_TRUE(xid48);
  // The other GPUs: clean.
  auto c0 = w->state().Config(0);
  ASSERT_TRUE(c0.has_value());
  EXPECT_EQ(
      c0->ecc[nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED][nv::NVML_VOLATILE_ECC][nv::NVML_MEMORY_LOCATION_DRAM],
      0u);
}

TEST_F(NodeWorldTest, PowerCapRowRemapNvlinkCorrectedEccAndXidTouchOnlyTheirCounters) {
  scenario_.background.enabled = false;
  auto w = Make(0);
  ASSERT_TRUE(w);
  auto cap = Ev(EventKind::kPowerCap, "n0", 0);
  cap.power_limit_w = 450;
  ASSERT_TRUE(w->StartEvent(cap, kStart).has_value());
  EXPECT_EQ(w->state().Config(0)->power_limit_mw, 450'000u);
  EXPECT_EQ(w->state().Config(1)->power_limit_mw, 700'000u);
  ASSERT_TRUE(w->EndEvent(cap, kStart + kSec).has_value());
  EXPECT_EQ(w->state().Config(0)->power_limit_mw, 700'000u);

  auto remap = Ev(EventKind::kRowRemap, "n0", 1);
  remap.count = 2;
  ASSERT_TRUE(w->StartEvent(remap, kStart).has_value());
  EXPECT_EQ(w->state().Config(1)->remap_corr, 2u);
  EXPECT_EQ(w->state().Config(1)->remap_pending, 1u);
  EXPECT_EQ(w->state().Config(1)->remap_failure, 0u);
  auto failed = Ev(EventKind::kRowRemap, "n0", 2);
  failed.id = "e2";
  failed.failure = true;
  ASSERT_TRUE(w->StartEvent(failed, kStart).has_value());
  EXPECT_EQ(w->state().Config(2)->remap_failure, 1u);

  auto nvl = Ev(EventKind::kNvlinkErrors, "n0", 3);
  nvl.link = 5;
  nvl.count = 7;
  ASSERT_TRUE(w->StartEvent(nvl, kStart).has_value());
  EXPECT_EQ(w->state().Config(3)->nvlink[5].errors[nv::NVML_NVLINK_ERROR_DL_CRC_FLIT], 7u);
  EXPECT_EQ(w->state().Config(3)->nvlink[4].errors[nv::NVML_NVLINK_ERROR_DL_CRC_FLIT], 0u);
  nvl.link = 99;
  nvl.id = "bad";
  EXPECT_FALSE(w->StartEvent(nvl, kStart).has_value());

  auto corr = Ev(EventKind::kEccCorrected, "n0", 0);
  corr.count = 5;
  ASSERT_TRUE(w->StartEvent(corr, kStart).has_value());
  EXPECT_EQ(w->state().Config(0)->ecc[nv::NVML_MEMORY_ERROR_TYPE_CORRECTED][nv::NVML_VOLATILE_ECC]
                                     [nv::NVML_MEMORY_LOCATION_DRAM],
            5u);
  EXPECT_EQ(w->state().Config(0)->ecc[nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED][nv::NVML_VOLATILE_ECC]
                                     [nv::NVML_MEMORY_LOCATION_DRAM],
            0u);

  auto xid = Ev(EventKind::kXid, "n0", 2);
  xid.id = "x";
  xid.xid = 31;
  ASSERT_TRUE(w->StartEvent(xid, kStart).has_value());
  // kmsg: the remap Xids (63, 64) and the 31, each on its GPU, all parsed by the agent's parser.
  std::vector<std::pair<uint32_t, std::string>> seen;
  const std::string text = Read(w->kmsg());
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    auto r = collect::ParseKernelLogLine(line);
    ASSERT_TRUE(r.has_value()) << line;
    seen.emplace_back(r->code, r->pci);
  }
  const std::vector<std::pair<uint32_t, std::string>> want = {
      {63, *collect::NormalizePciId(w->gpus()[1].pci_bus_id)},
      {64, *collect::NormalizePciId(w->gpus()[2].pci_bus_id)},
      {31, *collect::NormalizePciId(w->gpus()[2].pci_bus_id)}};
  EXPECT_EQ(seen, want);
}

TEST_F(NodeWorldTest, SilentCorruptionChangesNothingVisible) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->Tick(kStart + kSec).has_value());
  auto snapshot = [&] {
    std::string s;
    for (uint32_t g = 0; g < 4; ++g) {
      auto c = w->state().Config(g);
      EXPECT_TRUE(c.has_value());
      s.append(reinterpret_cast<const char*>(&*c), sizeof(GpuConfig));
      const auto& f = w->state().layout().gpus[g].faults;
      s.append(reinterpret_cast<const char*>(&f), sizeof(f));
    }
    s += std::to_string(w->state().layout().events.head);
    s += Read(w->kmsg());
    for (const auto& entry : fs::recursive_directory_iterator(w->sysfs() / "class" / "infiniband")) {
      if (entry.is_regular_file()) s += entry.path().string() + "=" + Read(entry.path());
    }
    return s;
  };
  const std::string before = snapshot();
  auto e = Ev(EventKind::kSilentCorruption, "n0", 3);
  e.effect = scenario::FaultEffect::kLossSpike;
  ASSERT_TRUE(w->StartEvent(e, kStart + kSec).has_value());
  EXPECT_EQ(w->active_events(), 1u);  // recorded
  EXPECT_EQ(snapshot(), before);
}

TEST_F(NodeWorldTest, IbLinkDownAndBack) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  const fs::path port = w->sysfs() / "class" / "infiniband" / "mlx5_1" / "ports" / "1";
  auto e = Ev(EventKind::kIbLinkDown, "n0", -1, "mlx5_1");
  ASSERT_TRUE(w->StartEvent(e, kStart + kSec).has_value());
  EXPECT_EQ(net::Load(&net_.nic(1)->health_ppm), 0u);
  EXPECT_EQ(collect::ParseIbEnum(Read(port / "state"))->value, 1u);
  EXPECT_NE(collect::ParseIbEnum(Read(port / "phys_state"))->value, 5u);
  EXPECT_EQ(Counter(port, "link_downed"), 1u);
  ASSERT_TRUE(w->EndEvent(e, kStart + 2 * kSec).has_value());
  EXPECT_EQ(net::Load(&net_.nic(1)->health_ppm), net::kFullPpm);
  EXPECT_EQ(collect::ParseIbEnum(Read(port / "state"))->value, 4u);
  EXPECT_EQ(Counter(port, "link_downed"), 1u);
  // mlx5_0 untouched.
  EXPECT_EQ(net::Load(&net_.nic(0)->health_ppm), net::kFullPpm);
}

TEST_F(NodeWorldTest, IbDegradeRampsHealthDowntrainsAndRaisesSymbolErrors) {
  scenario_.background.ib_symbol_errors_per_hour = 0;
  auto w = Make(0);
  ASSERT_TRUE(w);
  const fs::path port = w->sysfs() / "class" / "infiniband" / "mlx5_0" / "ports" / "1";
  auto e = Ev(EventKind::kIbLinkDegrade, "n0", -1, "mlx5_0");
  e.bandwidth_factor = 0.25;
  e.ramp_s = 4;
  e.symbol_errors_per_s = 10;
  ASSERT_TRUE(w->StartEvent(e, kStart).has_value());
  std::vector<uint64_t> health;
  std::vector<uint64_t> symbols;
  for (int i = 0; i <= 6; ++i) {
    ASSERT_TRUE(w->Tick(kStart + i * kSec).has_value());
    health.push_back(net::Load(&net_.nic(0)->health_ppm));
    symbols.push_back(Counter(port, "symbol_error"));
  }
  for (size_t i = 1; i < health.size(); ++i) {
    EXPECT_LE(health[i], health[i - 1]);
    EXPECT_GE(symbols[i], symbols[i - 1]);
  }
  EXPECT_LT(health[2], net::kFullPpm);
  EXPECT_GT(health[2], 250'000u);
  EXPECT_EQ(health.back(), 250'000u);
  EXPECT_EQ(symbols.back(), 60u);  // 10/s for 6 s
  auto rate = collect::ParseIbRateGbps(Read(port / "rate"));
  ASSERT_TRUE(rate.has_value());
  EXPECT_LT(*rate, 400.0);
  EXPECT_EQ(collect::ParseIbEnum(Read(port / "state"))->value, 4u);  // degraded, still up
  EXPECT_EQ(Counter(port, "link_error_recovery"), 1u);
  ASSERT_TRUE(w->EndEvent(e, kStart + 7 * kSec).has_value());
  EXPECT_EQ(net::Load(&net_.nic(0)->health_ppm), net::kFullPpm);
  EXPECT_DOUBLE_EQ(*collect::ParseIbRateGbps(Read(port / "rate")), 400.0);
}

TEST_F(NodeWorldTest, CongestionSetsTheSlotAndGpuLostLogsXid79) {
  auto w = Make(1);
  ASSERT_TRUE(w);
  auto cg = Ev(EventKind::kIbCongestion, "n1", -1, "mlx5_0");
  cg.bandwidth_factor = 0.4;
  ASSERT_TRUE(w->StartEvent(cg, kStart).has_value());
  EXPECT_EQ(net::Load(&net_.nic(2)->congestion_ppm), 600'000u);
  EXPECT_EQ(net::Load(&net_.nic(2)->health_ppm), net::kFullPpm);
  ASSERT_TRUE(w->EndEvent(cg, kStart + kSec).has_value());
  EXPECT_EQ(net::Load(&net_.nic(2)->congestion_ppm), 0u);

  auto lost = Ev(EventKind::kGpuLost, "n1", 3);
  ASSERT_TRUE(w->StartEvent(lost, kStart + kSec).has_value());
  EXPECT_EQ(w->state().layout().gpus[3].faults.lost, 1u);
  const auto& msgs = w->kmsg_messages();
  ASSERT_FALSE(msgs.empty());
  auto r = collect::ParseKernelLogLine(msgs.back());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, 79u);
  EXPECT_TRUE(r->fallen_off_bus);
}

TEST_F(NodeWorldTest, EventsForAnotherNodeOrMissingHardwareAreRefused) {
  auto w = Make(0);
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->StartEvent(Ev(EventKind::kXid, "n1", 0), kStart).has_value());
  EXPECT_FALSE(w->StartEvent(Ev(EventKind::kXid, "n0", 9), kStart).has_value());
  EXPECT_FALSE(w->StartEvent(Ev(EventKind::kIbLinkDown, "n0", -1, "mlx5_7"), kStart).has_value());
  // Not this node's hardware: ignored.
  auto sd = Ev(EventKind::kStorageSlowdown, "", -1);
  sd.mount = "ckpt";
  EXPECT_TRUE(w->StartEvent(sd, kStart).has_value());
  EXPECT_EQ(w->active_events(), 0u);
}

TEST_F(NodeWorldTest, BackgroundIsAFunctionOfTheSeed) {
  scenario_.background.clock_spread_pct = 5;
  scenario_.background.corrected_ecc_per_hour = 3600;  // 1/s per GPU
  TempDir a, b, c;
  auto wa = Make(0, 42, a.path());
  auto wb = Make(0, 42, b.path());
  auto wc = Make(0, 43, c.path());
  ASSERT_TRUE(wa && wb && wc);
  auto caps = [](NodeWorld& w) {
    std::vector<uint32_t> v;
    for (uint32_t g = 0; g < 4; ++g) v.push_back(w.state().Config(g)->clock_cap_mhz);
    return v;
  };
  EXPECT_EQ(caps(*wa), caps(*wb));
  EXPECT_NE(caps(*wa), caps(*wc));
  EXPECT_EQ(wa->old_remap_gpu(), wb->old_remap_gpu());
  EXPECT_EQ(wa->kmsg_messages(), wb->kmsg_messages());
  // Some GPU has a cap, and no cap is outside the spread.
  for (uint32_t cap : caps(*wa)) {
    if (cap != 0) {
      EXPECT_GE(cap, static_cast<uint32_t>(1980 * 0.95) - 1);
    }
  }
  // Corrected ECC arrivals depend on run time only, not on how often it ticks.
  for (int i = 1; i <= 40; ++i) ASSERT_TRUE(wa->Tick(kStart + i * kSec / 4).has_value());
  ASSERT_TRUE(wb->Tick(kStart + 10 * kSec).has_value());
  uint64_t total = 0;
  for (uint32_t g = 0; g < 4; ++g) {
    const uint64_t ea = wa->state().Config(g)->ecc[nv::NVML_MEMORY_ERROR_TYPE_CORRECTED]
                                                  [nv::NVML_VOLATILE_ECC][nv::NVML_MEMORY_LOCATION_DRAM];
    const uint64_t eb = wb->state().Config(g)->ecc[nv::NVML_MEMORY_ERROR_TYPE_CORRECTED]
                                                  [nv::NVML_VOLATILE_ECC][nv::NVML_MEMORY_LOCATION_DRAM];
    EXPECT_EQ(ea, eb) << g;
    total += ea;
  }
  EXPECT_GT(total, 0u);
  // The old remap is there and never moves.
  ASSERT_GE(wa->old_remap_gpu(), 0);
  const auto rows = wa->state().Config(static_cast<uint32_t>(wa->old_remap_gpu()))->remap_corr;
  EXPECT_GT(rows, 0u);
  ASSERT_TRUE(wa->Tick(kStart + 20 * kSec).has_value());
  EXPECT_EQ(wa->state().Config(static_cast<uint32_t>(wa->old_remap_gpu()))->remap_corr, rows);
}

TEST_F(NodeWorldTest, PowerCappingShowsOnLoadedGpusOnly) {
  for (bool capping : {true, false}) {
    scenario_.background.power_capping = capping;
    TempDir d;
    auto w = Make(0, 5, d.path());
    ASSERT_TRUE(w);
    const int64_t now = RealtimeNs();
    // GPU 0 trains (tensor-heavy load), GPU 1 idles.
    ASSERT_TRUE(w->state().AddBusyInterval(0, now - 2 * kSec, now + kSec, 1.0, 0.6, 0.5).has_value());
    for (uint32_t g : {0u, 1u}) {
      auto c = w->state().Config(g);
      ASSERT_TRUE(c.has_value());
      EXPECT_EQ(c->power_limit_mw, 700'000u);
      Derived dv;
      ASSERT_TRUE(ComputeDerived(w->state().layout(), w->state().layout().gpus[g], *c, now, &dv));
      const bool capped = (dv.clock_event_reasons & nv::nvmlClocksEventReasonSwPowerCap) != 0;
      EXPECT_EQ(capped, capping && g == 0) << "capping " << capping << " gpu " << g;
      EXPECT_EQ(dv.power_capped, capping && g == 0);
    }
  }
}

TEST_F(NodeWorldTest, BackgroundOffLeavesTheHardwareClean) {
  scenario_.background.enabled = false;
  auto w = Make(0);
  ASSERT_TRUE(w);
  for (int i = 1; i <= 8; ++i) ASSERT_TRUE(w->Tick(kStart + i * 3600 * kSec).has_value());
  EXPECT_EQ(Read(w->kmsg()), "");
  for (uint32_t g = 0; g < 4; ++g) {
    auto c = w->state().Config(g);
    EXPECT_EQ(c->clock_cap_mhz, 0u);
    EXPECT_EQ(c->remap_corr, 0u);
    EXPECT_EQ(
        c->ecc[nv::NVML_MEMORY_ERROR_TYPE_CORRECTED][nv::NVML_VOLATILE_ECC][nv::NVML_MEMORY_LOCATION_DRAM],
        0u);
  }
  EXPECT_EQ(net::Load(&net_.nic(0)->symbol_errors), 0u);
}

}  // namespace
}  // namespace ithbat::sim::node
