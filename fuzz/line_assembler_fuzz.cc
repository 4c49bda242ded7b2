// The line assembler on arbitrary write sequences (the input is cut into writes of fuzzer-chosen
// sizes, with flushes between some), then the redaction of every line it emits. Invariants:
// lines never exceed the bound, hold no control byte but \t, pending bytes stay bounded;
// redaction is idempotent and never grows a line by more than its markers; a line's time stamp
// (line_time.h) is never before 1970.
#include <fuzzer/FuzzedDataProvider.h>

#include "collect/joblog/text/line_assembler.h"
#include "collect/joblog/text/line_time.h"
#include "collect/joblog/text/redact.h"
#include "fuzz_util.h"

using ithbat::collect::joblog::AssembledLine;
using ithbat::collect::joblog::LineAssembler;
using ithbat::collect::joblog::RedactSecrets;
using ithbat::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  static constexpr size_t kBounds[] = {8, 200, ithbat::collect::joblog::kMaxLineBytes};
  const size_t bound = kBounds[in.ConsumeIntegralInRange<size_t>(0, 2)];
  LineAssembler assembler(bound);
  std::vector<AssembledLine> out;
  int64_t t = 0;
  // The stamps of the lines, in order, as `ithbat replay --times stamps` reads them.
  ithbat::collect::joblog::LineClock clock;
  auto check = [&] {
    for (AssembledLine& line : out) {
      if (auto stamp = clock.Read(line.text)) {
        Require(*stamp >= 0, "a stamp before 1970");
        Require(clock.last() == stamp, "the clock's last stamp is the one read");
      }
      Require(line.text.size() <= bound, "line over the bound");
      for (unsigned char c : line.text) Require(c == '\t' || (c >= 0x20 && c != 0x7f), "control byte in a line");
      std::string once = line.text;
      RedactSecrets(once);
      std::string twice = once;
      Require(RedactSecrets(twice) == 0 && twice == once, "redaction not idempotent");
    }
    out.clear();
  };
  while (in.remaining_bytes() > 0) {
    const size_t n = in.ConsumeIntegralInRange<size_t>(0, 1 << 16);
    const std::string write = in.ConsumeBytesAsString(n);
    assembler.Feed(write, ++t, out);
    Require(assembler.pending_bytes() <= bound, "pending bytes over the bound");
    if (in.remaining_bytes() > 0 && in.ConsumeIntegralInRange<int>(0, 15) == 0) assembler.Flush(++t, out);
    check();
  }
  assembler.Flush(++t, out);
  check();
  Require(assembler.pending_bytes() == 0, "Flush left bytes pending");
  return 0;
}
