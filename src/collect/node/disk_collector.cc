#include <utility>

#include <fmt/format.h>

#include "collect/node/node_collectors.h"
#include "collect/node/node_parse.h"
#include "core/file_util.h"

namespace ithbat::collect {
namespace {

enum DiskDesc : size_t {
  kReads,
  kWrites,
  kReadBytes,
  kWrittenBytes,
  kReadTime,
  kWriteTime,
  kInFlight,
  kIoTime,
  kWeightedIoTime,
};

}  // namespace

std::unique_ptr<DiskCollector> DiskCollector::Create(DiskOptions options) {
  return std::unique_ptr<DiskCollector>(new DiskCollector(std::move(options)));
}

DiskCollector::DiskCollector(DiskOptions options)
    : NodeCollectorBase("disk", options.max_devices ? options.max_devices : DiskOptions{}.max_devices),
      options_(std::move(options)) {
  if (options_.max_file_bytes == 0) options_.max_file_bytes = DiskOptions{}.max_file_bytes;
  path_ = options_.procfs / "diskstats";
  const std::vector<std::string> l = {"device"};
  const auto c = MetricType::kCounter;
  AddDesc("ithbat_disk_reads_completed_total", "Reads completed by the block device (/proc/diskstats)", "", c,
          l);
  AddDesc("ithbat_disk_writes_completed_total", "Writes completed by the block device (/proc/diskstats)", "",
          c, l);
  AddDesc("ithbat_disk_read_bytes_total", "Bytes read from the block device (sectors read x 512)", "bytes", c,
          l);
  AddDesc("ithbat_disk_written_bytes_total", "Bytes written to the block device (sectors written x 512)",
          "bytes", c, l);
  AddDesc("ithbat_disk_read_time_seconds_total", "Time reads spent queued and in service, summed over reads",
          "seconds", c, l);
  AddDesc("ithbat_disk_write_time_seconds_total",
          "Time writes spent queued and in service, summed over writes", "seconds", c, l);
  AddDesc("ithbat_disk_io_in_progress", "I/O requests issued to the device and not yet completed", "",
          MetricType::kGauge, l);
  AddDesc("ithbat_disk_io_time_seconds_total",
          "Time the device had at least one request in flight (busy time)", "seconds", c, l);
  AddDesc("ithbat_disk_io_time_weighted_seconds_total",
          "Busy time weighted by the number of requests in flight (its rate is the average queue depth)",
          "seconds", c, l);
}

Status DiskCollector::InitImpl(Sink& sink) {
  if (Status s = CheckRoot(options_.procfs, "procfs"); !s) return s;
  sink_ = &sink;
  return Ok();
}

Status DiskCollector::CollectImpl(TimeNs t) {
  if (Status s = ReadFileBoundedInto(path_, options_.max_file_bytes, &buffer_); !s) {
    if (s.error().code == ErrorCode::kNotFound) {
      if (!missing_) {
        missing_ = true;
        SetDegraded(fmt::format("{} is missing; no block device series", path_.string()));
      }
      return Ok();
    }
    ReportError(s.error());
    return Ok();
  }
  if (missing_) {
    missing_ = false;
    SetDegraded("");
  }
  auto disks = ParseDiskStats(buffer_, options_.max_devices * 4);
  if (!disks) {
    ReportError(Error{disks.error().code, fmt::format("{}: {}", path_.string(), disks.error().message)});
    return Ok();
  }
  BeginTick();
  for (const DiskStats& d : *disks) {
    if (!options_.include_virtual && IsVirtualDisk(d.device)) continue;
    Entity* e = GetEntity(d.device, [&] { return LabelPairs{{"device", d.device}}; });
    if (e == nullptr) continue;
    Emit(e, kReads, t, static_cast<double>(d.reads_completed));
    Emit(e, kWrites, t, static_cast<double>(d.writes_completed));
    Emit(e, kReadBytes, t, static_cast<double>(d.sectors_read * kDiskSectorBytes));
    Emit(e, kWrittenBytes, t, static_cast<double>(d.sectors_written * kDiskSectorBytes));
    Emit(e, kReadTime, t, static_cast<double>(d.read_ms) / 1e3);
    Emit(e, kWriteTime, t, static_cast<double>(d.write_ms) / 1e3);
    Emit(e, kInFlight, t, static_cast<double>(d.in_flight));
    Emit(e, kIoTime, t, static_cast<double>(d.io_ms) / 1e3);
    Emit(e, kWeightedIoTime, t, static_cast<double>(d.weighted_io_ms) / 1e3);
  }
  EndTick();
  return Ok();
}

}  // namespace ithbat::collect
