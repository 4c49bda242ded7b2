#pragma once
// What `ithbat version` prints: the version and how this binary was built, so a bug report
// from a node says exactly which agent ran there.
#include <string>

namespace ithbat::cli {

// Several lines: "ithbat 0.1.0" first, then build type, compiler, C++ standard and the
// versions of the libraries compiled in.
std::string VersionText();

}  // namespace ithbat::cli
