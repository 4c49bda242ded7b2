// A fake libnccl.so.2: the NCCL API of nccl_abi.h over the fake libcuda's streams.
//
// Communicators span rank processes through one shared-memory file per unique id (the id's
// random bytes name it: $ITHBAT_FAKE_NCCL_SHM_DIR, default /dev/shm, "ithbat-nccl-<hex>"). A
// collective is enqueued on the caller's stream as external work of the fake libcuda
// (ithbat_fake_cuda_enqueue_external, looked up with dlsym: a real libcuda lacks it and then
// every collective fails with ncclUnhandledCudaError). The call returns at once, as NCCL's
// does; the work item completes, on each rank, only when every rank's stream has reached the
// same per-communicator sequence number, plus latency + bus bytes / bandwidth. So a rank that
// stops calling (or is slow) holds the others' streams, and their host blocks only where it
// synchronises the stream — the behaviour the probes and the straggler logic must see.
//
// Point-to-point: the n-th send from a to b pairs with the n-th receive on b from a. Ops
// between ncclGroupStart/End are issued at the outermost ncclGroupEnd as one fused item per
// (communicator, stream), so a send and a receive to the same peer in a group cannot deadlock.
//
// The shared file holds, per rank, a ring of (seq, arrival time) stamps; writes are atomic
// stores (stamp time, then seq with release), reads atomic loads, so processes never race.
// The last rank to destroy its communicator removes the file; a crashed job leaves it behind.
//
// The network (sim/net/net_state.h): with ITHBAT_SIM_NET (the world's net state file),
// ITHBAT_SIM_NIC (this rank's NIC slot in it) and ITHBAT_SIM_NODE_ID (its node) set, each rank
// publishes its node and NIC in the communicator's file at init. A collective of a communicator
// whose ranks sit on more than one node then crosses the fabric: it takes latency + bus bytes /
// the smallest EffectiveBytesPerSecond over the ranks' NICs, sampled when it starts (every peer
// arrived); a send/recv between two nodes the same over the pair's two NICs. While a NIC it
// needs carries nothing (health 0: link down; or fully congested) the item keeps waiting — the
// rank's stream, and so its peers, hang until the link comes back. Each rank adds its own bus
// bytes (collectives: tx and rx; send: tx; recv: rx) to its NIC's counters, and to tx_wait_ns
// the time its transfer took beyond the healthy one (health 1, congestion 0). Ranks on one node,
// or without the variables: the NVLink model below, exactly as before.
//
// Profiler plugins (profiler_plugin.h): like NCCL, the first communicator init loads
// NCCL_PROFILER_PLUGIN (a name -> libnccl-profiler-<name>.so, or a path; unset -> libnccl-profiler.so
// if there is one; "none" -> no plugin), takes the newest of ncclProfiler_v6/_v5/_v4, calls its
// init per communicator and sends Coll/P2p events at enqueue and KernelCh events whose pTimers are
// the simulated stream's start and end of the work item (CLOCK_REALTIME ns, as the GPU global
// timer). A rank that waits for a late peer thus shows a longer kernel, as on a GPU.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_nccl/nccl_abi.h"
#include "fake_nccl/profiler_plugin.h"
#include "fake_state/host_pid.h"
#include "net/net_state.h"
// One definition with the BPF program (bpf/ is not on this target's include path).
#include "nccl_comm_hash.h"
static_assert(NCCL_UNIQUE_ID_BYTES == ITHBAT_NCCL_UNIQUE_ID_BYTES);

namespace ithbat::sim::nccl {
namespace {

constexpr uint64_t kShmMagic = 0x4c4343444e485449ULL;  // "ITHNDCCL"-ish tag
constexpr uint32_t kShmVersion = 2;                    // 2: ranks publish node and NIC (network model)
constexpr uint64_t kIdMagic = 0x6469636e63636e69ULL;   // leading bytes of our unique ids
constexpr int kCollRing = 256;
constexpr int kP2pRing = 8;
constexpr uint32_t kCommMagic = 0x4e43434d;

struct Stamp {
  uint64_t seq_plus1;  // 0 = empty
  int64_t ns;
};

struct RankSlot {
  uint32_t pid;
  uint32_t joined;
  int32_t cuda_dev;
  uint32_t destroyed;
  uint32_t node_plus1;  // ITHBAT_SIM_NODE_ID + 1 (0: not in a simulated world)
  uint32_t nic_plus1;   // ITHBAT_SIM_NIC + 1
  uint32_t ready;       // 1 once the fields above are written (bootstrap waits for it)
  uint32_t pad;
  Stamp coll[kCollRing];
};

struct PairSlot {
  Stamp stamps[kP2pRing];
};

struct CommShared {
  uint64_t magic;
  uint32_t version;
  uint32_t nranks;
  uint32_t refs;
  uint32_t aborted;
  RankSlot ranks[kMaxRanks];
  PairSlot send[kMaxRanks][kMaxRanks];  // [from][to]
  PairSlot recv[kMaxRanks][kMaxRanks];  // [at][from]
};

template <class T>
T Load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <class T>
void Store(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return (end != v && d >= 0 && d < 1e15) ? d : fallback;
}

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

thread_local std::string t_last_error;

ncclResult_t Fail(ncclResult_t r, const std::string& why) {
  t_last_error = why;
  return r;
}

// The fake libcuda's entry points (absent from a real driver).
struct CudaLink {
  ithbat_fake_cuda_enqueue_external_fn enqueue = nullptr;
  cuCtxGetDevice_fn ctx_get_device = nullptr;
};

const CudaLink& Cuda() {
  static const CudaLink link = [] {
    CudaLink l;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      l.enqueue = reinterpret_cast<ithbat_fake_cuda_enqueue_external_fn>(
          dlsym(h, "ithbat_fake_cuda_enqueue_external"));
      l.ctx_get_device = reinterpret_cast<cuCtxGetDevice_fn>(dlsym(h, "cuCtxGetDevice"));
    }
    if (l.enqueue == nullptr) {
      std::fprintf(
          stderr,
          "fake libnccl: the loaded libcuda.so.1 is not the fake (no ithbat_fake_cuda_enqueue_external)\n");
    }
    return l;
  }();
  return link;
}

// This process's place in the simulated fabric (from the environment, read once).
struct NetLink {
  net::NetStateMapping* map = nullptr;  // leaked: work items may use it while the process exits
  uint32_t nic = 0;
  uint32_t node = 0;
};

bool EnvIndex(const char* name, uint32_t* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (end == v || *end != '\0' || x >= 1'000'000) return false;
  *out = static_cast<uint32_t>(x);
  return true;
}

const NetLink& Net() {
  static const NetLink link = [] {
    NetLink l;
    const char* path = std::getenv("ITHBAT_SIM_NET");
    if (path == nullptr || *path == '\0') return l;
    if (!EnvIndex("ITHBAT_SIM_NIC", &l.nic) || !EnvIndex("ITHBAT_SIM_NODE_ID", &l.node)) {
      std::fprintf(stderr,
                   "fake libnccl: ITHBAT_SIM_NET without a valid ITHBAT_SIM_NIC/ITHBAT_SIM_NODE_ID: "
                   "no network model\n");
      return l;
    }
    auto* map = new net::NetStateMapping();
    const char* why = "";
    if (!map->Open(path, &why) || map->nic(l.nic) == nullptr) {
      std::fprintf(stderr, "fake libnccl: %s: %s: no network model\n", path,
                   map->layout() == nullptr ? why : "ITHBAT_SIM_NIC is not a slot of the file");
      delete map;
      return l;
    }
    l.map = map;
    return l;
  }();
  return link;
}

std::string ShmPath(const ncclUniqueId& id) {
  const char* dir = std::getenv("ITHBAT_FAKE_NCCL_SHM_DIR");
  std::string path = (dir != nullptr && *dir != '\0') ? dir : "/dev/shm";
  path += "/ithbat-nccl-";
  static const char* kHex = "0123456789abcdef";
  for (int i = 8; i < 24; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    path += kHex[b >> 4];
    path += kHex[b & 15];
  }
  return path;
}

}  // namespace
}  // namespace ithbat::sim::nccl

// NOLINTBEGIN(readability-identifier-naming)
struct ncclComm {
  uint32_t magic = ithbat::sim::nccl::kCommMagic;
  ithbat::sim::nccl::CommShared* shm = nullptr;
  std::string path;
  int nranks = 0;
  int rank = 0;
  int cuda_dev = 0;
  bool destroyed = false;
  std::string name;
  uint64_t coll_seq = 0;                                   // next collective's sequence number
  uint64_t send_count[ithbat::sim::nccl::kMaxRanks] = {};  // sends issued to each peer
  uint64_t recv_count[ithbat::sim::nccl::kMaxRanks] = {};  // receives issued from each peer
  std::atomic<int> pending{0};                             // work items not yet completed
  void* prof_ctx = nullptr;                                // the profiler plugin's context (nullptr: none)
  uint64_t comm_hash = 0;                                  // what the plugin is told as commId
  uint64_t prof_seq[ithbat::sim::nccl::kProfFuncs] = {};   // NCCL numbers collectives per function
  // Network model (set after bootstrap): every rank's node and NIC slot, when every rank
  // published one and this process has the net state; empty otherwise (NVLink model only).
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> nics;
  bool spans_nodes = false;  // collectives cross the fabric
};
// NOLINTEND(readability-identifier-naming)

namespace ithbat::sim::nccl {
namespace {

enum class OpKind { kColl, kSend, kRecv };
struct Op {
  OpKind kind;
  int peer;
  uint64_t seq;
  ProfOp prof;            // what the profiler plugin is told (func, count, type, root/peer)
  double bus_bytes = 0;   // this rank's bytes on the wire (nccl-tests' bus bytes)
  int64_t nvlink_ns = 0;  // its time over NVLink (the model when it stays on one node)
};

// One fused work item: the ops of one call (or one group) on one communicator and stream.
struct Work {
  ncclComm* comm;
  std::vector<Op> ops;
  int64_t duration_ns = 0;
  bool link_was_down = false;  // a poll found a NIC it needs down: ready no earlier than it is back
};

double LatencyNs() {
  static const double latency = EnvDouble("ITHBAT_FAKE_NCCL_LATENCY_NS", 10000);
  return latency;
}

// Time on NVLink: nccl-tests' bus bytes (§4.3) over ITHBAT_FAKE_NCCL_GBPS, plus a latency.
int64_t OpNs(double bus_bytes) {
  static const double gbps = EnvDouble("ITHBAT_FAKE_NCCL_GBPS", 200);
  return static_cast<int64_t>(LatencyNs() + (gbps > 0 ? bus_bytes / gbps : 0));
}

// Whether `op` goes through the NICs: a collective of a communicator on several nodes, or a
// send/recv whose peer is on another node.
bool CrossesNodes(const ncclComm* c, const Op& op) {
  if (c->nics.empty()) return false;
  if (op.kind == OpKind::kColl) return c->spans_nodes;
  return c->nodes[static_cast<size_t>(op.peer)] != c->nodes[static_cast<size_t>(c->rank)];
}

// Bytes/s the transfer gets: the slowest NIC it uses (every rank's for a collective — a ring
// runs at its slowest link —, the pair's for send/recv); `healthy`: at line rate.
double LinkBytesPerSecond(const ncclComm* c, const Op& op, bool healthy) {
  const net::NetStateMapping* map = Net().map;
  double bw = -1;
  auto use = [&](uint32_t slot) {
    const net::NicSlot* nic = map->nic(slot);
    if (nic == nullptr) return;
    const double b = healthy ? static_cast<double>(nic->rate_bps) / 8.0 : net::EffectiveBytesPerSecond(*nic);
    bw = bw < 0 ? b : std::min(bw, b);
  };
  if (op.kind == OpKind::kColl) {
    for (uint32_t slot : c->nics) use(slot);
  } else {
    use(c->nics[static_cast<size_t>(c->rank)]);
    use(c->nics[static_cast<size_t>(op.peer)]);
  }
  return std::max(bw, 0.0);
}

Stamp* OwnStamp(ncclComm* c, const Op& op) {
  CommShared* s = c->shm;
  switch (op.kind) {
    case OpKind::kColl:
      return &s->ranks[c->rank].coll[op.seq % kCollRing];
    case OpKind::kSend:
      return &s->send[c->rank][op.peer].stamps[op.seq % kP2pRing];
    case OpKind::kRecv:
      return &s->recv[c->rank][op.peer].stamps[op.seq % kP2pRing];
  }
  return nullptr;
}

void OnReach(void* ctx, int64_t reach_ns) {
  auto* w = static_cast<Work*>(ctx);
  for (Op& op : w->ops) ProfilerKernelStart(w->comm->prof_ctx, &op.prof, reach_ns);
  for (const Op& op : w->ops) {
    Stamp* st = OwnStamp(w->comm, op);
    Store(&st->ns, reach_ns);
    Store(&st->seq_plus1, op.seq + 1);
  }
}

// A partner's stamp for seq: 1 with its time when it arrived, 0 while not yet. A stamp of a later
// seq means the ring was lapped (the partner is far ahead): count it as arrived.
int Partner(const Stamp& st, uint64_t seq, int64_t* ns) {
  const uint64_t got = Load(&st.seq_plus1);
  if (got < seq + 1) return 0;
  if (got == seq + 1) *ns = std::max(*ns, Load(&st.ns));
  return 1;
}

int Poll(void* ctx, int64_t* ready_ns) {
  auto* w = static_cast<Work*>(ctx);
  ncclComm* c = w->comm;
  CommShared* s = c->shm;
  if (Load(&s->aborted) != 0) return 1;  // aborted kernels exit
  int64_t ready = *ready_ns;
  for (const Op& op : w->ops) {
    switch (op.kind) {
      case OpKind::kColl:
        for (int r = 0; r < c->nranks; ++r) {
          if (!Partner(s->ranks[r].coll[op.seq % kCollRing], op.seq, &ready)) return 0;
        }
        break;
      case OpKind::kSend:
        if (!Partner(s->recv[op.peer][c->rank].stamps[op.seq % kP2pRing], op.seq, &ready)) return 0;
        break;
      case OpKind::kRecv:
        if (!Partner(s->send[op.peer][c->rank].stamps[op.seq % kP2pRing], op.seq, &ready)) return 0;
        break;
    }
  }
  // Every peer is there; a transfer over a link that carries nothing waits for it (the NCCL
  // kernel spins, the peers' kernels with it).
  bool down = false;
  for (const Op& op : w->ops) {
    if (CrossesNodes(c, op) && LinkBytesPerSecond(c, op, false) <= 0) down = true;
  }
  if (down) {
    w->link_was_down = true;
    return 0;
  }
  if (w->link_was_down) ready = std::max(ready, NowNs());
  *ready_ns = ready;
  return 1;
}

// When the item starts: time the transfers that cross the fabric with the links as they are
// now, and count their bytes and extra wait on this rank's NIC.
int64_t OnStart(void* ctx, int64_t start_ns) {
  (void)start_ns;
  auto* w = static_cast<Work*>(ctx);
  ncclComm* c = w->comm;
  if (Load(&c->shm->aborted) != 0) return 0;  // aborted kernels exit
  bool any = false;
  int64_t total = 0;
  for (const Op& op : w->ops) {
    if (!CrossesNodes(c, op)) {
      total += op.nvlink_ns;
      continue;
    }
    any = true;
    const double bw = LinkBytesPerSecond(c, op, false);
    const double healthy_bw = LinkBytesPerSecond(c, op, true);
    const double latency = LatencyNs();
    const double ns = latency + (bw > 0 ? op.bus_bytes / bw * 1e9 : 0);
    const double healthy_ns = latency + (healthy_bw > 0 ? op.bus_bytes / healthy_bw * 1e9 : 0);
    total += static_cast<int64_t>(ns);
    net::NicSlot* nic = Net().map->nic(c->nics[c->rank]);
    const auto bytes = static_cast<uint64_t>(op.bus_bytes);
    if (op.kind != OpKind::kRecv) {
      net::Add(&nic->tx_bytes, bytes);
      if (ns > healthy_ns) net::Add(&nic->tx_wait_ns, static_cast<uint64_t>(ns - healthy_ns));
    }
    if (op.kind != OpKind::kSend) net::Add(&nic->rx_bytes, bytes);
  }
  return any ? total : -1;
}

void OnComplete(void* ctx, int64_t end_ns) {
  auto* w = static_cast<Work*>(ctx);
  for (Op& op : w->ops) ProfilerKernelStop(&op.prof, end_ns);
  w->comm->pending.fetch_sub(1, std::memory_order_acq_rel);
  delete w;
}

struct Pending {
  ncclComm* comm;
  cudaStream_t stream;
  Op op;
  int64_t duration_ns;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Pending> t_group;

ncclResult_t Submit(ncclComm* comm, cudaStream_t stream, std::vector<Op> ops, int64_t duration_ns) {
  const CudaLink& cuda = Cuda();
  if (cuda.enqueue == nullptr) return Fail(ncclUnhandledCudaError, "libcuda.so.1 is not the Ithbat fake");
  auto* w = new Work{comm, std::move(ops), duration_ns};
  for (Op& op : w->ops) ProfilerEnqueue(comm->prof_ctx, comm->rank, &op.prof);
  IthbatFakeCudaExternalWork ext{};
  ext.size = sizeof(ext);
  ext.ctx = w;
  ext.on_reach = OnReach;
  ext.poll = Poll;
  ext.on_complete = OnComplete;
  if (!comm->nics.empty()) ext.on_start = OnStart;
  ext.duration_ns = duration_ns;
  ext.sm = 0.1f;  // NCCL kernels use a few SMs and spin while they wait
  ext.dram = 0.2f;
  comm->pending.fetch_add(1, std::memory_order_acq_rel);
  const CUresult r = cuda.enqueue(stream, &ext);
  if (r != CUDA_SUCCESS) {
    comm->pending.fetch_sub(1, std::memory_order_acq_rel);
    delete w;
    return Fail(ncclUnhandledCudaError, "enqueue on the stream failed (CUresult " + std::to_string(r) + ")");
  }
  return ncclSuccess;
}

bool ValidComm(ncclComm_t c) { return c != nullptr && c->magic == kCommMagic && !c->destroyed; }

// Records one op: issued now, or at the outermost ncclGroupEnd when inside a group.
ncclResult_t Issue(ncclComm_t comm, cudaStream_t stream, OpKind kind, int peer, double bus_bytes,
                   ProfOp prof = {}) {
  if (!ValidComm(comm)) return Fail(ncclInvalidArgument, "invalid communicator");
  if (kind != OpKind::kColl && (peer < 0 || peer >= comm->nranks))
    return Fail(ncclInvalidArgument, "invalid peer");
  if (kind == OpKind::kColl && prof.func_index >= 0 && prof.func_index < kProfFuncs)
    prof.seq_number = comm->prof_seq[prof.func_index]++;
  Op op{kind, peer, 0, prof, bus_bytes, OpNs(bus_bytes)};
  switch (kind) {
    case OpKind::kColl:
      op.seq = comm->coll_seq++;
      break;
    case OpKind::kSend:
      op.seq = comm->send_count[peer]++;
      break;
    case OpKind::kRecv:
      op.seq = comm->recv_count[peer]++;
      break;
  }
  const int64_t ns = op.nvlink_ns;  // a cross-node op is timed again when it starts (OnStart)
  if (t_group_depth > 0) {
    t_group.push_back(Pending{comm, stream, op, ns});
    return ncclSuccess;
  }
  return Submit(comm, stream, {op}, ns);
}

ncclResult_t CheckBuffers(const void* send, const void* recv, ncclDataType_t dt) {
  if (DataTypeSize(dt) == 0) return Fail(ncclInvalidArgument, "invalid data type");
  if (send == nullptr || recv == nullptr) return Fail(ncclInvalidArgument, "null buffer");
  return ncclSuccess;
}

// Maps the communicator's file and takes `rank` in it; does not wait for the others.
ncclResult_t Join(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, int cuda_dev,
                  const char* name) {
  if (out == nullptr) return Fail(ncclInvalidArgument, "comm is null");
  if (nranks < 1 || nranks > kMaxRanks) return Fail(ncclInvalidArgument, "nranks out of range (fake: 1..64)");
  if (rank < 0 || rank >= nranks) return Fail(ncclInvalidArgument, "rank out of range");
  uint64_t magic = 0;
  std::memcpy(&magic, id.internal, sizeof(magic));
  if (magic != kIdMagic) return Fail(ncclInvalidArgument, "unique id not made by ncclGetUniqueId");
  const std::string path = ShmPath(id);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(ncclSystemError, "open " + path + ": " + std::strerror(errno));
  // Every rank sets the same size; a new file reads as zeros, which is the empty state.
  if (ftruncate(fd, sizeof(CommShared)) != 0) {
    close(fd);
    return Fail(ncclSystemError, "ftruncate " + path + ": " + std::strerror(errno));
  }
  void* p = mmap(nullptr, sizeof(CommShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Fail(ncclSystemError, "mmap " + path + ": " + std::strerror(errno));
  auto* s = static_cast<CommShared*>(p);
  uint32_t expected_ranks = 0;
  __atomic_compare_exchange_n(&s->nranks, &expected_ranks, static_cast<uint32_t>(nranks), false,
                              __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (expected_ranks != 0 && expected_ranks != static_cast<uint32_t>(nranks)) {
    munmap(p, sizeof(CommShared));
    return Fail(ncclInvalidUsage, "ranks disagree on nranks");
  }
  uint64_t expected_magic = 0;
  __atomic_compare_exchange_n(&s->magic, &expected_magic, kShmMagic, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  uint32_t expected_version = 0;
  __atomic_compare_exchange_n(&s->version, &expected_version, kShmVersion, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  if (expected_version != 0 && expected_version != kShmVersion) {
    munmap(p, sizeof(CommShared));
    return Fail(ncclInvalidUsage, "ranks run fake libnccl builds of different shared-file versions");
  }
  uint32_t not_joined = 0;
  if (!__atomic_compare_exchange_n(&s->ranks[rank].joined, &not_joined, 1u, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    munmap(p, sizeof(CommShared));
    return Fail(ncclInvalidUsage, "rank " + std::to_string(rank) + " joined twice");
  }
  Store(&s->ranks[rank].pid, HostPid());
  Store(&s->ranks[rank].cuda_dev, cuda_dev);
  const NetLink& net = Net();
  if (net.map != nullptr) {
    Store(&s->ranks[rank].node_plus1, net.node + 1);
    Store(&s->ranks[rank].nic_plus1, net.nic + 1);
  }
  Store(&s->ranks[rank].ready, 1u);
  __atomic_add_fetch(&s->refs, 1u, __ATOMIC_ACQ_REL);
  auto* c = new ncclComm();
  c->shm = s;
  c->path = path;
  c->nranks = nranks;
  c->rank = rank;
  c->cuda_dev = cuda_dev;
  if (name != nullptr) c->name.assign(name, strnlen(name, 256));
  *out = c;
  return ncclSuccess;
}

// Bootstrap: init returns when every rank has joined (NCCL's init is collective too).
ncclResult_t WaitAllJoined(ncclComm_t c) {
  const double timeout_s = EnvDouble("ITHBAT_FAKE_NCCL_INIT_TIMEOUT_S", 600);
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  for (;;) {
    int joined = 0;
    for (int r = 0; r < c->nranks; ++r) joined += Load(&c->shm->ranks[r].ready) != 0;
    if (joined == c->nranks) return ncclSuccess;
    if (NowNs() > deadline) return Fail(ncclSystemError, "bootstrap timed out waiting for the other ranks");
    SleepNs(1'000'000);
  }
}

int CurrentDevice() {
  const CudaLink& cuda = Cuda();
  CUdevice d = 0;
  if (cuda.ctx_get_device != nullptr && cuda.ctx_get_device(&d) == CUDA_SUCCESS) return d;
  return 0;
}

// After bootstrap (every rank published): where the ranks sit in the fabric. Without a node and
// NIC from every rank, or without the net state here, the communicator stays on the NVLink model.
void SetupNet(ncclComm* c) {
  if (Net().map == nullptr) return;
  std::vector<uint32_t> nodes, nics;
  for (int r = 0; r < c->nranks; ++r) {
    const uint32_t node = Load(&c->shm->ranks[r].node_plus1);
    const uint32_t nic = Load(&c->shm->ranks[r].nic_plus1);
    if (node == 0 || nic == 0 || Net().map->nic(nic - 1) == nullptr) return;
    nodes.push_back(node - 1);
    nics.push_back(nic - 1);
  }
  c->spans_nodes = std::any_of(nodes.begin(), nodes.end(), [&](uint32_t n) { return n != nodes[0]; });
  c->nodes = std::move(nodes);
  c->nics = std::move(nics);
}

// After bootstrap, as NCCL does: the profiler plugin's init for this communicator.
void ProfilerInitComm(ncclComm* c, const ncclUniqueId& id, const char* name) {
  // NCCL's own commHash (getHash over the id's 128 bytes): the eBPF probes compute the same
  // from the id argument of ncclCommInitRank, so their records join the plugin's.
  c->comm_hash = ithbat_nccl_comm_hash(reinterpret_cast<const unsigned char*>(id.internal));
  c->prof_ctx = ProfilerInitContext(c->comm_hash, name, c->nranks, c->rank);
}

ncclResult_t InitRank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, const char* name) {
  ncclResult_t r = Join(comm, nranks, id, rank, CurrentDevice(), name);
  if (r != ncclSuccess) return r;
  r = WaitAllJoined(*comm);
  if (r != ncclSuccess) {
    // Leave the slot taken: the job is broken anyway, and a retry needs a new id.
    (*comm)->destroyed = true;
    *comm = nullptr;
    return r;
  }
  SetupNet(*comm);
  ProfilerInitComm(*comm, id, name);
  return r;
}

// Drops this rank from the file; the last one out removes it.
ncclResult_t Release(ncclComm_t c, bool abort) {
  if (!ValidComm(c)) return Fail(ncclInvalidArgument, "invalid communicator");
  if (abort) Store(&c->shm->aborted, 1u);
  // The items on the streams still use the mapping: wait for them (abort makes them finish).
  while (c->pending.load(std::memory_order_acquire) > 0) SleepNs(200'000);
  ProfilerFinalize(c->prof_ctx);
  c->prof_ctx = nullptr;
  c->destroyed = true;
  Store(&c->shm->ranks[c->rank].destroyed, 1u);
  if (__atomic_sub_fetch(&c->shm->refs, 1u, __ATOMIC_ACQ_REL) == 0) unlink(c->path.c_str());
  munmap(c->shm, sizeof(CommShared));
  c->shm = nullptr;
  c->magic = 0;
  delete c;
  return ncclSuccess;
}

const char* ErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

}  // namespace
}  // namespace ithbat::sim::nccl

using namespace ithbat::sim::nccl;  // NOLINT(google-build-using-namespace): the export file

// NOLINTBEGIN(readability-identifier-naming) — NVIDIA's names.
#pragma GCC visibility push(default)
extern "C" {

ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr) return Fail(ncclInvalidArgument, "version is null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Fail(ncclInvalidArgument, "uniqueId is null");
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  std::memcpy(uniqueId->internal, &kIdMagic, sizeof(kIdMagic));
  if (getrandom(uniqueId->internal + 8, 16, 0) != 16) return Fail(ncclSystemError, "getrandom failed");
  return ncclSuccess;
}

ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return InitRank(comm, nranks, commId, rank, nullptr);
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  const char* name = nullptr;
  if (config != nullptr) {
    if (config->magic != NCCL_CONFIG_MAGIC ||
        config->size < offsetof(ncclConfig_t, commName) + sizeof(char*)) {
      return Fail(ncclInvalidArgument, "config not initialised with NCCL_CONFIG_INITIALIZER");
    }
    name = config->commName;
  }
  return InitRank(comm, nranks, commId, rank, name);
}

ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1 || ndev > kMaxRanks) return Fail(ncclInvalidArgument, "bad comms/ndev");
  ncclUniqueId id;
  if (ncclResult_t r = pncclGetUniqueId(&id); r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) {
    if (ncclResult_t r = Join(&comms[i], ndev, id, i, devlist != nullptr ? devlist[i] : i, nullptr);
        r != ncclSuccess) {
      for (int j = 0; j < i; ++j) Release(comms[j], true);
      return r;
    }
  }
  for (int i = 0; i < ndev; ++i) {
    SetupNet(comms[i]);
    ProfilerInitComm(comms[i], id, nullptr);
  }
  return ncclSuccess;  // every rank joined from this process: nothing to wait for
}

ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (!ValidComm(comm)) return Fail(ncclInvalidArgument, "invalid communicator");
  while (comm->pending.load(std::memory_order_acquire) > 0 && Load(&comm->shm->aborted) == 0)
    SleepNs(200'000);
  return ncclSuccess;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) { return Release(comm, false); }
ncclResult_t pncclCommAbort(ncclComm_t comm) { return Release(comm, true); }

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (!ValidComm(comm) || count == nullptr) return Fail(ncclInvalidArgument, "invalid argument");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!ValidComm(comm) || device == nullptr) return Fail(ncclInvalidArgument, "invalid argument");
  *device = comm->cuda_dev;
  return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!ValidComm(comm) || rank == nullptr) return Fail(ncclInvalidArgument, "invalid argument");
  *rank = comm->rank;
  return ncclSuccess;
}

// A peer process that is gone (or aborted its communicator) is a remote error, as a real
// communicator eventually reports one.
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!ValidComm(comm) || asyncError == nullptr) return Fail(ncclInvalidArgument, "invalid argument");
  *asyncError = ncclSuccess;
  if (Load(&comm->shm->aborted) != 0) *asyncError = ncclRemoteError;
  for (int r = 0; r < comm->nranks; ++r) {
    const uint32_t pid = Load(&comm->shm->ranks[r].pid);
    if (pid > 0 && !ithbat::sim::HostPidAlive(pid)) *asyncError = ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(sendbuff, recvbuff, datatype); r != ncclSuccess) return r;
  if (op < 0) return Fail(ncclInvalidArgument, "invalid reduction op");
  const int n = ValidComm(comm) ? comm->nranks : 1;
  const double bytes = static_cast<double>(count) * static_cast<double>(DataTypeSize(datatype));
  return Issue(comm, stream, OpKind::kColl, 0, bytes * 2.0 * (n - 1) / n,
               MakeProfOp(kProfAllReduce, count, datatype, -1));
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                            int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(sendbuff != nullptr ? sendbuff : recvbuff, recvbuff, datatype);
      r != ncclSuccess)
    return r;
  if (ValidComm(comm) && (root < 0 || root >= comm->nranks)) return Fail(ncclInvalidArgument, "invalid root");
  return Issue(comm, stream, OpKind::kColl, 0,
               static_cast<double>(count) * static_cast<double>(DataTypeSize(datatype)),
               MakeProfOp(kProfBroadcast, count, datatype, root));
}

ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r =
          CheckBuffers(sendbuff, recvbuff != nullptr ? recvbuff : const_cast<void*>(sendbuff), datatype);
      r != ncclSuccess) {
    return r;
  }
  if (op < 0) return Fail(ncclInvalidArgument, "invalid reduction op");
  if (ValidComm(comm) && (root < 0 || root >= comm->nranks)) return Fail(ncclInvalidArgument, "invalid root");
  return Issue(comm, stream, OpKind::kColl, 0,
               static_cast<double>(count) * static_cast<double>(DataTypeSize(datatype)),
               MakeProfOp(kProfReduce, count, datatype, root));
}

// Bytes per rank = sendcount·S·N (the receive buffer); bus bytes = that × (N−1)/N.
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(sendbuff, recvbuff, datatype); r != ncclSuccess) return r;
  const int n = ValidComm(comm) ? comm->nranks : 1;
  const double bytes = static_cast<double>(sendcount) * static_cast<double>(DataTypeSize(datatype)) * n;
  return Issue(comm, stream, OpKind::kColl, 0, bytes * (n - 1) / n,
               MakeProfOp(kProfAllGather, sendcount, datatype, -1));
}

// Bytes per rank = recvcount·S·N (the send buffer); bus bytes = that × (N−1)/N.
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(sendbuff, recvbuff, datatype); r != ncclSuccess) return r;
  if (op < 0) return Fail(ncclInvalidArgument, "invalid reduction op");
  const int n = ValidComm(comm) ? comm->nranks : 1;
  const double bytes = static_cast<double>(recvcount) * static_cast<double>(DataTypeSize(datatype)) * n;
  return Issue(comm, stream, OpKind::kColl, 0, bytes * (n - 1) / n,
               MakeProfOp(kProfReduceScatter, recvcount, datatype, -1));
}

ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(sendbuff, sendbuff, datatype); r != ncclSuccess) return r;
  return Issue(comm, stream, OpKind::kSend, peer,
               static_cast<double>(count) * static_cast<double>(DataTypeSize(datatype)),
               MakeProfOp(kProfSend, count, datatype, peer));
}

ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  if (ncclResult_t r = CheckBuffers(recvbuff, recvbuff, datatype); r != ncclSuccess) return r;
  return Issue(comm, stream, OpKind::kRecv, peer,
               static_cast<double>(count) * static_cast<double>(DataTypeSize(datatype)),
               MakeProfOp(kProfRecv, count, datatype, peer));
}

ncclResult_t pncclGroupStart(void) {
  ++t_group_depth;
  return ncclSuccess;
}

// The outermost GroupEnd issues the group: one fused item per (communicator, stream).
ncclResult_t pncclGroupEnd(void) {
  if (t_group_depth == 0) return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Pending> ops;
  ops.swap(t_group);
  ncclResult_t result = ncclSuccess;
  std::vector<bool> done(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (done[i]) continue;
    std::vector<Op> fused;
    int64_t ns = 0;
    for (size_t j = i; j < ops.size(); ++j) {
      if (done[j] || ops[j].comm != ops[i].comm || ops[j].stream != ops[i].stream) continue;
      done[j] = true;
      fused.push_back(ops[j].op);
      ns += ops[j].duration_ns;
    }
    if (ncclResult_t r = Submit(ops[i].comm, ops[i].stream, std::move(fused), ns); r != ncclSuccess)
      result = r;
  }
  return result;
}

const char* pncclGetErrorString(ncclResult_t result) { return ErrorString(result); }

const char* pncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return t_last_error.c_str();
}

// The public names: weak aliases at the pncclX addresses, as in the real library.
#define ITHBAT_NCCL_ALIAS(ret, name, params) \
  ret nccl##name params __attribute__((weak, alias("pnccl" #name)));
ITHBAT_NCCL_EXPORTS(ITHBAT_NCCL_ALIAS)
#undef ITHBAT_NCCL_ALIAS

}  // extern "C"
#pragma GCC visibility pop
// NOLINTEND(readability-identifier-naming)
