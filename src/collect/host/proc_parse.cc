#include "collect/host/proc_parse.h"

#include <limits>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

// Every error names the line so a person can find it in the file.
std::unexpected<Error> LineError(size_t line, std::string_view what, const Error& cause) {
  return MakeErrorF(ErrorCode::kParse, "line {}: {}: {}", line, what, cause.message);
}

template <class... Args>
std::unexpected<Error> LineErrorF(size_t line, fmt::format_string<Args...> f, Args&&... args) {
  return MakeErrorF(ErrorCode::kParse, "line {}: {}", line, fmt::format(f, std::forward<Args>(args)...));
}

bool IsCpuN(std::string_view key) {
  if (key.size() <= 3 || !key.starts_with("cpu")) return false;
  for (char c : key.substr(3)) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The single value of a "key value" line, which must have nothing after it.
Result<uint64_t> SingleValue(FieldReader& fields, size_t line, std::string_view key) {
  std::string_view v;
  if (!fields.Next(&v)) return LineErrorF(line, "'{}' has no value", QuoteForError(key));
  auto n = ParseUint64(v);
  if (!n) return LineError(line, QuoteForError(key), n.error());
  if (!fields.Rest().empty()) {
    return LineErrorF(line, "'{}' has extra fields: '{}'", QuoteForError(key), QuoteForError(fields.Rest()));
  }
  return *n;
}

constexpr std::array<std::string_view, kMemFieldCount> kMemKernelNames = {
    "MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached", "Dirty", "Writeback", "SwapTotal", "SwapFree"};
constexpr std::array<std::string_view, kMemFieldCount> kMemMetricNames = {
    "total", "available", "free", "buffers", "cached", "dirty", "writeback", "swap_total", "swap_free"};

// The /proc/stat lines that carry one number each, and where it goes.
struct SingleValueLine {
  std::string_view key;
  uint64_t ProcStat::*field;
};
constexpr std::array<SingleValueLine, 4> kSingleValueLines = {{
    {"ctxt", &ProcStat::context_switches},
    {"processes", &ProcStat::forks},
    {"procs_running", &ProcStat::procs_running},
    {"procs_blocked", &ProcStat::procs_blocked},
}};

const SingleValueLine* FindSingleValueLine(std::string_view key) {
  for (const auto& line : kSingleValueLines) {
    if (line.key == key) return &line;
  }
  return nullptr;
}

}  // namespace

Result<ProcStat> ParseProcStat(std::string_view text) {
  ProcStat out;
  bool have_cpu = false;
  std::array<bool, kSingleValueLines.size()> seen{};
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    const size_t n = lines.line_number();
    FieldReader fields(line);
    std::string_view key;
    if (!fields.Next(&key)) continue;  // blank line
    if (key == "cpu") {
      if (have_cpu) return LineErrorF(n, "a second aggregate cpu line");
      std::string_view v;
      size_t col = 0;
      while (fields.Next(&v)) {
        auto j = ParseUint64(v);
        if (!j) return LineError(n, fmt::format("cpu column {}", col + 1), j.error());
        if (col < kCpuModeCount) out.cpu_jiffies[col] = *j;
        // guest and guest_nice (columns 9, 10) are parsed for validity but already counted in
        // user and nice; newer kernels may add more, which are ignored the same way.
        col++;
      }
      if (col < 4) return LineErrorF(n, "cpu line has {} columns, expected at least 4", col);
      out.cpu_modes = std::min(col, kCpuModeCount);
      have_cpu = true;
    } else if (IsCpuN(key)) {
      // Only counted: per-CPU series would be 8 × CPUs series on a 256-CPU box.
      std::string_view v;
      if (!fields.Next(&v)) return LineErrorF(n, "'{}' has no columns", QuoteForError(key));
      out.cpus++;
    } else if (auto* single = FindSingleValueLine(key)) {
      auto v = SingleValue(fields, n, key);
      if (!v) return std::unexpected(v.error());
      out.*(single->field) = *v;
      seen[single - kSingleValueLines.data()] = true;
    } else if (key == "intr" || key == "softirq" || key == "btime" || key == "page" || key == "swap") {
      // Known lines the collector does not export (intr is thousands of columns on big boxes:
      // not worth validating every tick).
    } else {
      // Lines are "name value...": a name that is not an identifier is garbage, not a new
      // kernel field.
      for (char c : key) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        if (!ok) return LineErrorF(n, "unexpected line '{}'", QuoteForError(line));
      }
    }
  }
  if (!have_cpu) return MakeError(ErrorCode::kParse, "no aggregate 'cpu' line");
  if (out.cpus == 0) return MakeError(ErrorCode::kParse, "no 'cpuN' lines");
  for (size_t i = 0; i < kSingleValueLines.size(); ++i) {
    if (!seen[i]) return MakeErrorF(ErrorCode::kParse, "no '{}' line", kSingleValueLines[i].key);
  }
  return out;
}

std::string_view MemFieldKernelName(MemField f) { return kMemKernelNames[static_cast<size_t>(f)]; }
std::string_view MemFieldMetricName(MemField f) { return kMemMetricNames[static_cast<size_t>(f)]; }

Result<MemInfo> ParseMemInfo(std::string_view text) {
  MemInfo out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    const size_t n = lines.line_number();
    if (FieldReader(line).Rest().empty()) continue;  // blank line
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return LineErrorF(n, "expected 'Name: value [kB]', got '{}'", QuoteForError(line));
    }
    const std::string_view name = line.substr(0, colon);
    FieldReader fields(line.substr(colon + 1));
    std::string_view value_text, unit;
    if (!fields.Next(&value_text)) return LineErrorF(n, "'{}' has no value", QuoteForError(name));
    auto value = ParseUint64(value_text);
    if (!value) return LineError(n, QuoteForError(name), value.error());
    uint64_t bytes = *value;
    if (fields.Next(&unit)) {
      if (unit != "kB") return LineErrorF(n, "'{}' has unit '{}', expected kB", QuoteForError(name), QuoteForError(unit));
      if (bytes > std::numeric_limits<uint64_t>::max() / 1024) {
        return LineErrorF(n, "'{}' value {} kB overflows bytes", QuoteForError(name), bytes);
      }
      bytes *= 1024;
    }
    if (!fields.Rest().empty()) {
      return LineErrorF(n, "'{}' has extra fields: '{}'", QuoteForError(name), QuoteForError(fields.Rest()));
    }
    for (size_t i = 0; i < kMemFieldCount; i++) {
      if (name == kMemKernelNames[i]) {
        out.bytes[i] = bytes;
        break;
      }
    }
  }
  if (!out.Get(MemField::kTotal)) return MakeError(ErrorCode::kParse, "no 'MemTotal' line");
  if (!out.Get(MemField::kFree)) return MakeError(ErrorCode::kParse, "no 'MemFree' line");
  return out;
}

Result<Pressure> ParsePressure(std::string_view text) {
  Pressure out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    const size_t n = lines.line_number();
    FieldReader fields(line);
    std::string_view kind;
    if (!fields.Next(&kind)) continue;  // blank line
    std::optional<PsiLine>* slot = nullptr;
    if (kind == "some") {
      slot = &out.some;
    } else if (kind == "full") {
      slot = &out.full;
    } else {
      return LineErrorF(n, "expected 'some' or 'full', got '{}'", QuoteForError(kind));
    }
    if (slot->has_value()) return LineErrorF(n, "a second '{}' line", kind);
    PsiLine psi;
    bool have_avg10 = false, have_total = false;
    std::string_view kv;
    while (fields.Next(&kv)) {
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) return LineErrorF(n, "expected key=value, got '{}'", QuoteForError(kv));
      const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (key == "total") {
        auto v = ParseUint64(value);
        if (!v) return LineError(n, "total", v.error());
        psi.total_us = *v;
        have_total = true;
      } else if (key == "avg10" || key == "avg60" || key == "avg300") {
        auto v = ParseDouble(value);
        if (!v) return LineError(n, key, v.error());
        if (*v < 0) return LineErrorF(n, "{} is negative: {}", key, *v);
        if (key == "avg10") {
          psi.avg10 = *v;
          have_avg10 = true;
        } else if (key == "avg60") {
          psi.avg60 = *v;
        } else {
          psi.avg300 = *v;
        }
      }  // other keys: a future kernel's addition, ignored
    }
    if (!have_avg10) return LineErrorF(n, "'{}' line has no avg10", kind);
    if (!have_total) return LineErrorF(n, "'{}' line has no total", kind);
    *slot = psi;
  }
  if (!out.some) return MakeError(ErrorCode::kParse, "no 'some' line");
  return out;
}

Result<LoadAvg> ParseLoadAvg(std::string_view text) {
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) return MakeError(ErrorCode::kParse, "empty file");
  FieldReader fields(line);
  std::array<double, 3> loads{};
  std::string_view f;
  for (size_t i = 0; i < loads.size(); i++) {
    if (!fields.Next(&f)) return LineErrorF(1, "{} fields, expected 5", i);
    auto v = ParseDouble(f);
    if (!v) return LineError(1, fmt::format("field {}", i + 1), v.error());
    if (*v < 0) return LineErrorF(1, "field {} is negative: {}", i + 1, *v);
    loads[i] = *v;
  }
  // "running/total" and the last pid: not exported, but checked so a cut line is caught.
  if (!fields.Next(&f)) return LineErrorF(1, "3 fields, expected 5");
  const size_t slash = f.find('/');
  if (slash == std::string_view::npos) return LineErrorF(1, "expected running/total, got '{}'", QuoteForError(f));
  if (auto v = ParseUint64(f.substr(0, slash)); !v) return LineError(1, "running", v.error());
  if (auto v = ParseUint64(f.substr(slash + 1)); !v) return LineError(1, "total", v.error());
  if (!fields.Next(&f)) return LineErrorF(1, "4 fields, expected 5");
  if (auto v = ParseUint64(f); !v) return LineError(1, "last pid", v.error());
  if (!fields.Rest().empty()) return LineErrorF(1, "extra fields: '{}'", QuoteForError(fields.Rest()));
  if (lines.Next(&line) && !FieldReader(line).Rest().empty()) {
    return LineErrorF(2, "unexpected second line '{}'", QuoteForError(line));
  }
  return LoadAvg{loads[0], loads[1], loads[2]};
}

Result<VmStat> ParseVmStat(std::string_view text) {
  VmStat out;
  bool have_majfault = false;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    const size_t n = lines.line_number();
    FieldReader fields(line);
    std::string_view key;
    if (!fields.Next(&key)) continue;  // blank line
    auto v = SingleValue(fields, n, key);
    if (!v) return std::unexpected(v.error());
    if (key == "pgmajfault") {
      out.major_page_faults = *v;
      have_majfault = true;
    }
  }
  if (!have_majfault) return MakeError(ErrorCode::kParse, "no 'pgmajfault' line");
  return out;
}

}  // namespace ithbat::collect
