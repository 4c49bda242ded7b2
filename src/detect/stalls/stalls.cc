#include "detect/stalls/stalls.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::detect {
namespace {

using Samples = std::vector<store::Sample>;

// Samples of one agent tick share a bucket (agents tick once a second; series of one tick are
// stamped within a few milliseconds of each other).
constexpr TimeNs kBucket = kNsPerSec / 2;
TimeNs BucketOf(TimeNs t) { return (t + kBucket / 2) / kBucket * kBucket; }

// A per-process counter's growth over [a, b]: from its last sample before a, or from zero when
// it was born at or after a (the agent registers it at the process's first event there).
double Growth(const Samples& s, TimeNs a, TimeNs b) {
  double prev = 0, total = 0;
  for (const auto& x : s) {
    if (x.t > b) break;
    if (x.t < a) {
      prev = x.v;
      continue;
    }
    total += x.v >= prev ? x.v - prev : x.v;
    prev = x.v;
  }
  return total;
}

enum class TickState : uint8_t { kUnknown, kRunning, kStopped };

struct Tick {
  int known = 0, stopped = 0, by_util = 0, by_launch = 0;
  double util_sum = 0;
  int util_n = 0;
};

struct Stall {
  TimeNs start = 0, end = 0;  // first and last stopped tick
  double seconds = 0;
  bool by_util = false, by_launch = false;
};

struct Save {
  TimeNs begin = 0, end = 0;
  int64_t step = -1;
  const Stall* stall = nullptr;
  // (mount, fstype, op) -> (seconds, calls)
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, double>> io;
  bool slow = false;
};

struct OpJudgement {
  std::string mount, fstype, op;
  double mean = 0, base = 0, calls = 0;
  int base_saves = 0;
};

std::string Pids(const std::vector<const RankProcess*>& procs, const std::string& node) {
  std::string out;
  for (const auto* p : procs) {
    if (p->node != node) continue;
    if (!out.empty()) out += '|';
    out += std::to_string(p->pid);
  }
  return out;
}

// The job's ranks, one process per (node, GPU): the newest one (a restarted rank is a second
// process on the same GPU).
std::vector<const RankProcess*> RankProcs(const JobView& job) {
  std::map<std::pair<std::string, int32_t>, const RankProcess*> by_gpu;
  for (const auto& p : job.processes) {
    if (p.gpu < 0) continue;
    auto& slot = by_gpu[{p.node, p.gpu}];
    if (slot == nullptr || p.first_seen > slot->first_seen) slot = &p;
  }
  std::vector<const RankProcess*> out;
  for (const auto& [k, p] : by_gpu) out.push_back(p);
  return out;
}

Subjects JobSubjects(const JobView& job, const std::vector<const RankProcess*>& procs) {
  Subjects s;
  s.job = job.id;
  for (const auto& n : job.Nodes()) s.nodes.push_back(n);
  for (const auto* p : procs) {
    s.ranks.push_back(p->Ref());
    s.gpus.push_back(p->Gpu());
  }
  return s;
}

class JobStalls {
 public:
  JobStalls(const DetectInput& in, const JobView& job) : in_(in), job_(job), procs_(RankProcs(job)) {}

  void Run(std::vector<Finding>& out) {
    if (procs_.empty()) return;
    BuildTicks();
    FindStalls();
    FindSaves();
    JudgeSaves(out);
    JudgeInputPipeline(out);
  }

 private:
  void BuildTicks() {
    for (const auto& node : job_.Nodes()) {
      std::map<std::string, std::vector<size_t>> by_gpu;
      std::map<int32_t, size_t> by_pid;
      std::string gpus;
      for (size_t i = 0; i < procs_.size(); ++i) {
        if (procs_[i]->node != node) continue;
        const std::string g = std::to_string(procs_[i]->gpu);
        if (by_gpu[g].empty()) gpus += (gpus.empty() ? "" : "|") + g;
        by_gpu[g].push_back(i);
        by_pid[procs_[i]->pid] = i;
      }
      if (by_gpu.empty()) continue;
      // GPU idle per tick.
      std::map<std::pair<TimeNs, size_t>, TickState> state;
      for (const auto& [v, samples] : in_.view.Samples(
               node, fmt::format("ithbat_gpu_utilization_ratio{{gpu=~\"{}\"}}", gpus), in_.from, in_.now)) {
        auto it = by_gpu.find(Label(v.labels, "gpu"));
        if (it == by_gpu.end()) continue;
        for (const auto& s : samples) {
          for (size_t i : it->second) {
            Tick& t = node_ticks_[node][BucketOf(s.t)];
            const bool stop = s.v <= kStallIdleUtil;
            auto& st = state[{BucketOf(s.t), i}];
            if (st == TickState::kUnknown) ++t.known;
            if (stop && st != TickState::kStopped) {
              ++t.stopped;
              ++t.by_util;
            }
            st = stop ? TickState::kStopped : TickState::kRunning;
            t.util_sum += s.v;
            ++t.util_n;
          }
        }
      }
      // Launches while the probes were attached the whole tick (on-fraction 1): none is a stop.
      const std::string pids = Pids(procs_, node);
      std::map<int32_t, std::map<TimeNs, double>> launches, on;
      for (const auto& [v, samples] : in_.view.Samples(
               node, fmt::format("ithbat_probe_launches_total{{pid=~\"{}\"}}", pids), in_.from, in_.now)) {
        auto& m = launches[ParseInt(Label(v.labels, "pid"))];
        for (const auto& s : samples) m[s.t] += s.v;
      }
      for (const auto& [v, samples] : in_.view.Samples(
               node, fmt::format("ithbat_probe_launch_on_fraction{{pid=~\"{}\"}}", pids), in_.from, in_.now)) {
        auto& m = on[ParseInt(Label(v.labels, "pid"))];
        for (const auto& s : samples) m[s.t] = s.v;
      }
      for (const auto& [pid, series] : launches) {
        auto pit = by_pid.find(pid);
        if (pit == by_pid.end()) continue;
        const auto& onf = on[pid];
        auto exact = [&](TimeNs t) {
          auto it = onf.find(t);
          return it != onf.end() && it->second >= 0.999;
        };
        const std::pair<const TimeNs, double>* prev = nullptr;
        for (const auto& kv : series) {
          if (prev != nullptr && exact(prev->first) && exact(kv.first)) {
            const TimeNs b = BucketOf(kv.first);
            Tick& t = node_ticks_[node][b];
            auto& st = state[{b, pit->second}];
            const bool stop = kv.second - prev->second <= 0;
            if (st == TickState::kUnknown) ++t.known;
            if (stop && st != TickState::kStopped) {
              ++t.stopped;
              ++t.by_launch;
            }
            if (stop) st = TickState::kStopped;
            if (!stop && st == TickState::kUnknown) st = TickState::kRunning;
          }
          prev = &kv;
        }
      }
    }
  }

  // Every rank of the node with a signal in the tick is stopped, and at least half have one.
  static bool Stopped(const Tick& t, int procs) { return t.known > 0 && t.stopped == t.known && 2 * t.known >= procs; }

  // Per node, runs of kMinStallTicks stopped ticks between ticks where the node's ranks ran
  // (each tick covers the interval since the previous one); the job stalls where every node
  // does (agents tick at their own offsets: intervals, not buckets, are compared).
  void FindStalls() {
    std::vector<std::vector<Stall>> per_node;
    std::vector<TimeNs> ticks;
    for (const auto& [node, rows] : node_ticks_) {
      if (rows.size() < 2) continue;
      int procs = 0;
      for (const auto* p : procs_) procs += p->node == node ? 1 : 0;
      std::vector<double> gaps;
      for (auto it = std::next(rows.begin()); it != rows.end(); ++it) {
        gaps.push_back(static_cast<double>(it->first - std::prev(it)->first));
      }
      TimeNs tick = static_cast<TimeNs>(Median(gaps));
      if (tick <= 0) tick = kNsPerSec;
      ticks.push_back(tick);
      std::vector<Stall> found;
      bool seen_running = false;
      std::vector<std::pair<TimeNs, const Tick*>> run;
      TimeNs last = 0;
      for (const auto& [t, row] : rows) {
        if (row.known == 0) continue;
        if (last != 0 && t - last > 2 * tick) {
          run.clear();
          seen_running = false;
        }
        last = t;
        if (Stopped(row, procs)) {
          run.emplace_back(t, &row);
          continue;
        }
        if (seen_running && static_cast<int>(run.size()) >= kMinStallTicks) {
          Stall st;
          st.start = run.front().first - tick;
          st.end = run.back().first;
          for (const auto& [rt, rk] : run) {
            st.by_util = st.by_util || rk->by_util > 0;
            st.by_launch = st.by_launch || rk->by_launch > 0;
          }
          found.push_back(st);
        }
        run.clear();
        seen_running = true;
        if (first_running_ == 0 || t < first_running_) first_running_ = t;
      }
      per_node.push_back(std::move(found));
    }
    if (per_node.empty()) return;
    tick_ = static_cast<TimeNs>(Median(std::vector<double>(ticks.begin(), ticks.end())));
    std::vector<Stall> job = per_node.front();
    for (size_t n = 1; n < per_node.size(); ++n) {
      std::vector<Stall> next;
      for (const auto& a : job) {
        for (const auto& b : per_node[n]) {
          const TimeNs lo = std::max(a.start, b.start), hi = std::min(a.end, b.end);
          if (hi <= lo) continue;
          next.push_back({lo, hi, 0, a.by_util || b.by_util, a.by_launch || b.by_launch});
        }
      }
      job = std::move(next);
    }
    for (auto& st : job) {
      st.seconds = static_cast<double>(st.end - st.start) / 1e9;
      stalls_.push_back(st);
    }
  }

  void FindSaves() {
    store::EventQuery q;
    q.kinds = {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd};
    q.job = job_.id;
    q.from = in_.from;
    q.to = in_.now;
    q.limit = 100'000;
    const auto events = in_.view.Events(q);
    // Ranks that all log a save print it once each: one save per begin of the logging rank, or of
    // any rank when the logger is unknown.
    const RankProcess* logger = job_.LoggingProcess();
    for (size_t i = 0; i < events.size(); ++i) {
      const Event& b = events[i];
      if (b.kind != EventKind::kCheckpointBegin) continue;
      if (logger != nullptr && b.identity.rank >= 0 && b.identity.rank != logger->rank) continue;
      if (!saves_.empty() && b.time <= saves_.back().end) continue;
      for (size_t j = i + 1; j < events.size(); ++j) {
        if (events[j].kind == EventKind::kCheckpointEnd && events[j].identity.pid == b.identity.pid) {
          Save s;
          s.begin = b.time;
          s.end = events[j].time;
          s.step = b.step;
          saves_.push_back(std::move(s));
          break;
        }
      }
    }
    if (saves_.empty()) return;
    // The job's write/fsync/close time and calls per mount in each save window, from one scan
    // of each node's series.
    for (const auto& node : job_.Nodes()) {
      const std::string pids = Pids(procs_, node);
      if (pids.empty()) continue;
      for (const char* metric : {"ithbat_io_seconds_total", "ithbat_io_calls_total"}) {
        const bool secs = std::string_view(metric) == "ithbat_io_seconds_total";
        for (const auto& [v, samples] :
             in_.view.Samples(node, fmt::format("{}{{pid=~\"{}\"}}", metric, pids), kMinTime, in_.now)) {
          const auto key = std::make_tuple(Label(v.labels, "mount"), Label(v.labels, "fstype"), Label(v.labels, "op"));
          for (auto& s : saves_) {
            const double g = Growth(samples, s.begin - kSaveSlack, std::min(in_.now, s.end + kSaveSlack));
            auto& acc = s.io[key];
            (secs ? acc.first : acc.second) += g;
          }
        }
      }
    }
    for (auto& s : saves_) {
      for (const auto& st : stalls_) {
        if (st.start <= s.end + kSaveSlack && st.end >= s.begin - kSaveSlack) {
          s.stall = &st;
          break;
        }
      }
    }
  }

  void JudgeSaves(std::vector<Finding>& out) {
    if (saves_.empty()) return;
    // Baselines per (mount, fstype, op): the median of the per-call means of the earlier saves
    // that were not slow. A median, not a pooled mean: a save that degraded just short of the
    // factor would otherwise join the baseline and raise the bar every later save is held to,
    // so a mount that worsens in steps (a loaded NFS server) would hide itself. The median moves
    // only when most earlier saves moved.
    std::map<std::tuple<std::string, std::string, std::string>, std::vector<double>> base;
    std::vector<std::pair<const Save*, std::vector<OpJudgement>>> slow;
    for (auto& s : saves_) {
      std::vector<OpJudgement> rose;
      for (const auto& [key, v] : s.io) {
        const auto& [mount, fstype, op] = key;
        if (v.second <= 0) continue;
        const auto it = base.find(key);
        if (it == base.end()) continue;
        const int n = static_cast<int>(it->second.size());
        if (n < kMinBaselineSaves) continue;
        const double mean = v.first / v.second, bmean = Median(it->second);
        if (bmean <= 0) continue;
        if (mean >= kStorageLatencyFactor * bmean && mean - bmean >= kMinLatencyRiseSeconds) {
          rose.push_back({mount, fstype, op, mean, bmean, v.second, n});
        }
      }
      s.slow = !rose.empty();
      if (!s.slow) {
        for (const auto& [key, v] : s.io) {
          if (v.second <= 0) continue;
          base[key].push_back(v.first / v.second);
        }
      } else {
        slow.emplace_back(&s, std::move(rose));
      }
    }
    EmitStorage(slow, out);
    if (slow.empty()) EmitCheckpointStrategy(out);
  }

  // Other jobs whose same op on the mount ran at least kStorageLatencyFactor x this job's
  // baseline during the slow saves: the mount hurts them too.
  std::vector<std::string> OtherJobs(const OpJudgement& j, const std::vector<const Save*>& saves) const {
    std::map<std::string, std::pair<double, double>> per_job;
    for (const char* metric : {"ithbat_io_seconds_total", "ithbat_io_calls_total"}) {
      const bool secs = std::string_view(metric) == "ithbat_io_seconds_total";
      for (const auto& [v, samples] :
           in_.view.Samples("", fmt::format("{}{{mount={},op={},job_id!={}}}", metric, Quote(j.mount), Quote(j.op),
                                            Quote(job_.id)),
                            kMinTime, in_.now)) {
        const std::string other = Label(v.labels, "job_id");
        if (other.empty()) continue;
        for (const Save* s : saves) {
          const double g = Growth(samples, s->begin - kSaveSlack, std::min(in_.now, s->end + kSaveSlack));
          (secs ? per_job[other].first : per_job[other].second) += g;
        }
      }
    }
    std::vector<std::string> out;
    for (const auto& [id, v] : per_job) {
      if (v.second > 0 && v.first / v.second >= kStorageLatencyFactor * j.base) out.push_back(id);
    }
    return out;
  }

  void AddStallEvidence(Finding& f, const std::vector<const Save*>& saves, double healthy_save_s) const {
    double stalled = 0;
    bool util = false, launch = false;
    TimeWindow w{saves.front()->begin, saves.back()->end};
    for (const Save* s : saves) {
      stalled += s->stall->seconds;
      util = util || s->stall->by_util;
      launch = launch || s->stall->by_launch;
    }
    const std::string n = std::to_string(procs_.size());
    if (util) {
      f.evidence.push_back(MakeEvidence("ithbat_gpu_utilization_ratio", kCollectorGpu, "job " + job_.id, stalled, 0, "s",
                              fmt::format("all {} of the job's GPUs idle (<= {:.0f}% busy) for {:.1f} s over {} save(s)",
                                          n, 100 * kStallIdleUtil, stalled, saves.size()),
                              w));
    }
    if (launch) {
      f.evidence.push_back(MakeEvidence("ithbat_probe_launches_total", kCollectorProbes, "job " + job_.id, stalled, 0, "s",
                              fmt::format("no kernel launched on any of the job's {} ranks (probes attached) during "
                                          "the save-time stalls",
                                          n),
                              w));
    }
    double save_s = 0;
    for (const Save* s : saves) save_s += static_cast<double>(s->end - s->begin) / 1e9;
    f.evidence.push_back(MakeEvidence(
        "checkpoint_begin/checkpoint_end", kCollectorJoblog, "job " + job_.id, save_s / saves.size(), healthy_save_s,
        "s",
        fmt::format("the stalls line up with {} save(s) the job logged (steps {}), {:.1f} s each on average", saves.size(),
                    fmt::join([&] {
                      std::vector<int64_t> st;
                      for (const Save* s : saves) st.push_back(s->step);
                      return st;
                    }(),
                              ","),
                    save_s / saves.size()),
        w));
  }

  double WallSeconds() const {
    return first_running_ > 0 ? static_cast<double>(in_.now - first_running_) / 1e9 : 0;
  }

  void EmitStorage(const std::vector<std::pair<const Save*, std::vector<OpJudgement>>>& slow,
                   std::vector<Finding>& out) const {
    // Per shared mount: the slow saves whose stall stopped the job.
    std::map<std::string, std::vector<std::pair<const Save*, const OpJudgement*>>> by_mount;
    for (const auto& [s, ops] : slow) {
      if (s->stall == nullptr) continue;
      for (const auto& o : ops) {
        if (IsSharedFsType(o.fstype)) by_mount[o.mount].emplace_back(s, &o);
      }
    }
    double healthy_stall = 0, healthy_save = 0;
    int healthy_n = 0;
    for (const auto& s : saves_) {
      if (s.slow) continue;
      healthy_stall += s.stall != nullptr ? s.stall->seconds : 0;
      healthy_save += static_cast<double>(s.end - s.begin) / 1e9;
      ++healthy_n;
    }
    if (healthy_n > 0) {
      healthy_stall /= healthy_n;
      healthy_save /= healthy_n;
    }
    for (const auto& [mount, hits] : by_mount) {
      Finding f;
      f.detector = "stalls";
      f.verdict = Verdict::kInfrastructure;
      f.cause = Cause::kStorage;
      f.subjects = JobSubjects(job_, procs_);
      f.subjects.resource = mount;
      std::vector<const Save*> saves;
      std::map<std::string, const OpJudgement*> worst;  // per op: the largest rise
      for (const auto& [s, o] : hits) {
        if (saves.empty() || saves.back() != s) saves.push_back(s);
        auto& w = worst[o->op];
        if (w == nullptr || o->mean / o->base > w->mean / w->base) w = o;
      }
      f.window = {saves.front()->begin, saves.back()->end};
      f.provable_at = std::min(in_.now, std::max(saves.front()->end + kSaveSlack, saves.front()->stall->end + tick_));
      for (const auto& [op, o] : worst) {
        f.evidence.push_back(MakeEvidence(fmt::format("ithbat_io_seconds_total/ithbat_io_calls_total{{op=\"{}\"}}", op),
                                kCollectorSchedIo, mount, o->mean, o->base, "s/call",
                                fmt::format("{} on {} ({}) took {:.3f} s per call in the slow save(s), {:.1f}x the "
                                            "{:.3f} s mean of the {} earlier save(s)",
                                            op, mount, o->fstype, o->mean, o->mean / o->base, o->base, o->base_saves),
                                f.window));
      }
      AddStallEvidence(f, saves, healthy_save);
      for (const auto& [op, o] : worst) {
        for (const auto& other : OtherJobs(*o, saves)) {
          if (std::find(f.subjects.other_jobs.begin(), f.subjects.other_jobs.end(), other) == f.subjects.other_jobs.end()) {
            f.subjects.other_jobs.push_back(other);
          }
        }
      }
      double stalled = 0;
      for (const Save* s : saves) stalled += s->stall->seconds;
      const double excess = std::max(0.0, stalled - healthy_stall * static_cast<double>(saves.size()));
      f.lost_gpu_seconds = excess * static_cast<double>(procs_.size());
      const double wall = WallSeconds();
      f.speedup_with_fix = wall > excess && excess > 0 ? wall / (wall - excess) : 1.0;
      f.baseline_origin = fmt::format("the job's own earlier saves on {} ({} healthy save(s))", mount, healthy_n);
      f.confidence = std::min(1.0, 0.6 + 0.2 * static_cast<double>(saves.size()));
      const OpJudgement* top = worst.begin()->second;
      for (const auto& [op, o] : worst) {
        if (o->mean / o->base > top->mean / top->base) top = o;
      }
      f.summary = fmt::format(
          "Job {} stopped on all {} ranks for {:.1f} s during {} save(s) to shared mount {} ({}): {} latency {:.3f} s "
          "per call, {:.1f}x its {:.3f} s baseline{}",
          job_.id, procs_.size(), stalled, saves.size(), mount, top->fstype, top->op, top->mean, top->mean / top->base,
          top->base,
          f.subjects.other_jobs.empty() ? std::string()
                                        : fmt::format("; jobs {} slowed on the same mount",
                                                      fmt::join(f.subjects.other_jobs, ", ")));
      out.push_back(std::move(f));
    }
  }

  void EmitCheckpointStrategy(std::vector<Finding>& out) const {
    std::vector<const Save*> aligned;
    double stalled = 0;
    for (const auto& s : saves_) {
      if (s.stall == nullptr) continue;
      aligned.push_back(&s);
      stalled += s.stall->seconds;
    }
    const double wall = WallSeconds();
    if (static_cast<int>(aligned.size()) < kMinCheckpointStalls || wall <= 0) return;
    const double share = stalled / wall;
    if (share < kCheckpointStallShare) return;
    Finding f;
    f.detector = "stalls";
    f.verdict = Verdict::kJob;
    f.cause = Cause::kCheckpointStrategy;
    f.subjects = JobSubjects(job_, procs_);
    // The mount the saves wrote most to, for the report.
    std::map<std::string, double> calls;
    for (const Save* s : aligned) {
      for (const auto& [key, v] : s->io) calls[std::get<0>(key)] += v.second;
    }
    std::string mount;
    double most = 0;
    for (const auto& [m, c] : calls) {
      if (c > most) {
        most = c;
        mount = m;
      }
    }
    f.window = {aligned.front()->begin, aligned.back()->end};
    f.provable_at = std::min(in_.now, aligned[kMinCheckpointStalls - 1]->stall->end + tick_);
    AddStallEvidence(f, aligned, 0);
    f.evidence.push_back(MakeEvidence("save-aligned stall share", kCollectorGpu, "job " + job_.id, share, kCheckpointStallShare,
                            "ratio",
                            fmt::format("synchronous saves stopped training {:.0f}% of {:.0f} s of wall time; save "
                                        "latency stayed at its baseline{}",
                                        100 * share, wall, mount.empty() ? "" : " on " + mount),
                            f.window));
    f.lost_gpu_seconds = stalled * static_cast<double>(procs_.size());
    f.speedup_with_fix = wall > stalled ? wall / (wall - stalled) : 1.0;
    f.baseline_origin = "the job's own running time between saves (saves made asynchronous)";
    f.confidence = std::min(1.0, 0.5 + share);
    f.summary = fmt::format(
        "Job {} stops on all {} ranks for {:.1f} s per save on average ({} saves, {:.0f}% of wall time) while its "
        "storage latency stays at baseline: the checkpoints are large and synchronous",
        job_.id, procs_.size(), stalled / static_cast<double>(aligned.size()), aligned.size(), 100 * share);
    out.push_back(std::move(f));
  }

  void JudgeInputPipeline(std::vector<Finding>& out) const {
    if (first_running_ == 0) return;
    const TimeNs steady = first_running_;
    if (in_.now - steady < kMinSteadyWindow) return;
    const double steady_s = static_cast<double>(in_.now - steady) / 1e9;
    // Utilisation outside saves.
    double util = 0;
    int n = 0;
    for (const auto& [node, rows] : node_ticks_) {
      for (const auto& [t, tick] : rows) {
        if (t < steady || tick.util_n == 0) continue;
        bool in_save = false;
        for (const auto& s : saves_) in_save = in_save || (t >= s.begin - kSaveSlack && t <= s.end + kSaveSlack);
        if (in_save) continue;
        util += tick.util_sum;
        n += tick.util_n;
      }
    }
    if (n == 0) return;
    const double mean_util = util / n;
    if (mean_util > kInputMaxUtil) return;
    int waiting = 0, seen = 0;
    double least = INFINITY, most = 0, loader = 0;
    TimeNs last_sample = steady;
    for (const auto& node : job_.Nodes()) {
      const std::string pids = Pids(procs_, node);
      if (pids.empty()) continue;
      std::map<std::string, double> asleep;
      for (const auto& v : in_.view.Increase(
               node,
               fmt::format("ithbat_sched_offcpu_seconds_total{{pid=~\"{}\",scope=\"main\",class=\"sleep\"}}", pids),
               steady, in_.now, FleetView::Birth::kZero)) {
        asleep[Label(v.labels, "pid")] += v.value;
      }
      for (const auto* p : procs_) {
        if (p->node != node) continue;
        const double share = asleep[std::to_string(p->pid)] / steady_s;
        waiting += share >= kInputWaitShare ? 1 : 0;
        least = std::min(least, share);
        most = std::max(most, share);
        ++seen;
      }
      for (const auto& [v, samples] : in_.view.Samples(
               node, fmt::format("ithbat_sched_oncpu_seconds_total{{pid=~\"{}\",scope=\"children\"}}", pids), kMinTime,
               in_.now)) {
        loader += Growth(samples, steady, in_.now);
        if (!samples.empty()) last_sample = std::max(last_sample, samples.back().t);
      }
    }
    if (seen == 0 || 2 * waiting < seen) return;
    const double cores = loader / (steady_s * static_cast<double>(seen));
    if (cores < kLoaderBusyCores) return;
    Finding f;
    f.detector = "stalls";
    f.verdict = Verdict::kJob;
    f.cause = Cause::kInputPipeline;
    f.subjects = JobSubjects(job_, procs_);
    f.window = {steady, in_.now};
    f.provable_at = std::min(in_.now, last_sample);
    f.evidence.push_back(MakeEvidence("ithbat_gpu_utilization_ratio", kCollectorGpu, "job " + job_.id, mean_util, kInputMaxUtil,
                            "ratio",
                            fmt::format("the job's {} GPUs were busy {:.0f}% of steady training on average: they wait "
                                        "between steps, all alike",
                                        procs_.size(), 100 * mean_util),
                            f.window));
    f.evidence.push_back(MakeEvidence("ithbat_sched_offcpu_seconds_total{scope=\"main\",class=\"sleep\"}", kCollectorSchedIo,
                            "job " + job_.id, least, kInputWaitShare, "ratio",
                            fmt::format("{} of {} ranks' main threads asleep outside CUDA >= {:.0f}% of the time "
                                        "({:.0f}%..{:.0f}%): waiting for data, not for a peer",
                                        waiting, seen, 100 * kInputWaitShare, 100 * least, 100 * most),
                            f.window));
    f.evidence.push_back(MakeEvidence("ithbat_sched_oncpu_seconds_total{scope=\"children\"}", kCollectorSchedIo,
                            "job " + job_.id, cores, kLoaderBusyCores, "cores/rank",
                            fmt::format("the data-loader workers ran {:.2f} cores per rank: the loader is CPU-bound",
                                        cores),
                            f.window));
    // Without the wait the GPUs would be busy as a healthy job's are (at least kInputMaxUtil).
    f.lost_gpu_seconds = std::max(0.0, kInputMaxUtil - mean_util) * steady_s * static_cast<double>(procs_.size());
    f.speedup_with_fix = mean_util > 0 ? std::max(1.0, kInputMaxUtil / mean_util) : 1.0;
    f.baseline_origin = fmt::format("a GPU busy at least {:.0f}% of the time (kInputMaxUtil), not measured on this job",
                                    100 * kInputMaxUtil);
    f.confidence = 0.7;
    f.summary = fmt::format(
        "Job {}'s {} GPUs were busy only {:.0f}% of the time while {} of {} ranks' main threads slept waiting for data "
        "and the loader workers used {:.2f} cores per rank: the input pipeline cannot keep up",
        job_.id, procs_.size(), 100 * mean_util, waiting, seen, cores);
    out.push_back(std::move(f));
  }

  const DetectInput& in_;
  const JobView& job_;
  std::vector<const RankProcess*> procs_;
  std::map<std::string, std::map<TimeNs, Tick>> node_ticks_;
  TimeNs tick_ = kNsPerSec;
  TimeNs first_running_ = 0;
  std::vector<Stall> stalls_;
  std::vector<Save> saves_;
};

}  // namespace

bool IsSharedFsType(std::string_view fstype) {
  // Network and cluster file systems, and FUSE (client daemons of object stores and parallel
  // file systems: s3fs, gcsfuse, lustre/weka/juicefs clients).
  for (std::string_view prefix : {"nfs", "lustre", "fuse", "ceph", "gpfs", "beegfs", "cifs", "smb", "glusterfs",
                                  "wekafs", "panfs", "9p", "orangefs", "pvfs2", "afs", "virtiofs"}) {
    if (fstype.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

std::vector<Finding> DetectStalls(const DetectInput& in) {
  std::vector<Finding> out;
  for (const auto& job : in.jobs) {
    JobStalls(in, job).Run(out);
  }
  return out;
}

}  // namespace ithbat::detect
