#include "collect/node/topology.h"

#include <algorithm>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxAttrBytes = 4096;  // sysfs reports a page as the size
constexpr size_t kMaxPciDevices = 16384;  // bound on the bus listing
constexpr size_t kMaxErrors = 16;

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

// 0000:3b:00.0 (the domain may be longer on VMD domains: 10000:01:00.0).
bool IsPciId(std::string_view s) {
  const size_t c1 = s.find(':');
  if (c1 == std::string_view::npos) return false;
  const size_t c2 = s.find(':', c1 + 1);
  const size_t dot = s.rfind('.');
  if (c2 == std::string_view::npos || dot == std::string_view::npos || dot < c2) return false;
  return IsHex(s.substr(0, c1)) && c2 - c1 == 3 && IsHex(s.substr(c1 + 1, 2)) && dot - c2 == 3 &&
         IsHex(s.substr(c2 + 1, 2)) && s.size() - dot == 2 && IsHex(s.substr(dot + 1));
}

// pci0000:00
bool IsPciRoot(std::string_view s) {
  if (!s.starts_with("pci")) return false;
  s.remove_prefix(3);
  const size_t c = s.find(':');
  return c != std::string_view::npos && IsHex(s.substr(0, c)) && IsHex(s.substr(c + 1));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

Result<uint64_t> ReadHex(const fs::path& path) {
  auto text = ReadFileBounded(path, kMaxAttrBytes);
  if (!text) return std::unexpected(text.error());
  std::string_view v = Trim(*text);
  if (v.starts_with("0x") || v.starts_with("0X")) v.remove_prefix(2);
  if (!IsHex(v) || v.size() > 8) {
    return MakeErrorF(ErrorCode::kParse, "{}: not a hex id: {}", path.string(), QuoteForError(*text));
  }
  uint64_t out = 0;
  for (char c : v) {
    out = out * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return out;
}

// numa_node of a device directory; -1 when absent or unknown.
int ReadNumaNode(const fs::path& dir, std::vector<Error>* errors) {
  auto text = ReadFileBounded(dir / "numa_node", kMaxAttrBytes);
  if (!text) {
    if (text.error().code != ErrorCode::kNotFound && errors->size() < kMaxErrors) errors->push_back(text.error());
    return -1;
  }
  auto v = ParseInt64(Trim(*text));
  if (!v || *v < -1 || *v > 4096) {
    if (errors->size() < kMaxErrors) {
      errors->push_back(MakeErrorF(ErrorCode::kParse, "{}/numa_node: {}", dir.string(), QuoteForError(*text)).error());
    }
    return -1;
  }
  return static_cast<int>(*v);
}

// The PCI device behind a symlink (canonical path resolved, numa_node read).
Result<PciDevice> ResolveDevice(const fs::path& link, std::vector<Error>* errors) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(link, ec);
  if (ec) return MakeErrorF(ErrorCode::kIo, "resolve {}: {}", link.string(), ec.message());
  auto dev = PciDeviceFromPath(canonical);
  if (!dev) return dev;
  // numa_node lives in the PCI function's directory (a virtio NIC's link points below it).
  fs::path dir = canonical;
  while (!dir.empty() && dir.filename() != dev->bus_id && dir != dir.parent_path()) dir = dir.parent_path();
  dev->numa_node = ReadNumaNode(dir, errors);
  return dev;
}

std::vector<std::string> SortedChildren(const fs::path& dir, size_t max, std::error_code& ec) {
  std::vector<std::string> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path().filename().string());
    if (out.size() >= max) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

void AddError(std::vector<Error>* errors, Error e) {
  if (errors->size() < kMaxErrors) errors->push_back(std::move(e));
}

}  // namespace

std::string_view PciLinkName(PciLink link) {
  switch (link) {
    case PciLink::kPix: return "PIX";
    case PciLink::kPxb: return "PXB";
    case PciLink::kPhb: return "PHB";
    case PciLink::kNode: return "NODE";
    case PciLink::kSys: return "SYS";
  }
  return "SYS";
}

Result<PciDevice> PciDeviceFromPath(const fs::path& canonical) {
  PciDevice dev;
  std::vector<std::string> chain;
  for (const fs::path& part : canonical) {
    const std::string s = part.string();
    if (IsPciRoot(s)) {
      dev.root = s;
      chain.clear();
    } else if (!dev.root.empty() && IsPciId(s)) {
      chain.push_back(s);
    } else if (!dev.root.empty() && !chain.empty()) {
      break;  // below the PCI function (virtio0, net/eth0): the function is the device
    }
  }
  if (dev.root.empty() || chain.empty()) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "not a PCI device: {}", QuoteForError(canonical.string()));
  }
  dev.bus_id = std::move(chain.back());
  chain.pop_back();
  dev.bridges = std::move(chain);
  return dev;
}

PciLink ClassifyLink(const PciDevice& a, const PciDevice& b) {
  if (a.root == b.root) {
    size_t common = 0;
    while (common < a.bridges.size() && common < b.bridges.size() && a.bridges[common] == b.bridges[common]) {
      common++;
    }
    if (common > 0) {
      const size_t below_a = a.bridges.size() - common;
      const size_t below_b = b.bridges.size() - common;
      return below_a <= 1 && below_b <= 1 ? PciLink::kPix : PciLink::kPxb;
    }
    return PciLink::kPhb;
  }
  if (a.numa_node == b.numa_node) return PciLink::kNode;  // both -1: no NUMA, one node
  return PciLink::kSys;
}

Result<Topology> ReadTopology(const fs::path& sysfs, size_t max_devices, std::vector<Error>* errors) {
  const fs::path pci = sysfs / "bus" / "pci" / "devices";
  std::error_code ec;
  if (!fs::is_directory(pci, ec)) return MakeErrorF(ErrorCode::kNotFound, "{} is not a directory", pci.string());
  Topology topo;

  const std::vector<std::string> bdfs = SortedChildren(pci, kMaxPciDevices, ec);
  if (ec) return MakeErrorF(ErrorCode::kIo, "list {}: {}", pci.string(), ec.message());
  for (const std::string& bdf : bdfs) {
    const fs::path dir = pci / bdf;
    auto vendor = ReadHex(dir / "vendor");
    if (!vendor) {
      AddError(errors, vendor.error());
      continue;
    }
    if (*vendor != 0x10de) continue;
    auto cls = ReadHex(dir / "class");
    if (!cls) {
      AddError(errors, cls.error());
      continue;
    }
    if ((*cls >> 8) != 0x0302 && (*cls >> 8) != 0x0300) continue;  // NVSwitch, audio, ...
    if (topo.gpus.size() >= max_devices) {
      AddError(errors, MakeErrorF(ErrorCode::kResourceExhausted, "more than {} GPUs; the rest are cut",
                                  max_devices).error());
      break;
    }
    auto dev = ResolveDevice(dir, errors);
    if (!dev) {
      AddError(errors, dev.error());
      continue;
    }
    topo.gpus.push_back(std::move(*dev));
  }
  std::sort(topo.gpus.begin(), topo.gpus.end(),
            [](const PciDevice& x, const PciDevice& y) { return x.bus_id < y.bus_id; });

  // InfiniBand first: a RoCE function appears in both classes and is named by its IB device.
  std::set<std::string> seen_functions;
  bool cut = false;
  for (std::string_view cls : {"infiniband", "net"}) {
    const fs::path dir = sysfs / "class" / cls;
    std::error_code lec;
    if (!fs::is_directory(dir, lec)) continue;
    for (const std::string& name : SortedChildren(dir, kMaxPciDevices, lec)) {
      const fs::path link = dir / name / "device";
      std::error_code eec;
      if (!fs::exists(link, eec)) continue;  // virtual interface
      auto dev = ResolveDevice(link, errors);
      if (!dev) continue;  // not on PCI (a platform or virtual device): no place in this map
      if (!seen_functions.insert(dev->bus_id).second) continue;
      if (topo.nics.size() >= max_devices) {
        cut = true;
        break;
      }
      topo.nics.push_back(TopologyNic{name, std::move(*dev)});
    }
  }
  if (cut) {
    AddError(errors,
             MakeErrorF(ErrorCode::kResourceExhausted, "more than {} NICs; the rest are cut", max_devices).error());
  }
  std::sort(topo.nics.begin(), topo.nics.end(),
            [](const TopologyNic& x, const TopologyNic& y) { return x.name < y.name; });

  for (size_t g = 0; g < topo.gpus.size(); g++) {
    const size_t first = topo.pairs.size();
    size_t best = first;
    for (size_t n = 0; n < topo.nics.size(); n++) {
      topo.pairs.push_back(TopologyPair{g, n, ClassifyLink(topo.gpus[g], topo.nics[n].pci), false});
      // NICs are sorted by name, so strict < keeps the lowest name on a tie.
      if (topo.pairs.back().link < topo.pairs[best].link) best = topo.pairs.size() - 1;
    }
    if (best < topo.pairs.size()) topo.pairs[best].closest = true;
  }
  return topo;
}

}  // namespace ithbat::collect
