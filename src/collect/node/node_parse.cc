#include "collect/node/node_parse.h"

#include <array>

#include <fmt/format.h>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

constexpr size_t kMaxOpsPerMount = 256;

std::unexpected<Error> LineError(size_t line_no, std::string_view what, std::string_view line) {
  return MakeErrorF(ErrorCode::kParse, "line {}: {}: {}", line_no, what, QuoteForError(line));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// mountstats escapes ' ', '\t', '\n' and '\\' in names as \ooo (seq_escape / mangle_path).
std::string Unescape(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && s.size() - i > 3 && s[i + 1] <= '3' && octal(s[i + 1]) && octal(s[i + 2]) &&
        octal(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

bool IsVirtualDisk(std::string_view device) {
  return device.starts_with("loop") || device.starts_with("ram");
}

Result<std::vector<DiskStats>> ParseDiskStats(std::string_view text, size_t max_devices) {
  std::vector<DiskStats> out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    if (Trim(line).empty()) continue;
    FieldReader fields(line);
    std::array<std::string_view, 20> f;
    size_t n = 0;
    std::string_view field;
    while (fields.Next(&field)) {
      if (n == f.size()) return LineError(lines.line_number(), "more than 20 fields", line);
      f[n++] = field;
    }
    if (n != 14 && n != 18 && n != 20) {
      return LineError(lines.line_number(), fmt::format("{} fields, want 14, 18 or 20", n), line);
    }
    if (out.size() == max_devices) {
      return MakeErrorF(ErrorCode::kResourceExhausted, "more than {} devices", max_devices);
    }
    DiskStats d;
    auto major = ParseUint64(f[0]);
    auto minor = ParseUint64(f[1]);
    if (!major || !minor || *major > UINT32_MAX || *minor > UINT32_MAX) {
      return LineError(lines.line_number(), "bad major/minor", line);
    }
    d.major = static_cast<uint32_t>(*major);
    d.minor = static_cast<uint32_t>(*minor);
    if (f[2].size() > 255) return LineError(lines.line_number(), "device name too long", line);
    d.device = std::string(f[2]);
    std::array<uint64_t*, 11> dst = {&d.reads_completed,  &d.reads_merged,  &d.sectors_read,    &d.read_ms,
                                     &d.writes_completed, &d.writes_merged, &d.sectors_written, &d.write_ms,
                                     &d.in_flight,        &d.io_ms,         &d.weighted_io_ms};
    for (size_t i = 0; i < dst.size(); i++) {
      auto v = ParseUint64(f[3 + i]);
      if (!v)
        return LineError(lines.line_number(), fmt::format("field {}: {}", 4 + i, v.error().message), line);
      *dst[i] = *v;
    }
    for (size_t i = 14; i < n; i++) {
      if (!ParseUint64(f[i]))
        return LineError(lines.line_number(), fmt::format("field {} not a number", i + 1), line);
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<NfsMount>> ParseMountStats(std::string_view text, size_t max_mounts) {
  std::vector<NfsMount> out;
  NfsMount* cur = nullptr;  // the NFS mount whose block we are in (nullptr: a non-NFS block)
  bool in_ops = false;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    if (line.starts_with("device ")) {
      in_ops = false;
      cur = nullptr;
      // "device SRC mounted on MNT with fstype TYPE[ statvers=1.1]"
      FieldReader fields(line);
      std::array<std::string_view, 8> f;
      size_t n = 0;
      std::string_view field;
      while (n < f.size() && fields.Next(&field)) f[n++] = field;
      if (n < 7 || f[2] != "mounted" || f[3] != "on" || f[5] != "with" || f[6] != "fstype") {
        return LineError(lines.line_number(), "device line not 'device X mounted on Y with fstype T'", line);
      }
      if (n < 8) return LineError(lines.line_number(), "device line without fstype", line);
      if (f[7] != "nfs" && f[7] != "nfs4") continue;
      if (out.size() == max_mounts)
        return MakeErrorF(ErrorCode::kResourceExhausted, "more than {} NFS mounts", max_mounts);
      NfsMount m;
      m.export_name = Unescape(f[1]);
      m.mountpoint = Unescape(f[4]);
      m.fstype = std::string(f[7]);
      out.push_back(std::move(m));
      cur = &out.back();
      continue;
    }
    if (cur == nullptr) continue;
    const std::string_view t = Trim(line);
    if (t.empty()) continue;
    if (t.starts_with("bytes:")) {
      FieldReader fields(t.substr(6));
      std::array<uint64_t*, 6> dst = {&cur->normal_read_bytes, &cur->normal_write_bytes,
                                      &cur->direct_read_bytes, &cur->direct_write_bytes,
                                      &cur->server_read_bytes, &cur->server_write_bytes};
      std::string_view field;
      for (uint64_t* d : dst) {
        if (!fields.Next(&field))
          return LineError(lines.line_number(), "bytes: line with fewer than 6 fields", line);
        auto v = ParseUint64(field);
        if (!v) return LineError(lines.line_number(), "bytes: field not a number", line);
        *d = *v;
      }
      cur->has_bytes = true;
      continue;
    }
    if (t == "per-op statistics") {
      in_ops = true;
      continue;
    }
    if (!in_ops) continue;  // opts:, age:, events:, xprt:, ... are not exported
    const size_t colon = t.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon > 32) {
      return LineError(lines.line_number(), "per-op line without 'OP:'", line);
    }
    NfsOpStats op;
    op.op = std::string(t.substr(0, colon));
    for (char c : op.op) {
      if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
        return LineError(lines.line_number(), "per-op name not upper-case", line);
      }
    }
    FieldReader fields(t.substr(colon + 1));
    std::array<uint64_t*, 8> dst = {&op.ops,        &op.transmissions,  &op.major_timeouts,
                                    &op.bytes_sent, &op.bytes_received, &op.queue_ms,
                                    &op.rtt_ms,     &op.execute_ms};
    std::string_view field;
    for (uint64_t* d : dst) {
      if (!fields.Next(&field))
        return LineError(lines.line_number(), "per-op line with fewer than 8 numbers", line);
      auto v = ParseUint64(field);
      if (!v) return LineError(lines.line_number(), "per-op field not a number", line);
      *d = *v;
    }
    if (fields.Next(&field)) {
      auto v = ParseUint64(field);
      if (!v) return LineError(lines.line_number(), "per-op errors field not a number", line);
      op.errors = *v;
    }
    if (cur->ops.size() == kMaxOpsPerMount) {
      return LineError(lines.line_number(), fmt::format("more than {} per-op lines", kMaxOpsPerMount), line);
    }
    cur->ops.push_back(std::move(op));
  }
  return out;
}

Result<LustreStats> ParseLustreStats(std::string_view text) {
  LustreStats out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    FieldReader fields(line);
    std::string_view name, count;
    if (!fields.Next(&name)) continue;  // blank line
    if (name == "snapshot_time" || name == "start_time" || name == "elapsed_time") continue;
    if (!fields.Next(&count)) return LineError(lines.line_number(), "stat without a count", line);
    auto n = ParseUint64(count);
    if (!n) return LineError(lines.line_number(), "count not a number", line);
    std::string_view samples;
    if (!fields.Next(&samples) || samples != "samples") {
      return LineError(lines.line_number(), "want 'NAME COUNT samples [unit] ...'", line);
    }
    std::optional<uint64_t> sum;
    std::string_view unit, min, max, s;
    if (fields.Next(&unit) && fields.Next(&min) && fields.Next(&max) && fields.Next(&s)) {
      auto v = ParseUint64(s);
      if (!v) return LineError(lines.line_number(), "sum not a number", line);
      sum = *v;
    }
    if (name == "read_bytes") {
      out.reads = *n;
      out.read_bytes = sum.value_or(0);
    } else if (name == "write_bytes") {
      out.writes = *n;
      out.write_bytes = sum.value_or(0);
    } else if (name == "open") {
      out.opens = *n;
    } else if (name == "close") {
      out.closes = *n;
    } else if (name == "fsync") {
      out.fsyncs = *n;
    }
  }
  return out;
}

Result<IbEnumValue> ParseIbEnum(std::string_view text) {
  const std::string_view t = Trim(text);
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos)
    return MakeErrorF(ErrorCode::kParse, "want 'N: LABEL': {}", QuoteForError(t));
  auto v = ParseUint64(t.substr(0, colon));
  if (!v || *v > UINT32_MAX) return MakeErrorF(ErrorCode::kParse, "want 'N: LABEL': {}", QuoteForError(t));
  const std::string_view label = Trim(t.substr(colon + 1));
  if (label.empty() || label.size() > 64)
    return MakeErrorF(ErrorCode::kParse, "bad label: {}", QuoteForError(t));
  return IbEnumValue{static_cast<uint32_t>(*v), std::string(label)};
}

Result<double> ParseIbRateGbps(std::string_view text) {
  const std::string_view t = Trim(text);
  FieldReader fields(t);
  std::string_view num, unit;
  if (!fields.Next(&num) || !fields.Next(&unit) || unit != "Gb/sec") {
    return MakeErrorF(ErrorCode::kParse, "want 'N Gb/sec (...)': {}", QuoteForError(t));
  }
  auto v = ParseDouble(num);
  if (!v || *v < 0) return MakeErrorF(ErrorCode::kParse, "want 'N Gb/sec (...)': {}", QuoteForError(t));
  return *v;
}

Result<uint64_t> ParseSysfsCounter(std::string_view text) {
  const std::string_view t = Trim(text);
  auto v = ParseUint64(t);
  if (!v) return MakeErrorF(ErrorCode::kParse, "not a counter: {}", QuoteForError(t));
  return *v;
}

}  // namespace ithbat::collect
