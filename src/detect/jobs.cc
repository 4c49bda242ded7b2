#include "detect/jobs.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include <fmt/core.h>

namespace ithbat::detect {

int32_t ParseInt(std::string_view s, int32_t fallback) {
  int32_t v = fallback;
  if (s.empty()) return fallback;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : fallback;
}

std::string Label(const LabelSet& labels, std::string_view name) {
  auto v = labels.Get(name);
  return v ? std::string(*v) : std::string();
}

std::string Quote(std::string_view v) { return "\"" + EscapeLabelValue(v) + "\""; }

std::set<std::string> JobView::Nodes() const {
  std::set<std::string> out;
  for (const auto& p : processes) out.insert(p.node);
  return out;
}

std::set<int32_t> JobView::Ranks() const {
  std::set<int32_t> out;
  for (const auto& p : processes) {
    if (p.rank >= 0) out.insert(p.rank);
  }
  return out;
}

std::string JobView::PidRegex(const std::string& node) const {
  std::string out;
  for (const auto& p : processes) {
    if (!node.empty() && p.node != node) continue;
    if (!out.empty()) out += '|';
    out += std::to_string(p.pid);
  }
  return out;
}

const RankProcess* JobView::LoggingProcess() const {
  const RankProcess* best = nullptr;
  for (const auto& p : processes) {
    if (p.rank < 0) continue;
    if (best == nullptr || p.rank < best->rank || (p.rank == best->rank && p.first_seen > best->first_seen)) best = &p;
  }
  return best;
}

const RankProcess* JobView::Process(int32_t rank, const std::string& node) const {
  const RankProcess* best = nullptr;
  for (const auto& p : processes) {
    if (p.rank != rank || (!node.empty() && p.node != node)) continue;
    if (best == nullptr || p.first_seen > best->first_seen) best = &p;
  }
  return best;
}

std::vector<JobView> DiscoverJobs(const FleetView& view, TimeNs from, TimeNs to) {
  // (job, node, pid) → process. The probe series name every rank that calls libcuda; the
  // scheduling series every tracked process (a rank whose probes are not attached yet).
  std::map<std::tuple<std::string, std::string, int32_t>, RankProcess> procs;
  auto note = [&](const std::string& node, const LabelSet& labels, TimeNs first, TimeNs last) {
    const std::string job = Label(labels, "job_id");
    const int32_t pid = ParseInt(Label(labels, "pid"));
    if (job.empty() || pid < 0) return;
    auto [it, fresh] = procs.try_emplace({job, node, pid});
    RankProcess& p = it->second;
    if (fresh) {
      p.node = node;
      p.pid = pid;
      p.first_seen = first;
      p.last_seen = last;
    }
    p.first_seen = std::min(p.first_seen, first);
    p.last_seen = std::max(p.last_seen, last);
    if (p.rank < 0) p.rank = ParseInt(Label(labels, "rank"));
    if (p.local_rank < 0) p.local_rank = ParseInt(Label(labels, "local_rank"));
    if (p.world_size < 0) p.world_size = ParseInt(Label(labels, "world_size"));
    if (p.gpu < 0) p.gpu = ParseInt(Label(labels, "gpu"));
    if (p.gpu_uuid.empty()) p.gpu_uuid = Label(labels, "gpu_uuid");
  };
  for (const char* sel : {"ithbat_probe_launches_total", "ithbat_probe_nccl_ops_total", "ithbat_sched_oncpu_seconds_total"}) {
    for (const auto& [v, samples] : view.Samples("", sel, from, to)) {
      if (samples.empty()) continue;
      note(v.node, v.labels, samples.front().t, samples.back().t);
    }
  }
  // A job the probes never saw but whose output was captured (no CUDA calls yet, or probes off).
  store::EventQuery q;
  q.kinds = {EventKind::kStep, EventKind::kLoss, EventKind::kCheckpointBegin, EventKind::kError};
  q.from = from;
  q.to = to;
  q.limit = 100'000;
  for (const auto& e : view.Events(q)) {
    if (e.identity.job.empty() || e.identity.pid < 0) continue;
    std::vector<std::pair<std::string, std::string>> pairs = e.identity.ToLabelPairs();
    auto labels = LabelSet::From(pairs);
    if (labels) note(e.identity.node, *labels, e.time, e.time);
  }

  // A rank's series may carry only the GPU's index (the agent resolved CUDA_VISIBLE_DEVICES or
  // the local rank before NVML listed the process): complete it from the node's GPU inventory,
  // so detectors can select the GPU's own series by UUID.
  std::map<std::pair<std::string, int32_t>, std::string> uuid_of;
  std::map<std::pair<std::string, std::string>, int32_t> index_of;
  for (const auto& [v, samples] : view.Samples("", "ithbat_gpu_info", kMinTime, to)) {
    const int32_t index = ParseInt(Label(v.labels, "gpu"));
    const std::string uuid = Label(v.labels, "gpu_uuid");
    if (index < 0 || uuid.empty()) continue;
    uuid_of[{v.node, index}] = uuid;
    index_of[{v.node, uuid}] = index;
  }
  for (auto& [key, p] : procs) {
    if (p.gpu_uuid.empty() && p.gpu >= 0) {
      if (auto it = uuid_of.find({p.node, p.gpu}); it != uuid_of.end()) p.gpu_uuid = it->second;
    }
    if (p.gpu < 0 && !p.gpu_uuid.empty()) {
      if (auto it = index_of.find({p.node, p.gpu_uuid}); it != index_of.end()) p.gpu = it->second;
    }
  }

  std::map<std::string, JobView> jobs;
  for (auto& [key, p] : procs) {
    JobView& j = jobs[std::get<0>(key)];
    j.id = std::get<0>(key);
    if (j.processes.empty()) {
      j.window = {p.first_seen, p.last_seen};
    }
    j.window.start = std::min(j.window.start, p.first_seen);
    j.window.end = std::max(j.window.end, p.last_seen);
    j.world_size = std::max(j.world_size, p.world_size);
    j.processes.push_back(std::move(p));
  }
  std::vector<JobView> out;
  for (auto& [id, j] : jobs) {
    std::sort(j.processes.begin(), j.processes.end(), [](const RankProcess& a, const RankProcess& b) {
      return std::tie(a.rank, a.first_seen, a.node, a.pid) < std::tie(b.rank, b.first_seen, b.node, b.pid);
    });
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ithbat::detect
