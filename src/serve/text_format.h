#pragma once
// Small formatting helpers shared by the exposition and the JSON API (private to src/serve;
// exposed in a header so the tests can pin them down).
#include <cstdint>
#include <string>
#include <string_view>

namespace ithbat::serve {

// A sample value as Prometheus parses it back bit-for-bit: integers without an exponent when
// they are exact, otherwise the shortest round-trip form; "NaN", "+Inf", "-Inf".
std::string FormatSampleValue(double v);

// A Unix time in seconds as an exact JSON number: "1700000000.25" (no float rounding of the
// nanoseconds), "1700000000" when whole.
std::string FormatUnixSeconds(int64_t t_ns);

// HELP text escaping of the text format 0.0.4: backslash and newline only (quotes stay).
std::string EscapeHelp(std::string_view help);

// Compares a presented secret with the expected one in time that depends only on the expected
// secret's length, so a network observer cannot recover it byte by byte.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

}  // namespace ithbat::serve
