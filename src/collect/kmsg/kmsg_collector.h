#pragma once
// The kernel-log collector: NVIDIA Xid/SXid and fallen-off-the-bus messages as kXid events,
// plus counters by Xid and owner class.
//
// Sources (KmsgOptions::path):
//   - a character device (/dev/kmsg, the default): opened O_RDONLY|O_NONBLOCK and positioned at
//     the end (SEEK_END) so that the boot's history is not replayed as if it just happened
//     (replay_from_start reads it all, for tests and one-off audits). Each read() returns one
//     record; EPIPE means the ring buffer overwrote records before we read them: counted from
//     the sequence gap (at least one per EPIPE) in ithbat_kmsg_records_lost_total, then reading
//     goes on at the oldest record still there.
//   - a regular file (a dmesg/journal capture, or a test): followed like `tail -F`. Starts at
//     the end unless replay_from_start; a file that shrinks (truncated) is read again from its
//     start; a file replaced under the same path (rotated: another inode) is reopened from its
//     start.
// Lines longer than max_line_bytes (kmsg records are at most 8 KiB) are cut there; the rest of
// such a line is dropped. Collect reads what is there without blocking, at most
// max_bytes_per_collect bytes (records), and leaves the rest for the next tick.
//
// GPU identity: the resolver maps a normalised PCI id ("00000000:3b:00.0") to an NVML GPU
// index (-1 when unknown); without one, events carry gpu unknown and the PCI id in attrs.
//
// Lifecycle (agent::Collector): Create → Init(sink) → Start (opens the source) → Collect… →
// Stop (closes it). A source that cannot be opened (no /dev/kmsg in a container, EPERM with
// dmesg_restrict) is degraded mode: SetDegraded says why, Collect retries the open each tick
// and returns Ok. The sink must outlive the collector. One Collect at a time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/collector.h"
#include "collect/kmsg/xid_parse.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect {

// Maps a normalised PCI id to a GPU index; -1 = unknown. Called on the collector's thread.
using PciToGpuResolver = std::function<int32_t(std::string_view pci)>;

// Records the kernel's ring overwrote between two /dev/kmsg reads: the gap in sequence numbers
// (last_seq unknown after the first open), and at least one when read() said EPIPE.
uint64_t KmsgRecordsLost(std::optional<uint64_t> last_seq, std::optional<uint64_t> seq, bool overwritten);

struct KmsgOptions {
  std::filesystem::path path = "/dev/kmsg";
  bool replay_from_start = false;
  size_t max_line_bytes = 8192;
  size_t max_bytes_per_collect = 1 << 20;
  size_t max_xid_series = 256;  // distinct (xid, owner) counter series; further codes are counted as "other"
  PciToGpuResolver resolver;    // may be empty
};

class KmsgCollector final : public agent::Collector {
 public:
  // Never fails; zero sizes mean the defaults.
  static std::unique_ptr<KmsgCollector> Create(KmsgOptions options);
  ~KmsgCollector() override;

  std::vector<MetricDesc> Describe() const override;

  // Totals since Start, for tests and the health page.
  uint64_t xid_events() const { return xid_events_; }
  uint64_t records_lost() const { return records_lost_; }
  uint64_t lines_cut() const { return lines_cut_; }

 protected:
  Status InitImpl(Sink& sink) override;
  Status StartImpl() override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  explicit KmsgCollector(KmsgOptions options);

  Status Open(bool from_start);
  void Close();
  Status ReadDevice(TimeNs tick_time);
  Status ReadFile(TimeNs tick_time);
  void HandleLine(std::string_view line, TimeNs tick_time, bool device);
  void EmitCounters(TimeNs t);
  TimeNs KernelTimeToRealtime(uint64_t kernel_us) const;

  struct CounterSeries {
    std::optional<SeriesRef> ref;
    bool failed = false;
    uint64_t value = 0;
  };
  void Bump(CounterSeries& series, const MetricDesc& desc,
            std::vector<std::pair<std::string, std::string>> labels);

  KmsgOptions options_;
  std::vector<MetricDesc> descs_;
  Sink* sink_ = nullptr;
  int fd_ = -1;
  bool is_device_ = false;
  uint64_t inode_ = 0;
  uint64_t offset_ = 0;    // file mode: bytes consumed
  std::string partial_;    // file mode: an unfinished last line
  bool dropping_ = false;  // file mode: skipping the rest of an over-long line
  std::string buffer_;
  std::optional<uint64_t> last_seq_;
  std::string degraded_;

  std::map<std::pair<std::string, std::string>, CounterSeries> xid_series_;  // (xid, owner)
  CounterSeries lost_series_;
  uint64_t xid_events_ = 0;
  uint64_t records_lost_ = 0;
  uint64_t lines_cut_ = 0;
  bool first_collect_ = true;
};

}  // namespace ithbat::collect
