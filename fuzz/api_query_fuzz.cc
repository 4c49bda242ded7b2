// The JSON API's query parameters come from anyone who reaches the agent or the hub (after the
// token, when there is one): any parameters must give a documented answer — 200 with data or a
// 4xx with the error body — as valid JSON, never a crash, a hang or unbounded memory. The input
// is a query string, split on '&' and the first '=' of each pair; values are taken as the bytes
// they are (the server hands handlers decoded values, which may hold any byte).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/labels.h"
#include "core/metric.h"
#include "require.h"
#include "serve/api.h"
#include "store/store.h"

namespace {

using ithbat::fuzz::Require;
constexpr ithbat::TimeNs kNow = 1'700'000'000'000'000'000;

// Series, events and steps of the shapes the agent stores, made once.
ithbat::store::Store& SmallStore() {
  static std::unique_ptr<ithbat::store::Store> store = [] {
    using namespace ithbat;
    auto s = store::Store::Open(store::StoreOptions{});
    Require(s.has_value(), "store opens");
    const MetricDesc gpu{"ithbat_gpu_utilization_ratio", "GPU busy", "ratio", MetricType::kGauge, {}};
    const MetricDesc steps{"ithbat_job_steps_total", "Steps", "", MetricType::kCounter, {}};
    for (const char* g : {"0", "1", "7"}) {
      auto labels = LabelSet::From({{"gpu", g}, {"node", "gpu-a07"}, {"job_id", "77"}, {"rank", g}});
      Require(labels.has_value(), "labels");
      auto ref = (*s)->RegisterSeries(gpu, *labels);
      Require(ref.has_value(), "register");
      for (int i = 0; i < 120; ++i) (void)(*s)->Append(*ref, kNow - (120 - i) * kNsPerSec, 0.01 * i);
    }
    auto ref = (*s)->RegisterSeries(steps, *LabelSet::From({{"job_id", "77"}, {"rank", "0"}}));
    Require(ref.has_value(), "register");
    for (int i = 0; i < 60; ++i) {
      (void)(*s)->Append(*ref, kNow - (60 - i) * kNsPerSec, i);
      (void)(*s)->RecordStep("77", 0, StepSpan{i, kNow - (60 - i) * kNsPerSec, kNow - (59 - i) * kNsPerSec});
      Event e;
      e.time = kNow - (60 - i) * kNsPerSec;
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

void RequireDocumented(const ithbat::serve::ApiResponse& r) {
  Require(r.status == 200 || (r.status >= 400 && r.status < 600), "a documented status");
  const std::string& body = r.shared_body ? *r.shared_body : r.body;
  Require(nlohmann::json::accept(body), "the body is JSON");
  if (r.status != 200) Require(body.find("\"error\"") != std::string::npos, "an error body says why");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  serve::QueryParams params;
  size_t at = 0;
  while (at <= in.size() && params.size() < 256) {
    size_t amp = in.find('&', at);
    if (amp == std::string_view::npos) amp = in.size();
    const std::string_view pair = in.substr(at, amp - at);
    const size_t eq = pair.find('=');
    params.emplace(std::string(pair.substr(0, eq)),
                   eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1)));
    at = amp + 1;
  }
  const store::Store& store = SmallStore();
  serve::ServerOptions options;
  options.max_series_per_query = 100;
  options.max_samples_per_query = 10'000;
  RequireDocumented(serve::ServeSeries(store, params, options, kNow));
  RequireDocumented(serve::ServeEvents(store, params));
  RequireDocumented(serve::ServeSteps(store, params, kNow));
  return 0;
}
