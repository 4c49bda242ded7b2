#include "detect/breakdown/step_breakdown.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/core.h>

namespace ithbat::detect {
namespace {

// Σ over the matching series of `node` (one process's) of their increase in the window.
double Growth(const FleetView& view, const std::string& node, const std::string& selector, TimeNs from, TimeNs to) {
  double s = 0;
  for (const auto& v : view.Increase(node, selector, from, to, FleetView::Birth::kZero)) s += v.value;
  return s;
}

// Per tick, each process's arrival-lag growth on one node.
std::map<TimeNs, std::map<int32_t, double>> LagByTick(const FleetView& view, const JobView& job,
                                                      const std::string& node, TimeNs from, TimeNs to) {
  std::map<TimeNs, std::map<int32_t, double>> out;
  for (const auto& [v, samples] : view.Samples(
           node, fmt::format("ithbat_probe_nccl_arrival_lag_seconds_total{{job_id={}}}", Quote(job.id)), from, to)) {
    const int32_t pid = std::atoi(Label(v.labels, "pid").c_str());
    for (size_t i = 1; i < samples.size(); ++i) {
      const double d = samples[i].v - samples[i - 1].v;
      out[samples[i].t][pid] += d >= 0 ? d : samples[i].v;
    }
  }
  return out;
}

}  // namespace

std::vector<RankBreakdown> StepBreakdown(const FleetView& view, const JobView& job, TimeNs from, TimeNs to) {
  std::vector<RankBreakdown> out;
  from = std::max(from, job.window.start);
  to = std::min(to, view.horizon());
  if (to <= from) return out;
  const double seconds = static_cast<double>(to - from) / kNsPerSec;
  std::map<std::string, std::map<TimeNs, std::map<int32_t, double>>> lag_by_node;
  for (const auto& node : job.Nodes()) lag_by_node[node] = LagByTick(view, job, node, from, to);
  for (const auto& p : job.processes) {
    if (p.last_seen < from || p.first_seen > to) continue;
    RankBreakdown r;
    r.rank = p.Ref();
    r.gpu = p.Gpu();
    r.seconds = seconds;
    const std::string pid = fmt::format("pid={}", Quote(std::to_string(p.pid)));
    r.steps = Growth(view, p.node, fmt::format("ithbat_probe_steps_total{{{}}}", pid), from, to);
    r.step_seconds = r.steps > 0 ? seconds / r.steps : 0;
    // Collective wait: exact from the profiler plugin when it reports, else from arrival order.
    const double exact = Growth(view, p.node, fmt::format("ithbat_nccl_wait_seconds_total{{{}}}", pid), from, to);
    if (exact > 0) {
      r.collective_wait_share = exact / seconds;
      r.collective_wait_exact = true;
    } else {
      double wait = 0;
      for (const auto& [t, lags] : lag_by_node[p.node]) {
        double latest = 0;
        for (const auto& [q, l] : lags) latest = std::max(latest, l);
        auto it = lags.find(p.pid);
        wait += latest - (it == lags.end() ? 0 : it->second);
      }
      r.collective_wait_share = wait / seconds;
    }
    double util = 0;
    if (!p.gpu_uuid.empty()) {
      auto m = view.Mean(p.node, fmt::format("ithbat_gpu_utilization_ratio{{gpu_uuid={}}}", Quote(p.gpu_uuid)), from, to);
      if (!m.empty()) util = m[0].value;
    }
    r.compute_share = std::max(0.0, util - r.collective_wait_share);
    r.host_stall_share =
        Growth(view, p.node,
               fmt::format("ithbat_sched_offcpu_seconds_total{{{},scope=\"main\",class=~\"runnable|io\"}}", pid), from,
               to) /
        seconds;
    r.sync_blocked_share =
        Growth(view, p.node, fmt::format("ithbat_probe_sync_blocked_seconds_total{{{}}}", pid), from, to) / seconds;
    r.io_share = Growth(view, p.node, fmt::format("ithbat_io_seconds_total{{{}}}", pid), from, to) / seconds;
    const double blocks = Growth(view, p.node, fmt::format("ithbat_probe_grid_blocks_total{{{}}}", pid), from, to);
    r.work_per_step = r.steps > 0 ? blocks / r.steps : 0;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const RankBreakdown& a, const RankBreakdown& b) {
    return std::tie(a.rank.rank, a.rank.node, a.rank.pid) < std::tie(b.rank.rank, b.rank.node, b.rank.pid);
  });
  return out;
}

std::string FormatBreakdown(const std::vector<RankBreakdown>& rows) {
  std::string s = fmt::format("{:>5} {:<10} {:>4} {:>6} {:>7} {:>8} {:>10} {:>6} {:>6} {:>5} {:>12}\n", "rank", "node",
                              "gpu", "steps", "step s", "compute", "coll.wait", "host", "sync", "i/o", "work/step");
  for (const auto& r : rows) {
    s += fmt::format("{:>5} {:<10} {:>4} {:>6.0f} {:>7.2f} {:>7.0f}% {:>8.0f}%{} {:>5.0f}% {:>5.0f}% {:>4.0f}% {:>12.3g}\n",
                     r.rank.rank, r.rank.node, r.gpu.index, r.steps, r.step_seconds, 100 * r.compute_share,
                     100 * r.collective_wait_share, r.collective_wait_exact ? " " : "~", 100 * r.host_stall_share,
                     100 * r.sync_blocked_share, 100 * r.io_share, r.work_per_step);
  }
  s += "  (~ estimated from host enqueue order; exact with the NCCL profiler plugin)\n";
  return s;
}

}  // namespace ithbat::detect
