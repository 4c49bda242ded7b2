#include "fake_state/fake_state_api.h"

#include <algorithm>

#include "collect/gpu/nvml_abi.h"

namespace ithbat::sim {
namespace {
namespace nv = ::ithbat::nvml;
}  // namespace

Result<std::unique_ptr<FakeState>> FakeState::Create(const std::string& path,
                                                     const std::vector<GpuModel>& models,
                                                     const std::string& seed) {
  if (models.size() > kMaxGpus) return MakeErrorF(ErrorCode::kInvalidArgument, "at most {} GPUs", kMaxGpus);
  for (GpuModel m : models) {
    if (FindModel(m) == nullptr) return MakeError(ErrorCode::kInvalidArgument, "unknown GPU model");
  }
  StateMapping mapping;
  std::string error;
  if (!mapping.Create(path, models.data(), static_cast<uint32_t>(models.size()), seed, &error)) {
    return MakeError(ErrorCode::kIo, error);
  }
  return std::unique_ptr<FakeState>(new FakeState(std::move(mapping)));
}

Result<std::unique_ptr<FakeState>> FakeState::CreateDefault(const std::string& path,
                                                            const std::string& seed) {
  return Create(path, std::vector<GpuModel>(8, GpuModel::kH100Sxm), seed);
}

Result<std::unique_ptr<FakeState>> FakeState::Open(const std::string& path) {
  StateMapping mapping;
  std::string error;
  if (!mapping.Open(path, &error)) return MakeError(ErrorCode::kIo, error);
  return std::unique_ptr<FakeState>(new FakeState(std::move(mapping)));
}

uint32_t FakeState::gpu_count() const { return std::min(layout().header.gpu_count, kMaxGpus); }

Result<GpuSlot*> FakeState::Slot(uint32_t gpu) const {
  if (gpu >= gpu_count())
    return MakeErrorF(ErrorCode::kInvalidArgument, "no GPU {} (have {})", gpu, gpu_count());
  return &layout().gpus[gpu];
}

Result<GpuConfig> FakeState::Config(uint32_t gpu) const {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  GpuConfig c;
  if (!ReadConfig(**slot, &c)) return MakeError(ErrorCode::kInternal, "config seqlock never settled");
  return c;
}

Status FakeState::AddBusyInterval(uint32_t gpu, int64_t start_ns, int64_t end_ns, double sm, double tensor,
                                  double dram, uint32_t pid) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  if (end_ns <= start_ns)
    return MakeError(ErrorCode::kInvalidArgument, "busy interval must have end > start");
  auto ok = [](double v) { return v >= 0 && v <= 1; };
  if (!ok(sm) || !ok(tensor) || !ok(dram)) {
    return MakeError(ErrorCode::kInvalidArgument, "busy shares must be within 0..1");
  }
  AppendInterval(**slot, BusyInterval{start_ns, end_ns, pid, static_cast<float>(sm),
                                      static_cast<float>(tensor), static_cast<float>(dram)});
  return Ok();
}

Status FakeState::InjectXid(uint32_t gpu, uint64_t xid) {
  return PushEvent(gpu, nv::nvmlEventTypeXidCriticalError, xid);
}

Status FakeState::PushEvent(uint32_t gpu, uint64_t event_type, uint64_t data) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  sim::PushEvent(layout(), gpu, event_type, data, nv::NVML_INVALID_INSTANCE_ID, nv::NVML_INVALID_INSTANCE_ID);
  return Ok();
}

Status FakeState::SetLost(uint32_t gpu, bool lost) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  StoreU32(&(*slot)->faults.lost, lost ? 1 : 0);
  return Ok();
}

Status FakeState::SetSlowCall(uint32_t gpu, uint32_t micros) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  StoreU32(&(*slot)->faults.slow_call_us, micros);
  return Ok();
}

Status FakeState::SetHang(uint32_t gpu, bool hang) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  StoreU32(&(*slot)->faults.hang, hang ? 1 : 0);
  return Ok();
}

Status FakeState::SetNotSupported(uint32_t gpu, std::string_view function, bool not_supported) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  const size_t index = nv::SymbolIndex(function);
  if (index >= nv::kSymbols.size()) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} is not an NVML function of nvml_abi.h", function);
  }
  static_assert(nv::kSymbols.size() <= 64 * kNvmlMaskWords);
  uint64_t* word = &(*slot)->faults.nvml_not_supported[index / 64];
  const uint64_t bit = 1ULL << (index % 64);
  if (not_supported) {
    __atomic_fetch_or(word, bit, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_and(word, ~bit, __ATOMIC_RELEASE);
  }
  return Ok();
}

Status FakeState::AddProcess(uint32_t gpu, uint32_t pid, uint64_t used_bytes) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  bool full = false;
  ModifyConfig(**slot, [&](GpuConfig& c) {
    for (uint32_t i = 0; i < c.process_count; ++i) {
      if (c.processes[i].pid == pid) {
        c.processes[i].used_bytes = used_bytes;
        return;
      }
    }
    if (c.process_count >= kMaxProcesses) {
      full = true;
      return;
    }
    const bool mig = c.mig_mode_current == nv::NVML_DEVICE_MIG_ENABLE && c.mig_instance_count > 0;
    c.processes[c.process_count++] =
        ProcessEntry{pid, mig ? c.mig[0].gpu_instance_id : nv::NVML_INVALID_INSTANCE_ID,
                     mig ? c.mig[0].compute_instance_id : nv::NVML_INVALID_INSTANCE_ID, 0, used_bytes};
  });
  if (full)
    return MakeErrorF(ErrorCode::kResourceExhausted, "GPU {} already has {} processes", gpu, kMaxProcesses);
  return Ok();
}

Status FakeState::RemoveProcess(uint32_t gpu, uint32_t pid) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  bool found = false;
  ModifyConfig(**slot, [&](GpuConfig& c) {
    for (uint32_t i = 0; i < c.process_count; ++i) {
      if (c.processes[i].pid == pid) {
        c.processes[i] = c.processes[c.process_count - 1];
        c.processes[--c.process_count] = ProcessEntry{};
        found = true;
        return;
      }
    }
  });
  if (!found) return MakeErrorF(ErrorCode::kNotFound, "pid {} is not on GPU {}", pid, gpu);
  return Ok();
}

Status FakeState::AddEccErrors(uint32_t gpu, int error_type, int location, uint64_t count) {
  auto slot = Slot(gpu);
  if (!slot) return std::unexpected(slot.error());
  if (error_type < 0 || error_type > 1 || location < 0 || location >= static_cast<int>(kEccLocations)) {
    return MakeError(ErrorCode::kInvalidArgument, "bad ECC error type or memory location");
  }
  ModifyConfig(**slot, [&](GpuConfig& c) {
    c.ecc[error_type][nv::NVML_VOLATILE_ECC][location] += count;
    c.ecc[error_type][nv::NVML_AGGREGATE_ECC][location] += count;
  });
  const uint64_t type = error_type == nv::NVML_MEMORY_ERROR_TYPE_CORRECTED
                            ? nv::nvmlEventTypeSingleBitEccError
                            : nv::nvmlEventTypeDoubleBitEccError;
  sim::PushEvent(layout(), gpu, type, 0, nv::NVML_INVALID_INSTANCE_ID, nv::NVML_INVALID_INSTANCE_ID);
  return Ok();
}

Status FakeState::SetRemappedRows(uint32_t gpu, uint32_t corr, uint32_t unc, bool pending, bool failure) {
  return Modify(gpu, [&](GpuConfig& c) {
    c.remap_corr = corr;
    c.remap_unc = unc;
    c.remap_pending = pending ? 1 : 0;
    c.remap_failure = failure ? 1 : 0;
    // Each remapped row uses a spare: move banks down from "max" availability.
    const uint32_t used = std::min(corr + unc, c.remap_histogram[0] + c.remap_histogram[1]);
    const uint32_t total = c.remap_histogram[0] + c.remap_histogram[1] + c.remap_histogram[2] +
                           c.remap_histogram[3] + c.remap_histogram[4];
    c.remap_histogram[0] = total - used;
    c.remap_histogram[1] = used;
    c.remap_histogram[2] = c.remap_histogram[3] = c.remap_histogram[4] = 0;
  });
}

Status FakeState::AddPcieReplays(uint32_t gpu, uint32_t count) {
  return Modify(gpu, [&](GpuConfig& c) { c.pcie_replay += count; });
}

Status FakeState::SetPcieLink(uint32_t gpu, uint32_t gen, uint32_t width) {
  return Modify(gpu, [&](GpuConfig& c) {
    c.pcie_gen_cur = std::min(gen, c.pcie_gen_max);
    c.pcie_width_cur = std::min(width, c.pcie_width_max);
  });
}

Status FakeState::AddPcieTraffic(uint32_t gpu, uint64_t tx_bytes, uint64_t rx_bytes) {
  return Modify(gpu, [&](GpuConfig& c) {
    c.pcie_tx_bytes += tx_bytes;
    c.pcie_rx_bytes += rx_bytes;
  });
}

Status FakeState::SetNvLinkActive(uint32_t gpu, uint32_t link, bool active) {
  if (link >= kMaxNvLinks) return MakeErrorF(ErrorCode::kInvalidArgument, "no NVLink {}", link);
  return Modify(gpu, [&](GpuConfig& c) {
    if (link < c.nvlink_count) c.nvlink[link].active = active ? 1 : 0;
  });
}

Status FakeState::AddNvLinkErrors(uint32_t gpu, uint32_t link, int counter, uint64_t count) {
  if (link >= kMaxNvLinks || counter < 0 || counter >= static_cast<int>(kNvLinkErrorCounters)) {
    return MakeError(ErrorCode::kInvalidArgument, "bad NVLink link or counter");
  }
  return Modify(gpu, [&](GpuConfig& c) {
    if (link < c.nvlink_count) c.nvlink[link].errors[counter] += count;
  });
}

Status FakeState::AddNvLinkTraffic(uint32_t gpu, uint32_t link, uint64_t tx_kib, uint64_t rx_kib) {
  if (link >= kMaxNvLinks) return MakeErrorF(ErrorCode::kInvalidArgument, "no NVLink {}", link);
  return Modify(gpu, [&](GpuConfig& c) {
    if (link < c.nvlink_count) {
      c.nvlink[link].tx_kib += tx_kib;
      c.nvlink[link].rx_kib += rx_kib;
    }
  });
}

Status FakeState::AddRetiredPage(uint32_t gpu, int cause, uint64_t address, bool pending) {
  if (cause < 0 || cause > 1) return MakeError(ErrorCode::kInvalidArgument, "bad page retirement cause");
  bool full = false;
  const uint64_t now_us = static_cast<uint64_t>(RealtimeNs() / 1000);
  auto status = Modify(gpu, [&](GpuConfig& c) {
    uint32_t& n = c.retired_count[cause];
    if (n >= kMaxRetiredPages) {
      full = true;
      return;
    }
    c.retired_address[cause][n] = address;
    c.retired_time_us[cause][n] = now_us;
    ++n;
    c.retired_pending = pending ? 1 : 0;
  });
  if (!status) return status;
  if (full)
    return MakeErrorF(ErrorCode::kResourceExhausted, "GPU {} already has {} retired pages", gpu,
                      kMaxRetiredPages);
  return Ok();
}

Status FakeState::SetRecoveryAction(uint32_t gpu, uint32_t action) {
  if (action > nv::NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "unknown recovery action {}", action);
  }
  return Modify(gpu, [&](GpuConfig& c) { c.recovery_action = action; });
}

Status FakeState::SetMigMode(uint32_t gpu, bool enabled) {
  return Modify(gpu, [&](GpuConfig& c) {
    c.mig_mode_current = c.mig_mode_pending =
        enabled ? nv::NVML_DEVICE_MIG_ENABLE : nv::NVML_DEVICE_MIG_DISABLE;
    if (enabled) {
      // One full-GPU instance (7g): enough for queries that need an instance to exist.
      c.mig_instance_count = 1;
      c.mig[0] = MigInstance{0, 0, 7, 0};
    } else {
      c.mig_instance_count = 0;
    }
  });
}

Status FakeState::SetTemperatureOffset(uint32_t gpu, int32_t celsius) {
  return Modify(gpu, [&](GpuConfig& c) { c.temp_offset_c = celsius; });
}

Status FakeState::SetPowerLimit(uint32_t gpu, uint32_t milliwatts) {
  return Modify(gpu, [&](GpuConfig& c) { c.power_limit_mw = std::max(milliwatts, c.idle_power_mw); });
}

Status FakeState::SetForcedClockEventReasons(uint32_t gpu, uint64_t mask) {
  return Modify(gpu, [&](GpuConfig& c) { c.forced_clock_event_reasons = mask; });
}

}  // namespace ithbat::sim
