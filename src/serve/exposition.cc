// The Prometheus text exposition (format 0.0.4) of the store's newest samples.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/labels.h"
#include "core/metric.h"
#include "serve/http_server.h"
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

void AppendLabels(std::string& out, const LabelSet& labels) {
  if (labels.empty()) return;
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels.NameAt(i);
    out += "=\"";
    out += EscapeLabelValue(labels.ValueAt(i));
    out += '"';
  }
  out += '}';
}

}  // namespace

std::string RenderPrometheusText(const store::Store& store, TimeNs stale_before) {
  // Collect first, then sort: the store promises metric order, but not series order within a
  // metric, and a scrape must be deterministic.
  std::map<std::string, Family, std::less<>> families;
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
    out += "# HELP ";
    out += name;
    out += ' ';
    out += EscapeHelp(family.desc.help);
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += MetricTypeName(family.desc.type);
    out += '\n';
    for (const auto& line : family.series) {
      out += name;
      AppendLabels(out, line.labels);
      out += ' ';
      out += FormatSampleValue(line.value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace ithbat::serve
