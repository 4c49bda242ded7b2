// A fake libcuda.so.1: the driver-API subset of cuda_abi.h, with a small simulated GPU behind it
// so that host-side behaviour a probe sees is the real one — launches return at once and queue
// up, synchronising calls block until the simulated work is done, a full launch queue blocks
// the launcher, and completed work shows on the fake state's GPU timeline (so the fake NVML's
// utilisation follows what the program did).
//
// The engine: every stream is a FIFO of work items (kernel, copy, event marker, event wait,
// external work such as an NCCL collective). An item starts when the item before it on its
// stream is done, it has been enqueued, and (wait, external) its dependency is met; it ends
// `duration` later. Times are CLOCK_REALTIME ns, like the fake state. One engine thread per
// process completes items when the wall clock passes their end, wakes waiters, and writes busy
// intervals, at most every kLazySleepNs; a thread that waits (sync, full launch queue) advances
// the engine itself, waking exactly when the work it waits for is due. A launch wakes the engine
// thread only when it is idle: a launch costs a lock and a push, not a thread wake-up. Streams
// of a device run concurrently; the legacy default stream does not implicitly synchronise with
// other streams (a simplification the probes cannot see).
//
// How long work takes: a kernel kernel_ns + ns_per_block × blocks, a graph graph_ns (cuda_abi.h,
// IthbatFakeCudaCosts), both stretched by the device's max SM clock / current SM clock, which a
// launch re-reads from the fake state (ComputeDerived: clock cap, power capping, thermal) at
// most every 100 ms — so a capped or hot GPU runs its kernels slower and its rank becomes a
// straggler by itself. What a kernel does (tensor pipes or memory) comes from its name
// (cuda_abi.h, ClassifyKernel) and is written to the timeline with its busy time.
//
// One mutex guards everything (the engine, handles, allocations); calls are short. Globals are
// leaked on purpose: the engine thread may still run while the process exits.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "collect/gpu/nvml_abi.h"
#include "fake_cuda/cuda_abi.h"
#include "fake_state/fake_state.h"
#include "fake_state/host_pid.h"

// The opaque handle types (NVIDIA's names), defined only here.
// NOLINTBEGIN(readability-identifier-naming)
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUfunc_st {
  uint32_t magic;
  CUmod_st* module;
  char name[128];
  // From the full name (ithbat::sim::cuda::ClassifyKernel): shares of the kernel's SM share.
  float tensor = 0.5f;
  float dram = 0.3f;
};
// Modules and their functions stay allocated (and reachable) after unload, so a stale handle is
// rejected by its magic instead of being a use-after-free.
struct CUmod_st {
  uint32_t magic;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};
// NOLINTEND(readability-identifier-naming)

namespace ithbat::sim::fake_cuda {
namespace {

constexpr uint32_t kCtxMagic = 0x43435458;     // "CCTX"
constexpr uint32_t kStreamMagic = 0x43535452;  // "CSTR"
constexpr uint32_t kEventMagic = 0x43455654;   // "CEVT"
constexpr uint32_t kModuleMagic = 0x434d4f44;  // "CMOD"
constexpr uint32_t kFuncMagic = 0x43465543;    // "CFUC"
constexpr uint32_t kQueueDepth = ITHBAT_FAKE_CUDA_QUEUE_DEPTH;
constexpr uint32_t kQueueRefill = 32;            // a blocked launch returns when this many slots are free
// The engine thread's step while work is pending: completions nobody waits for are noticed this
// late (busy intervals are written up to kMaxIntervalNs late anyway, and waiters advance the
// engine themselves at the time they predict). 1 ms made it the busiest thread of a rank.
constexpr int64_t kLazySleepNs = 4'000'000;
// External work (an NCCL collective waiting for its peers) is polled first after kPollNs, then
// twice as long after each miss up to kPollMaxNs: the item's start is the time its peers were
// ready whenever the poll notices it, so this bounds only how late the host sees it end, and a
// 30 ms wait for a late peer costs ~35 wake-ups instead of 150.
constexpr int64_t kPollNs = 200'000;
constexpr int64_t kPollMaxNs = 1'000'000;
constexpr int64_t kMergeGapNs = 1'000'000;        // busy stretches closer than this become one interval
constexpr int64_t kMaxIntervalNs = 50'000'000;    // ... at most this long (4096 of them ≈ 200 s)
constexpr int64_t kPartialFlushNs = 50'000'000;   // long-running work is written while it runs
constexpr uint64_t kContextBytes = 512ULL << 20;  // what a context costs on the device (NVML shows it)
constexpr uint64_t kAllocAlign = 512;
constexpr CUdeviceptr kDeviceBase = 0x200000000000ULL;  // device i owns [base + i<<40, base + (i+1)<<40)
constexpr int kDefaultDriverVersion = 13000;
constexpr int64_t kClockRefreshNs = 100'000'000;  // a launch re-reads its device's SM clock this often

int64_t NowNs() { return RealtimeNs(); }

enum class ItemKind : uint8_t { kKernel, kCopy, kMarker, kWait, kExternal };

struct Item {
  ItemKind kind = ItemKind::kKernel;
  bool reached = false;
  bool started = false;
  bool busy = false;  // shows on the GPU timeline
  int64_t enqueue_ns = 0;
  int64_t duration_ns = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t timeline_from_ns = 0;  // busy time written up to here
  int64_t poll_ns = 0;           // external: the next poll's spacing (kPollNs doubling to kPollMaxNs)
  int64_t next_poll_ns = 0;      // external: not polled again before this
  float sm = 0, tensor = 0, dram = 0;
  CUevent_st* event = nullptr;  // marker: the recorded event; wait: the awaited one
  uint64_t event_gen = 0;
  IthbatFakeCudaExternalWork ext{};
};

struct OpenInterval {
  bool open = false;
  int64_t start_ns = 0, end_ns = 0;
  double sm_ns = 0, tensor_ns = 0, dram_ns = 0;
};

struct Device {
  uint32_t state_gpu = 0;  // index in the fake state
  bool has_state = false;
  std::string name;
  CUuuid uuid{};
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  std::string pci_bus_id;
  uint32_t pci_domain = 0, pci_bus = 0, pci_device = 0;
  uint32_t pending = 0;
  CUctx_st* primary = nullptr;
  bool process_registered = false;
  CUdeviceptr next_addr = 0;
  OpenInterval interval;
  // Max SM clock / current SM clock (≥ 1), re-read from the fake state at most every
  // kClockRefreshNs; clock_read_ns 0 = never read (or dropped by ithbat_fake_cuda_refresh_clocks).
  double stretch = 1.0;
  int64_t clock_read_ns = 0;
};

}  // namespace
}  // namespace ithbat::sim::fake_cuda

// NOLINTBEGIN(readability-identifier-naming)
struct CUctx_st {
  uint32_t magic = ithbat::sim::fake_cuda::kCtxMagic;
  int device = 0;
  bool primary = false;
  int primary_refs = 0;
  bool destroyed = false;
  CUstream_st* legacy = nullptr;
  uint64_t id = 0;
};
struct CUstream_st {
  uint32_t magic = ithbat::sim::fake_cuda::kStreamMagic;
  CUctx_st* ctx = nullptr;
  int device = 0;
  unsigned flags = 0;
  bool destroyed = false;
  bool active = false;
  std::deque<ithbat::sim::fake_cuda::Item> items;
  int64_t last_end_ns = 0;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  std::weak_ptr<CUstream_st> self;
};
struct CUevent_st {
  uint32_t magic = ithbat::sim::fake_cuda::kEventMagic;
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  bool destroyed = false;
  uint32_t refs = 0;  // markers and waits still pending
  uint64_t recorded_gen = 0;
  uint64_t completed_gen = 0;
  int64_t completed_ns = 0;
  // Where the latest recorded marker is (a synchronising waiter predicts when it completes).
  std::weak_ptr<CUstream_st> marker_stream;
  uint64_t marker_position = 0;
};
// NOLINTEND(readability-identifier-naming)

namespace ithbat::sim::fake_cuda {
namespace {

using StreamPtr = std::shared_ptr<CUstream_st>;

struct Allocation {
  size_t bytes;
  int device;
};

struct Driver {
  std::mutex mu;
  std::condition_variable engine_cv;  // wakes the engine
  std::condition_variable done_cv;    // wakes waiters: something completed
  bool initialized = false;
  bool engine_idle = false;
  int64_t engine_deadline_ns = 0;
  bool engine_kick = false;
  StateMapping* mapping = nullptr;  // null without a state file
  std::vector<Device> devices;
  std::vector<StreamPtr> active;                        // streams with pending items
  std::unordered_map<CUstream_st*, StreamPtr> streams;  // every live stream (owning)
  std::unordered_map<CUdeviceptr, Allocation> allocations;
  std::vector<std::unique_ptr<CUmod_st>> modules;
  std::vector<std::unique_ptr<CUctx_st>> created_contexts;  // destroyed ones too (see CUmod_st)
  uint64_t next_ctx_id = 1;
  IthbatFakeCudaCosts costs{};
  IthbatFakeCudaStats stats{};
  uint32_t pid = 0;
};

Driver* g = new Driver();           // leaked: see the file comment
std::atomic<bool> g_forked{false};  // CUDA is unusable in a child of an initialised process
std::atomic<int> g_driver_version{kDefaultDriverVersion};
std::atomic<uint64_t> g_internal_calls{0};

thread_local std::vector<CUctx_st*> t_ctx_stack;  // back() = current context
thread_local std::vector<std::pair<CUctx_st*, CUstream_st*>> t_per_thread;

double EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return (end != v && d >= 0 && d < 1e15) ? d : fallback;
}

CUctx_st* Current() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

bool ValidCtx(CUctx_st* c) { return c != nullptr && c->magic == kCtxMagic && !c->destroyed; }
bool ValidStream(CUstream_st* s) { return s != nullptr && s->magic == kStreamMagic && !s->destroyed; }
bool ValidEvent(CUevent_st* e) { return e != nullptr && e->magic == kEventMagic && !e->destroyed; }

// ---------------------------------------------------------------------------------------------
// Fake-state bookkeeping (under g->mu).

void FlushInterval(Device& d) {
  OpenInterval& o = d.interval;
  if (!o.open) return;
  o.open = false;
  if (!d.has_state || g->mapping == nullptr || o.end_ns <= o.start_ns) return;
  const double len = static_cast<double>(o.end_ns - o.start_ns);
  auto share = [len](double v) { return static_cast<float>(std::clamp(v / len, 0.0, 1.0)); };
  AppendInterval(
      g->mapping->layout()->gpus[d.state_gpu],
      BusyInterval{o.start_ns, o.end_ns, g->pid, share(o.sm_ns), share(o.tensor_ns), share(o.dram_ns)});
  ++g->stats.intervals_written;
}

void AddBusy(Device& d, int64_t from, int64_t to, float sm, float tensor, float dram) {
  if (to <= from) return;
  OpenInterval& o = d.interval;
  if (o.open && from <= o.end_ns + kMergeGapNs &&
      std::max(to, o.end_ns) - std::min(from, o.start_ns) <= kMaxIntervalNs) {
    o.start_ns = std::min(o.start_ns, from);
    o.end_ns = std::max(o.end_ns, to);
  } else {
    FlushInterval(d);
    o = OpenInterval{true, from, to, 0, 0, 0};
  }
  const double len = static_cast<double>(to - from);
  o.sm_ns += len * sm;
  o.tensor_ns += len * tensor;
  o.dram_ns += len * dram;
}

// The process shows in NVML's compute-process list while it has a context on the GPU.
void UpdateProcess(Device& d, bool present) {
  if (!d.has_state || g->mapping == nullptr) return;
  const uint32_t pid = g->pid;
  const uint64_t used = d.memory_used + kContextBytes;
  ModifyConfig(g->mapping->layout()->gpus[d.state_gpu], [&](GpuConfig& c) {
    uint32_t i = 0;
    while (i < c.process_count && c.processes[i].pid != pid) ++i;
    if (!present) {
      if (i < c.process_count) {
        c.processes[i] = c.processes[c.process_count - 1];
        c.processes[--c.process_count] = ProcessEntry{};
      }
      return;
    }
    if (i == c.process_count) {
      if (c.process_count >= kMaxProcesses) return;
      ++c.process_count;
    }
    c.processes[i] = ProcessEntry{pid, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, used};
  });
  d.process_registered = present;
}

void AtExit() {
  if (g_forked.load()) return;
  std::unique_lock<std::mutex> lock(g->mu, std::try_to_lock);
  if (!lock.owns_lock() || !g->initialized) return;
  for (Device& d : g->devices) {
    FlushInterval(d);
    if (d.process_registered) UpdateProcess(d, false);
  }
}

// ---------------------------------------------------------------------------------------------
// The engine (under g->mu).

void Release(CUevent_st* e) {
  if (--e->refs == 0 && e->destroyed) delete e;
}

// Starts the head item if it can start; false while it waits on something.
bool TryStart(CUstream_st* s, Item& it, int64_t now, int64_t* next) {
  if (it.started) return true;
  const int64_t base = std::max(s->last_end_ns, it.enqueue_ns);
  switch (it.kind) {
    case ItemKind::kKernel:
    case ItemKind::kCopy:
    case ItemKind::kMarker:
      it.start_ns = base;
      break;
    case ItemKind::kWait:
      if (it.event->completed_gen < it.event_gen) return false;  // its marker completes later
      it.start_ns = std::max(base, it.event->completed_ns);
      break;
    case ItemKind::kExternal: {
      if (!it.reached) {
        it.reached = true;
        it.timeline_from_ns = base;
        if (it.ext.on_reach != nullptr) it.ext.on_reach(it.ext.ctx, base);
      }
      int64_t ready = base;
      if (it.ext.poll != nullptr) {
        if (now < it.next_poll_ns) {
          *next = std::min(*next, it.next_poll_ns);
          return false;
        }
        if (it.ext.poll(it.ext.ctx, &ready) == 0) {
          it.poll_ns = it.poll_ns == 0 ? kPollNs : std::min(2 * it.poll_ns, kPollMaxNs);
          it.next_poll_ns = now + it.poll_ns;
          *next = std::min(*next, it.next_poll_ns);
          return false;
        }
      }
      it.start_ns = std::max(base, ready);
      it.started = true;
      if (it.ext.on_start != nullptr) {
        const int64_t ns = it.ext.on_start(it.ext.ctx, it.start_ns);
        if (ns >= 0) it.duration_ns = ns;
      }
      it.end_ns = it.start_ns + it.duration_ns;
      return true;
    }
  }
  it.started = true;
  it.timeline_from_ns = it.start_ns;
  it.end_ns = it.start_ns + it.duration_ns;
  return true;
}

void Complete(CUstream_st* s, Item& it) {
  Device& d = g->devices[s->device];
  s->last_end_ns = it.end_ns;
  ++s->completed;
  --d.pending;
  ++g->stats.items_completed;
  if (it.busy) AddBusy(d, it.timeline_from_ns, it.end_ns, it.sm, it.tensor, it.dram);
  switch (it.kind) {
    case ItemKind::kMarker:
      it.event->completed_gen = std::max(it.event->completed_gen, it.event_gen);
      it.event->completed_ns = it.end_ns;
      Release(it.event);
      break;
    case ItemKind::kWait:
      Release(it.event);
      break;
    case ItemKind::kExternal:
      if (it.ext.on_complete != nullptr) it.ext.on_complete(it.ext.ctx, it.end_ns);
      break;
    default:
      break;
  }
  if (d.pending == 0) FlushInterval(d);  // idle: the stretch is over
}

// Completes everything due at `now`; returns whether anything completed and lowers *next to the
// next time something is due.
bool Advance(int64_t now, int64_t* next) {
  bool any = false;
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < g->active.size();) {
      CUstream_st* s = g->active[i].get();
      while (!s->items.empty()) {
        Item& it = s->items.front();
        if (!TryStart(s, it, now, next)) {
          if (it.kind == ItemKind::kExternal && it.busy && now - it.timeline_from_ns >= kPartialFlushNs) {
            AddBusy(g->devices[s->device], it.timeline_from_ns, now, it.sm, it.tensor, it.dram);
            it.timeline_from_ns = now;
          }
          break;
        }
        if (it.end_ns > now) {
          *next = std::min(*next, it.end_ns);
          if (it.busy && it.start_ns <= now && now - it.timeline_from_ns >= kPartialFlushNs) {
            AddBusy(g->devices[s->device], it.timeline_from_ns, now, it.sm, it.tensor, it.dram);
            it.timeline_from_ns = now;
          }
          if (it.busy) *next = std::min(*next, it.timeline_from_ns + kPartialFlushNs);
          break;
        }
        Complete(s, it);
        s->items.pop_front();
        any = progress = true;
      }
      if (s->items.empty()) {
        s->active = false;
        g->active[i] = std::move(g->active.back());
        g->active.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (Device& d : g->devices) {
    if (!d.interval.open) continue;
    if (now > d.interval.end_ns + kMergeGapNs) {
      FlushInterval(d);
    } else {
      *next = std::min(*next, d.interval.end_ns + kMergeGapNs + 1);
    }
  }
  return any;
}

void EngineLoop() {
  std::unique_lock<std::mutex> lock(g->mu);
  for (;;) {
    const int64_t now = NowNs();
    int64_t next = INT64_MAX;
    if (Advance(now, &next)) g->done_cv.notify_all();
    g->engine_kick = false;
    if (next == INT64_MAX) {
      g->engine_idle = true;
      g->engine_cv.wait(lock, [] { return g->engine_kick; });
      g->engine_idle = false;
    } else {
      // Waiting threads advance the engine themselves (HelpUntil): this pass is for nobody.
      const int64_t sleep_ns = std::max(next - now, kLazySleepNs);
      g->engine_deadline_ns = now + sleep_ns;
      g->engine_cv.wait_for(lock, std::chrono::nanoseconds(sleep_ns), [] { return g->engine_kick; });
      g->engine_deadline_ns = 0;
    }
  }
}

// When stream `s` will have completed its first `position` items, as far as that is decided now.
// Kernels, copies and markers run back to back for a fixed time once the item before them ends,
// so a chain of them is known to the nanosecond; a wait on an event that has not completed, or
// external work (an NCCL collective waiting for its peers), is not: then `exact` is false and
// `at` is when the stream reaches that item.
struct Due {
  int64_t at = 0;
  bool exact = false;
};
Due PredictCompletion(const CUstream_st* s, uint64_t position, int depth = 0) {
  int64_t t = s->last_end_ns;
  uint64_t pos = s->completed;
  for (const Item& it : s->items) {
    if (pos >= position) break;
    ++pos;
    if (it.started) {
      t = it.end_ns;
      continue;
    }
    const int64_t base = std::max(t, it.enqueue_ns);
    switch (it.kind) {
      case ItemKind::kKernel:
      case ItemKind::kCopy:
      case ItemKind::kMarker:
        t = base + it.duration_ns;
        break;
      case ItemKind::kWait: {
        int64_t ready = it.event->completed_ns;
        if (it.event->completed_gen < it.event_gen) {
          // Its marker is on another stream (the optimizer waiting for the reduced gradients):
          // predict that one, a few levels deep at most (a cycle cannot form, but a bound is cheap).
          const StreamPtr marker = it.event->marker_stream.lock();
          if (depth >= 3 || !marker || marker.get() == s || it.event->recorded_gen != it.event_gen) return {base, false};
          const Due d = PredictCompletion(marker.get(), it.event->marker_position, depth + 1);
          if (!d.exact) return {std::max(base, d.at), false};
          ready = d.at;
        }
        t = std::max(base, ready) + it.duration_ns;
        break;
      }
      case ItemKind::kExternal:
        return {base, false};
    }
  }
  return {t, true};
}

// Blocks until `pred` holds. The waiting thread advances the engine itself. It sleeps until
// `due()` says the awaited work ends (one wake-up for a whole chain of kernels: a sync after a
// step of 2,000 kernels used to wake at every kernel's end, which on a 2-core machine running 16
// ranks was most of the simulator's CPU), or, while that depends on something not yet decided,
// until the next completion or poll is due; a notification (another thread's progress) wakes it
// early to look again. Simulated times do not depend on when anyone wakes: an item starts when
// the one before it ended, whenever that is noticed.
template <class Pred, class DueFn>
void HelpUntil(std::unique_lock<std::mutex>& lock, Pred pred, DueFn due) {
  while (!pred()) {
    const int64_t now = NowNs();
    int64_t next = INT64_MAX;
    if (Advance(now, &next)) g->done_cv.notify_all();
    if (pred()) break;
    int64_t wake = next;
    if (const Due d = due(); d.exact || d.at > now) wake = d.at;
    // next is finite whenever work is pending; the bound only guards against a missed case.
    const int64_t sleep_ns = wake == INT64_MAX ? kLazySleepNs : std::max<int64_t>(wake - now, 1000);
    g->done_cv.wait_for(lock, std::chrono::nanoseconds(sleep_ns));
  }
}

// No prediction: wake at every completion or poll (a wait on several streams).
Due NoDue() { return {0, false}; }

// The last of several streams' completions: exact when every chain is.
Due PredictAll(const std::vector<std::pair<StreamPtr, uint64_t>>& waits) {
  Due all{0, true};
  for (const auto& [stream, position] : waits) {
    if (stream->completed >= position) continue;
    const Due d = PredictCompletion(stream.get(), position);
    if (!d.exact) return {d.at, false};
    all.at = std::max(all.at, d.at);
  }
  return all;
}

template <class Pred, class DueFn>
void WaitDone(std::unique_lock<std::mutex>& lock, Pred pred, DueFn due) {
  if (pred()) return;
  ++g->stats.syncs_waiting;
  HelpUntil(lock, pred, due);
  --g->stats.syncs_waiting;
}

// Until `s` has completed `position` items.
void WaitStream(std::unique_lock<std::mutex>& lock, const StreamPtr& s, uint64_t position) {
  WaitDone(lock, [&] { return s->completed >= position; }, [&] { return PredictCompletion(s.get(), position); });
}

// Queues an item on `s`, blocking while the device's queue is full. Returns the item's position
// (s->enqueued after the push) for waiters.
uint64_t Push(std::unique_lock<std::mutex>& lock, CUstream_st* s, Item&& it) {
  Device& d = g->devices[s->device];
  if (d.pending >= kQueueDepth) {
    ++g->stats.launches_blocked_total;
    ++g->stats.launches_blocked;
    // Blocked until kQueueRefill slots are free, not one: the launcher then pushes that many at
    // once instead of waking at every kernel's end (the driver also frees push-buffer space as
    // the GPU's get pointer moves over many entries, not per kernel).
    const uint32_t low = kQueueDepth - kQueueRefill;
    HelpUntil(
        lock, [&] { return d.pending <= low; },
        [&] {
          const uint64_t need = d.pending - low;  // completions still to come (this stream first)
          return s->items.size() >= need ? PredictCompletion(s, s->completed + need) : NoDue();
        });
    --g->stats.launches_blocked;
  }
  it.enqueue_ns = NowNs();
  const int64_t earliest_end = std::max(it.enqueue_ns, s->last_end_ns) + it.duration_ns;
  s->items.push_back(std::move(it));
  ++s->enqueued;
  ++d.pending;
  ++g->stats.items_enqueued;
  g->stats.pending_max = std::max<uint64_t>(g->stats.pending_max, d.pending);
  if (!s->active) {
    s->active = true;
    g->active.push_back(s->self.lock());
  }
  // Wake the engine only when it would otherwise sleep well past this item.
  if (g->engine_idle || (g->engine_deadline_ns != 0 && g->engine_deadline_ns > earliest_end + kLazySleepNs)) {
    g->engine_kick = true;
    g->engine_cv.notify_one();
  }
  return s->enqueued;
}

// Blocks until `pred` holds (the engine notifies done_cv on every completion).
// ---------------------------------------------------------------------------------------------
// Handles (under g->mu).

CUstream_st* NewStream(CUctx_st* ctx, unsigned flags) {
  auto s = std::make_shared<CUstream_st>();
  s->ctx = ctx;
  s->device = ctx->device;
  s->flags = flags;
  s->self = s;
  CUstream_st* raw = s.get();
  g->streams.emplace(raw, std::move(s));
  return raw;
}

CUctx_st* NewContext(int device, bool primary) {
  g->created_contexts.push_back(std::make_unique<CUctx_st>());
  CUctx_st* c = g->created_contexts.back().get();
  c->device = device;
  c->primary = primary;
  c->id = g->next_ctx_id++;
  c->legacy = NewStream(c, CU_STREAM_DEFAULT);
  Device& d = g->devices[device];
  if (!d.process_registered) UpdateProcess(d, true);
  return c;
}

// Resolves a stream argument. `per_thread`: the _ptsz/_ptds variants, where NULL is the calling
// thread's per-thread default stream (for the others NULL is the legacy default stream).
CUresult ResolveStream(CUstream h, bool per_thread, CUstream_st** out) {
  if (h != nullptr && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
    if (!ValidStream(h) || !ValidCtx(h->ctx)) return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
  }
  CUctx_st* ctx = Current();
  if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  const bool thread_stream = h == CU_STREAM_PER_THREAD || (h == nullptr && per_thread);
  if (!thread_stream) {
    *out = ctx->legacy;
    return CUDA_SUCCESS;
  }
  for (auto& [c, s] : t_per_thread) {
    if (c == ctx && ValidStream(s)) {
      *out = s;
      return CUDA_SUCCESS;
    }
  }
  CUstream_st* s = NewStream(ctx, CU_STREAM_DEFAULT);
  t_per_thread.emplace_back(ctx, s);
  *out = s;
  return CUDA_SUCCESS;
}

bool DeviceAddress(CUdeviceptr p) {
  return p >= kDeviceBase && p < kDeviceBase + (static_cast<CUdeviceptr>(kMaxGpus) << 40);
}

int64_t CopyNs(size_t bytes, bool d2d) {
  const double gbps = d2d ? g->costs.d2d_gbps : g->costs.copy_gbps;
  if (gbps <= 0) return 0;
  return static_cast<int64_t>(static_cast<double>(bytes) / gbps);  // GB/s = B/ns
}

// How much longer than at full clock a kernel launched on `d` now takes (see Device::stretch).
// ComputeDerived scans the timeline, so it runs once per kClockRefreshNs, not per launch.
double ClockStretch(Device& d, int64_t now) {
  if (!d.has_state || g->mapping == nullptr) return 1.0;
  if (d.clock_read_ns != 0 && now - d.clock_read_ns < kClockRefreshNs && now >= d.clock_read_ns)
    return d.stretch;
  d.clock_read_ns = now;
  ++g->stats.clock_refreshes;
  const FakeStateLayout& layout = *g->mapping->layout();
  const GpuSlot& slot = layout.gpus[d.state_gpu];
  GpuConfig c;
  Derived derived;
  if (!ReadConfig(slot, &c) || !ComputeDerived(layout, slot, c, now, &derived)) return d.stretch;
  const double max_clock = c.max_clock_mhz[nvml::NVML_CLOCK_SM];
  if (max_clock <= 0) return d.stretch = 1.0;
  double clock = derived.sm_clock_mhz;
  if (derived.util_busy <= 0) {
    // Idle (or its work not yet written): NVML reports the idle clock, but the GPU clocks up as
    // soon as work arrives. Run at the busy clock ComputeDerived would give, less the power cap
    // (no power is drawn yet; the next refresh sees it): thermal slowdown and the cap still hold.
    clock = max_clock;
    if (derived.clock_event_reasons & nvml::nvmlClocksEventReasonSwThermalSlowdown) clock *= 0.85;
    if (derived.clock_event_reasons &
        (nvml::nvmlClocksThrottleReasonHwSlowdown | nvml::nvmlClocksThrottleReasonHwThermalSlowdown |
         nvml::nvmlClocksThrottleReasonHwPowerBrakeSlowdown)) {
      clock *= 0.5;
    }
    if (c.clock_cap_mhz != 0) clock = std::min(clock, static_cast<double>(c.clock_cap_mhz));
    clock = static_cast<double>(std::lround(clock));  // whole MHz, as ComputeDerived reports it
  }
  d.stretch = clock > 0 ? std::max(1.0, max_clock / clock) : 1.0;
  return d.stretch;
}

int64_t Stretched(int64_t ns, double stretch) {
  return static_cast<int64_t>(std::min(static_cast<double>(ns) * stretch, 1e15));
}

#define ENTER()                                                                    \
  if (g_forked.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED; \
  std::unique_lock<std::mutex> lock(g->mu);                                        \
  if (!g->initialized) return CUDA_ERROR_NOT_INITIALIZED

// ---------------------------------------------------------------------------------------------
// Shared implementations of the exported families.

CUresult LaunchImpl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, CUstream h, bool per_thread) {
  ENTER();
  if (f == nullptr || f->magic != kFuncMagic) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<uint64_t>(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  const uint64_t blocks = static_cast<uint64_t>(gx) * gy * gz;
  Item it;
  it.kind = ItemKind::kKernel;
  it.busy = true;
  const double per_block = static_cast<double>(g->costs.ns_per_block) * static_cast<double>(blocks);
  it.duration_ns = Stretched(g->costs.kernel_ns + static_cast<int64_t>(std::min(per_block, 1e13)),
                             ClockStretch(g->devices[s->device], NowNs()));
  // A grid that fills the GPU's 132 SMs keeps them all busy; tensor/DRAM follow the kernel's
  // class (from its name, cuda_abi.h ClassifyKernel).
  it.sm = static_cast<float>(std::min(1.0, static_cast<double>(blocks) / 132.0));
  it.tensor = it.sm * f->tensor;
  it.dram = it.sm * f->dram;
  Push(lock, s, std::move(it));
  return CUDA_SUCCESS;
}

CUresult LaunchExImpl(const CUlaunchConfig* config, CUfunction f, bool per_thread) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LaunchImpl(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                    config->blockDimY, config->blockDimZ, config->hStream, per_thread);
}

CUresult GraphLaunchImpl(CUgraphExec graph, CUstream h, bool per_thread) {
  ENTER();
  // No graph objects exist in the fake: any non-null handle is a graph of fixed cost.
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  Item it;
  it.kind = ItemKind::kKernel;
  it.busy = true;
  it.duration_ns = Stretched(g->costs.graph_ns, ClockStretch(g->devices[s->device], NowNs()));
  it.sm = 0.8f;
  it.tensor = 0.4f;
  it.dram = 0.3f;
  Push(lock, s, std::move(it));
  return CUDA_SUCCESS;
}

CUresult StreamSyncImpl(CUstream h, bool per_thread) {
  ENTER();
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  StreamPtr keep = s->self.lock();
  WaitStream(lock, keep, s->enqueued);
  return CUDA_SUCCESS;
}

CUresult StreamQueryImpl(CUstream h, bool per_thread) {
  ENTER();
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  return s->completed >= s->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult StreamWaitEventImpl(CUstream h, CUevent e, unsigned flags, bool per_thread) {
  ENTER();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidEvent(e)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  if (e->recorded_gen == 0) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  Item it;
  it.kind = ItemKind::kWait;
  it.event = e;
  it.event_gen = e->recorded_gen;
  ++e->refs;
  Push(lock, s, std::move(it));
  return CUDA_SUCCESS;
}

CUresult EventRecordImpl(CUevent e, CUstream h, bool per_thread) {
  ENTER();
  if (!ValidEvent(e)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  Item it;
  it.kind = ItemKind::kMarker;
  it.event = e;
  it.event_gen = ++e->recorded_gen;
  ++e->refs;
  e->marker_position = Push(lock, s, std::move(it));
  e->marker_stream = s->self;
  return CUDA_SUCCESS;
}

CUresult EventElapsedImpl(float* ms, CUevent a, CUevent b) {
  ENTER();
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidEvent(a) || !ValidEvent(b)) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (a->recorded_gen == 0 || b->recorded_gen == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (a->completed_gen < a->recorded_gen || b->completed_gen < b->recorded_gen) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(static_cast<double>(b->completed_ns - a->completed_ns) / 1e6);
  return CUDA_SUCCESS;
}

CUresult AllocImpl(CUdeviceptr* dptr, size_t bytes, CUstream h, bool stream_ordered, bool per_thread) {
  ENTER();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (stream_ordered) {
    CUstream_st* s = nullptr;
    if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
    device = s->device;
  } else {
    CUctx_st* ctx = Current();
    if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    device = ctx->device;
  }
  Device& d = g->devices[device];
  const size_t rounded = (bytes + kAllocAlign - 1) / kAllocAlign * kAllocAlign;
  if (rounded < bytes || d.memory_used + rounded + kContextBytes > d.memory_total)
    return CUDA_ERROR_OUT_OF_MEMORY;
  const CUdeviceptr base = kDeviceBase + (static_cast<CUdeviceptr>(device) << 40);
  if (d.next_addr - base + rounded >= (1ULL << 40)) return CUDA_ERROR_OUT_OF_MEMORY;  // no reuse of addresses
  *dptr = d.next_addr;
  d.next_addr += rounded;
  d.memory_used += rounded;
  g->allocations.emplace(*dptr, Allocation{rounded, device});
  if (d.process_registered) UpdateProcess(d, true);
  return CUDA_SUCCESS;
}

CUresult FreeImpl(CUdeviceptr p, CUstream h, bool stream_ordered, bool per_thread) {
  ENTER();
  if (stream_ordered) {
    CUstream_st* s = nullptr;
    if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  } else if (!ValidCtx(Current())) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (p == 0) return CUDA_SUCCESS;
  auto it = g->allocations.find(p);
  if (it == g->allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  Device& d = g->devices[it->second.device];
  d.memory_used -= it->second.bytes;
  g->allocations.erase(it);
  if (d.process_registered) UpdateProcess(d, true);
  return CUDA_SUCCESS;
}

// A copy on a stream; `blocking` copies (the non-Async API) return when it is done.
CUresult CopyImpl(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h, bool per_thread, bool blocking,
                  bool dst_device, bool src_device) {
  ENTER();
  if ((dst == 0 || src == 0) && bytes > 0) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(h, per_thread, &s); r != CUDA_SUCCESS) return r;
  Item it;
  it.kind = ItemKind::kCopy;
  it.duration_ns = CopyNs(bytes, dst_device && src_device);
  const uint64_t position = Push(lock, s, std::move(it));
  if (blocking) {
    WaitStream(lock, s->self.lock(), position);
  }
  return CUDA_SUCCESS;
}

CUresult CopyAuto(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h, bool per_thread) {
  return CopyImpl(dst, src, bytes, h, per_thread, false, DeviceAddress(dst), DeviceAddress(src));
}

// The function cuGetProcAddress returns for the documented triple instead of an export. Same
// behaviour as cuLaunchKernel_ptsz; noipa keeps the compiler from folding the two into one
// address (which would defeat its purpose).
__attribute__((noipa)) CUresult LaunchKernelPerThreadInternal(CUfunction f, unsigned gx, unsigned gy,
                                                              unsigned gz, unsigned bx, unsigned by,
                                                              unsigned bz, unsigned smem, CUstream h,
                                                              void** params, void** extra) {
  (void)smem;
  (void)params;
  (void)extra;
  g_internal_calls.fetch_add(1, std::memory_order_relaxed);
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, h, true);
}

// Device list: the fake state's GPUs (CUDA_VISIBLE_DEVICES honoured: indices or UUIDs, stopping
// at the first invalid entry as CUDA does), or ITHBAT_FAKE_CUDA_DEVICES anonymous H100s.
CUresult InitLocked() {
  g->pid = HostPid();
  g->costs.kernel_ns = static_cast<int64_t>(EnvDouble("ITHBAT_FAKE_CUDA_KERNEL_NS", 5000));
  g->costs.ns_per_block = static_cast<int64_t>(EnvDouble("ITHBAT_FAKE_CUDA_NS_PER_BLOCK", 0));
  g->costs.graph_ns = static_cast<int64_t>(EnvDouble("ITHBAT_FAKE_CUDA_GRAPH_NS", 100000));
  g->costs.copy_gbps = EnvDouble("ITHBAT_FAKE_CUDA_COPY_GBPS", 25);
  g->costs.d2d_gbps = EnvDouble("ITHBAT_FAKE_CUDA_D2D_GBPS", 1000);
  std::vector<Device> all;
  const char* path = std::getenv("ITHBAT_FAKE_STATE");
  if (path != nullptr && *path != '\0' && access(path, F_OK) == 0) {
    auto* mapping = new StateMapping();
    std::string error;
    if (!mapping->Open(path, &error)) {
      delete mapping;
      std::fprintf(stderr, "fake libcuda: %s\n", error.c_str());
      return CUDA_ERROR_NOT_INITIALIZED;
    }
    g->mapping = mapping;
    const FakeStateLayout* layout = mapping->layout();
    g_driver_version.store(layout->header.cuda_driver_version > 0 ? layout->header.cuda_driver_version
                                                                  : kDefaultDriverVersion);
    for (uint32_t i = 0; i < std::min(layout->header.gpu_count, kMaxGpus); ++i) {
      GpuConfig c;
      if (!ReadConfig(layout->gpus[i], &c)) return CUDA_ERROR_NOT_INITIALIZED;
      Device d;
      d.state_gpu = i;
      d.has_state = true;
      d.name.assign(c.name, strnlen(c.name, sizeof(c.name)));
      d.memory_total = c.memory_total_bytes;
      d.pci_bus_id.assign(c.pci_bus_id, strnlen(c.pci_bus_id, sizeof(c.pci_bus_id)));
      d.pci_domain = c.pci_domain;
      d.pci_bus = c.pci_bus;
      d.pci_device = c.pci_device;
      // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" -> 16 bytes.
      int n = 0;
      for (const char* p = c.uuid + (std::strncmp(c.uuid, "GPU-", 4) == 0 ? 4 : 0); *p && n < 32; ++p) {
        const char ch = *p;
        int v = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (v < 0) continue;
        d.uuid.bytes[n / 2] = static_cast<char>((n % 2 == 0) ? (v << 4) : (d.uuid.bytes[n / 2] | v));
        ++n;
      }
      all.push_back(std::move(d));
    }
  } else {
    const int n =
        std::clamp(static_cast<int>(EnvDouble("ITHBAT_FAKE_CUDA_DEVICES", 1)), 0, static_cast<int>(kMaxGpus));
    for (int i = 0; i < n; ++i) {
      Device d;
      d.state_gpu = static_cast<uint32_t>(i);
      d.name = "NVIDIA H100 80GB HBM3";
      d.memory_total = 81559U * (1ULL << 20);
      char bus[32];
      std::snprintf(bus, sizeof(bus), "00000000:%02X:00.0", 0x18 + i);
      d.pci_bus_id = bus;
      d.pci_bus = 0x18 + i;
      for (int b = 0; b < 16; ++b) d.uuid.bytes[b] = static_cast<char>(0x5a ^ (b * 17) ^ (i * 29));
      all.push_back(std::move(d));
    }
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    std::string list(visible, strnlen(visible, 1024));
    size_t pos = 0;
    while (pos <= list.size() && g->devices.size() < all.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      const std::string entry = list.substr(pos, comma - pos);
      pos = comma + 1;
      int found = -1;
      if (!entry.empty() && entry.find_first_not_of("0123456789") == std::string::npos && entry.size() < 4) {
        const int idx = std::atoi(entry.c_str());
        if (idx < static_cast<int>(all.size())) found = idx;
      } else if (entry.rfind("GPU-", 0) == 0 && g->mapping != nullptr) {
        for (size_t i = 0; i < all.size(); ++i) {
          GpuConfig c;
          ReadConfig(g->mapping->layout()->gpus[all[i].state_gpu], &c);
          if (std::strncmp(c.uuid, entry.c_str(), entry.size()) == 0) found = static_cast<int>(i);
        }
      }
      if (found < 0) break;
      g->devices.push_back(all[static_cast<size_t>(found)]);
      if (comma == list.size()) break;
    }
  } else {
    g->devices = std::move(all);
  }
  for (size_t i = 0; i < g->devices.size(); ++i) {
    g->devices[i].next_addr = kDeviceBase + (static_cast<CUdeviceptr>(i) << 40);
  }
  return CUDA_SUCCESS;
}

const char* ErrorName(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
      return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE:
      return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE:
      return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY:
      return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_UNKNOWN:
      return "CUDA_ERROR_UNKNOWN";
    default:
      return nullptr;
  }
}

const char* ErrorString(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS:
      return "no error";
    case CUDA_ERROR_INVALID_VALUE:
      return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "initialization error";
    case CUDA_ERROR_DEINITIALIZED:
      return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE:
      return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE:
      return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE:
      return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE:
      return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND:
      return "named symbol not found";
    case CUDA_ERROR_NOT_READY:
      return "device not ready";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "operation not supported";
    case CUDA_ERROR_UNKNOWN:
      return "unknown error";
    default:
      return nullptr;
  }
}

void ForkChild() { g_forked.store(g->initialized); }

}  // namespace
}  // namespace ithbat::sim::fake_cuda

using namespace ithbat::sim::fake_cuda;  // NOLINT(google-build-using-namespace): the export file

// NOLINTBEGIN(readability-identifier-naming) — the exports carry NVIDIA's names.
#pragma GCC visibility push(default)
extern "C" {

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_forked.load()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g->mu);
  if (g->initialized) return CUDA_SUCCESS;
  if (CUresult r = InitLocked(); r != CUDA_SUCCESS) return r;
  g->initialized = true;
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(nullptr, nullptr, ForkChild);
    std::atexit(AtExit);
    std::thread(EngineLoop).detach();
  });
  return g->devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = g_driver_version.load();
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pStr = ErrorString(error);
  return *pStr == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pStr = ErrorName(error);
  return *pStr == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  ENTER();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(g->devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= static_cast<int>(g->devices.size())) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

#define CHECK_DEVICE(dev) \
  if ((dev) < 0 || (dev) >= static_cast<int>(g->devices.size())) return CUDA_ERROR_INVALID_DEVICE

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string& n = g->devices[dev].name;
  const size_t k = std::min(n.size(), static_cast<size_t>(len - 1));  // truncates, like the driver
  std::memcpy(name, n.data(), k);
  name[k] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *uuid = g->devices[dev].uuid;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = g->devices[dev].memory_total;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Device& d = g->devices[dev];
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = 132;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *pi = static_cast<int>(d.pci_bus);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *pi = static_cast<int>(d.pci_device);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *pi = static_cast<int>(d.pci_domain);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = d.name.find("A100") != std::string::npos ? 8 : 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = 0;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "%s", g->devices[dev].pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device& d = g->devices[dev];
  if (d.primary == nullptr) d.primary = NewContext(dev, true);
  ++d.primary->primary_refs;
  *pctx = d.primary;
  return CUDA_SUCCESS;
}

// The primary context stays alive (its streams and work too) after the last release: the fake
// does not model primary-context reset.
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ENTER();
  CHECK_DEVICE(dev);
  Device& d = g->devices[dev];
  if (d.primary == nullptr || d.primary->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --d.primary->primary_refs;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  ENTER();
  CHECK_DEVICE(dev);
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c = NewContext(dev, false);
  t_ctx_stack.push_back(c);  // a created context becomes current
  *pctx = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                        CUdevice dev) {
  (void)ctxCreateParams;
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  ENTER();
  if (!ValidCtx(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  // Like the driver: destroying waits for the context's work.
  std::vector<std::pair<StreamPtr, uint64_t>> waits;
  for (auto& s : g->active) {
    if (s->ctx == ctx) waits.emplace_back(s, s->enqueued);
  }
  WaitDone(
      lock,
      [&] {
        return std::all_of(waits.begin(), waits.end(), [](auto& w) { return w.first->completed >= w.second; });
      },
      [&] { return PredictAll(waits); });
  ctx->destroyed = true;
  for (auto& [raw, s] : g->streams) {
    if (s->ctx == ctx) s->destroyed = true;
  }
  std::erase_if(t_ctx_stack, [ctx](CUctx_st* c) { return c == ctx; });
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  ENTER();
  if (ctx != nullptr && !ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_stack.empty()) {
    if (ctx != nullptr) t_ctx_stack.push_back(ctx);
  } else if (ctx == nullptr) {
    t_ctx_stack.pop_back();
  } else {
    t_ctx_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  ENTER();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = Current();
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  ENTER();
  if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  ENTER();
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  ENTER();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c = Current();
  if (!ValidCtx(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = c->device;
  return CUDA_SUCCESS;
}

static CUresult CtxSyncImpl(CUcontext ctx) {
  ENTER();
  if (ctx == nullptr) ctx = Current();
  if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<std::pair<StreamPtr, uint64_t>> waits;
  for (auto& s : g->active) {
    if (s->ctx == ctx) waits.emplace_back(s, s->enqueued);
  }
  WaitDone(
      lock,
      [&] {
        return std::all_of(waits.begin(), waits.end(), [](auto& w) { return w.first->completed >= w.second; });
      },
      [&] { return PredictAll(waits); });
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return CtxSyncImpl(nullptr); }
CUresult cuCtxSynchronize_v2(CUcontext ctx) { return CtxSyncImpl(ctx); }

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  ENTER();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidCtx(Current())) return CUDA_ERROR_INVALID_CONTEXT;
  g->modules.push_back(std::make_unique<CUmod_st>());
  g->modules.back()->magic = kModuleMagic;
  *module = g->modules.back().get();
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  ENTER();
  if (hmod == nullptr || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
  hmod->magic = 0;
  for (auto& f : hmod->functions) f->magic = 0;
  return CUDA_SUCCESS;
}

// Any name resolves: the fake has no code to look names up in.
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  ENTER();
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (hmod == nullptr || hmod->magic != kModuleMagic) return CUDA_ERROR_INVALID_HANDLE;
  hmod->functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{kFuncMagic, hmod, {}}));
  CUfunc_st* f = hmod->functions.back().get();
  std::snprintf(f->name, sizeof(f->name), "%s", name);
  // Classified on the full name (a mangled template name can be far longer than `name` keeps).
  const std::string full(name, strnlen(name, 4096));
  const ithbat::sim::cuda::KernelMix mix = ithbat::sim::cuda::ClassifyKernel(full.c_str());
  f->tensor = mix.tensor;
  f->dram = mix.dram;
  *hfunc = f;
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  ENTER();
  if (phStream == nullptr || (Flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = Current();
  if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *phStream = NewStream(ctx, Flags);
  return CUDA_SUCCESS;
}

// Pending work still runs; the stream is freed when it is done (as the driver does).
CUresult cuStreamDestroy_v2(CUstream hStream) {
  ENTER();
  if (!ValidStream(hStream) || hStream == hStream->ctx->legacy) return CUDA_ERROR_INVALID_HANDLE;
  hStream->destroyed = true;
  g->streams.erase(hStream);  // the active list keeps it alive while it has work
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream) { return StreamSyncImpl(hStream, false); }
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return StreamSyncImpl(hStream, true); }
CUresult cuStreamQuery(CUstream hStream) { return StreamQueryImpl(hStream, false); }
CUresult cuStreamQuery_ptsz(CUstream hStream) { return StreamQueryImpl(hStream, true); }
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return StreamWaitEventImpl(hStream, hEvent, Flags, false);
}
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return StreamWaitEventImpl(hStream, hEvent, Flags, true);
}

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  ENTER();
  if (phEvent == nullptr || (Flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = Current();
  if (!ValidCtx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  auto* e = new CUevent_st();
  e->ctx = ctx;
  e->flags = Flags;
  e->refs = 1;  // the handle's own reference, dropped by cuEventDestroy
  *phEvent = e;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return EventRecordImpl(hEvent, hStream, false); }
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return EventRecordImpl(hEvent, hStream, true);
}

CUresult cuEventQuery(CUevent hEvent) {
  ENTER();
  if (!ValidEvent(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  return hEvent->completed_gen >= hEvent->recorded_gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  ENTER();
  if (!ValidEvent(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t gen = hEvent->recorded_gen;
  ++hEvent->refs;
  const StreamPtr marker = hEvent->marker_stream.lock();
  const uint64_t position = hEvent->marker_position;
  WaitDone(lock, [&] { return hEvent->completed_gen >= gen; },
           [&] { return marker ? PredictCompletion(marker.get(), position) : NoDue(); });
  Release(hEvent);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return EventElapsedImpl(pMilliseconds, hStart, hEnd);
}
CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return EventElapsedImpl(pMilliseconds, hStart, hEnd);
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  ENTER();
  if (!ValidEvent(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  hEvent->destroyed = true;
  Release(hEvent);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return AllocImpl(dptr, bytesize, nullptr, false, false);
}
CUresult cuMemFree_v2(CUdeviceptr dptr) { return FreeImpl(dptr, nullptr, false, false); }
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocImpl(dptr, bytesize, hStream, true, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocImpl(dptr, bytesize, hStream, true, true);
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return FreeImpl(dptr, hStream, true, false); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return FreeImpl(dptr, hStream, true, true);
}

static CUdeviceptr HostPtr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return CopyImpl(dst, HostPtr(src), n, nullptr, false, true, true, false);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return CopyImpl(dst, HostPtr(src), n, nullptr, true, true, true, false);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return CopyImpl(HostPtr(dst), src, n, nullptr, false, true, false, true);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return CopyImpl(HostPtr(dst), src, n, nullptr, true, true, false, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(dst, src, n, nullptr, false, true, true, true);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(dst, src, n, nullptr, true, true, true, true);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAuto(dst, src, n, s, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAuto(dst, src, n, s, true);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyImpl(dst, HostPtr(src), n, s, false, false, true, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyImpl(dst, HostPtr(src), n, s, true, false, true, false);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyImpl(HostPtr(dst), src, n, s, false, false, false, true);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyImpl(HostPtr(dst), src, n, s, true, false, false, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyImpl(dst, src, n, s, false, false, true, true);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyImpl(dst, src, n, s, true, false, true, true);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra) {
  (void)sharedMemBytes;
  (void)kernelParams;
  (void)extra;
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, hStream, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra) {
  (void)sharedMemBytes;
  (void)kernelParams;
  (void)extra;
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, hStream, true);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchExImpl(config, f, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                               void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchExImpl(config, f, true);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  (void)sharedMemBytes;
  (void)kernelParams;
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, hStream, false);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz,
                                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  (void)sharedMemBytes;
  (void)kernelParams;
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, hStream, true);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return GraphLaunchImpl(hGraphExec, hStream, false);
}
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return GraphLaunchImpl(hGraphExec, hStream, true);
}

// (base name, first CUDA version it maps to this function, per-thread variant?, function).
// nullptr: that version exists in the real driver but not in the fake (so an older entry must
// not be returned for it: its ABI differs).
struct ProcEntry {
  const char* name;
  int version;
  bool per_thread;
  void* fn;
};
extern "C++" {
template <class F>
static void* AsVoid(F f) {
  return reinterpret_cast<void*>(f);
}
static void* AsVoid(std::nullptr_t) { return nullptr; }
}
#define PE(name, version, pt, fn) \
  ProcEntry { name, version, pt, AsVoid(fn) }
static const ProcEntry kProcTable[] = {
    PE("cuInit", 2000, false, &cuInit),
    PE("cuDriverGetVersion", 2020, false, &cuDriverGetVersion),
    PE("cuGetErrorString", 6000, false, &cuGetErrorString),
    PE("cuGetErrorName", 6000, false, &cuGetErrorName),
    PE("cuDeviceGet", 2000, false, &cuDeviceGet),
    PE("cuDeviceGetCount", 2000, false, &cuDeviceGetCount),
    PE("cuDeviceGetName", 2000, false, &cuDeviceGetName),
    PE("cuDeviceGetUuid", 9020, false, &cuDeviceGetUuid),
    PE("cuDeviceGetUuid", 11040, false, &cuDeviceGetUuid_v2),
    PE("cuDeviceTotalMem", 3020, false, &cuDeviceTotalMem_v2),
    PE("cuDeviceGetAttribute", 2000, false, &cuDeviceGetAttribute),
    PE("cuDeviceGetPCIBusId", 4010, false, &cuDeviceGetPCIBusId),
    PE("cuDevicePrimaryCtxRetain", 7000, false, &cuDevicePrimaryCtxRetain),
    PE("cuDevicePrimaryCtxRelease", 7000, false, &cuDevicePrimaryCtxRelease),
    PE("cuDevicePrimaryCtxRelease", 11000, false, &cuDevicePrimaryCtxRelease_v2),
    PE("cuCtxCreate", 3020, false, &cuCtxCreate_v2),
    PE("cuCtxCreate", 11040, false, nullptr),  // cuCtxCreate_v3 (exec-affinity array): not in the fake
    PE("cuCtxCreate", 12050, false, &cuCtxCreate_v4),
    PE("cuCtxDestroy", 4000, false, &cuCtxDestroy_v2),
    PE("cuCtxSetCurrent", 4000, false, &cuCtxSetCurrent),
    PE("cuCtxGetCurrent", 4000, false, &cuCtxGetCurrent),
    PE("cuCtxPushCurrent", 4000, false, &cuCtxPushCurrent_v2),
    PE("cuCtxPopCurrent", 4000, false, &cuCtxPopCurrent_v2),
    PE("cuCtxGetDevice", 2000, false, &cuCtxGetDevice),
    PE("cuCtxGetDevice", 13000, false, nullptr),  // cuCtxGetDevice_v2(CUdevice*, CUcontext): not in the fake
    PE("cuCtxSynchronize", 2000, false, &cuCtxSynchronize),
    PE("cuCtxSynchronize", 13000, false, &cuCtxSynchronize_v2),
    PE("cuModuleLoadData", 2000, false, &cuModuleLoadData),
    PE("cuModuleUnload", 2000, false, &cuModuleUnload),
    PE("cuModuleGetFunction", 2000, false, &cuModuleGetFunction),
    PE("cuStreamCreate", 2000, false, &cuStreamCreate),
    PE("cuStreamDestroy", 4000, false, &cuStreamDestroy_v2),
    PE("cuStreamSynchronize", 2000, false, &cuStreamSynchronize),
    PE("cuStreamSynchronize", 7000, true, &cuStreamSynchronize_ptsz),
    PE("cuStreamQuery", 2000, false, &cuStreamQuery),
    PE("cuStreamQuery", 7000, true, &cuStreamQuery_ptsz),
    PE("cuStreamWaitEvent", 3020, false, &cuStreamWaitEvent),
    PE("cuStreamWaitEvent", 7000, true, &cuStreamWaitEvent_ptsz),
    PE("cuEventCreate", 2000, false, &cuEventCreate),
    PE("cuEventRecord", 2000, false, &cuEventRecord),
    PE("cuEventRecord", 7000, true, &cuEventRecord_ptsz),
    PE("cuEventQuery", 2000, false, &cuEventQuery),
    PE("cuEventSynchronize", 2000, false, &cuEventSynchronize),
    PE("cuEventElapsedTime", 2000, false, &cuEventElapsedTime),
    PE("cuEventElapsedTime", 12080, false, &cuEventElapsedTime_v2),
    PE("cuEventDestroy", 4000, false, &cuEventDestroy_v2),
    PE("cuMemAlloc", 3020, false, &cuMemAlloc_v2),
    PE("cuMemFree", 3020, false, &cuMemFree_v2),
    PE("cuMemAllocAsync", 11020, false, &cuMemAllocAsync),
    PE("cuMemAllocAsync", 11020, true, &cuMemAllocAsync_ptsz),
    PE("cuMemFreeAsync", 11020, false, &cuMemFreeAsync),
    PE("cuMemFreeAsync", 11020, true, &cuMemFreeAsync_ptsz),
    PE("cuMemcpyHtoD", 3020, false, &cuMemcpyHtoD_v2),
    PE("cuMemcpyHtoD", 7000, true, &cuMemcpyHtoD_v2_ptds),
    PE("cuMemcpyDtoH", 3020, false, &cuMemcpyDtoH_v2),
    PE("cuMemcpyDtoH", 7000, true, &cuMemcpyDtoH_v2_ptds),
    PE("cuMemcpyDtoD", 3020, false, &cuMemcpyDtoD_v2),
    PE("cuMemcpyDtoD", 7000, true, &cuMemcpyDtoD_v2_ptds),
    PE("cuMemcpyAsync", 4000, false, &cuMemcpyAsync),
    PE("cuMemcpyAsync", 7000, true, &cuMemcpyAsync_ptsz),
    PE("cuMemcpyHtoDAsync", 3020, false, &cuMemcpyHtoDAsync_v2),
    PE("cuMemcpyHtoDAsync", 7000, true, &cuMemcpyHtoDAsync_v2_ptsz),
    PE("cuMemcpyDtoHAsync", 3020, false, &cuMemcpyDtoHAsync_v2),
    PE("cuMemcpyDtoHAsync", 7000, true, &cuMemcpyDtoHAsync_v2_ptsz),
    PE("cuMemcpyDtoDAsync", 3020, false, &cuMemcpyDtoDAsync_v2),
    PE("cuMemcpyDtoDAsync", 7000, true, &cuMemcpyDtoDAsync_v2_ptsz),
    PE("cuLaunchKernel", 4000, false, &cuLaunchKernel),
    // The documented non-exported entry (cuda_abi.h, kNonExportedProcAddress*).
    PE("cuLaunchKernel", 7000, true, &LaunchKernelPerThreadInternal),
    PE("cuLaunchKernelEx", 11060, false, &cuLaunchKernelEx),
    PE("cuLaunchKernelEx", 11060, true, &cuLaunchKernelEx_ptsz),
    PE("cuLaunchCooperativeKernel", 9000, false, &cuLaunchCooperativeKernel),
    PE("cuLaunchCooperativeKernel", 9000, true, &cuLaunchCooperativeKernel_ptsz),
    PE("cuGraphLaunch", 10000, false, &cuGraphLaunch),
    PE("cuGraphLaunch", 10000, true, &cuGraphLaunch_ptsz),
    PE("cuGetProcAddress", 11030, false, &cuGetProcAddress),
    PE("cuGetProcAddress", 12000, false, &cuGetProcAddress_v2),
};
#undef PE

// Works before cuInit, like the driver (it needs no context).
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const int version = std::min(cudaVersion, g_driver_version.load());
  const size_t name_len = strnlen(symbol, 256);
  bool known = false;
  bool has_per_thread = false;
  for (const ProcEntry& e : kProcTable) {
    if (std::strlen(e.name) == name_len && std::strncmp(e.name, symbol, name_len) == 0) {
      known = true;
      has_per_thread |= e.per_thread;
    }
  }
  if (!known) return CUDA_ERROR_NOT_FOUND;
  // Per-thread callers get the per-thread variant where one exists at that version, else the
  // plain function (APIs without a stream have no variant).
  const ProcEntry* best = nullptr;
  for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
    const bool want_pt = per_thread && has_per_thread && pass == 0;
    if (pass == 1 && !per_thread) break;
    for (const ProcEntry& e : kProcTable) {
      if (std::strlen(e.name) != name_len || std::strncmp(e.name, symbol, name_len) != 0) continue;
      if (e.per_thread != want_pt || e.version > version) continue;
      if (best == nullptr || e.version > best->version) best = &e;
    }
    if (!want_pt) break;
  }
  if (best == nullptr) {
    if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  if (best->fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  *pfn = best->fn;
  if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Fake-only helpers.

CUresult ithbat_fake_cuda_enqueue_external(CUstream stream, const IthbatFakeCudaExternalWork* work) {
  if (work == nullptr || work->size < ITHBAT_FAKE_CUDA_EXTERNAL_WORK_V1_SIZE || work->duration_ns < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ENTER();
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, false, &s); r != CUDA_SUCCESS) return r;
  Item it;
  it.kind = ItemKind::kExternal;
  // A caller of the first layout passes fewer bytes: the fields it lacks stay zero (NULL).
  std::memcpy(&it.ext, work, std::min<size_t>(work->size, sizeof(IthbatFakeCudaExternalWork)));
  it.duration_ns = work->duration_ns;
  it.busy = work->sm > 0 || work->tensor > 0 || work->dram > 0;
  it.sm = std::clamp(work->sm, 0.0f, 1.0f);
  it.tensor = std::clamp(work->tensor, 0.0f, 1.0f);
  it.dram = std::clamp(work->dram, 0.0f, 1.0f);
  Push(lock, s, std::move(it));
  return CUDA_SUCCESS;
}

void ithbat_fake_cuda_get_costs(IthbatFakeCudaCosts* costs) {
  if (costs == nullptr) return;
  std::lock_guard<std::mutex> lock(g->mu);
  *costs = g->costs;
}

void ithbat_fake_cuda_set_costs(const IthbatFakeCudaCosts* costs) {
  if (costs == nullptr) return;
  std::lock_guard<std::mutex> lock(g->mu);
  g->costs = *costs;
  g->costs.kernel_ns = std::max<int64_t>(0, g->costs.kernel_ns);
  g->costs.ns_per_block = std::max<int64_t>(0, g->costs.ns_per_block);
  g->costs.graph_ns = std::max<int64_t>(0, g->costs.graph_ns);
}

void ithbat_fake_cuda_refresh_clocks(void) {
  std::lock_guard<std::mutex> lock(g->mu);
  for (Device& d : g->devices) d.clock_read_ns = 0;
}

void ithbat_fake_cuda_get_stats(IthbatFakeCudaStats* stats) {
  if (stats == nullptr) return;
  std::lock_guard<std::mutex> lock(g->mu);
  *stats = g->stats;
  for (size_t i = 0; i < std::size(stats->pending); ++i) {
    stats->pending[i] = i < g->devices.size() ? g->devices[i].pending : 0;
  }
  stats->internal_launch_calls = g_internal_calls.load();
}

}  // extern "C"
#pragma GCC visibility pop
// NOLINTEND(readability-identifier-naming)
