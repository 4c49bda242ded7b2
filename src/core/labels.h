#pragma once
// Series identity: a metric name plus a small, sorted set of labels whose names and values are
// interned once. A LabelSet is built when a series is registered (the cold path); appending a
// sample afterwards uses only the store's SeriesRef and allocates nothing.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace ithbat {

// Bounds that keep hostile or buggy sources from exploding memory.
inline constexpr size_t kMaxLabelsPerSet = 32;
inline constexpr size_t kMaxLabelValueBytes = 1024;
inline constexpr size_t kMaxInternedStrings = 1 << 22;

// Process-wide string interner. Ids are dense, stable for the life of the process, and never
// reused; Lookup of an id returned by Intern is always valid. Thread-safe.
class StringTable {
 public:
  static StringTable& Global();
  Result<uint32_t> Intern(std::string_view s);
  // Returns the id if the string was interned before, without inserting.
  std::optional<uint32_t> Find(std::string_view s) const;
  std::string_view Lookup(uint32_t id) const;
  size_t size() const;

 private:
  StringTable();
  struct Impl;
  Impl* impl_;  // never freed: the table lives as long as the process
};

bool IsValidLabelName(std::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, not starting "__"
bool IsValidMetricName(std::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*

class LabelSet {
 public:
  struct Pair {
    uint32_t name;
    uint32_t value;
    friend bool operator==(const Pair&, const Pair&) = default;
  };

  LabelSet() = default;
  // Validates names, value sizes and count; rejects a name given twice. Empty values are dropped
  // (Prometheus treats a label with an empty value as absent).
  static Result<LabelSet> From(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs);
  static Result<LabelSet> From(const std::vector<std::pair<std::string, std::string>>& pairs);

  // From ids already interned, sorted by the name's text and unique by name (no check beyond
  // a debug assertion: for the store's loader and BuildLabelSet only).
  static LabelSet FromSortedInterned(std::vector<Pair> pairs);

  // A copy with one label added or replaced (empty value removes it).
  Result<LabelSet> With(std::string_view name, std::string_view value) const;

  std::optional<std::string_view> Get(std::string_view name) const;
  size_t size() const { return pairs_.size(); }
  bool empty() const { return pairs_.empty(); }
  std::string_view NameAt(size_t i) const;
  std::string_view ValueAt(size_t i) const;
  const std::vector<Pair>& pairs() const { return pairs_; }

  // Prometheus text form, sorted by name: {a="x",b="y"} (empty set gives "").
  std::string ToString() const;
  size_t Hash() const;
  friend bool operator==(const LabelSet&, const LabelSet&) = default;

 private:
  std::vector<Pair> pairs_;  // sorted by the name's text
};

struct LabelSetHash {
  size_t operator()(const LabelSet& s) const { return s.Hash(); }
};

// Escapes a label value for the Prometheus text format (backslash, quote, newline).
std::string EscapeLabelValue(std::string_view v);

}  // namespace ithbat
