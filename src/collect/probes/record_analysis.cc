#include "collect/probes/record_analysis.h"

namespace ithbat::collect::probes {

RecordAnalysis::Proc* RecordAnalysis::Find(int32_t pid, bool create) {
  auto it = procs_.find(pid);
  if (it != procs_.end()) return it->second.get();
  if (!create || procs_.size() >= kMaxProcesses) return nullptr;
  return procs_.emplace(pid, std::make_unique<Proc>()).first->second.get();
}

void RecordAnalysis::Add(const cuda_probe_record& r, std::string_view op) {
  const int32_t pid = static_cast<int32_t>(r.tgid);
  const auto time = static_cast<TimeNs>(r.time_ns);
  switch (r.kind) {
    case CUDA_REC_COMM_INIT:
      if (r.comm_id_hash != 0 && r.rank >= 0) alignment_.AddParticipant(r.comm_id_hash, pid, r.rank);
      return;
    case CUDA_REC_SYNC: {
      Proc* p = Find(pid, true);
      if (p == nullptr) return;
      p->inference.Add(StepMark{time, static_cast<TimeNs>(r.duration_ns), SyncSignature(r.probe, r.bytes)});
      return;
    }
    case CUDA_REC_COLLECTIVE: {
      Proc* p = Find(pid, true);
      if (p == nullptr) return;
      const bool p2p = (r.rec_flags & CUDA_REC_F_P2P) != 0;
      ++p->ops_by_size[{op, NcclSizeBucket(r.bytes)}];
      // Point-to-point calls are part of the step's pattern too (pipeline stages send and
      // receive the same way every step); the communicator identifies them within the process.
      const uint64_t comm = r.comm_id_hash != 0 ? r.comm_id_hash : r.comm;
      p->inference.Add(StepMark{time, 0, CollectiveSignature(op, r.bytes, comm)});
      CollectiveArrival a;
      a.pid = pid;
      a.rank = r.rank;
      a.comm_id_hash = r.comm_id_hash;
      a.seq = r.seq;
      a.seq_exact = (r.rec_flags & CUDA_REC_F_SEQ_EXACT) != 0;
      a.time = time;
      a.op = op;
      a.bytes = r.bytes;
      a.p2p = p2p;
      alignment_.Add(a);
      return;
    }
    default:
      return;
  }
}

void RecordAnalysis::AddLoggedStep(int32_t pid, int64_t step, TimeNs time) {
  if (Proc* p = Find(pid, false)) p->inference.AddLoggedStep(step, time);
}

void RecordAnalysis::Flush(TimeNs now) {
  alignment_.Flush(now);
  // The per-collective detail is not kept: the aggregates in Stats() are what is published.
  (void)alignment_.TakeCompleted();
}

void RecordAnalysis::Forget(int32_t pid) {
  procs_.erase(pid);
  alignment_.RemoveProcess(pid);
}

RecordAnalysis::Steps RecordAnalysis::TakeSteps(int32_t pid) {
  Steps out;
  Proc* p = Find(pid, false);
  if (p == nullptr) return out;
  out.retraction = p->inference.TakeRetraction();
  out.steps = p->inference.TakeSteps();
  for (const InferredStep& s : out.steps) {
    // A step comes back when its number changed (calibration): count each index once.
    if (s.index > p->max_index) {
      p->steps += static_cast<uint64_t>(s.index - p->max_index);
      p->max_index = s.index;
      p->last_step_ns = s.end - s.start;
      p->confidence = s.confidence;
    }
  }
  return out;
}

RecordAnalysis::Summary RecordAnalysis::Get(int32_t pid) const {
  Summary s;
  auto it = procs_.find(pid);
  if (it != procs_.end()) {
    const Proc& p = *it->second;
    s.locked = p.inference.locked();
    s.steps = p.steps;
    s.last_step_ns = p.last_step_ns;
    s.confidence = p.confidence;
    s.calibrated = p.inference.offset().has_value();
    s.ops_by_size = p.ops_by_size;
  }
  for (const auto& [key, st] : alignment_.Stats()) {
    if (std::get<1>(key) != pid) continue;
    s.aligned += st.collectives;
    s.last += st.last;
    s.lag_sum += st.lag_sum;
  }
  return s;
}

}  // namespace ithbat::collect::probes
