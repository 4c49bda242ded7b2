// Scenario files (src/scenario, docs/scenarios.md) are written by people who never read the
// parser: arbitrary bytes must give a valid scenario or a list of issues — never a crash, an
// exception, a hang on aliases or deep nesting, or an issue without a message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "scenario/expect/expect.h"
#include "scenario/scenario.h"
#include "require.h"

using ithbat::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat::scenario;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ParsedScenario p = ParseScenarioText(text);
  Require(p.scenario.has_value() == p.issues.empty(), "a scenario XOR issues");
  for (const auto& i : p.issues) Require(!i.message.empty() && i.line >= 0 && i.column >= 0, "issue has a message and place");
  ParsedExpectations x = ParseExpectationsText(text, p.scenario ? &*p.scenario : nullptr);
  Require(x.expectations.has_value() == x.issues.empty(), "expectations XOR issues");
  if (p.scenario) {
    uint64_t seed = size;
    for (size_t i = 0; i < size && i < 64; ++i) seed = seed * 131 + data[i];
    auto r = Resolve(*p.scenario, seed);
    if (r) Require(!ResolvedToJson(*r).empty(), "resolved JSON");
  }
  return 0;
}
