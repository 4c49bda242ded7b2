#include "lab/check_util.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::sim::lab {

std::string Label(const LabelSet& labels, std::string_view name) { return detect::Label(labels, name); }

std::string Quote(std::string_view v) { return detect::Quote(v); }

TimeNs JobEnd(const World& world, const WorldJob& job) { return job.ended > 0 ? job.ended : world.ended; }

// The agent names a process's job by what its scheduler says (a Slurm job id, a torchelastic run
// id, a pod) — not by the scenario's job id — so the checker selects a job's series by its
// ranks' pids, which world.json has: `pid=~"101|102"` for the ranks on `node`.
std::string JobPids(const WorldJob& job, const std::string& node) {
  std::vector<std::string> pids;
  for (const auto& r : job.ranks) {
    if (r.node == node && r.pid > 0) pids.push_back(std::to_string(r.pid));
  }
  if (pids.empty()) pids.push_back("0");  // matches nothing
  return fmt::format("pid=~\"{}\"", fmt::join(pids, "|"));
}

// The process whose output carries the job's log lines: rank 0 (or the lowest rank known).
int32_t LoggingPid(const WorldJob& job) {
  const WorldRank* best = nullptr;
  for (const auto& r : job.ranks) {
    if (r.pid > 0 && (best == nullptr || r.rank < best->rank)) best = &r;
  }
  return best != nullptr ? static_cast<int32_t>(best->pid) : -2;  // -2: no event has that pid
}

std::set<std::string> JobNodes(const WorldJob& job) {
  std::set<std::string> out;
  for (const auto& r : job.ranks) out.insert(r.node);
  return out;
}

std::string Describe(const scenario::ExpectedFinding& f) {
  std::string s = fmt::format("{}: {}", scenario::VerdictName(f.verdict), scenario::CauseName(f.cause));
  if (!f.job.empty()) s += fmt::format(" (job {})", f.job);
  if (!f.resource.empty()) s += fmt::format(" [{}]", f.resource);
  return s;
}

FindingCheck NoJob(const scenario::ExpectedFinding& f) {
  FindingCheck out;
  out.expected = Describe(f);
  out.signals.push_back({"the job ran", false, fmt::format("no job {} in world.json", f.job), std::nullopt});
  return out;
}

// When the budget starts counting, on the world's clock.
std::optional<TimeNs> BudgetStart(const World& world, const scenario::ResolvedScenario& resolved,
                                  const scenario::ExpectedBudget& b, const WorldJob* job) {
  switch (b.from) {
    case scenario::BudgetFrom::kEvent: {
      if (b.from_event < 0 || static_cast<size_t>(b.from_event) >= resolved.timeline.size()) return std::nullopt;
      const auto& ev = resolved.timeline[static_cast<size_t>(b.from_event)];
      const WorldEvent* we = ev.id.empty() ? nullptr : world.Event(ev.id);
      if (we == nullptr && static_cast<size_t>(b.from_event) < world.events.size()) {
        we = &world.events[static_cast<size_t>(b.from_event)];
      }
      return we != nullptr && we->started > 0 ? std::optional<TimeNs>(we->started) : std::nullopt;
    }
    case scenario::BudgetFrom::kStep: {
      if (job == nullptr) return std::nullopt;
      for (const auto& s : job->steps) {
        if (s.step >= b.from_step) return s.start;
      }
      return std::nullopt;
    }
    case scenario::BudgetFrom::kStart:
    case scenario::BudgetFrom::kDefault:
      if (job != nullptr && !job->steps.empty()) return job->steps.front().start;
      return world.started;
  }
  return std::nullopt;
}

std::string UnitName(scenario::BudgetUnit u) {
  switch (u) {
    case scenario::BudgetUnit::kSteps:
      return "steps";
    case scenario::BudgetUnit::kSaves:
      return "saves";
    case scenario::BudgetUnit::kSeconds:
      return "seconds";
  }
  return "?";
}

// The budget used when the proving signal appeared at `seen`: steps the job started, saves it
// began, or seconds, from the budget's start.
std::optional<BudgetResult> Budget(const World& world, const scenario::ResolvedScenario& resolved,
                                   const scenario::ExpectedBudget& b, const WorldJob* job,
                                   std::optional<TimeNs> seen) {
  if (!b.unit) return std::nullopt;
  BudgetResult r;
  r.unit = UnitName(*b.unit);
  r.allowed = b.value;
  auto start = BudgetStart(world, resolved, b, job);
  if (!seen || !start) return r;
  const TimeNs from = *start;
  const TimeNs to = std::max(*seen, from);
  switch (*b.unit) {
    case scenario::BudgetUnit::kSteps:
      if (job != nullptr) r.used = static_cast<double>(job->StepsBetween(from, to + 1));
      break;
    case scenario::BudgetUnit::kSaves:
      if (job != nullptr) {
        int64_t n = 0;
        for (const auto& s : job->saves) n += (s.start >= from && s.start <= to) ? 1 : 0;
        r.used = static_cast<double>(n);
      }
      break;
    case scenario::BudgetUnit::kSeconds:
      // Scenario seconds: the world ran compressed.
      r.used = static_cast<double>(to - from) / 1e9 * world.time_compression;
      break;
  }
  return r;
}

std::optional<TimeNs> BudgetEnd(const World& world, const scenario::ResolvedScenario& resolved,
                                const scenario::ExpectedBudget& b, const WorldJob* job, TimeNs limit) {
  if (!b.unit) return std::nullopt;
  auto start = BudgetStart(world, resolved, b, job);
  if (!start || *start > limit) return std::nullopt;
  auto within = [&](TimeNs t) {
    auto r = Budget(world, resolved, b, job, t);
    return r && r->used && *r->used <= r->allowed;
  };
  if (!within(*start)) return std::nullopt;
  if (within(limit)) return limit;  // the world ended inside the budget
  // Used grows with the instant (steps, saves or seconds since the start): bisect to 1 ms.
  TimeNs in = *start, out = limit;
  while (out - in > kNsPerMs) {
    const TimeNs mid = in + (out - in) / 2;
    (within(mid) ? in : out) = mid;
  }
  return in;
}

// The first logged step whose loss is not finite or above kLossSpikeFactor × the lowest so far.
std::optional<std::pair<int64_t, TimeNs>> Divergence(const Evidence& evidence, const WorldJob& job) {
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  q.pid = LoggingPid(job);
  auto events = evidence.Events(q);
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.step < b.step; });
  double low = INFINITY;
  for (const auto& e : events) {
    if (!std::isfinite(e.value) || (std::isfinite(low) && e.value > kLossSpikeFactor * low)) {
      return std::make_pair(e.step, e.time);
    }
    low = std::min(low, e.value);
  }
  return std::nullopt;
}


}  // namespace ithbat::sim::lab
