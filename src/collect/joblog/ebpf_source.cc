#include "collect/joblog/ebpf_source.h"

#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstring>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/core.h>
#include <time.h>

#include "joblog_capture.skel.h"
#include "joblog_capture_abi.h"

namespace ithbat::collect::joblog {
namespace {

// libbpf reports why a load failed through its print callback (the verifier log, "failed to
// load", ...). Keep the last warning lines so the error can say it, and keep libbpf quiet on
// the agent's stderr otherwise.
std::mutex g_libbpf_mu;
std::string g_libbpf_last;  // last warning-level lines, bounded

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  std::array<char, 512> line{};
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(line.data(), line.size(), format, copy);
  va_end(copy);
  if (n <= 0) return 0;
  std::string_view text(line.data(), std::min<size_t>(static_cast<size_t>(n), line.size() - 1));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::lock_guard lock(g_libbpf_mu);
  if (!g_libbpf_last.empty()) g_libbpf_last += " | ";
  g_libbpf_last += text;
  if (g_libbpf_last.size() > 2048) g_libbpf_last.erase(0, g_libbpf_last.size() - 2048);
  return 0;
}

std::string TakeLibbpfMessages() {
  std::lock_guard lock(g_libbpf_mu);
  std::string out;
  out.swap(g_libbpf_last);
  return out;
}

void InstallLibbpfPrint() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(LibbpfPrint); });
}

TimeNs ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

enum class Attach { kFexit, kTpBtf, kRawTp };
std::string_view AttachName(Attach a) {
  switch (a) {
    case Attach::kFexit:
      return "fexit";
    case Attach::kTpBtf:
      return "tp_btf";
    case Attach::kRawTp:
      return "raw_tp";
  }
  return "?";
}

void SelectPrograms(joblog_capture_bpf* s, Attach a) {
  const bool fexit = a == Attach::kFexit;
  const bool tp = a == Attach::kTpBtf;
  const bool raw = a == Attach::kRawTp;
  bpf_program__set_autoload(s->progs.fx_write, fexit);
  bpf_program__set_autoload(s->progs.fx_writev, fexit);
  bpf_program__set_autoload(s->progs.fx_pwrite64, fexit);
  bpf_program__set_autoload(s->progs.tp_sys_exit, tp);
  bpf_program__set_autoload(s->progs.raw_sys_exit, raw);
  // The process-tree tracepoints: BTF flavour unless only raw tracepoints work.
  bpf_program__set_autoload(s->progs.tp_fork, !raw);
  bpf_program__set_autoload(s->progs.tp_exit, !raw);
  bpf_program__set_autoload(s->progs.raw_fork, raw);
  bpf_program__set_autoload(s->progs.raw_exit, raw);
}

std::string ErrnoText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} (errno {})", std::strerror(err), err);
}

size_t RoundRing(size_t bytes) {
  size_t r = 4096;
  while (r < bytes && r < (size_t{1} << 30)) r <<= 1;
  return r;
}

}  // namespace

Result<std::unique_ptr<EbpfCaptureSource>> EbpfCaptureSource::Create(EbpfSourceOptions options) {
  InstallLibbpfPrint();
  std::vector<Attach> order;
  if (options.attach == "auto") {
    order = {Attach::kFexit, Attach::kTpBtf, Attach::kRawTp};
  } else if (options.attach == "fexit") {
    order = {Attach::kFexit};
  } else if (options.attach == "tp_btf") {
    order = {Attach::kTpBtf};
  } else if (options.attach == "raw_tp") {
    order = {Attach::kRawTp};
  } else {
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "unknown BPF attachment '{}' (auto, fexit, tp_btf, raw_tp)", options.attach);
  }
  std::unique_ptr<EbpfCaptureSource> src(new EbpfCaptureSource(options));
  std::string reasons;
  bool permission = false;
  for (Attach a : order) {
    TakeLibbpfMessages();
    joblog_capture_bpf* skel = joblog_capture_bpf__open();
    int err = skel ? 0 : -errno;
    const char* step = "open";
    if (skel) {
      SelectPrograms(skel, a);
      bpf_map__set_max_entries(skel->maps.events, static_cast<uint32_t>(RoundRing(options.ring_bytes)));
      step = "load";
      err = joblog_capture_bpf__load(skel);
      if (err == 0) {
        step = "attach";
        err = joblog_capture_bpf__attach(skel);
      }
    }
    if (err == 0) {
      src->skel_ = skel;
      src->attachment_ = std::string(AttachName(a));
      src->attached_ = true;
      if (options.lazy_attach) {
        joblog_capture_bpf__detach(skel);  // nothing tracked yet: the next Track attaches
        src->attached_ = false;
      }
      break;
    }
    if (err == -EPERM || err == -EACCES) permission = true;
    std::string msg = TakeLibbpfMessages();
    reasons += fmt::format("{}{}: {} failed: {}{}{}", reasons.empty() ? "" : "; ", AttachName(a), step,
                           ErrnoText(err), msg.empty() ? "" : ": ", msg.substr(0, 400));
    if (skel) joblog_capture_bpf__destroy(skel);
  }
  if (!src->skel_) {
    return MakeErrorF(permission && order.size() == 1 ? ErrorCode::kPermission : ErrorCode::kUnavailable,
                      "BPF load failed: {}", reasons);
  }
  src->ring_ = ring_buffer__new(bpf_map__fd(src->skel_->maps.events), &EbpfCaptureSource::OnRecord, src.get(),
                                nullptr);
  if (!src->ring_) {
    int err = errno;
    return MakeErrorF(ErrorCode::kUnavailable, "BPF load failed: ring buffer: {}", ErrnoText(err));
  }
  src->UpdateClockOffset();
  return src;
}

EbpfCaptureSource::~EbpfCaptureSource() {
  Stop();
  if (ring_) ring_buffer__free(ring_);
  if (skel_) joblog_capture_bpf__destroy(skel_);
}

void EbpfCaptureSource::UpdateClockOffset() {
  // Read boottime between two realtime reads and take the middle: the offset is off by at most
  // half the time the three calls took (tens of ns).
  TimeNs r1 = ClockNs(CLOCK_REALTIME);
  TimeNs b = ClockNs(CLOCK_BOOTTIME);
  TimeNs r2 = ClockNs(CLOCK_REALTIME);
  realtime_offset_.store(r1 + (r2 - r1) / 2 - b, std::memory_order_relaxed);
}

Status EbpfCaptureSource::Start() {
  if (running_.exchange(true)) return Ok();
  thread_ = std::thread([this] { Run(); });
  return Ok();
}

void EbpfCaptureSource::Stop() {
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
}

void EbpfCaptureSource::Run() {
  TimeNs last_clock = MonotonicNowNs();
  while (running_.load(std::memory_order_relaxed)) {
    int n = ring_buffer__poll(ring_, options_.poll_timeout_ms);
    // The program wakes the poll only when the ring is a quarter full (joblog_capture.bpf.c,
    // wakeup_flags): read whatever is there after every timeout too.
    if (n >= 0) n = ring_buffer__consume(ring_);
    if (n < 0 && n != -EINTR) {
      // The epoll fd broke: nothing else to do but wait and retry (counted as malformed).
      std::lock_guard lock(mu_);
      ++malformed_;
    }
    TimeNs now = MonotonicNowNs();
    if (now - last_clock >= kNsPerSec) {
      UpdateClockOffset();
      last_clock = now;
    }
  }
  // What is left in the ring when stopping is read once more, so a test that stops right after
  // its child exits still sees everything.
  ring_buffer__consume(ring_);
}

int EbpfCaptureSource::OnRecord(void* ctx, void* data, size_t size) {
  auto* self = static_cast<EbpfCaptureSource*>(ctx);
  if (size < sizeof(joblog_header)) {
    std::lock_guard lock(self->mu_);
    ++self->malformed_;
    return 0;
  }
  joblog_header h;
  std::memcpy(&h, data, sizeof(h));
  if (h.len > size - sizeof(h) || h.len > JOBLOG_CHUNK_BYTES) {
    std::lock_guard lock(self->mu_);
    ++self->malformed_;
    return 0;
  }
  CaptureRecord r;
  switch (h.type) {
    case JOBLOG_REC_DATA:
      r.type = CaptureRecord::Type::kData;
      break;
    case JOBLOG_REC_FORK:
      r.type = CaptureRecord::Type::kFork;
      break;
    case JOBLOG_REC_EXIT:
      r.type = CaptureRecord::Type::kExit;
      break;
    default: {
      std::lock_guard lock(self->mu_);
      ++self->malformed_;
      return 0;
    }
  }
  r.pid = static_cast<int32_t>(h.tgid);
  r.tid = static_cast<int32_t>(h.tid);
  r.fd = h.fd;
  r.stream = static_cast<uint8_t>(h.stream);
  r.time = static_cast<TimeNs>(h.boot_ns) + self->realtime_offset_.load(std::memory_order_relaxed);
  r.total_len = h.total_len;
  r.offset = h.offset;
  if (r.type == CaptureRecord::Type::kFork) {
    r.root = static_cast<int32_t>(h.offset);
    r.offset = 0;
  }
  const std::string_view bytes(static_cast<const char*>(data) + sizeof(h), h.len);
  std::lock_guard lock(self->mu_);
  if (r.type == CaptureRecord::Type::kExit) self->gaps_.Forget(r.pid);
  if (r.type == CaptureRecord::Type::kData) r.gap_before = self->gaps_.Observe(r.pid, h.seq);
  if (!self->queue_.Push(r, bytes)) {
    ++self->queue_lost_records_;
    self->queue_lost_bytes_ += bytes.size();
    // The process's next delivered record follows a gap (and inherits this one's, if any).
    if (r.type == CaptureRecord::Type::kData) self->gaps_.Lost(r.pid);
  }
  return 0;
}

size_t EbpfCaptureSource::Drain(std::vector<CaptureRecord>& out, size_t max_records) {
  std::lock_guard lock(mu_);
  return queue_.Drain(out, max_records);
}

Status EbpfCaptureSource::Track(int32_t pid, int32_t root, bool inherit) {
  if (pid <= 0) return MakeErrorF(ErrorCode::kInvalidArgument, "cannot track pid {}", pid);
  idle_ticks_ = 0;
  if (!attached_) {
    // Attach before the map entry exists, so no fork or exit of the process is missed.
    TakeLibbpfMessages();
    if (int err = joblog_capture_bpf__attach(skel_); err != 0) {
      std::string msg = TakeLibbpfMessages();
      return MakeErrorF(ErrorCode::kUnavailable, "BPF attach ({}) failed: {}{}{}", attachment_,
                        ErrnoText(err), msg.empty() ? "" : ": ", msg.substr(0, 400));
    }
    attached_ = true;
  }
  uint32_t key = static_cast<uint32_t>(pid);
  joblog_track value{};
  value.flags = inherit ? 0 : JOBLOG_TRACK_NO_INHERIT;
  value.root = static_cast<uint32_t>(root > 0 ? root : pid);
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.tracked), &key, &value, BPF_ANY) != 0) {
    int err = errno;
    return ErrnoError(err == E2BIG ? ErrorCode::kResourceExhausted : ErrorCode::kIo,
                      fmt::format("tracking pid {} in the BPF map", pid), err);
  }
  return Ok();
}

Status EbpfCaptureSource::Untrack(int32_t pid) {
  if (pid <= 0) return Ok();
  uint32_t key = static_cast<uint32_t>(pid);
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.tracked), &key) != 0 && errno != ENOENT) {
    int err = errno;
    return ErrnoError(ErrorCode::kIo, fmt::format("untracking pid {} in the BPF map", pid), err);
  }
  return Ok();
}

void EbpfCaptureSource::Maintain() {
  if (!options_.lazy_attach || !attached_) return;
  if (KernelTracked() > 0) {
    idle_ticks_ = 0;
    return;
  }
  if (++idle_ticks_ < std::max(1, options_.idle_detach_ticks)) return;
  joblog_capture_bpf__detach(skel_);
  attached_ = false;
  idle_ticks_ = 0;
}

bool EbpfCaptureSource::KernelTracks(int32_t pid) const {
  uint32_t key = static_cast<uint32_t>(pid);
  joblog_track value{};
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.tracked), &key, &value) == 0;
}

size_t EbpfCaptureSource::KernelTracked() const {
  size_t n = 0;
  uint32_t key = 0, next = 0;
  const int fd = bpf_map__fd(skel_->maps.tracked);
  const uint32_t* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0 && n < JOBLOG_MAX_TRACKED) {
    ++n;
    key = next;
    prev = &key;
  }
  return n;
}

CaptureCounters EbpfCaptureSource::Counters() const {
  CaptureCounters c;
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu > 0) {
    std::vector<joblog_stats> per_cpu(static_cast<size_t>(ncpu));
    uint32_t key = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stats), &key, per_cpu.data()) == 0) {
      for (const auto& s : per_cpu) {
        c.records += s.records;
        c.bytes += s.bytes;
        c.lost_records += s.lost_records;
        c.lost_bytes += s.lost_bytes;
        c.truncated_writes += s.truncated_writes;
        c.truncated_bytes += s.truncated_bytes;
        c.read_errors += s.read_errors;
        c.track_full += s.track_full;
      }
    }
  }
  std::lock_guard lock(mu_);
  c.lost_records += queue_lost_records_ + malformed_;
  c.lost_bytes += queue_lost_bytes_;
  return c;
}

std::string_view CaptureModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kOff:
      return "off";
    case CaptureMode::kEbpf:
      return "ebpf";
    case CaptureMode::kTail:
      return "tail";
  }
  return "off";
}

}  // namespace ithbat::collect::joblog
