#pragma once
// The one assertion of the fuzz targets: a broken invariant aborts, which libFuzzer reports as a
// crash with the input that caused it (asserts vanish under NDEBUG; this does not).
#include <cstdio>
#include <cstdlib>

namespace ithbat::fuzz {

inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace ithbat::fuzz
