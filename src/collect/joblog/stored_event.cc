#include "collect/joblog/stored_event.h"

#include <string>

#include "collect/joblog/text/redact.h"

namespace ithbat::collect::joblog {

Event StoredEvent(const Identity& identity, const ParsedEvent& pe, TimeNs t, std::string_view framework) {
  Event e;
  e.time = t;
  e.kind = pe.kind;
  e.identity = identity;
  if (pe.rank >= 0) e.identity.rank = pe.rank;
  e.source = "joblog";
  e.step = pe.step;
  e.value = pe.value;
  e.name = pe.name;
  e.text = pe.text;
  // Error events quote the line, which was redacted before parsing; a parser may join text from
  // several lines (a traceback): redacted once more (a no-op on text already redacted).
  if (!e.text.empty()) RedactSecrets(e.text);
  e.attrs = pe.attrs;
  // Attribute values carry free text too (an error's message or reason, a host, a path, what a
  // user pattern captured): redacted like the text.
  for (auto& [k, v] : e.attrs) RedactSecrets(v);
  if (!framework.empty()) e.attrs.emplace_back("framework", std::string(framework));
  return e;
}

}  // namespace ithbat::collect::joblog
