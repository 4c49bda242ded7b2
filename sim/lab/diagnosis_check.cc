#include "lab/diagnosis_check.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/detector.h"
#include "detect/jobs.h"
#include "investigate/investigator.h"
#include "lab/check_util.h"

namespace ithbat::sim::lab {
namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::vector<Diagnosis> EngineAsOf(const Evidence& evidence, TimeNs from, TimeNs now) {
  return investigate::DiagnoseAsOf(evidence, from, now, investigate::InvestigateOptions{});
}

std::string GpuName(const GpuRef& g) { return fmt::format("{}:{}", g.node, g.index); }

std::string Mapped(const JobMap& jobs, const std::string& agent_job) {
  auto it = jobs.find(agent_job);
  return it == jobs.end() ? "" : it->second;
}

bool ResourceMatches(const World& world, const JobMap& jobs, const Diagnosis& d, const std::string& expected) {
  const std::string& got = d.subjects.resource;
  if (got == expected) return true;
  if (const WorldMount* m = world.Mount(expected)) {
    for (const auto& [node, path] : m->node_paths) {
      if (got == path) return true;
    }
    for (const auto& p : m->also_at) {
      if (got == p) return true;
    }
  }
  // Another job: the agents name it by its scheduler id.
  if (world.Job(expected) != nullptr) return Mapped(jobs, got) == expected;
  // A tenant — traffic from outside every agent's view (scenario `tenants`) — cannot be named
  // by any detector: the lab accepts the fabric the congestion was seen on.
  const bool names_world_thing = world.Mount(expected) != nullptr || world.Server(expected) != nullptr ||
                                 expected.find('/') != std::string::npos;
  return !names_world_thing && d.cause == Cause::kNetwork && got.rfind("fabric", 0) == 0;
}

// The scenario job or server a diagnosis is about: by its job id, else (a server the agents know
// only as engine:port) by the pid of its first named process.
std::string WorldJobOfDiagnosis(const World& world, const JobMap& jobs, const Diagnosis& d) {
  std::string wj = Mapped(jobs, d.subjects.job);
  if (!wj.empty()) return wj;
  for (const auto& r : d.subjects.ranks) {
    for (const auto& s : world.servers) {
      if (s.pid == r.pid && (r.node.empty() || s.node == r.node)) return s.id;
    }
    for (const auto& j : world.jobs) {
      for (const auto& wr : j.ranks) {
        if (wr.pid == r.pid && wr.node == r.node) return j.id;
      }
    }
  }
  return "";
}

}  // namespace

JobMap MapJobs(const World& world, const Evidence& evidence) {
  JobMap out;
  for (const auto& j : detect::DiscoverJobs(evidence, world.started, world.ended + 60 * kNsPerSec)) {
    for (const auto& p : j.processes) {
      for (const auto& wj : world.jobs) {
        for (const auto& r : wj.ranks) {
          if (r.pid == p.pid && r.node == p.node) out.emplace(j.id, wj.id);
        }
      }
      for (const auto& s : world.servers) {
        if (s.pid == p.pid && s.node == p.node) out.emplace(j.id, s.id);
      }
    }
  }
  return out;
}

std::string MatchDiagnosis(const World& world, const JobMap& jobs, const Diagnosis& d,
                           const scenario::ExpectedFinding& f) {
  std::vector<std::string> diffs;
  if (VerdictName(d.verdict) != scenario::VerdictName(f.verdict)) {
    diffs.push_back(fmt::format("verdict {} (expected {})", VerdictName(d.verdict), scenario::VerdictName(f.verdict)));
  }
  if (CauseName(d.cause) != scenario::CauseName(f.cause)) {
    diffs.push_back(fmt::format("cause {} (expected {})", CauseName(d.cause), scenario::CauseName(f.cause)));
  }
  if (!f.job.empty()) {
    const std::string wj = WorldJobOfDiagnosis(world, jobs, d);
    if (wj != f.job) diffs.push_back(fmt::format("job {} = {} (expected {})", d.subjects.job, wj.empty() ? "?" : wj, f.job));
  }
  if (!f.nodes.empty()) {
    std::set<std::string> got(d.subjects.nodes.begin(), d.subjects.nodes.end());
    std::set<std::string> want(f.nodes.begin(), f.nodes.end());
    if (got != want) diffs.push_back(fmt::format("nodes [{}] (expected [{}])", fmt::join(got, ","), fmt::join(want, ",")));
  }
  if (!f.ranks.empty()) {
    std::set<int64_t> got;
    for (const auto& r : d.subjects.ranks) got.insert(r.rank);
    std::set<int64_t> want(f.ranks.begin(), f.ranks.end());
    if (got != want) diffs.push_back(fmt::format("ranks [{}] (expected [{}])", fmt::join(got, ","), fmt::join(want, ",")));
  }
  if (!f.gpus.empty()) {
    std::set<std::string> got;
    for (const auto& g : d.subjects.gpus) got.insert(GpuName(g));
    std::set<std::string> want;
    for (const auto& g : f.gpus) want.insert(fmt::format("{}:{}", g.node, g.index));
    if (got != want) diffs.push_back(fmt::format("gpus [{}] (expected [{}])", fmt::join(got, ","), fmt::join(want, ",")));
  }
  if (!f.resource.empty() && !ResourceMatches(world, jobs, d, f.resource)) {
    diffs.push_back(fmt::format("resource {} (expected {})", d.subjects.resource.empty() ? "none" : d.subjects.resource,
                                f.resource));
  }
  return fmt::format("{}", fmt::join(diffs, "; "));
}

bool DiagnosisCheck::ok() const {
  if (!extra.empty()) return false;
  for (const auto& e : expected) {
    if (!e.ok()) return false;
  }
  return true;
}

DiagnosisCheck CheckDiagnoses(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                              const scenario::Expectations& expect, bool replay) {
  DiagnosisCheck c;
  const double cpu0 = CpuSeconds();
  const TimeNs end = world.ended;
  const JobMap jobs = MapJobs(world, evidence);
  // The end round with the detectors' trace on (a few lines per node): kept only where an
  // expected diagnosis is missing, to say why.
  investigate::InvestigateOptions traced;
  traced.trace = &c.trace;
  c.diagnoses = investigate::DiagnoseAsOf(evidence, world.started, end, traced);
  ++c.replays;
  std::vector<bool> used(c.diagnoses.size(), false);
  for (const auto& f : expect.findings) {
    ExpectedDiagnosis e;
    e.expected = Describe(f);
    std::string closest;
    for (size_t i = 0; i < c.diagnoses.size(); ++i) {
      if (used[i]) continue;
      std::string diff = MatchDiagnosis(world, jobs, c.diagnoses[i], f);
      if (diff.empty()) {
        e.matched = i;
        used[i] = true;
        break;
      }
      if (closest.empty() || (CauseName(c.diagnoses[i].cause) == scenario::CauseName(f.cause))) closest = diff;
    }
    if (!e.matched) e.mismatch = closest.empty() ? "no diagnosis" : closest;
    c.expected.push_back(std::move(e));
  }
  for (size_t i = 0; i < c.diagnoses.size(); ++i) {
    if (!used[i]) c.extra.push_back(i);
  }
  if (std::all_of(c.expected.begin(), c.expected.end(), [](const auto& e) { return e.matched.has_value(); })) {
    c.trace.clear();
  }
  if (replay) {
    // The first instant each expectation had a matching diagnosis. A provisional expectation is
    // met first by a provisional diagnosis of its job's divergence: before the rerun, a recipe
    // suspected is the right first answer even where the confirmed cause is another.
    auto hits = [&](const std::vector<Diagnosis>& ds, const scenario::ExpectedFinding& f) {
      for (const auto& d : ds) {
        bool hit = MatchDiagnosis(world, jobs, d, f).empty();
        if (!hit && f.provisional && d.provisional && d.cause == Cause::kRecipeNumerics) {
          scenario::ExpectedFinding as_recipe = f;
          as_recipe.verdict = scenario::Verdict::kJob;
          as_recipe.cause = scenario::Cause::kRecipeNumerics;
          as_recipe.gpus.clear();
          hit = MatchDiagnosis(world, jobs, d, as_recipe).empty();
        }
        if (hit) return true;
      }
      return false;
    };
    for (TimeNs t = world.started + kReplayStepNs; t < end; t += kReplayStepNs) {
      bool pending = false;
      for (const auto& e : c.expected) pending |= !e.first_verdict.has_value();
      if (!pending) break;
      auto ds = EngineAsOf(evidence, world.started, t);
      ++c.replays;
      for (size_t k = 0; k < expect.findings.size(); ++k) {
        if (c.expected[k].first_verdict || !hits(ds, expect.findings[k])) continue;
        // Hit at t, not at t - kReplayStepNs: narrow down when it first became provable (in
        // compressed worlds a 2 s stride is a dozen steps).
        TimeNs miss = t - kReplayStepNs, hit = t;
        while (hit - miss > kReplayResolutionNs) {
          const TimeNs mid = miss + (hit - miss) / 2;
          ++c.replays;
          (hits(EngineAsOf(evidence, world.started, mid), expect.findings[k]) ? hit : miss) = mid;
        }
        c.expected[k].first_verdict = hit;
      }
    }
    for (size_t k = 0; k < expect.findings.size(); ++k) {
      auto& e = c.expected[k];
      if (!e.first_verdict && e.matched) e.first_verdict = end;
      const auto& f = expect.findings[k];
      e.budget = Budget(world, resolved, f.budget, world.Job(f.job), e.first_verdict);
      // A verdict that came, but after its budget: what the detectors measured when the budget
      // ran out says which condition it was still waiting for (the end round's trace cannot).
      if (e.matched && e.budget && !e.budget->ok()) {
        if (auto at = BudgetEnd(world, resolved, f.budget, world.Job(f.job), end)) {
          std::vector<std::string> why;
          investigate::InvestigateOptions traced_at;
          traced_at.trace = &why;
          (void)investigate::DiagnoseAsOf(evidence, world.started, *at, traced_at);
          ++c.replays;
          c.trace.push_back(fmt::format("as the budget of {} ran out ({:g} {}, {:.1f} s into the world):",
                                        e.expected, e.budget->allowed, e.budget->unit,
                                        static_cast<double>(*at - world.started) / 1e9));
          for (auto& line : why) c.trace.push_back(std::move(line));
        }
      }
    }
  }
  c.engine_seconds = CpuSeconds() - cpu0;
  return c;
}

std::string FormatDiagnosisCheck(const DiagnosisCheck& c) {
  std::string out = fmt::format("  diagnosis engine: {} diagnosis(es) at the end; {} run(s), {:.2f} s CPU\n",
                                c.diagnoses.size(), c.replays, c.engine_seconds);
  for (const auto& e : c.expected) {
    if (e.matched) {
      const Diagnosis& d = c.diagnoses[*e.matched];
      out += fmt::format("    [{}] {} → {} {} {}{}", e.ok() ? "ok" : "LATE", e.expected, d.id, VerdictName(d.verdict),
                         CauseName(d.cause), d.provisional ? " (provisional)" : "");
    } else {
      out += fmt::format("    [MISSED] {} → {}", e.expected, e.mismatch);
    }
    if (e.budget) {
      out += e.budget->used ? fmt::format("; first verdict after {:g} {} (budget {:g})", *e.budget->used, e.budget->unit,
                                          e.budget->allowed)
                            : fmt::format("; never (budget {:g} {})", e.budget->allowed, e.budget->unit);
    }
    out += "\n";
  }
  // Bounded: a fleet-sized world traces a line or two per node and job.
  constexpr size_t kMaxTraceLines = 40;
  for (size_t i = 0; i < c.trace.size() && i < kMaxTraceLines; ++i) out += fmt::format("    why: {}\n", c.trace[i]);
  if (c.trace.size() > kMaxTraceLines) out += fmt::format("    why: ... {} more\n", c.trace.size() - kMaxTraceLines);
  for (size_t i : c.extra) {
    const Diagnosis& d = c.diagnoses[i];
    out += fmt::format("    [EXTRA] {} {} {} job {} resource {}: {}\n", d.id, VerdictName(d.verdict), CauseName(d.cause),
                       d.subjects.job.empty() ? "-" : d.subjects.job, d.subjects.resource.empty() ? "-" : d.subjects.resource,
                       d.summary);
  }
  return out;
}

}  // namespace ithbat::sim::lab
