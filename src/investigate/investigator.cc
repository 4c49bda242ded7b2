#include "investigate/investigator.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <set>

#include <fmt/core.h>

#include "detect/detector.h"
#include "investigate/causes.h"
#include "investigate/impact.h"

namespace ithbat::investigate {
namespace {

bool IsDeviceFault(Cause c) { return c == Cause::kGpuHardware || c == Cause::kDriver; }

// Causes a device fault on the same job explains when they begin at or after it.
bool ExplainedByDeviceFault(Cause c) {
  return c == Cause::kRecipeNumerics || c == Cause::kHang || c == Cause::kSilentDataCorruption ||
         c == Cause::kNoLearning || c == Cause::kUnknown;
}

// Infrastructure findings that name a shared resource are keyed by it, so one mount or switch
// hurting several jobs is one incident.
bool KeyedByResource(const Finding& f) {
  return f.verdict == Verdict::kInfrastructure && !f.subjects.resource.empty() &&
         (f.cause == Cause::kStorage || f.cause == Cause::kNetwork);
}

size_t DistinctCollectors(const std::vector<Evidence>& ev) {
  std::set<std::string> c;
  for (const auto& e : ev) {
    if (!e.collector.empty()) c.insert(e.collector);
  }
  return c.size();
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

template <typename T>
void AppendUnique(std::vector<T>& to, const std::vector<T>& from) {
  for (const auto& x : from) {
    if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
  }
}

const detect::JobView* FindJob(const std::vector<detect::JobView>& jobs, const std::string& id) {
  for (const auto& j : jobs) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

struct Incident {
  std::string key;
  std::vector<Finding> findings;  // the first is the incident's own; later ones merged into it
};

}  // namespace

std::string IncidentKey(const Finding& f) {
  if (KeyedByResource(f)) return fmt::format("{}|resource={}", CauseName(f.cause), f.subjects.resource);
  return fmt::format("{}|job={}|resource={}", CauseName(f.cause), f.subjects.job, f.subjects.resource);
}

namespace {

std::vector<std::pair<std::string, Diagnosis>> DiagnoseKeyed(const std::vector<Finding>& input,
                                                             const detect::FleetView& view,
                                                             const std::vector<detect::JobView>& jobs, TimeNs now,
                                                             const InvestigateOptions& options) {
  std::vector<Finding> findings = input;
  // The two-collector rule.
  for (auto& f : findings) {
    if (f.verdict != Verdict::kInconclusive && DistinctCollectors(f.evidence) < 2) {
      f.verdict = Verdict::kInconclusive;
      f.summary += " (inconclusive: the evidence comes from fewer than two collectors)";
    }
  }
  // Device faults explain what follows them on the same job.
  std::vector<bool> absorbed(findings.size(), false);
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& fault = findings[i];
    if (!IsDeviceFault(fault.cause) || fault.verdict != Verdict::kInfrastructure || fault.subjects.job.empty()) continue;
    for (size_t j = 0; j < findings.size(); ++j) {
      Finding& other = findings[j];
      if (j == i || absorbed[j] || other.subjects.job != fault.subjects.job || !ExplainedByDeviceFault(other.cause)) continue;
      if (other.window.start + 2 * kNsPerSec < fault.window.start) continue;  // it began before the fault
      absorbed[j] = true;
      for (auto ev : other.evidence) {
        ev.note = fmt::format("consequence ({}): {}", CauseName(other.cause), ev.note);
        findings[i].evidence.push_back(std::move(ev));
      }
    }
  }
  // The stragglers detector's unexplained rotation (inconclusive) is a symptom where another
  // finding gives the same job a verdict: a slow fabric or a loader-bound job makes ranks wait in
  // turn too, and one incident per cause is what the operator reads.
  for (size_t j = 0; j < findings.size(); ++j) {
    const Finding& f = findings[j];
    if (absorbed[j] || f.detector != "stragglers" || f.cause != Cause::kUnknown || f.subjects.job.empty()) continue;
    for (size_t i = 0; i < findings.size(); ++i) {
      if (i != j && !absorbed[i] && findings[i].subjects.job == f.subjects.job &&
          findings[i].verdict != Verdict::kInconclusive) {
        absorbed[j] = true;
        break;
      }
    }
  }
  // A job's failed end in the scheduler's record (job_end, inconclusive) is where another finding
  // of the same job led: its evidence joins that finding, so the diagnosis says how the job ended
  // ("… then exited with code 1") instead of standing beside it as a second incident.
  for (size_t j = 0; j < findings.size(); ++j) {
    const Finding& end = findings[j];
    if (absorbed[j] || end.detector != "job_end" || end.subjects.job.empty()) continue;
    for (size_t i = 0; i < findings.size(); ++i) {
      Finding& host = findings[i];
      if (i == j || absorbed[i] || host.detector == "job_end" || host.subjects.job != end.subjects.job)
        continue;
      absorbed[j] = true;
      for (const auto& ev : end.evidence) host.evidence.push_back(ev);
      const size_t cut = end.summary.find(';');
      host.summary += fmt::format("; then {}", end.summary.substr(0, cut));
      break;
    }
  }
  // One incident per key.
  std::vector<Incident> incidents;
  for (size_t i = 0; i < findings.size(); ++i) {
    if (absorbed[i]) continue;
    const std::string key = IncidentKey(findings[i]);
    auto it = std::find_if(incidents.begin(), incidents.end(), [&](const Incident& x) { return x.key == key; });
    if (it == incidents.end()) {
      incidents.push_back({key, {findings[i]}});
    } else {
      it->findings.push_back(findings[i]);
    }
  }
  std::vector<std::pair<std::string, Diagnosis>> out;
  for (const auto& inc : incidents) {
    const Finding& first = inc.findings.front();
    Diagnosis d;
    d.id = fmt::format("dx-{:012x}", Fnv1a(inc.key) & 0xffffffffffffULL);
    d.verdict = first.verdict;
    d.cause = first.cause;
    d.subjects = first.subjects;
    d.window = first.window;
    d.provisional = true;
    d.opened_at = first.provable_at;
    for (const auto& f : inc.findings) {
      if (&f != &first) {
        if (d.subjects.job.empty()) d.subjects.job = f.subjects.job;
        if (!f.subjects.job.empty() && f.subjects.job != d.subjects.job) AppendUnique(d.subjects.other_jobs, {f.subjects.job});
        AppendUnique(d.subjects.nodes, f.subjects.nodes);
        AppendUnique(d.subjects.ranks, f.subjects.ranks);
        AppendUnique(d.subjects.gpus, f.subjects.gpus);
        AppendUnique(d.subjects.other_jobs, f.subjects.other_jobs);
        d.window.start = std::min(d.window.start, f.window.start);
        d.window.end = std::max(d.window.end, f.window.end);
        d.opened_at = std::min(d.opened_at, f.provable_at);
      }
      // The incident is confirmed when any of its findings is (a rerun arrived).
      if (!f.provisional) d.provisional = false;
      for (const auto& ev : f.evidence) {
        const bool dup = std::any_of(d.evidence.begin(), d.evidence.end(), [&](const Evidence& e) {
          return e.signal == ev.signal && e.collector == ev.collector && e.subject == ev.subject &&
                 e.window.start == ev.window.start;
        });
        if (!dup) d.evidence.push_back(ev);
      }
      if (f.verdict != Verdict::kInconclusive) d.verdict = f.verdict;
    }
    d.fix = std::string(InfoOf(d.cause).fix);
    d.summary = first.summary;
    d.updated_at = now;
    ComputeImpact(d, inc.findings, view, FindJob(jobs, d.subjects.job), options.list_price_per_gpu_hour);
    out.emplace_back(inc.key, std::move(d));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second.opened_at < b.second.opened_at; });
  return out;
}

}  // namespace

std::vector<Diagnosis> Diagnose(const std::vector<Finding>& findings, const detect::FleetView& view,
                                const std::vector<detect::JobView>& jobs, TimeNs now,
                                const InvestigateOptions& options) {
  std::vector<Diagnosis> out;
  for (auto& [key, d] : DiagnoseKeyed(findings, view, jobs, now, options)) out.push_back(std::move(d));
  return out;
}

std::vector<Diagnosis> DiagnoseAsOf(const detect::FleetView& view, TimeNs from, TimeNs now,
                                    const InvestigateOptions& options) {
  const detect::FleetView clamped = view.AsOf(now);
  const std::vector<detect::JobView> jobs = detect::DiscoverJobs(clamped, from, now);
  const std::vector<Finding> findings = detect::RunDetectors(detect::DetectInput{clamped, jobs, from, now, options.trace});
  return Diagnose(findings, clamped, jobs, now, options);
}

std::vector<Diagnosis> Investigator::Update(const std::vector<Finding>& findings, const detect::FleetView& view,
                                            const std::vector<detect::JobView>& jobs, TimeNs now) {
  std::set<std::string> seen;
  for (auto& [key, d] : DiagnoseKeyed(findings, view, jobs, now, options_)) {
    seen.insert(key);
    auto it = by_key_.find(key);
    if (it != by_key_.end() && it->second.state != DiagnosisState::kResolved) {
      d.id = it->second.id;
      d.opened_at = it->second.opened_at;
      d.state = DiagnosisState::kUpdated;
    } else {
      const int gen = generation_[key]++;
      if (gen > 0) d.id = fmt::format("{}-{}", d.id, gen + 1);
      d.state = DiagnosisState::kOpen;
    }
    by_key_[key] = d;
  }
  std::vector<Diagnosis> out;
  for (auto& [key, d] : by_key_) {
    if (!seen.contains(key) && d.state != DiagnosisState::kResolved && now - d.updated_at > options_.resolve_after) {
      d.state = DiagnosisState::kResolved;
    }
    if (d.state == DiagnosisState::kResolved && now - d.updated_at > 2 * options_.resolve_after) continue;
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(), [](const Diagnosis& a, const Diagnosis& b) { return a.opened_at < b.opened_at; });
  return out;
}

Result<std::vector<Diagnosis>> Investigator::Round(const detect::FleetView& fleet, TimeNs from, TimeNs now) {
  std::string failure;
  try {
    const detect::FleetView view = fleet.AsOf(now);
    const std::vector<detect::JobView> jobs = detect::DiscoverJobs(view, from, now);
    const std::vector<Finding> findings = detect::RunDetectors(detect::DetectInput{view, jobs, from, now});
    return Update(findings, view, jobs, now);
  } catch (const std::exception& e) {
    failure = e.what();
    if (failure.empty()) failure = "exception without a message";
  } catch (...) {
    failure = "unknown exception";
  }
  return MakeError(ErrorCode::kInternal, "diagnosis round failed: " + failure);
}

}  // namespace ithbat::investigate
