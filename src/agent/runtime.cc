#include "agent/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "agent/logging.h"
#include "core/version.h"

namespace ithbat::agent {
namespace {

// Shorter intervals would have the ticker spin; nothing worth collecting changes that fast.
constexpr TimeNs kMinInterval = kNsPerMs;
// Longest the ticker sleeps in one go: a realtime clock stepped forward is noticed within it.
constexpr TimeNs kMaxSleep = kNsPerSec;

enum SelfMetric { kUp, kErrors, kTimeouts, kDuration, kDegraded, kSelfMetricCount };

// What collectors get instead of the runtime's Sink. After Close() every call fails with
// kUnavailable without touching the real sink, so a Collect abandoned at Stop (its thread
// detached) cannot write into a sink its owner has since destroyed. Costs two atomic
// increments per call.
class GuardedSink final : public Sink {
 public:
  explicit GuardedSink(Sink& target) : target_(target) {}

  Result<SeriesRef> RegisterSeries(const MetricDesc& desc, const LabelSet& labels) override {
    return Call<SeriesRef>([&] { return target_.RegisterSeries(desc, labels); });
  }
  ithbat::Status Append(SeriesRef ref, TimeNs t, double value) override {
    return Call<void>([&] { return target_.Append(ref, t, value); });
  }
  ithbat::Status AppendEvent(Event event) override {
    return Call<void>([&] { return target_.AppendEvent(std::move(event)); });
  }
  ithbat::Status RecordStep(std::string_view job, int32_t rank, StepSpan span) override {
    return Call<void>([&] { return target_.RecordStep(job, rank, span); });
  }

  // Refuses new calls, then waits (up to `deadline`, monotonic) for calls in flight. False
  // when some are still in the target at the deadline.
  bool Close(TimeNs deadline) {
    closed_.store(true);
    while (in_flight_.load() > 0) {
      if (MonotonicNowNs() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  template <class T, class F>
  Result<T> Call(F&& f) {
    // seq_cst on both sides: either Close sees this call in flight, or this call sees closed_.
    in_flight_.fetch_add(1);
    if (closed_.load()) {
      in_flight_.fetch_sub(1);
      return MakeError(ErrorCode::kUnavailable, "the agent runtime has stopped");
    }
    Result<T> r = f();
    in_flight_.fetch_sub(1);
    return r;
  }

  Sink& target_;
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> in_flight_{0};
};

// Everything a worker thread touches lives here, held by shared_ptr from both the runtime and
// the thread: a worker detached at Stop keeps its collector, its sink guard and this state
// alive until its Collect finally returns, whatever happens to the Runtime.
struct Worker {
  std::shared_ptr<Collector> collector;
  std::shared_ptr<GuardedSink> sink;
  TimeNs interval = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::optional<TimeNs> pending;  // the tick to collect next; a newer tick replaces it
  bool stop = false;
  bool busy = false;
  TimeNs busy_since = 0;  // monotonic
  TimeNs busy_tick = 0;
  bool timed_out = false;  // the running Collect was marked by the watchdog
  bool exited = false;

  void Run() {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || pending.has_value(); });
      if (stop) break;
      const TimeNs tick = *pending;
      pending.reset();
      busy = true;
      busy_since = MonotonicNowNs();
      busy_tick = tick;
      lock.unlock();
      // Errors are counted and logged by the collector's front.
      (void)collector->Collect(tick);
      lock.lock();
      busy = false;
      if (timed_out) {
        timed_out = false;
        GetLogger("agent")->info("collector {}: the collect of tick {} returned after {} ms",
                                 collector->name(), FormatRfc3339(tick),
                                 (MonotonicNowNs() - busy_since) / kNsPerMs);
      }
    }
    exited = true;
    cv.notify_all();
  }
};

struct Slot {
  std::shared_ptr<Worker> worker;
  std::string name;
  TimeNs interval = 0;
  bool failed = false;  // Init or Start failed: no thread, self-metrics only
  std::thread thread;
  bool abandoned = false;
  // Touched by the ticker thread only.
  TimeNs next_tick = 0;
  std::optional<SeriesRef> self_refs[kSelfMetricCount];
  std::optional<bool> last_up;
};

TimeNs AlignDown(TimeNs t, TimeNs interval) {
  TimeNs q = t / interval;
  if (t % interval < 0) --q;
  return q * interval;
}

}  // namespace

struct Runtime::Impl {
  enum class State { kNew, kRunning, kStopped };

  Impl(Sink& s, RuntimeOptions o) : sink(s), options(std::move(o)), guard(std::make_shared<GuardedSink>(s)) {}

  Sink& sink;
  RuntimeOptions options;
  std::shared_ptr<GuardedSink> guard;

  mutable std::mutex mu;  // state and slots (slots are fixed once Start runs)
  State state = State::kNew;
  std::vector<std::unique_ptr<Slot>> slots;

  std::mutex tick_mu;  // stopping, for the ticker and maintenance threads' waits
  std::condition_variable tick_cv;
  bool stopping = false;
  std::thread ticker;
  std::thread maintainer;

  void RunTicker();
  void RunMaintenance();
  void Dispatch(Slot& slot, TimeNs tick);
  void WriteSelf(Slot& slot, TimeNs tick);
  void RegisterSelf(Slot& slot);
  void RegisterBuildInfo();
  std::optional<SeriesRef> build_info;  // written by the ticker thread only, once started
  TimeNs build_info_written = kMinTime;  // its newest sample (the store wants them in order)
  void StopWorkers();
  void CollectorStateEvent(const std::string& name, TimeNs t, std::string text);
};

std::vector<MetricDesc> Runtime::DescribeSelf() {
  const std::vector<std::string> labels = {"collector"};
  return {
      {"ithbat_collector_up",
       "Whether the collector's last collect finished in time without error (1) or not (0)", "",
       MetricType::kGauge, labels},
      {"ithbat_collector_errors_total",
       "Failed collects, partial errors and watchdog timeouts of the collector", "", MetricType::kCounter,
       labels},
      {"ithbat_collector_timeouts_total", "Collects the watchdog found running past the collect deadline", "",
       MetricType::kCounter, labels},
      {"ithbat_collector_last_collect_duration_seconds", "Wall time of the collector's last finished collect",
       "seconds", MetricType::kGauge, labels},
      {"ithbat_collector_degraded", "Whether the collector works only in part (1) or fully (0)", "",
       MetricType::kGauge, labels},
      // Last: not one per collector (RegisterSelf registers the first kSelfMetricCount only).
      {"ithbat_build_info",
       "Always 1; labels carry the agent's version, build type and compiler (a fleet mid-upgrade shows which "
       "nodes run what)",
       "",
       MetricType::kGauge,
       {"version", "build_type", "compiler"}},
  };
}

Runtime::Runtime(Sink& sink, RuntimeOptions options)
    : impl_(std::make_unique<Impl>(sink, std::move(options))) {}

Runtime::~Runtime() { Stop(); }

ithbat::Status Runtime::Add(std::unique_ptr<Collector> collector, TimeNs interval) {
  if (!collector) return MakeError(ErrorCode::kInvalidArgument, "null collector");
  if (interval < 0) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "collector '{}': negative interval", collector->name());
  }
  std::lock_guard lock(impl_->mu);
  if (impl_->state != Impl::State::kNew) {
    return MakeErrorF(ErrorCode::kInternal, "collector '{}' added after the runtime started",
                      collector->name());
  }
  if (collector->name().empty() || collector->name().size() > kMaxLabelValueBytes) {
    return MakeError(ErrorCode::kInvalidArgument, "a collector needs a name (at most 1 KiB)");
  }
  for (const auto& s : impl_->slots) {
    if (s->name == collector->name()) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "a collector named '{}' was already added", s->name);
    }
  }
  auto slot = std::make_unique<Slot>();
  slot->name = collector->name();
  slot->interval = interval == 0 ? impl_->options.interval : interval;
  slot->worker = std::make_shared<Worker>();
  slot->worker->collector = std::shared_ptr<Collector>(std::move(collector));
  slot->worker->sink = impl_->guard;
  slot->worker->interval = slot->interval;
  impl_->slots.push_back(std::move(slot));
  return Ok();
}

ithbat::Status Runtime::Start() {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  if (im.state != Impl::State::kNew)
    return MakeError(ErrorCode::kInternal, "the runtime was already started");
  if (im.options.interval < kMinInterval || im.options.collect_deadline < kMinInterval ||
      im.options.maintenance_interval < kMinInterval) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "interval, collect deadline and maintenance interval must be >= 1ms");
  }
  for (const auto& s : im.slots) {
    if (s->interval < kMinInterval) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "collector '{}': interval must be >= 1ms", s->name);
    }
  }
  auto log = GetLogger("agent");
  const TimeNs now = NowNs();
  for (auto& slot_ptr : im.slots) {
    Slot& slot = *slot_ptr;
    Collector& c = *slot.worker->collector;
    ithbat::Status s = c.Init(*im.guard);
    if (s) s = c.Start();
    if (!s) {
      slot.failed = true;
      log->error("collector {} failed to start and stays down: {}", slot.name, s.error().ToString());
      im.CollectorStateEvent(slot.name, now, "failed to start: " + s.error().ToString());
    } else {
      try {
        slot.thread = std::thread([w = slot.worker] { w->Run(); });
      } catch (const std::system_error& e) {
        slot.failed = true;
        log->error("collector {}: cannot start its thread: {}", slot.name, e.what());
        c.Stop();
      }
    }
    im.RegisterSelf(slot);
    slot.next_tick = AlignDown(now, slot.interval) + slot.interval;
  }
  im.RegisterBuildInfo();
  im.state = Impl::State::kRunning;
  try {
    im.ticker = std::thread([&im] { im.RunTicker(); });
    if (im.options.maintenance) im.maintainer = std::thread([&im] { im.RunMaintenance(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard tl(im.tick_mu);
      im.stopping = true;
    }
    im.tick_cv.notify_all();
    if (im.ticker.joinable()) im.ticker.join();
    im.StopWorkers();
    im.state = Impl::State::kStopped;
    return MakeErrorF(ErrorCode::kResourceExhausted, "cannot start the runtime's threads: {}", e.what());
  }
  log->info("runtime started: {} collectors, default interval {} ms", im.slots.size(),
            im.options.interval / kNsPerMs);
  return Ok();
}

void Runtime::Stop() {
  Impl& im = *impl_;
  std::lock_guard lock(im.mu);
  if (im.state == Impl::State::kStopped) return;
  if (im.state == Impl::State::kNew) {
    im.state = Impl::State::kStopped;
    return;
  }
  {
    std::lock_guard tl(im.tick_mu);
    im.stopping = true;
  }
  im.tick_cv.notify_all();
  if (im.ticker.joinable()) im.ticker.join();
  im.StopWorkers();
  if (im.maintainer.joinable()) im.maintainer.join();
  // What was collected up to here is flushed even when the last periodic run was long ago.
  if (im.options.maintenance) im.options.maintenance(NowNs());
  im.state = Impl::State::kStopped;
  GetLogger("agent")->info("runtime stopped");
}

void Runtime::Impl::StopWorkers() {
  for (auto& slot : slots) {
    std::lock_guard wl(slot->worker->mu);
    slot->worker->stop = true;
    slot->worker->cv.notify_all();
  }
  // One deadline for all workers, so Stop is bounded by collect_deadline however many hang.
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options.collect_deadline);
  for (auto& slot : slots) {
    if (!slot->thread.joinable()) continue;
    Worker& w = *slot->worker;
    bool exited = false;
    {
      std::unique_lock wl(w.mu);
      exited = w.cv.wait_until(wl, until, [&] { return w.exited; });
    }
    if (exited) {
      slot->thread.join();
      continue;
    }
    // The thread holds its own shared_ptr to the worker (collector and sink guard included),
    // so nothing it touches is freed when the runtime goes.
    slot->thread.detach();
    slot->abandoned = true;
    bool marked = false;
    {
      std::lock_guard wl(w.mu);
      marked = w.timed_out;
    }
    if (!marked) w.collector->MarkTimedOut("collect still running at shutdown; abandoned");
    GetLogger("agent")->warn(
        "collector {}: its collect did not return before the stop deadline; thread abandoned", slot->name);
  }
  // A collector whose thread is gone (or never ran) can be stopped; an abandoned one may still
  // be inside CollectImpl, so it is left alone rather than stopped under its own feet.
  for (auto& slot : slots) {
    if (!slot->abandoned) slot->worker->collector->Stop();
  }
  const TimeNs guard_deadline = MonotonicNowNs() + options.collect_deadline;
  if (!guard->Close(guard_deadline)) {
    GetLogger("agent")->error("a sink call of an abandoned collector is still running at shutdown");
  }
}

void Runtime::Impl::RegisterSelf(Slot& slot) {
  auto labels = LabelSet::From({{"collector", slot.name}});
  if (!labels) {
    GetLogger("agent")->error("collector {}: no self-metrics: {}", slot.name, labels.error().ToString());
    return;
  }
  const std::vector<MetricDesc> descs = DescribeSelf();
  for (int i = 0; i < kSelfMetricCount; ++i) {
    auto ref = sink.RegisterSeries(descs[i], *labels);
    if (!ref) {
      GetLogger("agent")->error("collector {}: cannot register {}: {}", slot.name, descs[i].name,
                                ref.error().ToString());
      continue;
    }
    slot.self_refs[i] = *ref;
  }
}

void Runtime::Impl::CollectorStateEvent(const std::string& name, TimeNs t, std::string text) {
  Event e;
  e.time = t;
  e.kind = EventKind::kCollectorState;
  e.source = "agent";
  e.name = name;
  e.text = std::move(text);
  if (auto s = sink.AppendEvent(std::move(e)); !s) {
    GetLogger("agent")->debug("collector {}: state event not stored: {}", name, s.error().ToString());
  }
}

void Runtime::Impl::Dispatch(Slot& slot, TimeNs tick) {
  if (slot.failed) return;
  Worker& w = *slot.worker;
  std::lock_guard wl(w.mu);
  // A hung collect gets no new ticks until it returns: they would only queue behind it. A
  // merely slow one keeps the newest tick and runs it right after (older ones are skipped).
  if (w.busy && w.timed_out) return;
  w.pending = tick;
  w.cv.notify_all();
}

void Runtime::Impl::RegisterBuildInfo() {
  auto labels = LabelSet::From(
      {{"version", kVersion}, {"build_type", *kBuildType ? kBuildType : "none"}, {"compiler", kCompiler}});
  if (!labels) {
    GetLogger("agent")->error("no ithbat_build_info: {}", labels.error().ToString());
    return;
  }
  auto ref = sink.RegisterSeries(DescribeSelf()[kSelfMetricCount], *labels);
  if (!ref) {
    GetLogger("agent")->error("cannot register ithbat_build_info: {}", ref.error().ToString());
    return;
  }
  build_info = *ref;
}

void Runtime::Impl::WriteSelf(Slot& slot, TimeNs tick) {
  const CollectorHealth h = slot.worker->collector->Health();
  const double values[kSelfMetricCount] = {
      h.up ? 1.0 : 0.0,
      static_cast<double>(h.errors),
      static_cast<double>(h.timeouts),
      static_cast<double>(h.last_duration) / static_cast<double>(kNsPerSec),
      h.degraded.empty() ? 0.0 : 1.0,
  };
  for (int i = 0; i < kSelfMetricCount; ++i) {
    if (!slot.self_refs[i]) continue;
    if (auto s = sink.Append(*slot.self_refs[i], tick, values[i]); !s) {
      GetLogger("agent")->debug("collector {}: self-metric not stored: {}", slot.name, s.error().ToString());
    }
  }
  // Transitions become events (the timeline of an incident shows when a source went dark).
  // The first finished collect sets the baseline; failures to start were reported at Start.
  if (h.collects > 0 || h.timeouts > 0) {
    if (slot.last_up && *slot.last_up != h.up) {
      CollectorStateEvent(slot.name, tick, h.up ? "up" : "down: " + h.last_error);
    }
    slot.last_up = h.up;
  }
}

void Runtime::Impl::RunTicker() {
  std::unique_lock lock(tick_mu);
  while (!stopping) {
    lock.unlock();
    const TimeNs now_mono = MonotonicNowNs();
    TimeNs sleep = kMaxSleep;

    // Watchdog first, so a collector found hung now does not get this instant's tick.
    for (auto& slot : slots) {
      if (slot->failed) continue;
      Worker& w = *slot->worker;
      std::optional<std::string> reason;
      {
        std::lock_guard wl(w.mu);
        if (w.busy && !w.timed_out) {
          const TimeNs running = now_mono - w.busy_since;
          if (running >= options.collect_deadline) {
            w.timed_out = true;
            w.pending.reset();  // a tick queued behind the hang is stale by now
            reason = fmt::format(
                "collect of tick {} still running after {} ms (deadline {} ms); marked down, "
                "ticks skipped until it returns",
                FormatRfc3339(w.busy_tick), running / kNsPerMs, options.collect_deadline / kNsPerMs);
          } else {
            sleep = std::min(sleep, options.collect_deadline - running);
          }
        }
      }
      if (reason) {
        w.collector->MarkTimedOut(*reason);
        CollectorStateEvent(slot->name, NowNs(), "timed out: " + *reason);
      }
    }

    const TimeNs now = NowNs();
    // Written as often as the fastest collector ticks, so /metrics never drops it as stale.
    bool build_info_due = build_info.has_value();
    for (auto& slot_ptr : slots) {
      Slot& slot = *slot_ptr;
      if (now >= slot.next_tick) {
        if (build_info_due && AlignDown(now, slot.interval) > build_info_written) {
          build_info_written = AlignDown(now, slot.interval);
          (void)sink.Append(*build_info, build_info_written, 1.0);  // a constant: nothing to lose
          build_info_due = false;
        }
        const TimeNs tick = AlignDown(now, slot.interval);
        Dispatch(slot, tick);
        WriteSelf(slot, tick);
        slot.next_tick = tick + slot.interval;
      } else if (slot.next_tick - now > 2 * slot.interval) {
        // The realtime clock went back: follow it rather than wait for it to catch up.
        GetLogger("agent")->warn("collector {}: the clock went back by {} ms", slot.name,
                                 (slot.next_tick - now) / kNsPerMs);
        slot.next_tick = AlignDown(now, slot.interval) + slot.interval;
      }
      sleep = std::min(sleep, slot.next_tick - now);
    }

    lock.lock();
    if (sleep > 0) {
      tick_cv.wait_for(lock, std::chrono::nanoseconds(sleep), [&] { return stopping; });
    }
  }
  lock.unlock();
  // The self-metrics of a tick are written before its collect runs, so the last periodic sample
  // can lag the last collect by one (a first collect longer than the interval leaves "up 0"
  // stored although it succeeded). One more sample as the runtime stops, from this thread (one
  // writer per series) and before Stop marks the collectors down, records how each collector
  // really ended; `agent --once` prints exactly this.
  const TimeNs stopped_at = NowNs();
  for (auto& slot : slots) WriteSelf(*slot, stopped_at);
}

void Runtime::Impl::RunMaintenance() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(tick_mu);
  auto next = Clock::now() + std::chrono::nanoseconds(options.maintenance_interval);
  const bool upkeep = options.upkeep && options.upkeep_interval > 0;
  auto next_upkeep = Clock::now() + std::chrono::nanoseconds(options.upkeep_interval);
  for (;;) {
    const auto wake = upkeep ? std::min(next, next_upkeep) : next;
    if (tick_cv.wait_until(lock, wake, [&] { return stopping; })) return;
    const auto now = Clock::now();
    lock.unlock();
    if (now >= next) {
      options.maintenance(NowNs());
    } else {
      options.upkeep();
    }
    lock.lock();
    if (now >= next) {
      next += std::chrono::nanoseconds(options.maintenance_interval);
      // A maintenance run longer than its interval: start the next one now, not a backlog.
      next = std::max(next, Clock::now());
    }
    if (upkeep && now >= next_upkeep) {
      next_upkeep = std::max(next_upkeep + std::chrono::nanoseconds(options.upkeep_interval), Clock::now());
    }
  }
}

std::vector<CollectorStatus> Runtime::Status() const {
  std::lock_guard lock(impl_->mu);
  std::vector<CollectorStatus> out;
  out.reserve(impl_->slots.size());
  for (const auto& slot : impl_->slots) {
    out.push_back({slot->name, slot->interval, slot->worker->collector->Health()});
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<MetricDesc>>> Runtime::DescribeByCollector() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::pair<std::string, std::vector<MetricDesc>>> out;
  out.emplace_back("agent", DescribeSelf());
  for (const auto& slot : impl_->slots) out.emplace_back(slot->name, slot->worker->collector->Describe());
  return out;
}

std::vector<MetricDesc> Runtime::DescribeAll() const {
  std::vector<MetricDesc> all;
  for (auto& [name, descs] : DescribeByCollector()) {
    for (auto& d : descs) all.push_back(std::move(d));
  }
  // Two collectors may declare the same metric (e.g. one per GPU vendor); it is listed once,
  // as the first declared it.
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return all[a].name != all[b].name ? all[a].name < all[b].name : a < b;
  });
  std::vector<MetricDesc> out;
  out.reserve(all.size());
  for (size_t i : order) {
    if (out.empty() || out.back().name != all[i].name) out.push_back(std::move(all[i]));
  }
  return out;
}

}  // namespace ithbat::agent
