#include "agent/process_series.h"

namespace ithbat::agent {

std::vector<std::string> ProcessLabelNames(std::initializer_list<std::string> extra) {
  std::vector<std::string> names = {"job_id", "rank", "local_rank", "world_size", "pid", "gpu", "gpu_uuid"};
  names.insert(names.end(), extra);
  return names;
}

Status ProcessSeries::Put(Sink& sink, const Identity& identity, const MetricDesc& desc, const Labels& extra,
                          TimeNs t, double v) {
  std::string key = desc.name;
  for (const auto& [name, value] : extra) {
    key += '\x1f';
    key += name;
    key += '=';
    key += value;
  }
  auto it = refs_.find(key);
  if (it == refs_.end()) {
    auto pairs = identity.ToLabelPairs();
    pairs.insert(pairs.end(), extra.begin(), extra.end());
    auto labels = LabelSet::From(pairs);
    if (!labels) return std::unexpected(labels.error());
    auto ref = sink.RegisterSeries(desc, *labels);
    if (!ref) return std::unexpected(ref.error());
    it = refs_.emplace(std::move(key), *ref).first;
  }
  return sink.Append(it->second, t, v);
}

}  // namespace ithbat::agent
