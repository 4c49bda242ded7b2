#pragma once
// What the node collectors share: a table of series keyed by an entity (a disk, a mount, an
// NFS op of a mount, an IB port) whose labels are known only when the entity is first seen.
// Registration is the cold path (once per entity and metric); afterwards a tick looks the
// entity up by its key (a string_view, no allocation once the key buffer has grown) and appends
// by SeriesRef.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/collector.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

class NodeCollectorBase : public agent::Collector {
 public:
  std::vector<MetricDesc> Describe() const override { return descs_; }

 protected:
  // max_entities bounds the label sets (disks, mounts, ports, ...): a source listing more is
  // cut there, reported once.
  NodeCollectorBase(std::string name, size_t max_entities)
      : Collector(std::move(name)), max_entities_(max_entities) {}

  void SetMaxEntities(size_t max_entities) { max_entities_ = max_entities; }

  size_t AddDesc(std::string name, std::string help, std::string unit, MetricType type,
                 std::vector<std::string> labels) {
    descs_.push_back(MetricDesc{std::move(name), std::move(help), std::move(unit), type, std::move(labels)});
    return descs_.size() - 1;
  }

  struct Entity {
    LabelSet labels;
    std::vector<int64_t> refs;  // per desc: -1 not registered yet, -2 refused, else the SeriesRef
  };

  // The entity for key, created with make_labels() the first time (nullptr once the bound is
  // reached or the labels are invalid; both reported once).
  template <typename MakeLabels>
  Entity* GetEntity(std::string_view key, MakeLabels&& make_labels) {
    if (auto it = entities_.find(key); it != entities_.end()) return &it->second;
    return NewEntity(key, make_labels());
  }

  void Emit(Entity* entity, size_t desc, TimeNs t, double value);
  // Call at the start and end of each Collect: append failures are reported once per tick.
  void BeginTick();
  void EndTick();

  // Checks that root is a directory (kNotFound otherwise).
  static Status CheckRoot(const std::filesystem::path& root, std::string_view what);

  Sink* sink_ = nullptr;
  std::string key_;  // scratch for building entity keys without allocating every tick

 private:
  Entity* NewEntity(std::string_view key, const LabelPairs& labels);

  std::vector<MetricDesc> descs_;
  size_t max_entities_;
  std::map<std::string, Entity, std::less<>> entities_;
  bool limit_reported_ = false;
  size_t append_failures_ = 0;
  std::optional<Error> first_append_error_;
};

}  // namespace ithbat::collect
