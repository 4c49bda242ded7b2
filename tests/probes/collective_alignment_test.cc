// Cross-process alignment of collectives by (comm_id_hash, exact seq): HOST ENQUEUE arrival
// order, lags, aggregates; missing ranks, out-of-order delivery, a rank attached after the init
// (inexact seq: never aligned), bounded memory; the NCCL size buckets.
#include "collect/probes/collective_alignment.h"

#include "nccl_comm_hash.h"

#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace ithbat::collect::probes {
namespace {

constexpr TimeNs kMs = 1'000'000;
constexpr TimeNs kSec = 1'000'000'000;
constexpr uint64_t kComm = 0xabcdef12345ULL;

CollectiveArrival Arr(int32_t pid, uint64_t seq, TimeNs t, uint64_t comm = kComm, bool exact = true) {
  CollectiveArrival a;
  a.pid = pid;
  a.rank = pid - 100;
  a.comm_id_hash = comm;
  a.seq = seq;
  a.seq_exact = exact;
  a.time = t;
  a.op = "all_reduce";
  a.bytes = 4096;
  return a;
}

TEST(NcclSizeBucket, EdgesAndBoundedLabels) {
  EXPECT_EQ(NcclSizeBucket(0), "lt_1k");
  EXPECT_EQ(NcclSizeBucket(1023), "lt_1k");
  EXPECT_EQ(NcclSizeBucket(1024), "1k_16k");
  EXPECT_EQ(NcclSizeBucket(16 * 1024 - 1), "1k_16k");
  EXPECT_EQ(NcclSizeBucket(16 * 1024), "16k_256k");
  EXPECT_EQ(NcclSizeBucket(256 * 1024), "256k_4m");
  EXPECT_EQ(NcclSizeBucket(4ULL << 20), "4m_64m");
  EXPECT_EQ(NcclSizeBucket(64ULL << 20), "64m_1g");
  EXPECT_EQ(NcclSizeBucket((1ULL << 30) - 1), "64m_1g");
  EXPECT_EQ(NcclSizeBucket(1ULL << 30), "ge_1g");
  EXPECT_EQ(NcclSizeBucket(UINT64_MAX), "ge_1g");
  std::set<std::string_view> seen;
  for (int shift = 0; shift < 64; ++shift) seen.insert(NcclSizeBucket(1ULL << shift));
  EXPECT_EQ(seen.size(), NcclSizeBuckets().size());
  for (std::string_view l : seen)
    EXPECT_NE(std::find(NcclSizeBuckets().begin(), NcclSizeBuckets().end(), l), NcclSizeBuckets().end());
}

// Three local ranks; rank 102 is always last by 5 ms, 101 by 2 ms; records arrive out of order
// (per-process drains, seqs shuffled).
TEST(CollectiveAlignment, LastArrivingRankAndLags) {
  CollectiveAlignment al;
  // Their comm-init records registered them (the inits return together, before any collective).
  for (int32_t pid : {100, 101, 102}) al.AddParticipant(kComm, pid, pid - 100);
  std::vector<CollectiveArrival> in;
  for (uint64_t s = 1; s <= 50; ++s) {
    const TimeNs t = static_cast<TimeNs>(s) * 100 * kMs;
    in.push_back(Arr(100, s, t));
    in.push_back(Arr(101, s, t + 2 * kMs));
    in.push_back(Arr(102, s, t + 5 * kMs));
  }
  // Delivered process by process, the slow one first, and reversed inside.
  std::stable_sort(in.begin(), in.end(), [](const auto& a, const auto& b) { return a.pid > b.pid; });
  std::reverse(in.begin(), in.begin() + 50);
  for (const auto& a : in) al.Add(a);
  al.Flush(100 * kSec);
  const auto done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 50u);
  for (const auto& c : done) {
    ASSERT_EQ(c.arrivals.size(), 3u);
    EXPECT_EQ(c.arrivals.front().pid, 100);
    EXPECT_EQ(c.arrivals.back().pid, 102);
    EXPECT_EQ(c.arrivals.back().lag, 5 * kMs);
    EXPECT_EQ(c.arrivals[1].lag, 2 * kMs);
    EXPECT_FALSE(c.op_mismatch);
  }
  const auto& st = al.Stats();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st.at({kComm, 102, 2}).last, 50u);
  EXPECT_EQ(st.at({kComm, 102, 2}).collectives, 50u);
  EXPECT_EQ(st.at({kComm, 102, 2}).lag_sum, 50 * 5 * kMs);
  EXPECT_EQ(st.at({kComm, 102, 2}).lag_max, 5 * kMs);
  EXPECT_EQ(st.at({kComm, 102, 2}).rank, 2);
  EXPECT_EQ(st.at({kComm, 100, 0}).last, 0u);
  EXPECT_EQ(st.at({kComm, 100, 0}).lag_sum, 0);
  EXPECT_EQ(al.counters().aligned, 50u);
}

// A collective is not closed before every participant's records could have been delivered.
TEST(CollectiveAlignment, WaitsForSettleAndLateParticipants) {
  CollectiveAlignment al;
  al.Add(Arr(100, 1, 1 * kSec));
  al.Add(Arr(100, 2, 1 * kSec + 10 * kMs));
  EXPECT_TRUE(al.TakeCompleted().empty());
  // The second rank's records are drained later.
  al.Add(Arr(101, 1, 1 * kSec + 1 * kMs));
  al.Add(Arr(101, 2, 1 * kSec + 11 * kMs));
  al.Flush(3 * kSec);
  const auto done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].arrivals.size(), 2u);
  EXPECT_EQ(done[0].arrivals.back().pid, 101);
}

// A rank that never reports a collective (ring drop): the others' entry waits, then is evicted
// by the window; a removed process (exit) releases what waited for it.
TEST(CollectiveAlignment, MissingRanksAreEvictedOrReleased) {
  CollectiveAlignment::Options o;
  o.seq_window = 8;
  CollectiveAlignment al(o);
  for (uint64_t s = 1; s <= 30; ++s) {
    const TimeNs t = static_cast<TimeNs>(s) * kSec;
    al.Add(Arr(100, s, t));
    if (s != 5) al.Add(Arr(101, s, t + kMs));
  }
  al.Flush(100 * kSec);
  auto done = al.TakeCompleted();
  EXPECT_EQ(done.size(), 29u);
  EXPECT_EQ(al.counters().evicted_incomplete, 1u);
  for (const auto& c : done) EXPECT_NE(c.seq, 5u);

  // Rank 101 exits; 100's later collectives complete alone (no lag stats for one process).
  al.RemoveProcess(101);
  al.Add(Arr(100, 31, 31 * kSec));
  al.Flush(100 * kSec);
  done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].arrivals.size(), 1u);
  EXPECT_EQ(al.Stats().count({kComm, 101, 1}), 0u);
  EXPECT_EQ(al.Stats().at({kComm, 100, 0}).collectives, 29u);
}

// A process attached after the communicator's init numbers collectives from its attachment:
// its records (inexact, or without the comm hash) are refused, never paired with others.
TEST(CollectiveAlignment, InexactSequencesAreNeverAligned) {
  CollectiveAlignment al;
  for (uint64_t s = 1; s <= 10; ++s) {
    al.Add(Arr(100, s + 100, static_cast<TimeNs>(s) * kSec));
    al.Add(Arr(101, s, static_cast<TimeNs>(s) * kSec, kComm, /*exact=*/false));
    al.Add(Arr(102, s, static_cast<TimeNs>(s) * kSec, /*comm=*/0, /*exact=*/true));
  }
  al.Flush(100 * kSec);
  const auto done = al.TakeCompleted();
  EXPECT_EQ(al.counters().inexact, 20u);
  for (const auto& c : done) {
    ASSERT_EQ(c.arrivals.size(), 1u);
    EXPECT_EQ(c.arrivals[0].pid, 100);
  }
  EXPECT_TRUE(al.Stats().empty());
}

TEST(CollectiveAlignment, CommunicatorsAreSeparateAndBounded) {
  CollectiveAlignment::Options o;
  o.max_comms = 4;
  o.max_participants = 2;
  CollectiveAlignment al(o);
  for (uint64_t comm = 1; comm <= 10; ++comm) {
    al.Add(Arr(100, 1, kSec, comm));
    al.Add(Arr(101, 1, kSec + 3 * kMs, comm));
    al.Add(Arr(102, 1, kSec + 4 * kMs, comm));  // a third participant is refused
  }
  al.Flush(10 * kSec);
  EXPECT_EQ(al.counters().comms_evicted, 6u);
  EXPECT_EQ(al.counters().participants_refused, 10u);
  EXPECT_LE(al.Stats().size(), 4u * 2);
  // Duplicates and stale sequence numbers are counted, not aligned.
  CollectiveAlignment::Options w;
  w.seq_window = 4;
  CollectiveAlignment b(w);
  b.Add(Arr(100, 10, kSec));
  b.Add(Arr(100, 10, kSec));
  b.Add(Arr(100, 2, kSec));
  EXPECT_EQ(b.counters().duplicates, 1u);
  EXPECT_EQ(b.counters().stale, 1u);
}

TEST(CollectiveAlignment, OpMismatchIsFlagged) {
  CollectiveAlignment al;
  CollectiveArrival a = Arr(100, 1, kSec);
  CollectiveArrival b = Arr(101, 1, kSec + kMs);
  b.op = "all_gather";
  al.Add(a);
  al.Add(b);
  al.Flush(10 * kSec);
  const auto done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].op_mismatch);
}

// Point-to-point calls are never aligned, even flagged exact: ranks make different numbers of
// them. Collectives around them still align.
TEST(CollectiveAlignment, PointToPointIsNeverAligned) {
  CollectiveAlignment al;
  for (int32_t pid : {100, 101, 102}) al.AddParticipant(kComm, pid, pid - 100);
  for (uint64_t s = 1; s <= 5; ++s) {
    for (int32_t pid : {100, 101, 102}) {
      const TimeNs t = static_cast<TimeNs>(s) * kSec + (pid - 100) * kMs;
      CollectiveArrival send = Arr(pid, s, t - 500 * kMs);
      send.op = "send";  // by op name (a caller that did not set the flag)
      al.Add(send);
      CollectiveArrival recv = Arr(pid, s, t - 400 * kMs);
      recv.op = "whatever";
      recv.p2p = true;  // by flag
      al.Add(recv);
      al.Add(Arr(pid, s, t));
    }
  }
  al.Flush(100 * kSec);
  const auto done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 5u);
  for (const auto& c : done) {
    EXPECT_EQ(c.op, "all_reduce");
    EXPECT_EQ(c.arrivals.size(), 3u);
    EXPECT_FALSE(c.op_mismatch);
  }
  EXPECT_EQ(al.counters().p2p, 30u);
  EXPECT_EQ(al.counters().duplicates, 0u);
}

// One process may hold several ranks of one communicator (one process per node driving all its
// GPUs): each rank is a participant of its own.
TEST(CollectiveAlignment, OneProcessWithSeveralRanks) {
  CollectiveAlignment al;
  for (int32_t rank : {0, 1}) al.AddParticipant(kComm, 100, rank);
  al.AddParticipant(kComm, 200, 2);
  for (uint64_t s = 1; s <= 10; ++s) {
    const TimeNs t = static_cast<TimeNs>(s) * kSec;
    CollectiveArrival a = Arr(100, s, t);
    a.rank = 0;
    al.Add(a);
    a.rank = 1;
    a.time = t + 1 * kMs;
    al.Add(a);
    if (s == 10) continue;  // rank 2 has not enqueued the 10th yet: it waits for it
    CollectiveArrival b = Arr(200, s, t + 3 * kMs);
    b.rank = 2;
    al.Add(b);
  }
  al.Flush(11 * kSec);
  const auto done = al.TakeCompleted();
  ASSERT_EQ(done.size(), 9u);
  for (const auto& c : done) {
    ASSERT_EQ(c.arrivals.size(), 3u);
    EXPECT_EQ(c.arrivals.back().rank, 2);
  }
  EXPECT_EQ(al.counters().duplicates, 0u);
  EXPECT_EQ(al.Stats().at({kComm, 100, 1}).lag_sum, 9 * kMs);
  EXPECT_EQ(al.Stats().at({kComm, 200, 2}).last, 9u);
}

// Who is missing: a collective some ranks enqueued long ago and one never did (a hung rank).
TEST(CollectiveAlignment, ReportsWhoIsMissing) {
  CollectiveAlignment al;
  for (int32_t pid : {100, 101, 102}) al.AddParticipant(kComm, pid, pid - 100);
  for (uint64_t s = 1; s <= 20; ++s) {
    for (int32_t pid : {100, 101, 102}) {
      if (pid == 101 && s >= 12) continue;  // rank 1 stops before collective 12
      al.Add(Arr(pid, s, static_cast<TimeNs>(s) * 10 * kMs + (pid - 100) * kMs));
    }
  }
  // Not yet settled: nothing to report.
  EXPECT_TRUE(al.PendingOlderThanSettle(200 * kMs).empty());
  const TimeNs now = 200 * kMs + 2 * kSec;
  al.Flush(now);
  EXPECT_EQ(al.TakeCompleted().size(), 11u);
  auto stuck = al.PendingOlderThanSettle(now);
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0].comm_id_hash, kComm);
  EXPECT_EQ(stuck[0].seq, 12u);
  EXPECT_EQ(stuck[0].first, 120 * kMs);
  ASSERT_EQ(stuck[0].missing.size(), 1u);
  EXPECT_EQ(stuck[0].missing[0], std::make_pair(101, 1));
  EXPECT_EQ(stuck[0].arrived.size(), 2u);
  stuck = al.PendingOlderThanSettle(now, 100);
  EXPECT_EQ(stuck.size(), 9u);  // seqs 12..20, oldest first
  EXPECT_EQ(stuck.back().seq, 20u);
}

// A hung rank among many: nothing completes and everything stays pending (reported), until the
// rank leaves and what waited only for it completes at once.
TEST(CollectiveAlignment, HungRankThenRemovedReleasesEverything) {
  CollectiveAlignment::Options o;
  o.seq_window = 1 << 16;
  CollectiveAlignment al(o);
  for (int32_t pid = 100; pid < 164; ++pid) al.AddParticipant(kComm, pid, pid - 100);
  // 63 ranks go on, rank 63 is hung: nothing completes, everything stays pending.
  for (uint64_t s = 1; s <= 1000; ++s)
    for (int32_t pid = 100; pid < 163; ++pid) al.Add(Arr(pid, s, static_cast<TimeNs>(s) * 10 * kSec));
  EXPECT_TRUE(al.TakeCompleted().empty());
  EXPECT_EQ(al.PendingOlderThanSettle(kMaxTime / 4, 64).size(), 64u);
  // The hung rank leaves: everything completes at once.
  al.RemoveProcess(163);
  al.Flush(kMaxTime / 4);
  EXPECT_EQ(al.TakeCompleted().size(), 1000u);
}

// The communicator id the probes compute is NCCL's commHash (getHash, DJB2a over the 128 id
// bytes, bytes sign-extended where char is signed): checked against values worked by hand.
TEST(NcclCommHash, IsNcclsGetHashOverTheUniqueId) {
  unsigned char id[ITHBAT_NCCL_UNIQUE_ID_BYTES] = {};
  uint64_t expect = 5381;
  for (int i = 0; i < ITHBAT_NCCL_UNIQUE_ID_BYTES; ++i) expect *= 33;  // XOR with 0 changes nothing
  EXPECT_EQ(ithbat_nccl_comm_hash(id), expect);
  // One high byte first: sign-extended on x86-64 (char is signed), not on aarch64.
  id[0] = 0xff;
  uint64_t h = 5381 * 33;
#if ITHBAT_NCCL_CHAR_IS_SIGNED
  h ^= ~0ULL;
#else
  h ^= 0xffULL;
#endif
  for (int i = 1; i < ITHBAT_NCCL_UNIQUE_ID_BYTES; ++i) h *= 33;
  EXPECT_EQ(ithbat_nccl_comm_hash(id), h);
  // Every byte counts, the last one too.
  unsigned char other[ITHBAT_NCCL_UNIQUE_ID_BYTES] = {};
  other[ITHBAT_NCCL_UNIQUE_ID_BYTES - 1] = 1;
  EXPECT_EQ(ithbat_nccl_comm_hash(other), expect ^ 1ULL);
#if defined(__x86_64__)
  EXPECT_EQ(ITHBAT_NCCL_CHAR_IS_SIGNED, 1);
#endif
}

// Garbage in (random pids, hashes, seqs, times, including negative and huge): no crash, memory
// within the bounds.
TEST(CollectiveAlignment, GarbageStaysBounded) {
  CollectiveAlignment::Options o;
  o.max_comms = 8;
  o.seq_window = 16;
  o.max_participants = 4;
  o.max_completed = 32;
  CollectiveAlignment al(o);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    CollectiveArrival a;
    a.pid = static_cast<int32_t>(rng() % 16);
    a.rank = static_cast<int32_t>(rng());
    a.comm_id_hash = rng() % 24;
    a.seq = rng() % 3 == 0 ? rng() : rng() % 64;
    a.seq_exact = rng() % 8 != 0;
    a.time = static_cast<TimeNs>(rng());
    a.op = "all_reduce";
    al.Add(a);
    if (i % 1000 == 0) {
      al.Flush(static_cast<TimeNs>(rng()));
      al.RemoveProcess(static_cast<int32_t>(rng() % 16));
      EXPECT_LE(al.TakeCompleted().size(), 32u);
    }
  }
  EXPECT_LE(al.Stats().size(), 8u * 4);
  EXPECT_GT(al.counters().invalid, 0u);
}

}  // namespace
}  // namespace ithbat::collect::probes
