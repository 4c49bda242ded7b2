// User pattern sets: RE2 with named groups, loaded from JSON, so a site can teach the agent its
// own trainer's lines without a new build. Compiled once; every stream's parser shares the
// compiled sets (RE2 and RE2::Set are safe to match from several threads).
//
// Hot path: each set holds an RE2::Set of its patterns; a line costs one DFA pass per set with
// no allocation unless some pattern matches, and only the matching patterns run with submatches.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <re2/re2.h>
#include <re2/set.h>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/signals_scan.h"

namespace ithbat::collect::joblog {

namespace {
constexpr size_t kMaxSets = 64;
constexpr size_t kMaxPatternsPerSet = 64;
constexpr size_t kMaxRegexBytes = 1024;
constexpr size_t kMaxFileBytes = 1024 * 1024;
constexpr size_t kMaxNameBytes = 48;
constexpr int64_t kRe2MaxMem = 2 << 20;  // per compiled regex; the default is 8 MiB

enum class PatternEvent : uint8_t { kMetrics, kCheckpointBegin, kCheckpointEnd, kError };
enum class GroupRole : uint8_t { kStep, kLoss, kEval, kMetric, kPath, kBytes, kText, kRank, kTotalSteps };

bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}
bool ValidSetName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!(signals::IsWordChar(c) || c == '-' || c == '.')) return false;
  }
  return true;
}
}  // namespace

struct PatternSet {
  struct Group {
    std::string name;
    int index = 0;  // capture index (1-based, RE2 numbering)
    GroupRole role = GroupRole::kMetric;
  };
  struct Pattern {
    std::unique_ptr<RE2> re;
    PatternEvent event = PatternEvent::kMetrics;
    std::string error_class;
    std::vector<Group> groups;
    int captures = 0;
  };
  std::string name;
  std::string parser_name;  // "user:<name>"
  std::vector<Pattern> patterns;
  std::unique_ptr<RE2::Set> set;
};

namespace {

Result<std::shared_ptr<const PatternSet>> CompileSet(const nlohmann::json& js, size_t set_index,
                                                     const std::set<std::string>& seen) {
  auto fail = [&](const std::string& where, const std::string& why) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "pattern_sets[{}]{}: {}", set_index, where, why);
  };
  if (!js.is_object()) return fail("", "must be an object");
  for (const auto& [k, v] : js.items()) {
    if (k != "name" && k != "patterns" && k != "comment") return fail("", fmt::format("unknown key \"{}\"", k));
  }
  if (!js.contains("name") || !js["name"].is_string()) return fail("", "\"name\" (string) is required");
  auto set = std::make_shared<PatternSet>();
  set->name = js["name"].get<std::string>();
  const std::string label = fmt::format(" \"{}\"", set->name);
  if (!ValidSetName(set->name)) return fail("", "\"name\" must be 1-64 characters of [A-Za-z0-9_.-]");
  if (seen.contains(set->name)) return fail(label, "duplicate set name");
  set->parser_name = "user:" + set->name;
  if (!js.contains("patterns") || !js["patterns"].is_array() || js["patterns"].empty())
    return fail(label, "\"patterns\" (non-empty array) is required");
  const auto& patterns = js["patterns"];
  if (patterns.size() > kMaxPatternsPerSet)
    return fail(label, fmt::format("too many patterns ({} > {})", patterns.size(), kMaxPatternsPerSet));

  RE2::Options opts;
  opts.set_log_errors(false);
  opts.set_max_mem(kRe2MaxMem);
  set->set = std::make_unique<RE2::Set>(opts, RE2::UNANCHORED);
  for (size_t i = 0; i < patterns.size(); ++i) {
    const auto& pj = patterns[i];
    const std::string where = fmt::format("{} patterns[{}]", label, i);
    if (!pj.is_object()) return fail(where, "must be an object");
    for (const auto& [k, v] : pj.items()) {
      if (k != "regex" && k != "event" && k != "class" && k != "comment")
        return fail(where, fmt::format("unknown key \"{}\"", k));
    }
    if (!pj.contains("regex") || !pj["regex"].is_string()) return fail(where, "\"regex\" (string) is required");
    const std::string regex = pj["regex"].get<std::string>();
    if (regex.empty()) return fail(where, "empty regex");
    if (regex.size() > kMaxRegexBytes)
      return fail(where, fmt::format("regex too long ({} bytes > {})", regex.size(), kMaxRegexBytes));

    PatternSet::Pattern p;
    const std::string event = pj.contains("event") && pj["event"].is_string() ? pj["event"].get<std::string>() : "";
    if (pj.contains("event") && !pj["event"].is_string()) return fail(where, "\"event\" must be a string");
    if (event.empty() || event == "metrics") {
      p.event = PatternEvent::kMetrics;
    } else if (event == "checkpoint_begin") {
      p.event = PatternEvent::kCheckpointBegin;
    } else if (event == "checkpoint_end") {
      p.event = PatternEvent::kCheckpointEnd;
    } else if (event == "error") {
      p.event = PatternEvent::kError;
    } else {
      return fail(where, fmt::format("unknown event \"{}\" (metrics, checkpoint_begin, checkpoint_end, error)", event));
    }
    if (pj.contains("class")) {
      if (p.event != PatternEvent::kError) return fail(where, "\"class\" is only for \"event\": \"error\"");
      if (!pj["class"].is_string() || !ValidName(pj["class"].get<std::string>()))
        return fail(where, "\"class\" must be 1-48 characters of [a-z0-9_], starting with a letter");
      p.error_class = pj["class"].get<std::string>();
    } else if (p.event == PatternEvent::kError) {
      return fail(where, "\"event\": \"error\" needs a \"class\"");
    }

    p.re = std::make_unique<RE2>(regex, opts);
    if (!p.re->ok()) return fail(where, fmt::format("bad regex: {}", p.re->error()));
    p.captures = p.re->NumberOfCapturingGroups();
    if (p.captures > static_cast<int>(kMaxEventsPerLine))
      return fail(where, fmt::format("too many capture groups ({} > {})", p.captures, kMaxEventsPerLine));
    bool has_step = false;
    for (const auto& [gname, index] : p.re->NamedCapturingGroups()) {
      PatternSet::Group g{gname, index, GroupRole::kMetric};
      if (gname == "step") {
        g.role = GroupRole::kStep;
        has_step = true;
      } else if (gname == "loss") {
        g.role = GroupRole::kLoss;
      } else if (gname.starts_with("eval_") && ValidName(gname)) {
        g.role = GroupRole::kEval;
      } else if (gname == "rank") {
        g.role = GroupRole::kRank;
      } else if (gname == "total_steps") {
        g.role = GroupRole::kTotalSteps;
      } else if (gname == "path" || gname == "bytes" || gname == "text") {
        if (p.event == PatternEvent::kMetrics)
          return fail(where, fmt::format("group \"{}\" is an attribute and needs an \"event\"", gname));
        if (gname == "text" && p.event != PatternEvent::kError)
          return fail(where, "group \"text\" is only for \"event\": \"error\"");
        g.role = gname == "path" ? GroupRole::kPath : gname == "bytes" ? GroupRole::kBytes : GroupRole::kText;
      } else if (ValidName(gname)) {
        g.role = GroupRole::kMetric;
      } else {
        return fail(where, fmt::format("unknown group \"{}\" (metric groups are 1-48 characters of [a-z0-9_])", gname));
      }
      p.groups.push_back(std::move(g));
    }
    std::sort(p.groups.begin(), p.groups.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
    for (const auto& g : p.groups) {
      if (g.role == GroupRole::kTotalSteps && !has_step) return fail(where, "group \"total_steps\" needs a \"step\" group");
    }
    if (p.event == PatternEvent::kMetrics && p.groups.empty())
      return fail(where, "a metrics pattern needs at least one named group");
    std::string err;
    if (set->set->Add(regex, &err) < 0) return fail(where, fmt::format("bad regex: {}", err));
    set->patterns.push_back(std::move(p));
  }
  if (!set->set->Compile()) return fail(label, "the patterns together exceed the regex memory budget");
  return std::shared_ptr<const PatternSet>(std::move(set));
}

// One stream's view of the sets.
class UserParser final : public FormatParser {
 public:
  explicit UserParser(std::vector<std::shared_ptr<const PatternSet>> sets) : sets_(std::move(sets)) {}
  std::string_view name() const override { return name_; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    bool matched = false;
    line_start_ = out.size();
    for (const auto& set : sets_) {
      if (!set->set->Match(line.text, nullptr)) continue;  // no allocation on a foreign line
      hits_.clear();
      set->set->Match(line.text, &hits_);
      std::sort(hits_.begin(), hits_.end());
      for (int idx : hits_) {
        if (idx < 0 || static_cast<size_t>(idx) >= set->patterns.size()) continue;
        if (Apply(set->patterns[idx], line.text, out)) {
          matched = true;
          name_ = set->parser_name;
        }
      }
    }
    return matched;
  }

 private:
  bool Apply(const PatternSet::Pattern& p, std::string_view text, std::vector<ParsedEvent>& out) {
    re2::StringPiece subs[kMaxEventsPerLine + 1];
    if (!p.re->Match(text, 0, text.size(), RE2::UNANCHORED, subs, p.captures + 1)) return false;
    auto group = [&](int index) -> std::string_view {
      const re2::StringPiece& s = subs[index];
      return s.data() == nullptr ? std::string_view() : std::string_view(s.data(), s.size());
    };
    int64_t step = -1;
    int32_t rank = -1;
    std::optional<int64_t> total;
    for (const auto& g : p.groups) {
      const std::string_view v = group(g.index);
      if (g.role == GroupRole::kStep) {
        auto n = signals::Num(v);
        if (n && *n >= 0 && *n < 9e15 && *n == std::floor(*n)) step = static_cast<int64_t>(*n);
      } else if (g.role == GroupRole::kRank) {
        if (auto n = signals::LeadingInt(v); n && *n >= 0 && *n < 1'000'000) rank = static_cast<int32_t>(*n);
      } else if (g.role == GroupRole::kTotalSteps) {
        total = signals::LeadingInt(v);
      }
    }
    if (rank < 0) rank = signals::LinePrefixRank(text);
    // The bound is per line, over every pattern and set that matched it.
    auto room = [&] { return out.size() - line_start_ < kMaxEventsPerLine; };
    if (!room()) return true;
    if (step >= 0) {
      ParsedEvent e = signals::MetricEvent(EventKind::kStep, "", std::nan(""), rank, step);
      if (total) signals::AddAttr(e, "total_steps", static_cast<double>(*total));
      out.push_back(std::move(e));
    }
    if (p.event != PatternEvent::kMetrics) {
      ParsedEvent e;
      e.step = step;
      e.rank = rank;
      if (p.event == PatternEvent::kError) {
        e = signals::ErrorEvent(p.error_class, text, rank);
        e.step = step;
      } else {
        e.kind = p.event == PatternEvent::kCheckpointBegin ? EventKind::kCheckpointBegin : EventKind::kCheckpointEnd;
      }
      for (const auto& g : p.groups) {
        const std::string_view v = group(g.index);
        if (v.empty()) continue;
        if (g.role == GroupRole::kPath) {
          signals::AddAttr(e, "path", signals::CutText(v, 1024));
        } else if (g.role == GroupRole::kBytes) {
          auto b = signals::ParseSizePrefix(v);
          if (!b) {
            if (auto n = signals::LeadingInt(v); n && *n >= 0) b = n;
          }
          if (b) signals::AddAttr(e, "bytes", static_cast<double>(*b));
        } else if (g.role == GroupRole::kText) {
          e.text = signals::CutText(v);
        }
      }
      if (room()) out.push_back(std::move(e));
    }
    for (const auto& g : p.groups) {
      if (!room()) break;
      EventKind kind;
      std::string_view name = g.name;
      switch (g.role) {
        case GroupRole::kLoss: kind = EventKind::kLoss; break;
        case GroupRole::kEval: kind = EventKind::kEvalMetric; break;
        case GroupRole::kMetric: kind = EventKind::kTrainMetric; break;
        default: continue;
      }
      auto n = signals::Num(group(g.index));
      if (!n) continue;
      out.push_back(signals::MetricEvent(kind, name, *n, rank, step));
    }
    return true;
  }

  std::vector<std::shared_ptr<const PatternSet>> sets_;
  std::vector<int> hits_;
  size_t line_start_ = 0;
  std::string_view name_ = "user";  // points into a shared PatternSet, alive as long as sets_
};

}  // namespace

UserPatterns::UserPatterns() = default;
UserPatterns::~UserPatterns() = default;
UserPatterns::UserPatterns(UserPatterns&&) noexcept = default;
UserPatterns& UserPatterns::operator=(UserPatterns&&) noexcept = default;

Result<UserPatterns> UserPatterns::Parse(std::string_view json_text) {
  if (json_text.size() > kMaxFileBytes)
    return MakeErrorF(ErrorCode::kResourceExhausted, "pattern file too large ({} bytes > {})", json_text.size(),
                      kMaxFileBytes);
  UserPatterns result;
  try {
    const nlohmann::json doc = nlohmann::json::parse(json_text.begin(), json_text.end());
    if (!doc.is_object()) return MakeError(ErrorCode::kInvalidArgument, "pattern file: top level must be an object");
    for (const auto& [k, v] : doc.items()) {
      if (k != "pattern_sets" && k != "comment")
        return MakeErrorF(ErrorCode::kInvalidArgument, "pattern file: unknown key \"{}\"", k);
    }
    if (!doc.contains("pattern_sets") || !doc["pattern_sets"].is_array())
      return MakeError(ErrorCode::kInvalidArgument, "pattern file: \"pattern_sets\" (array) is required");
    const auto& sets = doc["pattern_sets"];
    if (sets.size() > kMaxSets)
      return MakeErrorF(ErrorCode::kInvalidArgument, "pattern file: too many pattern sets ({} > {})", sets.size(),
                        kMaxSets);
    std::set<std::string> seen;
    for (size_t i = 0; i < sets.size(); ++i) {
      auto set = CompileSet(sets[i], i, seen);
      if (!set) return std::unexpected(set.error());
      seen.insert((*set)->name);
      result.sets_.push_back(std::move(*set));
    }
  } catch (const nlohmann::json::exception& e) {
    return MakeErrorF(ErrorCode::kParse, "pattern file: invalid JSON: {}", e.what());
  }
  return result;
}

Result<UserPatterns> UserPatterns::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeErrorF(ErrorCode::kNotFound, "pattern file {}: cannot open", path);
  std::string text;
  text.resize(kMaxFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return MakeErrorF(ErrorCode::kIo, "pattern file {}: read failed", path);
  text.resize(static_cast<size_t>(in.gcount()));
  auto r = Parse(text);
  if (!r) return MakeErrorF(r.error().code, "{}: {}", path, r.error().message);
  return r;
}

std::vector<std::string> UserPatterns::names() const {
  std::vector<std::string> out;
  out.reserve(sets_.size());
  for (const auto& s : sets_) out.push_back(s->name);
  return out;
}

std::unique_ptr<FormatParser> UserPatterns::MakeParser() const { return std::make_unique<UserParser>(sets_); }

}  // namespace ithbat::collect::joblog
