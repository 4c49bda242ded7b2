#include "detect/network/output_errors.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::detect {
namespace {

// "kp-ddp-worker-0 → 10.216.210.236 (IBV_WC_RETRY_EXC_ERR)" or what of it was printed.
std::string Describe(const Event& e) {
  const std::string host = EventAttr(e, "host"), peer = EventAttr(e, "peer"),
                    status = EventAttr(e, "status_name");
  std::string s = host.empty() ? std::string("a rank") : host;
  if (!peer.empty()) s += " → " + peer;
  if (!status.empty()) s += fmt::format(" ({})", status);
  return s;
}

bool Names(const Finding& f, const std::string& job) {
  return f.subjects.job == job || std::find(f.subjects.other_jobs.begin(), f.subjects.other_jobs.end(),
                                            job) != f.subjects.other_jobs.end();
}

}  // namespace

void AddJobOutputNetworkErrors(const DetectInput& in, std::vector<Finding>& findings) {
  store::EventQuery q;
  q.kinds = {EventKind::kError};
  q.from = in.from;
  q.to = in.now;
  std::map<std::string, std::map<std::string, std::vector<Event>>> by_job;  // job → suspect → events
  for (auto& e : in.view.Events(q)) {
    if (e.name != "nccl_net_error" || e.identity.job.empty()) continue;
    std::string suspect = EventAttr(e, "suspect");
    if (suspect.empty()) suspect = "unknown";
    auto& list = by_job[e.identity.job][suspect];
    if (list.size() < 4096) list.push_back(std::move(e));
  }
  for (const auto& [job, by_suspect] : by_job) {
    auto evidence_of = [&](const std::vector<Event>& events, std::string_view meaning) {
      std::vector<Evidence> ev;
      for (size_t i = 0; i < events.size() && i < kNetErrorMaxEvidence; ++i) {
        const Event& e = events[i];
        ev.push_back(MakeEvidence(
            "error{name=\"nccl_net_error\"}", kCollectorJoblog,
            e.identity.rank >= 0 ? fmt::format("rank {}", e.identity.rank) : Describe(e), 1, 0, "failures",
            fmt::format("NCCL {} transport: {}: {}", EventAttr(e, "transport"), Describe(e), meaning),
            {e.time, e.time}));
      }
      if (events.size() > kNetErrorMaxEvidence) {
        ev.push_back(MakeEvidence("error{name=\"nccl_net_error\"}", kCollectorJoblog, "other failures",
                                  static_cast<double>(events.size() - kNetErrorMaxEvidence), 0, "failures",
                                  fmt::format("{} more such failures", events.size() - kNetErrorMaxEvidence),
                                  {events.front().time, events.back().time}));
      }
      return ev;
    };
    auto subjects_of = [&](Finding& f, const std::vector<Event>& events) {
      std::set<std::string> nodes(f.subjects.nodes.begin(), f.subjects.nodes.end());
      for (const Event& e : events) {
        if (!e.identity.node.empty()) nodes.insert(e.identity.node);
        const RankRef ref{e.identity.rank, e.identity.local_rank, e.identity.node, e.identity.pid};
        if (e.identity.rank >= 0 &&
            std::find(f.subjects.ranks.begin(), f.subjects.ranks.end(), ref) == f.subjects.ranks.end())
          f.subjects.ranks.push_back(ref);
      }
      f.subjects.nodes.assign(nodes.begin(), nodes.end());
      f.window = {events.front().time, events.back().time};
      f.provable_at = events.back().time;
    };
    static constexpr std::string_view kMeaning[][2] = {
        {"link_or_peer",
         "retries exhausted: the link or switch port stopped passing traffic, or the peer died"},
        {"peer", "the other side closed or refused the connection (its process most often died first)"},
        {"local", "refused on this host (memory registration or GPUDirect RDMA), not the fabric"},
        {"remote", "refused by the remote side (its registration or queue pair)"},
        {"consequence", "flushed after an earlier error on the same connection"},
        {"unknown", "a transport failure of a status not classified"}};
    auto meaning = [&](std::string_view suspect) -> std::string_view {
      for (const auto& m : kMeaning) {
        if (m[0] == suspect) return m[1];
      }
      return kMeaning[5][1];
    };

    // A network finding of the job already there: the job's words join it.
    auto existing = std::find_if(findings.begin(), findings.end(), [&](const Finding& f) {
      return f.cause == Cause::kNetwork && Names(f, job);
    });
    if (existing != findings.end()) {
      for (const auto& [suspect, events] : by_suspect) {
        for (auto& e : evidence_of(events, meaning(suspect))) existing->evidence.push_back(std::move(e));
      }
      continue;
    }
    auto add = [&](const std::vector<Event>& events, std::string_view suspect, Verdict verdict, Cause cause,
                   double confidence, std::string summary) {
      Finding f;
      f.detector = "network";
      f.verdict = verdict;
      f.cause = cause;
      f.subjects.job = job;
      subjects_of(f, events);
      f.evidence = evidence_of(events, meaning(suspect));
      f.confidence = confidence;
      f.summary = std::move(summary);
      if (in.trace != nullptr) in.trace->push_back("network (job output): " + f.summary);
      findings.push_back(std::move(f));
    };
    // Retries exhausted: the network is suspected (or a dead peer).
    if (auto it = by_suspect.find("link_or_peer"); it != by_suspect.end()) {
      const auto& events = it->second;
      add(events, "link_or_peer", Verdict::kInfrastructure, Cause::kNetwork, 0.4,
          fmt::format(
              "job {}: NCCL's InfiniBand transport gave up on {} transfer{} ({}): a link or switch port "
              "that stopped passing traffic, or a peer that died — the ports' error counters (node "
              "collector) or the peer's own output decide",
              job, events.size(), events.size() == 1 ? "" : "s", Describe(events.front())));
      continue;
    }
    // Not the fabric: say so, with the hosts, and no cause.
    for (const char* suspect : {"peer", "local", "remote"}) {
      auto it = by_suspect.find(suspect);
      if (it == by_suspect.end()) continue;
      const auto& events = it->second;
      add(events, suspect, Verdict::kInconclusive, Cause::kUnknown, 0.3,
          fmt::format("job {}: {} NCCL transport failure{} ({}): {}", job, events.size(),
                      events.size() == 1 ? "" : "s", Describe(events.front()), meaning(suspect)));
    }
  }
}

}  // namespace ithbat::detect
