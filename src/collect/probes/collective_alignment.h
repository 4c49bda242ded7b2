#pragma once
// Per-collective arrival order across the local ranks of one communicator (issue 4, item 7),
// and the NCCL message-size buckets of ithbat_probe_nccl_ops_by_size_total{op,size}. Pure.
//
// WHAT THE TIMES ARE: HOST ENQUEUE times — when each process CALLED ncclAllReduce & co (uprobe
// entry), not when the GPU started or finished the collective. A rank that arrives last here
// reached the collective last on the host (slower data loading, compute launched later, a
// Python stall); GPU-side lateness needs the profiler plugin. Label every series from here
// "host enqueue".
//
// Matching: a collective is identified across processes by (comm_id_hash, seq). That is exact
// only when every process's seq counts from the communicator's init (NCCL requires every rank to
// call a communicator's collectives in the same order), i.e. records with seq_exact and a known
// comm_id_hash (bpf/cuda_probes_abi.h: CUDA_REC_F_SEQ_EXACT, comm_id_hash != 0). Other records
// (a process attached after the init: its seq counts from attachment) are NOT aligned: they are
// counted as `inexact` and dropped — aligning them would pair different collectives.
//
// Point-to-point calls (ncclSend/ncclRecv: `p2p`, or op "send"/"recv") are never aligned: ranks
// make different numbers of them (pipeline stages), and the probes number them apart from the
// collectives (CUDA_REC_F_P2P). They are counted as `p2p` and dropped.
//
// Completion: the participants of a communicator are the (process, rank) pairs that sent an
// exact record for it (a communicator's ranks on this node; one process may hold several ranks
// of one communicator; AddParticipant registers one from its comm-init record before its first
// collective). A collective is complete when every participant reported
// its seq AND it is `settle` older than the newest record of that communicator: records of
// several processes are delivered in any order, and a participant whose first record has not
// been delivered yet must not be missed (inits of one communicator return together, so a settle
// of a second covers it). Then it is aligned and its rank lags aggregated. Cost per record:
// O(participants) for the duplicate check plus amortised O(1) for completion (complete
// collectives wait in a queue for their settle time). Memory is bounded: per communicator a window of
// the newest `seq_window` sequence numbers — an incomplete collective that falls out of it (a
// participant that missed it: ring drop, exit) is evicted and counted; at most `max_comms`
// communicators (least recently active evicted) and `max_participants` processes each.
//
// Lifecycle: one per node collector; not thread-safe.
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ithbat::collect::probes {

// Bounded size label of an NCCL message (bytes as the probes count them). Edges are powers of
// 16 from 1 KiB — close to where NCCL changes protocol (LL for small messages, LL128, Simple
// for large ones): "lt_1k" [0,1Ki), "1k_16k", "16k_256k", "256k_4m", "4m_64m", "64m_1g",
// "ge_1g" [1Gi,∞). Seven labels; the upper edge of each is exclusive.
std::string_view NcclSizeBucket(uint64_t bytes);
// Every label NcclSizeBucket can return, in increasing order.
const std::vector<std::string_view>& NcclSizeBuckets();

// One process's record of one collective.
struct CollectiveArrival {
  int32_t pid = -1;
  int32_t rank = -1;            // rank in the communicator (-1: unknown)
  uint64_t comm_id_hash = 0;    // 0: init not seen (never aligned)
  uint64_t seq = 0;             // per-communicator, 1-based
  bool seq_exact = false;       // seq counts from the communicator's init
  TimeNs time = 0;              // host enqueue; one clock for every process (same node)
  std::string_view op;          // static storage ("all_reduce", ...)
  uint64_t bytes = 0;
  bool p2p = false;             // ncclSend/ncclRecv (CUDA_REC_F_P2P): never aligned
};

struct AlignedCollective {
  uint64_t comm_id_hash = 0;
  uint64_t seq = 0;
  std::string_view op;
  struct Arrival {
    int32_t pid = -1;
    int32_t rank = -1;
    TimeNs time = 0;
    TimeNs lag = 0;  // behind the first process to enqueue it
  };
  std::vector<Arrival> arrivals;  // in enqueue order: front() first, back() last
  bool op_mismatch = false;       // the processes disagreed on the op (should not happen)
};

class CollectiveAlignment {
 public:
  struct Options {
    size_t seq_window = 1024;      // pending sequence numbers kept per communicator
    size_t max_comms = 256;
    size_t max_participants = 64;  // processes per communicator on one node
    size_t max_completed = 4096;   // completed collectives kept for TakeCompleted
    TimeNs settle = 1'000'000'000; // see "Completion"
  };
  CollectiveAlignment();
  explicit CollectiveAlignment(Options options);

  void Add(const CollectiveArrival& a);
  // A process took part in a communicator's init (CUDA_REC_COMM_INIT with a comm_id_hash).
  void AddParticipant(uint64_t comm_id_hash, int32_t pid, int32_t rank);
  // Completes what has settled by `now` (the records' clock) without waiting for newer records.
  void Flush(TimeNs now);
  // A process is gone (exited, detached): none of its ranks is a participant any more; pending
  // collectives that only waited for it complete without it. O(pending) (rare).
  void RemoveProcess(int32_t pid);
  // Collectives completed since the last call (bounded by max_completed; oldest dropped first).
  std::vector<AlignedCollective> TakeCompleted();

  // A collective some participants enqueued more than `settle` before `now` while others have
  // not (yet): who is missing — the rank a hung or stalled job waits for. Host enqueue view.
  struct Incomplete {
    uint64_t comm_id_hash = 0;
    uint64_t seq = 0;
    std::string_view op;
    TimeNs first = 0;  // the earliest enqueue of it
    std::vector<std::pair<int32_t, int32_t>> arrived;  // (pid, rank)
    std::vector<std::pair<int32_t, int32_t>> missing;  // participants that have not enqueued it
  };
  // The oldest `per_comm` such collectives of every communicator, oldest first per communicator.
  // Cost O(communicators × per_comm × participants); per_comm is clamped to 1..64.
  std::vector<Incomplete> PendingOlderThanSettle(TimeNs now, size_t per_comm = 1) const;

  // Host-enqueue arrival aggregates of one process in one communicator, over completed
  // collectives with at least two participants.
  struct RankStats {
    int32_t rank = -1;
    uint64_t collectives = 0;  // completed collectives it took part in
    uint64_t last = 0;         // times it enqueued last
    TimeNs lag_sum = 0;        // Σ lag behind the first
    TimeNs lag_max = 0;
  };
  // (comm_id_hash, pid, rank) -> stats.
  using StatsKey = std::tuple<uint64_t, int32_t, int32_t>;
  const std::map<StatsKey, RankStats>& Stats() const { return stats_; }

  struct Counters {
    uint64_t aligned = 0;             // completed collectives
    uint64_t inexact = 0;             // records refused: seq not from init or no comm hash
    uint64_t p2p = 0;                 // point-to-point records (never aligned)
    uint64_t evicted_incomplete = 0;  // fell out of the window before every participant came
    uint64_t duplicates = 0;          // the same (comm, seq) twice from one process
    uint64_t stale = 0;               // a seq older than the window
    uint64_t comms_evicted = 0;
    uint64_t participants_refused = 0;
    uint64_t invalid = 0;  // a negative or absurd time
  };
  const Counters& counters() const { return counters_; }

 private:
  using Participant = std::pair<int32_t, int32_t>;  // (pid, rank)
  struct Pending {
    std::string_view op;
    bool op_mismatch = false;
    TimeNs first = 0;  // earliest arrival
    std::vector<AlignedCollective::Arrival> arrivals;  // all from current participants
  };
  struct Comm {
    std::set<Participant> participants;
    std::map<uint64_t, Pending> pending;  // seq -> arrivals so far
    // Seqs whose every participant had arrived when pushed, in that order, waiting for settle.
    // Checked again when popped (a participant may have joined since, or the entry gone).
    std::deque<uint64_t> ready;
    uint64_t max_seq = 0;
    TimeNs newest = 0;  // latest record time
    uint64_t last_active = 0;
  };
  Comm* FindOrMakeComm(uint64_t hash);
  bool Join(Comm& c, int32_t pid, int32_t rank);
  void TryComplete(uint64_t hash, Comm& c, TimeNs now);
  void Complete(uint64_t hash, Comm& c, std::map<uint64_t, Pending>::iterator it);
  static void RebuildReady(Comm& c);

  Options o_;
  Counters counters_;
  std::map<uint64_t, Comm> comms_;
  std::map<StatsKey, RankStats> stats_;
  std::deque<AlignedCollective> completed_;
  uint64_t clock_ = 0;
};

}  // namespace ithbat::collect::probes
