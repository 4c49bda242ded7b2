#pragma once
// Node storage and network collectors: block devices (/proc/diskstats), network file systems
// (NFS mountstats, Lustre llite stats) and InfiniBand/RoCE ports (/sys/class/infiniband).
// Values are converted to base units: bytes (not sectors or 4-octet words), seconds (not ms).
//
// Roots: files are read under the procfs/sysfs roots of the options, which may be a host's
// /proc or /sys mounted into a container, or a fixture tree.
//
// Lifecycle (agent::Collector): Create → Init(sink) checks the root is a directory (kNotFound
// if not) → Start → Collect(t)… → Stop, all on the runtime's worker thread, one Collect at a
// time. The sink given to Init must outlive the collector.
//
// Errors: a source that is absent on this node (no NFS mountstats, no InfiniBand devices) is
// degraded mode: SetDegraded says why, Collect returns Ok with no series, and nothing is
// logged per tick. A file that exists but is malformed, unreadable or too large is a
// ReportError naming the file; the other files are still collected. Label sets are bounded
// (max_entities); a source listing more is cut, reported once.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "collect/node/node_series.h"

namespace ithbat::collect {

struct DiskOptions {
  std::filesystem::path procfs = "/proc";
  bool include_virtual = false;  // loop* and ram* devices
  size_t max_file_bytes = 1 << 20;
  size_t max_devices = 1024;
};

// Metrics ithbat_disk_*{device}.
class DiskCollector final : public NodeCollectorBase {
 public:
  static std::unique_ptr<DiskCollector> Create(DiskOptions options);

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  explicit DiskCollector(DiskOptions options);
  DiskOptions options_;
  std::filesystem::path path_;
  std::string buffer_;
  bool missing_ = false;
};

struct NfsOptions {
  std::filesystem::path procfs = "/proc";
  size_t max_file_bytes = 4 << 20;  // mountstats of a few hundred NFS mounts
  size_t max_mounts = 256;
  size_t max_lustre_fs = 64;
};

// Metrics ithbat_nfs_*{mountpoint,export[,op]} and ithbat_lustre_*{fs[,op]}.
class NfsCollector final : public NodeCollectorBase {
 public:
  static std::unique_ptr<NfsCollector> Create(NfsOptions options);

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  explicit NfsCollector(NfsOptions options);
  void CollectNfs(TimeNs t);
  void CollectLustre(TimeNs t);

  NfsOptions options_;
  std::string buffer_;
  bool mountstats_missing_ = false;
  size_t nfs_desc_ = 0;     // first NFS desc index
  size_t lustre_desc_ = 0;  // first Lustre desc index
};

struct InfinibandOptions {
  std::filesystem::path sysfs = "/sys";
  size_t max_devices = 64;
  size_t max_ports_per_device = 8;
  size_t max_hw_counters_per_port = 64;  // mlx5 has ~40 (out_of_buffer, rnr_nak_retry_err, ...)
};

// Metrics ithbat_ib_*{device,port}.
class InfinibandCollector final : public NodeCollectorBase {
 public:
  static std::unique_ptr<InfinibandCollector> Create(InfinibandOptions options);

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  explicit InfinibandCollector(InfinibandOptions options);
  void CollectPort(const std::string& device, const std::string& port, const std::filesystem::path& dir,
                   TimeNs t);
  bool ReadSmall(const std::filesystem::path& path);  // into buffer_; false (and reported) on error

  InfinibandOptions options_;
  std::filesystem::path root_;
  std::string buffer_;
  bool missing_ = false;
};

}  // namespace ithbat::collect
