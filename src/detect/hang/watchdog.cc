#include "detect/hang/watchdog.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::detect {
namespace {

// A whole non-negative number as printed, or -1.
int64_t AttrInt(const Event& e, std::string_view name) {
  const std::string v = EventAttr(e, name);
  if (v.empty() || v.size() > 18 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::strtoll(v.c_str(), nullptr, 10);
}

// One rank's first watchdog report.
struct Report {
  int32_t rank = -1;
  std::string node;
  int32_t pid = -1;
  int64_t seq = -1;
  std::string op;
  int64_t timeout_ms = -1;
  int64_t ran_ms = -1;
  TimeNs time = 0;
};

RankRef RefOf(const JobView& job, int32_t rank, const std::string& node, int32_t pid) {
  if (const RankProcess* p = job.Process(rank); p != nullptr) return p->Ref();
  return RankRef{rank, -1, node, pid};
}

}  // namespace

std::vector<Finding> DetectWatchdogTimeouts(const DetectInput& in) {
  std::vector<Finding> out;
  store::EventQuery q;
  q.kinds = {EventKind::kError};
  q.from = in.from;
  q.to = in.now;
  std::map<std::string, std::map<int32_t, Report>> by_job;  // job → rank → its first report
  for (const auto& e : in.view.Events(q)) {
    if (e.name != "nccl_timeout" || e.identity.job.empty()) continue;
    const int64_t seq = AttrInt(e, "seq");
    if (seq < 0) continue;
    auto& ranks = by_job[e.identity.job];
    if (ranks.count(e.identity.rank) > 0) continue;  // a rank's later lines repeat its first timeout
    Report r;
    r.rank = e.identity.rank;
    r.node = e.identity.node;
    r.pid = e.identity.pid;
    r.seq = seq;
    r.op = EventAttr(e, "op_type");
    r.timeout_ms = AttrInt(e, "timeout_ms");
    r.ran_ms = AttrInt(e, "ran_ms");
    // Beyond a year a figure is not a wait a watchdog reports (and would overflow in ns).
    if (r.ran_ms > kWatchdogMaxWaitMs) r.ran_ms = -1;
    r.time = e.time;
    ranks.emplace(r.rank, r);
  }

  for (const auto& job : in.jobs) {
    auto it = by_job.find(job.id);
    if (it == by_job.end()) continue;
    const auto& reports = it->second;
    // Collective number → the operations ranks waited in there, and the ranks.
    std::map<int64_t, std::map<std::string, std::vector<int32_t>>> at;
    std::set<int32_t> reporters;
    TimeNs first = kMaxTime, last = 0;
    for (const auto& [rank, r] : reports) {
      at[r.seq][r.op].push_back(rank);
      if (rank >= 0) reporters.insert(rank);
      const TimeNs began = r.ran_ms > 0 ? r.time - r.ran_ms * 1'000'000 : r.time;
      first = std::min(first, began);
      last = std::max(last, r.time);
    }
    // The job's ranks: those the stores saw, and every rank below the world size one printed.
    std::set<int32_t> known = job.Ranks();
    known.erase(-1);
    int32_t world = job.world_size;
    for (int32_t r : known) world = std::max(world, r + 1);
    const bool world_known = job.world_size > 0;
    std::vector<int32_t> silent;
    if (world_known && !reporters.empty()) {
      for (int32_t r = 0; r < world && silent.size() < 4096; ++r) {
        if (reporters.count(r) == 0) silent.push_back(r);
      }
    }

    Finding f;
    f.detector = "watchdog";
    f.verdict = Verdict::kJob;
    f.cause = Cause::kHang;
    f.subjects.job = job.id;
    f.window = {first, last};
    f.provable_at = last;
    f.confidence = 0.5;
    std::vector<int32_t> named;
    std::string what;
    // A report whose operation was cut off the line names none: it is no evidence of another
    // operation, so where one operation is named at its collective, it joins that one.
    for (auto& [seq, ops] : at) {
      auto unnamed = ops.find("");
      if (unnamed == ops.end() || ops.size() != 2) continue;
      auto& named_side = ops.begin()->first.empty() ? std::next(ops.begin())->second : ops.begin()->second;
      named_side.insert(named_side.end(), unnamed->second.begin(), unnamed->second.end());
      std::sort(named_side.begin(), named_side.end());
      ops.erase(unnamed);
    }
    const auto& [lowest_seq, lowest_ops] = *at.begin();
    const auto desync =
        std::find_if(at.begin(), at.end(), [](const auto& kv) { return kv.second.size() > 1; });
    if (desync != at.end()) {
      std::vector<std::string> sides;
      for (const auto& [op, ranks] : desync->second) {
        sides.push_back(fmt::format("{} in {}",
                                    ranks.size() == 1 ? fmt::format("rank {}", ranks[0])
                                                      : fmt::format("ranks {}", fmt::join(ranks, ",")),
                                    op.empty() ? "an unnamed operation" : op));
        named.insert(named.end(), ranks.begin(), ranks.end());
      }
      what = fmt::format(
          "desynchronised: at collective #{} {} — the ranks called different collectives at the same "
          "point (a rank-dependent code path)",
          desync->first, fmt::join(sides, ", "));
    } else if (at.size() > 1) {
      std::vector<int32_t> behind;
      for (const auto& [op, ranks] : lowest_ops) behind.insert(behind.end(), ranks.begin(), ranks.end());
      named = silent.empty() ? behind : silent;
      what = fmt::format(
          "the ranks waited at different collective numbers (#{} to #{}); if they count one process "
          "group, the furthest behind, rank{} {} at #{}, waited for a rank that never reached it{}",
          lowest_seq, at.rbegin()->first, behind.size() == 1 ? "" : "s", fmt::join(behind, ","), lowest_seq,
          !world_known    ? std::string(" (the world size is unknown: no rank can be named beyond them)")
          : silent.empty() ? fmt::format(" (every rank of the {} printed a timeout)", world)
                           : fmt::format("; no timeout from rank{} {}", silent.size() == 1 ? "" : "s",
                                         fmt::join(silent, ",")));
    } else {
      named = silent;
      const std::string op = lowest_ops.begin()->first;
      what = fmt::format(
          "every reporting rank waited in collective #{} ({}){}", lowest_seq,
          op.empty() ? "operation not printed" : op,
          !world_known
              ? std::string("; the world size is unknown, so the rank that never entered it cannot be named")
          : silent.empty()
              ? fmt::format("; every rank of the {} printed a timeout in it: none is missing from this collective, "
                            "so what holds it is below the ranks' calls (the transport or a GPU)",
                            world)
              : fmt::format("; rank{} {} of {} printed no timeout: the one{} that never entered it",
                            silent.size() == 1 ? "" : "s", fmt::join(silent, ","), world,
                            silent.size() == 1 ? "" : "s"));
    }
    for (int32_t r : named) {
      if (r < 0) continue;
      auto rep = reports.find(r);
      f.subjects.ranks.push_back(rep != reports.end() ? RefOf(job, r, rep->second.node, rep->second.pid)
                                                      : RefOf(job, r, "", -1));
    }
    std::set<std::string> nodes;
    for (const auto& ref : f.subjects.ranks) {
      if (!ref.node.empty()) nodes.insert(ref.node);
    }
    f.subjects.nodes.assign(nodes.begin(), nodes.end());

    size_t shown = 0;
    for (const auto& [rank, r] : reports) {
      if (shown++ == kWatchdogMaxEvidence) break;
      Evidence e;
      e.signal = "nccl_timeout";
      e.collector = std::string(kCollectorJoblog);
      e.subject = rank >= 0 ? fmt::format("rank {}", rank) : std::string("a rank (no rank printed)");
      e.observed = r.ran_ms >= 0 ? static_cast<double>(r.ran_ms) / 1e3 : 0;
      e.expected = r.timeout_ms >= 0 ? static_cast<double>(r.timeout_ms) / 1e3 : 0;
      e.unit = "seconds";
      e.note = fmt::format(
          "{} waited {} in {} #{} (watchdog timeout {})", e.subject,
          r.ran_ms >= 0 ? fmt::format("{:.1f} s", static_cast<double>(r.ran_ms) / 1e3) : "past its timeout",
          r.op.empty() ? "collective" : r.op, r.seq,
          r.timeout_ms >= 0 ? fmt::format("{:.0f} s", static_cast<double>(r.timeout_ms) / 1e3) : "?");
      e.window = {r.ran_ms > 0 ? r.time - r.ran_ms * 1'000'000 : r.time, r.time};
      f.evidence.push_back(std::move(e));
    }
    if (reports.size() > kWatchdogMaxEvidence) {
      Evidence e;
      e.signal = "nccl_timeout";
      e.collector = std::string(kCollectorJoblog);
      e.subject = "other ranks";
      e.observed = static_cast<double>(reports.size() - kWatchdogMaxEvidence);
      e.unit = "ranks";
      e.note = fmt::format("{} more ranks printed a watchdog timeout", reports.size() - kWatchdogMaxEvidence);
      e.window = f.window;
      f.evidence.push_back(std::move(e));
    }
    f.summary = fmt::format("job {}: the NCCL watchdog fired on {} rank{}; {}", job.id, reports.size(),
                            reports.size() == 1 ? "" : "s", what);
    if (in.trace != nullptr) in.trace->push_back("watchdog: " + f.summary);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ithbat::detect
