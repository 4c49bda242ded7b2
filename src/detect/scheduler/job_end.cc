#include "detect/scheduler/job_end.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/core.h>

namespace ithbat::detect {

std::vector<Finding> DetectJobEnds(const DetectInput& in) {
  store::EventQuery q;
  q.kinds = {EventKind::kJobEnd};
  q.from = in.from;
  q.to = in.now;
  std::map<std::string, Finding> by_job;
  for (const auto& e : in.view.Events(q)) {
    if (e.identity.job.empty()) continue;
    const std::string exit_code = EventAttr(e, "exit_code");
    const std::string signal = EventAttr(e, "signal");
    const bool failed = !signal.empty() || (!exit_code.empty() && exit_code != "0");
    if (!failed) continue;
    // The job's start, where the prolog recorded it: the window the job ran in.
    store::EventQuery sq;
    sq.kinds = {EventKind::kJobStart};
    sq.job = e.identity.job;
    sq.to = e.time;
    TimeNs start = e.time;
    for (const auto& s : in.view.Events(sq)) start = std::min(start, s.time);
    const std::string outcome = !signal.empty() ? fmt::format("was ended by signal {}", signal)
                                                : fmt::format("exited with code {}", exit_code);
    Finding& f = by_job[e.identity.job];
    f.detector = "job_end";
    f.verdict = Verdict::kInconclusive;
    f.cause = Cause::kUnknown;
    f.subjects.job = e.identity.job;
    if (!e.identity.node.empty() && std::find(f.subjects.nodes.begin(), f.subjects.nodes.end(),
                                              e.identity.node) == f.subjects.nodes.end()) {
      f.subjects.nodes.push_back(e.identity.node);
    }
    f.window = {std::min(f.window.start == 0 ? start : f.window.start, start),
                std::max(f.window.end, e.time)};
    f.confidence = 0.3;
    f.provable_at = std::max(f.provable_at, e.time);
    const double observed = std::isfinite(e.value) ? e.value : std::nan("");
    f.evidence.push_back(MakeEvidence(
        "job_end", kCollectorScheduler, fmt::format("job {}", e.identity.job), observed, 0, "exit status",
        fmt::format(
            "Slurm's epilog on {} says job {} {}{}", e.identity.node.empty() ? "its node" : e.identity.node,
            e.identity.job, outcome,
            EventAttr(e, "user").empty() ? std::string() : fmt::format(" (user {})", EventAttr(e, "user"))),
        {start, e.time}));
    f.summary = fmt::format("job {} {}; no signal the engine collects explains why", e.identity.job, outcome);
  }
  std::vector<Finding> out;
  for (auto& [id, f] : by_job) out.push_back(std::move(f));
  if (in.trace != nullptr && !out.empty()) {
    in.trace->push_back(fmt::format("job_end: {} job(s) ended with a failure in Slurm's epilog", out.size()));
  }
  return out;
}

}  // namespace ithbat::detect
