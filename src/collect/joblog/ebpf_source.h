#pragma once
// The eBPF capture (bpf/joblog_capture.bpf.c): bytes tracked processes write to stdout/stderr,
// copied by the kernel into a ring buffer at the exit of write/writev/pwrite64.
//
// Create() feature-probes the attachment: fexit on the syscall functions (runs on those three
// syscalls only), else tp_btf/sys_exit (BTF raw tracepoint: every syscall of every process
// runs a few instructions that filter on the number), else raw_tp/sys_exit (kernels without
// tp_btf). Each try loads and attaches the whole object; the first that succeeds is kept.
//
// Threads: Start() spawns one thread that blocks in ring_buffer__poll (epoll on the ring) and
// moves records into a bounded queue (record_queue.h: slabs mapped from the kernel, bounded by
// max_queue_bytes); Drain() empties it on the collector's thread. A full queue drops records and counts them
// as lost, like a full ring. The program wakes the thread only when the ring is a quarter full (a wakeup per
// write would cost microseconds per write); otherwise the thread reads the ring after each poll_timeout_ms,
// so records reach the queue within that time.
//
// Attached only while needed: with tp_btf/raw_tp every syscall of every process on the node
// runs the filter, so the programs are detached while nothing is tracked (checked by
// Maintain(), after idle_detach_ticks calls that found the kernel map empty) and attached
// again by the next Track(). Create() attaches once and detaches, so that a kernel that
// refuses to attach is found at start.
//
// Clock: the program stamps bpf_ktime_get_boot_ns() (CLOCK_BOOTTIME: monotonic, counts
// suspend); the thread adds realtime − boottime, measured when the source is created and again
// every second, so a stepped wall clock (NTP) is followed within a second.
//
// Errors from Create: kUnavailable "BPF load failed: <attach>: <errno text> (errno N): <last
// libbpf message>; ..." for every attachment tried (the errno text says EPERM when not
// allowed); kPermission only when one attachment was asked for (not auto) and the kernel
// refused it with EPERM/EACCES (no CAP_BPF/CAP_SYS_ADMIN).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "collect/joblog/capture_source.h"
#include "collect/joblog/record_queue.h"
#include "core/result.h"

struct joblog_capture_bpf;
struct ring_buffer;

namespace ithbat::collect::joblog {

struct EbpfSourceOptions {
  // "auto" (fexit, tp_btf, raw_tp in that order) or one of them (tests and benchmarks).
  std::string attach = "auto";
  size_t ring_bytes = 2u << 20;        // power of two, >= 4 KiB (rounded up); README says why
  size_t max_queue_bytes = 32u << 20;  // bytes waiting for Drain
  int poll_timeout_ms = 100;           // how long Stop may wait for the thread
  int idle_detach_ticks = 10;          // Maintain() calls with nothing tracked before detaching
  bool lazy_attach = true;             // false: stay attached from Create to destruction
};

class EbpfCaptureSource final : public CaptureSource {
 public:
  static Result<std::unique_ptr<EbpfCaptureSource>> Create(EbpfSourceOptions options);
  ~EbpfCaptureSource() override;

  CaptureMode mode() const override { return CaptureMode::kEbpf; }
  std::string_view attachment() const override { return attachment_; }
  Status Start() override;
  void Stop() override;
  size_t Drain(std::vector<CaptureRecord>& out, size_t max_records) override;
  Status Track(int32_t pid, int32_t root, bool inherit) override;
  Status Untrack(int32_t pid) override;
  CaptureCounters Counters() const override;
  void Maintain() override;

  // Whether the programs are attached now (tests, benchmarks).
  bool attached() const { return attached_; }
  // How many pids the kernel map holds now (tests).
  size_t KernelTracked() const;
  bool KernelTracks(int32_t pid) const;

 private:
  explicit EbpfCaptureSource(const EbpfSourceOptions& options)
      : options_(options), queue_(options.max_queue_bytes) {}
  static int OnRecord(void* ctx, void* data, size_t size);
  void Run();
  void UpdateClockOffset();

  EbpfSourceOptions options_;
  joblog_capture_bpf* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  std::string attachment_;
  bool attached_ = false;  // collector thread only (Track, Maintain)
  int idle_ticks_ = 0;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<int64_t> realtime_offset_{0};  // CLOCK_REALTIME - CLOCK_BOOTTIME, ns

  mutable std::mutex mu_;
  RecordQueue queue_;
  uint64_t queue_lost_records_ = 0;
  uint64_t queue_lost_bytes_ = 0;
  SeqGapDetector gaps_;  // CaptureRecord::gap_before, under mu_
  uint64_t malformed_ = 0;
};

}  // namespace ithbat::collect::joblog
