#include "detect/inference/efficiency.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::detect {
namespace {

constexpr TimeNs kBucket = kNsPerSec / 2;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Stats events read per log-only server (and in discovery): about 5 per line, so 10^5 events
// are ~20 000 lines, 28 hours of vLLM's 5 s stats interval.
constexpr size_t kLogEventLimit = 100'000;

// A stats event's place in a scrape: 0 running, 1 waiting, 2 KV usage, -1 none (vLLM and
// SGLang name them differently: collect/joblog/parsers/serving.cc).
int LogField(std::string_view name) {
  if (name == "running_requests" || name == "batch_size") return 0;
  if (name == "waiting_requests" || name == "queued_requests") return 1;
  if (name == "kv_cache_usage_ratio" || name == "token_usage_ratio") return 2;
  return -1;
}

TimeNs BucketOf(TimeNs t) { return (t + kBucket / 2) / kBucket * kBucket; }

struct Scrape {
  // per engine_index: running, waiting, kv usage
  std::map<std::string, std::tuple<double, double, double>> engines;
};

// A counter's increase over its samples in the window (resets count the new value).
double SeriesGrowth(const std::vector<store::Sample>& s) {
  double total = 0;
  for (size_t i = 1; i < s.size(); ++i) total += s[i].v >= s[i - 1].v ? s[i].v - s[i - 1].v : s[i].v;
  return total;
}

class Server {
 public:
  Server(const DetectInput& in, ServingEndpoint key, int servers_on_node)
      : in_(in), key_(std::move(key)), servers_on_node_(servers_on_node) {}

  void Run(std::vector<Finding>& out) {
    if (key_.from_log) {
      const bool sglang = key_.engine == "sglang";
      collector_ = kCollectorJoblog;
      signal_running_ = sglang ? "batch_size" : "running_requests";
      signal_waiting_ = sglang ? "queued_requests" : "waiting_requests";
      signal_kv_ = sglang ? "token_usage_ratio" : "kv_cache_usage_ratio";
      scrape_word_ = "stats lines";
      scrape_one_ = "stats line";
      LoadLog();
    } else {
      Load();
    }
    if (scrapes_.empty()) return;
    FindGpus();
    Estimate();
    bool config_found = false;
    if (slots_ > 0) {
      config_found = JudgeServingConfig(out);
      JudgeOverProvisioned(out);
    }
    JudgeQueuePressure(out, config_found);
  }

 private:
  std::string Sel(const char* metric) const {
    return fmt::format("{}{{engine={},port={},pid={}}}", metric, Quote(key_.engine), Quote(key_.port), Quote(key_.pid));
  }
  std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> Get(const char* metric) const {
    return in_.view.Samples(key_.node, Sel(metric), in_.from, in_.now);
  }
  double Sum(const char* metric) const {
    double total = 0;
    for (const auto& [v, s] : Get(metric)) total += SeriesGrowth(s);
    return total;
  }

  void Load() {
    for (const char* m : {"ithbat_serving_max_num_seqs", "ithbat_serving_max_concurrent_requests"}) {
      for (const auto& [v, s] : Get(m)) {
        for (const auto& x : s) slots_ = std::max(slots_, x.v);
      }
      if (slots_ > 0) break;
    }
    for (const auto& [v, s] : Get("ithbat_serving_tensor_parallel_size")) {
      for (const auto& x : s) tp_ = std::max(tp_, static_cast<int>(x.v));
    }
    for (const auto& [v, s] : Get("ithbat_serving_kv_cache_blocks")) {
      double m = 0;
      for (const auto& x : s) m = std::max(m, x.v);
      kv_blocks_[Label(v.labels, "engine_index")] = m;
    }
    int which = 0;
    for (const char* m :
         {"ithbat_serving_requests_running", "ithbat_serving_requests_waiting", "ithbat_serving_kv_cache_usage_ratio"}) {
      for (const auto& [v, s] : Get(m)) {
        const std::string e = Label(v.labels, "engine_index");
        has_kv_ = has_kv_ || (which == 2 && !s.empty());
        for (const auto& x : s) {
          auto& slot = scrapes_[BucketOf(x.t)].engines[e];
          (which == 0 ? std::get<0>(slot) : which == 1 ? std::get<1>(slot) : std::get<2>(slot)) = x.v;
        }
      }
      ++which;
    }
  }

  // One scrape per stats line: the running, waiting and KV fields of the lines the server printed
  // at one time (vLLM V1 prints one line per engine). A line missing any of the three (cut, or a
  // format without it) is no scrape: a guessed 0 would read as "nothing waits" or "KV empty".
  void LoadLog() {
    store::EventQuery q;
    q.kinds = {EventKind::kServingMetric};
    q.job = key_.job;
    q.pid = ParseInt(key_.pid);
    q.from = in_.from;
    q.to = in_.now;
    q.limit = kLogEventLimit;
    std::map<std::pair<TimeNs, std::string>, std::array<double, 3>> lines;
    for (const Event& e : in_.view.Events(q)) {
      if (e.identity.node != key_.node || EventAttr(e, "engine") != key_.engine) continue;
      const int field = LogField(e.name);
      if (field < 0 || !std::isfinite(e.value)) continue;
      auto [it, fresh] =
          lines.try_emplace({e.time, EventAttr(e, "engine_index")}, std::array<double, 3>{kNaN, kNaN, kNaN});
      it->second[static_cast<size_t>(field)] = e.value;
    }
    for (const auto& [at, f] : lines) {
      if (std::isnan(f[0]) || std::isnan(f[1]) || std::isnan(f[2])) continue;
      scrapes_[BucketOf(at.first)].engines[at.second] = {f[0], f[1], f[2]};
      has_kv_ = true;
    }
  }

  void FindGpus() {
    // The GPUs whose compute process is the server's pid; else those holding processes that no
    // training job's rank owns, when the node runs this one server.
    std::set<std::string> job_pids;
    for (const auto& j : in_.jobs) {
      for (const auto& p : j.processes) {
        if (p.node == key_.node) job_pids.insert(std::to_string(p.pid));
      }
    }
    std::map<int32_t, std::string> own, free;
    for (const auto& [v, s] : in_.view.Samples(key_.node, "ithbat_gpu_process_memory_used_bytes", in_.from, in_.now)) {
      if (s.empty()) continue;
      const std::string pid = Label(v.labels, "pid"), g = Label(v.labels, "gpu");
      const int32_t idx = ParseInt(g);
      if (idx < 0) continue;
      if (pid == key_.pid) own[idx] = Label(v.labels, "gpu_uuid");
      if (!job_pids.contains(pid) && Label(v.labels, "job_id").empty()) free[idx] = Label(v.labels, "gpu_uuid");
    }
    const auto& chosen = !own.empty() ? own : servers_on_node_ == 1 ? free : own;
    gpu_origin_ = !own.empty() ? "the server's own GPU processes" : "GPU processes on the node no training job owns";
    for (const auto& [idx, uuid] : chosen) gpus_.push_back(GpuRef{key_.node, idx, uuid});
    if (gpus_.empty()) return;
    std::string sel;
    for (const auto& g : gpus_) sel += (sel.empty() ? "" : "|") + std::to_string(g.index);
    double sum = 0;
    int n = 0;
    for (const auto& [v, s] : in_.view.Samples(key_.node, fmt::format("ithbat_gpu_utilization_ratio{{gpu=~\"{}\"}}", sel),
                                               in_.from, in_.now)) {
      for (const auto& x : s) {
        sum += x.v;
        ++n;
      }
    }
    util_ = n > 0 ? sum / n : -1;
  }

  void Estimate() {
    const double prefill = Sum("ithbat_serving_prefill_seconds_total");
    const double decode = Sum("ithbat_serving_decode_seconds_total");
    prefill_share_ = prefill + decode > 0 ? prefill / (prefill + decode) : -1;
    double kv_sum = 0, kv_blocks_used = 0, running_sum = 0;
    int kv_n = 0;
    for (const auto& [t, sc] : scrapes_) {
      double run = 0;
      for (const auto& [e, v] : sc.engines) {
        const auto& [r, w, kv] = v;
        run += r;
        peak_engine_running_ = std::max(peak_engine_running_, r);
        kv_sum += kv;
        kv_peak_ = std::max(kv_peak_, kv);
        ++kv_n;
        auto it = kv_blocks_.find(e);
        if (it != kv_blocks_.end() && r > 0) {
          kv_blocks_used += kv * it->second;
          running_sum += r;
        }
      }
      running_.push_back(run);
    }
    engines_ = 0;
    for (const auto& [t, sc] : scrapes_) engines_ = std::max(engines_, static_cast<int>(sc.engines.size()));
    kv_mean_ = kv_n > 0 ? kv_sum / kv_n : -1;
    const double blocks_per_request = running_sum > 0 ? kv_blocks_used / running_sum : 0;
    double blocks_per_engine = 0;
    for (const auto& [e, b] : kv_blocks_) blocks_per_engine = std::max(blocks_per_engine, b);
    // Load by Little's law: requests started per second x time one request is served.
    double requests = Sum("ithbat_serving_time_to_first_token_requests_total");
    const double window_s = static_cast<double>(scrapes_.rbegin()->first - scrapes_.begin()->first) / 1e9;
    // Arrivals: the requests admitted plus the growth of the queue (a queue that only grows
    // holds load the server never admitted).
    double queued_first = 0, queued_last = 0;
    for (const auto& [e, v] : scrapes_.begin()->second.engines) queued_first += std::get<1>(v);
    for (const auto& [e, v] : scrapes_.rbegin()->second.engines) queued_last += std::get<1>(v);
    if (requests > 0 && window_s > 0 && prefill + decode > 0) {
      const double arrivals = requests + std::max(0.0, queued_last - queued_first);
      concurrency_ = arrivals / window_s * (prefill + decode) / requests;
    } else {
      concurrency_ = Mean(running_);
    }
    kv_needed_blocks_ = concurrency_ * blocks_per_request;
    kv_per_engine_ = blocks_per_engine;
    auto gpus_for = [&](double per_replica) {
      double replicas = std::ceil(concurrency_ / std::max(1.0, per_replica));
      if (blocks_per_engine > 0) replicas = std::max(replicas, std::ceil(kv_needed_blocks_ / (kTargetKvShare * blocks_per_engine)));
      return static_cast<int>(std::max(1.0, replicas)) * std::max(1, tp_);
    };
    gpus_batched_ = gpus_for(kTargetSlotShare * slots_);
    // At the same latency: a replica takes up to the concurrency one already ran, or a quarter of
    // its slots (kOverProvisionedOccupancy): a decode step at a small batch is memory-bound and
    // barely slows as the batch grows.
    gpus_same_latency_ = gpus_for(std::max(peak_engine_running_, kOverProvisionedOccupancy * slots_));
  }

  Finding Base(Cause cause) const {
    Finding f;
    f.detector = "inference_efficiency";
    f.cause = cause;
    f.subjects.job = key_.id;
    f.subjects.nodes = {key_.node};
    f.subjects.gpus = gpus_;
    const int32_t pid = ParseInt(key_.pid);
    f.subjects.ranks.push_back(RankRef{-1, -1, key_.node, pid});
    f.window = {scrapes_.begin()->first, scrapes_.rbegin()->first};
    return f;
  }

  void AddReport(Finding& f, int gpus_needed, const std::string& how) const {
    const std::string subject = key_.id + " on " + key_.node;
    if (prefill_share_ >= 0) {
      f.evidence.push_back(MakeEvidence("ithbat_serving_prefill_seconds_total/ithbat_serving_decode_seconds_total",
                              kCollectorServing, subject, prefill_share_, 0, "ratio",
                              fmt::format("prefill took {:.0f}% of the engine's prefill+decode time", 100 * prefill_share_),
                              f.window));
    }
    if (kv_mean_ >= 0) {
      f.evidence.push_back(MakeEvidence("ithbat_serving_kv_cache_usage_ratio", kCollectorServing, subject, 1 - kv_peak_, 0, "ratio",
                              fmt::format("KV-cache headroom {:.0f}% at peak ({:.0f}% on average)", 100 * (1 - kv_peak_),
                                          100 * (1 - kv_mean_)),
                              f.window));
    }
    const int held = static_cast<int>(gpus_.empty() ? engines_ * std::max(1, tp_) : gpus_.size());
    f.evidence.push_back(MakeEvidence("GPUs needed for the same load", kCollectorServing, subject, gpus_needed, held, "GPUs",
                            fmt::format("{:.1f} requests in service on average (Little's law) fit on {} GPU(s) of {} "
                                        "held ({}; tensor parallel {}, KV {:.0f} blocks per replica)",
                                        concurrency_, gpus_needed, held, how, std::max(1, tp_), kv_per_engine_),
                            f.window));
    const double window_s = static_cast<double>(f.window.end - f.window.start) / 1e9;
    if (held > gpus_needed) {
      f.lost_gpu_seconds = static_cast<double>(held - gpus_needed) * window_s;
      f.speedup_with_fix = static_cast<double>(held) / std::max(1, gpus_needed);  // the same load on fewer GPUs
    }
    f.baseline_origin = fmt::format("the server's own load (requests, prefill and decode time, KV per request); GPUs "
                                    "from {}; subject named {}",
                                    gpu_origin_, key_.job.empty() ? "engine:port (no job id tagged)" : "by its job id");
  }

  void AddGpuEvidence(Finding& f, double expected, const std::string& note) const {
    if (util_ < 0) return;
    f.evidence.push_back(MakeEvidence("ithbat_gpu_utilization_ratio", kCollectorGpu, key_.id + " GPUs", util_, expected, "ratio",
                            note, f.window));
  }

  // Whether it reported serving_config (free slots).
  bool JudgeServingConfig(std::vector<Finding>& out) const {
    int both = 0, streak = 0, seen = 0;
    double wait_sum = 0, run_sum = 0;
    TimeNs first = 0;
    for (const auto& [t, sc] : scrapes_) {
      ++seen;
      bool hit = false;
      for (const auto& [e, v] : sc.engines) {
        const auto& [r, w, kv] = v;
        wait_sum += w;
        run_sum += r;
        if (w >= 1 && r <= kServingFreeSlotShare * slots_ && kv < kServingKvFull) hit = true;
      }
      if (hit) {
        ++both;
        if (++streak == kServingDebounce && first == 0) first = t;
      } else {
        streak = 0;
      }
    }
    if (first == 0 || static_cast<double>(both) < kServingWaitingShare * seen) return false;
    Finding f = Base(Cause::kServingConfig);
    const int engines = std::max(1, engines_);
    f.provable_at = first;
    const std::string subject = key_.id + " on " + key_.node;
    f.evidence.push_back(MakeEvidence("ithbat_serving_requests_waiting", kCollectorServing, subject, wait_sum / seen / engines, 0,
                            "requests",
                            fmt::format("requests waited with free slots in {} of {} scrapes ({:.1f} waiting per replica "
                                        "on average)",
                                        both, seen, wait_sum / seen / engines),
                            f.window));
    f.evidence.push_back(MakeEvidence("ithbat_serving_requests_running/ithbat_serving_max_num_seqs", kCollectorServing, subject,
                            run_sum / seen / engines, slots_, "requests",
                            fmt::format("{:.1f} of {:.0f} slots running per replica on average", run_sum / seen / engines,
                                        slots_),
                            f.window));
    AddGpuEvidence(f, kOverProvisionedMaxUtil,
                   fmt::format("the server's {} GPUs were busy {:.0f}% of the time while the queue grew: they work on "
                               "too few requests at once",
                               gpus_.size(), 100 * util_));
    AddReport(f, gpus_batched_, "with the queue batched into the free slots");
    f.verdict = util_ >= 0 ? Verdict::kJob : Verdict::kInconclusive;
    f.confidence = std::min(1.0, static_cast<double>(both) / seen);
    f.summary = fmt::format(
        "Server {} on {}: requests waited while slots were free in {} of {} scrapes ({:.1f} of {:.0f} slots running per "
        "replica, {:.1f} waiting); prefill {:.0f}% of GPU time, KV headroom {:.0f}% at peak; {} GPU(s) would serve the "
        "load with batching instead of {}",
        key_.id, key_.node, both, seen, run_sum / seen / engines, slots_, wait_sum / seen / engines,
        100 * std::max(0.0, prefill_share_), 100 * (1 - kv_peak_), gpus_batched_,
        gpus_.empty() ? engines * std::max(1, tp_) : static_cast<int>(gpus_.size()));
    out.push_back(std::move(f));
    return true;
  }

  // What the scrapes of one kind of queue pressure add up to.
  struct Pressure {
    int hits = 0;
    int streak = 0;
    TimeNs first = 0;  // the kServingDebounce-th hit in a row
    TimeNs last = 0;
    double waiting = 0, running = 0, kv = 0;  // summed over the engines under pressure
    int engine_scrapes = 0;
  };
  enum class Queue : uint8_t { kNone, kCapacity, kSlotCap, kLimitUnknown };
  static std::string_view QueueName(Queue q) {
    return q == Queue::kCapacity ? "capacity" : q == Queue::kSlotCap ? "slot-cap" : "slot-limit-unknown";
  }

  // A queue beside which engine state (see the header: under_provisioned, serving_config (b),
  // and the slot limit unknown).
  Queue Classify(double running, double waiting, double kv) const {
    // Without a KV gauge (TGI exports none) the cache cannot be told full or empty.
    if (waiting < 1 || !has_kv_) return Queue::kNone;
    if (kv >= kServingKvFull) return Queue::kCapacity;
    if (slots_ <= 0) return Queue::kLimitUnknown;
    if (running < slots_) return Queue::kNone;  // a slot is free: JudgeServingConfig's case (a), or admitting
    return kv < kSlotCapKvShare ? Queue::kSlotCap : Queue::kCapacity;
  }

  // config_found: JudgeServingConfig reported this server (one serving_config per server).
  void JudgeQueuePressure(std::vector<Finding>& out, bool config_found) const {
    std::map<Queue, Pressure> by;
    for (const auto& [t, sc] : scrapes_) {
      std::set<Queue> seen_here;
      for (const auto& [e, v] : sc.engines) {
        const auto& [r, w, kv] = v;
        const Queue q = Classify(r, w, kv);
        if (q == Queue::kNone) continue;
        Pressure& p = by[q];
        p.waiting += w;
        p.running += r;
        p.kv += kv;
        ++p.engine_scrapes;
        seen_here.insert(q);
      }
      for (auto& [q, p] : by) {
        if (!seen_here.contains(q)) {
          p.streak = 0;
          continue;
        }
        ++p.hits;
        p.last = t;
        if (++p.streak == kServingDebounce && p.first == 0) p.first = t;
      }
    }
    const int seen = static_cast<int>(scrapes_.size());
    for (const auto& [q, p] : by) {
      const bool proven = p.first != 0 && static_cast<double>(p.hits) >= kServingWaitingShare * seen;
      // Material shorter than a pattern, every scrape of it under pressure: said, not proven.
      const bool brief = !proven && seen < kServingDebounce && p.hits == seen;
      if (in_.trace != nullptr) {
        in_.trace->push_back(
            fmt::format("inference_efficiency: {} on {}: {} queue in {} of {} {} (needs {} in a row and "
                        "{:.0f}% of them): {}",
                        key_.id, key_.node, QueueName(q), p.hits, seen, scrape_word_, kServingDebounce,
                        100 * kServingWaitingShare,
                        proven  ? "reported"
                        : brief ? "reported inconclusive (too few)"
                                : "no pattern"));
      }
      if (!proven && !brief) continue;
      if (q == Queue::kSlotCap && config_found) continue;
      out.push_back(QueueFinding(q, p, seen, proven));
    }
  }

  Finding QueueFinding(Queue q, const Pressure& p, int seen, bool proven) const {
    Finding f = Base(q == Queue::kCapacity ? Cause::kUnderProvisioned : Cause::kServingConfig);
    const double n = std::max(1, p.engine_scrapes);
    const double waiting = p.waiting / n, running = p.running / n, kv = p.kv / n;
    const std::string subject = key_.id + " on " + key_.node;
    f.provable_at = proven ? p.first : p.last;
    f.evidence.push_back(
        MakeEvidence(signal_waiting_, collector_, subject, waiting, 0, "requests",
                     fmt::format("{:.1f} requests waited per replica on average in {} of {} {}", waiting,
                                 p.hits, seen, scrape_word_),
                     f.window));
    f.evidence.push_back(MakeEvidence(
        signal_kv_, collector_, subject, kv, q == Queue::kSlotCap ? kSlotCapKvShare : kServingKvFull, "ratio",
        fmt::format("the KV cache was {:.0f}% full meanwhile", 100 * kv), f.window));
    f.evidence.push_back(
        MakeEvidence(signal_running_, collector_, subject, running, slots_, "requests",
                     slots_ > 0 ? fmt::format("{:.1f} of {:.0f} slots ran", running, slots_)
                                : fmt::format("{:.1f} requests ran; the slot limit is not known", running),
                     f.window));
    AddGpuEvidence(
        f, kOverProvisionedMaxUtil,
        fmt::format("the server's {} GPUs were busy {:.0f}% of the time", gpus_.size(), 100 * util_));
    std::string what;
    switch (q) {
      case Queue::kCapacity:
        what = fmt::format(
            "is at its capacity: requests waited while {}",
            kv >= kServingKvFull
                ? fmt::format("the KV cache was {:.0f}% full", 100 * kv)
                : fmt::format("all {:.0f} slots ran and the KV cache was {:.0f}% full", slots_, 100 * kv));
        break;
      case Queue::kSlotCap:
        what = fmt::format(
            "is capped by its slot limit: all {:.0f} slots ran with requests waiting while the KV cache was "
            "only {:.0f}% full (room for about {:.0f} times the batch at {:.0f}%)",
            slots_, 100 * kv, kv > 0 ? kTargetKvShare / kv : 0.0, 100 * kTargetKvShare);
        break;
      default:
        what = fmt::format(
            "kept requests waiting with the KV cache {:.0f}% full, but exposes no slot limit: whether its "
            "configuration or its load caps it is not known",
            100 * kv);
        break;
    }
    f.summary = fmt::format(
        "Server {} on {} {} ({:.1f} waiting, {:.1f} running per replica on average, in {} of {} {})", key_.id,
        key_.node, what, waiting, running, p.hits, seen, scrape_word_);
    std::vector<std::string> missing;
    if (!proven) {
      missing.push_back(fmt::format("{} {} only: a pattern needs {} in a row", seen,
                                    seen == 1 ? scrape_one_ : scrape_word_, kServingDebounce));
    }
    if (q == Queue::kLimitUnknown)
      missing.push_back("the slot limit (start the server with --max-num-seqs, or let the agent scrape it)");
    if (util_ < 0) missing.push_back("GPU counters: a slow GPU is not ruled out");
    if (!missing.empty()) f.summary += fmt::format("; missing: {}", fmt::join(missing, "; "));
    f.verdict = proven && q != Queue::kLimitUnknown && util_ >= 0 ? Verdict::kJob : Verdict::kInconclusive;
    f.confidence = proven ? std::min(1.0, static_cast<double>(p.hits) / seen)
                          : 0.5 * static_cast<double>(seen) / kServingDebounce;
    f.baseline_origin = fmt::format("the server's own {}; subject named {}",
                                    key_.from_log ? "stats lines (its output)" : "/metrics",
                                    key_.job.empty() ? "by engine (no job id tagged)" : "by its job id");
    return f;
  }

  void JudgeOverProvisioned(std::vector<Finding>& out) const {
    const int seen = static_cast<int>(scrapes_.size());
    if (seen < kOverProvisionedMinScrapes || util_ < 0 || gpus_.empty()) return;
    int idle = 0;
    for (const auto& [t, sc] : scrapes_) {
      double w = 0;
      for (const auto& [e, v] : sc.engines) w += std::get<1>(v);
      idle += w < 1 ? 1 : 0;
    }
    const int engines = std::max(1, engines_);
    const double p95 = Quantile(running_, 0.95);
    const int held = static_cast<int>(gpus_.size());
    if (static_cast<double>(idle) < kIdleQueueShare * seen || p95 > kOverProvisionedOccupancy * slots_ * engines ||
        util_ > kOverProvisionedMaxUtil || gpus_same_latency_ > kOverProvisionedGpuShare * held) {
      return;
    }
    Finding f = Base(Cause::kOverProvisioned);
    f.provable_at = scrapes_.rbegin()->first;
    const std::string subject = key_.id + " on " + key_.node;
    f.evidence.push_back(MakeEvidence("ithbat_serving_requests_running/ithbat_serving_max_num_seqs", kCollectorServing, subject,
                            p95, slots_ * engines, "requests",
                            fmt::format("nothing waited in {} of {} scrapes; at most {:.0f} of {:.0f} slots ran (95th "
                                        "percentile)",
                                        idle, seen, p95, slots_ * engines),
                            f.window));
    AddGpuEvidence(f, kOverProvisionedMaxUtil,
                   fmt::format("the server's {} GPUs were busy only {:.0f}% of the time", held, 100 * util_));
    AddReport(f, gpus_same_latency_, "at the per-replica concurrency it already runs, so at the same latency");
    f.verdict = Verdict::kJob;
    f.confidence = 0.6;
    f.summary = fmt::format(
        "Server {} on {} is over-provisioned: nothing waits, at most {:.0f} of {:.0f} slots run, its {} GPUs are busy "
        "{:.0f}%; {} GPU(s) would serve the same load at the same latency",
        key_.id, key_.node, p95, slots_ * engines, held, 100 * util_, gpus_same_latency_);
    out.push_back(std::move(f));
  }

  const DetectInput& in_;
  ServingEndpoint key_;
  // Where the scrapes came from, as the evidence names it.
  std::string collector_{kCollectorServing};
  std::string signal_running_ = "ithbat_serving_requests_running";
  std::string signal_waiting_ = "ithbat_serving_requests_waiting";
  std::string signal_kv_ = "ithbat_serving_kv_cache_usage_ratio";
  std::string scrape_word_ = "scrapes", scrape_one_ = "scrape";
  bool has_kv_ = false;  // a KV-usage value was read (from /metrics or every stats line)
  int servers_on_node_ = 1;
  std::string gpu_origin_;
  double slots_ = 0;
  int tp_ = 1, engines_ = 0;
  std::map<std::string, double> kv_blocks_;
  std::map<TimeNs, Scrape> scrapes_;
  std::vector<GpuRef> gpus_;
  double util_ = -1;
  std::vector<double> running_;
  double prefill_share_ = -1, kv_mean_ = -1, kv_peak_ = 0, peak_engine_running_ = 0;
  double concurrency_ = 0, kv_needed_blocks_ = 0, kv_per_engine_ = 0;
  int gpus_batched_ = 0, gpus_same_latency_ = 0;
};

}  // namespace

std::vector<ServingEndpoint> DiscoverServers(const FleetView& view, TimeNs from, TimeNs to) {
  std::map<std::tuple<std::string, std::string, std::string, std::string>, ServingEndpoint> seen;
  for (const auto& [v, s] : view.Samples("", "ithbat_serving_up", from, to)) {
    TimeWindow w{kMaxTime, kMinTime};
    for (const auto& x : s) {
      if (!(x.v > 0)) continue;
      w.start = std::min(w.start, x.t);
      w.end = std::max(w.end, x.t);
    }
    if (w.start > w.end) continue;  // never up
    ServingEndpoint e{v.node, Label(v.labels, "engine"), Label(v.labels, "port"), Label(v.labels, "pid"),
                      Label(v.labels, "job_id"), "", w};
    auto [it, fresh] = seen.try_emplace({e.node, e.engine, e.port, e.pid}, e);
    if (fresh) continue;
    it->second.window = {std::min(it->second.window.start, w.start), std::max(it->second.window.end, w.end)};
    if (it->second.job.empty()) it->second.job = e.job;
  }
  std::vector<ServingEndpoint> out;
  std::set<std::string> scraped_nodes;
  for (auto& [key, e] : seen) {
    e.id = e.job.empty() ? e.engine + ":" + e.port : e.job;
    scraped_nodes.insert(e.node);
    out.push_back(std::move(e));
  }
  // Servers known by their stats lines only, on nodes where nothing was scraped: where both
  // exist, /metrics is the richer source (slot limit, KV blocks, prefill time) and the log would
  // name the same server twice.
  store::EventQuery q;
  q.kinds = {EventKind::kServingMetric};
  q.from = from;
  q.to = to;
  q.limit = kLogEventLimit;
  std::map<std::tuple<std::string, std::string, int32_t, std::string>, ServingEndpoint> logged;
  for (const Event& e : view.Events(q)) {
    if (scraped_nodes.contains(e.identity.node) || LogField(e.name) < 0) continue;
    const std::string engine = EventAttr(e, "engine");
    auto [it, fresh] = logged.try_emplace({e.identity.node, e.identity.job, e.identity.pid, engine});
    ServingEndpoint& s = it->second;
    if (fresh) {
      s = ServingEndpoint{e.identity.node,
                          engine,
                          "",
                          std::to_string(e.identity.pid),
                          e.identity.job,
                          "",
                          TimeWindow{e.time, e.time},
                          true};
      s.id = s.job.empty() ? fmt::format("{} (pid {})", engine, e.identity.pid) : s.job;
    }
    s.window = {std::min(s.window.start, e.time), std::max(s.window.end, e.time)};
  }
  for (auto& [key, e] : logged) out.push_back(std::move(e));
  return out;
}

std::vector<Finding> DetectInferenceEfficiency(const DetectInput& in) {
  const std::vector<ServingEndpoint> servers = DiscoverServers(in.view, in.from, in.now);
  std::map<std::string, int> per_node;
  for (const auto& e : servers) ++per_node[e.node];
  std::vector<Finding> out;
  for (const auto& e : servers) Server(in, e, per_node[e.node]).Run(out);
  return out;
}

}  // namespace ithbat::detect
