// The JSON API's query parameters come from anyone who reaches the agent or the hub (after the
// token, when there is one): any parameters must give a documented answer — 200 with data or a
// 4xx with the error body — as valid JSON, never a crash, a hang or unbounded memory. The input
// is a query string, split on '&' and the first '=' of each pair; values are taken as the bytes
// they are (the server hands handlers decoded values, which may hold any byte).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "require.h"
#include "serve/api.h"
#include "small_store.h"
#include "store/store.h"

namespace {

using ithbat::fuzz::Require;
using ithbat::fuzz::kSmallStoreNow;
using ithbat::fuzz::SmallStore;

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
  RequireDocumented(serve::ServeSeries(store, params, options, kSmallStoreNow));
  RequireDocumented(serve::ServeEvents(store, params));
  RequireDocumented(serve::ServeSteps(store, params, kSmallStoreNow));
  return 0;
}
