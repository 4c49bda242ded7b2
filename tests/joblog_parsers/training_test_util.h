#pragma once
// Helpers of the training-framework parser tests: read a file of ../shared/data (failing, not
// skipping, when it is absent), run one parser over lines, build expected events.
#include <cmath>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "core/event.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {

// gtest prints events readably on a mismatch.
inline void PrintTo(const ParsedEvent& e, std::ostream* os) {
  *os << "{" << EventKindName(e.kind) << " name=" << e.name << " step=" << e.step << " value=" << e.value
      << " rank=" << e.rank;
  for (const auto& [k, v] : e.attrs) *os << " " << k << "=" << v;
  if (!e.text.empty()) *os << " text=" << e.text;
  *os << "}";
}

namespace test {

// The lines of ../shared/data/<relative> without its '#' header and annotation lines (the
// collector's notes, not output). Empty, with a test failure, when the file cannot be read.
inline std::vector<std::string> SharedLines(const std::string& relative) {
  return ithbat::testing::SharedDataLines(relative);
}

// Events of each line, in order.
inline std::vector<std::vector<ParsedEvent>> RunLines(FormatParser& parser,
                                                      const std::vector<std::string>& lines) {
  std::vector<std::vector<ParsedEvent>> per_line;
  for (const auto& l : lines) {
    std::vector<ParsedEvent> out;
    parser.Parse(LineView{l, false, 1}, out);
    per_line.push_back(std::move(out));
  }
  return per_line;
}

inline std::vector<ParsedEvent> ParseOne(FormatParser& parser, std::string_view line, bool progress = false) {
  std::vector<ParsedEvent> out;
  parser.Parse(LineView{line, progress, 1}, out);
  return out;
}

inline ParsedEvent Ev(EventKind kind, std::string name, double value, int64_t step,
                      std::vector<std::pair<std::string, std::string>> attrs = {}, int32_t rank = -1) {
  ParsedEvent e;
  e.kind = kind;
  e.name = std::move(name);
  e.value = value;
  e.step = step;
  e.attrs = std::move(attrs);
  e.rank = rank;
  return e;
}
inline ParsedEvent Step(int64_t step, double seconds = std::nan(""),
                        std::vector<std::pair<std::string, std::string>> attrs = {}, int32_t rank = -1) {
  return Ev(EventKind::kStep, "", seconds, step, std::move(attrs), rank);
}
inline ParsedEvent Loss(double v, int64_t step, std::vector<std::pair<std::string, std::string>> attrs = {},
                        int32_t rank = -1) {
  return Ev(EventKind::kLoss, "loss", v, step, std::move(attrs), rank);
}
inline ParsedEvent Metric(std::string name, double v, int64_t step, int32_t rank = -1) {
  return Ev(EventKind::kTrainMetric, std::move(name), v, step, {}, rank);
}
inline ParsedEvent Eval(std::string name, double v, int64_t step) {
  return Ev(EventKind::kEvalMetric, std::move(name), v, step);
}

inline std::vector<ParsedEvent> Flatten(const std::vector<std::vector<ParsedEvent>>& per_line) {
  std::vector<ParsedEvent> all;
  for (const auto& l : per_line) all.insert(all.end(), l.begin(), l.end());
  return all;
}
inline size_t Count(const std::vector<ParsedEvent>& events, EventKind kind, std::string_view name = {}) {
  size_t n = 0;
  for (const auto& e : events) n += e.kind == kind && (name.empty() || e.name == name);
  return n;
}
// The events of `kind` (and `name` when given), in order.
inline std::vector<ParsedEvent> Select(const std::vector<ParsedEvent>& events, EventKind kind,
                                       std::string_view name = {}) {
  std::vector<ParsedEvent> out;
  for (const auto& e : events) {
    if (e.kind == kind && (name.empty() || e.name == name)) out.push_back(e);
  }
  return out;
}
inline const ParsedEvent* Find(const std::vector<ParsedEvent>& events, EventKind kind,
                               std::string_view name = {}) {
  for (const auto& e : events) {
    if (e.kind == kind && (name.empty() || e.name == name)) return &e;
  }
  return nullptr;
}

}  // namespace test
}  // namespace ithbat::collect::joblog
