#pragma once
// Text helpers for the report: HTML escaping of everything that comes from the data, and the
// time and number formats every part of the page uses.
#include <string>
#include <string_view>

#include "core/time.h"

namespace ithbat::report {

// Longest data string the report prints (a log line, a note, a label); longer text is cut and
// ends with an ellipsis, so one hostile value cannot blow up the page.
inline constexpr size_t kMaxTextBytes = 2048;

// Escapes text for an HTML text node or a quoted attribute value: & < > " ' become entities,
// control characters other than tab and newline are dropped, and "://" is written as "&#58;//"
// so that no URL from the data appears literally in the document (it reads the same). Cut at
// kMaxTextBytes.
std::string Escape(std::string_view text);

// "2026-11-30 19:30:22 UTC" (whole seconds); "—" for 0.
std::string FormatTime(TimeNs t);
// "19:30:22" (UTC clock time of an axis tick), with ".5" tenths when `tenths`.
std::string FormatClock(TimeNs t, bool tenths = false);
// "1 min 38 s", "2.5 s", "3 h 05 min".
std::string FormatDuration(TimeNs d);
// A compact number: 3 significant digits, k/M/G/T above 10^4 ("1.98G", "0.766", "12.3k").
std::string FormatValue(double v);

}  // namespace ithbat::report
