// The Prometheus text an inference server's /metrics answers (collect/serving): the agent scrapes
// it as root from a process any local user may have started. Any body must parse within its
// bounds (samples, labels, name and value sizes) with bad lines counted, and normalise for every
// engine, never crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "collect/serving/exposition.h"
#include "collect/serving/normalise.h"
#include "require.h"

using ithbat::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat::collect::serving;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ExpositionLimits limits;
  limits.max_body_bytes = 1 << 20;
  limits.max_samples = 200;  // small, so the bound is reached
  limits.max_labels = 8;
  limits.max_families = 50;
  auto expo = ParseExposition(body, limits);
  if (!expo) {
    Require(body.size() > limits.max_body_bytes, "only an oversized body fails as a whole");
    return 0;
  }
  Require(expo->samples.size() <= limits.max_samples, "samples over max_samples");
  Require(expo->types.size() <= limits.max_families, "families over max_families");
  Require(expo->errors <= expo->lines, "more errors than lines");
  Require((expo->errors == 0) == (expo->first_error_line == 0), "first error line iff errors");
  for (const ExpoSample& s : expo->samples) {
    Require(s.labels.size() <= limits.max_labels, "labels over max_labels");
    Require(s.name.size() <= limits.max_name_bytes, "name over max_name_bytes");
    for (const auto& [name, value] : s.labels) {
      Require(name.size() <= limits.max_name_bytes, "label name over max_name_bytes");
      Require(value.size() <= limits.max_label_value_bytes, "label value over max_label_value_bytes");
    }
  }
  for (Engine engine : {Engine::kVllm, Engine::kSglang, Engine::kTgi}) (void)Normalise(engine, *expo);
  return 0;
}
