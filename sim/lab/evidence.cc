#include "lab/evidence.h"

#include <filesystem>

#include <fmt/core.h>

namespace ithbat::sim::lab {

Result<Evidence> Evidence::Open(const World& world) {
  std::map<std::string, std::unique_ptr<store::Store>> stores;
  for (const auto& node : world.nodes) {
    if (node.data_dir.empty() || !std::filesystem::is_directory(node.data_dir)) {
      return MakeErrorF(ErrorCode::kNotFound, "node {}: no agent data directory ({})", node.name, node.data_dir);
    }
    store::StoreOptions options;
    options.data_dir = node.data_dir;
    options.retention = 7 * 24 * 3600 * kNsPerSec;  // a world is minutes old; never drop any of it
    options.memory_budget_bytes = 1ull << 30;
    auto s = store::Store::Open(options);
    if (!s) return MakeErrorF(s.error().code, "node {}: {}", node.name, s.error().message);
    stores.emplace(node.name, std::move(*s));
  }
  return Evidence(detect::FleetView::Owning(std::move(stores)));
}

Evidence Evidence::FromStores(std::map<std::string, std::unique_ptr<store::Store>> stores) {
  return Evidence(detect::FleetView::Owning(std::move(stores)));
}

}  // namespace ithbat::sim::lab
