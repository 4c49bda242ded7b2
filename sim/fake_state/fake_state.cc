#include "fake_state/fake_state.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collect/gpu/nvml_abi.h"
#include "fake_state/host_pid.h"

namespace ithbat::sim {
namespace {

namespace nv = ::ithbat::nvml;

// Real-ish figures for the models (names as the driver reports them; limits of SXM boards).
constexpr ModelSpec kModels[] = {
    {GpuModel::kH100Sxm,
     "NVIDIA H100 80GB HBM3",
     nv::NVML_DEVICE_ARCH_HOPPER,
     85520809984ULL,
     536870912ULL,
     {1980, 1980, 2619, 1545},
     345,
     700000,
     70000,
     18,
     4,
     26562,
     5,
     16,
     0x233010de,
     1,
     32,
     40,
     87,
     90},
    {GpuModel::kH200Sxm,
     "NVIDIA H200",
     nv::NVML_DEVICE_ARCH_HOPPER,
     150754820096ULL,
     536870912ULL,
     {1980, 1980, 3201, 1545},
     345,
     700000,
     75000,
     18,
     4,
     26562,
     5,
     16,
     0x233510de,
     1,
     32,
     40,
     87,
     90},
    {GpuModel::kA100Sxm,
     "NVIDIA A100-SXM4-80GB",
     nv::NVML_DEVICE_ARCH_AMPERE,
     85899345920ULL,
     536870912ULL,
     {1410, 1410, 1593, 1290},
     210,
     400000,
     55000,
     12,
     3,
     26562,
     4,
     16,
     0x20b210de,
     0,
     30,
     35,
     85,
     90},
};

// Bus numbers of the eight GPUs on an HGX H100 board, then made-up ones for 9..16.
constexpr uint32_t kBusNumbers[kMaxGpus] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb,
                                            0x1b, 0x2d, 0x3d, 0x60, 0x9d, 0xae, 0xbd, 0xde};

uint64_t Fnv1a(const std::string& s, uint64_t salt) {
  uint64_t h = 0xcbf29ce484222325ULL ^ (salt * 0x9e3779b97f4a7c15ULL);
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

template <class T>
T AtomicLoad(const T* p) {
  T v;
  __atomic_load(p, &v, __ATOMIC_RELAXED);
  return v;
}
template <class T>
void AtomicStore(T* p, T v) {
  __atomic_store(p, &v, __ATOMIC_RELAXED);
}

// Word-wise relaxed atomic copies; the structs are 8-aligned multiples of 8 (the sim libraries
// build with -fno-strict-aliasing for these casts).
void LoadWords(const void* src, void* dst, size_t bytes) {
  const auto* s = static_cast<const uint64_t*>(src);
  auto* d = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < bytes / 8; ++i) d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}
void StoreWords(const void* src, void* dst, size_t bytes) {
  const auto* s = static_cast<const uint64_t*>(src);
  auto* d = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < bytes / 8; ++i) __atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
}

// Returns true when it took the lock over from a dead holder.
bool AcquireLock(uint32_t* lock) {
  const uint32_t me = HostPid();
  int64_t started = 0;
  for (uint64_t spins = 0;; ++spins) {
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(lock, &expected, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return false;
    if (spins < 64) continue;
    sched_yield();
    if (started == 0) started = RealtimeNs();
    // A writer holds the lock for microseconds; after 100 ms check whether it is still alive.
    if (expected != me && RealtimeNs() - started > 100'000'000 &&
        !HostPidAlive(expected)) {
      if (__atomic_compare_exchange_n(lock, &expected, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return true;
    }
  }
}
void ReleaseLock(uint32_t* lock) { __atomic_store_n(lock, 0, __ATOMIC_RELEASE); }

void BeginWrite(uint32_t* seq) {
  __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
void EndWrite(uint32_t* seq) {
  __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

constexpr int kMaxSeqRetries = 1'000'000;

void SpinPause(int tries) {
  if (tries > 16) sched_yield();
}

double Clamp01(float v) {
  if (!(v > 0)) return 0;  // also NaN
  return v > 1 ? 1.0 : v;
}

// One pass over the timeline computing several windows at once (consistent with each other).
struct Window {
  int64_t from_ns;
  int64_t to_ns;
};
struct Scan {
  double retired_dyn_energy_mw_ns = 0;
  double ewma_dyn_mw = 0;  // exponentially weighted dynamic power at `ewma_now`
};

bool ScanTimeline(const GpuSlot& slot, const GpuConfig& config, const Window* windows, int count,
                  uint32_t pid, int64_t ewma_now, WindowSums* sums, Scan* scan) {
  const GpuTimeline& tl = slot.timeline;
  const double k = config.power_per_activity_mw;
  const double headroom =
      std::max<double>(0, static_cast<double>(config.power_limit_mw) - config.idle_power_mw);
  for (int tries = 0; tries < kMaxSeqRetries; ++tries) {
    const uint32_t s1 = __atomic_load_n(&slot.timeline_seq, __ATOMIC_ACQUIRE);
    if (s1 & 1) {
      SpinPause(tries);
      continue;
    }
    for (int w = 0; w < count; ++w) sums[w] = WindowSums{};
    Scan local;
    const uint64_t head = AtomicLoad(&tl.head);
    local.retired_dyn_energy_mw_ns = AtomicLoad(&tl.retired_dyn_energy_mw_ns);
    const uint64_t first = head > kTimelineCapacity ? head - kTimelineCapacity : 0;
    for (uint64_t n = first; n < head; ++n) {
      const BusyInterval& e = tl.entries[n % kTimelineCapacity];
      const int64_t start = AtomicLoad(&e.start_ns);
      const int64_t end = AtomicLoad(&e.end_ns);
      const uint32_t epid = AtomicLoad(&e.pid);
      if (end <= start) continue;
      if (pid != 0 && epid != pid) continue;
      const double sm = Clamp01(AtomicLoad(&e.sm));
      const double tensor = Clamp01(AtomicLoad(&e.tensor));
      const double dram = Clamp01(AtomicLoad(&e.dram));
      const double demand = k * ActivityOf(sm, tensor, dram);
      const double dyn = std::min(demand, headroom);
      for (int w = 0; w < count; ++w) {
        const int64_t lo = std::max(start, windows[w].from_ns);
        const int64_t hi = std::min(end, windows[w].to_ns);
        if (hi <= lo) continue;
        const double ov = static_cast<double>(hi - lo);
        sums[w].busy_ns += ov;
        sums[w].sm_ns += ov * sm;
        sums[w].tensor_ns += ov * tensor;
        sums[w].dram_ns += ov * dram;
        sums[w].dyn_energy_mw_ns += ov * dyn;
        sums[w].demand_mw_ns += ov * demand;
      }
      if (scan != nullptr && start < ewma_now) {
        // Continuous EWMA: ∫ dyn·(1/τ)·e^{-(now-t)/τ} dt over the interval's past part.
        const double tau = static_cast<double>(kThermalTauNs);
        const double a = static_cast<double>(ewma_now - std::min(end, ewma_now));
        const double b = static_cast<double>(ewma_now - start);
        local.ewma_dyn_mw += dyn * (std::exp(-a / tau) - std::exp(-b / tau));
      }
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&slot.timeline_seq, __ATOMIC_RELAXED) == s1) {
      if (scan != nullptr) *scan = local;
      return true;
    }
    SpinPause(tries);
  }
  return false;
}

}  // namespace

const ModelSpec* FindModel(GpuModel model) {
  for (const ModelSpec& m : kModels) {
    if (m.model == model) return &m;
  }
  return nullptr;
}

int64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double ActivityOf(double sm, double tensor, double dram) { return 0.5 * sm + 0.3 * tensor + 0.2 * dram; }

uint32_t LoadU32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreU32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
uint64_t LoadU64(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreU64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// ---------------------------------------------------------------------------------------------
// Initialisation

void InitGpuConfig(GpuConfig* c, GpuModel model, uint32_t index, const std::string& seed) {
  const ModelSpec* spec = FindModel(model);
  if (spec == nullptr) spec = &kModels[0];
  std::memset(c, 0, sizeof(*c));
  c->present = 1;
  c->model = static_cast<uint32_t>(spec->model);
  c->index = index;
  c->architecture = spec->architecture;
  c->gpm_supported = spec->gpm_supported;
  c->recovery_action = nv::NVML_GPU_RECOVERY_ACTION_NONE;
  std::snprintf(c->name, sizeof(c->name), "%s", spec->name);
  const std::string key = seed + "/" + std::to_string(index);
  const uint64_t h1 = Fnv1a(key, 1);
  const uint64_t h2 = Fnv1a(key, 2);
  std::snprintf(c->uuid, sizeof(c->uuid), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h1 >> 32),
                static_cast<unsigned>((h1 >> 16) & 0xffff), static_cast<unsigned>(h1 & 0xffff),
                static_cast<unsigned>(h2 >> 48), static_cast<unsigned long long>(h2 & 0xffffffffffffULL));
  std::snprintf(c->serial, sizeof(c->serial), "165%010llu",
                static_cast<unsigned long long>(Fnv1a(key, 3) % 10'000'000'000ULL));
  c->pci_domain = 0;
  c->pci_bus = kBusNumbers[index % kMaxGpus];
  c->pci_device = 0;
  c->pci_device_id = spec->pci_device_id;
  c->pci_subsystem_id = 0x16c110de;
  std::snprintf(c->pci_bus_id, sizeof(c->pci_bus_id), "%08x:%02x:%02x.0", c->pci_domain, c->pci_bus,
                c->pci_device);
  c->memory_total_bytes = spec->memory_total_bytes;
  c->memory_reserved_bytes = spec->memory_reserved_bytes;
  for (int i = 0; i < 4; ++i) c->max_clock_mhz[i] = spec->max_clock_mhz[i];
  c->idle_sm_clock_mhz = spec->idle_sm_clock_mhz;
  c->power_limit_mw = spec->power_limit_mw;
  c->idle_power_mw = spec->idle_power_mw;
  // Full activity asks for 15 % more than the limit allows, so heavy work power-caps.
  c->power_per_activity_mw = static_cast<uint32_t>((spec->power_limit_mw - spec->idle_power_mw) * 1.15);
  c->idle_temp_c = spec->idle_temp_c;
  c->temp_rise_at_limit_c = spec->temp_rise_at_limit_c;
  c->mem_temp_offset_c = 3;
  c->sw_thermal_slowdown_c = spec->sw_thermal_slowdown_c;
  c->hw_thermal_slowdown_c = spec->hw_thermal_slowdown_c;
  c->ecc_mode_current = c->ecc_mode_pending = nv::NVML_FEATURE_ENABLED;
  c->remap_histogram[0] = 2560;  // every bank at maximum spare availability
  c->pcie_gen_cur = c->pcie_gen_max = spec->pcie_gen_max;
  c->pcie_width_cur = c->pcie_width_max = spec->pcie_width_max;
  c->nvlink_count = std::min(spec->nvlink_count, kMaxNvLinks);
  for (uint32_t l = 0; l < c->nvlink_count; ++l) {
    NvLinkLink& link = c->nvlink[l];
    link.active = nv::NVML_FEATURE_ENABLED;
    link.version = spec->nvlink_version;
    link.speed_mbyte_s = spec->nvlink_speed_mbyte_s;
    // HGX: links spread over four NVSwitches.
    std::snprintf(link.remote_bus_id, sizeof(link.remote_bus_id), "00000000:%02x:00.0", 0x05 + (l % 4));
  }
  c->mig_mode_current = c->mig_mode_pending = nv::NVML_DEVICE_MIG_DISABLE;
}

void InitLayout(FakeStateLayout* layout, const GpuModel* models, uint32_t count, const std::string& seed) {
  count = std::min(count, kMaxGpus);
  StateHeader& h = layout->header;
  h.layout_version = kFakeStateLayoutVersion;
  h.gpu_count = count;
  h.total_size = sizeof(FakeStateLayout);
  h.created_ns = RealtimeNs();
  h.cuda_driver_version = 12080;
  std::snprintf(h.driver_version, sizeof(h.driver_version), "%s", "570.124.06");
  for (uint32_t i = 0; i < count; ++i) InitGpuConfig(&layout->gpus[i].config, models[i], i, seed);
  // Magic last: an opener that sees it sees a complete layout.
  __atomic_store_n(&h.magic, kFakeStateMagic, __ATOMIC_RELEASE);
}

// ---------------------------------------------------------------------------------------------
// Mapping

StateMapping::~StateMapping() { Reset(); }

StateMapping::StateMapping(StateMapping&& other) noexcept : layout_(other.layout_) {
  other.layout_ = nullptr;
}

StateMapping& StateMapping::operator=(StateMapping&& other) noexcept {
  if (this != &other) {
    Reset();
    layout_ = other.layout_;
    other.layout_ = nullptr;
  }
  return *this;
}

void StateMapping::Reset() {
  if (layout_ != nullptr) munmap(layout_, sizeof(FakeStateLayout));
  layout_ = nullptr;
}

bool StateMapping::Open(const std::string& path, std::string* error) {
  Reset();
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *error = "open " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(StateHeader))) {
    ::close(fd);
    *error = "fake state " + path + " is too small to hold a header";
    return false;
  }
  StateHeader header{};
  if (::pread(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    ::close(fd);
    *error = "read " + path + ": short read";
    return false;
  }
  if (header.magic != kFakeStateMagic) {
    ::close(fd);
    *error = "fake state " + path + ": bad magic";
    return false;
  }
  if (header.layout_version != kFakeStateLayoutVersion || header.total_size != sizeof(FakeStateLayout) ||
      st.st_size != static_cast<off_t>(sizeof(FakeStateLayout))) {
    ::close(fd);
    *error = "fake state " + path + ": layout version " + std::to_string(header.layout_version) + " (size " +
             std::to_string(header.total_size) + "), this build expects version " +
             std::to_string(kFakeStateLayoutVersion) + " (size " + std::to_string(sizeof(FakeStateLayout)) +
             ")";
    return false;
  }
  void* p = mmap(nullptr, sizeof(FakeStateLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *error = "mmap " + path + ": " + std::strerror(errno);
    return false;
  }
  layout_ = static_cast<FakeStateLayout*>(p);
  return true;
}

bool StateMapping::Create(const std::string& path, const GpuModel* models, uint32_t count,
                          const std::string& seed, std::string* error) {
  Reset();
  if (count > kMaxGpus) {
    *error = "at most " + std::to_string(kMaxGpus) + " GPUs";
    return false;
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "create " + path + ": " + std::strerror(errno);
    return false;
  }
  if (ftruncate(fd, sizeof(FakeStateLayout)) != 0) {
    *error = "ftruncate " + path + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  void* p = mmap(nullptr, sizeof(FakeStateLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *error = "mmap " + path + ": " + std::strerror(errno);
    return false;
  }
  layout_ = static_cast<FakeStateLayout*>(p);
  InitLayout(layout_, models, count, seed);
  return true;
}

bool StateMapping::CreateAnonymous(const GpuModel* models, uint32_t count, const std::string& seed,
                                   std::string* error) {
  Reset();
  if (count > kMaxGpus) {
    *error = "at most " + std::to_string(kMaxGpus) + " GPUs";
    return false;
  }
  void* p =
      mmap(nullptr, sizeof(FakeStateLayout), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    *error = std::string("mmap anonymous: ") + std::strerror(errno);
    return false;
  }
  layout_ = static_cast<FakeStateLayout*>(p);
  InitLayout(layout_, models, count, seed);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Readers

bool ReadConfig(const GpuSlot& slot, GpuConfig* out) {
  for (int tries = 0; tries < kMaxSeqRetries; ++tries) {
    const uint32_t s1 = __atomic_load_n(&slot.config_seq, __ATOMIC_ACQUIRE);
    if (s1 & 1) {
      SpinPause(tries);
      continue;
    }
    LoadWords(&slot.config, out, sizeof(GpuConfig));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&slot.config_seq, __ATOMIC_RELAXED) == s1) return true;
    SpinPause(tries);
  }
  return false;
}

bool SumWindow(const GpuSlot& slot, const GpuConfig& config, int64_t from_ns, int64_t to_ns, uint32_t pid,
               WindowSums* out) {
  const Window w{from_ns, to_ns};
  return ScanTimeline(slot, config, &w, 1, pid, 0, out, nullptr);
}

bool ComputeDerived(const FakeStateLayout& layout, const GpuSlot& slot, const GpuConfig& c, int64_t now_ns,
                    Derived* out) {
  const Window windows[3] = {
      {now_ns - kUtilWindowNs, now_ns},
      {now_ns - kAverageWindowNs, now_ns},
      {std::numeric_limits<int64_t>::min(), now_ns},
  };
  WindowSums sums[3];
  Scan scan;
  if (!ScanTimeline(slot, c, windows, 3, 0, now_ns, sums, &scan)) return false;
  const double idle = c.idle_power_mw;
  const double headroom = std::max(0.0, static_cast<double>(c.power_limit_mw) - idle);
  const double wu = static_cast<double>(kUtilWindowNs);
  const double wa = static_cast<double>(kAverageWindowNs);
  Derived d;
  d.util_busy = std::min(1.0, sums[0].busy_ns / wu);
  d.util_dram = std::min(1.0, sums[0].dram_ns / wu);
  d.power_instant_mw = idle + std::min(headroom, sums[0].dyn_energy_mw_ns / wu);
  d.power_average_mw = idle + std::min(headroom, sums[1].dyn_energy_mw_ns / wa);
  // Capped when some work in the window asked for more than the limit allows.
  d.power_capped = sums[0].demand_mw_ns > sums[0].dyn_energy_mw_ns + 1e-3 * wu;
  const double heat = headroom > 0 ? std::min(1.0, scan.ewma_dyn_mw / headroom) : 0.0;
  d.temperature_c = c.idle_temp_c + c.temp_rise_at_limit_c * heat + c.temp_offset_c;
  d.memory_temperature_c = d.temperature_c + c.mem_temp_offset_c;

  uint64_t reasons = c.forced_clock_event_reasons;
  if (d.util_busy <= 0) reasons |= nv::nvmlClocksEventReasonGpuIdle;
  if (d.power_capped) reasons |= nv::nvmlClocksEventReasonSwPowerCap;
  if (d.temperature_c >= c.sw_thermal_slowdown_c) reasons |= nv::nvmlClocksEventReasonSwThermalSlowdown;
  if (d.temperature_c >= c.hw_thermal_slowdown_c) {
    reasons |= nv::nvmlClocksThrottleReasonHwThermalSlowdown | nv::nvmlClocksThrottleReasonHwSlowdown;
  }
  d.clock_event_reasons = reasons;

  double clock = d.util_busy > 0 ? c.max_clock_mhz[nv::NVML_CLOCK_SM] : c.idle_sm_clock_mhz;
  if (d.util_busy > 0) {
    if (d.power_capped && sums[0].demand_mw_ns > 0) {
      clock *= std::max(0.5, sums[0].dyn_energy_mw_ns / sums[0].demand_mw_ns);
    }
    if (reasons & nv::nvmlClocksEventReasonSwThermalSlowdown) clock *= 0.85;
    if (reasons & (nv::nvmlClocksThrottleReasonHwSlowdown | nv::nvmlClocksThrottleReasonHwThermalSlowdown |
                   nv::nvmlClocksThrottleReasonHwPowerBrakeSlowdown)) {
      clock *= 0.5;
    }
  }
  if (c.clock_cap_mhz != 0) clock = std::min(clock, static_cast<double>(c.clock_cap_mhz));
  d.sm_clock_mhz = static_cast<uint32_t>(std::lround(clock));

  const int64_t since = std::max<int64_t>(0, now_ns - layout.header.created_ns);
  d.energy_mj =
      (idle * static_cast<double>(since) + scan.retired_dyn_energy_mw_ns + sums[2].dyn_energy_mw_ns) / 1e9;
  *out = d;
  return true;
}

uint64_t EventHead(const EventRing& ring) { return __atomic_load_n(&ring.head, __ATOMIC_ACQUIRE); }

bool ReadEvent(const EventRing& ring, uint64_t n, EventRecord* out) {
  const EventRecord& e = ring.entries[n % kEventCapacity];
  const uint64_t expected = 2 * (n + 1);
  if (__atomic_load_n(&e.seq, __ATOMIC_ACQUIRE) != expected) return false;
  LoadWords(&e, out, sizeof(EventRecord));
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return __atomic_load_n(&e.seq, __ATOMIC_RELAXED) == expected;
}

// ---------------------------------------------------------------------------------------------
// Writers

void LockSlot(GpuSlot& slot) {
  if (AcquireLock(&slot.writer_lock)) {
    // The previous writer died mid-update: close its sequence so readers stop waiting.
    if (__atomic_load_n(&slot.config_seq, __ATOMIC_RELAXED) & 1) EndWrite(&slot.config_seq);
    if (__atomic_load_n(&slot.timeline_seq, __ATOMIC_RELAXED) & 1) EndWrite(&slot.timeline_seq);
  }
}

void UnlockSlot(GpuSlot& slot) { ReleaseLock(&slot.writer_lock); }

void WriteConfigLocked(GpuSlot& slot, const GpuConfig& config) {
  BeginWrite(&slot.config_seq);
  StoreWords(&config, &slot.config, sizeof(GpuConfig));
  EndWrite(&slot.config_seq);
}

void AppendInterval(GpuSlot& slot, const BusyInterval& in) {
  LockSlot(slot);
  GpuConfig c;
  ReadConfig(slot, &c);
  GpuTimeline& tl = slot.timeline;
  const uint64_t head = AtomicLoad(&tl.head);
  BusyInterval& e = tl.entries[head % kTimelineCapacity];
  BeginWrite(&slot.timeline_seq);
  if (head >= kTimelineCapacity) {
    // The oldest entry leaves the ring: keep its integrals so energy stays monotonic.
    const int64_t start = AtomicLoad(&e.start_ns);
    const int64_t end = AtomicLoad(&e.end_ns);
    if (end > start) {
      const double len = static_cast<double>(end - start);
      const double sm = Clamp01(AtomicLoad(&e.sm));
      const double tensor = Clamp01(AtomicLoad(&e.tensor));
      const double dram = Clamp01(AtomicLoad(&e.dram));
      const double headroom = std::max(0.0, static_cast<double>(c.power_limit_mw) - c.idle_power_mw);
      const double dyn = std::min(headroom, c.power_per_activity_mw * ActivityOf(sm, tensor, dram));
      AtomicStore(&tl.retired_busy_ns, AtomicLoad(&tl.retired_busy_ns) + len);
      AtomicStore(&tl.retired_sm_ns, AtomicLoad(&tl.retired_sm_ns) + len * sm);
      AtomicStore(&tl.retired_tensor_ns, AtomicLoad(&tl.retired_tensor_ns) + len * tensor);
      AtomicStore(&tl.retired_dram_ns, AtomicLoad(&tl.retired_dram_ns) + len * dram);
      AtomicStore(&tl.retired_dyn_energy_mw_ns, AtomicLoad(&tl.retired_dyn_energy_mw_ns) + len * dyn);
    }
  }
  AtomicStore(&e.start_ns, in.start_ns);
  AtomicStore(&e.end_ns, in.end_ns);
  AtomicStore(&e.pid, in.pid);
  AtomicStore(&e.sm, in.sm);
  AtomicStore(&e.tensor, in.tensor);
  AtomicStore(&e.dram, in.dram);
  AtomicStore(&tl.head, head + 1);
  EndWrite(&slot.timeline_seq);
  UnlockSlot(slot);
}

void PushEvent(FakeStateLayout& layout, uint32_t gpu, uint64_t type, uint64_t data, uint32_t gpu_instance_id,
               uint32_t compute_instance_id) {
  EventRing& ring = layout.events;
  AcquireLock(&ring.writer_lock);
  const uint64_t n = __atomic_load_n(&ring.head, __ATOMIC_RELAXED);
  EventRecord& e = ring.entries[n % kEventCapacity];
  __atomic_store_n(&e.seq, 2 * n + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  AtomicStore(&e.gpu, gpu);
  AtomicStore(&e.gpu_instance_id, gpu_instance_id);
  AtomicStore(&e.type, type);
  AtomicStore(&e.data, data);
  AtomicStore(&e.time_ns, RealtimeNs());
  AtomicStore(&e.compute_instance_id, compute_instance_id);
  __atomic_store_n(&e.seq, 2 * (n + 1), __ATOMIC_RELEASE);
  __atomic_store_n(&ring.head, n + 1, __ATOMIC_RELEASE);
  ReleaseLock(&ring.writer_lock);
}

}  // namespace ithbat::sim
