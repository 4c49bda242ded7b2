#pragma once
// Internal to src/scenario: bounded YAML loading and the helpers both parsers share.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "scenario/scenario.h"

namespace ithbat::scenario::internal {

// Loads one YAML document after a streaming pre-scan that refuses what could hurt the process:
// more than kMaxFileBytes, nesting deeper than kMaxDepth, more than kMaxYamlNodes nodes,
// anchors/aliases (yaml-cpp shares aliased nodes, so a "billion laughs" file would make every
// walk exponential), and several documents. Never throws; problems go to `issues`.
bool LoadBounded(std::string_view text, YAML::Node* root, std::vector<Issue>* issues);

// 1-based line and column of a node (0, 0 when yaml-cpp has no mark).
std::pair<int, int> LineCol(const YAML::Node& node);

// The closest of `known` to `key` when close enough to be a typo, else "".
std::string DidYouMean(std::string_view key, std::span<const std::string> known);

}  // namespace ithbat::scenario::internal
