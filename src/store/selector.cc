// PromQL-style series selectors: metric{label="v",other!="w",re=~"a.*",nre!~"b"}.
#include <re2/re2.h>

#include "core/labels.h"
#include "store/store.h"

namespace ithbat::store {
namespace {

constexpr size_t kMaxSelectorBytes = 1024;
constexpr size_t kMaxMatchers = 16;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<SeriesSelector> Parse() {
    SeriesSelector sel;
    SkipSpace();
    if (AtNameStart(/*metric=*/true)) {
      sel.metric = std::string(ReadName(/*metric=*/true));
      if (!IsValidMetricName(sel.metric)) return Fail("invalid metric name '{}'", sel.metric);
      SkipSpace();
    }
    if (Peek() == '{') {
      ++pos_;
      SkipSpace();
      while (Peek() != '}') {
        if (AtEnd()) return Fail("expected '}}'");
        if (sel.matchers.size() >= kMaxMatchers) return Fail("more than {} matchers", kMaxMatchers);
        size_t at = pos_;
        auto m = ParseMatcher();
        if (!m) return std::unexpected(m.error());
        // A metric name given both ways must agree, or the selector could match nothing.
        if (m->name == "__name__" && m->op == LabelMatcher::Op::kEq && sel.metric.empty() &&
            IsValidMetricName(m->value)) {
          sel.metric = m->value;
        } else {
          if (m->name == "__name__" && m->op == LabelMatcher::Op::kEq && m->value != sel.metric) {
            pos_ = at;
            return Fail("__name__=\"{}\" contradicts the metric name '{}'", m->value, sel.metric);
          }
          sel.matchers.push_back(std::move(*m));
        }
        SkipSpace();
        if (Peek() == ',') {
          ++pos_;
          SkipSpace();
        } else if (Peek() != '}') {
          return Fail("expected ',' or '}}'");
        }
      }
      ++pos_;  // '}'
      SkipSpace();
    }
    if (!AtEnd()) return Fail("unexpected '{}'", text_[pos_]);
    if (sel.metric.empty() && sel.matchers.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "selector needs a metric name or a label matcher");
    }
    return sel;
  }

 private:
  template <class... Args>
  std::unexpected<Error> Fail(fmt::format_string<Args...> f, Args&&... args) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "selector position {}: {}", pos_,
                      fmt::format(f, std::forward<Args>(args)...));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  static bool IsNameChar(char c, bool first, bool metric) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':') ||
           (!first && c >= '0' && c <= '9');
  }
  bool AtNameStart(bool metric) const { return !AtEnd() && IsNameChar(text_[pos_], true, metric); }
  std::string_view ReadName(bool metric) {
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_], pos_ == start, metric)) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  Result<LabelMatcher> ParseMatcher() {
    LabelMatcher m;
    if (!AtNameStart(false)) return Fail("expected a label name");
    size_t name_at = pos_;
    m.name = std::string(ReadName(false));
    if (m.name != "__name__" && !IsValidLabelName(m.name)) {
      pos_ = name_at;
      return Fail("invalid label name '{}'", m.name);
    }
    SkipSpace();
    if (text_.substr(pos_, 2) == "=~") {
      m.op = LabelMatcher::Op::kRe;
      pos_ += 2;
    } else if (text_.substr(pos_, 2) == "!~") {
      m.op = LabelMatcher::Op::kNre;
      pos_ += 2;
    } else if (text_.substr(pos_, 2) == "!=") {
      m.op = LabelMatcher::Op::kNe;
      pos_ += 2;
    } else if (Peek() == '=') {
      m.op = LabelMatcher::Op::kEq;
      pos_ += 1;
    } else {
      return Fail("expected one of = != =~ !~ after '{}'", m.name);
    }
    SkipSpace();
    size_t value_at = pos_;
    auto value = ParseString();
    if (!value) return std::unexpected(value.error());
    m.value = std::move(*value);
    if (m.value.size() > kMaxLabelValueBytes) {
      pos_ = value_at;
      return Fail("value longer than {} bytes", kMaxLabelValueBytes);
    }
    if (m.op == LabelMatcher::Op::kRe || m.op == LabelMatcher::Op::kNre) {
      RE2::Options opts;
      opts.set_log_errors(false);
      RE2 re(m.value, opts);
      if (!re.ok()) {
        pos_ = value_at;
        return Fail("invalid regular expression: {}", re.error());
      }
    }
    return m;
  }

  // A double- or single-quoted string with Go/PromQL escapes (\" \' \\ \n \t \r).
  Result<std::string> ParseString() {
    char quote = Peek();
    if (quote != '"' && quote != '\'') return Fail("expected a quoted value");
    ++pos_;
    std::string out;
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      char c = text_[pos_];
      if (c == quote) {
        ++pos_;
        return out;
      }
      if (c == '\n') return Fail("newline in string");
      if (c == '\\') {
        if (pos_ + 1 >= text_.size()) return Fail("unterminated escape");
        char e = text_[pos_ + 1];
        switch (e) {
          case '"': case '\'': case '\\': out += e; break;
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          // Regex escapes (\d, \., \w) pass through so that "a\.b" means what PromQL users expect.
          default: out += '\\'; out += e; break;
        }
        pos_ += 2;
        continue;
      }
      out += c;
      ++pos_;
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Result<SeriesSelector> SeriesSelector::Parse(std::string_view text) {
  if (text.size() > kMaxSelectorBytes) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "selector is {} bytes (max {})", text.size(), kMaxSelectorBytes);
  }
  return Parser(text).Parse();
}

}  // namespace ithbat::store
