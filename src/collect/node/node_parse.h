#pragma once
// Pure parsers for the node storage and network files: /proc/diskstats, NFS mountstats,
// Lustre llite stats and InfiniBand sysfs attributes. They take a file's content (no I/O),
// keep the kernel's units (sectors, milliseconds, 4-octet words), never crash on malformed
// input, and return kParse errors that name the line and quote the offending text.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect {

// Sectors in /proc/diskstats are always 512 bytes, whatever the device's block size.
inline constexpr uint64_t kDiskSectorBytes = 512;

// One line of /proc/diskstats (Documentation/admin-guide/iostats.rst). 14 fields on every
// kernel since 2.6; 18 (discards, 4.18) and 20 (flushes, 5.5) are accepted, the extra columns
// are not exported.
struct DiskStats {
  std::string device;
  uint32_t major = 0;
  uint32_t minor = 0;
  uint64_t reads_completed = 0;
  uint64_t reads_merged = 0;
  uint64_t sectors_read = 0;
  uint64_t read_ms = 0;
  uint64_t writes_completed = 0;
  uint64_t writes_merged = 0;
  uint64_t sectors_written = 0;
  uint64_t write_ms = 0;
  uint64_t in_flight = 0;
  uint64_t io_ms = 0;
  uint64_t weighted_io_ms = 0;
};
// Bounded: at most max_devices lines are returned (kResourceExhausted beyond).
Result<std::vector<DiskStats>> ParseDiskStats(std::string_view text, size_t max_devices = 4096);
// loop*, ram*: devices whose I/O is memory traffic, not storage.
bool IsVirtualDisk(std::string_view device);

// One NFS operation line of mountstats ("READ: ops trans timeouts bytes_sent bytes_recv queue
// rtt execute [errors]"); errors appeared in kernel 5.3.
struct NfsOpStats {
  std::string op;
  uint64_t ops = 0;
  uint64_t transmissions = 0;
  uint64_t major_timeouts = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t queue_ms = 0;
  uint64_t rtt_ms = 0;
  uint64_t execute_ms = 0;
  std::optional<uint64_t> errors;
};

struct NfsMount {
  std::string export_name;  // "server:/path"
  std::string mountpoint;
  std::string fstype;  // nfs or nfs4
  // "bytes:" line: normal (page cache) and direct reads/writes by applications, and what went
  // over the wire.
  uint64_t normal_read_bytes = 0;
  uint64_t normal_write_bytes = 0;
  uint64_t direct_read_bytes = 0;
  uint64_t direct_write_bytes = 0;
  uint64_t server_read_bytes = 0;
  uint64_t server_write_bytes = 0;
  bool has_bytes = false;
  std::vector<NfsOpStats> ops;  // in file order
};
// /proc/<pid>/mountstats: NFS mounts only (other "device" blocks are skipped). Escaped octal in
// names ("\040" for a space) is decoded. At most max_mounts mounts and 256 ops per mount.
Result<std::vector<NfsMount>> ParseMountStats(std::string_view text, size_t max_mounts = 1024);

// /proc/fs/lustre/llite/<fs>/stats (lprocfs): "name count samples [unit] [min max sum [sumsq]]".
struct LustreStats {
  std::optional<uint64_t> read_bytes;   // sum of read_bytes
  std::optional<uint64_t> write_bytes;  // sum of write_bytes
  std::optional<uint64_t> reads;        // count of read_bytes samples (read calls)
  std::optional<uint64_t> writes;
  std::optional<uint64_t> opens;
  std::optional<uint64_t> closes;
  std::optional<uint64_t> fsyncs;
};
Result<LustreStats> ParseLustreStats(std::string_view text);

// InfiniBand sysfs attributes.
// ports/<n>/state and phys_state: "4: ACTIVE", "5: LinkUp".
struct IbEnumValue {
  uint32_t value = 0;
  std::string label;
};
Result<IbEnumValue> ParseIbEnum(std::string_view text);
// ports/<n>/rate: "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "400 Gb/sec (4X NDR)" → Gb/s.
Result<double> ParseIbRateGbps(std::string_view text);
// A counter file: one unsigned number and a newline.
Result<uint64_t> ParseSysfsCounter(std::string_view text);

}  // namespace ithbat::collect
