// libnccl-profiler-ithbat.so: an NCCL profiler plugin (API v4, v5, v6) that writes one compact
// record per completed collective or point-to-point operation into a per-process shared-memory
// ring (ithbat_nccl_ring.h) for the Ithbat agent. See README.md in this folder.
//
// Cost model: init/finalize (per communicator, cold) allocate and may make syscalls; every event
// path (startEvent, stopEvent, recordEventState) is a handful of atomics, one vDSO clock read and,
// at completion, a 128-byte copy into the ring. No locks, no allocation, no syscalls. Nothing
// ever waits for the reader: the ring overwrites, the reader detects what it lost.
//
// Handles: the void* given back to NCCL is not a pointer but an encoded (kind, communicator,
// slot, channel, generation). NCCL treats it as opaque; decoding it never dereferences anything
// NCCL passes, and a handle of a collective already written (or evicted) fails the generation
// check and is counted as stale instead of touching a reused slot.
//
// Completion: a collective is written when NCCL stopped its Coll/P2p event (enqueued) AND as many
// KernelCh events stopped as it announced channels (nChannels; extra channels are waited for too).
// An operation whose kernel events never arrive (graph capture, a NCCL that gives none) stays in
// its communicator's pool until the pool wraps, and is then written flagged EVICTED. A P2p (or an
// operation one of whose channels was refused) whose channels never add up to nChannels (older
// NCCL) is written flagged CLOSED_BY_NEXT once a later operation of its communicator starts a
// kernel channel it had used, every channel it started having stopped.
//
// Clocks: pTimers are the GPU's global timer, not the host's clock, and each GPU's differs by its
// own offset. Every KernelCh callback comes after the GPU event it reports, so for each
// communicator (one GPU) the plugin keeps min(CLOCK_MONOTONIC at the callback - pTimer) over the
// current and the previous ~8.6 s window; the reader adds it to the raw pTimers. One sample per
// operation (its first KernelCh stop): a clock read per channel event doubled the per-channel cost,
// and the minimum over operations converges as well. The corrected time
// is late by at most the smallest delivery delay in that window (NCCL's proxy polls with <= 10 us
// backoff when idle). CLOCK_MONOTONIC, not REALTIME: a wall-clock step must not move the minimum.
//
// Loading: linked with -z nodelete. NCCL dlcloses the plugin when its last communicator is
// finalized and dlopens it again for the next one; the ring, its mapping and the retired contexts
// survive that instead of leaking a second ring the agent would have to find.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>  // placement new only (inline, no libstdc++)

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ithbat_nccl_ring.h"
#include "nccl_profiler_abi.h"

namespace ithbat::nccl_profiler {
namespace {

constexpr ncclResult_t kSuccess = 0;
constexpr ncclResult_t kSystemError = 2;
constexpr int kMaxComms = 256;
constexpr uint32_t kDefaultPool = 1024;
constexpr uint32_t kMaxPool = 4096;  // 12 bits of the handle
constexpr uint32_t kMaxChannels = 64;

// Handle layout: [0..1] kind, [2..9] communicator, [10..21] slot, [22..29] channel, [30..61] gen.
constexpr uint64_t kKindOp = 1;
constexpr uint64_t kKindKernelCh = 2;

uint64_t Encode(uint64_t kind, uint32_t ctx, uint32_t slot, uint32_t ch, uint32_t gen) {
  return kind | (uint64_t{ctx} << 2) | (uint64_t{slot} << 10) | (uint64_t{ch & 0xff} << 22) |
         (uint64_t{gen} << 30);
}

enum SlotState : uint32_t { kFree = 0, kActive = 1, kWriting = 2 };

struct OpSlot {
  std::atomic<uint32_t> state{kFree};
  std::atomic<uint32_t> gen{0};
  std::atomic<int32_t> pending{0};  // op stop + channels still to stop
  std::atomic<uint32_t> ch_started{0};
  std::atomic<uint32_t> ch_stopped{0};
  std::atomic<uint64_t> gpu_start{UINT64_MAX};  // min KernelCh start pTimer
  std::atomic<uint64_t> gpu_stop{0};            // max KernelCh stop pTimer
  std::atomic<uint64_t> ch_mask{0};             // channel ids started
  std::atomic<uint64_t> ordinal{UINT64_MAX};    // the communicator's operation number (Context::next)
  std::atomic<uint32_t> op_stopped{0};          // the Coll/P2p stopEvent came (enqueued)
  std::atomic<uint32_t> refused_channel{0};     // a KernelCh with an impossible channel id came
  std::atomic<uint32_t> clock_sampled{0};       // one clock sample per operation (SampleClock)
  uint32_t expected_channels = 0;
  IthbatNcclRecord rec;  // the fields known at start (seq, gpu times, flags filled at write)
};

struct Context {
  uint32_t index = 0;
  uint64_t comm_id = 0;
  int rank = -1;
  int nranks = -1;
  uint32_t pool = 0;
  OpSlot* slots = nullptr;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> p2p_seq{0};
  std::atomic<uint64_t> low{0};  // operations below this number are all written
  // GPU-to-host clock correction (see the file comment): window number and minima.
  std::atomic<uint64_t> lag_window{0};
  std::atomic<int64_t> lag_cur{INT64_MAX};
  std::atomic<int64_t> lag_prev{INT64_MAX};
};

struct Global {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  // init/finalize only
  IthbatNcclRingHeader* ring = nullptr;
  IthbatNcclRecord* records = nullptr;
  uint32_t ring_mask = 0;  // capacity - 1
  bool ring_failed = false;
  uint32_t pool = kDefaultPool;
  uint32_t epoch = 0;
  std::atomic<Context*> comms[kMaxComms] = {};
  Context* retired[kMaxComms] = {};  // finalized, freed when the index is reused
  bool at_fork_registered = false;
};

// Constant-initialised and trivially destructible: no constructor runs at load, nothing is torn
// down at exit while NCCL's threads may still call in.
Global g_global;
Global& G() { return g_global; }

// Init/finalize only.
struct Lock {
  explicit Lock(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
  ~Lock() { pthread_mutex_unlock(m_); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  pthread_mutex_t* m_;
};

int64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);  // vDSO: no syscall
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void Count(uint64_t IthbatNcclRingHeader::*field) {
  IthbatNcclRingHeader* h = G().ring;
  if (h != nullptr) __atomic_fetch_add(&(h->*field), 1, __ATOMIC_RELAXED);
}

uint32_t EnvU32(const char* name, uint32_t fallback, uint32_t lo, uint32_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) return fallback;
  return static_cast<uint32_t>(x);
}

uint32_t RoundPow2(uint32_t x) {
  uint32_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// A forked child keeps the parent's mapping but must not write its records there (the agent
// reads that ring as the parent's): it gets a ring of its own at its next communicator init.
// Its copies of the parent's communicators write nothing (there is no ring until then).
void AfterForkInChild() {
  Global& g = G();
  g.ring = nullptr;
  g.records = nullptr;
  g.ring_failed = false;
  pthread_mutex_init(&g.mu, nullptr);  // the parent may have held it while forking
}

// Creates, maps and (unless kept) unlinks this process's ring. Cold path, under G().mu.
bool OpenRing() {
  Global& g = G();
  if (!g.at_fork_registered) g.at_fork_registered = pthread_atfork(nullptr, nullptr, AfterForkInChild) == 0;
  if (g.ring != nullptr) return true;
  if (g.ring_failed) return false;
  g.ring_failed = true;  // until it works: one attempt per process
  const uint32_t cap = RoundPow2(EnvU32("ITHBAT_NCCL_PROFILER_RECORDS", ITHBAT_NCCL_RING_DEFAULT_CAPACITY,
                                        ITHBAT_NCCL_RING_MIN_CAPACITY, ITHBAT_NCCL_RING_MAX_CAPACITY));
  const char* dir = std::getenv("ITHBAT_NCCL_PROFILER_DIR");
  if (dir == nullptr || *dir == '\0') dir = "/dev/shm";
  char path[4096];
  const int n =
      std::snprintf(path, sizeof(path), "%s/" ITHBAT_NCCL_RING_FILE_PREFIX "%d" ITHBAT_NCCL_RING_FILE_SUFFIX,
                    dir, static_cast<int>(getpid()));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(path)) return false;
  // A file of ours from a dead process with the same pid (kept with ITHBAT_NCCL_PROFILER_KEEP):
  // replace it. O_EXCL|O_NOFOLLOW: never write through somebody's link.
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    unlink(path);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return false;
  const size_t size = sizeof(IthbatNcclRingHeader) + size_t{cap} * sizeof(IthbatNcclRecord);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    unlink(path);
    return false;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  const char* keep = std::getenv("ITHBAT_NCCL_PROFILER_KEEP");
  if (!(keep != nullptr && keep[0] == '1')) unlink(path);
  if (p == MAP_FAILED) {
    if (keep != nullptr && keep[0] == '1') unlink(path);
    return false;
  }
  auto* h = static_cast<IthbatNcclRingHeader*>(p);
  h->version = ITHBAT_NCCL_RING_VERSION;
  h->header_size = sizeof(IthbatNcclRingHeader);
  h->record_size = sizeof(IthbatNcclRecord);
  h->capacity = cap;
  h->pid = static_cast<uint32_t>(getpid());
  const int64_t mono = ClockNs(CLOCK_MONOTONIC);
  h->realtime_minus_monotonic_ns = ClockNs(CLOCK_REALTIME) - mono;
  h->created_monotonic_ns = static_cast<uint64_t>(mono);
  __atomic_store_n(&h->magic, ITHBAT_NCCL_RING_MAGIC, __ATOMIC_RELEASE);  // last: the header is complete
  g.records = reinterpret_cast<IthbatNcclRecord*>(static_cast<char*>(p) + sizeof(IthbatNcclRingHeader));
  g.ring_mask = cap - 1;
  g.pool = RoundPow2(EnvU32("ITHBAT_NCCL_PROFILER_POOL", kDefaultPool, 16, kMaxPool));
  g.ring = h;
  g.ring_failed = false;
  return true;
}

// Copies one record into the ring. Lock-free; a slot still held by a writer a lap behind is
// skipped (counted) rather than waited for.
void Publish(IthbatNcclRecord* rec) {
  Global& g = G();
  IthbatNcclRingHeader* h = g.ring;
  if (h == nullptr) return;  // a forked child before its own ring
  const uint64_t idx = __atomic_fetch_add(&h->head, 1, __ATOMIC_RELAXED);
  IthbatNcclRecord* dst = &g.records[idx & g.ring_mask];
  uint64_t cur = __atomic_load_n(&dst->seq, __ATOMIC_RELAXED);
  const uint64_t writing = 2 * idx + 1;
  if ((cur & 1) != 0 || cur >= writing ||
      !__atomic_compare_exchange_n(&dst->seq, &cur, writing, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
    Count(&IthbatNcclRingHeader::dropped_contended);
    return;
  }
  __atomic_thread_fence(__ATOMIC_RELEASE);  // the odd seq is visible before any payload word
  const auto* src = reinterpret_cast<const uint64_t*>(rec);
  auto* out = reinterpret_cast<uint64_t*>(dst);
  for (size_t i = 1; i < sizeof(IthbatNcclRecord) / 8; ++i)
    __atomic_store_n(&out[i], src[i], __ATOMIC_RELAXED);
  __atomic_store_n(&dst->seq, writing + 1, __ATOMIC_RELEASE);
  Count(&IthbatNcclRingHeader::records_written);
}

constexpr int kLagWindowShift = 33;  // ~8.6 s of CLOCK_MONOTONIC

bool PlausiblePtimer(uint64_t t, int64_t realtime_now) {
  // The GPU global timer counts ns of the host's CLOCK_REALTIME (set by the driver). A value a
  // day away from the host clock is not that: keep the record, drop its GPU times.
  constexpr int64_t kDay = 86'400'000'000'000;
  if (t == 0 || t > static_cast<uint64_t>(INT64_MAX)) return false;
  const auto v = static_cast<int64_t>(t);
  return v > realtime_now - kDay && v < realtime_now + kDay;
}

void AtomicMin(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

int64_t RealtimeOffset(int64_t mono_hint);

// One KernelCh callback: the host's CLOCK_MONOTONIC now is after the GPU event `ptimer` reports.
void SampleClock(Context* c, uint64_t ptimer) {
  const int64_t mono = ClockNs(CLOCK_MONOTONIC);
  if (!PlausiblePtimer(ptimer, mono + RealtimeOffset(mono))) return;
  const int64_t lag = mono - static_cast<int64_t>(ptimer);  // both in [0, INT64_MAX]: no overflow
  const auto w = static_cast<uint64_t>(mono) >> kLagWindowShift;
  uint64_t cw = c->lag_window.load(std::memory_order_relaxed);
  if (w > cw && c->lag_window.compare_exchange_strong(cw, w, std::memory_order_acq_rel)) {
    // The previous window's minimum stays usable (a writer never sees both unknown while
    // samples exist); a sample racing this roll-over may be lost, which only loosens the bound.
    c->lag_prev.store(w == cw + 1 ? c->lag_cur.load(std::memory_order_relaxed) : INT64_MAX,
                      std::memory_order_relaxed);
    c->lag_cur.store(INT64_MAX, std::memory_order_relaxed);
  }
  AtomicMin(c->lag_cur, lag);
}

int64_t ClockLag(const Context* c) {
  return std::min(c->lag_cur.load(std::memory_order_relaxed), c->lag_prev.load(std::memory_order_relaxed));
}

// Writes slot `s` of `c` (already claimed: state kWriting) and bumps its generation.
// CLOCK_REALTIME - CLOCK_MONOTONIC, re-sampled when `mono_hint` (a recent CLOCK_MONOTONIC) is
// 100 ms past the last sample: two clock reads per 100 ms instead of two per record. The offset
// only moves with clock steps and slewing (NTP slews at most 500 ppm: <= 50 us per 100 ms).
int64_t RealtimeOffset(int64_t mono_hint) {
  static std::atomic<int64_t> offset{0};
  static std::atomic<int64_t> sampled_at{INT64_MIN / 2};
  constexpr int64_t kRefreshNs = 100'000'000;
  if (mono_hint - sampled_at.load(std::memory_order_relaxed) < kRefreshNs && mono_hint >= sampled_at.load())
    return offset.load(std::memory_order_relaxed);
  const int64_t mono = ClockNs(CLOCK_MONOTONIC);
  const int64_t off = ClockNs(CLOCK_REALTIME) - mono;
  offset.store(off, std::memory_order_relaxed);
  sampled_at.store(mono, std::memory_order_relaxed);
  return off;
}

// `flag`: EVICTED, CLOSED_BY_NEXT or 0.
void WriteSlot(const Context* c, OpSlot& s, uint8_t flag) {
  IthbatNcclRecord rec = s.rec;
  rec.realtime_minus_monotonic_ns = RealtimeOffset(static_cast<int64_t>(rec.enqueue_mono_ns));
  const int64_t real = static_cast<int64_t>(rec.enqueue_mono_ns) + rec.realtime_minus_monotonic_ns;
  const uint64_t start = s.gpu_start.load(std::memory_order_acquire);
  const uint64_t stop = s.gpu_stop.load(std::memory_order_acquire);
  const uint32_t stopped = s.ch_stopped.load(std::memory_order_acquire);
  rec.channels = static_cast<uint8_t>(stopped > 255 ? 255 : stopped);
  rec.flags |= flag;
  const int64_t lag = ClockLag(c);
  if (stopped > 0 && lag != INT64_MAX && PlausiblePtimer(start, real) && PlausiblePtimer(stop, real) &&
      stop >= start) {
    rec.gpu_start_ns = start;
    rec.gpu_stop_ns = stop;
    rec.gpu_to_mono_ns = lag;
    rec.flags |= ITHBAT_NCCL_FLAG_GPU_TIMED;
  }
  s.gen.fetch_add(1, std::memory_order_acq_rel);  // old handles are stale from here on
  Publish(&rec);
}

// One reference of the operation dropped (its own stop or a channel's stop): the last one writes.
void Release(const Context* c, OpSlot& s) {
  if (s.pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  uint32_t expected = kActive;
  if (!s.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) return;  // evicted
  WriteSlot(c, s, 0);
  s.state.store(kFree, std::memory_order_release);
}

Context* ContextAt(uint32_t index) {
  if (index >= kMaxComms) return nullptr;
  return G().comms[index].load(std::memory_order_acquire);
}

// The op slot a handle names, if it is still the same operation (and its communicator).
OpSlot* Lookup(uint64_t h, uint32_t* channel, Context** ctx = nullptr) {
  const uint32_t ctx_index = (h >> 2) & 0xff;
  const uint32_t slot = (h >> 10) & 0xfff;
  const auto gen = static_cast<uint32_t>(h >> 30);
  if (channel != nullptr) *channel = (h >> 22) & 0xff;
  Context* c = ContextAt(ctx_index);
  if (c == nullptr || slot >= c->pool) {
    Count(&IthbatNcclRingHeader::dropped_bad_input);
    return nullptr;
  }
  OpSlot& s = c->slots[slot];
  if (s.gen.load(std::memory_order_acquire) != gen || s.state.load(std::memory_order_acquire) != kActive) {
    Count(&IthbatNcclRingHeader::dropped_stale);
    return nullptr;
  }
  if (ctx != nullptr) *ctx = c;
  return &s;
}

void CopyString(char* dst, size_t cap, const char* src) {
  std::memset(dst, 0, cap);
  if (src == nullptr) return;
  // NCCL's strings are static; still bounded: at most cap - 1 bytes are read.
  for (size_t i = 0; i + 1 < cap && src[i] != '\0'; ++i) dst[i] = src[i];
}

bool Eq(const char* a, const char* b) { return std::strcmp(a, b) == 0; }

// Bytes of one element from NCCL's datatype name ("ncclFloat32", or without the prefix).
uint8_t DtypeSizeSlow(const char* name) {
  if (std::strncmp(name, "nccl", 4) == 0) name += 4;
  static const struct {
    const char* n;
    uint8_t s;
  } kTypes[] = {{"Int8", 1},       {"Char", 1},      {"Uint8", 1},   {"Int32", 4},   {"Int", 4},
                {"Uint32", 4},     {"Int64", 8},     {"Uint64", 8},  {"Float16", 2}, {"Half", 2},
                {"Float32", 4},    {"Float", 4},     {"Float64", 8}, {"Double", 8},  {"Bfloat16", 2},
                {"Float8e4m3", 1}, {"Float8e5m2", 1}};
  for (const auto& t : kTypes) {
    if (Eq(name, t.n)) return t.s;
  }
  return 0;
}

bool TimesNranksSlow(const char* func) {
  return Eq(func, "AllGather") || Eq(func, "ReduceScatter") || Eq(func, "AllToAll") || Eq(func, "AlltoAll") ||
         Eq(func, "Gather") || Eq(func, "Scatter");
}

// NCCL passes the same static strings every time: remember the last answer per thread, keyed by
// the caller's pointer and checked against the copied text (a reused pointer with other text
// just misses).
struct NameCache {
  const char* ptr = nullptr;
  char text[24] = {};
  uint8_t value = 0;
};

// `copied`: the record's NUL-padded field (n <= sizeof(text) bytes).
bool CacheHit(const NameCache& c, const char* ptr, const char* copied, size_t n) {
  return ptr == c.ptr && std::memcmp(c.text, copied, n) == 0;
}
void CacheSet(NameCache& c, const char* ptr, const char* copied, size_t n) {
  c.ptr = ptr;
  std::memset(c.text, 0, sizeof(c.text));
  std::memcpy(c.text, copied, n);
}

uint8_t DtypeSize(const char* ptr, const char* copied, size_t n) {
  static thread_local NameCache c;
  if (!CacheHit(c, ptr, copied, n)) {
    CacheSet(c, ptr, copied, n);
    c.value = DtypeSizeSlow(copied);
  }
  return c.value;
}

// Bytes per rank (nvidia-abi.md §4.3): gathers and scatters move count × size × nranks.
uint64_t OpBytes(const char* ptr, const char* func, size_t n, uint64_t count, uint8_t size, int nranks) {
  static thread_local NameCache c;
  if (!CacheHit(c, ptr, func, n)) {
    CacheSet(c, ptr, func, n);
    c.value = TimesNranksSlow(func) ? 1 : 0;
  }
  uint64_t b = count * size;
  if (nranks > 0 && c.value != 0) b *= static_cast<uint64_t>(nranks);
  return b;
}

// Claims a pool slot for a new operation; evicts the oldest if it is still open. An event of the
// evicted operation that passed its generation check just before the eviction can still land on
// the slot's atomics while the new operation starts (pool-size operations later); the window is a
// few instructions and its worst effect is a wrong time on one record, never a crash.
OpSlot* Claim(Context* c, uint32_t* slot_index, uint64_t* ordinal) {
  const uint64_t n = c->next.fetch_add(1, std::memory_order_relaxed);
  const auto i = static_cast<uint32_t>(n & (c->pool - 1));
  OpSlot& s = c->slots[i];
  uint32_t st = kFree;
  if (!s.state.compare_exchange_strong(st, kActive, std::memory_order_acq_rel)) {
    if (st != kActive || !s.state.compare_exchange_strong(st, kWriting, std::memory_order_acq_rel)) {
      Count(&IthbatNcclRingHeader::dropped_pool_full);
      return nullptr;
    }
    WriteSlot(c, s, ITHBAT_NCCL_FLAG_EVICTED);
    Count(&IthbatNcclRingHeader::evicted);
    s.state.store(kActive, std::memory_order_release);
  }
  *slot_index = i;
  *ordinal = n;
  return &s;
}

struct OpArgs {
  uint8_t kind;
  uint64_t seq_number;
  const char* func;
  const char* datatype;
  uint64_t count;
  int peer_or_root;
  uint8_t channels;
};

void* StartOp(Context* c, int rank, const OpArgs& a) {
  uint32_t i = 0;
  uint64_t ordinal = 0;
  OpSlot* s = Claim(c, &i, &ordinal);
  if (s == nullptr) return nullptr;
  IthbatNcclRecord& r = s->rec;
  std::memset(&r, 0, sizeof(r));
  r.comm_id = c->comm_id;
  r.seq_number = a.seq_number;
  r.count = a.count;
  r.enqueue_mono_ns = static_cast<uint64_t>(ClockNs(CLOCK_MONOTONIC));
  r.rank = rank;
  r.nranks = c->nranks;
  r.peer_or_root = a.peer_or_root;
  r.kind = a.kind;
  CopyString(r.func, sizeof(r.func), a.func);
  CopyString(r.datatype, sizeof(r.datatype), a.datatype);
  r.dtype_size = DtypeSize(a.datatype, r.datatype, sizeof(r.datatype));
  if (r.dtype_size == 0) r.flags |= ITHBAT_NCCL_FLAG_BYTES_UNKNOWN;
  r.bytes = OpBytes(a.func, r.func, sizeof(r.func), a.count, r.dtype_size, c->nranks);
  const uint32_t ch = a.channels > kMaxChannels ? kMaxChannels : a.channels;
  s->expected_channels = ch;
  s->ch_started.store(0, std::memory_order_relaxed);
  s->ch_stopped.store(0, std::memory_order_relaxed);
  s->gpu_start.store(UINT64_MAX, std::memory_order_relaxed);
  s->gpu_stop.store(0, std::memory_order_relaxed);
  s->ch_mask.store(0, std::memory_order_relaxed);
  s->op_stopped.store(0, std::memory_order_relaxed);
  s->refused_channel.store(0, std::memory_order_relaxed);
  s->clock_sampled.store(0, std::memory_order_relaxed);
  s->pending.store(static_cast<int32_t>(1 + ch), std::memory_order_release);
  s->ordinal.store(ordinal, std::memory_order_release);  // last: CloseEarlier reads the rest after it
  const uint32_t gen = s->gen.load(std::memory_order_acquire);
  return reinterpret_cast<void*>(Encode(kKindOp, c->index, i, 0, gen));
}

// Operations of `c` numbered below `n` that will never see all their channels (older NCCL's P2p,
// a refused channel id): written once channel `ch`, which they used, has moved on to operation n
// and every channel they started has stopped. NCCL's proxy delivers one channel's events in order,
// so operation n starting on `ch` means `ch` is done with them. Bounded: at most kCloseScan
// operations are looked at, normally none (low == n).
constexpr uint64_t kCloseScan = 16;

void CloseEarlier(Context* c, uint64_t n, uint32_t ch) {
  uint64_t lo = c->low.load(std::memory_order_relaxed);
  if (n > lo + kCloseScan) lo = n - kCloseScan;
  bool prefix_done = true;
  for (uint64_t k = lo; k < n; ++k) {
    OpSlot& e = c->slots[k & (c->pool - 1)];
    if (e.ordinal.load(std::memory_order_acquire) != k ||
        e.state.load(std::memory_order_acquire) != kActive) {
      if (prefix_done) {
        uint64_t cur = c->low.load(std::memory_order_relaxed);
        while (cur < k + 1 && !c->low.compare_exchange_weak(cur, k + 1, std::memory_order_relaxed)) {
        }
      }
      continue;
    }
    prefix_done = false;
    const bool incomplete_kind =
        e.rec.kind == ITHBAT_NCCL_KIND_P2P || e.refused_channel.load(std::memory_order_relaxed) != 0;
    const uint32_t started = e.ch_started.load(std::memory_order_acquire);
    if (!incomplete_kind || e.op_stopped.load(std::memory_order_acquire) == 0 || started == 0 ||
        e.ch_stopped.load(std::memory_order_acquire) != started ||
        (e.ch_mask.load(std::memory_order_acquire) & (uint64_t{1} << ch)) == 0)
      continue;
    uint32_t st = kActive;
    if (e.ordinal.load(std::memory_order_acquire) != k ||
        !e.state.compare_exchange_strong(st, kWriting, std::memory_order_acq_rel))
      continue;
    WriteSlot(c, e, ITHBAT_NCCL_FLAG_CLOSED_BY_NEXT);
    e.state.store(kFree, std::memory_order_release);
  }
}

void* StartKernelCh(void* parent, uint8_t channel, uint64_t ptimer) {
  const auto h = reinterpret_cast<uint64_t>(parent);
  if (h == 0 || (h & 3) != kKindOp) {
    Count(&IthbatNcclRingHeader::dropped_bad_input);
    return nullptr;
  }
  Context* c = nullptr;
  OpSlot* s = Lookup(h, nullptr, &c);
  if (s == nullptr) return nullptr;
  if (channel >= kMaxChannels) {
    s->refused_channel.store(1, std::memory_order_relaxed);
    Count(&IthbatNcclRingHeader::dropped_bad_input);
    return nullptr;
  }
  s->ch_mask.fetch_or(uint64_t{1} << channel, std::memory_order_acq_rel);
  // More channels than announced: each extra one holds the operation open too.
  if (s->ch_started.fetch_add(1, std::memory_order_acq_rel) >= s->expected_channels)
    s->pending.fetch_add(1, std::memory_order_acq_rel);
  uint64_t cur = s->gpu_start.load(std::memory_order_relaxed);
  while (ptimer != 0 && ptimer < cur &&
         !s->gpu_start.compare_exchange_weak(cur, ptimer, std::memory_order_acq_rel)) {
  }
  CloseEarlier(c, s->ordinal.load(std::memory_order_acquire), channel);
  return reinterpret_cast<void*>((h & ~(uint64_t{3} | (uint64_t{0xff} << 22))) | kKindKernelCh |
                                 (uint64_t{channel} << 22));
}

void KernelChStopTime(void* handle, uint64_t ptimer) {
  const auto h = reinterpret_cast<uint64_t>(handle);
  if (h == 0 || (h & 3) != kKindKernelCh) return;
  Context* c = nullptr;
  OpSlot* s = Lookup(h, nullptr, &c);
  if (s == nullptr) return;
  if (s->clock_sampled.exchange(1, std::memory_order_relaxed) == 0) SampleClock(c, ptimer);
  uint64_t cur = s->gpu_stop.load(std::memory_order_relaxed);
  while (ptimer > cur && !s->gpu_stop.compare_exchange_weak(cur, ptimer, std::memory_order_acq_rel)) {
  }
}

ncclResult_t StopEvent(void* handle) {
  const auto h = reinterpret_cast<uint64_t>(handle);
  if (h == 0) return kSuccess;  // an event we did not start
  const uint64_t kind = h & 3;
  if (kind != kKindOp && kind != kKindKernelCh) {
    Count(&IthbatNcclRingHeader::dropped_bad_input);
    return kSuccess;
  }
  Context* c = nullptr;
  OpSlot* s = Lookup(h, nullptr, &c);
  if (s == nullptr) return kSuccess;
  if (kind == kKindKernelCh) {
    s->ch_stopped.fetch_add(1, std::memory_order_acq_rel);
  } else {
    s->op_stopped.store(1, std::memory_order_release);
  }
  Release(c, *s);
  return kSuccess;
}

ncclResult_t RecordEventState(void* handle, ncclProfilerEventState_t state,
                              ncclProfilerEventStateArgs_v4_t* args) {
  if (handle == nullptr) return kSuccess;
  if (state == ncclProfilerKernelChStop) {
    if (args == nullptr) {
      Count(&IthbatNcclRingHeader::dropped_bad_input);
      return kSuccess;
    }
    KernelChStopTime(handle, args->kernelCh.pTimer);
  }
  return kSuccess;
}

void LogLine(ncclDebugLogger_t log, const char* what, uint64_t comm, int rank, int nranks) {
  if (log == nullptr) return;
  constexpr ncclDebugLogLevel kInfo = 3;    // NCCL_LOG_INFO
  constexpr unsigned long kInitSubsys = 1;  // NCCL_INIT
  log(kInfo, kInitSubsys, __FILE__, __LINE__, "PROFILER/ithbat: %s comm %lx rank %d/%d", what,
      static_cast<unsigned long>(comm), rank, nranks);
}

constexpr int kMask = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;

// Every member is trivially destructible (atomics, PODs): freeing the memory is enough.
void FreeContext(Context* c) {
  std::free(c->slots);
  std::free(c);
}

ncclResult_t Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int nnodes, int nranks,
                  int rank, ncclDebugLogger_t log) {
  (void)comm_name;
  (void)nnodes;
  if (context == nullptr || mask == nullptr) return kSystemError;
  *context = nullptr;
  Global& g = G();
  Lock lock(&g.mu);
  if (!OpenRing()) return kSystemError;  // NCCL disables the plugin: the job goes on
  int free_index = -1;
  for (int i = 0; i < kMaxComms; ++i) {
    if (g.comms[i].load(std::memory_order_relaxed) == nullptr) {
      free_index = i;
      break;
    }
  }
  if (free_index < 0) {
    Count(&IthbatNcclRingHeader::comms_refused);
    return kSystemError;
  }
  if (Context* old = g.retired[free_index]; old != nullptr) {
    FreeContext(old);
    g.retired[free_index] = nullptr;
  }
  // calloc + placement new: the plugin links no C++ runtime (it must load into any container).
  void* cmem = std::calloc(1, sizeof(Context));
  void* smem = std::calloc(g.pool, sizeof(OpSlot));
  Context* c = cmem != nullptr ? new (cmem) Context() : nullptr;
  OpSlot* slots = nullptr;
  if (smem != nullptr) {
    slots = static_cast<OpSlot*>(smem);
    for (uint32_t i = 0; i < g.pool; ++i) new (&slots[i]) OpSlot();
  }
  if (c == nullptr || slots == nullptr) {
    std::free(cmem);
    std::free(smem);
    Count(&IthbatNcclRingHeader::comms_refused);
    return kSystemError;
  }
  // Generations start per communicator at a fresh epoch: a handle of a finalized communicator
  // whose index was reused cannot match a new one's slot.
  const uint32_t base = ++g.epoch << 16;
  for (uint32_t i = 0; i < g.pool; ++i) slots[i].gen.store(base, std::memory_order_relaxed);
  c->index = static_cast<uint32_t>(free_index);
  c->comm_id = comm_id;
  c->rank = rank;
  c->nranks = nranks;
  c->pool = g.pool;
  c->slots = slots;
  g.comms[free_index].store(c, std::memory_order_release);
  *mask = kMask;
  *context = c;
  Count(&IthbatNcclRingHeader::comms);
  LogLine(log, "init", comm_id, rank, nranks);
  return kSuccess;
}

ncclResult_t Finalize(void* context) {
  auto* c = static_cast<Context*>(context);
  if (c == nullptr) return kSuccess;
  Global& g = G();
  Lock lock(&g.mu);
  if (c->index >= kMaxComms || g.comms[c->index].load() != c) return kSuccess;
  // What is still open was enqueued but never saw its kernels finish: write it as evicted.
  for (uint32_t i = 0; i < c->pool; ++i) {
    uint32_t st = kActive;
    if (c->slots[i].state.compare_exchange_strong(st, kWriting, std::memory_order_acq_rel)) {
      WriteSlot(c, c->slots[i], ITHBAT_NCCL_FLAG_EVICTED);
      Count(&IthbatNcclRingHeader::evicted);
      c->slots[i].state.store(kFree, std::memory_order_release);
    }
  }
  g.comms[c->index].store(nullptr, std::memory_order_release);
  // Not freed yet: a proxy thread may still be inside an event of this communicator. Freed when
  // the index is reused by a later init; a late handle then finds another generation (stale).
  g.retired[c->index] = c;
  return kSuccess;
}

ncclResult_t InitV4(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int nnodes,
                    int nranks, int rank, ncclDebugLogger_t log) {
  return Init(context, comm_hash, mask, comm_name, nnodes, nranks, rank, log);
}

template <class Descr>
ncclResult_t StartCommon(void* context, void** handle, Descr* d, uint64_t type) {
  if (handle == nullptr) return kSuccess;
  *handle = nullptr;
  auto* c = static_cast<Context*>(context);
  if (c == nullptr || d == nullptr) {
    Count(&IthbatNcclRingHeader::dropped_bad_input);
    return kSuccess;
  }
  switch (type) {
    case ncclProfileColl:
      *handle = StartOp(c, d->rank,
                        OpArgs{ITHBAT_NCCL_KIND_COLL, d->coll.seqNumber, d->coll.func, d->coll.datatype,
                               d->coll.count, d->coll.root, d->coll.nChannels});
      break;
    case ncclProfileP2p:
      *handle = StartOp(c, d->rank,
                        OpArgs{ITHBAT_NCCL_KIND_P2P, c->p2p_seq.fetch_add(1, std::memory_order_relaxed),
                               d->p2p.func, d->p2p.datatype, d->p2p.count, d->p2p.peer, d->p2p.nChannels});
      break;
    case ncclProfileKernelCh:
      *handle = StartKernelCh(d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
      break;
    default:
      break;  // events we did not ask for (NCCL may still send Group events): no handle
  }
  return kSuccess;
}

ncclResult_t StartV4(void* context, void** handle, ncclProfilerEventDescr_v4_t* d) {
  return StartCommon(context, handle, d, d != nullptr ? d->type : 0);
}
ncclResult_t StartV5(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  return StartCommon(context, handle, d, d != nullptr ? d->type : 0);
}

}  // namespace

}  // namespace ithbat::nccl_profiler

using namespace ithbat::nccl_profiler;  // NOLINT(google-build-using-namespace): the export table

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): the names NCCL looks up.
__attribute__((visibility("default")))
ncclProfiler_v6_t ncclProfiler_v6 = {"ithbat", Init, StartV5, StopEvent, RecordEventState, Finalize};
__attribute__((visibility("default")))
ncclProfiler_v5_t ncclProfiler_v5 = {"ithbat", Init, StartV5, StopEvent, RecordEventState, Finalize};
__attribute__((visibility("default")))
ncclProfiler_v4_t ncclProfiler_v4 = {"ithbat", InitV4, StartV4, StopEvent, RecordEventState, Finalize};
// NOLINTEND(readability-identifier-naming)
}
