#pragma once
// The GPU collector: per-GPU health and activity from NVML (libnvidia-ml.so.1, loaded at run
// time; the agent builds without NVIDIA headers, see collect/gpu/nvml_abi.h).
//
// Lifecycle (see agent::Collector): Create → Init(sink) loads NVML (kNotFound when the library
// or a required symbol is missing), initialises it and reads the device count — global calls
// only, so a hung GPU cannot hang the agent's start → Start starts the per-GPU readers and the
// event thread → Collect(t)… on the runtime's worker → Stop. Each GPU's identity (handle, UUID,
// model, PCI bus id) is read by its reader on its first answered tick; until then its only
// series are ithbat_gpu_nvml_stalled / ithbat_gpu_lost labelled gpu alone. One Collect at a
// time. The sink given to Init must outlive the collector.
//
// Threads, and why (a collector spawns threads only where it must block on the driver):
//   * One reader thread per GPU. A failing GPU can block an NVML call for tens of seconds;
//     if the runtime's worker made the calls itself, one hung GPU would blank every GPU until
//     the watchdog gave up on the whole collector. Instead Collect hands each GPU's reader a
//     "read now" request and waits for all of them, but only up to `gpu_deadline` (below the
//     runtime's collect deadline). A reader that is not back by then leaves its GPU "stalled":
//     Collect appends the other GPUs, sets ithbat_gpu_nvml_stalled{gpu}=1, marks the
//     collector degraded, and does not send that GPU another request until the outstanding
//     call returns (its late result, stale by then, is dropped). When the call comes back
//     the next tick reads the GPU again and the degraded reason clears. (A driver that hangs
//     while holding NVML's global lock blocks every GPU; then every GPU is stalled and the
//     collector reports that rather than hanging the runtime's worker.)
//     Readers only fill a plain-value snapshot; every sink write happens on the runtime's
//     worker in Collect, so each series keeps one writer.
//   * One event thread: nvmlEventSetWait_v2 blocks in the driver. It waits with a short
//     timeout in a loop (Stop is prompt) and sends Xid (kXid, value = Xid code) and other
//     critical events (kGpuEvent) to Sink::AppendEvent, which is thread-safe.
//   Stop waits a bounded time for these threads; one stuck in the driver is detached. The
//   state a thread touches (its request slot and the library) is shared-owned, so a detached
//   thread never touches a destroyed collector.
//
// Series policy: every series carries gpu (NVML index) and gpu_uuid. MIG: ithbat_gpu_mig_enabled
// says when a GPU is partitioned; then its reader enumerates the MIG devices every tick
// (bounded by nvmlDeviceGetMaxMigDeviceCount), ithbat_gpu_mig_instances counts them on the
// parent, and each is exported as a GPU of its own with gpu="<parent>/<gi>/<ci>", gpu_uuid = its
// MIG UUID and parent_gpu = the parent's index, carrying what NVML answers for MIG devices
// (info, memory total/free/used, compute processes). A MIG device that disappears stops being
// appended. A value NVML reports NOT_SUPPORTED (or
// NO_PERMISSION) is never exported, not even as 0, and that call is not made again for that
// GPU. Per-link NVLink error counters are registered only the first time they are non-zero
// (18 links × 5 counters × 8 GPUs of steady zeros would be most of the node's series);
// from then on they are appended every tick. GPU_IS_LOST sets ithbat_gpu_lost{gpu}=1, sends a
// kGpuEvent "gpu_lost" once per transition and degrades the collector; other GPUs continue.
//
// Every NVML call is timed per family (count, sum, max, last: ithbat_gpu_nvml_call_*).
//
// Process identity: a compute process's series (ithbat_gpu_process_memory_used_bytes) also
// carry job_id, rank, local_rank and world_size where known, from an IdentityResolver reading
// the agent's real /proc (`proc_root`; collect/identity/README.md). A pid is resolved once, on
// the worker, in the tick it first appears in any GPU's NVML list (NVML's pid -> GPU map is
// passed as the map that wins); its labels are kept until it leaves every GPU's list, when
// its series slot is dropped and the resolver forgets it. The collector's own pid, gpu and
// gpu_uuid labels always win over the identity's. A pid that cannot be resolved (gone from
// /proc, another pid namespace, unreadable) keeps pid/gpu labels only and is reported with
// ReportError once per appearance of that pid (never per tick). Only allow-listed environment
// variables ever reach the resolver's result; nothing of the environment is logged here.
// Limit: a pid reused by another process while it stays in NVML's list keeps the first
// process's labels (pid reuse within one tick interval while holding a GPU context).
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/collector.h"
#include "collect/gpu/gpu_metrics.h"
#include "collect/gpu/gpu_reader.h"
#include "collect/gpu/nvml_library.h"
#include "agent/tracked_processes.h"
#include "collect/identity/identity_resolver.h"
#include "core/labels.h"
#include "core/metric.h"
#include "core/result.h"
#include "core/sink.h"
#include "core/time.h"

namespace ithbat::collect {

struct GpuOptions {
  std::string library = "libnvidia-ml.so.1";  // soname or path
  // How long Collect waits for a GPU's reader before calling the GPU stalled. Keep it below
  // the runtime's collect deadline (default 5 s) so one hung GPU never trips the watchdog.
  TimeNs gpu_deadline = 2 * kNsPerSec;
  TimeNs event_wait = 200 * kNsPerMs;  // nvmlEventSetWait_v2 timeout: how fast Stop is seen
  bool events = true;                  // the Xid/critical event thread
  bool gpm = true;                     // Hopper+ GPM metrics
  size_t max_gpus = 64;                // bound on devices (and MIG instances) handled
  size_t max_processes_per_gpu = 256;  // bound on compute processes listed per GPU
  std::vector<std::string> hidden_symbols;  // tests: resolve these NVML symbols as missing
  // Where process identities are read (the agent's own /proc; only tests change it).
  std::filesystem::path proc_root = "/proc";
  // Where the GPU processes (with their resolved identity) are published for per-process
  // collectors (job output, probes), as source "gpu". Optional; must outlive the collector.
  agent::TrackedProcesses* tracked = nullptr;
};

class GpuCollector final : public agent::Collector {
 public:
  // Never fails: a missing library shows at Init.
  static std::unique_ptr<GpuCollector> Create(GpuOptions options);
  ~GpuCollector() override;

  std::vector<MetricDesc> Describe() const override;

  // Diagnostics for tests and the status API (thread-safe).
  size_t gpu_count() const;
  bool gpu_stalled(size_t i) const;
  // The event thread has registered every GPU identified so far.
  bool events_ready() const;

 protected:
  Status InitImpl(Sink& sink) override;
  Status StartImpl() override;
  Status CollectImpl(TimeNs tick_time) override;
  void StopImpl() override;

 private:
  struct Hub;     // the mutex and condition variable readers and Collect share (shared-owned)
  struct Reader;  // a GPU's reader thread and its request slot (shared-owned)
  struct Events;  // the event thread's shared state
  struct Slot {
    bool failed = false;
    SeriesRef ref = 0;
  };
  struct GpuState {
    GpuStatic info;
    LabelSet base;  // gpu, gpu_uuid (+ parent_gpu)
    std::shared_ptr<Reader> reader;
    GpuReading reading;  // the latest reading, swapped out of the reader
    std::unordered_map<uint64_t, Slot> slots;  // (metric << 32 | key) → series
    bool identified = false;  // its reader has read handle and UUID (until then: gpu label only)
    bool lost = false;
    bool stalled = false;
    TimeNs stalled_since = 0;  // monotonic
    uint64_t xids_seen = 0;
    std::vector<uint32_t> pids;  // compute processes with a memory series in the last fresh reading
    std::vector<std::unique_ptr<GpuState>> mig;  // MIG devices of the last fresh reading
  };
  // A compute process seen in some GPU's NVML list.
  struct ProcessLabels {
    std::vector<std::pair<std::string, std::string>> labels;  // job_id, rank, ... (no pid/gpu)
    Identity identity;  // as resolved (pid and NVML's GPU at least), for TrackedProcesses
    size_t gpus = 0;  // how many GPUs list it now; forgotten at 0
  };

  explicit GpuCollector(GpuOptions options);

  void Identified(GpuState& gpu, size_t position, const GpuStatic& id);
  void EmitGpu(GpuState& gpu, uint16_t metric, uint32_t key, double value, TimeNs t);
  void EmitCallStats(TimeNs t);
  // Exports the MIG devices of gpu's fresh reading as GPUs of their own.
  void EmitMig(GpuState& gpu, TimeNs t);
  Result<LabelSet> SeriesLabels(const GpuState* gpu, uint16_t metric, uint32_t key) const;
  bool EmitSlot(Slot& slot, bool is_new, const GpuState* gpu, uint16_t metric, uint32_t key, double value, TimeNs t);
  void StopThreads();
  // Tracks which pids each fresh GPU lists, resolving new ones and forgetting gone ones.
  void UpdateProcesses(const std::vector<uint8_t>& fresh);
  // Hands the current GPU processes to options_.tracked (when set).
  void PublishProcesses();

  GpuOptions options_;
  std::shared_ptr<NvmlLibrary> lib_;
  Sink* sink_ = nullptr;
  std::string driver_version_;
  std::vector<std::unique_ptr<GpuState>> gpus_;
  std::shared_ptr<Hub> hub_;
  uint64_t tick_id_ = 0;
  std::unordered_map<uint64_t, Slot> call_slots_;  // NVML call stats, not per GPU
  std::shared_ptr<Events> events_;
  std::vector<GpuEventTarget> new_targets_;  // identified this tick, for the event thread
  std::string degraded_;
  std::string init_notes_;  // from Init: missing optional exports, MIG, skipped GPUs
  size_t append_failures_ = 0;
  std::string first_append_error_;
  identity::IdentityResolver resolver_;
  std::unordered_map<uint32_t, ProcessLabels> processes_;  // by pid
};

}  // namespace ithbat::collect
