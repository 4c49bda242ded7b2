#pragma once
// Synthetic agent stores for the lab's check tests: one in-memory store per node, series with
// one sample a second from a fixed time, loss events; handed to the checks as Evidence.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "lab/evidence.h"

namespace ithbat::sim::lab {

inline constexpr TimeNs kS = kNsPerSec;
inline constexpr TimeNs kT0 = 1'800'000'000LL * kS;
using Labels = std::vector<std::pair<std::string, std::string>>;

class Stores {
 public:
  store::Store& Node(const std::string& name) {
    auto& s = stores_[name];
    if (!s) {
      store::StoreOptions o;
      o.retention = 365LL * 24 * 3600 * kS;
      s = std::move(*store::Store::Open(o));
    }
    return *s;
  }
  // A counter/gauge series with these labels; `values[i]` at start + i s.
  void Series(const std::string& node, const std::string& metric, MetricType type, const Labels& labels,
              const std::vector<double>& values, TimeNs start = kT0) {
    MetricDesc d{metric, "test series", "", type, {}};
    auto ls = LabelSet::From(labels);
    ASSERT_TRUE(ls.has_value());
    auto ref = Node(node).RegisterSeries(d, *ls);
    ASSERT_TRUE(ref.has_value()) << ref.error().message;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(Node(node).Append(*ref, start + static_cast<TimeNs>(i) * kS, values[i]).has_value());
    }
  }
  // A rank-0 loss event of process `pid` (job label `job`, "" for none).
  void Loss(const std::string& node, int32_t pid, int64_t step, double value, TimeNs t, const std::string& job = "") {
    Event e;
    e.identity.pid = pid;
    e.identity.job = job;
    e.identity.rank = 0;
    e.time = t;
    e.kind = EventKind::kLoss;
    e.step = step;
    e.value = value;
    ASSERT_TRUE(Node(node).AppendEvent(e).has_value());
  }
  Evidence Take() { return Evidence::FromStores(std::move(stores_)); }

 private:
  std::map<std::string, std::unique_ptr<store::Store>> stores_;
};

}  // namespace ithbat::sim::lab
