#include "detect/memory/out_of_memory.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/core.h>

namespace ithbat::detect {
namespace {

double Attr(const Event& e, std::string_view name) {
  for (const auto& [k, v] : e.attrs) {
    if (k == name) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      return end != v.c_str() ? d : std::nan("");
    }
  }
  return std::nan("");
}

const RankProcess* ProcessOf(const JobView& job, const Event& e) {
  for (const auto& p : job.processes) {
    if (p.pid == e.identity.pid && (e.identity.node.empty() || p.node == e.identity.node)) return &p;
  }
  return e.identity.rank >= 0 ? job.Process(e.identity.rank, e.identity.node) : nullptr;
}

double SumValues(const std::vector<SeriesValue>& v) {
  double s = 0;
  for (const auto& x : v) s += x.value;
  return s;
}

}  // namespace

std::vector<Finding> DetectOutOfMemory(const DetectInput& in) {
  store::EventQuery q;
  q.kinds = {EventKind::kError};
  q.from = in.from;
  q.to = in.now;
  std::map<std::string, Finding> by_job;
  for (const auto& e : in.view.Events(q)) {
    if (e.name != "cuda_oom" || e.identity.job.empty()) continue;
    const JobView* job = nullptr;
    for (const auto& j : in.jobs) {
      if (j.id == e.identity.job) job = &j;
    }
    if (job == nullptr) continue;
    const RankProcess* p = ProcessOf(*job, e);
    if (p == nullptr) continue;
    const TimeNs t = e.time;
    const std::string gpu_name = fmt::format("{}:{}", p->node, p->gpu);
    // The rank's launches after the error: still growing long after → it recovered.
    const std::string pid_sel = fmt::format("{{pid={}}}", Quote(std::to_string(p->pid)));
    const double launched_after =
        SumValues(in.view.Increase(p->node, "ithbat_probe_launches_total" + pid_sel, t + kOomStopNs, in.now));
    // It went on launching (caught the error and retried), or it is too early to tell.
    if (launched_after > 0 || in.now - t < kOomStopNs) continue;
    // "Stopped" is evidence only if the probes saw the rank launching before the error.
    const double launched_before =
        SumValues(in.view.Increase(p->node, "ithbat_probe_launches_total" + pid_sel, t - kOomLookbackNs, t));
    const bool stopped = launched_before > 0;
    // The GPU's memory right before.
    double share = std::nan("");
    if (!p->gpu_uuid.empty()) {
      const std::string gpu_sel = fmt::format("{{gpu_uuid={}}}", Quote(p->gpu_uuid));
      auto used = in.view.Max(p->node, "ithbat_gpu_memory_used_bytes" + gpu_sel, t - kOomLookbackNs, t);
      auto total = in.view.Max(p->node, "ithbat_gpu_memory_total_bytes" + gpu_sel, kMinTime, t);
      if (!used.empty() && !total.empty() && total[0].value > 0) share = used[0].value / total[0].value;
    }
    const bool full = share >= kOomMemoryShare;
    // Whether the stores could have told a fatal OOM from a caught one: the GPU's memory was
    // sampled, or the rank's launches were probed around the error (its window only: not the
    // series' whole history).
    const bool could_tell =
        std::isfinite(share) ||
        !in.view.Max(p->node, "ithbat_probe_launches_total" + pid_sel, t - kOomLookbackNs, in.now).empty();
    // The job's word alone where the collectors looked and saw neither a full GPU nor a stop: a
    // caught OOM (a retry with a smaller batch) or a transient one, no finding.
    if (!full && !stopped && could_tell) continue;
    // With neither collector's data (an offline replay of a log, a node without probes or
    // NVML), the job's word is reported for what it is: one collector, an inconclusive OOM.
    const bool word_alone = !full && !stopped;
    const double tried = Attr(e, "tried_bytes"), free = Attr(e, "free_bytes");
    Finding& f = by_job[job->id];
    if (f.subjects.job.empty()) {
      f.verdict = Verdict::kJob;
      f.cause = Cause::kOutOfMemory;
      f.subjects.job = job->id;
      f.window = {t, t};
      f.confidence = 0.9;
    }
    f.window.start = std::min(f.window.start, t);
    f.window.end = std::max(f.window.end, t);
    const RankRef ref = p->Ref();
    if (std::find(f.subjects.ranks.begin(), f.subjects.ranks.end(), ref) != f.subjects.ranks.end()) continue;
    f.subjects.ranks.push_back(ref);
    if (p->gpu >= 0 || !p->gpu_uuid.empty()) f.subjects.gpus.push_back(p->Gpu());
    if (std::find(f.subjects.nodes.begin(), f.subjects.nodes.end(), p->node) == f.subjects.nodes.end()) {
      f.subjects.nodes.push_back(p->node);
    }
    const TimeWindow w{t - kOomLookbackNs, t};
    f.evidence.push_back(MakeEvidence("error{name=\"cuda_oom\"}", kCollectorJoblog, fmt::format("rank {}", p->rank), tried, free,
                            "bytes",
                            std::isfinite(tried)
                                ? fmt::format("rank {} printed CUDA out of memory: tried to allocate {:.0f} MiB{}",
                                              p->rank, tried / (1 << 20),
                                              std::isfinite(free) ? fmt::format(" with {:.0f} MiB free", free / (1 << 20))
                                                                  : std::string())
                                : fmt::format("rank {} printed CUDA out of memory", p->rank),
                            {t, t}));
    if (word_alone) {
      f.evidence.back().note +=
          "; no GPU memory sample and no launch probe of it: whether it was fatal is unknown";
    }
    if (full) {
      f.evidence.push_back(MakeEvidence("ithbat_gpu_memory_used_bytes", kCollectorGpu, gpu_name, 100 * share,
                              100 * kOomMemoryShare, "% of total",
                              fmt::format("GPU {} was {:.0f}% full in the {:.0f} s before", gpu_name, 100 * share,
                                          kOomLookbackNs / 1e9),
                              w));
    }
    if (stopped) {
      f.evidence.push_back(MakeEvidence("ithbat_probe_launches_total", kCollectorProbes, fmt::format("rank {}", p->rank), 0, 0,
                              "launches",
                              fmt::format("rank {} launched no kernel from {:.0f} s after the error on: it stopped",
                                          p->rank, kOomStopNs / 1e9),
                              {t + kOomStopNs, in.now}));
    }
    f.provable_at = std::max(f.provable_at, t + kOomStopNs);
  }
  std::vector<Finding> out;
  for (auto& [id, f] : by_job) {
    f.summary = fmt::format("{} rank(s) of job {} ran out of GPU memory", f.subjects.ranks.size(), id);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ithbat::detect
