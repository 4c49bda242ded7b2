#include "collect/kmsg/kmsg_collector.h"

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace ithbat::collect {
namespace {

constexpr size_t kXidDesc = 0;
constexpr size_t kLostDesc = 1;
// A read() of /dev/kmsg must hold a whole record (else EINVAL); the kernel's bound is 8 KiB of
// text plus the dictionary, so 16 KiB is always enough.
constexpr size_t kDeviceReadBytes = 16 * 1024;
constexpr size_t kMaxRecordsPerCollect = 100'000;

}  // namespace

uint64_t KmsgRecordsLost(std::optional<uint64_t> last_seq, std::optional<uint64_t> seq, bool overwritten) {
  uint64_t lost = 0;
  if (seq && last_seq && *seq > *last_seq + 1) lost = *seq - *last_seq - 1;
  if (overwritten && lost == 0) lost = 1;
  return lost;
}

std::unique_ptr<KmsgCollector> KmsgCollector::Create(KmsgOptions options) {
  return std::unique_ptr<KmsgCollector>(new KmsgCollector(std::move(options)));
}

KmsgCollector::KmsgCollector(KmsgOptions options) : Collector("kmsg"), options_(std::move(options)) {
  const KmsgOptions defaults;
  if (options_.max_line_bytes == 0) options_.max_line_bytes = defaults.max_line_bytes;
  if (options_.max_bytes_per_collect == 0) options_.max_bytes_per_collect = defaults.max_bytes_per_collect;
  if (options_.max_xid_series == 0) options_.max_xid_series = defaults.max_xid_series;
  descs_.push_back(
      MetricDesc{"ithbat_kmsg_xid_events_total",
                 "NVIDIA Xid and SXid errors seen in the kernel log, by code (xid, or sxid_N for "
                 "NVSwitch) and likely owner (job, hardware, driver, unknown)",
                 "",
                 MetricType::kCounter,
                 {"xid", "owner"}});
  descs_.push_back(MetricDesc{"ithbat_kmsg_records_lost_total",
                              "Kernel log records overwritten in the ring buffer before the agent read them",
                              "",
                              MetricType::kCounter,
                              {}});
}

KmsgCollector::~KmsgCollector() { Close(); }

std::vector<MetricDesc> KmsgCollector::Describe() const { return descs_; }

Status KmsgCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  return Ok();
}

Status KmsgCollector::StartImpl() {
  if (Status s = Open(options_.replay_from_start); !s) {
    degraded_ = fmt::format("cannot read {}: {}; no Xid events from the kernel log", options_.path.string(),
                            s.error().message);
    SetDegraded(degraded_);
  }
  return Ok();
}

void KmsgCollector::StopImpl() { Close(); }

void KmsgCollector::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  partial_.clear();
  dropping_ = false;
}

Status KmsgCollector::Open(bool from_start) {
  Close();
  const int fd = ::open(options_.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const ErrorCode code = err == ENOENT                     ? ErrorCode::kNotFound
                           : (err == EACCES || err == EPERM) ? ErrorCode::kPermission
                                                             : ErrorCode::kIo;
    return ErrnoError(code, fmt::format("open {}", options_.path.string()), err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(ErrorCode::kIo, fmt::format("stat {}", options_.path.string()), err);
  }
  if (!S_ISCHR(st.st_mode) && !S_ISREG(st.st_mode)) {
    ::close(fd);
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} is neither a character device nor a regular file",
                      options_.path.string());
  }
  is_device_ = S_ISCHR(st.st_mode);
  inode_ = st.st_ino;
  if (is_device_) {
    // SEEK_END on /dev/kmsg: the next read returns the next record logged after now.
    if (!from_start && ::lseek(fd, 0, SEEK_END) < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoError(ErrorCode::kIo, fmt::format("seek {}", options_.path.string()), err);
    }
    last_seq_.reset();
  } else {
    offset_ = from_start ? 0 : static_cast<uint64_t>(st.st_size);
  }
  fd_ = fd;
  return Ok();
}

Status KmsgCollector::CollectImpl(TimeNs tick_time) {
  if (first_collect_) {
    first_collect_ = false;
    Bump(lost_series_, descs_[kLostDesc], {});
    lost_series_.value = 0;
  }
  if (fd_ < 0) {
    // Degraded: retry quietly (a container may get /dev/kmsg later; a test writes the file late).
    // Retry from the start of a file that appears after Start: all of it is new.
    std::error_code ec;
    const bool regular = std::filesystem::is_regular_file(options_.path, ec);
    if (Status s = Open(regular ? true : options_.replay_from_start); !s) {
      EmitCounters(tick_time);
      return Ok();
    }
    if (!degraded_.empty()) {
      degraded_.clear();
      SetDegraded("");
    }
  }
  Status s = is_device_ ? ReadDevice(tick_time) : ReadFile(tick_time);
  EmitCounters(tick_time);
  return s;
}

Status KmsgCollector::ReadDevice(TimeNs tick_time) {
  buffer_.resize(kDeviceReadBytes);
  size_t bytes = 0;
  bool overwritten = false;
  for (size_t records = 0; records < kMaxRecordsPerCollect && bytes < options_.max_bytes_per_collect;
       records++) {
    const ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
    if (n < 0) {
      const int err = errno;
      if (err == EAGAIN) break;
      if (err == EINTR) continue;
      if (err == EPIPE) {  // records were overwritten; the next read returns the oldest kept one
        overwritten = true;
        continue;
      }
      return ErrnoError(ErrorCode::kIo, fmt::format("read {}", options_.path.string()), err);
    }
    if (n == 0) break;
    bytes += static_cast<size_t>(n);
    std::string_view record(buffer_.data(), static_cast<size_t>(n));
    // The sequence number is the second field; a gap is what the ring lost.
    std::optional<uint64_t> seq;
    if (size_t c1 = record.find(','); c1 != std::string_view::npos) {
      size_t c2 = record.find(',', c1 + 1);
      if (c2 != std::string_view::npos) {
        uint64_t v = 0;
        bool ok = c2 > c1 + 1;
        for (size_t i = c1 + 1; i < c2 && ok; i++) {
          ok = record[i] >= '0' && record[i] <= '9';
          v = v * 10 + static_cast<uint64_t>(record[i] - '0');
        }
        if (ok) seq = v;
      }
    }
    const uint64_t lost = KmsgRecordsLost(last_seq_, seq, overwritten);
    overwritten = false;
    records_lost_ += lost;
    lost_series_.value += lost;
    if (seq) last_seq_ = seq;
    HandleLine(record, tick_time, true);
  }
  if (overwritten) {
    records_lost_++;
    lost_series_.value++;
  }
  return Ok();
}

Status KmsgCollector::ReadFile(TimeNs tick_time) {
  // Rotation or truncation first, by path: the open fd still sees the old file.
  struct stat st {};
  if (::stat(options_.path.c_str(), &st) == 0) {
    if (static_cast<uint64_t>(st.st_ino) != inode_) {
      if (Status s = Open(true); !s) return s;
    }
  }
  struct stat fst {};
  if (::fstat(fd_, &fst) != 0)
    return ErrnoError(ErrorCode::kIo, fmt::format("stat {}", options_.path.string()), errno);
  if (static_cast<uint64_t>(fst.st_size) < offset_) {  // truncated: what is there now is new
    offset_ = 0;
    partial_.clear();
    dropping_ = false;
  }
  size_t budget = options_.max_bytes_per_collect;
  buffer_.resize(64 * 1024);
  while (budget > 0) {
    const size_t want = std::min(budget, buffer_.size());
    const ssize_t n = ::pread(fd_, buffer_.data(), want, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, fmt::format("read {}", options_.path.string()), errno);
    }
    if (n == 0) break;
    offset_ += static_cast<uint64_t>(n);
    budget -= static_cast<size_t>(n);
    std::string_view chunk(buffer_.data(), static_cast<size_t>(n));
    while (!chunk.empty()) {
      const size_t nl = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, nl);
      if (!dropping_) {
        const size_t room = options_.max_line_bytes - std::min(options_.max_line_bytes, partial_.size());
        if (piece.size() > room) {
          partial_.append(piece.substr(0, room));
          lines_cut_++;
          dropping_ = true;
        } else {
          partial_.append(piece);
        }
      }
      if (nl == std::string_view::npos) break;
      if (!partial_.empty()) HandleLine(partial_, tick_time, false);
      partial_.clear();
      dropping_ = false;
      chunk.remove_prefix(nl + 1);
    }
    // An over-long line is handled (cut) as soon as it reaches the bound.
    if (dropping_ && !partial_.empty()) {
      HandleLine(partial_, tick_time, false);
      partial_.clear();
    }
  }
  return Ok();
}

TimeNs KmsgCollector::KernelTimeToRealtime(uint64_t kernel_us) const {
  // kmsg timestamps are the kernel's local clock, which follows CLOCK_MONOTONIC.
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  const TimeNs mono_ns = mono.tv_sec * kNsPerSec + mono.tv_nsec;
  const TimeNs real_ns = real.tv_sec * kNsPerSec + real.tv_nsec;
  const TimeNs k = static_cast<TimeNs>(kernel_us) * kNsPerUs;
  if (k > mono_ns) return real_ns;
  return real_ns - (mono_ns - k);
}

void KmsgCollector::HandleLine(std::string_view line, TimeNs tick_time, bool device) {
  if (line.size() > options_.max_line_bytes) {
    line = line.substr(0, options_.max_line_bytes);
    lines_cut_++;
  }
  std::optional<XidRecord> rec = ParseKernelLogLine(line);
  if (!rec) return;
  xid_events_++;
  const XidOwner owner = OwnerOf(*rec);

  Event ev = XidEvent(*rec);
  // Records from the device carry the kernel's own time; a file's lines may come from another
  // boot, so they are dated when read.
  ev.time = device && rec->kernel_time_us ? KernelTimeToRealtime(*rec->kernel_time_us) : tick_time;
  if (!rec->pci.empty() && options_.resolver) {
    const int32_t gpu = options_.resolver(rec->pci);
    if (gpu >= 0) ev.identity.gpu_index = gpu;
  }
  if (Status s = sink_->AppendEvent(std::move(ev)); !s) ReportError(s.error());

  std::string xid = rec->sxid ? fmt::format("sxid_{}", rec->code) : std::to_string(rec->code);
  std::string owner_name(XidOwnerName(owner));
  auto key = std::make_pair(xid, owner_name);
  auto it = xid_series_.find(key);
  if (it == xid_series_.end()) {
    if (xid_series_.size() >= options_.max_xid_series) {
      key.first = "other";
      it = xid_series_.find(key);
    }
    if (it == xid_series_.end()) it = xid_series_.emplace(key, CounterSeries{}).first;
  }
  Bump(it->second, descs_[kXidDesc], {{"xid", it->first.first}, {"owner", it->first.second}});
}

void KmsgCollector::Bump(CounterSeries& series, const MetricDesc& desc,
                         std::vector<std::pair<std::string, std::string>> labels) {
  series.value++;
  if (series.ref || series.failed) return;
  Result<LabelSet> set = LabelSet::From(labels);
  Result<SeriesRef> ref =
      set ? sink_->RegisterSeries(desc, *set) : Result<SeriesRef>(std::unexpected(set.error()));
  if (!ref) {
    series.failed = true;
    ReportError(Error{ref.error().code, fmt::format("register {}: {} (series skipped from now on)", desc.name,
                                                    ref.error().message)});
    return;
  }
  series.ref = *ref;
}

void KmsgCollector::EmitCounters(TimeNs t) {
  size_t failures = 0;
  std::optional<Error> first;
  auto append = [&](const CounterSeries& s) {
    if (!s.ref) return;
    if (Status st = sink_->Append(*s.ref, t, static_cast<double>(s.value)); !st) {
      if (failures++ == 0) first = st.error();
    }
  };
  append(lost_series_);
  for (const auto& [key, s] : xid_series_) append(s);
  if (failures > 0) {
    ReportError(
        Error{first->code, fmt::format("{} appends failed this tick; first: {}", failures, first->message)});
  }
}

}  // namespace ithbat::collect
