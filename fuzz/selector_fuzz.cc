// Series selectors come from anyone who reaches the agent's or the hub's API (`match=`): any
// bytes must give a selector within its bounds or an error, and a selector must match (RE2,
// fully anchored) against a store's series without a crash, a hang or unbounded memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/labels.h"
#include "core/metric.h"
#include "store/store.h"
#include "require.h"

namespace {

using ithbat::fuzz::Require;

// A few series of the shapes the agent stores, made once.
ithbat::store::Store& SmallStore() {
  static std::unique_ptr<ithbat::store::Store> store = [] {
    using namespace ithbat;
    auto s = store::Store::Open(store::StoreOptions{});
    Require(s.has_value(), "store opens");
    const MetricDesc gpu{"ithbat_gpu_utilization_ratio", "GPU busy", "ratio", MetricType::kGauge, {}};
    const MetricDesc host{"ithbat_host_load1", "Load", "", MetricType::kGauge, {}};
    for (const char* g : {"0", "1", "7"}) {
      auto labels = LabelSet::From({{"gpu", g}, {"node", "gpu-a07"}, {"job_id", "77"}});
      Require(labels.has_value(), "labels");
      auto ref = (*s)->RegisterSeries(gpu, *labels);
      Require(ref.has_value(), "register");
      (void)(*s)->Append(*ref, 1'700'000'000'000'000'000, 0.5);
    }
    auto ref = (*s)->RegisterSeries(host, LabelSet());
    Require(ref.has_value(), "register");
    return std::move(*s);
  }();
  return *store;
}

}  // namespace

using ithbat::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto selector = ithbat::store::SeriesSelector::Parse(text);
  if (!selector) {
    Require(!selector.error().message.empty(), "an error says why");
    return 0;
  }
  Require(text.size() <= 1024, "a selector over 1 KiB was accepted");
  Require(selector->matchers.size() <= 16, "more than 16 matchers");
  auto series = SmallStore().ListSeries(*selector);
  Require(series.size() <= 4, "matched series that do not exist");
  return 0;
}
