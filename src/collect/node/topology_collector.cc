#include <utility>

#include <fmt/format.h>

#include "collect/node/topology.h"

namespace ithbat::collect {
namespace {
constexpr size_t kPairDesc = 0;
constexpr size_t kNumaDesc = 1;
}  // namespace

std::unique_ptr<TopologyCollector> TopologyCollector::Create(TopologyOptions options) {
  return std::unique_ptr<TopologyCollector>(new TopologyCollector(std::move(options)));
}

TopologyCollector::TopologyCollector(TopologyOptions options)
    : NodeCollectorBase("topology", 0), options_(std::move(options)) {
  const TopologyOptions defaults;
  if (options_.max_devices == 0) options_.max_devices = defaults.max_devices;
  if (options_.recompute_every_ticks == 0) options_.recompute_every_ticks = defaults.recompute_every_ticks;
  AddDesc("ithbat_topology_gpu_nic_info",
          "PCIe distance between a GPU and a NIC as nvidia-smi topo names it (link: PIX, PXB, PHB, NODE, SYS); "
          "closest=1 marks the GPU's nearest NIC; numa_node is the NIC's; always 1",
          "", MetricType::kGauge, {"gpu_pci_bus_id", "nic", "nic_pci_bus_id", "link", "numa_node", "closest"});
  AddDesc("ithbat_topology_gpu_numa_node", "NUMA node of the GPU's PCI function (-1 unknown)", "",
          MetricType::kGauge, {"gpu_pci_bus_id"});
  // A recompute may change a pair's link or closest label: room for a few generations.
  SetMaxEntities(4 * (options_.max_devices * options_.max_devices + options_.max_devices));
}

void TopologyCollector::Recompute() {
  std::vector<Error> errors;
  auto topo = ReadTopology(options_.sysfs, options_.max_devices, &errors);
  for (const Error& e : errors) ReportError(e);
  if (!topo) {
    topology_ = Topology{};
    if (!missing_) {
      missing_ = true;
      SetDegraded(fmt::format("no PCI tree: {}; no topology series", topo.error().message));
    }
    return;
  }
  if (missing_) {
    missing_ = false;
    SetDegraded("");
  }
  topology_ = std::move(*topo);
}

Status TopologyCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  Recompute();
  return Ok();
}

Status TopologyCollector::CollectImpl(TimeNs t) {
  // Init read the tree; tick 0 reuses it.
  if (ticks_ > 0 && ticks_ % options_.recompute_every_ticks == 0) Recompute();
  ticks_++;
  BeginTick();
  for (const PciDevice& gpu : topology_.gpus) {
    key_.assign(gpu.bus_id);
    Entity* e = GetEntity(key_, [&] { return LabelPairs{{"gpu_pci_bus_id", gpu.bus_id}}; });
    if (e != nullptr) Emit(e, kNumaDesc, t, gpu.numa_node);
  }
  for (const TopologyPair& p : topology_.pairs) {
    const PciDevice& gpu = topology_.gpus[p.gpu];
    const TopologyNic& nic = topology_.nics[p.nic];
    const std::string_view link = PciLinkName(p.link);
    key_.assign(gpu.bus_id).push_back('\0');
    key_.append(nic.name).push_back('\0');
    key_.append(nic.pci.bus_id).push_back('\0');
    key_.append(link).push_back('\0');
    key_.append(fmt::format_int(nic.pci.numa_node).c_str()).push_back('\0');
    key_.push_back(p.closest ? '1' : '0');
    Entity* e = GetEntity(key_, [&] {
      return LabelPairs{{"gpu_pci_bus_id", gpu.bus_id}, {"nic", nic.name},
                        {"nic_pci_bus_id", nic.pci.bus_id}, {"link", std::string(link)},
                        {"numa_node", std::to_string(nic.pci.numa_node)},
                        {"closest", p.closest ? "1" : "0"}};
    });
    if (e != nullptr) Emit(e, kPairDesc, t, 1);
  }
  EndTick();
  return Ok();
}

}  // namespace ithbat::collect
