#pragma once
// One small store of the shapes the agent stores — GPU gauges labelled by node, job and rank, a
// step counter, step spans, log and checkpoint events — made once, for the targets that query a
// store with hostile input (selectors, API parameters).
#include <memory>
#include <string>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "require.h"
#include "store/store.h"

namespace ithbat::fuzz {

inline constexpr TimeNs kSmallStoreNow = 1'700'000'000'000'000'000;
inline constexpr size_t kSmallStoreSeries = 4;  // what a selector can match at most

inline const store::Store& SmallStore() {
  static const std::unique_ptr<store::Store> store = [] {
    auto s = store::Store::Open(store::StoreOptions{});
    Require(s.has_value(), "store opens");
    const MetricDesc gpu{"ithbat_gpu_utilization_ratio", "GPU busy", "ratio", MetricType::kGauge, {}};
    const MetricDesc steps{"ithbat_job_steps_total", "Steps", "", MetricType::kCounter, {}};
    for (const char* g : {"0", "1", "7"}) {
      auto labels = LabelSet::From({{"gpu", g}, {"node", "gpu-a07"}, {"job_id", "77"}, {"rank", g}});
      Require(labels.has_value(), "labels");
      auto ref = (*s)->RegisterSeries(gpu, *labels);
      Require(ref.has_value(), "register");
      for (int i = 0; i < 120; ++i) (void)(*s)->Append(*ref, kSmallStoreNow - (120 - i) * kNsPerSec, 0.01 * i);
    }
    auto labels = LabelSet::From({{"job_id", "77"}, {"rank", "0"}});
    Require(labels.has_value(), "labels");
    auto ref = (*s)->RegisterSeries(steps, *labels);
    Require(ref.has_value(), "register");
    for (int i = 0; i < 60; ++i) {
      const TimeNs t = kSmallStoreNow - (60 - i) * kNsPerSec;
      (void)(*s)->Append(*ref, t, i);
      (void)(*s)->RecordStep("77", 0, StepSpan{i, t, t + kNsPerSec});
      Event e;
      e.time = t;
      e.kind = i % 7 == 0 ? EventKind::kCheckpointBegin : EventKind::kLogLine;
      e.source = "joblog";
      e.identity.job = "77";
      e.identity.rank = 0;
      e.step = i;
      e.text = "step " + std::to_string(i) + " loss 2.5";
      (void)(*s)->AppendEvent(std::move(e));
    }
    return std::move(*s);
  }();
  return *store;
}

}  // namespace ithbat::fuzz
