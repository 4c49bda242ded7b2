// Series selectors come from anyone who reaches the agent's or the hub's API (`match=`): any
// bytes must give a selector within its bounds or an error, and a selector must match (RE2,
// fully anchored) against a store's series without a crash, a hang or unbounded memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "require.h"
#include "small_store.h"
#include "store/store.h"

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
  auto series = ithbat::fuzz::SmallStore().ListSeries(*selector);
  Require(series.size() <= ithbat::fuzz::kSmallStoreSeries, "matched series that do not exist");
  return 0;
}
