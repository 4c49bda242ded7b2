#include "node/node_world.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/core.h>

#include "collect/gpu/nvml_abi.h"
#include "core/file_util.h"
#include "node/files.h"

namespace ithbat::sim::node {
namespace {

namespace nv = ::ithbat::nvml;
namespace fs = std::filesystem;
using scenario::EventKind;

constexpr size_t kMaxHostFileBytes = 1 << 20;
constexpr uint64_t kMaxArrivalsPerTick = 100000;  // a hostile rate must not spin the ticker
// port_xmit_wait counts "ticks" the port had data but no credits; the tick length is the
// HCA's. We model one tick per microsecond of held sends.
constexpr uint64_t kXmitWaitNsPerTick = 1000;
constexpr uint64_t kIbMtuBytes = 4096;

GpuModel ToFakeModel(scenario::GpuModel m) {
  switch (m) {
    case scenario::GpuModel::kH200Sxm:
      return GpuModel::kH200Sxm;
    case scenario::GpuModel::kH100Sxm:
    default:
      return GpuModel::kH100Sxm;
  }
}

// Exp(rate) in seconds; rate > 0.
double ExpDraw(std::mt19937_64& rng, double rate) {
  std::exponential_distribution<double> d(rate);
  return d(rng);
}

// "0000:18:00.0" from the fake's config.
std::string SysfsBdf(const GpuConfig& c) {
  return fmt::format("{:04x}:{:02x}:{:02x}.0", c.pci_domain, c.pci_bus, c.pci_device);
}
// "PCI:0000:18:00" as the driver prints it in Xid lines.
std::string XidPci(const GpuConfig& c) {
  return fmt::format("PCI:{:04x}:{:02x}:{:02x}", c.pci_domain, c.pci_bus, c.pci_device);
}

// The driver's text after the Xid number (the forms real drivers print; see
// ../shared/data/xid). `pid`/`name` are printed only for codes the driver ties to a process.
std::string XidText(uint32_t xid, int64_t pid, std::string_view name, std::mt19937_64& rng) {
  const std::string who = pid > 0 ? fmt::format("pid={}, name={}, ", pid, name)
                                  : std::string("pid='<unknown>', name=<unknown>, ");
  std::uniform_int_distribution<int> small(0, 7);
  switch (xid) {
    case 13:
      return fmt::format("{}Graphics SM Warp Exception on (GPC {}, TPC {}, SM {}): Out Of Range Address", who,
                         small(rng), small(rng) % 4, small(rng) % 2);
    case 31:
      return fmt::format(
          "{}Ch 000000{:02x}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{} faulted @ "
          "0x7f{:02x}_{:08x}. "
          "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
          who, 8 + small(rng), small(rng), 0x20 + small(rng), 0x10000 * (1 + small(rng)));
    case 43:
      return fmt::format("{}Ch 000000{:02x}", who, 8 + small(rng));
    case 45:
      return fmt::format("{}Ch 000000{:02x}", who, 8 + small(rng));
    case 48:
      return fmt::format(
          "{}An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
          "partition {}, "
          "subpartition {}.",
          who, small(rng), small(rng) % 2);
    case 63:
      return fmt::format("{}Row Remapper: New row marked for remapping, reset gpu to activate.", who);
    case 64:
      return fmt::format("{}Row Remapper: Failed to remap row, reset gpu to activate.", who);
    case 74:
      return fmt::format("NVLink: fatal error detected on link {}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
                         small(rng) + 8 * (small(rng) % 2));
    case 79:
      return "GPU has fallen off the bus.";
    case 94:
      return fmt::format("{}Contained ECC error", who);
    case 95:
      return fmt::format("{}Uncontained ECC error", who);
    case 119:
      return fmt::format(
          "{}Timeout after 6s of waiting for RPC response from GPU{} GSP! Expected function 76 "
          "(GSP_RM_CONTROL) "
          "(0x20801813 0x4c).",
          who, small(rng));
    default:
      return fmt::format("{}Ch 000000{:02x}", who, 8 + small(rng));
  }
}

// IB signalling rates by per-lane speed (Gb/s per lane → generation name).
std::string_view IbGeneration(double lane_gbps) {
  if (lane_gbps >= 190) return "XDR";
  if (lane_gbps >= 90) return "NDR";
  if (lane_gbps >= 45) return "HDR";
  if (lane_gbps >= 24) return "EDR";
  if (lane_gbps >= 13) return "FDR";
  if (lane_gbps >= 9) return "QDR";
  if (lane_gbps >= 4) return "DDR";
  return "SDR";
}

std::string FormatGbps(double gbps) {
  if (std::fabs(gbps - std::round(gbps)) < 1e-9)
    return fmt::format("{}", static_cast<int64_t>(std::round(gbps)));
  return fmt::format("{:g}", gbps);
}

bool IsGpuEvent(EventKind k) {
  switch (k) {
    case EventKind::kThermalThrottle:
    case EventKind::kPowerCap:
    case EventKind::kEccUncorrectable:
    case EventKind::kEccCorrected:
    case EventKind::kXid:
    case EventKind::kRowRemap:
    case EventKind::kNvlinkErrors:
    case EventKind::kGpuLost:
    case EventKind::kSilentCorruption:
      return true;
    default:
      return false;
  }
}
bool IsNicEvent(EventKind k) {
  return k == EventKind::kIbLinkDegrade || k == EventKind::kIbLinkDown || k == EventKind::kIbCongestion;
}

}  // namespace

NodeWorld::NodeWorld(Options options) : options_(std::move(options)) {}
NodeWorld::~NodeWorld() = default;

Result<std::unique_ptr<NodeWorld>> NodeWorld::Create(const Options& options) {
  if (options.scenario == nullptr) return MakeError(ErrorCode::kInvalidArgument, "NodeWorld: no scenario");
  if (options.node_index >= options.scenario->nodes.size()) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "NodeWorld: node index {} out of range",
                      options.node_index);
  }
  if (!(options.time_compression > 0) || !(options.byte_scale > 0)) {
    return MakeError(ErrorCode::kInvalidArgument, "NodeWorld: time_compression and byte_scale must be > 0");
  }
  const auto& node = options.scenario->nodes[options.node_index];
  if (options.nic_slots.size() != node.nics.size()) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "NodeWorld {}: {} NIC slots for {} NICs", node.name,
                      options.nic_slots.size(), node.nics.size());
  }
  if (node.gpus.count < 0 || node.gpus.count > static_cast<int64_t>(kMaxGpus)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "NodeWorld {}: {} GPUs (the fake holds at most {})",
                      node.name, node.gpus.count, kMaxGpus);
  }
  std::unique_ptr<NodeWorld> w(new NodeWorld(options));
  if (Status s = w->Init(); !s) return std::unexpected(s.error());
  return w;
}

Status NodeWorld::Init() {
  node_ = &options_.scenario->nodes[options_.node_index];
  name_ = node_->name;
  if (options_.run_start_ns == 0) options_.run_start_ns = RealtimeNs();
  rng_.seed(StreamSeed(options_.seed, "node/" + name_));
  std::error_code ec;
  for (const fs::path& d : {options_.dir, procfs(), sysfs()}) {
    fs::create_directories(d, ec);
    if (ec) return MakeErrorF(ErrorCode::kIo, "create {}: {}", d.string(), ec.message());
  }

  std::vector<GpuModel> models(static_cast<size_t>(node_->gpus.count), ToFakeModel(node_->gpus.model));
  auto st = FakeState::Create(state_path().string(), models, fmt::format("{}/{:016x}", name_, options_.seed));
  if (!st) return std::unexpected(st.error());
  state_ = std::move(*st);

  const auto& bg = options_.scenario->background;
  const auto& spec = scenario::ModelSpec(node_->gpus.model);
  for (uint32_t g = 0; g < models.size(); ++g) {
    auto c = state_->Config(g);
    if (!c) return std::unexpected(c.error());
    gpus_.push_back(GpuInfo{g, c->uuid, c->pci_bus_id});
    GpuBase b;
    b.max_sm_mhz = c->max_clock_mhz[nv::NVML_CLOCK_SM];
    b.idle_temp_c = c->idle_temp_c;
    b.sw_slowdown_c = c->sw_thermal_slowdown_c;
    b.power_limit_mw = static_cast<uint32_t>(spec.power_limit_w) * 1000;
    b.min_power_limit_mw = static_cast<uint32_t>(spec.min_power_limit_w) * 1000;
    b.power_per_activity_mw = c->power_per_activity_mw;
    b.rng.seed(StreamSeed(options_.seed, fmt::format("node/{}/gpu/{}/ecc", name_, g)));
    if (bg.enabled) {
      std::mt19937_64 r(StreamSeed(options_.seed, fmt::format("node/{}/gpu/{}/clock", name_, g)));
      const double spread = std::clamp(bg.clock_spread_pct, 0.0, 50.0) / 100.0;
      std::uniform_real_distribution<double> u(-spread, spread);
      const double f = 1.0 + u(r);
      // A cap at or above the max clock changes nothing: no cap then.
      if (f < 1.0) b.clock_cap_mhz = static_cast<uint32_t>(std::lround(b.max_sm_mhz * f));
      const double rate = bg.corrected_ecc_per_hour / 3600.0 * options_.time_compression;
      b.ecc_rate = rate > 0 ? rate : 0;
      if (b.ecc_rate > 0) b.next_ecc_s = ExpDraw(b.rng, b.ecc_rate);
    }
    base_.push_back(std::move(b));
  }
  for (size_t k = 0; k < node_->nics.size(); ++k) {
    const auto& n = node_->nics[k];
    NicInfo info;
    info.name = n.name;
    info.port = static_cast<uint32_t>(std::max<int64_t>(1, n.port));
    info.slot = options_.nic_slots[k];
    info.gpus = n.gpus;
    nics_.push_back(std::move(info));
    NicRuntime rt;
    rt.rng.seed(StreamSeed(options_.seed, fmt::format("node/{}/nic/{}/symbols", name_, n.name)));
    if (bg.enabled) {
      const double rate = bg.ib_symbol_errors_per_hour / 3600.0 * options_.time_compression;
      rt.symbol_rate = rate > 0 ? rate : 0;
      if (rt.symbol_rate > 0) rt.next_symbol_s = ExpDraw(rt.rng, rt.symbol_rate);
    }
    nic_rt_.push_back(std::move(rt));
  }
  if (Status s = BuildPciTree(); !s) return s;

  // Background state fixed at creation.
  std::mt19937_64 once(StreamSeed(options_.seed, "node/" + name_ + "/once"));
  if (bg.enabled && !gpus_.empty()) {
    // Power: the limit stays the model's enforced default (what NVML reports on real SXM
    // boards); what varies is the demand curve of the fake's power model (P = idle + k *
    // activity, capped at the limit). With power capping, a GPU under a training load (activity
    // around 0.7-0.8) asks for more than its limit, as loaded H100/H200s do, and runs capped with
    // the SW power cap reason; each GPU draws its own k (silicon differs). Without it, a fully
    // loaded GPU just fits under the limit.
    for (uint32_t g = 0; g < gpus_.size(); ++g) {
      auto c = state_->Config(g);
      if (!c) return std::unexpected(c.error());
      const double head = base_[g].power_limit_mw > c->idle_power_mw
                              ? static_cast<double>(base_[g].power_limit_mw - c->idle_power_mw)
                              : 0.0;
      std::mt19937_64 r(StreamSeed(options_.seed, fmt::format("node/{}/gpu/{}/power", name_, g)));
      std::uniform_real_distribution<double> u(1.35, 1.5);
      const auto k = static_cast<uint32_t>(head * (bg.power_capping ? u(r) : 0.97));
      if (Status s = state_->Modify(g, [&](GpuConfig& cfg) { cfg.power_per_activity_mw = k; }); !s) return s;
      base_[g].power_per_activity_mw = k;
    }
    if (bg.old_row_remap) {
      std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(gpus_.size() - 1));
      std::uniform_int_distribution<uint32_t> rows(1, 3);
      const uint32_t g = pick(once);
      if (Status s = state_->SetRemappedRows(g, rows(once), 0, false, false); !s) return s;
      old_remap_gpu_ = static_cast<int>(g);
    }
  }
  std::uniform_int_distribution<uint64_t> seq0(1000, 90000);
  kmsg_seq_ = seq0(once);
  {
    // An empty log to start with: the agent follows it from its end.
    if (Status s = WriteFileAtomic(kmsg(), ""); !s) return s;
  }
  if (bg.enabled && bg.earlier_xid > 0 && !gpus_.empty()) {
    std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(gpus_.size() - 1));
    const uint32_t g = pick(once);
    // Earlier in the day: 1-6 hours before the run (never before boot).
    const int64_t boot_at_start_us =
        (BoottimeNs() - std::max<int64_t>(0, RealtimeNs() - options_.run_start_ns)) / 1000;
    std::uniform_int_distribution<int64_t> ago(3600LL * 1'000'000, 6 * 3600LL * 1'000'000);
    int64_t usec = boot_at_start_us - ago(once);
    if (usec < 1'000'000) usec = std::max<int64_t>(1'000'000, boot_at_start_us / 2);
    std::uniform_int_distribution<int64_t> pid(20000, 3'900'000);
    auto c = state_->Config(g);
    if (!c) return std::unexpected(c.error());
    const uint32_t xid = static_cast<uint32_t>(bg.earlier_xid);
    const std::string msg =
        fmt::format("NVRM: Xid ({}): {}, {}", XidPci(*c), xid, XidText(xid, pid(once), "python3", once));
    if (Status s = AppendKmsg(4, msg, static_cast<uint64_t>(usec)); !s) return s;
    earlier_xid_gpu_ = static_cast<int>(g);
  }
  if (Status s = ApplySettings(options_.run_start_ns); !s) return s;
  for (size_t k = 0; k < nics_.size(); ++k) {
    if (Status s = WriteNicFiles(k, true); !s) return s;
  }
  if (Status s = MirrorHostFiles(); !s) return s;
  last_tick_ns_ = options_.run_start_ns;
  return Ok();
}

// The PCIe tree: each NIC with the GPUs it serves behind one PCIe switch (sibling downstream
// ports: PIX), every group under its own host bridge; groups whose first GPU is in the upper
// half of the node on NUMA node 1 (two sockets), the rest on node 0. GPUs that no NIC lists get
// a host bridge of their own.
Status NodeWorld::BuildPciTree() {
  const fs::path sys = sysfs();
  std::set<uint32_t> used;
  std::vector<GpuConfig> cfg;
  for (uint32_t g = 0; g < gpus_.size(); ++g) {
    auto c = state_->Config(g);
    if (!c) return std::unexpected(c.error());
    used.insert(c->pci_bus);
    cfg.push_back(*c);
  }
  uint32_t next_bus = 0x01;
  auto alloc = [&]() -> uint32_t {
    while (next_bus < 0xff && used.count(next_bus)) ++next_bus;
    const uint32_t b = next_bus < 0xff ? next_bus : 0xfe;
    used.insert(b);
    ++next_bus;
    return b;
  };
  struct Group {
    int nic = -1;
    std::vector<uint32_t> gpus;
  };
  std::vector<Group> groups;
  std::vector<bool> placed(gpus_.size(), false);
  for (size_t k = 0; k < nics_.size(); ++k) {
    Group grp;
    grp.nic = static_cast<int>(k);
    for (int64_t g : nics_[k].gpus) {
      if (g < 0 || static_cast<size_t>(g) >= gpus_.size() || placed[static_cast<size_t>(g)]) continue;
      placed[static_cast<size_t>(g)] = true;
      grp.gpus.push_back(static_cast<uint32_t>(g));
    }
    groups.push_back(std::move(grp));
  }
  for (uint32_t g = 0; g < gpus_.size(); ++g) {
    if (!placed[g]) groups.push_back(Group{-1, {g}});
  }
  auto write = [&](const fs::path& p, std::string_view content) { return WriteFileAtomic(p, content); };
  auto link = [&](const fs::path& target, const fs::path& at) -> Status {
    std::error_code ec;
    fs::create_directories(at.parent_path(), ec);
    fs::remove(at, ec);
    fs::create_directory_symlink(fs::relative(target, at.parent_path(), ec), at, ec);
    if (ec) return MakeErrorF(ErrorCode::kIo, "symlink {}: {}", at.string(), ec.message());
    return Ok();
  };
  auto device = [&](const fs::path& dir, std::string_view vendor, std::string_view device_id,
                    std::string_view cls, int numa) -> Status {
    if (Status s = write(dir / "vendor", fmt::format("{}\n", vendor)); !s) return s;
    if (Status s = write(dir / "device", fmt::format("{}\n", device_id)); !s) return s;
    if (Status s = write(dir / "class", fmt::format("{}\n", cls)); !s) return s;
    return write(dir / "numa_node", fmt::format("{}\n", numa));
  };
  const size_t half = (gpus_.size() + 1) / 2;
  for (const Group& grp : groups) {
    const int numa = !grp.gpus.empty() && grp.gpus.front() >= half && gpus_.size() > 1 ? 1 : 0;
    const uint32_t hb = alloc();
    const uint32_t up = alloc();
    const uint32_t down = alloc();
    const fs::path sw = sys / "devices" / fmt::format("pci0000:{:02x}", hb) /
                        fmt::format("0000:{:02x}:01.0", hb) / fmt::format("0000:{:02x}:00.0", up);
    uint32_t port = 0;
    for (uint32_t g : grp.gpus) {
      const std::string bdf = SysfsBdf(cfg[g]);
      const fs::path dir = sw / fmt::format("0000:{:02x}:{:02x}.0", down, port++) / bdf;
      const std::string dev_id = fmt::format("0x{:04x}", cfg[g].pci_device_id >> 16);
      if (Status s = device(dir, "0x10de", dev_id, "0x030200", numa); !s) return s;
      if (Status s = link(dir, sys / "bus" / "pci" / "devices" / bdf); !s) return s;
    }
    if (grp.nic >= 0) {
      const uint32_t nb = alloc();
      const std::string bdf = fmt::format("0000:{:02x}:00.0", nb);
      const fs::path dir = sw / fmt::format("0000:{:02x}:{:02x}.0", down, port++) / bdf;
      // Mellanox ConnectX-7 (0x1021), class InfiniBand controller.
      if (Status s = device(dir, "0x15b3", "0x1021", "0x020700", numa); !s) return s;
      if (Status s = link(dir, sys / "bus" / "pci" / "devices" / bdf); !s) return s;
      NicInfo& nic = nics_[static_cast<size_t>(grp.nic)];
      nic.pci_bus_id = bdf;
      if (Status s = link(dir, sys / "class" / "infiniband" / nic.name / "device"); !s) return s;
    }
  }
  return Ok();
}

Status NodeWorld::WriteNicFiles(size_t k, bool force) {
  const NicInfo& nic = nics_[k];
  NicRuntime& rt = nic_rt_[k];
  const fs::path port = sysfs() / "class" / "infiniband" / nic.name / "ports" / fmt::format("{}", nic.port);
  net::NicSlot* slot = options_.net != nullptr ? options_.net->nic(nic.slot) : nullptr;
  uint64_t tx = 0, rx = 0, wait = 0, other = 0, symbols = 0, downed = 0, health = net::kFullPpm;
  if (slot != nullptr) {
    tx = net::Load(&slot->tx_bytes);
    rx = net::Load(&slot->rx_bytes);
    wait = net::Load(&slot->tx_wait_ns);
    other = net::Load(&slot->other_tx_bytes);
    symbols = net::Load(&slot->symbol_errors);
    downed = net::Load(&slot->link_downed);
    health = net::Load(&slot->health_ppm);
  } else {
    symbols = rt.local_symbols;
    downed = rt.local_downed;
    health = rt.local_health_ppm;
  }
  const uint64_t xmit = tx + other;
  const fs::path c = port / "counters";
  const std::pair<std::string_view, uint64_t> counters[] = {
      {"port_xmit_data", xmit / 4},
      {"port_rcv_data", rx / 4},
      {"port_xmit_packets", (xmit + kIbMtuBytes - 1) / kIbMtuBytes},
      {"port_rcv_packets", (rx + kIbMtuBytes - 1) / kIbMtuBytes},
      {"port_xmit_wait", wait / kXmitWaitNsPerTick},
      {"symbol_error", symbols},
      {"link_downed", downed},
      {"link_error_recovery", rt.link_error_recovery},
      {"port_rcv_errors", 0},
      {"port_rcv_remote_physical_errors", 0},
      {"port_xmit_discards", 0},
      {"excessive_buffer_overrun_errors", 0},
      {"local_link_integrity_errors", 0},
      {"VL15_dropped", 0},
  };
  for (const auto& [file, v] : counters) {
    if (Status s = files_.Write(c / file, fmt::format("{}\n", v), force); !s) return s;
  }
  const fs::path hw = port / "hw_counters";
  for (std::string_view name :
       {"out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err"}) {
    if (Status s = files_.Write(hw / name, "0\n", force); !s) return s;
  }
  if (Status s = files_.Write(hw / "lifespan", "12\n", force); !s) return s;

  const bool up = health > 0;
  if (Status s = files_.Write(port / "state", up ? "4: ACTIVE\n" : "1: DOWN\n", force); !s) return s;
  if (Status s = files_.Write(port / "phys_state", up ? "5: LinkUp\n" : "2: Polling\n", force); !s) return s;
  // A degraded link shows as downtrained (fewer lanes); 4X, 2X, 1X are the widths HCAs train to.
  const double line_gbps =
      slot != nullptr ? static_cast<double>(slot->rate_bps) / 1e9 : node_->nics[k].rate_gbps;
  const double h = static_cast<double>(health) / net::kFullPpm;
  const int lanes = !up ? 4 : h >= 0.75 ? 4 : h >= 0.375 ? 2 : 1;
  const double lane_gbps = line_gbps / 4;
  const std::string rate =
      up ? fmt::format("{} Gb/sec ({}X {})\n", FormatGbps(lane_gbps * lanes), lanes, IbGeneration(lane_gbps))
         : fmt::format("{} Gb/sec ({}X {})\n", FormatGbps(line_gbps), 4, IbGeneration(lane_gbps));
  return files_.Write(port / "rate", rate, force);
}

Status NodeWorld::MirrorHostFiles() {
  static constexpr std::string_view kFiles[] = {"stat",         "meminfo",         "loadavg",    "vmstat",
                                                "pressure/cpu", "pressure/memory", "pressure/io"};
  Status first = Ok();
  for (std::string_view f : kFiles) {
    auto text = ReadFileBounded(options_.host_procfs / f, kMaxHostFileBytes);
    if (!text) continue;  // no PSI on this host: the node has none either
    if (Status s = files_.Write(procfs() / f, *text); !s && first) first = s;
  }
  return first;
}

Status NodeWorld::AppendKmsg(int level, const std::string& message, uint64_t usec) {
  // /dev/kmsg record: "pri,seq,usec,flags;message"; pri = facility (kern = 0) * 8 + level.
  const std::string line = fmt::format("{},{},{},-;{}\n", level, kmsg_seq_++, usec, message);
  FILE* f = std::fopen(kmsg().c_str(), "ae");
  if (f == nullptr) return MakeErrorF(ErrorCode::kIo, "open {}", kmsg().string());
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return MakeErrorF(ErrorCode::kIo, "append {}", kmsg().string());
  kmsg_lines_.push_back(message);
  return Ok();
}

Status NodeWorld::LogXid(uint32_t gpu, uint32_t xid) {
  auto c = state_->Config(gpu);
  if (!c) return std::unexpected(c.error());
  const std::string msg = fmt::format("NVRM: Xid ({}): {}, {}", XidPci(*c), xid, XidText(xid, -1, "", rng_));
  return AppendKmsg(4, msg, static_cast<uint64_t>(BoottimeNs() / 1000));
}

std::string NodeWorld::EventKey(const Event& e) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}", static_cast<int>(e.kind), e.id, e.gpu, e.nic, e.at_s, e.at_step,
                     e.job);
}

Result<int> NodeWorld::NicIndex(const std::string& name) const {
  for (size_t k = 0; k < nics_.size(); ++k) {
    if (nics_[k].name == name) return static_cast<int>(k);
  }
  return MakeErrorF(ErrorCode::kInvalidArgument, "node {} has no NIC '{}'", name_, name);
}

Status NodeWorld::StartEvent(const Event& e, int64_t now_ns) {
  if (!IsGpuEvent(e.kind) && !IsNicEvent(e.kind)) return Ok();
  if (e.node != name_) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "event {} is for node '{}', not '{}'", e.id, e.node,
                      name_);
  }
  uint32_t gpu = 0;
  int nic = -1;
  if (IsGpuEvent(e.kind)) {
    if (e.gpu < 0 || static_cast<size_t>(e.gpu) >= gpus_.size()) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "event {}: node {} has no GPU {}", e.id, name_, e.gpu);
    }
    gpu = static_cast<uint32_t>(e.gpu);
  } else {
    auto k = NicIndex(e.nic);
    if (!k) return std::unexpected(k.error());
    nic = *k;
  }
  active_[EventKey(e)] = Active{e, now_ns};
  const uint64_t count = static_cast<uint64_t>(std::max<int64_t>(1, e.count));
  switch (e.kind) {
    case EventKind::kEccUncorrectable: {
      if (Status s = state_->AddEccErrors(gpu, nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                          nv::NVML_MEMORY_LOCATION_DRAM, count);
          !s)
        return s;
      const uint32_t xid = e.xid > 0 ? static_cast<uint32_t>(e.xid) : 48;
      if (Status s = LogXid(gpu, xid); !s) return s;
      if (Status s = state_->InjectXid(gpu, xid); !s) return s;
      auto c = state_->Config(gpu);
      if (!c) return std::unexpected(c.error());
      // The failing row is queued for remapping at the next reset.
      return state_->SetRemappedRows(gpu, c->remap_corr, c->remap_unc + 1, true, c->remap_failure != 0);
    }
    case EventKind::kEccCorrected:
      return state_->AddEccErrors(gpu, nv::NVML_MEMORY_ERROR_TYPE_CORRECTED, nv::NVML_MEMORY_LOCATION_DRAM,
                                  count);
    case EventKind::kXid: {
      const uint32_t xid = e.xid > 0 ? static_cast<uint32_t>(e.xid) : 13;
      if (Status s = LogXid(gpu, xid); !s) return s;
      return state_->InjectXid(gpu, xid);
    }
    case EventKind::kRowRemap: {
      auto c = state_->Config(gpu);
      if (!c) return std::unexpected(c.error());
      const uint32_t xid = e.failure ? 64 : 63;
      if (Status s = state_->SetRemappedRows(gpu, c->remap_corr + static_cast<uint32_t>(count), c->remap_unc,
                                             !e.failure, e.failure || c->remap_failure != 0);
          !s)
        return s;
      if (Status s = LogXid(gpu, xid); !s) return s;
      return state_->InjectXid(gpu, xid);
    }
    case EventKind::kNvlinkErrors: {
      auto c = state_->Config(gpu);
      if (!c) return std::unexpected(c.error());
      if (e.link < 0 || static_cast<uint32_t>(e.link) >= c->nvlink_count) {
        return MakeErrorF(ErrorCode::kInvalidArgument, "event {}: GPU {} has no NVLink {}", e.id, gpu,
                          e.link);
      }
      const auto link = static_cast<uint32_t>(e.link);
      if (Status s = state_->AddNvLinkErrors(gpu, link, nv::NVML_NVLINK_ERROR_DL_CRC_FLIT, count); !s)
        return s;
      return state_->AddNvLinkErrors(gpu, link, nv::NVML_NVLINK_ERROR_DL_REPLAY, count);
    }
    case EventKind::kGpuLost:
      if (Status s = LogXid(gpu, 79); !s) return s;
      if (Status s = state_->InjectXid(gpu, 79); !s) return s;
      return state_->SetLost(gpu, true);
    case EventKind::kSilentCorruption:
      return Ok();  // nothing visible: that is the point
    case EventKind::kIbLinkDegrade:
      nic_rt_[static_cast<size_t>(nic)].link_error_recovery++;
      break;
    case EventKind::kIbLinkDown: {
      NicRuntime& rt = nic_rt_[static_cast<size_t>(nic)];
      if (net::NicSlot* slot = options_.net != nullptr ? options_.net->nic(nics_[nic].slot) : nullptr) {
        net::Add(&slot->link_downed, 1);
      } else {
        rt.local_downed++;
      }
      break;
    }
    default:
      break;
  }
  if (Status s = ApplySettings(now_ns); !s) return s;
  return nic >= 0 ? WriteNicFiles(static_cast<size_t>(nic), false) : Ok();
}

Status NodeWorld::EndEvent(const Event& e, int64_t now_ns) {
  auto it = active_.find(EventKey(e));
  if (it == active_.end()) return Ok();
  const Event ended = it->second.event;
  active_.erase(it);
  if (ended.kind == EventKind::kGpuLost && ended.gpu >= 0) {
    // Recovered (reset): the GPU answers again unless another loss is still active.
    bool still = false;
    for (const auto& [k, a] : active_)
      still |= a.event.kind == EventKind::kGpuLost && a.event.gpu == ended.gpu;
    if (!still) {
      if (Status s = state_->SetLost(static_cast<uint32_t>(ended.gpu), false); !s) return s;
    }
  }
  if (Status s = ApplySettings(now_ns); !s) return s;
  if (IsNicEvent(ended.kind)) {
    auto k = NicIndex(ended.nic);
    if (k) return WriteNicFiles(static_cast<size_t>(*k), false);
  }
  return Ok();
}

Status NodeWorld::ApplySettings(int64_t now_ns) {
  for (uint32_t g = 0; g < gpus_.size(); ++g) {
    const GpuBase& b = base_[g];
    uint32_t cap = b.clock_cap_mhz;
    uint32_t limit = b.power_limit_mw;
    int32_t temp_offset = 0;
    uint64_t forced = 0;
    for (const auto& [key, a] : active_) {
      const Event& e = a.event;
      if (e.gpu != static_cast<int64_t>(g)) continue;
      if (e.kind == EventKind::kThermalThrottle) {
        const double f = std::clamp(e.clock_factor, 0.05, 1.0);
        const auto c = static_cast<uint32_t>(std::lround(b.max_sm_mhz * f));
        cap = cap == 0 ? c : std::min(cap, c);
        // Hot enough that the fake reports the thermal slowdown even when idle.
        temp_offset = std::max(temp_offset, b.sw_slowdown_c - b.idle_temp_c + 4);
        forced |= nv::nvmlClocksEventReasonSwThermalSlowdown;
      } else if (e.kind == EventKind::kPowerCap) {
        const auto w = static_cast<uint32_t>(std::max(0.0, e.power_limit_w) * 1000.0);
        limit = std::min(limit, std::max(w, b.min_power_limit_mw));
      }
    }
    auto c = state_->Config(g);
    if (!c) return std::unexpected(c.error());
    if (c->clock_cap_mhz != cap || c->power_limit_mw != limit || c->temp_offset_c != temp_offset ||
        c->forced_clock_event_reasons != forced) {
      if (Status s = state_->Modify(g,
                                    [&](GpuConfig& cfg) {
                                      cfg.clock_cap_mhz = cap;
                                      cfg.power_limit_mw = limit;
                                      cfg.temp_offset_c = temp_offset;
                                      cfg.forced_clock_event_reasons = forced;
                                    });
          !s)
        return s;
    }
  }
  for (size_t k = 0; k < nics_.size(); ++k) {
    double health = 1.0;
    double congestion = 0.0;
    for (const auto& [key, a] : active_) {
      const Event& e = a.event;
      if (!IsNicEvent(e.kind) || e.nic != nics_[k].name) continue;
      if (e.kind == EventKind::kIbLinkDegrade) {
        const double ramp_ns = std::max(0.0, e.ramp_s) * 1e9;
        const double p =
            ramp_ns > 0 ? std::clamp(static_cast<double>(now_ns - a.start_ns) / ramp_ns, 0.0, 1.0) : 1.0;
        const double f = std::clamp(e.bandwidth_factor, 0.0, 1.0);
        health = std::min(health, 1.0 + (f - 1.0) * p);
      } else if (e.kind == EventKind::kIbLinkDown) {
        health = 0;
      } else if (e.kind == EventKind::kIbCongestion) {
        congestion = std::max(congestion, 1.0 - std::clamp(e.bandwidth_factor, 0.0, 1.0));
      }
    }
    const auto h = static_cast<uint64_t>(std::llround(health * net::kFullPpm));
    const auto cg = static_cast<uint64_t>(std::llround(congestion * net::kFullPpm));
    if (net::NicSlot* slot = options_.net != nullptr ? options_.net->nic(nics_[k].slot) : nullptr) {
      if (net::Load(&slot->health_ppm) != h) net::Store(&slot->health_ppm, h);
      if (net::Load(&slot->congestion_ppm) != cg) net::Store(&slot->congestion_ppm, cg);
    } else {
      nic_rt_[k].local_health_ppm = h;
    }
  }
  return Ok();
}

Status NodeWorld::Tick(int64_t now_ns) {
  Status first = Ok();
  auto keep = [&](Status s) {
    if (!s && first) first = std::move(s);
  };
  const double elapsed_s = static_cast<double>(std::max<int64_t>(0, now_ns - options_.run_start_ns)) / 1e9;
  const double dt_s = static_cast<double>(std::max<int64_t>(0, now_ns - last_tick_ns_)) / 1e9;
  last_tick_ns_ = std::max(last_tick_ns_, now_ns);

  // Background corrected ECC: arrival times drawn from each GPU's stream, so the count at a
  // given run time does not depend on how often we tick.
  for (uint32_t g = 0; g < gpus_.size(); ++g) {
    GpuBase& b = base_[g];
    if (b.ecc_rate <= 0) continue;
    uint64_t n = 0;
    while (b.next_ecc_s <= elapsed_s && n < kMaxArrivalsPerTick) {
      ++n;
      b.next_ecc_s += ExpDraw(b.rng, b.ecc_rate);
    }
    if (n > 0)
      keep(state_->AddEccErrors(g, nv::NVML_MEMORY_ERROR_TYPE_CORRECTED, nv::NVML_MEMORY_LOCATION_DRAM, n));
  }
  keep(ApplySettings(now_ns));
  for (size_t k = 0; k < nics_.size(); ++k) {
    NicRuntime& rt = nic_rt_[k];
    uint64_t n = 0;
    if (rt.symbol_rate > 0) {
      while (rt.next_symbol_s <= elapsed_s && n < kMaxArrivalsPerTick) {
        ++n;
        rt.next_symbol_s += ExpDraw(rt.rng, rt.symbol_rate);
      }
    }
    // Events' symbol error rates (per scenario second): deterministic in elapsed time.
    for (const auto& [key, a] : active_) {
      const Event& e = a.event;
      if (e.kind != EventKind::kIbLinkDegrade || e.nic != nics_[k].name || e.symbol_errors_per_s <= 0)
        continue;
      rt.symbol_carry += e.symbol_errors_per_s * options_.time_compression * dt_s;
    }
    if (rt.symbol_carry >= 1) {
      const double whole = std::floor(std::min(rt.symbol_carry, 1e12));
      n += static_cast<uint64_t>(whole);
      rt.symbol_carry -= whole;
    }
    if (n > 0) {
      if (net::NicSlot* slot = options_.net != nullptr ? options_.net->nic(nics_[k].slot) : nullptr) {
        net::Add(&slot->symbol_errors, n);
      } else {
        rt.local_symbols += n;
      }
    }
    keep(WriteNicFiles(k, false));
  }
  keep(MirrorHostFiles());
  return first;
}

}  // namespace ithbat::sim::node
