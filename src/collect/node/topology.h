#pragma once
// The GPU <-> NIC <-> NUMA map read from the PCIe topology in sysfs, and the collector that
// exports it. Why: a rank whose GPU talks to a NIC across the socket interconnect (SYS) gets a
// fraction of the bandwidth of one behind the same PCIe switch (PIX); the map lets a
// diagnosis tell "slow collective because of placement" from "slow because the fabric is bad".
//
// Sources (all under a sysfs root, "/sys" or a fixture tree):
//   GPUs  <sysfs>/bus/pci/devices/<bdf> with vendor 0x10de and class 0x0302xx (3D) or 0x0300xx (VGA)
//   NICs  <sysfs>/class/infiniband/<dev>/device and <sysfs>/class/net/<if>/device (symlinks to the
//         PCI device); interfaces without a device link (lo, veth, bridges) are virtual and skipped;
//         a net interface on the same PCI function as an InfiniBand device (RoCE) is that device.
// Each device's canonical path (/sys/devices/pci0000:00/0000:00:01.0/.../0000:3b:00.0) gives its
// host bridge (pciDDDD:BB) and its chain of upstream bridges; numa_node gives its node (-1 unknown).
//
// Link classes, named as by `nvidia-smi topo -m`, closest first:
//   PIX   same root port and at most one bridge below the deepest common bridge on each side
//         (the two hang off the same bridge, or off sibling ports of the same PCIe switch)
//   PXB   same root port, more bridges in between
//   PHB   different root ports of the same host bridge (same pciDDDD:BB)
//   NODE  different host bridges, same NUMA node
//   SYS   different NUMA nodes. Unknown nodes: both -1 is a kernel without NUMA (one node) → NODE;
//         only one -1 cannot be shown to share a node → SYS.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collect/node/node_series.h"
#include "core/result.h"

namespace ithbat::collect {

enum class PciLink : uint8_t { kPix = 0, kPxb, kPhb, kNode, kSys };
std::string_view PciLinkName(PciLink link);

struct PciDevice {
  std::string bus_id;                // 0000:3b:00.0, as sysfs names it
  std::string root;                  // pci0000:00
  std::vector<std::string> bridges;  // upstream bridges, root port first, the device excluded
  int numa_node = -1;
};

// The device a canonical sysfs path names: the last PCI id on it, below the last pciDDDD:BB
// component. Pure (no I/O). kInvalidArgument when the path holds no PCI device (a platform or
// virtual device).
Result<PciDevice> PciDeviceFromPath(const std::filesystem::path& canonical);

// Pure; see the table above.
PciLink ClassifyLink(const PciDevice& gpu, const PciDevice& nic);

struct TopologyNic {
  std::string name;  // mlx5_0 or eth0
  PciDevice pci;
};
struct TopologyPair {
  size_t gpu = 0;  // index into Topology::gpus
  size_t nic = 0;  // index into Topology::nics
  PciLink link = PciLink::kSys;
  bool closest = false;  // the nearest NIC of this GPU (ties: lowest NIC name)
};
struct Topology {
  std::vector<PciDevice> gpus;   // sorted by bus id
  std::vector<TopologyNic> nics; // sorted by name
  std::vector<TopologyPair> pairs;
};

// Reads the map. At most max_devices GPUs and max_devices NICs (the rest cut, reported through
// errors). Errors: kNotFound when <sysfs>/bus/pci/devices is not a directory. A device whose
// files cannot be read is skipped and its error appended to *errors (bounded).
Result<Topology> ReadTopology(const std::filesystem::path& sysfs, size_t max_devices, std::vector<Error>* errors);

struct TopologyOptions {
  std::filesystem::path sysfs = "/sys";
  size_t max_devices = 64;  // GPUs, and separately NICs
  uint64_t recompute_every_ticks = 60;
};

// Metrics ithbat_topology_gpu_nic_info{gpu_pci_bus_id,nic,nic_pci_bus_id,link,numa_node,closest}
// (numa_node: the NIC's) and ithbat_topology_gpu_numa_node{gpu_pci_bus_id}.
// Lifecycle as the other node collectors (node_collectors.h). The topology is read at Init and
// every recompute_every_ticks Collects; in between the same values are appended again (no file
// I/O). No PCI tree is degraded mode (Init and Collect return Ok, no series); no GPU is no series
// and no error.
class TopologyCollector final : public NodeCollectorBase {
 public:
  static std::unique_ptr<TopologyCollector> Create(TopologyOptions options);

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  explicit TopologyCollector(TopologyOptions options);
  void Recompute();

  TopologyOptions options_;
  Topology topology_;
  uint64_t ticks_ = 0;
  bool missing_ = false;
};

}  // namespace ithbat::collect
