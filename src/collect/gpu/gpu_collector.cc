#include "collect/gpu/gpu_collector.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace ithbat::collect {
namespace {

// Optional exports whose absence removes series (pairs: either one is enough).
struct Feature {
  std::string_view export_a, export_b;
};
constexpr Feature kFeatures[] = {
    {"nvmlDeviceGetUtilizationRates", ""},
    {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"},
    {"nvmlDeviceGetClockInfo", ""},
    {"nvmlDeviceGetMaxClockInfo", ""},
    {"nvmlDeviceGetPowerUsage", ""},
    {"nvmlDeviceGetEnforcedPowerLimit", ""},
    {"nvmlDeviceGetTotalEnergyConsumption", ""},
    {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"},
    {"nvmlDeviceGetPerformanceState", ""},
    {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
    {"nvmlDeviceGetEccMode", ""},
    {"nvmlDeviceGetTotalEccErrors", ""},
    {"nvmlDeviceGetMemoryErrorCounter", ""},
    {"nvmlDeviceGetRetiredPages_v2", ""},
    {"nvmlDeviceGetRetiredPagesPendingStatus", ""},
    {"nvmlDeviceGetRemappedRows", ""},
    {"nvmlDeviceGetRowRemapperHistogram", ""},
    {"nvmlDeviceGetPcieReplayCounter", ""},
    {"nvmlDeviceGetPcieThroughput", ""},
    {"nvmlDeviceGetCurrPcieLinkGeneration", ""},
    {"nvmlDeviceGetCurrPcieLinkWidth", ""},
    {"nvmlDeviceGetMaxPcieLinkGeneration", ""},
    {"nvmlDeviceGetMaxPcieLinkWidth", ""},
    {"nvmlDeviceGetNvLinkState", ""},
    {"nvmlDeviceGetFieldValues", ""},
    {"nvmlDeviceGetComputeRunningProcesses_v3", ""},
    {"nvmlGpmQueryDeviceSupport", ""},
    {"nvmlGpmSampleAlloc", ""},
    {"nvmlGpmSampleGet", ""},
    {"nvmlGpmMetricsGet", ""},
    {"nvmlEventSetCreate", ""},
    {"nvmlDeviceRegisterEvents", ""},
    {"nvmlEventSetWait_v2", ""},
};

constexpr uint64_t SlotKey(uint16_t metric, uint32_t key) { return (static_cast<uint64_t>(metric) << 32) | key; }

// Waits until `deadline` for a thread to say it exited, then joins it; a thread still stuck
// in the driver is detached (what it touches is shared-owned).
template <class Pred>
void JoinBy(std::thread& t, std::mutex& mu, std::condition_variable& cv, Pred exited,
            std::chrono::steady_clock::time_point deadline) {
  if (!t.joinable()) return;
  bool done;
  {
    std::unique_lock lk(mu);
    done = cv.wait_until(lk, deadline, exited);
  }
  if (done) {
    t.join();
  } else {
    t.detach();
  }
}

}  // namespace

struct GpuCollector::Hub {
  std::mutex mu;
  std::condition_variable cv;
};

struct GpuCollector::Reader {
  std::unique_ptr<GpuReader> reader;  // touched by the reader thread only
  std::thread thread;
  // Guarded by Hub::mu.
  bool stop = false;
  bool has_request = false;
  bool busy = false;  // a request was sent and its result not yet handed back
  bool has_result = false;
  bool exited = false;
  uint64_t request_tick = 0;
  GpuReading result;
};

struct GpuCollector::Events {
  std::atomic<bool> stop{false};
  std::atomic<bool> ready{false};  // events registered: the Xid counters mean something
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;      // guarded by mu
  std::string note;         // guarded by mu: why events are not available at all
  std::map<std::string, std::string> gpu_notes;  // guarded by mu: per-GPU registration problems
  std::vector<GpuEventTarget> pending;  // guarded by mu: identified GPUs not yet registered
  std::unique_ptr<std::atomic<uint64_t>[]> xids;  // per GPU position
  std::thread thread;
};

std::unique_ptr<GpuCollector> GpuCollector::Create(GpuOptions options) {
  return std::unique_ptr<GpuCollector>(new GpuCollector(std::move(options)));
}

GpuCollector::GpuCollector(GpuOptions options)
    : Collector("gpu"),
      options_(std::move(options)),
      hub_(std::make_shared<Hub>()),
      resolver_(identity::IdentityResolver::Options{.proc_root = options_.proc_root}) {
  if (options_.gpu_deadline <= 0) options_.gpu_deadline = GpuOptions{}.gpu_deadline;
  if (options_.event_wait <= 0) options_.event_wait = GpuOptions{}.event_wait;
  if (options_.max_gpus == 0) options_.max_gpus = GpuOptions{}.max_gpus;
}

GpuCollector::~GpuCollector() { StopThreads(); }

std::vector<MetricDesc> GpuCollector::Describe() const { return GpuMetricDescs(); }

size_t GpuCollector::gpu_count() const { return gpus_.size(); }

bool GpuCollector::gpu_stalled(size_t i) const { return i < gpus_.size() && gpus_[i]->stalled; }

bool GpuCollector::events_ready() const { return events_ && events_->ready.load(std::memory_order_acquire); }

Status GpuCollector::InitImpl(Sink& sink) {
  auto lib = options_.hidden_symbols.empty() ? NvmlLibrary::Load(options_.library)
                                             : NvmlLibrary::LoadForTest(options_.library, options_.hidden_symbols);
  if (!lib) return std::unexpected(lib.error());
  lib_ = std::shared_ptr<NvmlLibrary>(std::move(*lib));
  auto e = EnumerateGpus(*lib_, options_.max_gpus);
  if (!e) return std::unexpected(e.error());
  driver_version_ = e->driver_version;

  std::vector<std::string> notes = e->notes;
  std::vector<std::string> missing;
  for (const Feature& f : kFeatures) {
    if (!lib_->Has(f.export_a) && (f.export_b.empty() || !lib_->Has(f.export_b))) {
      missing.emplace_back(f.export_a);
    }
  }
  if (!missing.empty()) {
    notes.push_back(fmt::format("NVML lacks {} optional export(s) (older driver?), their series are not exported: {}",
                                missing.size(), fmt::join(missing, ", ")));
  }
  if (e->count == 0) notes.emplace_back("NVML reports no GPUs");

  // Only global calls so far: each GPU's identity is read by its own reader (see header).
  for (uint32_t i = 0; i < e->count; i++) {
    auto state = std::make_unique<GpuState>();
    state->info.index = i;
    state->info.index_label = fmt::format("{}", i);
    auto base = LabelSet::From({{"gpu", state->info.index_label}});
    if (!base) return std::unexpected(base.error());
    state->base = std::move(*base);
    state->reader = std::make_shared<Reader>();
    state->reader->reader =
        std::make_unique<GpuReader>(lib_, i, options_.gpm, options_.max_processes_per_gpu);
    gpus_.push_back(std::move(state));
  }
  for (const std::string& n : notes) {
    init_notes_ += init_notes_.empty() ? n : "; " + n;
  }
  sink_ = &sink;
  return Ok();
}

Status GpuCollector::StartImpl() {
  for (auto& g : gpus_) {
    std::shared_ptr<Reader> r = g->reader;
    std::shared_ptr<Hub> hub = hub_;
    r->thread = std::thread([hub, r] {
      GpuReading work;
      std::unique_lock lk(hub->mu);
      while (true) {
        hub->cv.wait(lk, [&] { return r->stop || r->has_request; });
        if (r->stop) break;
        r->has_request = false;
        work.tick_id = r->request_tick;
        lk.unlock();
        work.samples.clear();
        work.mig.clear();
        work.errors.clear();
        work.identity.reset();
        work.lost = false;
        r->reader->Read(work);  // may block in the driver for a long time
        lk.lock();
        std::swap(r->result, work);
        r->has_result = true;
        r->busy = false;
        hub->cv.notify_all();
      }
      r->exited = true;
      hub->cv.notify_all();
    });
  }
  if (options_.events && !gpus_.empty()) {
    events_ = std::make_shared<Events>();
    events_->xids = std::make_unique<std::atomic<uint64_t>[]>(gpus_.size());
    std::shared_ptr<Events> ev = events_;
    std::shared_ptr<NvmlLibrary> lib = lib_;
    Sink* sink = sink_;
    const TimeNs wait = options_.event_wait;
    ev->thread = std::thread([ev, lib, sink, wait] {
      auto gpu_note = [&](const std::string& gpu, std::string problem) {
        std::lock_guard lk(ev->mu);
        if (problem.empty()) {
          ev->gpu_notes.erase(gpu);
        } else {
          ev->gpu_notes[gpu] = std::move(problem);
        }
      };
      Status s = RunGpuEventLoop(
          *lib, wait, ev->stop,
          [&] {
            std::lock_guard lk(ev->mu);
            return std::exchange(ev->pending, {});
          },
          [&](Event e) {
            // After Stop the sink may be gone: a late event is dropped.
            if (!ev->stop.load(std::memory_order_acquire)) (void)sink->AppendEvent(std::move(e));
          },
          [&](size_t pos) { ev->xids[pos].fetch_add(1, std::memory_order_relaxed); }, &ev->ready, gpu_note);
      ev->ready.store(false, std::memory_order_release);
      std::lock_guard lk(ev->mu);
      if (!s) ev->note = s.error().message;
      ev->exited = true;
      ev->cv.notify_all();
    });
  }
  return Ok();
}

void GpuCollector::StopImpl() { StopThreads(); }

void GpuCollector::StopThreads() {
  {
    std::lock_guard lk(hub_->mu);
    for (auto& g : gpus_) g->reader->stop = true;
    hub_->cv.notify_all();
  }
  // One deadline for all: N hung GPUs cost one wait, not N.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.gpu_deadline);
  for (auto& g : gpus_) {
    Reader& r = *g->reader;
    JoinBy(r.thread, hub_->mu, hub_->cv, [&] { return r.exited; }, deadline);
  }
  if (events_) {
    events_->stop.store(true, std::memory_order_release);
    Events& ev = *events_;
    JoinBy(ev.thread, ev.mu, ev.cv, [&] { return ev.exited; },
           std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.event_wait * 5 + options_.gpu_deadline));
  }
}

Status GpuCollector::CollectImpl(TimeNs t) {
  tick_id_++;
  append_failures_ = 0;
  first_append_error_.clear();
  const TimeNs now = MonotonicNowNs();
  std::vector<uint8_t> fresh(gpus_.size(), 0);
  {
    std::unique_lock lk(hub_->mu);
    bool sent = false;
    for (auto& g : gpus_) {
      Reader& r = *g->reader;
      if (r.busy) continue;  // still inside an earlier call: not asked again until it returns
      r.has_result = false;  // a late answer to an earlier tick is stale
      r.request_tick = tick_id_;
      r.has_request = true;
      r.busy = true;
      sent = true;
    }
    if (sent) {
      hub_->cv.notify_all();
      hub_->cv.wait_for(lk, std::chrono::nanoseconds(options_.gpu_deadline), [&] {
        return std::none_of(gpus_.begin(), gpus_.end(),
                            [&](const auto& g) { return g->reader->busy && g->reader->request_tick == tick_id_; });
      });
    }
    for (size_t i = 0; i < gpus_.size(); i++) {
      GpuState& g = *gpus_[i];
      Reader& r = *g.reader;
      if (!r.busy && r.has_result && r.result.tick_id == tick_id_) {
        std::swap(g.reading, r.result);
        r.has_result = false;
        fresh[i] = 1;
      }
    }
  }

  UpdateProcesses(fresh);

  size_t stalled = 0;
  std::string reasons;
  auto add_reason = [&](const std::string& s) { reasons += reasons.empty() ? s : "; " + s; };
  for (size_t i = 0; i < gpus_.size(); i++) {
    GpuState& g = *gpus_[i];
    const bool was_stalled = g.stalled;
    g.stalled = !fresh[i];
    if (g.stalled) {
      stalled++;
      if (!was_stalled) {
        g.stalled_since = now;
        ReportError(Error{ErrorCode::kTimeout,
                          fmt::format("GPU {} ({}): NVML did not answer within {} ms; not queried until the "
                                      "outstanding call returns",
                                      g.info.index_label, g.info.uuid, options_.gpu_deadline / kNsPerMs)});
      }
      add_reason(fmt::format("GPU {}: NVML call outstanding (hung driver call?)", g.info.index_label));
    }
    if (fresh[i] && g.reading.identity) Identified(g, i, *g.reading.identity);
    if (g.identified) EmitGpu(g, kGpuInfo, 0, 1, t);
    EmitGpu(g, kGpuStalled, 0, g.stalled ? 1 : 0, t);
    if (fresh[i]) {
      const GpuReading& rd = g.reading;
      if (rd.lost != g.lost) {
        Event e;
        e.time = t;
        e.kind = EventKind::kGpuEvent;
        e.identity.gpu_index = static_cast<int32_t>(g.info.index);
        e.identity.gpu_uuid = g.info.uuid;
        e.source = "nvml";
        e.name = rd.lost ? "gpu_lost" : "gpu_recovered";
        e.value = rd.lost ? 1 : 0;
        e.text = rd.lost ? fmt::format("GPU {} ({}) is lost: NVML returned GPU_IS_LOST (fell off the bus?)",
                                       g.info.index_label, g.info.uuid)
                         : fmt::format("GPU {} ({}) answers NVML again", g.info.index_label, g.info.uuid);
        if (Status s = sink_->AppendEvent(std::move(e)); !s) ReportError(s.error());
        g.lost = rd.lost;
      }
      for (const Error& err : rd.errors) ReportError(err);
      for (const GpuSample& s : rd.samples) EmitGpu(g, s.metric, s.key, s.value, t);
      EmitMig(g, t);
    }
    EmitGpu(g, kGpuLost, 0, g.lost ? 1 : 0, t);
    if (g.lost) add_reason(fmt::format("GPU {} ({}) is lost (GPU_IS_LOST)", g.info.index_label, g.info.uuid));
    // Without a working event set a 0 would claim "no Xid": the counter exists only while it works.
    if (events_ && events_->ready.load(std::memory_order_acquire)) EmitGpu(g, kGpuXidTotal, 0, static_cast<double>(events_->xids[i].load(std::memory_order_relaxed)), t);
  }
  EmitCallStats(t);
  if (events_ && !new_targets_.empty()) {
    std::lock_guard lk(events_->mu);
    for (GpuEventTarget& target : new_targets_) events_->pending.push_back(std::move(target));
  }
  new_targets_.clear();

  if (events_) {
    std::lock_guard lk(events_->mu);
    if (!events_->note.empty()) add_reason("events: " + events_->note);
    for (const auto& [gpu, problem] : events_->gpu_notes) add_reason(fmt::format("GPU {}: {}", gpu, problem));
  }
  if (!init_notes_.empty()) add_reason(init_notes_);
  if (reasons != degraded_) {
    degraded_ = reasons;
    SetDegraded(reasons);
  }
  if (append_failures_ > 0) {
    ReportError(Error{ErrorCode::kInternal,
                      fmt::format("{} appends failed this tick; first: {}", append_failures_, first_append_error_)});
  }
  if (!gpus_.empty() && stalled == gpus_.size()) {
    return MakeErrorF(ErrorCode::kUnavailable, "no GPU answered NVML within {} ms",
                      options_.gpu_deadline / kNsPerMs);
  }
  return Ok();
}

void GpuCollector::UpdateProcesses(const std::vector<uint8_t>& fresh) {
  std::vector<uint32_t> now;
  std::vector<uint32_t> added;
  bool removed = false;
  for (size_t i = 0; i < gpus_.size(); i++) {
    if (!fresh[i]) continue;  // a stalled GPU's list is unknown: keep what it had
    GpuState& g = *gpus_[i];
    now.clear();
    for (const GpuSample& s : g.reading.samples) {
      if (s.metric == kGpuProcessMemory) now.push_back(s.key);
    }
    std::sort(now.begin(), now.end());
    now.erase(std::unique(now.begin(), now.end()), now.end());
    for (uint32_t pid : g.pids) {
      if (std::binary_search(now.begin(), now.end(), pid)) continue;
      // Gone from this GPU: a later process with the same pid gets a series of its own.
      g.slots.erase(SlotKey(kGpuProcessMemory, pid));
      auto it = processes_.find(pid);
      if (it != processes_.end() && --it->second.gpus == 0) {
        resolver_.Forget(static_cast<int32_t>(pid));
        processes_.erase(it);
        removed = true;
      }
    }
    for (uint32_t pid : now) {
      if (std::binary_search(g.pids.begin(), g.pids.end(), pid)) continue;
      auto [it, inserted] = processes_.try_emplace(pid);
      it->second.gpus++;
      if (inserted) added.push_back(pid);
    }
    g.pids.swap(now);
  }
  if (added.empty()) {
    if (removed) PublishProcesses();
    return;
  }
  // NVML's pid -> GPU map wins over the process's own CUDA_VISIBLE_DEVICES.
  std::unordered_map<int32_t, identity::GpuRef> nvml;
  for (const auto& g : gpus_) {
    for (uint32_t pid : g->pids) {
      nvml.try_emplace(static_cast<int32_t>(pid),
                       identity::GpuRef{static_cast<int32_t>(g->info.index), g->info.uuid});
    }
  }
  for (uint32_t pid : added) {
    // Once per appearance of the pid (not per tick): the resolver's answer is kept until the
    // pid leaves every GPU's list.
    Result<identity::ProcessIdentity> r =
        pid <= static_cast<uint32_t>(INT32_MAX)
            ? resolver_.Resolve(static_cast<int32_t>(pid), &nvml)
            : Result<identity::ProcessIdentity>(MakeError(ErrorCode::kInvalidArgument, "pid out of range"));
    ProcessLabels& p = processes_[pid];
    p.identity.pid = static_cast<int32_t>(pid);
    if (auto g = nvml.find(static_cast<int32_t>(pid)); g != nvml.end()) {
      p.identity.gpu_index = g->second.index;
      p.identity.gpu_uuid = g->second.uuid;
    }
    if (!r) {
      ReportError(Error{r.error().code, fmt::format("GPU process {}: identity not resolved ({}); its series carry "
                                                    "pid and gpu only",
                                                    pid, r.error().message)});
      continue;
    }
    p.identity = r->identity;
    for (auto& [name, value] : r->identity.ToLabelPairs()) {
      // The collector's own labels are authoritative.
      if (name == "pid" || name == "gpu" || name == "gpu_uuid") continue;
      p.labels.emplace_back(std::move(name), std::move(value));
    }
  }
  PublishProcesses();
}

void GpuCollector::PublishProcesses() {
  if (options_.tracked == nullptr) return;
  std::vector<agent::TrackedProcesses::Process> list;
  list.reserve(processes_.size());
  for (const auto& [pid, p] : processes_) {
    list.push_back(agent::TrackedProcesses::Process{static_cast<int32_t>(pid), p.identity, ""});
  }
  options_.tracked->Publish("gpu", std::move(list));
}

void GpuCollector::Identified(GpuState& g, size_t position, const GpuStatic& id) {
  auto base = LabelSet::From({{"gpu", id.index_label}, {"gpu_uuid", id.uuid}});
  if (!base) {
    ReportError(Error{base.error().code, fmt::format("GPU {}: {}", id.index_label, base.error().message)});
    return;
  }
  g.info = id;
  g.base = std::move(*base);
  g.identified = true;
  // Series registered before (stalled/lost with the index only) keep their old labels; from
  // now on every series carries the UUID.
  g.slots.clear();
  // Handed to the event thread in one batch at the end of the tick (see CollectImpl).
  new_targets_.push_back(GpuEventTarget{id.device, position, static_cast<int32_t>(id.index), id.index_label, id.uuid});
}

void GpuCollector::EmitMig(GpuState& g, TimeNs t) {
  // The instances of this reading replace the previous ones: a MIG device gone (reconfigured,
  // MIG off, GPU lost) drops its state, so its series are no longer appended.
  std::vector<std::unique_ptr<GpuState>> next;
  next.reserve(g.reading.mig.size());
  for (const GpuMigReading& m : g.reading.mig) {
    std::unique_ptr<GpuState> inst;
    for (auto& old : g.mig) {
      if (old && old->info.uuid == m.identity.uuid && old->info.index_label == m.identity.index_label) {
        inst = std::move(old);
        break;
      }
    }
    if (!inst) {
      auto base = LabelSet::From(
          {{"gpu", m.identity.index_label}, {"gpu_uuid", m.identity.uuid}, {"parent_gpu", m.identity.parent_index}});
      if (!base) {
        ReportError(Error{base.error().code, fmt::format("MIG device {}: {}", m.identity.index_label,
                                                         base.error().message)});
        continue;
      }
      inst = std::make_unique<GpuState>();
      inst->info = m.identity;
      inst->base = std::move(*base);
      inst->identified = true;
    }
    EmitGpu(*inst, kGpuInfo, 0, 1, t);
    for (const GpuSample& s : m.samples) EmitGpu(*inst, s.metric, s.key, s.value, t);
    next.push_back(std::move(inst));
  }
  g.mig = std::move(next);
}

Result<LabelSet> GpuCollector::SeriesLabels(const GpuState* gpu, uint16_t metric, uint32_t key) const {
  const GpuMetricDef& def = GpuMetricDefs()[metric];
  LabelSet labels = gpu != nullptr ? gpu->base : LabelSet();
  if (metric == kGpuInfo && gpu != nullptr) {
    for (auto [name, value] : {std::pair<std::string_view, std::string_view>{"model", gpu->info.model},
                               {"pci_bus_id", gpu->info.pci_bus_id},
                               {"driver_version", driver_version_}}) {
      auto l = labels.With(name, value);
      if (!l) return l;
      labels = std::move(*l);
    }
  }
  if (!def.d0.label.empty()) {
    auto l = labels.With(def.d0.label, GpuLabelValue(def, 0, key));
    if (!l) return l;
    labels = std::move(*l);
  }
  if (!def.d1.label.empty()) {
    auto l = labels.With(def.d1.label, GpuLabelValue(def, 1, key));
    if (!l) return l;
    labels = std::move(*l);
  }
  if (metric == kGpuProcessMemory && gpu != nullptr) {
    if (auto it = processes_.find(key); it != processes_.end()) {
      for (const auto& [name, value] : it->second.labels) {
        if (labels.Get(name)) continue;  // pid, gpu, gpu_uuid stay the collector's
        auto l = labels.With(name, value);
        if (!l) return l;
        labels = std::move(*l);
      }
    }
  }
  return labels;
}

bool GpuCollector::EmitSlot(Slot& slot, bool is_new, const GpuState* gpu, uint16_t metric, uint32_t key,
                            double value, TimeNs t) {
  if (slot.failed) return false;
  if (is_new) {
    // Cold path: once per series for the life of the collector.
    static const std::vector<MetricDesc> descs = GpuMetricDescs();
    const MetricDesc& desc = descs[metric];
    Result<LabelSet> labels = SeriesLabels(gpu, metric, key);
    Result<SeriesRef> ref = labels ? sink_->RegisterSeries(desc, *labels)
                                   : Result<SeriesRef>(std::unexpected(labels.error()));
    if (!ref) {
      slot.failed = true;
      ReportError(Error{ref.error().code, fmt::format("register {}{}: {} (series skipped from now on)", desc.name,
                                                      labels ? labels->ToString() : std::string(),
                                                      ref.error().message)});
      return false;
    }
    slot.ref = *ref;
  }
  if (Status s = sink_->Append(slot.ref, t, value); !s) {
    if (append_failures_++ == 0) first_append_error_ = s.error().ToString();
  }
  return true;
}

void GpuCollector::EmitGpu(GpuState& gpu, uint16_t metric, uint32_t key, double value, TimeNs t) {
  if (metric >= kGpuMetricCount) return;
  const uint64_t k = SlotKey(metric, key);
  auto it = gpu.slots.find(k);
  if (it == gpu.slots.end()) {
    // Per-link error counters: a counter that stays 0 never becomes a series (see header).
    if (GpuMetricDefs()[metric].on_change && value == 0) return;
    it = gpu.slots.emplace(k, Slot{}).first;
    EmitSlot(it->second, true, &gpu, metric, key, value, t);
    return;
  }
  EmitSlot(it->second, false, &gpu, metric, key, value, t);
}

void GpuCollector::EmitCallStats(TimeNs t) {
  if (!lib_) return;
  const NvmlCallStats& stats = lib_->stats();
  for (uint32_t f = 0; f < kNvmlFamilyCount; f++) {
    const NvmlCallStat& s = stats[f];
    const uint64_t count = s.count.load(std::memory_order_relaxed);
    if (count == 0) continue;  // a family never called (no such feature) is no series
    const std::pair<uint16_t, double> values[] = {
        {kGpuNvmlCalls, static_cast<double>(count)},
        {kGpuNvmlCallSeconds, static_cast<double>(s.sum_ns.load(std::memory_order_relaxed)) / kNsPerSec},
        {kGpuNvmlCallMax, static_cast<double>(s.max_ns.load(std::memory_order_relaxed)) / kNsPerSec},
        {kGpuNvmlCallLast, static_cast<double>(s.last_ns.load(std::memory_order_relaxed)) / kNsPerSec},
    };
    for (const auto& [metric, value] : values) {
      const uint64_t k = SlotKey(metric, f);
      auto it = call_slots_.find(k);
      const bool is_new = it == call_slots_.end();
      if (is_new) it = call_slots_.emplace(k, Slot{}).first;
      EmitSlot(it->second, is_new, nullptr, metric, f, value, t);
    }
  }
}

}  // namespace ithbat::collect
