#include "workload/spec_json.h"

#include <cmath>
#include <fstream>

namespace ithbat::sim::workload::spec_json {

Fields::Fields(const json& j, std::string path, std::string* err) : j_(j), path_(std::move(path)), err_(err) {
  if (!j_.is_object()) Fail(path_.empty() ? "spec" : path_, "not an object");
}

void Fields::Check() {
  if (!j_.is_object()) return;
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (!seen_.contains(it.key())) Fail(Sub(it.key()), "unknown key");
}

const json* Fields::Get(const char* key) {
  seen_.insert(key);
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

void Fields::Int(const char* key, int64_t& out, int64_t lo, int64_t hi) {
  const json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_number_integer()) return Fail(Sub(key), "not an integer");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) return Fail(Sub(key), fmt::format("{} outside [{}, {}]", x, lo, hi));
  out = x;
}

void Fields::U64(const char* key, uint64_t& out, uint64_t lo, uint64_t hi) {
  const json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
    return Fail(Sub(key), "not a non-negative integer");
  const uint64_t x = v->get<uint64_t>();
  if (x < lo || x > hi) return Fail(Sub(key), fmt::format("{} outside [{}, {}]", x, lo, hi));
  out = x;
}

void Fields::Num(const char* key, double& out, double lo, double hi) {
  const json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_number()) return Fail(Sub(key), "not a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) return Fail(Sub(key), fmt::format("{} outside [{}, {}]", x, lo, hi));
  out = x;
}

void Fields::Bool(const char* key, bool& out) {
  const json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_boolean()) return Fail(Sub(key), "not a boolean");
  out = v->get<bool>();
}

void Fields::Str(const char* key, std::string& out, size_t max_bytes) {
  const json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_string()) return Fail(Sub(key), "not a string");
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) return Fail(Sub(key), fmt::format("longer than {} bytes", max_bytes));
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return Fail(Sub(key), "contains a control character");
  out = s;
}

std::string Fields::Sub(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void Fields::Fail(const std::string& where, std::string_view what) {
  if (err_->empty()) *err_ = fmt::format("{}: {}", where, what);
}

bool ReadCountParam(const json& v, const std::string& path, scenario::Param<int64_t>& out, std::string* err) {
  constexpr double kMax = kMaxCount;
  auto in_range = [&](double x) { return std::isfinite(x) && x >= 1 && x <= kMax; };
  if (v.is_number()) {
    const double x = v.get<double>();
    if (!in_range(x)) {
      *err = fmt::format("{}: {} outside [1, {}]", path, x, kMax);
      return false;
    }
    out = scenario::Param<int64_t>();
    out.value = std::round(x);
    return true;
  }
  std::string e;
  Fields r(v, path, &e);
  scenario::Param<int64_t> p;
  r.Enum("dist", p.dist);
  const double lo = 0, hi = kMax;
  r.Num("value", p.value, lo, hi);
  r.Num("min", p.min, lo, hi);
  r.Num("max", p.max, lo, hi);
  r.Num("mean", p.mean, lo, hi);
  r.Num("stddev", p.stddev, 0, hi);
  r.Num("median", p.median, lo, hi);
  r.Num("sigma", p.sigma, 0, 10);
  if (const json* c = r.Get("values")) {
    if (!c->is_array() || c->empty() || c->size() > 1024) {
      r.Fail(r.Sub("values"), "not an array of 1..1024 numbers");
    } else {
      for (const auto& x : *c) {
        if (!x.is_number() || !in_range(x.get<double>())) {
          r.Fail(r.Sub("values"), "a value is not a number in range");
          break;
        }
        p.choices.push_back(x.get<double>());
      }
    }
  }
  if (const json* w = r.Get("weights")) {
    if (!w->is_array() || w->size() != p.choices.size()) {
      r.Fail(r.Sub("weights"), "not an array as long as values");
    } else {
      for (const auto& x : *w) {
        if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>())) {
          r.Fail(r.Sub("weights"), "a weight is not a non-negative number");
          break;
        }
        p.weights.push_back(x.get<double>());
      }
    }
  }
  r.Check();
  if (e.empty()) {
    switch (p.dist) {
      case scenario::Dist::kFixed:
        if (!in_range(p.value)) e = path + ".value: outside [1, 2^24]";
        break;
      case scenario::Dist::kUniform:
      case scenario::Dist::kNormal:
      case scenario::Dist::kLognormal:
        if (!in_range(p.min) || !in_range(p.max) || p.min > p.max) e = path + ": needs 1 <= min <= max <= 2^24";
        if (p.dist == scenario::Dist::kLognormal && p.median <= 0) e = path + ".median: must be > 0";
        break;
      case scenario::Dist::kChoice:
        if (p.choices.empty()) e = path + ".values: required for choice";
        break;
    }
  }
  if (!e.empty()) {
    *err = e;
    return false;
  }
  out = p;
  return true;
}

json CountParamToJson(const scenario::Param<int64_t>& a) {
  json d;
  d["dist"] = scenario::EnumName(a.dist);
  switch (a.dist) {
    case scenario::Dist::kFixed: d["value"] = a.value; break;
    case scenario::Dist::kUniform: d["min"] = a.min; d["max"] = a.max; break;
    case scenario::Dist::kNormal: d["mean"] = a.mean; d["stddev"] = a.stddev; d["min"] = a.min; d["max"] = a.max; break;
    case scenario::Dist::kLognormal: d["median"] = a.median; d["sigma"] = a.sigma; d["min"] = a.min; d["max"] = a.max; break;
    case scenario::Dist::kChoice: d["values"] = a.choices; if (!a.weights.empty()) d["weights"] = a.weights; break;
  }
  return d;
}

Result<std::string> ReadSpecFile(const std::string& path, size_t max_bytes, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeErrorF(ErrorCode::kNotFound, "cannot open {} {}", what, path);
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace ithbat::sim::workload::spec_json
