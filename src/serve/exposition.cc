// The Prometheus text exposition (format 0.0.4) of the store's newest samples.
#include "serve/exposition.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/labels.h"
#include "core/metric.h"
#include "serve/dcgm_names.h"
#include "serve/text_format.h"

namespace ithbat::serve {
namespace {

struct SeriesLine {
  LabelSet labels;
  double value = 0;
};

struct Family {
  MetricDesc desc;
  std::vector<SeriesLine> series;
};

using Families = std::map<std::string, Family, std::less<>>;
using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// Orders series by their label pairs compared as text (name, then value, pair by pair), so the
// output does not depend on interning order and two scrapes of the same store are identical.
bool LabelsLess(const LabelSet& a, const LabelSet& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = a.NameAt(i).compare(b.NameAt(i)); c != 0) return c < 0;
    if (int c = a.ValueAt(i).compare(b.ValueAt(i)); c != 0) return c < 0;
  }
  return a.size() < b.size();
}

void AppendPair(std::string& out, bool& first, std::string_view name, std::string_view value) {
  out += first ? '{' : ',';
  first = false;
  out += name;
  out += "=\"";
  out += EscapeLabelValue(value);
  out += '"';
}

// The series' own labels, then each target label it does not carry itself.
void AppendLabels(std::string& out, const LabelSet& labels, const LabelPairs& target_labels) {
  bool first = true;
  for (size_t i = 0; i < labels.size(); ++i) AppendPair(out, first, labels.NameAt(i), labels.ValueAt(i));
  for (const auto& [name, value] : target_labels) {
    if (!value.empty() && !labels.Get(name)) AppendPair(out, first, name, value);
  }
  if (!first) out += '}';
}

void AppendHeader(std::string& out, std::string_view name, std::string_view help, MetricType type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += EscapeHelp(help);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += MetricTypeName(type);
  out += '\n';
}

// ---- dcgm-exporter names (dcgm_names.h) ----

// What dcgm-exporter labels a GPU with, from the agent's ithbat_gpu_info series.
struct GpuIdentity {
  std::string uuid, pci_bus_id, model, driver_version;
};

std::string_view Value(const LabelSet& labels, std::string_view name) {
  return labels.Get(name).value_or("");
}

bool Matches(const LabelSet& labels, const DcgmAlias& alias) {
  for (const LabelMatch& m : alias.match) {
    if (!m.name.empty() && Value(labels, m.name) != m.value) return false;
  }
  return true;
}

// dcgm-exporter's label set, in its order: gpu, UUID, pci_bus_id, device, modelName, GPU_I_ID,
// Hostname, DCGM_FI_DRIVER_VERSION. A MIG device (gpu "P/GI/CI", parent_gpu P) is labelled as
// dcgm-exporter labels it: its parent's index, UUID and model, and GPU_I_ID = its GPU instance.
// `device` is nvidia<index>: the agent does not read the device minor number, which dcgm-exporter
// uses and which follows the index on the machines we know of; dashboards select by gpu or UUID.
std::optional<LabelPairs> DcgmLabels(const LabelSet& labels,
                                     const std::map<std::string, GpuIdentity, std::less<>>& gpus,
                                     const std::string& hostname) {
  std::string_view gpu = Value(labels, "gpu");
  if (gpu.empty()) return std::nullopt;
  std::string_view parent = Value(labels, "parent_gpu");
  std::string instance;
  if (!parent.empty()) {
    const size_t a = gpu.find('/');
    const size_t b = a == std::string_view::npos ? a : gpu.find('/', a + 1);
    if (b == std::string_view::npos) return std::nullopt;
    instance = std::string(gpu.substr(a + 1, b - a - 1));
    gpu = parent;
  }
  auto it = gpus.find(gpu);
  if (it == gpus.end()) return std::nullopt;  // no ithbat_gpu_info yet: nothing to name it by
  const GpuIdentity& id = it->second;
  LabelPairs out = {{"gpu", std::string(gpu)},
                    {"UUID", id.uuid},
                    {"pci_bus_id", id.pci_bus_id},
                    {"device", "nvidia" + std::string(gpu)},
                    {"modelName", id.model}};
  if (!instance.empty()) out.emplace_back("GPU_I_ID", instance);
  out.emplace_back("Hostname", hostname);
  out.emplace_back("DCGM_FI_DRIVER_VERSION", id.driver_version);
  return out;
}

void AppendDcgmFamilies(std::string& out, const Families& families, const ExpositionOptions& options) {
  std::map<std::string, GpuIdentity, std::less<>> gpus;  // by index, whole GPUs only
  if (auto info = families.find("ithbat_gpu_info"); info != families.end()) {
    for (const SeriesLine& s : info->second.series) {
      if (!Value(s.labels, "parent_gpu").empty()) continue;
      gpus[std::string(Value(s.labels, "gpu"))] =
          GpuIdentity{std::string(Value(s.labels, "gpu_uuid")), std::string(Value(s.labels, "pci_bus_id")),
                      std::string(Value(s.labels, "model")), std::string(Value(s.labels, "driver_version"))};
    }
  }
  for (const DcgmAlias& alias : DcgmAliases()) {
    auto source = families.find(alias.source);
    if (source == families.end()) continue;
    bool header = false;
    for (const SeriesLine& s : source->second.series) {
      if (!Matches(s.labels, alias)) continue;
      auto labels = DcgmLabels(s.labels, gpus, options.hostname);
      if (!labels) continue;
      if (!header) AppendHeader(out, alias.field, alias.help, alias.type);
      header = true;
      out += alias.field;
      bool first = true;
      for (const auto& [name, value] : *labels) {
        if (!value.empty()) AppendPair(out, first, name, value);
      }
      for (const auto& [name, value] : options.target_labels) {
        if (!value.empty()) AppendPair(out, first, name, value);
      }
      if (!first) out += '}';
      out += ' ';
      out += FormatSampleValue(s.value * alias.scale);
      out += '\n';
    }
  }
}

}  // namespace

std::string RenderPrometheusText(const store::Store& store, TimeNs stale_before,
                                 const ExpositionOptions& options) {
  // Collect first, then sort: the store promises metric order, but not series order within a
  // metric, and a scrape must be deterministic.
  Families families;
  store.ForEachLatest(stale_before, [&](const MetricDesc& desc, const LabelSet& labels, store::Sample s) {
    auto it = families.find(desc.name);
    if (it == families.end()) it = families.emplace(desc.name, Family{desc, {}}).first;
    it->second.series.push_back({labels, s.v});
  });

  std::string out;
  for (auto& [name, family] : families) {
    if (family.series.empty()) continue;
    std::sort(family.series.begin(), family.series.end(),
              [](const SeriesLine& a, const SeriesLine& b) { return LabelsLess(a.labels, b.labels); });
    AppendHeader(out, name, family.desc.help, family.desc.type);
    for (const auto& line : family.series) {
      out += name;
      AppendLabels(out, line.labels, options.target_labels);
      out += ' ';
      out += FormatSampleValue(line.value);
      out += '\n';
    }
  }
  if (options.dcgm_names) AppendDcgmFamilies(out, families, options);
  return out;
}

}  // namespace ithbat::serve
