#include "lab/evidence.h"

#include <algorithm>
#include <filesystem>

#include <fmt/core.h>

namespace ithbat::sim::lab {

Result<Evidence> Evidence::Open(const World& world) {
  Evidence e;
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
    e.stores_.emplace(node.name, std::move(*s));
  }
  return e;
}

Evidence Evidence::FromStores(std::map<std::string, std::unique_ptr<store::Store>> stores) {
  Evidence e;
  e.stores_ = std::move(stores);
  return e;
}

const store::Store* Evidence::StoreOf(const std::string& node) const {
  auto it = stores_.find(node);
  return it == stores_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Evidence::Nodes() const {
  std::vector<std::string> out;
  for (const auto& [name, s] : stores_) out.push_back(name);
  return out;
}

std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> Evidence::Samples(const std::string& node,
                                                                           const std::string& selector, TimeNs from,
                                                                           TimeNs to) const {
  std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> out;
  auto sel = store::SeriesSelector::Parse(selector);
  if (!sel) return out;  // selectors are the checker's own constants; tests cover them
  for (const auto& [name, s] : stores_) {
    if (!node.empty() && name != node) continue;
    auto data = s->Select(*sel, from, to);
    if (!data) continue;
    for (auto& d : *data) out.push_back({SeriesValue{name, d.info.labels, 0}, std::move(d.samples)});
  }
  return out;
}

std::vector<SeriesValue> Evidence::Increase(const std::string& node, const std::string& selector, TimeNs from,
                                            TimeNs to, Birth birth) const {
  std::vector<SeriesValue> out;
  // From the last sample before the window (the counter's value when it opened); a series born
  // inside it starts at its first sample or at zero (Birth).
  for (auto& [v, samples] : Samples(node, selector, kMinTime, to)) {
    size_t first = 0;
    while (first < samples.size() && samples[first].t < from) ++first;
    if (first == samples.size()) continue;  // nothing in the window
    double prev = first > 0 ? samples[first - 1].v : birth == Birth::kZero ? 0 : samples[first].v;
    double growth = 0;
    for (size_t i = first; i < samples.size(); ++i) {
      const double d = samples[i].v - prev;
      growth += d >= 0 ? d : samples[i].v;  // a reset: the new value is growth
      prev = samples[i].v;
    }
    v.value = growth;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<SeriesValue> Evidence::Mean(const std::string& node, const std::string& selector, TimeNs from,
                                        TimeNs to) const {
  std::vector<SeriesValue> out;
  for (auto& [v, samples] : Samples(node, selector, from, to)) {
    if (samples.empty()) continue;
    double sum = 0;
    for (const auto& s : samples) sum += s.v;
    v.value = sum / static_cast<double>(samples.size());
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<SeriesValue> Evidence::Max(const std::string& node, const std::string& selector, TimeNs from,
                                       TimeNs to) const {
  std::vector<SeriesValue> out;
  for (auto& [v, samples] : Samples(node, selector, from, to)) {
    if (samples.empty()) continue;
    double m = samples.front().v;
    for (const auto& s : samples) m = std::max(m, s.v);
    v.value = m;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Event> Evidence::Events(const store::EventQuery& query) const {
  std::vector<Event> out;
  for (const auto& [name, s] : stores_) {
    auto e = s->Events(query);
    out.insert(out.end(), std::make_move_iterator(e.begin()), std::make_move_iterator(e.end()));
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) { return a.time < b.time; });
  return out;
}

}  // namespace ithbat::sim::lab
