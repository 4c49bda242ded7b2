#pragma once
// The NVML side of the GPU collector: enumerating GPUs, reading one GPU into a GpuReading, and
// the event loop. Everything here may block in the driver; it runs on the collector's reader
// and event threads (see gpu_collector.h), never touches the sink and never throws.
#include <atomic>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collect/gpu/gpu_metrics.h"
#include "collect/gpu/nvml_library.h"
#include "core/event.h"
#include "core/result.h"

namespace ithbat::collect {

struct GpuEnumeration {
  std::string driver_version;
  unsigned count = 0;              // GPUs to collect (bounded by max_gpus)
  std::vector<std::string> notes;  // problems met (reported, not fatal)
};

// Global calls only (driver version, device count): no call here touches a device, so a hung
// GPU cannot block Init. Errors: the device count cannot be read (as NvmlLibrary::ToStatus).
Result<GpuEnumeration> EnumerateGpus(NvmlLibrary& lib, size_t max_gpus);

// One GPU's read state: which calls are unsupported, GPM samples, buffers. Used by one reader
// thread only.
class GpuReader {
 public:
  GpuReader(std::shared_ptr<NvmlLibrary> lib, uint32_t index, bool gpm, size_t max_processes);
  ~GpuReader();
  GpuReader(const GpuReader&) = delete;
  GpuReader& operator=(const GpuReader&) = delete;

  // Appends this tick's samples to out (which the caller cleared). The first successful read
  // also identifies the GPU (handle, UUID, name, PCI bus id) into out.identity. Sets out.lost
  // when NVML says the GPU is lost; then stops calling this GPU for the tick.
  void Read(GpuReading& out);

  const GpuStatic& info() const { return info_; }

 private:
  enum Call : uint8_t {
    kCallUtil, kCallMemory, kCallClock, kCallClockMax, kCallPower, kCallPowerLimit, kCallEnergy,
    kCallTemp, kCallPstate, kCallClockEvents, kCallEccMode, kCallEcc, kCallEccLoc, kCallRetired,
    kCallRetiredPending, kCallRemap, kCallRemapHist, kCallPcieReplay, kCallPcieTput, kCallPcieLink,
    kCallPcieLinkMax, kCallNvLinkState, kCallNvLinkErrors, kCallFields, kCallProcesses, kCallGpm, kCallMig,
    kCallMigDevices, kCallMigMemory, kCallMigProcesses, kCallIdentity, kCallCount,
  };
  struct Gpm;

  // Converts rc: true on success; NOT_SUPPORTED/NO_PERMISSION/FUNCTION_NOT_FOUND marks the
  // call unsupported (sub = a sub-index for calls made per clock/link/...); GPU_IS_LOST sets
  // lost_; anything else is one error.
  void Identify(GpuReading& out);
  bool Ok(int rc, Call call, std::string_view what, GpuReading& out, uint32_t sub = 0);
  bool Skip(Call call, uint32_t sub = 0) const;
  void Add(GpuReading& out, uint16_t metric, uint32_t key, double value);

  void ReadBasics(GpuReading& out);
  void ReadEcc(GpuReading& out);
  void ReadPcie(GpuReading& out);
  void ReadNvLink(GpuReading& out);
  void ReadFields(GpuReading& out);
  void ReadProcesses(GpuReading& out);
  // MIG devices of this (partitioned) GPU, bounded by nvmlDeviceGetMaxMigDeviceCount and
  // kMaxMigDevices; fills out.mig and the parent's instance count.
  void ReadMig(GpuReading& out);
  // One device's compute processes (the GPU's, or a MIG device's) into `samples`.
  void ReadProcessList(void* device, Call call, const std::string& label, std::vector<GpuSample>& samples,
                       GpuReading& out);
  void ReadGpm(GpuReading& out);

  std::shared_ptr<NvmlLibrary> lib_;
  GpuStatic info_;
  bool gpm_enabled_;
  size_t max_processes_;
  bool lost_ = false;
  bool identified_ = false;
  std::bitset<kCallCount> unsupported_;
  std::vector<std::bitset<64>> unsupported_sub_;  // per call: sub-indices unsupported
  std::vector<uint32_t> field_ids_;                // field-values request, built once
  std::vector<std::pair<uint16_t, uint32_t>> field_targets_;  // (metric, key) per field; metric kGpuMetricCount = internal
  std::vector<double> field_scale_;                // to base units
  std::vector<nvml::nvmlFieldValue_t> field_values_;     // request/answer buffer, reused
  std::vector<size_t> field_index_;
  std::vector<uint8_t> field_dead_;                // 1 = NOT_SUPPORTED, not requested again
  int nvlink_count_ = -1;                          // -1 = not yet known
  std::bitset<64> link_state_by_call_;             // links whose state the field API lacks
  std::vector<char> process_buf_;
  std::unique_ptr<Gpm> gpm_;
};

// Identity of a GPU for the event thread.
struct GpuEventTarget {
  void* device = nullptr;
  size_t position = 0;  // the collector's GPU position (for on_xid)
  int32_t index = -1;
  std::string index_label;
  std::string uuid;
};

// Runs until `stop`: registers Xid and other critical events on each GPU `take_targets`
// hands over (called every loop; GPUs arrive as they are identified) and delivers each event
// to `deliver` (thread-safe). `on_xid(position)` counts Xids; *ready turns true once the GPUs
// handed over so far are registered (at least one); `note(gpu, problem)` reports a GPU whose registration failed (retried every
// 10 waits) and clears it ("") once registered. Errors: events unusable at all
// (missing exports, set creation failed).
Status RunGpuEventLoop(NvmlLibrary& lib, TimeNs wait, const std::atomic<bool>& stop,
                       const std::function<std::vector<GpuEventTarget>()>& take_targets,
                       const std::function<void(Event)>& deliver, const std::function<void(size_t)>& on_xid,
                       std::atomic<bool>* ready,
                       const std::function<void(const std::string& gpu, std::string problem)>& note);

}  // namespace ithbat::collect
