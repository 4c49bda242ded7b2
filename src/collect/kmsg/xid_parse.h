#pragma once
// Pure parsing of NVIDIA kernel-log lines: Xid (GPU), SXid (NVSwitch) and the legacy "GPU at
// ... has fallen off the bus" message, in every prefix the kernel log reaches us with:
//   /dev/kmsg records   "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, ..."
//   dmesg               "[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, ..."
//   dmesg -T / --ctime  "[Fri Aug 30 11:43:09 2024] NVRM: Xid ..."
//   journald / syslog   "Nov 22 18:29:55 host kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, ..."
//   bare                "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
// No I/O, no allocation beyond the returned record; never crashes on malformed input (a line
// that is not an NVIDIA error is nullopt, whatever it holds).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/event.h"

namespace ithbat::collect {

struct XidRecord {
  uint32_t code = 0;            // Xid or SXid number; 79 for the legacy fallen-off-the-bus line
  bool sxid = false;            // an NVSwitch SXid, not a GPU Xid
  bool fallen_off_bus = false;  // Xid 79 or the legacy message: the GPU is gone until reset
  bool legacy = false;          // the old "GPU at <pci> has fallen off the bus." form, no Xid number
  std::string pci;              // normalised "00000000:3b:00.0" (see NormalizePciId); "" if unknown
  int32_t pid = -1;             // pid=N when the driver printed one (not for '<unknown>')
  std::string process;          // name=X when printed and not <unknown>
  std::string message;          // the driver's text after code, pid and name
  std::optional<uint64_t> kernel_time_us;  // kmsg usec field or dmesg [sec.usec] (boot clock)
  std::optional<uint64_t> kmsg_seq;        // kmsg record sequence number
};

// "PCI:0000:3b:00", "0000:3b:00", "0009:01:00", "0000:8a:00.0", "00000000:3B:00.0" →
// "00000000:3b:00.0" (8 hex digits of domain, lowercase, function 0 when not printed). This is
// the NVML busId form lowercased, so a resolver can compare it with NVML's after the same call.
// nullopt when the text is not a PCI address.
std::optional<std::string> NormalizePciId(std::string_view text);

// nullopt when the line is not an NVIDIA Xid/SXid/fallen-off-the-bus message.
std::optional<XidRecord> ParseKernelLogLine(std::string_view line);

// Who most likely has to act on an Xid. The mapping is a judgement from NVIDIA's Xid catalog
// (docs/xid.md explains each row).
enum class XidOwner : uint8_t { kUnknown, kJob, kHardware, kDriver };
std::string_view XidOwnerName(XidOwner owner);  // "unknown", "job", "hardware", "driver"

struct XidInfo {
  uint32_t code;
  std::string_view mnemonic;  // NVIDIA's name
  std::string_view meaning;   // one line, our words
  XidOwner owner;
  std::string_view action;  // the first thing to do
};

// nullptr for codes not in the table (newer drivers add codes: they are kept as unknown owner).
const XidInfo* LookupXid(uint32_t code);
// The whole table, sorted by code (docs/xid.md is checked against it).
std::span<const XidInfo> XidTable();
// The owner of a record: the table for Xids; SXids are NVSwitch fabric errors and are not
// classified here (unknown).
XidOwner OwnerOf(const XidRecord& record);

// The event a record becomes (kind xid, value the code, name its owner, text the driver's
// message, attrs pci/pid/process/sxid/fallen_off_bus/legacy/mnemonic), as the kmsg collector
// stores it and `ithbat parse --format kmsg` prints it. Time and GPU index are the caller's:
// they need the boot clock and the node's PCI → GPU map.
Event XidEvent(const XidRecord& record);

}  // namespace ithbat::collect
