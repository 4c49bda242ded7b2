#include "scenario/scenario.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <tuple>
#include <type_traits>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "scenario/fields.h"
#include "scenario/rng.h"
#include "scenario/yaml_util.h"

namespace ithbat::scenario {

// ---- closed sets ----------------------------------------------------------------------------

namespace {
template <class E>
struct EnumTable;
#define ITHBAT_ENUM_TABLE(E, ...)                                              \
  template <>                                                                  \
  struct EnumTable<E> {                                                        \
    static constexpr std::array kNames = std::to_array<std::string_view>({__VA_ARGS__}); \
  };
ITHBAT_ENUM_TABLE(GpuModel, "H100-SXM", "H200-SXM")
ITHBAT_ENUM_TABLE(Launcher, "srun", "torchrun", "k8s")
ITHBAT_ENUM_TABLE(LogFormat, "hf_trainer", "megatron", "torchtitan", "nanogpt")
ITHBAT_ENUM_TABLE(LogRanks, "rank0", "all")
ITHBAT_ENUM_TABLE(CollectiveOp, "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
ITHBAT_ENUM_TABLE(CommGroup, "world", "tp", "pp", "dp")
ITHBAT_ENUM_TABLE(LossModel, "decay", "drift_explode", "flat", "nan", "repeated_batch")
ITHBAT_ENUM_TABLE(LrSchedule, "constant", "cosine", "linear", "zero")
ITHBAT_ENUM_TABLE(Engine, "continuous", "naive")
ITHBAT_ENUM_TABLE(MetricsStyle, "vllm_v0", "vllm_v1")
ITHBAT_ENUM_TABLE(MountKind, "local_nvme", "shared_nfs")
ITHBAT_ENUM_TABLE(SwitchTier, "leaf", "spine")
ITHBAT_ENUM_TABLE(TenantKind, "training", "io", "inference")
ITHBAT_ENUM_TABLE(EventKind, "thermal_throttle", "power_cap", "ecc_uncorrectable", "ecc_corrected", "xid",
                  "row_remap", "nvlink_errors", "ib_link_degrade", "ib_link_down", "ib_congestion",
                  "storage_slowdown", "host_cpu_contention", "rank_hang", "gpu_lost", "silent_corruption")
ITHBAT_ENUM_TABLE(FaultEffect, "none", "nan", "loss_spike", "crash")
ITHBAT_ENUM_TABLE(Dist, "fixed", "uniform", "normal", "lognormal", "choice")
#undef ITHBAT_ENUM_TABLE
}  // namespace

template <class E>
std::string_view EnumName(E e) {
  const auto& names = EnumTable<E>::kNames;
  size_t i = static_cast<size_t>(e);
  return i < names.size() ? names[i] : std::string_view("?");
}
template <class E>
std::span<const std::string_view> EnumNames() {
  return EnumTable<E>::kNames;
}
#define ITHBAT_ENUM_INST(E)                          \
  template std::string_view EnumName<E>(E);          \
  template std::span<const std::string_view> EnumNames<E>();
ITHBAT_ENUM_INST(GpuModel)
ITHBAT_ENUM_INST(Launcher)
ITHBAT_ENUM_INST(LogFormat)
ITHBAT_ENUM_INST(LogRanks)
ITHBAT_ENUM_INST(CollectiveOp)
ITHBAT_ENUM_INST(CommGroup)
ITHBAT_ENUM_INST(LossModel)
ITHBAT_ENUM_INST(LrSchedule)
ITHBAT_ENUM_INST(Engine)
ITHBAT_ENUM_INST(MetricsStyle)
ITHBAT_ENUM_INST(MountKind)
ITHBAT_ENUM_INST(SwitchTier)
ITHBAT_ENUM_INST(TenantKind)
ITHBAT_ENUM_INST(EventKind)
ITHBAT_ENUM_INST(FaultEffect)
ITHBAT_ENUM_INST(Dist)
#undef ITHBAT_ENUM_INST

const GpuModelSpec& ModelSpec(GpuModel model) {
  // Same figures as sim/fake_state (NVML names, SXM limits, NVLink 4: 18 links x 26.5625 GB/s).
  static const GpuModelSpec kSpecs[] = {
      {GpuModel::kH100Sxm, "NVIDIA H100 80GB HBM3", 85520809984ULL, 1980, 2619, 700, 200, 70, 18, 26.5625},
      {GpuModel::kH200Sxm, "NVIDIA H200", 150754820096ULL, 1980, 3201, 700, 200, 75, 18, 26.5625},
  };
  return kSpecs[static_cast<size_t>(model) < 2 ? static_cast<size_t>(model) : 0];
}

template <class T>
double Param<T>::Lower() const {
  switch (dist) {
    case Dist::kFixed: return value;
    case Dist::kChoice: return choices.empty() ? 0 : *std::min_element(choices.begin(), choices.end());
    default: return min;
  }
}
template <class T>
double Param<T>::Upper() const {
  switch (dist) {
    case Dist::kFixed: return value;
    case Dist::kChoice: return choices.empty() ? 0 : *std::max_element(choices.begin(), choices.end());
    default: return max;
  }
}
template struct Param<double>;
template struct Param<int64_t>;

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::string PathProblem(std::string_view path) {
  if (path.empty() || path[0] != '/') return "must be an absolute path (mapped under the simulator's root)";
  if (path.size() > kMaxPathBytes) return fmt::format("longer than {} bytes", kMaxPathBytes);
  if (path == "/") return "must name a directory below /";
  if (path.back() == '/') return "must not end with '/'";
  size_t at = 1;
  while (at <= path.size()) {
    size_t next = path.find('/', at);
    if (next == std::string_view::npos) next = path.size();
    std::string_view part = path.substr(at, next - at);
    if (part.empty()) return "must not contain '//'";
    if (part == "." || part == "..") return "must be normalised (no '.' or '..' component)";
    if (!IsValidName(part.substr(0, std::min(part.size(), kMaxNameBytes))) || part.size() > 255) {
      return "components are [A-Za-z0-9._-] (at most 255 bytes)";
    }
    at = next + 1;
  }
  return "";
}

namespace {
// Keys and values are echoed back from files; a terminal must not interpret them.
void AppendEscaped(std::string* out, std::string_view s) {
  for (unsigned char c : s) {
    if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      *out += fmt::format("\\x{:02x}", c);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}
}  // namespace

std::string Issue::ToString(std::string_view source) const {
  std::string out;
  if (!source.empty()) {
    AppendEscaped(&out, source);
    out += ":";
  }
  if (line > 0) out += fmt::format("{}:{}:", line, column);
  if (!out.empty()) out += " ";
  if (!path.empty()) {
    AppendEscaped(&out, path);
    out += ": ";
  }
  AppendEscaped(&out, message);
  return out;
}

namespace internal {
namespace {

struct Ctx {
  std::vector<Issue>* issues;
  std::map<std::string, std::pair<int, int>>* marks;
};

std::string JoinNames(std::span<const std::string_view> names) {
  std::string out;
  for (auto n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

std::string FormatNum(double v) { return fmt::format("{:g}", v); }

// Reads one YAML mapping into a struct through VisitFields; collects issues, never throws
// (yaml-cpp accessors that could throw are guarded).
class Reader {
 public:
  Reader(YAML::Node node, std::string path, Ctx* ctx) : node_(std::move(node)), path_(std::move(path)), ctx_(ctx) {}

  template <class T>
  void Num(std::string_view key, Param<T>& a, Param<T>&, Lim lim) {
    YAML::Node n = Child(key, lim.required);
    if (!n.IsDefined()) return;
    if (auto p = ReadParam<T>(n, Sub(key), lim)) a = *p;
  }
  template <class T>
  void Sampled(std::string_view key, Param<T>& a, Param<T>& b, Lim lim) { Num(key, a, b, lim); }

  void Int(std::string_view key, int64_t& a, int64_t&, Lim lim) {
    YAML::Node n = Child(key, lim.required);
    if (!n.IsDefined()) return;
    if (auto v = Number(n, Sub(key), true)) {
      if (InLimits(*v, lim, n, Sub(key))) a = static_cast<int64_t>(*v);
    }
  }
  void Str(std::string_view key, std::string& a, std::string&, bool required) {
    YAML::Node n = Child(key, required);
    if (!n.IsDefined()) return;
    if (!n.IsScalar()) return Bad(n, Sub(key), "expected a string");
    if (n.Scalar().size() > 16384) return Bad(n, Sub(key), "string longer than 16384 bytes");
    if (required && n.Scalar().empty()) return Bad(n, Sub(key), "must not be empty");
    a = n.Scalar();
  }
  void Name(std::string_view key, std::string& a, std::string& b, bool required) {
    size_t before = ctx_->issues->size();
    Str(key, a, b, required);
    if (ctx_->issues->size() != before || a.empty()) return;
    if (!IsValidName(a)) {
      Bad(Child(key, false), Sub(key), fmt::format("'{}' is not a name: [A-Za-z0-9._-], 1 to {} characters, not . or ..", Clip(a), kMaxNameBytes));
      a.clear();
    }
  }
  void Names(std::string_view key, std::vector<std::string>& a, std::vector<std::string>& b, bool required) {
    size_t before = ctx_->issues->size();
    Strs(key, a, b, required);
    if (ctx_->issues->size() != before) return;
    YAML::Node n = Child(key, false);
    for (size_t i = 0; i < a.size(); ++i) {
      if (!IsValidName(a[i])) {
        Bad(n[i], fmt::format("{}[{}]", Sub(key), i), fmt::format("'{}' is not a name: [A-Za-z0-9._-], 1 to {} characters, not . or ..", Clip(a[i]), kMaxNameBytes));
      }
    }
  }
  void Path(std::string_view key, std::string& a, std::string& b, bool required) {
    size_t before = ctx_->issues->size();
    Str(key, a, b, required);
    if (ctx_->issues->size() != before || a.empty()) return;
    if (std::string why = PathProblem(a); !why.empty()) {
      Bad(Child(key, false), Sub(key), fmt::format("'{}': {}", Clip(a), why));
      a.clear();
    }
  }
  void Bool(std::string_view key, bool& a, bool&) {
    YAML::Node n = Child(key, false);
    if (!n.IsDefined()) return;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "true") {
      a = true;
    } else if (s == "false") {
      a = false;
    } else {
      Bad(n, Sub(key), "expected true or false");
    }
  }
  template <class E>
  void Enum(std::string_view key, E& a, E&, bool required = false) {
    YAML::Node n = Child(key, required);
    if (!n.IsDefined()) return;
    auto names = EnumNames<E>();
    if (n.IsScalar()) {
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == n.Scalar()) {
          a = static_cast<E>(i);
          return;
        }
      }
    }
    std::string got = n.IsScalar() ? n.Scalar() : "a non-string";
    std::vector<std::string> known(names.begin(), names.end());
    std::string hint = DidYouMean(got, known);
    Bad(n, Sub(key),
        fmt::format("'{}' is not one of: {}{}", got, JoinNames(names), hint.empty() ? "" : fmt::format(" (did you mean {}?)", hint)));
  }
  void Strs(std::string_view key, std::vector<std::string>& a, std::vector<std::string>&, bool required) {
    YAML::Node n = Child(key, required);
    if (!n.IsDefined()) return;
    if (!n.IsSequence()) return Bad(n, Sub(key), "expected a list of strings");
    if (n.size() > 1024) return Bad(n, Sub(key), "more than 1024 entries");
    if (required && n.size() == 0) return Bad(n, Sub(key), "must not be empty");
    a.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar() || n[i].Scalar().empty()) {
        Bad(n[i], fmt::format("{}[{}]", Sub(key), i), "expected a non-empty string");
        continue;
      }
      a.push_back(n[i].Scalar());
    }
  }
  void Ints(std::string_view key, std::vector<int64_t>& a, std::vector<int64_t>&, Lim lim) {
    YAML::Node n = Child(key, lim.required);
    if (!n.IsDefined()) return;
    if (!n.IsSequence()) return Bad(n, Sub(key), "expected a list of integers");
    if (n.size() > 1024) return Bad(n, Sub(key), "more than 1024 entries");
    a.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      std::string p = fmt::format("{}[{}]", Sub(key), i);
      if (auto v = Number(n[i], p, true)) {
        if (InLimits(*v, lim, n[i], p)) a.push_back(static_cast<int64_t>(*v));
      }
    }
  }
  void Seed(std::string_view key, std::optional<uint64_t>& a, std::optional<uint64_t>&) {
    YAML::Node n = Child(key, false);
    if (!n.IsDefined()) return;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    uint64_t v = 0;
    // from_chars: digits only (no sign, no spaces, no locale), overflow refused.
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      return Bad(n, Sub(key), "expected an unsigned 64-bit integer (digits only)");
    }
    a = v;
  }
  template <class S>
  void Obj(std::string_view key, S& a, S& b, bool required) {
    YAML::Node n = Child(key, required);
    if (!n.IsDefined()) return;
    Nested(n, Sub(key), a, b);
  }
  template <class S>
  void Opt(std::string_view key, std::optional<S>& a, std::optional<S>&) {
    YAML::Node n = Child(key, false);
    if (!n.IsDefined()) return;
    a.emplace();
    Nested(n, Sub(key), *a, *a);
  }
  template <class S>
  void List(std::string_view key, std::vector<S>& a, std::vector<S>&, size_t max) {
    YAML::Node n = Child(key, false);
    if (!n.IsDefined()) return;
    if (n.IsNull()) return;  // `jobs:` with nothing under it: an empty list
    if (!n.IsSequence()) return Bad(n, Sub(key), "expected a list");
    if (n.size() > max) return Bad(n, Sub(key), fmt::format("{} entries; at most {}", n.size(), max));
    a.assign(n.size(), S{});
    for (size_t i = 0; i < n.size(); ++i) {
      std::string p = fmt::format("{}[{}]", Sub(key), i);
      (*ctx_->marks)[p] = LineCol(n[i]);
      Nested(n[i], p, a[i], a[i]);
    }
  }
  template <class F>
  void Group(std::string_view key, F&& fn) {
    YAML::Node n = Child(key, false);
    if (!n.IsDefined()) return;
    if (!n.IsMap()) return Bad(n, Sub(key), "expected a mapping");
    Reader r(n, Sub(key), ctx_);
    fn(r);
    r.Finish();
  }
  void Ignore(std::string_view key) { known_.emplace_back(key); }

  // Unknown and duplicate keys of this mapping.
  void Finish() {
    if (!node_.IsMap()) return;
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      // A copy: it-> returns a proxy whose members die with the full expression.
      const YAML::Node k = it->first;
      if (!k.IsScalar()) {
        Bad(k, path_, "keys must be plain strings");
        continue;
      }
      const std::string& name = k.Scalar();
      std::string p = Sub(name);
      if (!seen.insert(name).second) {
        Bad(k, p, "duplicate key");
        continue;
      }
      if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
      std::string hint = DidYouMean(name, known_);
      Bad(k, p, fmt::format("unknown key '{}'{}", name, hint.empty() ? "" : fmt::format(" (did you mean {}?)", hint)));
    }
  }

 private:
  std::string Sub(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }
  static std::string Clip(const std::string& s) { return s.size() > 80 ? s.substr(0, 80) + "..." : s; }

  YAML::Node Child(std::string_view key, bool required) {
    known_.emplace_back(key);
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& cnode = node_;
    // Copy-construct: assigning a missing ("zombie") node to a Node throws in yaml-cpp.
    const YAML::Node n = cnode[std::string(key)];
    if (!n.IsDefined()) {
      if (required) Bad(node_, Sub(key), "required key is missing");
      return YAML::Node(YAML::NodeType::Undefined);
    }
    (*ctx_->marks)[Sub(key)] = LineCol(n);
    return n;
  }

  template <class S>
  void Nested(const YAML::Node& n, const std::string& path, S& a, S& b) {
    if (!n.IsMap()) return Bad(n, path, "expected a mapping");
    Reader r(n, path, ctx_);
    VisitFields(r, a, b);
    r.Finish();
  }

  void Bad(const YAML::Node& n, const std::string& path, std::string message) {
    auto [line, col] = LineCol(n);
    ctx_->issues->push_back({path, line, col, std::move(message)});
  }

  std::optional<double> Number(const YAML::Node& n, const std::string& path, bool integer) {
    if (!n.IsScalar()) {
      Bad(n, path, integer ? "expected an integer" : "expected a number");
      return std::nullopt;
    }
    const std::string& s = n.Scalar();
    // std::from_chars: independent of the C locale (strtod reads "1,5" under de_DE), no
    // leading spaces, no hex. One leading '+' is allowed as YAML allows it.
    std::string_view digits = s;
    if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-' && digits[1] != '+') digits.remove_prefix(1);
    double v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
    if (s.empty() || ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(v)) {
      Bad(n, path, fmt::format("'{}' is not a {}", s, integer ? "integer" : "number"));
      return std::nullopt;
    }
    if (integer && (v != std::floor(v) || std::fabs(v) > 9007199254740992.0)) {
      Bad(n, path, fmt::format("'{}' is not an integer", s));
      return std::nullopt;
    }
    return v;
  }

  bool InLimits(double v, Lim lim, const YAML::Node& n, const std::string& path) {
    if (v >= lim.lo && v <= lim.hi) return true;
    Bad(n, path, fmt::format("{} is out of range [{}, {}]", FormatNum(v), FormatNum(lim.lo), FormatNum(lim.hi)));
    return false;
  }

  template <class T>
  std::optional<Param<T>> ReadParam(const YAML::Node& n, const std::string& path, Lim lim) {
    constexpr bool kInt = std::is_integral_v<T>;
    Param<T> p;
    size_t before = ctx_->issues->size();
    auto num = [&](const YAML::Node& x, const std::string& xp) { return Number(x, xp, kInt); };
    if (n.IsScalar()) {
      auto v = num(n, path);
      if (!v) return std::nullopt;
      p.value = *v;
    } else if (n.IsSequence()) {
      if (n.size() != 2) {
        Bad(n, path, "a range is written [min, max]");
        return std::nullopt;
      }
      auto lo = num(n[0], path + "[0]");
      auto hi = num(n[1], path + "[1]");
      if (!lo || !hi) return std::nullopt;
      p.dist = Dist::kUniform;
      p.min = *lo;
      p.max = *hi;
    } else if (n.IsMap()) {
      Reader r(n, path, ctx_);
      Dist d = Dist::kFixed;
      r.Enum("dist", d, d, true);
      if (ctx_->issues->size() != before) return std::nullopt;
      p.dist = d;
      auto field = [&](std::string_view key, double& out, bool required) {
        YAML::Node x = r.Child(key, required);
        if (!x.IsDefined()) return;
        if (auto v = Number(x, r.Sub(key), kInt && (key == "min" || key == "max"))) out = *v;
      };
      switch (d) {
        case Dist::kFixed:
          field("value", p.value, true);
          break;
        case Dist::kUniform:
          field("min", p.min, true);
          field("max", p.max, true);
          break;
        case Dist::kNormal:
          field("mean", p.mean, true);
          field("stddev", p.stddev, true);
          field("min", p.min, true);
          field("max", p.max, true);
          if (p.stddev <= 0) Bad(n, path, "stddev must be > 0");
          if (p.mean < p.min || p.mean > p.max) Bad(n, path, "mean must lie within [min, max]");
          break;
        case Dist::kLognormal:
          field("median", p.median, true);
          field("sigma", p.sigma, true);
          field("min", p.min, true);
          field("max", p.max, true);
          if (p.median <= 0) Bad(n, path, "median must be > 0");
          if (p.sigma <= 0) Bad(n, path, "sigma must be > 0");
          break;
        case Dist::kChoice: {
          YAML::Node vals = r.Child("values", true);
          YAML::Node ws = r.Child("weights", false);
          if (vals.IsDefined()) {
            if (!vals.IsSequence() || vals.size() == 0 || vals.size() > 1024) {
              Bad(vals, path + ".values", "expected a list of 1 to 1024 numbers");
            } else {
              for (size_t i = 0; i < vals.size(); ++i) {
                if (auto v = num(vals[i], fmt::format("{}.values[{}]", path, i))) p.choices.push_back(*v);
              }
            }
          }
          if (ws.IsDefined()) {
            if (!ws.IsSequence() || ws.size() != vals.size()) {
              Bad(ws, path + ".weights", "expected one weight per value");
            } else {
              double sum = 0;
              for (size_t i = 0; i < ws.size(); ++i) {
                auto w = Number(ws[i], fmt::format("{}.weights[{}]", path, i), false);
                if (w && *w < 0) Bad(ws[i], fmt::format("{}.weights[{}]", path, i), "weights must be >= 0");
                if (w) {
                  p.weights.push_back(*w);
                  sum += *w;
                }
              }
              if (sum <= 0) Bad(ws, path + ".weights", "weights must not all be 0");
            }
          }
          break;
        }
      }
      r.Finish();
    } else {
      Bad(n, path, "expected a number, [min, max] or {dist: ...}");
      return std::nullopt;
    }
    if (p.dist != Dist::kFixed && p.dist != Dist::kChoice && p.min > p.max) {
      Bad(n, path, fmt::format("min {} is above max {}", FormatNum(p.min), FormatNum(p.max)));
    }
    if (ctx_->issues->size() != before) return std::nullopt;
    if (p.Lower() < lim.lo || p.Upper() > lim.hi) {
      std::string what = p.IsFixed() ? FormatNum(p.value) : fmt::format("range [{}, {}]", FormatNum(p.Lower()), FormatNum(p.Upper()));
      Bad(n, path, fmt::format("{} is out of range [{}, {}]", what, FormatNum(lim.lo), FormatNum(lim.hi)));
      return std::nullopt;
    }
    return p;
  }

  YAML::Node node_;
  std::string path_;
  Ctx* ctx_;
  std::vector<std::string> known_;
};

// ---- cross-field checks -----------------------------------------------------------------

class Checker {
 public:
  Checker(const Scenario& s, std::vector<Issue>* issues) : s_(s), issues_(issues) {}

  void Run() {
    std::map<std::string, const NodeT<Param>*> nodes;
    for (size_t i = 0; i < s_.nodes.size(); ++i) {
      const auto& n = s_.nodes[i];
      std::string p = fmt::format("nodes[{}]", i);
      if (!nodes.emplace(n.name, &n).second) Add(p + ".name", fmt::format("node '{}' is defined twice", n.name));
      if (n.name.find('/') != std::string::npos) Add(p + ".name", "node names may not contain '/'");
      std::set<std::string> nics;
      for (size_t j = 0; j < n.nics.size(); ++j) {
        const auto& nic = n.nics[j];
        std::string np = fmt::format("{}.nics[{}]", p, j);
        if (!nics.insert(nic.name).second) Add(np + ".name", fmt::format("NIC '{}' is defined twice on this node", nic.name));
        for (size_t k = 0; k < nic.gpus.size(); ++k) {
          if (nic.gpus[k] >= n.gpus.count) Add(fmt::format("{}.gpus[{}]", np, k), GpuRange(nic.gpus[k], n));
        }
        if (!nic.switch_name.empty() && !HasSwitch(nic.switch_name)) {
          Add(np + ".switch", fmt::format("no switch '{}' in fabric.switches", nic.switch_name));
        }
      }
    }
    nodes_ = std::move(nodes);

    std::set<std::string> mounts;
    for (size_t i = 0; i < s_.mounts.size(); ++i) {
      const auto& m = s_.mounts[i];
      std::string p = fmt::format("storage.mounts[{}]", i);
      if (!mounts.insert(m.name).second) Add(p + ".name", fmt::format("mount '{}' is defined twice", m.name));
      for (size_t j = 0; j < m.nodes.size(); ++j) NodeRef(fmt::format("{}.nodes[{}]", p, j), m.nodes[j]);
      if (m.kind == MountKind::kLocalNvme && m.nodes.empty()) Add(p + ".nodes", "a local_nvme mount names the nodes that have it");
    }

    std::set<std::string> switches;
    for (size_t i = 0; i < s_.fabric.switches.size(); ++i) {
      if (!switches.insert(s_.fabric.switches[i].name).second) {
        Add(fmt::format("fabric.switches[{}].name", i), "switch defined twice");
      }
    }
    for (size_t i = 0; i < s_.fabric.links.size(); ++i) {
      const auto& l = s_.fabric.links[i];
      Endpoint(fmt::format("fabric.links[{}].a", i), l.a);
      Endpoint(fmt::format("fabric.links[{}].b", i), l.b);
    }

    std::set<std::string> seen_jobs;
    for (size_t i = 0; i < s_.jobs.size(); ++i) CheckJob(i, &seen_jobs);

    for (size_t i = 0; i < s_.inference.size(); ++i) {
      const auto& srv = s_.inference[i];
      std::string p = fmt::format("inference[{}]", i);
      if (!seen_jobs.insert(srv.id).second) Add(p + ".id", fmt::format("id '{}' is used twice (jobs and servers share ids)", srv.id));
      if (const auto* n = NodeRef(p + ".node", srv.node)) {
        if (srv.gpus > n->gpus.count) Add(p + ".gpus", fmt::format("{} GPUs but node '{}' has {}", srv.gpus, n->name, n->gpus.count));
      }
      if (srv.gpus % srv.tensor_parallel != 0) Add(p + ".tensor_parallel", "gpus must be a multiple of tensor_parallel");
      if (const auto* n = nodes_.count(srv.node) ? nodes_.at(srv.node) : nullptr) {
        double per_gpu = srv.model_gib.Upper() / static_cast<double>(srv.tensor_parallel);
        double gib = static_cast<double>(ModelSpec(n->gpus.model).memory_bytes) / (1024.0 * 1024 * 1024);
        if (per_gpu > 0.9 * gib) {
          Add(p + ".model_gib", fmt::format("{} GiB of weights per GPU (model_gib / tensor_parallel) leave no room for KV on a {} GiB GPU", FormatNum(per_gpu), FormatNum(std::floor(gib))));
        }
      }
    }

    for (size_t i = 0; i < s_.tenants.size(); ++i) {
      const auto& t = s_.tenants[i];
      std::string p = fmt::format("tenants[{}]", i);
      if (!seen_jobs.insert(t.id).second) Add(p + ".id", fmt::format("id '{}' is used twice", t.id));
      if (!t.mount.empty() && !HasMount(t.mount)) Add(p + ".mount", fmt::format("no mount '{}' in storage.mounts", t.mount));
      for (size_t j = 0; j < t.nodes.size(); ++j) NodeRef(fmt::format("{}.nodes[{}]", p, j), t.nodes[j]);
      if (!t.switch_name.empty() && !HasSwitch(t.switch_name)) Add(p + ".switch", fmt::format("no switch '{}' in fabric.switches", t.switch_name));
      if (t.end_s.Lower() < 0 && !(t.end_s.IsFixed() && t.end_s.value == -1)) {
        Add(p + ".end_s", "end_s is -1 (until the end) or a time >= 0");
      } else if (t.end_s.Upper() >= 0 && t.end_s.Lower() < t.start_s.Upper()) {
        Add(p + ".end_s", "end_s must be after start_s");
      }
    }

    if (Written("quick.duration_s")) {
      double quick_end = s_.quick.duration_s.Lower();
      if (s_.quick.duration_s.Upper() > s_.duration_s.Lower()) Add("quick.duration_s", "the quick run is longer than the full one");
      for (size_t i = 0; i < s_.jobs.size(); ++i) {
        if (s_.jobs[i].start_s.Upper() >= quick_end) Add(fmt::format("jobs[{}].start_s", i), "the job starts after the quick run ends (quick.duration_s)");
      }
      for (size_t i = 0; i < s_.timeline.size(); ++i) {
        std::string at = fmt::format("timeline[{}].at_s", i);
        if (Written(at) && s_.timeline[i].at_s.Upper() >= quick_end) Add(at, "after the quick run ends (quick.duration_s)");
      }
    }
    std::set<std::string> event_ids;
    for (size_t i = 0; i < s_.timeline.size(); ++i) {
      const auto& id = s_.timeline[i].id;
      if (!id.empty() && !event_ids.insert(id).second) Add(fmt::format("timeline[{}].id", i), fmt::format("event id '{}' is used twice", id));
      CheckEvent(i);
    }
  }

 private:
  void Add(const std::string& path, std::string message) {
    // The closest written ancestor carries the place (a missing key points at its parent).
    std::string p = path;
    while (true) {
      auto it = s_.marks.find(p);
      if (it != s_.marks.end()) {
        issues_->push_back({path, it->second.first, it->second.second, std::move(message)});
        return;
      }
      size_t cut = p.find_last_of(".[");
      if (cut == std::string::npos || cut == 0) break;
      p.resize(cut);
    }
    issues_->push_back({path, 0, 0, std::move(message)});
  }
  bool Written(const std::string& path) const { return s_.marks.contains(path); }

  static std::string GpuRange(int64_t gpu, const NodeT<Param>& n) {
    return fmt::format("GPU index {} is beyond node '{}' ({} GPUs: 0..{})", gpu, n.name, n.gpus.count, n.gpus.count - 1);
  }
  const NodeT<Param>* NodeRef(const std::string& path, const std::string& name) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) {
      Add(path, fmt::format("no node '{}' in nodes", name));
      return nullptr;
    }
    return it->second;
  }
  bool HasMount(const std::string& name) const {
    return std::any_of(s_.mounts.begin(), s_.mounts.end(), [&](const auto& m) { return m.name == name; });
  }
  bool HasSwitch(const std::string& name) const {
    return std::any_of(s_.fabric.switches.begin(), s_.fabric.switches.end(), [&](const auto& m) { return m.name == name; });
  }
  const JobT<Param>* JobRef(const std::string& id) const {
    for (const auto& j : s_.jobs) {
      if (j.id == id) return &j;
    }
    return nullptr;
  }
  bool HasTenant(const std::string& id) const {
    return std::any_of(s_.tenants.begin(), s_.tenants.end(), [&](const auto& t) { return t.id == id; }) ||
           JobRef(id) != nullptr;
  }
  const NicT<Param>* NicRef(const NodeT<Param>& n, const std::string& nic) const {
    for (const auto& x : n.nics) {
      if (x.name == nic) return &x;
    }
    return nullptr;
  }
  void Endpoint(const std::string& path, const std::string& e) {
    size_t slash = e.find('/');
    bool named = slash == std::string::npos ? IsValidName(e) : IsValidName(e.substr(0, slash)) && IsValidName(e.substr(slash + 1));
    if (!named) return Add(path, "expected a switch name or NODE/NIC made of names ([A-Za-z0-9._-])");
    if (slash == std::string::npos) {
      if (!HasSwitch(e)) Add(path, fmt::format("'{}' is neither a switch nor NODE/NIC", e));
      return;
    }
    auto it = nodes_.find(e.substr(0, slash));
    if (it == nodes_.end() || NicRef(*it->second, e.substr(slash + 1)) == nullptr) {
      Add(path, fmt::format("no NIC '{}'", e));
    }
  }

  void CheckParallel(const JobT<Param>& j, const std::string& p) {
    const auto& par = j.parallel;
    int64_t ranks = static_cast<int64_t>(j.nodes.size()) * j.gpus_per_node;
    if (ranks <= 0) return;
    if (ranks % (par.tp * par.pp) != 0) {
      Add(p + ".parallel", fmt::format("tp {} x pp {} does not divide the job's {} ranks", par.tp, par.pp, ranks));
      return;
    }
    int64_t dp = ranks / (par.tp * par.pp);
    if (Written(p + ".parallel.dp") && par.dp != dp) {
      Add(p + ".parallel.dp", fmt::format("{} ranks / (tp {} x pp {}) is dp {}, not {}", ranks, par.tp, par.pp, dp, par.dp));
    }
    // Tensor parallelism lives on NVLink: a group never spans nodes.
    if (j.gpus_per_node % par.tp != 0) Add(p + ".parallel.tp", fmt::format("tp {} does not divide gpus_per_node {}: a tensor-parallel group stays inside a node", par.tp, j.gpus_per_node));
    for (size_t c = 0; c < j.collectives.size(); ++c) {
      const auto& col = j.collectives[c];
      std::string cp = fmt::format("{}.collectives[{}].group", p, c);
      int64_t size = col.group == CommGroup::kTp ? par.tp : col.group == CommGroup::kPp ? par.pp : col.group == CommGroup::kDp ? dp : ranks;
      if (size < 2 && Written(cp)) Add(cp, fmt::format("a {} group of this job has {} rank: nothing to communicate", EnumName(col.group), size));
      if (col.op == CollectiveOp::kSendRecv && col.group != CommGroup::kPp && Written(cp)) Add(cp, "send_recv goes between pipeline stages (group pp)");
    }
  }
  bool GpuInUse(const std::string& node, int64_t gpu) const {
    for (const auto& j : s_.jobs) {
      if (Gpus(j).contains({node, gpu})) return true;
    }
    for (const auto& srv : s_.inference) {
      if (srv.node == node && gpu < srv.gpus) return true;
    }
    return false;
  }
  // The GPUs a job runs on, as (node, index).
  std::set<std::pair<std::string, int64_t>> Gpus(const JobT<Param>& j) const {
    std::set<std::pair<std::string, int64_t>> out;
    for (const auto& n : j.nodes) {
      if (j.gpu_indices.empty()) {
        for (int64_t g = 0; g < j.gpus_per_node; ++g) out.emplace(n, g);
      } else {
        for (int64_t g : j.gpu_indices) out.emplace(n, g);
      }
    }
    return out;
  }

  void CheckJob(size_t i, std::set<std::string>* seen) {
    const auto& j = s_.jobs[i];
    std::string p = fmt::format("jobs[{}]", i);
    if (!seen->insert(j.id).second) Add(p + ".id", fmt::format("job id '{}' is used twice", j.id));
    std::set<std::string> uniq;
    for (size_t k = 0; k < j.nodes.size(); ++k) {
      std::string np = fmt::format("{}.nodes[{}]", p, k);
      if (!uniq.insert(j.nodes[k]).second) Add(np, fmt::format("node '{}' listed twice", j.nodes[k]));
      const auto* n = NodeRef(np, j.nodes[k]);
      if (n == nullptr) continue;
      if (j.gpus_per_node > n->gpus.count) {
        Add(p + ".gpus_per_node", fmt::format("{} GPUs per node but node '{}' has {}", j.gpus_per_node, n->name, n->gpus.count));
      }
      for (size_t g = 0; g < j.gpu_indices.size(); ++g) {
        if (j.gpu_indices[g] >= n->gpus.count) Add(fmt::format("{}.gpu_indices[{}]", p, g), GpuRange(j.gpu_indices[g], *n));
      }
    }
    if (!j.gpu_indices.empty() && static_cast<int64_t>(j.gpu_indices.size()) != j.gpus_per_node) {
      Add(p + ".gpu_indices", fmt::format("{} indices but gpus_per_node is {}", j.gpu_indices.size(), j.gpus_per_node));
    }
    if (j.start_s.Upper() >= s_.duration_s.Lower()) Add(p + ".start_s", "the job starts after the scenario ends (duration_s)");
    CheckParallel(j, p);
    if (j.checkpoint) {
      const auto& c = *j.checkpoint;
      if (!HasMount(c.mount)) {
        Add(p + ".checkpoint.mount", fmt::format("no mount '{}' in storage.mounts", c.mount));
      } else {
        for (const auto& m : s_.mounts) {
          if (m.name != c.mount || m.nodes.empty()) continue;
          for (const auto& n : j.nodes) {
            if (std::find(m.nodes.begin(), m.nodes.end(), n) == m.nodes.end()) {
              Add(p + ".checkpoint.mount", fmt::format("mount '{}' is not on node '{}'", c.mount, n));
            }
          }
        }
      }
    }
    const auto& loss = j.loss;
    switch (loss.model) {
      case LossModel::kDriftExplode:
        if (!Written(p + ".loss.drift_start_step") || !Written(p + ".loss.explode_step")) {
          Add(p + ".loss", "drift_explode needs drift_start_step and explode_step");
        } else if (loss.drift_start_step.Upper() >= loss.explode_step.Lower()) {
          Add(p + ".loss.explode_step", "explode_step must come after drift_start_step (whole ranges)");
        } else if (loss.explode_step.Upper() > j.steps.Lower()) {
          Add(p + ".loss.explode_step", "explode_step is beyond the job's steps");
        }
        break;
      case LossModel::kNan:
        if (!Written(p + ".loss.nan_step")) {
          Add(p + ".loss", "model nan needs nan_step");
        } else if (loss.nan_step.Upper() > j.steps.Lower()) {
          Add(p + ".loss.nan_step", "nan_step is beyond the job's steps");
        }
        break;
      default:
        break;
    }
    if (j.resume_from) {
      const auto& r = *j.resume_from;
      const auto* orig = JobRef(r.job);
      if (orig == nullptr) {
        Add(p + ".resume_from.job", fmt::format("no job '{}'", r.job));
      } else if (!orig->checkpoint) {
        Add(p + ".resume_from.job", fmt::format("job '{}' writes no checkpoints", r.job));
      } else {
        if (orig->checkpoint->every_steps > 0 && r.step % orig->checkpoint->every_steps != 0) {
          Add(p + ".resume_from.step", fmt::format("job '{}' saves every {} steps; {} is not a save", r.job, orig->checkpoint->every_steps, r.step));
        }
        if (static_cast<double>(r.step) > orig->steps.Lower()) Add(p + ".resume_from.step", "beyond the original job's steps");
      }
      if (static_cast<double>(r.step) >= j.steps.Lower()) Add(p + ".resume_from.step", "the job would have no steps left after resuming");
    }
    if (!j.after.empty()) {
      const auto* before = JobRef(j.after);
      if (before == nullptr) {
        Add(p + ".after", fmt::format("no job '{}'", j.after));
      } else if (before == &j) {
        Add(p + ".after", "a job cannot start after itself");
      } else {
        // A chain of `after` must end: a cycle would hold every job in it for ever.
        std::set<std::string> seen{j.id};
        for (const auto* k = before; k != nullptr && !k->after.empty(); k = JobRef(k->after)) {
          if (!seen.insert(k->id).second) {
            Add(p + ".after", fmt::format("job '{}' waits for itself through '{}'", j.id, j.after));
            break;
          }
        }
      }
    }
    if (j.rerun_of) {
      const auto& r = *j.rerun_of;
      const auto* orig = JobRef(r.job);
      if (orig == nullptr) {
        Add(p + ".rerun_of.job", fmt::format("no job '{}'", r.job));
      } else if (orig == &j) {
        Add(p + ".rerun_of.job", "a job cannot be a rerun of itself");
      } else if (r.disjoint_gpus) {
        auto mine = Gpus(j);
        for (const auto& g : Gpus(*orig)) {
          if (mine.contains(g)) {
            Add(p + ".rerun_of", fmt::format("shares GPU {}:{} with job '{}' but disjoint_gpus is true", g.first, g.second, r.job));
            break;
          }
        }
      }
    }
  }

  void CheckEvent(size_t i) {
    const auto& e = s_.timeline[i];
    std::string p = fmt::format("timeline[{}]", i);
    bool has_s = Written(p + ".at_s");
    bool has_step = Written(p + ".at_step");
    if (has_s == has_step) Add(p, "an event has exactly one of at_s or at_step");
    if (has_s && e.at_s.Upper() >= s_.duration_s.Lower()) {
      Add(p + ".at_s", fmt::format("at {} s, after the scenario ends (duration_s {})", FormatNum(e.at_s.Upper()), FormatNum(s_.duration_s.Lower())));
    }
    const JobT<Param>* job = nullptr;
    if (!e.job.empty()) {
      job = JobRef(e.job);
      if (job == nullptr) Add(p + ".job", fmt::format("no job '{}'", e.job));
    }
    if (has_step) {
      if (e.job.empty()) Add(p + ".at_step", "at_step needs job (whose steps count)");
      if (job != nullptr && e.at_step.Upper() > job->steps.Lower()) Add(p + ".at_step", "beyond the job's steps");
    }
    // What each kind needs; everything else written for the kind is an error, so a
    // misplaced field does not silently do nothing.
    std::vector<std::string_view> needs;
    std::vector<std::string_view> may;
    switch (e.kind) {
      case EventKind::kThermalThrottle: needs = {"node", "gpu"}; may = {"clock_factor", "duration_s"}; break;
      case EventKind::kPowerCap: needs = {"node", "gpu"}; may = {"power_limit_w", "duration_s"}; break;
      case EventKind::kEccUncorrectable: needs = {"node", "gpu"}; may = {"xid", "count", "effect"}; break;
      case EventKind::kEccCorrected: needs = {"node", "gpu"}; may = {"count"}; break;
      case EventKind::kXid: needs = {"node", "gpu", "xid"}; may = {"effect"}; break;
      case EventKind::kRowRemap: needs = {"node", "gpu"}; may = {"count", "failure", "effect"}; break;
      case EventKind::kNvlinkErrors: needs = {"node", "gpu"}; may = {"link", "count", "duration_s"}; break;
      case EventKind::kIbLinkDegrade: needs = {"node", "nic"}; may = {"bandwidth_factor", "symbol_errors_per_s", "duration_s", "ramp_s"}; break;
      case EventKind::kIbLinkDown: needs = {"node", "nic"}; may = {"duration_s"}; break;
      case EventKind::kIbCongestion: needs = {"node", "nic", "other_job"}; may = {"bandwidth_factor", "duration_s"}; break;
      case EventKind::kStorageSlowdown: needs = {"mount"}; may = {"bandwidth_factor", "fsync_ms", "duration_s", "ramp_s"}; break;
      case EventKind::kHostCpuContention: needs = {"node"}; may = {"cpu_share", "duration_s"}; break;
      case EventKind::kRankHang: needs = {"job", "rank", "collective"}; break;
      case EventKind::kGpuLost: needs = {"node", "gpu"}; may = {"effect"}; break;
      case EventKind::kSilentCorruption: needs = {"node", "gpu", "effect"}; may = {"duration_s"}; break;
    }
    static constexpr std::string_view kAlways[] = {"id", "kind", "at_s", "at_step", "job"};
    static constexpr std::string_view kAll[] = {"node", "gpu", "nic", "mount", "rank", "collective", "link", "xid", "count",
                                                "failure", "duration_s", "clock_factor", "power_limit_w", "bandwidth_factor",
                                                "fsync_ms", "cpu_share", "symbol_errors_per_s", "other_job", "effect", "ramp_s"};
    std::string kind(EnumName(e.kind));
    for (auto k : needs) {
      if (!Written(fmt::format("{}.{}", p, k))) Add(p, fmt::format("kind {} needs {}", kind, k));
    }
    for (auto k : kAll) {
      std::string kp = fmt::format("{}.{}", p, k);
      if (!Written(kp)) continue;
      bool ok = std::find(needs.begin(), needs.end(), k) != needs.end() || std::find(may.begin(), may.end(), k) != may.end() ||
                std::find(std::begin(kAlways), std::end(kAlways), k) != std::end(kAlways);
      if (!ok) Add(kp, fmt::format("does not apply to kind {}", kind));
    }
    const NodeT<Param>* node = nullptr;
    if (Written(p + ".node")) node = NodeRef(p + ".node", e.node);
    if (node != nullptr && Written(p + ".gpu") && e.gpu >= node->gpus.count) Add(p + ".gpu", GpuRange(e.gpu, *node));
    if (node != nullptr && Written(p + ".nic") && NicRef(*node, e.nic) == nullptr) {
      Add(p + ".nic", fmt::format("no NIC '{}' on node '{}'", e.nic, node->name));
    }
    if (Written(p + ".ramp_s") && Written(p + ".duration_s") && e.duration_s.Lower() > 0 && e.ramp_s.Upper() > e.duration_s.Lower()) {
      Add(p + ".ramp_s", "the ramp is longer than the event (duration_s)");
    }
    if (node != nullptr && e.kind == EventKind::kPowerCap) {
      const auto& spec = ModelSpec(node->gpus.model);
      if (e.power_limit_w.Lower() < spec.min_power_limit_w || e.power_limit_w.Upper() > spec.power_limit_w) {
        Add(p + ".power_limit_w", fmt::format("{} takes a power limit of {}-{} W", EnumName(node->gpus.model), spec.min_power_limit_w, spec.power_limit_w));
      }
    }
    if (Written(p + ".mount") && !HasMount(e.mount)) Add(p + ".mount", fmt::format("no mount '{}' in storage.mounts", e.mount));
    if (node != nullptr && Written(p + ".gpu") && e.effect != FaultEffect::kNone && !GpuInUse(node->name, e.gpu)) {
      Add(p + ".effect", fmt::format("no job or server runs on GPU {}:{}; the effect would touch nothing", node->name, e.gpu));
    }
    if (e.kind == EventKind::kSilentCorruption && e.effect == FaultEffect::kNone && Written(p + ".effect")) {
      Add(p + ".effect", "a silent corruption the job never sees cannot be diagnosed; say what it does");
    }
    if (Written(p + ".other_job") && !HasTenant(e.other_job)) Add(p + ".other_job", fmt::format("no tenant or job '{}'", e.other_job));
    if (job != nullptr && Written(p + ".rank")) {
      int64_t ranks = static_cast<int64_t>(job->nodes.size()) * job->gpus_per_node;
      if (e.rank >= ranks) Add(p + ".rank", fmt::format("rank {} but job '{}' has {} ranks", e.rank, job->id, ranks));
    }
  }

  const Scenario& s_;
  std::vector<Issue>* issues_;
  std::map<std::string, const NodeT<Param>*> nodes_;
};

// ---- reruns inherit the recipe ----------------------------------------------------------------

// The parts of a job that are its recipe (what the code computes), as opposed to where and
// when it runs. A rerun_of job takes every one it does not write from the original.
constexpr std::string_view kRecipeKeys[] = {"log", "work", "parallel", "collectives", "data_loader", "checkpoint", "loss", "lr"};

void InheritRecipe(Scenario* s, size_t i, std::vector<int>* state) {
  if ((*state)[i] != 0) return;  // done, or in progress (a cycle: the checker reports it)
  (*state)[i] = 1;
  auto& job = s->jobs[i];
  if (job.rerun_of) {
    for (size_t o = 0; o < s->jobs.size(); ++o) {
      if (o == i || s->jobs[o].id != job.rerun_of->job) continue;
      InheritRecipe(s, o, state);
      const auto& orig = s->jobs[o];
      std::string mine = fmt::format("jobs[{}]", i);
      std::string theirs = fmt::format("jobs[{}]", o);
      for (auto key : kRecipeKeys) {
        std::string mp = fmt::format("{}.{}", mine, key);
        std::string tp = fmt::format("{}.{}", theirs, key);
        if (s->marks.contains(mp) || !s->marks.contains(tp)) continue;
        if (key == "log") job.log = orig.log;
        if (key == "work") job.work = orig.work;
        if (key == "parallel") job.parallel = orig.parallel;
        if (key == "collectives") job.collectives = orig.collectives;
        if (key == "data_loader") job.data_loader = orig.data_loader;
        if (key == "checkpoint") job.checkpoint = orig.checkpoint;
        if (key == "loss") job.loss = orig.loss;
        if (key == "lr") job.lr = orig.lr;
        // The marks come along (pointing at the original's lines), so checks of "was it
        // written" see the inherited fields and errors point where they were written.
        std::vector<std::pair<std::string, std::pair<int, int>>> copied;
        for (auto it = s->marks.lower_bound(tp); it != s->marks.end() && it->first.starts_with(tp); ++it) {
          std::string rest = it->first.substr(tp.size());
          if (!rest.empty() && rest[0] != '.' && rest[0] != '[') continue;
          copied.emplace_back(mp + rest, it->second);
        }
        for (auto& [k, v] : copied) s->marks.emplace(std::move(k), v);
      }
      break;
    }
  }
  (*state)[i] = 2;
}

void InheritRecipes(Scenario* s) {
  std::vector<int> state(s->jobs.size(), 0);
  for (size_t i = 0; i < s->jobs.size(); ++i) InheritRecipe(s, i, &state);
}

// FNV-1a over every recipe field as written (ranges as ranges), keys included.
class Fingerprinter {
 public:
  void Feed(std::string_view s) {
    for (unsigned char c : s) {
      h_ ^= c;
      h_ *= 0x100000001B3ULL;
    }
    h_ ^= 0xff;  // separator: "ab","c" differs from "a","bc"
    h_ *= 0x100000001B3ULL;
  }
  void FeedNum(double v) { Feed(fmt::format("{:.17g}", v)); }
  template <class T>
  void Num(std::string_view key, Param<T>& a, Param<T>&, Lim) {
    Feed(key);
    Feed(EnumName(a.dist));
    for (double v : {a.value, a.min, a.max, a.mean, a.stddev, a.median, a.sigma}) FeedNum(v);
    for (double v : a.choices) FeedNum(v);
    Feed("|");
    for (double v : a.weights) FeedNum(v);
  }
  template <class T>
  void Sampled(std::string_view key, Param<T>& a, Param<T>& b, Lim l) { Num(key, a, b, l); }
  void Int(std::string_view key, int64_t& a, int64_t&, Lim) { Feed(key); Feed(std::to_string(a)); }
  void Str(std::string_view key, std::string& a, std::string&, bool) { Feed(key); Feed(a); }
  void Name(std::string_view key, std::string& a, std::string& b, bool r) { Str(key, a, b, r); }
  void Path(std::string_view key, std::string& a, std::string& b, bool r) { Str(key, a, b, r); }
  void Names(std::string_view key, std::vector<std::string>& a, std::vector<std::string>& b, bool r) { Strs(key, a, b, r); }
  void Strs(std::string_view key, std::vector<std::string>& a, std::vector<std::string>&, bool) {
    Feed(key);
    for (const auto& x : a) Feed(x);
  }
  void Ints(std::string_view key, std::vector<int64_t>& a, std::vector<int64_t>&, Lim) {
    Feed(key);
    for (auto x : a) Feed(std::to_string(x));
  }
  void Bool(std::string_view key, bool& a, bool&) { Feed(key); Feed(a ? "1" : "0"); }
  template <class E>
  void Enum(std::string_view key, E& a, E&, bool = false) { Feed(key); Feed(EnumName(a)); }
  template <class S>
  void Obj(std::string_view key, S& a, S& b, bool) { Feed(key); VisitFields(*this, a, b); Feed("}"); }
  template <class S>
  void Opt(std::string_view key, std::optional<S>& a, std::optional<S>&) {
    Feed(key);
    if (a) VisitFields(*this, *a, *a);
    Feed("}");
  }
  template <class S>
  void List(std::string_view key, std::vector<S>& a, std::vector<S>&, size_t) {
    Feed(key);
    for (auto& x : a) {
      VisitFields(*this, x, x);
      Feed("}");
    }
  }
  template <class F>
  void Group(std::string_view, F&&) {}
  void Seed(std::string_view, std::optional<uint64_t>&, std::optional<uint64_t>&) {}
  void Ignore(std::string_view) {}
  uint64_t hash() const { return h_; }

 private:
  uint64_t h_ = 0xCBF29CE484222325ULL;
};

// ---- drawing --------------------------------------------------------------------------------

class Drawer {
 public:
  explicit Drawer(uint64_t seed) : seed_(seed) {}

  template <class T>
  void Num(std::string_view key, Param<T>& a, T& b, Lim) {
    double v = DrawParam(a, Sub(key));
    if constexpr (std::is_integral_v<T>) {
      b = static_cast<T>(std::llround(v));
    } else {
      b = v;
    }
  }
  template <class T>
  void Sampled(std::string_view, Param<T>& a, Param<T>& b, Lim) { b = a; }  // sampled by the simulator
  void Int(std::string_view, int64_t& a, int64_t& b, Lim) { b = a; }
  void Str(std::string_view, std::string& a, std::string& b, bool) { b = a; }
  void Name(std::string_view, std::string& a, std::string& b, bool) { b = a; }
  void Path(std::string_view, std::string& a, std::string& b, bool) { b = a; }
  void Names(std::string_view, std::vector<std::string>& a, std::vector<std::string>& b, bool) { b = a; }
  void Bool(std::string_view, bool& a, bool& b) { b = a; }
  template <class E>
  void Enum(std::string_view, E& a, E& b, bool = false) { b = a; }
  void Strs(std::string_view, std::vector<std::string>& a, std::vector<std::string>& b, bool) { b = a; }
  void Ints(std::string_view, std::vector<int64_t>& a, std::vector<int64_t>& b, Lim) { b = a; }
  void Seed(std::string_view, std::optional<uint64_t>&, std::optional<uint64_t>& b) { b = seed_; }
  template <class SA, class SB>
  void Obj(std::string_view key, SA& a, SB& b, bool) { In(Sub(key), a, b); }
  template <class SA, class SB>
  void Opt(std::string_view key, std::optional<SA>& a, std::optional<SB>& b) {
    if (!a) return;
    b.emplace();
    In(Sub(key), *a, *b);
  }
  template <class SA, class SB>
  void List(std::string_view key, std::vector<SA>& a, std::vector<SB>& b, size_t) {
    b.resize(a.size());
    for (size_t i = 0; i < a.size(); ++i) In(fmt::format("{}[{}]", Sub(key), i), a[i], b[i]);
  }
  template <class F>
  void Group(std::string_view key, F&& fn) {
    std::string saved = path_;
    path_ = Sub(key);
    fn(*this);
    path_ = saved;
  }
  void Ignore(std::string_view) {}

 private:
  std::string Sub(std::string_view key) const { return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key); }
  template <class SA, class SB>
  void In(const std::string& path, SA& a, SB& b) {
    std::string saved = path_;
    path_ = path;
    VisitFields(*this, a, b);
    path_ = saved;
  }
  template <class T>
  double DrawParam(const Param<T>& p, const std::string& path) const {
    if (p.IsFixed()) return p.value;
    Rng rng(FieldSeed(seed_, path));
    return Sample(p, rng);
  }
  uint64_t seed_;
  std::string path_;
};

// Prints resolved values; A and B are the same object.
class JsonWriter {
 public:
  explicit JsonWriter(nlohmann::json* out) : out_(out) {}
  template <class T>
  void Num(std::string_view key, T& a, T&, Lim) { (*out_)[std::string(key)] = a; }
  template <class T>
  void Sampled(std::string_view key, Param<T>& a, Param<T>&, Lim) {
    nlohmann::json d;
    d["dist"] = EnumName(a.dist);
    switch (a.dist) {
      case scenario::Dist::kFixed: d["value"] = a.value; break;
      case scenario::Dist::kUniform: d["min"] = a.min; d["max"] = a.max; break;
      case scenario::Dist::kNormal: d["mean"] = a.mean; d["stddev"] = a.stddev; d["min"] = a.min; d["max"] = a.max; break;
      case scenario::Dist::kLognormal: d["median"] = a.median; d["sigma"] = a.sigma; d["min"] = a.min; d["max"] = a.max; break;
      case scenario::Dist::kChoice: d["values"] = a.choices; if (!a.weights.empty()) d["weights"] = a.weights; break;
    }
    (*out_)[std::string(key)] = std::move(d);
  }
  void Int(std::string_view key, int64_t& a, int64_t&, Lim) { (*out_)[std::string(key)] = a; }
  void Str(std::string_view key, std::string& a, std::string&, bool) { (*out_)[std::string(key)] = a; }
  void Name(std::string_view key, std::string& a, std::string& b, bool r) { Str(key, a, b, r); }
  void Path(std::string_view key, std::string& a, std::string& b, bool r) { Str(key, a, b, r); }
  void Names(std::string_view key, std::vector<std::string>& a, std::vector<std::string>&, bool) { (*out_)[std::string(key)] = a; }
  void Bool(std::string_view key, bool& a, bool&) { (*out_)[std::string(key)] = a; }
  template <class E>
  void Enum(std::string_view key, E& a, E&, bool = false) { (*out_)[std::string(key)] = EnumName(a); }
  void Strs(std::string_view key, std::vector<std::string>& a, std::vector<std::string>&, bool) { (*out_)[std::string(key)] = a; }
  void Ints(std::string_view key, std::vector<int64_t>& a, std::vector<int64_t>&, Lim) { (*out_)[std::string(key)] = a; }
  void Seed(std::string_view key, std::optional<uint64_t>& a, std::optional<uint64_t>&) {
    if (a) (*out_)[std::string(key)] = *a;
  }
  template <class S>
  void Obj(std::string_view key, S& a, S&, bool) { (*out_)[std::string(key)] = Sub(a); }
  template <class S>
  void Opt(std::string_view key, std::optional<S>& a, std::optional<S>&) {
    if (a) (*out_)[std::string(key)] = Sub(*a);
  }
  template <class S>
  void List(std::string_view key, std::vector<S>& a, std::vector<S>&, size_t) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto& x : a) arr.push_back(Sub(x));
    (*out_)[std::string(key)] = std::move(arr);
  }
  template <class F>
  void Group(std::string_view key, F&& fn) {
    nlohmann::json g = nlohmann::json::object();
    JsonWriter w(&g);
    fn(w);
    (*out_)[std::string(key)] = std::move(g);
  }
  void Ignore(std::string_view) {}

 private:
  template <class S>
  nlohmann::json Sub(S& s) {
    nlohmann::json j = nlohmann::json::object();
    JsonWriter w(&j);
    VisitFields(w, s, s);
    return j;
  }
  nlohmann::json* out_;
};

}  // namespace
}  // namespace internal

ParsedScenario ParseScenarioText(std::string_view text) {
  ParsedScenario out;
  YAML::Node root;
  if (!internal::LoadBounded(text, &root, &out.issues)) return out;
  if (!root.IsMap()) {
    auto [l, c] = internal::LineCol(root);
    out.issues.push_back({"", l, c, "a scenario file is a YAML mapping (key: value lines)"});
    return out;
  }
  Scenario s;
  internal::Ctx ctx{&out.issues, &s.marks};
  // Another version's fields would only produce noise: check the version first.
  {
    const YAML::Node& croot = root;
    YAML::Node v = croot["version"];
    auto [l, c] = internal::LineCol(v.IsDefined() ? v : root);
    if (!v.IsDefined()) {
      out.issues.push_back({"version", l, c, fmt::format("required key is missing (this build reads version {})", kFormatVersion)});
      return out;
    }
    if (!v.IsScalar() || v.Scalar() != std::to_string(kFormatVersion)) {
      out.issues.push_back({"version", l, c,
                            fmt::format("unsupported version '{}'; this build reads version {}", v.IsScalar() ? v.Scalar() : "?", kFormatVersion)});
      return out;
    }
  }
  internal::Reader reader(root, "", &ctx);
  ScenarioT<Param>& base = s;
  internal::VisitFields(reader, base, base);
  reader.Finish();
  internal::InheritRecipes(&s);
  internal::Checker(s, &out.issues).Run();
  std::stable_sort(out.issues.begin(), out.issues.end(), [](const Issue& a, const Issue& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (!out.issues.empty()) return out;
  // Documented defaults that depend on the event kind (docs/scenarios.md, "Timeline").
  for (size_t i = 0; i < s.timeline.size(); ++i) {
    auto& e = s.timeline[i];
    if (s.marks.contains(fmt::format("timeline[{}].xid", i))) continue;
    if (e.kind == EventKind::kEccUncorrectable) e.xid = 48;
    if (e.kind == EventKind::kGpuLost) e.xid = 79;
  }
  out.scenario = std::move(s);
  return out;
}

ParsedScenario ParseScenarioFile(const std::string& path) {
  ParsedScenario out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.issues.push_back({"", 0, 0, fmt::format("cannot open {}", path)});
    return out;
  }
  std::string text;
  text.resize(kMaxFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseScenarioText(text);
}

Result<Scenario> ParseScenario(std::string_view text, std::string_view source) {
  ParsedScenario p = ParseScenarioText(text);
  if (p.scenario) return std::move(*p.scenario);
  std::string msg = fmt::format("{} problem(s) in {}", p.issues.size(), source);
  for (const auto& i : p.issues) msg += "\n" + i.ToString(source);
  return MakeError(ErrorCode::kParse, std::move(msg));
}

Result<ResolvedScenario> Resolve(const Scenario& scenario, uint64_t seed) {
  ScenarioT<Param> copy = scenario;
  ResolvedScenario out;
  internal::Drawer drawer(seed);
  internal::VisitFields(drawer, copy, out);
  // Rules that hold for every draw were checked on whole ranges; only relations between two
  // ranged fields of the same distribution family can still be crossed here.
  for (const auto& t : out.tenants) {
    if (t.end_s >= 0 && t.end_s <= t.start_s) return MakeErrorF(ErrorCode::kInvalidArgument, "tenant {}: drawn end_s before start_s", t.id);
  }
  return out;
}

uint64_t RecipeFingerprint(const Scenario& scenario, size_t job) {
  if (job >= scenario.jobs.size()) return 0;
  JobT<Param> j = scenario.jobs[job];
  internal::Fingerprinter f;
  f.Obj("work", j.work, j.work, false);
  f.Obj("parallel", j.parallel, j.parallel, false);
  f.List("collectives", j.collectives, j.collectives, 0);
  f.Obj("data_loader", j.data_loader, j.data_loader, false);
  f.Obj("loss", j.loss, j.loss, false);
  f.Obj("lr", j.lr, j.lr, false);
  f.Obj("log", j.log, j.log, false);
  return f.hash();
}

Scenario QuickVariant(const Scenario& scenario) {
  Scenario out = scenario;
  if (scenario.marks.contains("quick.time_compression")) out.time_compression = scenario.quick.time_compression;
  if (scenario.marks.contains("quick.duration_s")) out.duration_s = scenario.quick.duration_s;
  return out;
}

uint64_t DrawSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string ResolvedToJson(const ResolvedScenario& resolved) {
  ResolvedScenario copy = resolved;
  nlohmann::json j = nlohmann::json::object();
  internal::JsonWriter w(&j);
  internal::VisitFields(w, copy, copy);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ithbat::scenario
