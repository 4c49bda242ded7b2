#include "core/labels.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace ithbat {

struct StringTable::Impl {
  mutable std::shared_mutex mu;
  std::deque<std::string> strings;  // deque: stable addresses for the views below
  std::vector<std::string_view> by_id;
  std::unordered_map<std::string_view, uint32_t> ids;
};

StringTable::StringTable() : impl_(new Impl) {}

StringTable& StringTable::Global() {
  static StringTable* table = new StringTable();  // intentionally leaked: used until exit
  return *table;
}

std::optional<uint32_t> StringTable::Find(std::string_view s) const {
  std::shared_lock lock(impl_->mu);
  auto it = impl_->ids.find(s);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

Result<uint32_t> StringTable::Intern(std::string_view s) {
  if (auto id = Find(s)) return *id;
  std::unique_lock lock(impl_->mu);
  auto it = impl_->ids.find(s);
  if (it != impl_->ids.end()) return it->second;
  if (impl_->by_id.size() >= kMaxInternedStrings) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "string table full ({} strings)", kMaxInternedStrings);
  }
  const std::string& stored = impl_->strings.emplace_back(s);
  auto id = static_cast<uint32_t>(impl_->by_id.size());
  impl_->by_id.push_back(stored);
  impl_->ids.emplace(stored, id);
  return id;
}

std::string_view StringTable::Lookup(uint32_t id) const {
  std::shared_lock lock(impl_->mu);
  return id < impl_->by_id.size() ? impl_->by_id[id] : std::string_view();
}

size_t StringTable::size() const {
  std::shared_lock lock(impl_->mu);
  return impl_->by_id.size();
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

namespace {

template <class Range>
Result<LabelSet> BuildLabelSet(const Range& pairs) {
  std::vector<std::pair<std::string_view, std::string_view>> items;
  for (const auto& [n, v] : pairs) {
    std::string_view name(n), value(v);
    if (!IsValidLabelName(name)) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "invalid label name '{}'", name);
    }
    if (value.size() > kMaxLabelValueBytes) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "value of label '{}' is {} bytes (max {})", name,
                        value.size(), kMaxLabelValueBytes);
    }
    if (!value.empty()) items.emplace_back(name, value);
  }
  if (items.size() > kMaxLabelsPerSet) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} labels (max {})", items.size(), kMaxLabelsPerSet);
  }
  std::sort(items.begin(), items.end());
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].first == items[i - 1].first) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "label '{}' given twice", items[i].first);
    }
  }
  std::vector<LabelSet::Pair> ids;
  ids.reserve(items.size());
  auto& table = StringTable::Global();
  for (const auto& [name, value] : items) {
    auto n = table.Intern(name);
    if (!n) return std::unexpected(n.error());
    auto v = table.Intern(value);
    if (!v) return std::unexpected(v.error());
    ids.push_back({*n, *v});
  }
  return LabelSet::FromSortedInterned(std::move(ids));
}

}  // namespace

LabelSet LabelSet::FromSortedInterned(std::vector<Pair> pairs) {
  LabelSet set;
  set.pairs_ = std::move(pairs);
  return set;
}

Result<LabelSet> LabelSet::From(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  return BuildLabelSet(pairs);
}

Result<LabelSet> LabelSet::From(const std::vector<std::pair<std::string, std::string>>& pairs) {
  return BuildLabelSet(pairs);
}

Result<LabelSet> LabelSet::With(std::string_view name, std::string_view value) const {
  std::vector<std::pair<std::string_view, std::string_view>> items;
  bool replaced = false;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    if (NameAt(i) == name) {
      items.emplace_back(name, value);
      replaced = true;
    } else {
      items.emplace_back(NameAt(i), ValueAt(i));
    }
  }
  if (!replaced) items.emplace_back(name, value);
  return BuildLabelSet(items);
}

std::optional<std::string_view> LabelSet::Get(std::string_view name) const {
  auto id = StringTable::Global().Find(name);
  if (!id) return std::nullopt;
  for (const auto& p : pairs_) {
    if (p.name == *id) return StringTable::Global().Lookup(p.value);
  }
  return std::nullopt;
}

std::string_view LabelSet::NameAt(size_t i) const { return StringTable::Global().Lookup(pairs_[i].name); }
std::string_view LabelSet::ValueAt(size_t i) const { return StringTable::Global().Lookup(pairs_[i].value); }

std::string LabelSet::ToString() const {
  if (pairs_.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < pairs_.size(); ++i) {
    if (i) out += ',';
    out += NameAt(i);
    out += "=\"";
    out += EscapeLabelValue(ValueAt(i));
    out += '"';
  }
  out += '}';
  return out;
}

size_t LabelSet::Hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
  for (const auto& p : pairs_) {
    h = (h ^ p.name) * 1099511628211ull;
    h = (h ^ p.value) * 1099511628211ull;
  }
  return static_cast<size_t>(h);
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace ithbat
