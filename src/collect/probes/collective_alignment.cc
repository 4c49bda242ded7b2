#include "collect/probes/collective_alignment.h"

#include <algorithm>
#include <iterator>

namespace ithbat::collect::probes {

const std::vector<std::string_view>& NcclSizeBuckets() {
  static const std::vector<std::string_view> kLabels = {"lt_1k",  "1k_16k", "16k_256k", "256k_4m",
                                                        "4m_64m", "64m_1g", "ge_1g"};
  return kLabels;
}

std::string_view NcclSizeBucket(uint64_t bytes) {
  const auto& labels = NcclSizeBuckets();
  uint64_t edge = 1024;
  for (size_t i = 0; i + 1 < labels.size(); ++i, edge *= 16) {
    if (bytes < edge) return labels[i];
  }
  return labels.back();
}

CollectiveAlignment::CollectiveAlignment() : CollectiveAlignment(Options{}) {}

CollectiveAlignment::CollectiveAlignment(Options options) : o_(options) {
  o_.seq_window = std::clamp<size_t>(o_.seq_window, 1, 1 << 20);
  o_.max_comms = std::clamp<size_t>(o_.max_comms, 1, 1 << 16);
  o_.max_participants = std::clamp<size_t>(o_.max_participants, 1, 1 << 12);
  o_.max_completed = std::clamp<size_t>(o_.max_completed, 1, 1 << 20);
  o_.settle = std::clamp<TimeNs>(o_.settle, 0, kMaxTime / 4);
}

CollectiveAlignment::Comm* CollectiveAlignment::FindOrMakeComm(uint64_t hash) {
  auto cit = comms_.find(hash);
  if (cit == comms_.end()) {
    if (comms_.size() >= o_.max_comms) {
      auto oldest = std::min_element(comms_.begin(), comms_.end(), [](const auto& x, const auto& y) {
        return x.second.last_active < y.second.last_active;
      });
      for (auto it = stats_.lower_bound({oldest->first, INT32_MIN, INT32_MIN});
           it != stats_.end() && std::get<0>(it->first) == oldest->first;)
        it = stats_.erase(it);
      comms_.erase(oldest);
      ++counters_.comms_evicted;
    }
    cit = comms_.emplace(hash, Comm{}).first;
  }
  cit->second.last_active = ++clock_;
  return &cit->second;
}

bool CollectiveAlignment::Join(Comm& c, int32_t pid, int32_t rank) {
  if (c.participants.contains({pid, rank})) return true;
  if (c.participants.size() >= o_.max_participants) {
    ++counters_.participants_refused;
    return false;
  }
  // A new participant: collectives queued as complete now wait for it too (checked at pop).
  c.participants.insert({pid, rank});
  return true;
}

void CollectiveAlignment::AddParticipant(uint64_t comm_id_hash, int32_t pid, int32_t rank) {
  if (comm_id_hash == 0) return;
  Join(*FindOrMakeComm(comm_id_hash), pid, rank);
}

void CollectiveAlignment::Add(const CollectiveArrival& a) {
  if (a.time < 0 || a.time > kMaxTime / 2) {
    ++counters_.invalid;
    return;
  }
  if (a.p2p || a.op == "send" || a.op == "recv") {
    ++counters_.p2p;
    return;
  }
  if (!a.seq_exact || a.comm_id_hash == 0 || a.seq == 0) {
    ++counters_.inexact;
    return;
  }
  Comm& c = *FindOrMakeComm(a.comm_id_hash);
  if (!Join(c, a.pid, a.rank)) return;
  if (c.max_seq >= o_.seq_window && a.seq <= c.max_seq - o_.seq_window) {
    ++counters_.stale;
    return;
  }
  Pending& p = c.pending[a.seq];
  for (const auto& x : p.arrivals) {
    if (x.pid == a.pid && x.rank == a.rank) {
      ++counters_.duplicates;
      return;
    }
  }
  if (p.arrivals.empty()) {
    p.op = a.op;
    p.first = a.time;
  } else {
    if (p.op != a.op) p.op_mismatch = true;
    p.first = std::min(p.first, a.time);
  }
  p.arrivals.push_back({a.pid, a.rank, a.time, 0});
  // Every arrival is a current participant's (Join above; RemoveProcess drops a leaver's), so
  // the count says whether all came.
  if (p.arrivals.size() == c.participants.size()) c.ready.push_back(a.seq);
  c.max_seq = std::max(c.max_seq, a.seq);
  c.newest = std::max(c.newest, a.time);
  // Evict what fell out of the window: a participant never reported it.
  while (!c.pending.empty() && c.max_seq >= o_.seq_window && c.pending.begin()->first <= c.max_seq - o_.seq_window) {
    c.pending.erase(c.pending.begin());
    ++counters_.evicted_incomplete;
  }
  // Stale queue entries (evicted, re-pushed) are dropped at pop; keep the queue bounded anyway.
  if (c.ready.size() > 2 * o_.seq_window) RebuildReady(c);
  TryComplete(a.comm_id_hash, c, c.newest);
}

void CollectiveAlignment::RebuildReady(Comm& c) {
  c.ready.clear();
  for (const auto& [seq, p] : c.pending)
    if (!p.arrivals.empty() && p.arrivals.size() == c.participants.size()) c.ready.push_back(seq);
}

void CollectiveAlignment::Flush(TimeNs now) {
  for (auto& [hash, c] : comms_) TryComplete(hash, c, now);
}

void CollectiveAlignment::TryComplete(uint64_t hash, Comm& c, TimeNs now) {
  while (!c.ready.empty()) {
    auto it = c.pending.find(c.ready.front());
    if (it == c.pending.end() || it->second.arrivals.size() != c.participants.size()) {
      // Gone (completed, evicted) or no longer complete (a participant joined since): it is
      // queued again when the missing one arrives.
      c.ready.pop_front();
      continue;
    }
    // Queued in completion order, roughly time order: stop at the first that has not settled.
    if (now < it->second.first || now - it->second.first < o_.settle) break;
    c.ready.pop_front();
    Complete(hash, c, it);
  }
}

void CollectiveAlignment::Complete(uint64_t hash, Comm& c, std::map<uint64_t, Pending>::iterator it) {
  AlignedCollective ac;
  ac.comm_id_hash = hash;
  ac.seq = it->first;
  ac.op = it->second.op;
  ac.op_mismatch = it->second.op_mismatch;
  ac.arrivals = std::move(it->second.arrivals);
  c.pending.erase(it);
  if (ac.arrivals.empty()) return;
  std::stable_sort(ac.arrivals.begin(), ac.arrivals.end(), [](const auto& x, const auto& y) { return x.time < y.time; });
  const TimeNs first = ac.arrivals.front().time;
  for (auto& x : ac.arrivals) x.lag = x.time - first;
  ++counters_.aligned;
  if (ac.arrivals.size() >= 2) {
    for (size_t i = 0; i < ac.arrivals.size(); ++i) {
      const auto& x = ac.arrivals[i];
      RankStats& s = stats_[{hash, x.pid, x.rank}];
      s.rank = x.rank;
      ++s.collectives;
      if (i + 1 == ac.arrivals.size()) ++s.last;
      s.lag_sum += x.lag;
      s.lag_max = std::max(s.lag_max, x.lag);
    }
  }
  completed_.push_back(std::move(ac));
  while (completed_.size() > o_.max_completed) completed_.pop_front();
}

void CollectiveAlignment::RemoveProcess(int32_t pid) {
  for (auto& [hash, c] : comms_) {
    if (std::erase_if(c.participants, [&](const Participant& x) { return x.first == pid; }) == 0) continue;
    for (auto& [seq, p] : c.pending) {
      std::erase_if(p.arrivals, [&](const auto& x) { return x.pid == pid; });
      if (!p.arrivals.empty()) {
        p.first = p.arrivals.front().time;
        for (const auto& x : p.arrivals) p.first = std::min(p.first, x.time);
      }
    }
    std::erase_if(c.pending, [](const auto& kv) { return kv.second.arrivals.empty(); });
    // Collectives that waited only for it are complete now.
    RebuildReady(c);
    TryComplete(hash, c, c.newest);
  }
  std::erase_if(comms_, [](const auto& kv) { return kv.second.participants.empty(); });
  std::erase_if(stats_, [&](const auto& kv) { return std::get<1>(kv.first) == pid; });
}

std::vector<AlignedCollective> CollectiveAlignment::TakeCompleted() {
  std::vector<AlignedCollective> r(std::make_move_iterator(completed_.begin()),
                                   std::make_move_iterator(completed_.end()));
  completed_.clear();
  return r;
}

std::vector<CollectiveAlignment::Incomplete> CollectiveAlignment::PendingOlderThanSettle(TimeNs now,
                                                                                       size_t per_comm) const {
  per_comm = std::clamp<size_t>(per_comm, 1, 64);
  std::vector<Incomplete> r;
  for (const auto& [hash, c] : comms_) {
    size_t n = 0;
    // Oldest seq first: the one the job is stuck on when it hangs.
    for (const auto& [seq, p] : c.pending) {
      if (n >= per_comm) break;
      if (p.arrivals.empty() || p.arrivals.size() >= c.participants.size()) continue;
      if (now < p.first || now - p.first < o_.settle) continue;
      Incomplete x;
      x.comm_id_hash = hash;
      x.seq = seq;
      x.op = p.op;
      x.first = p.first;
      for (const auto& a : p.arrivals) x.arrived.emplace_back(a.pid, a.rank);
      std::sort(x.arrived.begin(), x.arrived.end());
      for (const Participant& q : c.participants)
        if (!std::binary_search(x.arrived.begin(), x.arrived.end(), q)) x.missing.push_back(q);
      r.push_back(std::move(x));
      ++n;
    }
  }
  return r;
}

}  // namespace ithbat::collect::probes
