#pragma once
// The JSON plumbing shared by the workload specs (train_spec, serve_spec): a reader of one
// object's fields that keeps the first problem and refuses keys nobody asked for, the JSON form
// of a count distribution (sequence lengths, token counts: a scenario Param<int64_t>), and the
// bounded parse of a spec text or file.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/result.h"
#include "scenario/scenario.h"

namespace ithbat::sim::workload::spec_json {

using nlohmann::json;

// Reads the fields of one JSON object, remembering the first problem (in *err, "path.key: what")
// and refusing keys it was not asked about (Check): a misspelt key must not fall back to a
// default unnoticed. Strings with control characters are refused (they end up in file names,
// command lines and logs).
class Fields {
 public:
  Fields(const json& j, std::string path, std::string* err);
  void Check();
  const json* Get(const char* key);
  void Int(const char* key, int64_t& out, int64_t lo, int64_t hi);
  void U64(const char* key, uint64_t& out, uint64_t lo = 0, uint64_t hi = UINT64_MAX);
  void Num(const char* key, double& out, double lo, double hi);
  void Bool(const char* key, bool& out);
  void Str(const char* key, std::string& out, size_t max_bytes);
  template <class E>
  void Enum(const char* key, E& out) {
    const json* v = Get(key);
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(Sub(key), "not a string");
    const auto& s = v->get_ref<const std::string&>();
    const auto names = scenario::EnumNames<E>();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == s) {
        out = static_cast<E>(i);
        return;
      }
    }
    Fail(Sub(key), fmt::format("unknown value '{}'", s.substr(0, 64)));
  }
  std::string Sub(std::string_view key) const;
  void Fail(const std::string& where, std::string_view what);
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string path_;
  std::string* err_;
  std::set<std::string> seen_;
};

// A count distribution: a number in [1, 2^24], or the scenario's JSON form of a Param
// ({dist, value | min, max | mean, stddev | median, sigma | values, weights}). Returns false with
// *err set on a problem.
inline constexpr double kMaxCount = 1 << 24;
bool ReadCountParam(const json& v, const std::string& path, scenario::Param<int64_t>& out, std::string* err);
json CountParamToJson(const scenario::Param<int64_t>& p);

// The text of a spec file, at most max_bytes (more is an error). `what` names the spec in errors.
Result<std::string> ReadSpecFile(const std::string& path, size_t max_bytes, std::string_view what);
// Parses JSON text of at most max_bytes and hands the document to read(doc, &err); errors are
// prefixed with `what`.
template <class Spec, class ReadFn>
Result<Spec> ParseSpec(std::string_view text, size_t max_bytes, std::string_view what, ReadFn&& read) {
  if (text.size() > max_bytes) return MakeErrorF(ErrorCode::kResourceExhausted, "{} over {} bytes", what, max_bytes);
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return MakeErrorF(ErrorCode::kParse, "{}: not valid JSON", what);
  Spec s;
  std::string err;
  try {
    read(j, s, &err);
  } catch (const std::exception& e) {  // a conversion nlohmann refuses: still the input's fault
    err = e.what();
  }
  if (!err.empty()) return MakeErrorF(ErrorCode::kInvalidArgument, "{}: {}", what, err);
  return s;
}

}  // namespace ithbat::sim::workload::spec_json
