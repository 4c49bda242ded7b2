#pragma once
// The store's own health as metrics (series count, memory and disk use, rejected samples,
// flushes), read from store::Store::Stats() each tick. It sits in agent/ rather than store/ so
// the store does not depend on the collector contract.
//
// Ownership: the Store is borrowed and must outlive the collector (the agent owns both, the
// runtime is stopped before the store is closed). Errors: none at collect time; Init fails
// only if the sink refuses a series.
#include <array>
#include <vector>

#include "agent/collector.h"
#include "store/store.h"

namespace ithbat::agent {

class StoreStatsCollector final : public Collector {
 public:
  explicit StoreStatsCollector(const store::Store& store);

  std::vector<MetricDesc> Describe() const override;

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  static constexpr size_t kMetricCount = 12;
  const store::Store& store_;
  Sink* sink_ = nullptr;
  std::array<SeriesRef, kMetricCount> refs_{};
};

}  // namespace ithbat::agent
