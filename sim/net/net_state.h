#pragma once
// The simulated fabric's shared state: one file per simulated world (<root>/net.state), mapped
// MAP_SHARED by the simulator (which sets link health and congestion from the scenario's
// timeline and tenants), by every rank's fake libnccl (which times inter-node transfers from
// it and adds the bytes it moves) and by the node-state writer (which turns the counters into
// /sys/class/infiniband/<nic>/ports/<port>/counters files for the agent).
//
// One slot per NIC of the world. A rank's NIC is the one its GPU uses (the scenario's GPU↔NIC
// affinity); the simulator passes the slot index to the rank (ITHBAT_SIM_NIC) with the file
// (ITHBAT_SIM_NET) and the rank's node index (ITHBAT_SIM_NODE_ID).
//
// Header-only and free of the project's libraries, so the fake libnccl can include it. Every
// field that changes after creation is read and written with __atomic builtins (relaxed: each
// is an independent counter or setting; nobody needs a consistent snapshot of several).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ithbat::sim::net {

inline constexpr uint64_t kNetStateMagic = 0x54454e4854495448ULL;  // "HTIHNET T"-ish tag
inline constexpr uint32_t kNetStateVersion = 1;
inline constexpr uint32_t kMaxNics = 256;
inline constexpr uint64_t kFullPpm = 1'000'000;

struct NicSlot {
  // Fixed at creation.
  char node[64];      // node name (scenario nodes[].name)
  char name[32];      // NIC name, e.g. mlx5_0
  uint32_t node_id;   // index of the node in the scenario
  uint32_t port;      // port number (1-based, as sysfs)
  uint64_t rate_bps;  // line rate, bits per second
  // Set by the simulator (atomics).
  uint64_t health_ppm;      // share of the line rate the link still carries: 1e6 healthy, <1e6
                            // degraded (downtrained, errors), 0 down
  uint64_t congestion_ppm;  // share of the remaining rate taken by other traffic on the fabric
                            // (another job through the same switch): the job gets the rest and
                            // its sends wait for credits
  uint64_t symbol_errors;   // cumulative, raised by the simulator (background rate + events)
  uint64_t link_downed;     // cumulative count of link-down transitions
  // Counted by the fake libnccl (atomics; bytes of inter-node transfers through this NIC).
  uint64_t tx_bytes;
  uint64_t rx_bytes;
  uint64_t tx_wait_ns;      // time this NIC's sends were held by congestion or degradation
                            // beyond the healthy transfer time (the source of port_xmit_wait)
  uint64_t other_tx_bytes;  // bytes other tenants sent through this NIC (simulator)
  uint64_t reserved[4];
};
static_assert(sizeof(NicSlot) % 8 == 0);

struct NetStateLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t nic_count;
  uint64_t total_size;
  NicSlot nics[kMaxNics];
};

inline uint64_t Load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void Store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
inline void Add(uint64_t* p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

// The bandwidth (bytes/s) a transfer through `nic` gets now: line rate × health × (1 − congestion).
inline double EffectiveBytesPerSecond(const NicSlot& nic) {
  const double health = static_cast<double>(Load(&nic.health_ppm)) / kFullPpm;
  const double congestion = static_cast<double>(Load(&nic.congestion_ppm)) / kFullPpm;
  const double share = health * (congestion >= 1.0 ? 0.0 : 1.0 - congestion);
  return static_cast<double>(nic.rate_bps) / 8.0 * share;
}

// Maps a net state file. Open() validates magic, version and size; Create() makes a new file
// with `count` NICs (health 1e6, congestion 0). Unmaps on destruction. Not copyable.
class NetStateMapping {
 public:
  NetStateMapping() = default;
  ~NetStateMapping() { Reset(); }
  NetStateMapping(const NetStateMapping&) = delete;
  NetStateMapping& operator=(const NetStateMapping&) = delete;

  // Returns nullptr-free state or false with *why set (a static string).
  bool Open(const char* path, const char** why) {
    Reset();
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return Fail(why, "cannot open the net state file");
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(NetStateLayout)) {
      ::close(fd);
      return Fail(why, "net state file too small");
    }
    void* p = mmap(nullptr, sizeof(NetStateLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Fail(why, "cannot map the net state file");
    layout_ = static_cast<NetStateLayout*>(p);
    if (layout_->magic != kNetStateMagic || layout_->version != kNetStateVersion ||
        layout_->total_size != sizeof(NetStateLayout) || layout_->nic_count > kMaxNics) {
      Reset();
      return Fail(why, "net state file of another layout version");
    }
    return true;
  }

  bool Create(const char* path, const NicSlot* nics, uint32_t count, const char** why) {
    Reset();
    if (count > kMaxNics) return Fail(why, "too many NICs");
    const int fd = ::open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Fail(why, "cannot create the net state file");
    if (ftruncate(fd, sizeof(NetStateLayout)) != 0) {
      ::close(fd);
      return Fail(why, "cannot size the net state file");
    }
    void* p = mmap(nullptr, sizeof(NetStateLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Fail(why, "cannot map the net state file");
    layout_ = static_cast<NetStateLayout*>(p);
    std::memset(layout_, 0, sizeof(NetStateLayout));
    for (uint32_t i = 0; i < count; ++i) {
      layout_->nics[i] = nics[i];
      layout_->nics[i].health_ppm = kFullPpm;
    }
    layout_->nic_count = count;
    layout_->total_size = sizeof(NetStateLayout);
    layout_->version = kNetStateVersion;
    __atomic_store_n(&layout_->magic, kNetStateMagic, __ATOMIC_RELEASE);
    return true;
  }

  NetStateLayout* layout() const { return layout_; }
  NicSlot* nic(uint32_t i) const { return layout_ != nullptr && i < layout_->nic_count ? &layout_->nics[i] : nullptr; }

 private:
  static bool Fail(const char** why, const char* text) {
    if (why != nullptr) *why = text;
    return false;
  }
  void Reset() {
    if (layout_ != nullptr) munmap(layout_, sizeof(NetStateLayout));
    layout_ = nullptr;
  }
  NetStateLayout* layout_ = nullptr;
};

}  // namespace ithbat::sim::net
