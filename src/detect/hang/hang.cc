#include "detect/hang/hang.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::detect {
namespace {

// One process's NCCL calls (summed over ops): the newest count, when it first counted, when it
// last grew, and its newest sample.
struct Calls {
  const RankProcess* proc = nullptr;
  double count = 0;
  double first_count = 0;
  std::optional<TimeNs> first;
  std::optional<TimeNs> last_growth;
  TimeNs newest = 0;
};

Calls CallsOf(const FleetView& view, const RankProcess& p, TimeNs from, TimeNs to) {
  Calls c;
  c.proc = &p;
  for (const auto& [v, samples] : view.Samples(
           p.node, fmt::format("ithbat_probe_nccl_ops_total{{pid={}}}", Quote(std::to_string(p.pid))), from, to)) {
    if (samples.empty()) continue;
    c.count += samples.back().v;
    c.newest = std::max(c.newest, samples.back().t);
    double prev = 0;  // born at its first call: the first value is growth
    bool counted = false;
    for (const auto& s : samples) {
      if (s.v > 0 && !counted) {
        counted = true;
        c.first_count += s.v;
        if (!c.first || s.t < *c.first) c.first = s.t;
      }
      if (s.v > prev && (!c.last_growth || s.t > *c.last_growth)) c.last_growth = s.t;
      prev = s.v;
    }
  }
  return c;
}

}  // namespace

std::vector<Finding> DetectHang(const DetectInput& in) {
  std::vector<Finding> out;
  for (const auto& job : in.jobs) {
    // The newest process of each rank.
    std::vector<Calls> ranks;
    for (int32_t r : job.Ranks()) {
      const RankProcess* p = job.Process(r);
      if (p == nullptr) continue;
      Calls c = CallsOf(in.view, *p, std::max(in.from, p->first_seen), in.now);
      if (c.count > 0) ranks.push_back(c);
    }
    if (ranks.size() < 2) continue;
    // The job stopped: no rank's count grew for long, and every process still reports.
    TimeNs stop = 0, oldest_report = kMaxTime, earliest = kMaxTime;
    for (const auto& c : ranks) {
      stop = std::max(stop, c.last_growth.value_or(0));
      oldest_report = std::min(oldest_report, c.newest);
      if (c.first) earliest = std::min(earliest, *c.first);
    }
    if (in.now - oldest_report > kHangAliveNs) continue;
    // No call at all inside the window (a hang older than the window): stopped at least since
    // the window's first sample.
    const bool older_than_window = stop == 0 || stop <= earliest;
    if (stop == 0) stop = earliest;
    if (stop == kMaxTime) continue;
    std::vector<double> counts;
    for (const auto& c : ranks) counts.push_back(c.count);
    const double median = Median(counts);
    std::vector<const Calls*> hung, peers;
    for (const auto& c : ranks) (c.count < median ? hung : peers).push_back(&c);
    if (hung.empty()) continue;
    // The job's own collective period: the hung rank's mean time between calls before the stop.
    double period = 0;
    for (const Calls* h : hung) {
      if (h->first && h->last_growth && h->count > h->first_count) {
        period = std::max(period, static_cast<double>(*h->last_growth - *h->first) / (h->count - h->first_count));
      }
    }
    if (period <= 0 && !older_than_window) continue;
    const double need = std::max(kHangMinStallPeriods * period, static_cast<double>(kHangMinQuietNs));
    const TimeNs quiet = in.now - stop;
    if (static_cast<double>(quiet) < need) continue;

    // The peers' GPUs spin in the collective.
    const TimeNs quiet_from = stop + kNsPerSec;  // the next sample on
    std::vector<double> peer_util, hung_util;
    for (const auto& c : ranks) {
      if (c.proc->gpu < 0) continue;
      const bool is_hung = std::any_of(hung.begin(), hung.end(), [&](const Calls* h) { return h == &c; });
      for (const auto& v : in.view.Mean(c.proc->node,
                                        fmt::format("ithbat_gpu_utilization_ratio{{gpu={}}}",
                                                    Quote(std::to_string(c.proc->gpu))),
                                        quiet_from, in.now)) {
        (is_hung ? hung_util : peer_util).push_back(v.value);
      }
    }
    const double spin = peer_util.empty() ? 0 : Mean(peer_util);
    const bool spinning = !peer_util.empty() && spin >= kHangSpinUtil;

    Finding f;
    f.detector = "hang";
    f.subjects.job = job.id;
    std::set<std::string> nodes;
    std::vector<std::string> names;
    for (const Calls* h : hung) {
      const RankProcess& p = *h->proc;
      f.subjects.ranks.push_back({p.rank, p.local_rank, p.node, p.pid});
      if (p.gpu >= 0) f.subjects.gpus.push_back({p.node, p.gpu, p.gpu_uuid});
      nodes.insert(p.node);
      names.push_back(fmt::format("rank {} ({} pid {})", p.rank, p.node, p.pid));
    }
    f.subjects.nodes.assign(nodes.begin(), nodes.end());
    f.window = {stop, in.now};
    {
      Evidence e;
      e.signal = "ithbat_probe_nccl_ops_total";
      e.collector = std::string(kCollectorProbes);
      e.subject = fmt::format("{}", fmt::join(names, ", "));
      e.observed = hung.front()->count;
      e.expected = median;
      e.unit = "NCCL calls";
      e.note = fmt::format("{} stopped at {:.0f} NCCL calls while its {} peers reached {:.0f} (median); no rank called "
                           "NCCL for {:.1f} s{}",
                           fmt::join(names, ", "), hung.front()->count, peers.size(), median,
                           static_cast<double>(quiet) / 1e9,
                           period > 0 ? fmt::format(" = {:.0f} collective periods of {:.2f} s",
                                                    static_cast<double>(quiet) / period, period / 1e9)
                                      : std::string(" (since before the analysis window)"));
      e.window = {stop, in.now};
      f.evidence.push_back(e);
    }
    {
      Evidence e;
      e.signal = "ithbat_gpu_utilization_ratio";
      e.collector = std::string(kCollectorGpu);
      e.subject = "peers' GPUs";
      e.observed = spin;
      e.expected = kHangSpinUtil;
      e.unit = "ratio";
      e.note = fmt::format("the {} peers' GPUs stay {:.0f}% busy since the stop (NCCL kernels spinning for the missing "
                           "rank){}",
                           peer_util.size(), 100 * spin,
                           hung_util.empty() ? std::string()
                                             : fmt::format("; the hung rank's GPU {:.0f}%", 100 * Mean(hung_util)));
      e.window = {quiet_from, in.now};
      f.evidence.push_back(e);
    }
    // What the hung rank's main thread does.
    std::string doing;
    for (const Calls* h : hung) {
      const RankProcess& p = *h->proc;
      std::map<std::string, double> by_class;
      for (const auto& v : in.view.Increase(
               p.node,
               fmt::format("ithbat_sched_offcpu_seconds_total{{pid={},scope=\"main\"}}", Quote(std::to_string(p.pid))),
               quiet_from, in.now)) {
        by_class[Label(v.labels, "class")] += v.value;
      }
      double oncpu = 0;
      for (const auto& v : in.view.Increase(
               p.node,
               fmt::format("ithbat_sched_oncpu_seconds_total{{pid={},scope=\"main\"}}", Quote(std::to_string(p.pid))),
               quiet_from, in.now)) {
        oncpu += v.value;
      }
      if (by_class.empty() && oncpu == 0) continue;
      std::string top = "on CPU";
      double top_v = oncpu;
      for (const auto& [cls, s] : by_class) {
        if (s > top_v) {
          top = cls;
          top_v = s;
        }
      }
      static const std::map<std::string, std::string> kMeaning = {
          {"lock", "asleep in a futex (a lock or condition: a deadlock)"},
          {"io", "in uninterruptible sleep (I/O or a kernel lock)"},
          {"sleep", "in a voluntary sleep (waiting on something outside CUDA)"},
          {"runnable", "waiting for a CPU"},
          {"on CPU", "running on a CPU (a busy loop)"}};
      auto m = kMeaning.find(top);
      const double span = static_cast<double>(in.now - quiet_from) / 1e9;
      // Off-CPU time is counted when a sleep ends: a thread blocked since the stop and never
      // woken shows neither off- nor on-CPU time.
      doing = top_v < kHangAccountedShare * span
                  ? fmt::format("its main thread has not run or woken since the stop ({:.1f} of {:.1f} s accounted): "
                                "blocked in a wait that never returns",
                                top_v, span)
                  : fmt::format("its main thread is {} ({:.1f} of {:.1f} s)", m != kMeaning.end() ? m->second : top,
                                top_v, span);
      Evidence e;
      e.signal = "ithbat_sched_offcpu_seconds_total";
      e.collector = std::string(kCollectorSchedIo);
      e.subject = fmt::format("rank {}", p.rank);
      e.observed = top_v;
      e.expected = span;
      e.unit = "seconds";
      e.note = fmt::format("rank {}: {}", p.rank, doing);
      e.window = {quiet_from, in.now};
      f.evidence.push_back(e);
      break;
    }
    f.verdict = spinning ? Verdict::kJob : Verdict::kInconclusive;
    f.cause = spinning ? Cause::kHang : Cause::kUnknown;
    f.confidence = spinning ? 0.85 : 0.3;
    f.provable_at = std::min(in.now, stop + static_cast<TimeNs>(need));
    f.lost_gpu_seconds = static_cast<double>(ranks.size()) * static_cast<double>(quiet) / 1e9;
    f.baseline_origin = "every GPU of the job is idle-spinning since the last NCCL call";
    f.summary = fmt::format("job {} hangs: {} never entered NCCL call #{:.0f} that its {} peers are waiting in for "
                            "{:.0f} s (peers' GPUs {:.0f}% busy){}",
                            job.id, fmt::join(names, ", "), hung.front()->count + 1, peers.size(),
                            static_cast<double>(quiet) / 1e9, 100 * spin, doing.empty() ? "" : "; " + doing);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ithbat::detect
