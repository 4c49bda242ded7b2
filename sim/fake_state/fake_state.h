#pragma once
// The fake hardware's state: ONE versioned, shared-memory layout that every fake library of the
// project (fake libnvidia-ml now; fake libcuda, libnccl and the simulator later) reads and
// writes. It lives in a file mapped MAP_SHARED, so a test, the simulator and the agent (which
// loads the fake through dlopen, in another process) all see the same GPUs.
//
// Layout (all fields fixed-size, little-endian x86-64, no pointers; FakeStateLayout below):
//
//   StateHeader   magic "ITHFSTAT", layout version, total size, GPU count, driver/CUDA version,
//                 created_ns (the "driver load" time: energy counters start there)
//   EventRing     node-wide ring of events (Xid, ECC, ...); head counts every event ever pushed,
//                 each reader (an NVML event set) keeps its own cursor, so every set sees every
//                 event, like the real driver's per-set queues
//   GpuSlot[16]   per GPU:
//     faults      independent atomics, effective on the next call: lost, hang, slow-call µs,
//                 per-NVML-function NOT_SUPPORTED mask (bit i = nvml::kSymbols[i])
//     config      everything static or counter-like (identity, clocks, limits, ECC, remaps, PCIe,
//                 NVLink, processes, MIG), protected by a seqlock (config_seq)
//     timeline    a bounded ring of busy intervals (start/end ns, pid, SM/tensor/DRAM share)
//                 protected by its own seqlock (timeline_seq); utilisation, GPM activity,
//                 power, energy and temperature are DERIVED from it (ComputeDerived), never
//                 written directly
//
// Concurrency: writers serialise on a per-GPU (or per-ring) spinlock that records the writer's
// pid (a lock whose holder died is taken over); they bump the seqlock to odd, store with
// relaxed atomics, bump it to even with release. Readers copy with relaxed atomic loads and
// retry while the sequence is odd or changed, so a reader in another process never sees a torn
// value. Every shared access is atomic, so the protocol is free of data races.
//
// Time: CLOCK_REALTIME nanoseconds everywhere (the project's one clock).
//
// Versioning: any change to these structs must bump kFakeStateLayoutVersion; a mismatching
// file is refused (the fake NVML then fails nvmlInit with LIB_RM_VERSION_MISMATCH).
//
// This header is deliberately free of the project's core library so it can be linked into the
// fake shared libraries without dragging fmt/RE2 into a process that dlopens them.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ithbat::sim {

inline constexpr uint64_t kFakeStateMagic = 0x5441545346485449ULL;  // "ITHFSTAT" little-endian
inline constexpr uint32_t kFakeStateLayoutVersion = 1;
inline constexpr uint32_t kMaxGpus = 16;
inline constexpr uint32_t kMaxProcesses = 64;
inline constexpr uint32_t kMaxNvLinks = 18;
inline constexpr uint32_t kMaxMigInstances = 7;
inline constexpr uint32_t kMaxRetiredPages = 64;
inline constexpr uint32_t kTimelineCapacity = 4096;
inline constexpr uint32_t kEventCapacity = 1024;
inline constexpr uint32_t kNvmlMaskWords = 2;        // 128 bits >= nvml::kSymbols.size()
inline constexpr uint32_t kPcieErrorCounters = 11;   // NVML_FI_DEV_PCIE_COUNT_* 173..183
inline constexpr uint32_t kEccLocations = 8;         // nvmlMemoryLocation_t
inline constexpr uint32_t kNvLinkErrorCounters = 5;  // nvmlNvLinkErrorCounter_t

// Windows over which derived values are computed (documented in sim/README.md).
inline constexpr int64_t kUtilWindowNs = 166'666'667;       // utilisation, instant power: ~1/6 s
inline constexpr int64_t kAverageWindowNs = 1'000'000'000;  // power usage/average, per-process util
inline constexpr int64_t kThermalTauNs = 30'000'000'000;    // temperature time constant

enum class GpuModel : uint32_t { kH100Sxm = 1, kH200Sxm = 2, kA100Sxm = 3 };

// Static facts of a model; copied into GpuConfig when a GPU is created (then editable).
struct ModelSpec {
  GpuModel model;
  const char* name;       // nvmlDeviceGetName
  uint32_t architecture;  // nvmlDeviceArchitecture_t
  uint64_t memory_total_bytes;
  uint64_t memory_reserved_bytes;
  uint32_t max_clock_mhz[4];  // by nvmlClockType_t: graphics, SM, mem, video
  uint32_t idle_sm_clock_mhz;
  uint32_t power_limit_mw;
  uint32_t idle_power_mw;
  uint32_t nvlink_count;
  uint32_t nvlink_version;
  uint32_t nvlink_speed_mbyte_s;
  uint32_t pcie_gen_max;
  uint32_t pcie_width_max;
  uint32_t pci_device_id;  // (device << 16) | 0x10de
  uint32_t gpm_supported;  // Hopper or newer
  int32_t idle_temp_c;
  int32_t temp_rise_at_limit_c;
  int32_t sw_thermal_slowdown_c;
  int32_t hw_thermal_slowdown_c;
};
const ModelSpec* FindModel(GpuModel model);  // nullptr when unknown

// ---------------------------------------------------------------------------------------------
// Shared layout. Every struct is a multiple of 8 bytes and 8-aligned (word-wise atomic copies).

struct BusyInterval {  // one stretch of GPU work
  int64_t start_ns;
  int64_t end_ns;
  uint32_t pid;  // host pid the work belongs to (0 = unknown)
  float sm;      // share of SMs busy, 0..1
  float tensor;  // tensor-pipe activity, 0..1
  float dram;    // DRAM bandwidth share, 0..1
};
static_assert(sizeof(BusyInterval) == 32);

struct NvLinkLink {
  uint32_t active;  // nvmlEnableState_t
  uint32_t version;
  uint32_t speed_mbyte_s;
  uint32_t pad;
  uint64_t errors[kNvLinkErrorCounters];  // by nvmlNvLinkErrorCounter_t
  uint64_t tx_kib;                        // data throughput counters (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_*)
  uint64_t rx_kib;
  char remote_bus_id[32];  // NVSwitch on HGX
};

struct ProcessEntry {
  uint32_t pid;
  uint32_t gpu_instance_id;  // 0xFFFFFFFF when not MIG
  uint32_t compute_instance_id;
  uint32_t pad;
  uint64_t used_bytes;
};

struct MigInstance {
  uint32_t gpu_instance_id;
  uint32_t compute_instance_id;
  uint32_t slices;
  uint32_t pad;
};

struct GpuConfig {
  uint32_t present;
  uint32_t model;  // GpuModel
  uint32_t index;
  uint32_t architecture;
  uint32_t gpm_supported;
  uint32_t recovery_action;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
  char name[96];
  char uuid[96];
  char pci_bus_id[32];  // "00000000:18:00.0"
  char serial[32];
  uint32_t pci_domain, pci_bus, pci_device, pci_device_id, pci_subsystem_id;
  uint32_t pad0;
  uint64_t memory_total_bytes;
  uint64_t memory_reserved_bytes;
  // Clocks and limits.
  uint32_t max_clock_mhz[4];
  uint32_t idle_sm_clock_mhz;
  uint32_t clock_cap_mhz;  // 0 = none; models an admin/app-clock or firmware cap
  uint32_t power_limit_mw;
  uint32_t idle_power_mw;
  uint32_t power_per_activity_mw;  // k in P = idle + k·activity (clamped at the limit)
  int32_t idle_temp_c;
  int32_t temp_rise_at_limit_c;
  int32_t temp_offset_c;      // added to the derived temperature (e.g. a cooling fault)
  int32_t mem_temp_offset_c;  // HBM relative to GPU
  int32_t sw_thermal_slowdown_c;
  int32_t hw_thermal_slowdown_c;
  uint32_t pad1;
  uint64_t forced_clock_event_reasons;  // OR-ed into the derived mask (e.g. HW power brake)
  uint64_t clock_event_ns[3];           // FI 269..271: SW therm, HW therm, HW power brake
  // ECC.
  uint32_t ecc_mode_current, ecc_mode_pending;
  uint64_t ecc[2][2][kEccLocations];  // [nvmlMemoryErrorType_t][nvmlEccCounterType_t][location]
  uint32_t sram_threshold_exceeded;
  uint32_t retired_pending;
  uint32_t retired_count[2];  // by nvmlPageRetirementCause_t
  uint64_t retired_address[2][kMaxRetiredPages];
  uint64_t retired_time_us[2][kMaxRetiredPages];
  uint32_t remap_corr, remap_unc, remap_pending, remap_failure;
  uint32_t remap_histogram[5];  // max, high, partial, low, none
  uint32_t pad2;
  // PCIe.
  uint32_t pcie_gen_cur, pcie_gen_max, pcie_width_cur, pcie_width_max;
  uint32_t pcie_replay, pcie_replay_rollover;
  uint64_t pcie_tx_bytes, pcie_rx_bytes;  // cumulative (FI 197/198; GPM 20/21 rates)
  uint64_t pcie_errors[kPcieErrorCounters];
  uint32_t pcie_l0_to_recovery;
  uint32_t pad3;
  // NVLink.
  uint32_t nvlink_count;
  uint32_t pad4;
  NvLinkLink nvlink[kMaxNvLinks];
  // Compute processes.
  uint32_t process_count;
  uint32_t pad5;
  ProcessEntry processes[kMaxProcesses];
  // MIG.
  uint32_t mig_mode_current, mig_mode_pending;
  uint32_t mig_instance_count;
  uint32_t pad6;
  MigInstance mig[kMaxMigInstances];
};
static_assert(sizeof(GpuConfig) % 8 == 0);

struct GpuFaults {
  uint32_t lost;          // every device call returns GPU_IS_LOST
  uint32_t hang;          // device calls block while set (bounded at 120 s)
  uint32_t slow_call_us;  // device calls sleep this long first
  uint32_t pad;
  uint64_t nvml_not_supported[kNvmlMaskWords];  // bit i: nvml::kSymbols[i] returns NOT_SUPPORTED
};

struct GpuTimeline {
  uint64_t head;  // intervals ever appended; entry n lives at entries[n % kTimelineCapacity]
  // Integrals of entries that fell off the ring (so energy stays a monotonic counter):
  double retired_busy_ns, retired_sm_ns, retired_tensor_ns, retired_dram_ns;
  double retired_dyn_energy_mw_ns;  // dynamic (above idle) energy in mW·ns
  BusyInterval entries[kTimelineCapacity];
};

struct GpuSlot {
  uint32_t writer_lock;   // 0 free, else the writer's pid
  uint32_t config_seq;    // seqlock over config
  uint32_t timeline_seq;  // seqlock over timeline
  uint32_t pad;
  GpuFaults faults;
  GpuConfig config;
  GpuTimeline timeline;
};

struct EventRecord {
  uint64_t seq;  // 2·(n+1) once event n is complete; odd while being written
  uint32_t gpu;
  uint32_t gpu_instance_id;
  uint64_t type;  // nvmlEventType* bit
  uint64_t data;  // Xid number for Xid events
  int64_t time_ns;
  uint32_t compute_instance_id;
  uint32_t pad;
};

struct EventRing {
  uint32_t writer_lock;
  uint32_t pad;
  uint64_t head;  // events ever pushed
  EventRecord entries[kEventCapacity];
};

struct StateHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t gpu_count;
  uint64_t total_size;  // sizeof(FakeStateLayout)
  int64_t created_ns;
  int32_t cuda_driver_version;  // e.g. 12080
  uint32_t pad;
  char driver_version[80];
};

struct FakeStateLayout {
  StateHeader header;
  EventRing events;
  GpuSlot gpus[kMaxGpus];
};

// ---------------------------------------------------------------------------------------------
// Mapping. Owns one mapping of a FakeStateLayout (file-backed MAP_SHARED, or anonymous
// in-process). Movable, not copyable; unmaps on destruction.
class StateMapping {
 public:
  StateMapping() = default;
  ~StateMapping();
  StateMapping(StateMapping&& other) noexcept;
  StateMapping& operator=(StateMapping&& other) noexcept;
  StateMapping(const StateMapping&) = delete;
  StateMapping& operator=(const StateMapping&) = delete;

  // Opens an existing state file read-write and validates magic, version and size. On failure
  // returns false with *error set ("version" in the text for a version mismatch).
  bool Open(const std::string& path, std::string* error);
  // Creates (or truncates) the file and initialises it; `models` gives one GPU per entry
  // (at most kMaxGpus). `seed` makes UUIDs/serials distinct across simulated nodes.
  bool Create(const std::string& path, const GpuModel* models, uint32_t count, const std::string& seed,
              std::string* error);
  // An anonymous, process-private state (the fake's default when no file is given).
  bool CreateAnonymous(const GpuModel* models, uint32_t count, const std::string& seed, std::string* error);

  FakeStateLayout* layout() const { return layout_; }
  bool valid() const { return layout_ != nullptr; }
  // Gives up ownership without unmapping (for a mapping that may still be in use by a blocked
  // call when its owner shuts down).
  void Leak() { layout_ = nullptr; }

 private:
  void Reset();
  FakeStateLayout* layout_ = nullptr;
};

// Fills a freshly zeroed layout (used by Create/CreateAnonymous; exposed for tests).
void InitLayout(FakeStateLayout* layout, const GpuModel* models, uint32_t count, const std::string& seed);
void InitGpuConfig(GpuConfig* config, GpuModel model, uint32_t index, const std::string& seed);

int64_t RealtimeNs();

// ---------------------------------------------------------------------------------------------
// Readers (any process, any thread).

// Consistent copy of a GPU's config. Returns false if no consistent copy could be taken (a
// writer stuck mid-update), which callers treat as an internal error.
bool ReadConfig(const GpuSlot& slot, GpuConfig* out);

// Sums over a window [from_ns, to_ns) of the timeline (interval parts outside are clipped).
struct WindowSums {
  double busy_ns = 0;  // Σ overlap (may exceed the window if intervals overlap)
  double sm_ns = 0;    // Σ overlap·sm
  double tensor_ns = 0;
  double dram_ns = 0;
  double dyn_energy_mw_ns = 0;  // Σ overlap·min(k·activity, limit − idle)
  double demand_mw_ns = 0;      // Σ overlap·k·activity (unclamped: shows power capping)
};
// `pid` != 0 restricts the sums to that pid's intervals.
bool SumWindow(const GpuSlot& slot, const GpuConfig& config, int64_t from_ns, int64_t to_ns, uint32_t pid,
               WindowSums* out);

// Everything NVML reports that is derived from the timeline, at time now_ns.
struct Derived {
  double util_busy = 0;  // 0..1 over kUtilWindowNs
  double util_dram = 0;  // 0..1 over kUtilWindowNs
  double power_instant_mw = 0;
  double power_average_mw = 0;  // over kAverageWindowNs
  bool power_capped = false;
  double temperature_c = 0;
  double memory_temperature_c = 0;
  uint32_t sm_clock_mhz = 0;
  uint64_t clock_event_reasons = 0;
  double energy_mj = 0;  // since header.created_ns
};
bool ComputeDerived(const FakeStateLayout& layout, const GpuSlot& slot, const GpuConfig& config,
                    int64_t now_ns, Derived* out);

// Activity blend that drives power: 0.5·sm + 0.3·tensor + 0.2·dram.
double ActivityOf(double sm, double tensor, double dram);

// Events: reads event n (0-based, < head). Returns false if it was overwritten or is being
// written; *out is then unspecified.
uint64_t EventHead(const EventRing& ring);
bool ReadEvent(const EventRing& ring, uint64_t n, EventRecord* out);

// ---------------------------------------------------------------------------------------------
// Writers (serialised per GPU / per ring by the spinlock; safe from any process).

// Applies `fn(GpuConfig&)` to a GPU's config atomically with respect to readers.
template <class Fn>
void ModifyConfig(GpuSlot& slot, Fn&& fn);

void AppendInterval(GpuSlot& slot, const BusyInterval& interval);
void PushEvent(FakeStateLayout& layout, uint32_t gpu, uint64_t type, uint64_t data, uint32_t gpu_instance_id,
               uint32_t compute_instance_id);

// Fault atomics.
uint32_t LoadU32(const uint32_t* p);
void StoreU32(uint32_t* p, uint32_t v);
uint64_t LoadU64(const uint64_t* p);
void StoreU64(uint64_t* p, uint64_t v);

// Lower-level pieces of ModifyConfig (public for the template).
// LockSlot takes over a lock whose holder died and then repairs odd sequence numbers.
void LockSlot(GpuSlot& slot);
void UnlockSlot(GpuSlot& slot);
void WriteConfigLocked(GpuSlot& slot, const GpuConfig& config);

template <class Fn>
void ModifyConfig(GpuSlot& slot, Fn&& fn) {
  LockSlot(slot);
  GpuConfig copy;
  ReadConfig(slot, &copy);  // we hold the writer lock: always consistent
  fn(copy);
  WriteConfigLocked(slot, copy);
  UnlockSlot(slot);
}

}  // namespace ithbat::sim
