#include "collect/serving/exposition.h"

#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/core.h>

#include "core/file_util.h"

namespace ithbat::collect::serving {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

void SkipBlanks(std::string_view* s) {
  while (!s->empty() && IsBlank(s->front())) s->remove_prefix(1);
}

// A metric or label name at the front of *s (label names may not hold ':', but servers in the
// wild are lax and a stricter rule buys nothing here).
bool TakeName(std::string_view* s, size_t max, std::string_view* name) {
  if (s->empty() || !IsNameStart(s->front())) return false;
  size_t n = 1;
  while (n < s->size() && IsNameChar((*s)[n])) n++;
  if (n > max) return false;
  *name = s->substr(0, n);
  s->remove_prefix(n);
  return true;
}

// Prometheus floats: Go's ParseFloat accepts NaN, +Inf, -Inf (any case) and a leading '+'.
bool ParseValue(std::string_view text, double* out) {
  if (text.empty()) return false;
  bool negative = false;
  if (text.front() == '+' || text.front() == '-') {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '+' || text.front() == '-') return false;
  auto lower_eq = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++) {
      char c = a[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != b[i]) return false;
    }
    return true;
  };
  if (lower_eq(text, "inf") || lower_eq(text, "infinity")) {
    *out = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (lower_eq(text, "nan")) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  if (std::isnan(v) || std::isinf(v)) return false;  // spelled some other way: not a valid text
  *out = negative ? -v : v;
  return true;
}

// Text format timestamps are integer milliseconds; OpenMetrics writes float seconds.
bool ParseTimestamp(std::string_view text, int64_t* ms) {
  int64_t i = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ec == std::errc() && end == text.data() + text.size()) {
    *ms = i;
    return true;
  }
  double d = 0;
  auto [end2, ec2] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (ec2 != std::errc() || end2 != text.data() + text.size() || !std::isfinite(d)) return false;
  const double m = d * 1000.0;
  if (m > 9.2e18 || m < -9.2e18) return false;
  *ms = static_cast<int64_t>(m);
  return true;
}

class LineParser {
 public:
  LineParser(const ExpositionLimits& limits, Exposition* out) : limits_(limits), out_(out) {}

  void Line(std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || IsBlank(line.back()))) line.remove_suffix(1);
    SkipBlanks(&line);
    if (line.empty()) return;
    if (line.size() > limits_.max_line_bytes) return Fail(fmt::format("line of {} bytes exceeds the {} byte bound",
                                                                      line.size(), limits_.max_line_bytes));
    if (line.front() == '#') return Comment(line);
    Sample(line);
  }

 private:
  void Fail(std::string reason) {
    out_->errors++;
    if (out_->first_error_line == 0) {
      out_->first_error_line = out_->lines;
      out_->first_error = std::move(reason);
    }
  }

  void Comment(std::string_view line) {
    line.remove_prefix(1);
    SkipBlanks(&line);
    const size_t sp = line.find_first_of(" \t");
    const std::string_view keyword = line.substr(0, sp);
    if (keyword == "EOF") {
      out_->saw_eof = true;
      return;
    }
    if (keyword != "TYPE" && keyword != "HELP" && keyword != "UNIT") return;  // a plain comment
    std::string_view rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp);
    SkipBlanks(&rest);
    std::string_view family;
    if (!TakeName(&rest, limits_.max_name_bytes, &family)) {
      return Fail(fmt::format("# {} without a valid metric name: {}", keyword, QuoteForError(line)));
    }
    if (keyword != "TYPE") return;  // HELP and UNIT text is not needed downstream
    SkipBlanks(&rest);
    const std::string_view type = rest.substr(0, rest.find_first_of(" \t"));
    if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped" &&
        type != "info" && type != "stateset" && type != "gaugehistogram" && type != "unknown") {
      return Fail(fmt::format("# TYPE {} with unknown type {}", family, QuoteForError(type)));
    }
    if (out_->types.size() >= limits_.max_families && !out_->types.contains(std::string(family))) return;
    out_->types[std::string(family)] = std::string(type);
  }

  void Sample(std::string_view line) {
    std::string_view rest = line;
    std::string_view name;
    if (!TakeName(&rest, limits_.max_name_bytes, &name)) {
      return Fail(fmt::format("no metric name at the start of {}", QuoteForError(line)));
    }
    ExpoSample sample;
    sample.name = std::string(name);
    size_t before = rest.size();
    SkipBlanks(&rest);
    if (!rest.empty() && rest.front() == '{') {
      rest.remove_prefix(1);
      if (std::string reason = Labels(&rest, &sample); !reason.empty()) {
        return Fail(fmt::format("{} in {}", reason, QuoteForError(line)));
      }
      before = rest.size();
      SkipBlanks(&rest);
    }
    if (rest.empty() || rest.size() == before) {  // the value must follow a blank
      return Fail(fmt::format("no value after the name/labels in {}", QuoteForError(line)));
    }
    const size_t sp = rest.find_first_of(" \t");
    const std::string_view value_text = rest.substr(0, sp);
    if (!ParseValue(value_text, &sample.value)) {
      return Fail(fmt::format("bad value {} in {}", QuoteForError(value_text), QuoteForError(line)));
    }
    if (sp != std::string_view::npos) {
      std::string_view ts = rest.substr(sp);
      SkipBlanks(&ts);
      const size_t sp2 = ts.find_first_of(" \t");
      // OpenMetrics exemplars follow " # "; anything else after the timestamp is malformed.
      std::string_view after = sp2 == std::string_view::npos ? std::string_view() : ts.substr(sp2);
      SkipBlanks(&after);
      ts = ts.substr(0, sp2);
      if (ts == "#") {
        after = "#";
      } else {
        int64_t ms = 0;
        if (!ParseTimestamp(ts, &ms)) {
          return Fail(fmt::format("bad timestamp {} in {}", QuoteForError(ts), QuoteForError(line)));
        }
        sample.timestamp_ms = ms;
      }
      if (!after.empty() && after.front() != '#') {
        return Fail(fmt::format("trailing text after the value in {}", QuoteForError(line)));
      }
    }
    if (out_->samples.size() >= limits_.max_samples) {
      out_->dropped_samples++;
      return;
    }
    out_->samples.push_back(std::move(sample));
  }

  // Parses `name="value",...}` (the '{' already taken). Returns "" or the reason it failed.
  std::string Labels(std::string_view* s, ExpoSample* sample) {
    for (;;) {
      SkipBlanks(s);
      if (s->empty()) return "unterminated label set";
      if (s->front() == '}') {
        s->remove_prefix(1);
        return "";
      }
      std::string_view label;
      if (!TakeName(s, limits_.max_name_bytes, &label)) return "bad label name";
      SkipBlanks(s);
      if (s->empty() || s->front() != '=') return "label without '='";
      s->remove_prefix(1);
      SkipBlanks(s);
      if (s->empty() || s->front() != '"') return "label value not quoted";
      s->remove_prefix(1);
      std::string value;
      bool closed = false;
      while (!s->empty()) {
        const char c = s->front();
        s->remove_prefix(1);
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (s->empty()) break;
          const char e = s->front();
          s->remove_prefix(1);
          if (e == 'n') {
            value.push_back('\n');
          } else if (e == '\\' || e == '"') {
            value.push_back(e);
          } else {  // unknown escape: Prometheus keeps both characters
            value.push_back('\\');
            value.push_back(e);
          }
        } else {
          value.push_back(c);
        }
        if (value.size() > limits_.max_label_value_bytes) return "label value too long";
      }
      if (!closed) return "unterminated label value";
      if (sample->labels.size() >= limits_.max_labels) return "too many labels";
      for (const auto& [n, v] : sample->labels) {
        if (n == label) return fmt::format("label {} given twice", label);
      }
      sample->labels.emplace_back(std::string(label), std::move(value));
      SkipBlanks(s);
      if (!s->empty() && s->front() == ',') {
        s->remove_prefix(1);
      } else if (s->empty() || s->front() != '}') {
        return "expected ',' or '}' after a label";
      }
    }
  }

  const ExpositionLimits& limits_;
  Exposition* out_;
};

}  // namespace

std::optional<std::string_view> ExpoSample::Label(std::string_view label) const {
  for (const auto& [n, v] : labels) {
    if (n == label) return std::string_view(v);
  }
  return std::nullopt;
}

Result<Exposition> ParseExposition(std::string_view body, const ExpositionLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "exposition body of {} bytes exceeds the {} byte bound",
                      body.size(), limits.max_body_bytes);
  }
  Exposition out;
  LineParser parser(limits, &out);
  LineReader reader(body);
  std::string_view line;
  while (reader.Next(&line)) {
    if (out.saw_eof) break;  // OpenMetrics: nothing may follow # EOF
    out.lines = reader.line_number();
    parser.Line(line);
  }
  return out;
}

}  // namespace ithbat::collect::serving
