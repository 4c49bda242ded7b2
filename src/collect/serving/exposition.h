#pragma once
// A bounded Prometheus text-format / OpenMetrics parser for the /metrics bodies of inference
// servers. The body comes from a process we do not control (and may be anything listening on a
// port we guessed), so it is hostile input: every size is bounded, a bad line is counted and
// skipped (never fatal), and nothing in it can make the parser allocate without limit.
//
// What is understood: sample lines `name{label="value",...} value [timestamp]`, escaped label
// values (\\ \" \n), NaN / +Inf / -Inf values, optional integer or float timestamps,
// `# HELP`, `# TYPE`, `# UNIT` and `# EOF` (OpenMetrics; everything after it is ignored), and
// any other `#` line as a comment. Histogram and summary parts (_bucket/_sum/_count/_created)
// are plain samples under their own names; the family's type is recorded by family name.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::serving {

struct ExpositionLimits {
  size_t max_body_bytes = 8 << 20;
  size_t max_line_bytes = 64 << 10;
  size_t max_samples = 50000;       // samples kept; later ones are counted as dropped
  size_t max_labels = 64;           // per sample
  size_t max_name_bytes = 512;      // metric and label names
  size_t max_label_value_bytes = 4096;
  size_t max_families = 10000;      // HELP/TYPE entries remembered
};

struct ExpoSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, unescaped
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of a label, or nullopt.
  std::optional<std::string_view> Label(std::string_view label) const;
};

struct Exposition {
  std::vector<ExpoSample> samples;
  std::unordered_map<std::string, std::string> types;  // family name → "counter", "gauge", ...
  size_t lines = 0;
  size_t errors = 0;            // malformed lines (skipped)
  size_t first_error_line = 0;  // 1-based; 0 = no error
  std::string first_error;      // what was wrong with it (quoted safely)
  size_t dropped_samples = 0;   // well-formed samples beyond max_samples
  bool saw_eof = false;         // an OpenMetrics "# EOF" line was found
};

// Errors: kResourceExhausted only when the body exceeds max_body_bytes. Every other problem is
// per line: counted in errors (with the first one's line number and reason) and skipped.
Result<Exposition> ParseExposition(std::string_view body, const ExpositionLimits& limits = {});

}  // namespace ithbat::collect::serving
