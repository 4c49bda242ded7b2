#include "collect/kmsg/xid_parse.h"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

namespace ithbat::collect {
namespace {

using O = XidOwner;

// Keep in step with docs/xid.md. Sorted by code (LookupXid binary-searches).
constexpr XidInfo kXidTable[] = {
    {8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing work (idle timeout)", O::kUnknown,
     "restart the application; contact support if it repeats"},
    {11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "invalid or corrupted push buffer stream", O::kJob,
     "restart the application; check the application and CUDA stack"},
    {13, "ROBUST_CHANNEL_GR_EXCEPTION",
     "graphics engine exception (illegal instruction, out-of-range access)", O::kJob,
     "restart the application; debug it (compute-sanitizer)"},
    {31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (illegal address)", O::kJob,
     "restart the application; debug its memory accesses"},
    {32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", O::kJob,
     "restart the application; check the application and CUDA stack"},
    {38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "driver firmware error", O::kDriver,
     "none at once; contact support if it repeats"},
    {43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped the channel of a faulting application",
     O::kJob, "none: it follows the application's own fault"},
    {44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "graphics engine fault during a context switch", O::kDriver,
     "none at once; contact support if it repeats"},
    {45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "channel cleaned up because of an earlier error", O::kUnknown,
     "follow the Xid that came before it"},
    {46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (timeout)", O::kHardware,
     "reset the GPU"},
    {48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error", O::kHardware,
     "reset the GPU; check retired pages / remapped rows"},
    {62, "PMU_HALT_ERROR", "internal micro-controller halted", O::kHardware, "reset the GPU"},
    {63, "INFOROM_DRAM_RETIREMENT_EVENT", "memory page retired / row remapped (informational)", O::kHardware,
     "reset the GPU when convenient to activate the remap"},
    {64, "INFOROM_DRAM_RETIREMENT_FAILURE", "memory page retirement / row remap failed", O::kHardware,
     "reset the GPU; candidate for replacement"},
    {68, "ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", O::kUnknown,
     "restart the application; contact support if it repeats"},
    {69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", O::kJob,
     "restart the application; check the application and CUDA stack"},
    {74, "NVLINK_ERROR", "NVLink error", O::kHardware, "decode the link registers; check the NVLink fabric"},
    {79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the PCIe bus", O::kHardware,
     "reboot the node; check PCIe, power and cooling"},
    {92, "EXCESSIVE_SBE_INTERRUPTS", "high rate of single-bit ECC errors", O::kHardware,
     "none at once; watch the error rate"},
    {94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error (only the affected application was hit)",
     O::kHardware, "restart the application; the GPU keeps working"},
    {95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error (every application on the GPU is hit)",
     O::kHardware, "reset the GPU"},
    {109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", O::kUnknown,
     "reset the GPU; contact support if it repeats"},
    {119, "GSP_RPC_TIMEOUT", "GSP firmware did not answer a driver call", O::kDriver,
     "reset the GPU; investigate driver/firmware version"},
    {120, "GSP_ERROR", "GSP firmware error", O::kDriver,
     "reset the GPU; investigate driver/firmware version"},
    {121, "C2C_ERROR", "chip-to-chip (C2C) link error", O::kHardware, "none at once; contact support"},
    {140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecovered ECC error", O::kHardware, "reset the GPU"},
    {143, "GPU_INIT_ERROR", "GPU initialisation failed", O::kHardware, "reset the GPU"},
    {144, "NVLINK_SAW_ERROR", "NVLink SAW error", O::kHardware, "follow NVIDIA's NVLink5 workflow"},
    {145, "NVLINK_RLW_ERROR", "NVLink RLW error", O::kHardware, "follow NVIDIA's NVLink5 workflow"},
    {149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", O::kHardware, "follow NVIDIA's NVLink5 workflow"},
    {150, "NVLINK_MSE_ERROR", "NVLink MSE error", O::kHardware, "follow NVIDIA's NVLink5 workflow"},
    {154, "GPU_RECOVERY_ACTION_CHANGED", "the driver changed its recommended recovery action", O::kUnknown,
     "do what the message names (drain, reset, reboot)"},
    {155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", O::kDriver,
     "reset the GPU; investigate software"},
    {156, "RESOURCE_RETIREMENT_EVENT", "a GPU resource was retired", O::kHardware, "reset the GPU"},
    {157, "RESOURCE_RETIREMENT_FAILURE", "retiring a GPU resource failed", O::kHardware, "contact support"},
    {158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", O::kHardware, "reset the GPU"},
};

constexpr bool TableSorted() {
  for (size_t i = 1; i < std::size(kXidTable); i++) {
    if (kXidTable[i - 1].code >= kXidTable[i].code) return false;
  }
  return true;
}
static_assert(TableSorted(), "kXidTable must be sorted by code");

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

template <typename T>
std::optional<T> ParseNum(std::string_view s, int base = 10) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Strips a /dev/kmsg "pri,seq,usec,flags;" prefix and fills seq/time. The prefix before ';' is
// checked strictly so that a syslog line with a ';' in it is left alone.
std::string_view StripKmsgPrefix(std::string_view line, XidRecord* rec) {
  const size_t semi = line.find(';');
  if (semi == std::string_view::npos || semi > 64) return line;
  std::string_view head = line.substr(0, semi);
  std::array<std::string_view, 3> nums;
  for (auto& n : nums) {
    const size_t comma = head.find(',');
    if (comma == std::string_view::npos) return line;
    n = head.substr(0, comma);
    head.remove_prefix(comma + 1);
    if (n.empty() || !std::all_of(n.begin(), n.end(), IsDigit)) return line;
  }
  rec->kmsg_seq = ParseNum<uint64_t>(nums[1]);
  rec->kernel_time_us = ParseNum<uint64_t>(nums[2]);
  std::string_view msg = line.substr(semi + 1);
  // Continuation lines (" SUBSYSTEM=pci", " DEVICE=+pci:...") follow the message after '\n'.
  if (size_t nl = msg.find('\n'); nl != std::string_view::npos) msg = msg.substr(0, nl);
  return msg;
}

// "[  966.503025]" anywhere before the message: the boot-clock time of dmesg output.
void FindDmesgTime(std::string_view prefix, XidRecord* rec) {
  if (rec->kernel_time_us) return;
  const size_t open = prefix.rfind('[');
  if (open == std::string_view::npos) return;
  const size_t close = prefix.find(']', open);
  if (close == std::string_view::npos) return;
  std::string_view t = prefix.substr(open + 1, close - open - 1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  const size_t dot = t.find('.');
  if (dot == std::string_view::npos) return;
  auto sec = ParseNum<uint64_t>(t.substr(0, dot));
  std::string_view frac = t.substr(dot + 1);
  if (!sec || frac.empty() || frac.size() > 9 || !std::all_of(frac.begin(), frac.end(), IsDigit)) return;
  uint64_t us = *ParseNum<uint64_t>(frac);
  for (size_t i = frac.size(); i < 6; i++) us *= 10;
  for (size_t i = 6; i < frac.size(); i++) us /= 10;
  if (*sec > UINT64_MAX / 1'000'000 - 1) return;
  rec->kernel_time_us = *sec * 1'000'000 + us;
}

// Takes "key=value" up to the next ", " (or the end) when rest starts with key=.
std::optional<std::string_view> TakeField(std::string_view* rest, std::string_view key) {
  if (!rest->starts_with(key)) return std::nullopt;
  std::string_view r = rest->substr(key.size());
  const size_t comma = r.find(", ");
  std::string_view value = r.substr(0, comma);
  *rest = comma == std::string_view::npos ? std::string_view() : r.substr(comma + 2);
  return value;
}

std::string_view Unquote(std::string_view v) {
  if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') v = v.substr(1, v.size() - 2);
  return v;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

std::optional<std::string> NormalizePciId(std::string_view text) {
  if (text.starts_with("PCI:") || text.starts_with("pci:")) text.remove_prefix(4);
  // domain:bus:device[.function]
  const size_t c1 = text.find(':');
  if (c1 == std::string_view::npos) return std::nullopt;
  const size_t c2 = text.find(':', c1 + 1);
  if (c2 == std::string_view::npos) return std::nullopt;
  std::string_view domain = text.substr(0, c1);
  std::string_view bus = text.substr(c1 + 1, c2 - c1 - 1);
  std::string_view rest = text.substr(c2 + 1);
  std::string_view dev = rest, fn = "0";
  if (size_t dot = rest.find('.'); dot != std::string_view::npos) {
    dev = rest.substr(0, dot);
    fn = rest.substr(dot + 1);
  }
  auto hex_ok = [](std::string_view s, size_t max) {
    return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), IsHex);
  };
  if (!hex_ok(domain, 8) || !hex_ok(bus, 2) || !hex_ok(dev, 2) || !hex_ok(fn, 1)) return std::nullopt;
  const auto d = ParseNum<uint32_t>(domain, 16);
  const auto b = ParseNum<uint32_t>(bus, 16);
  const auto v = ParseNum<uint32_t>(dev, 16);
  const auto f = ParseNum<uint32_t>(fn, 16);
  if (!d || !b || !v || !f || *v > 0x1f || *f > 7) return std::nullopt;
  return fmt::format("{:08x}:{:02x}:{:02x}.{:x}", *d, *b, *v, *f);
}

std::optional<XidRecord> ParseKernelLogLine(std::string_view line) {
  XidRecord rec;
  line = StripKmsgPrefix(line, &rec);
  line = TrimRight(line);

  // The Xid marker: "SXid (" for NVSwitch, else "Xid (" as a word of its own.
  size_t at = line.find("SXid (");
  if (at != std::string_view::npos) {
    rec.sxid = true;
    at += 1;  // point at "Xid ("
  } else {
    at = line.find("Xid (");
    while (at != std::string_view::npos && at > 0 && line[at - 1] != ' ' && line[at - 1] != ']') {
      at = line.find("Xid (", at + 1);
    }
  }

  if (at == std::string_view::npos) {
    // Legacy: "NVRM: GPU at 0000:01:00.0 has fallen off the bus." (old drivers, no Xid number).
    const size_t gpu_at = line.find("NVRM: GPU at ");
    if (gpu_at == std::string_view::npos) return std::nullopt;
    std::string_view rest = line.substr(gpu_at + 13);
    const size_t sp = rest.find(' ');
    // "GPU at 0000:01:00.0 has fallen off the bus." and "GPU at PCI:0000:01:00: GPU has fallen
    // off the bus." both occur; the identification line "GPU at PCI:...: GPU-<uuid>" does not match.
    if (sp == std::string_view::npos || rest.find("has fallen off the bus", sp) == std::string_view::npos) {
      return std::nullopt;
    }
    FindDmesgTime(line.substr(0, gpu_at), &rec);
    rec.code = 79;
    rec.fallen_off_bus = true;
    rec.legacy = true;
    std::string_view addr = rest.substr(0, sp);
    if (addr.ends_with(":")) addr.remove_suffix(1);
    rec.pci = NormalizePciId(addr).value_or("");
    rec.message = std::string(rest.substr(sp + 1));
    return rec;
  }

  FindDmesgTime(line.substr(0, at), &rec);
  std::string_view rest = line.substr(at + 5);  // after "Xid ("
  const size_t close = rest.find("): ");
  if (close == std::string_view::npos || close > 64) return std::nullopt;
  rec.pci = NormalizePciId(rest.substr(0, close)).value_or("");
  rest.remove_prefix(close + 3);

  size_t n = 0;
  while (n < rest.size() && IsDigit(rest[n])) n++;
  auto code = ParseNum<uint32_t>(rest.substr(0, n));
  if (!code) return std::nullopt;  // "Xid (invalid): some error" has no code
  rec.code = *code;
  rest.remove_prefix(n);
  if (rest.starts_with(",")) rest.remove_prefix(1);
  while (rest.starts_with(" ")) rest.remove_prefix(1);

  if (auto pid = TakeField(&rest, "pid=")) {
    if (auto p = ParseNum<int32_t>(Unquote(*pid)); p && *p >= 0) rec.pid = *p;
    if (auto name = TakeField(&rest, "name=")) {
      std::string_view nm = Unquote(*name);
      if (nm != "<unknown>") rec.process = std::string(nm);
    }
  }
  rec.message = std::string(rest);
  rec.fallen_off_bus =
      (!rec.sxid && rec.code == 79) || rest.find("fallen off the bus") != std::string_view::npos;
  return rec;
}

std::string_view XidOwnerName(XidOwner owner) {
  switch (owner) {
    case XidOwner::kJob:
      return "job";
    case XidOwner::kHardware:
      return "hardware";
    case XidOwner::kDriver:
      return "driver";
    case XidOwner::kUnknown:
      break;
  }
  return "unknown";
}

const XidInfo* LookupXid(uint32_t code) {
  auto it = std::lower_bound(std::begin(kXidTable), std::end(kXidTable), code,
                             [](const XidInfo& info, uint32_t c) { return info.code < c; });
  if (it == std::end(kXidTable) || it->code != code) return nullptr;
  return &*it;
}

std::span<const XidInfo> XidTable() { return kXidTable; }

XidOwner OwnerOf(const XidRecord& record) {
  if (record.sxid) return XidOwner::kUnknown;
  const XidInfo* info = LookupXid(record.code);
  return info ? info->owner : XidOwner::kUnknown;
}

Event XidEvent(const XidRecord& rec) {
  Event ev;
  ev.kind = EventKind::kXid;
  ev.source = "kmsg";
  ev.value = static_cast<double>(rec.code);
  ev.name = std::string(XidOwnerName(OwnerOf(rec)));
  ev.text = rec.message;
  if (!rec.pci.empty()) ev.attrs.emplace_back("pci", rec.pci);
  if (rec.pid >= 0) {
    ev.identity.pid = rec.pid;
    ev.attrs.emplace_back("pid", std::to_string(rec.pid));
  }
  if (!rec.process.empty()) ev.attrs.emplace_back("process", rec.process);
  if (rec.sxid) ev.attrs.emplace_back("sxid", "1");
  if (rec.fallen_off_bus) ev.attrs.emplace_back("fallen_off_bus", "1");
  if (rec.legacy) ev.attrs.emplace_back("legacy", "1");
  if (const XidInfo* info = LookupXid(rec.code); info != nullptr && !rec.sxid) {
    ev.attrs.emplace_back("mnemonic", std::string(info->mnemonic));
  }
  return ev;
}

}  // namespace ithbat::collect
