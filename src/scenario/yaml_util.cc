#include "scenario/yaml_util.h"

#include <algorithm>
#include <exception>
#include <sstream>

#include <fmt/core.h>

namespace ithbat::scenario::internal {
namespace {

// Thrown from the event handler to stop the scan at the first hostile construct; caught in
// LoadBounded, never crosses the module.
struct ScanStop {
  Issue issue;
};

class BoundsScanner : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) Stop(mark, "more than one YAML document in the file");
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Node(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Stop(mark, "YAML aliases (*name) are not allowed in scenario files; write the value out");
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Node(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { --depth_; }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override {
    Stop(mark, "YAML anchors (&name) are not allowed in scenario files");
  }

 private:
  [[noreturn]] static void Stop(const YAML::Mark& mark, std::string message) {
    throw ScanStop{Issue{"", mark.line + 1, mark.column + 1, std::move(message)}};
  }
  void Node(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != 0) Stop(mark, "YAML anchors (&name) are not allowed in scenario files");
    if (++nodes_ > kMaxYamlNodes) Stop(mark, fmt::format("more than {} YAML nodes", kMaxYamlNodes));
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    Node(mark, anchor);
    if (++depth_ > kMaxDepth) Stop(mark, fmt::format("nesting deeper than {} levels", kMaxDepth));
  }

  int documents_ = 0;
  int depth_ = 0;
  size_t nodes_ = 0;
};

size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Offset of the first byte that is not valid UTF-8, or npos. Strict (RFC 3629): no overlong
// forms (C0, C1, E0 80-9F, F0 80-8F), no surrogates (ED A0-BF), nothing above U+10FFFF
// (F4 90-BF, F5-FF).
size_t BadUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (n == 0 || i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      unsigned char x = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (x < lo || x > hi) : (x & 0xC0) != 0x80) return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace

bool LoadBounded(std::string_view text, YAML::Node* root, std::vector<Issue>* issues) {
  if (text.size() > kMaxFileBytes) {
    issues->push_back({"", 0, 0, fmt::format("file is {} bytes; the limit is {}", text.size(), kMaxFileBytes)});
    return false;
  }
  if (size_t bad = BadUtf8(text); bad != std::string_view::npos) {
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n'));
    size_t nl = text.rfind('\n', bad == 0 ? 0 : bad - 1);
    size_t col = nl == std::string_view::npos || bad == 0 ? bad + 1 : bad - nl;
    issues->push_back({"", static_cast<int>(line), static_cast<int>(col), "not UTF-8 text"});
    return false;
  }
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    BoundsScanner scanner;
    while (parser.HandleNextDocument(scanner)) {
    }
    *root = YAML::Load(std::string(text));
  } catch (const ScanStop& stop) {
    issues->push_back(stop.issue);
    return false;
  } catch (const YAML::Exception& e) {
    issues->push_back({"", e.mark.line + 1, e.mark.column + 1, fmt::format("YAML syntax: {}", e.msg)});
    return false;
  } catch (const std::exception& e) {
    issues->push_back({"", 0, 0, fmt::format("YAML: {}", e.what())});
    return false;
  }
  if (!root->IsDefined() || root->IsNull()) {
    issues->push_back({"", 1, 1, "empty file"});
    return false;
  }
  return true;
}

std::pair<int, int> LineCol(const YAML::Node& node) {
  if (!node.IsDefined()) return {0, 0};
  YAML::Mark m = node.Mark();
  if (m.is_null()) return {0, 0};
  return {m.line + 1, m.column + 1};
}

std::string DidYouMean(std::string_view key, std::span<const std::string> known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    size_t d = Distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  size_t allowed = std::max<size_t>(2, key.size() / 3);
  return best_d <= allowed ? best : "";
}

}  // namespace ithbat::scenario::internal
