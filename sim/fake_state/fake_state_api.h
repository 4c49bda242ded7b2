#pragma once
// A small C++ API over the shared fake-hardware state (fake_state.h) for tests and the
// simulator: create or open a state file, then drive the GPUs — add work to their timelines,
// inject Xids and ECC errors, lose a GPU, make calls slow or hang, switch functions to
// NOT_SUPPORTED, add compute processes. Every change is visible immediately to any process that
// maps the same file (the fake libnvidia-ml.so.1 loaded by an agent, for instance).
//
// Lifecycle: FakeState owns its mapping; the file outlives it (delete it yourself). Creating a
// state over a file another process has mapped is not supported (it truncates the file).
// Errors: Result/Status; a bad GPU index is kInvalidArgument. Thread-safe: writers serialise on
// per-GPU locks inside the mapping.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "fake_state/fake_state.h"

namespace ithbat::sim {

class FakeState {
 public:
  // Creates `path` with one GPU per model (at most kMaxGpus). `seed` distinguishes nodes: two
  // states with different seeds have different UUIDs and serials.
  static Result<std::unique_ptr<FakeState>> Create(const std::string& path,
                                                   const std::vector<GpuModel>& models,
                                                   const std::string& seed = "node0");
  // The default hardware of the fake (8 idle H100 SXM).
  static Result<std::unique_ptr<FakeState>> CreateDefault(const std::string& path,
                                                          const std::string& seed = "node0");
  static Result<std::unique_ptr<FakeState>> Open(const std::string& path);

  uint32_t gpu_count() const;
  FakeStateLayout& layout() const { return *mapping_.layout(); }
  Result<GpuConfig> Config(uint32_t gpu) const;
  // Arbitrary edit of a GPU's config, applied atomically for readers.
  template <class Fn>
  Status Modify(uint32_t gpu, Fn&& fn) {
    auto slot = Slot(gpu);
    if (!slot) return std::unexpected(slot.error());
    ModifyConfig(**slot, std::forward<Fn>(fn));
    return Ok();
  }

  // Work: one busy interval (CLOCK_REALTIME ns) with SM / tensor / DRAM shares in 0..1. Keep
  // intervals coarse (a step phase, not a kernel): the ring holds kTimelineCapacity per GPU.
  Status AddBusyInterval(uint32_t gpu, int64_t start_ns, int64_t end_ns, double sm, double tensor,
                         double dram, uint32_t pid = 0);

  // Events.
  Status InjectXid(uint32_t gpu, uint64_t xid);
  Status PushEvent(uint32_t gpu, uint64_t event_type, uint64_t data);

  // Faults (take effect on the next NVML call).
  Status SetLost(uint32_t gpu, bool lost);
  Status SetSlowCall(uint32_t gpu, uint32_t micros);
  Status SetHang(uint32_t gpu, bool hang);
  // `function` is an NVML export name from nvml::kSymbols (e.g. "nvmlDeviceGetPowerUsage"). Only
  // calls that take a device (or resolve one: nvmlDeviceGetHandleBy*) honour it.
  Status SetNotSupported(uint32_t gpu, std::string_view function, bool not_supported);

  // Processes.
  Status AddProcess(uint32_t gpu, uint32_t pid, uint64_t used_bytes);
  Status RemoveProcess(uint32_t gpu, uint32_t pid);

  // Hardware counters (the driver would raise the matching NVML events; so does this).
  Status AddEccErrors(uint32_t gpu, int error_type, int location, uint64_t count);
  Status SetRemappedRows(uint32_t gpu, uint32_t corr, uint32_t unc, bool pending, bool failure);
  Status AddPcieReplays(uint32_t gpu, uint32_t count);
  Status SetPcieLink(uint32_t gpu, uint32_t gen, uint32_t width);
  Status AddPcieTraffic(uint32_t gpu, uint64_t tx_bytes, uint64_t rx_bytes);
  Status SetNvLinkActive(uint32_t gpu, uint32_t link, bool active);
  Status AddNvLinkErrors(uint32_t gpu, uint32_t link, int counter, uint64_t count);
  Status AddNvLinkTraffic(uint32_t gpu, uint32_t link, uint64_t tx_kib, uint64_t rx_kib);
  // Page retirement (pre-Ampere mechanism; kept for completeness): cause 0 = multiple SBE, 1 = DBE.
  Status AddRetiredPage(uint32_t gpu, int cause, uint64_t address, bool pending);
  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION value (NVML_GPU_RECOVERY_ACTION_*).
  Status SetRecoveryAction(uint32_t gpu, uint32_t action);
  Status SetMigMode(uint32_t gpu, bool enabled);
  Status SetTemperatureOffset(uint32_t gpu, int32_t celsius);
  Status SetPowerLimit(uint32_t gpu, uint32_t milliwatts);
  Status SetForcedClockEventReasons(uint32_t gpu, uint64_t mask);

 private:
  explicit FakeState(StateMapping mapping) : mapping_(std::move(mapping)) {}
  Result<GpuSlot*> Slot(uint32_t gpu) const;

  StateMapping mapping_;
};

}  // namespace ithbat::sim
