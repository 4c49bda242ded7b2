// The per-call records of bpf/cuda_probes.bpf.c for real (root, this kernel's eBPF; a refusal
// FAILS): CUDA_REC_SYNC per host-blocking sync with its duration, the communicator identity
// across processes (comm_id_hash = NCCL's commHash of the ncclUniqueId passed by value, equal to
// nccl_comm_hash.h's value for the id; seq exact from the init), p2p calls that differ between
// ranks without shifting the collectives' seq,
// a rank attached after the init (hash 0, inexact), then end to end: the records of a
// training-like workload (ithbat-nccl-workload --train-steps) through CollectiveAlignment and
// StepInference, boundaries checked against the workload's own step start times.
//
// The probes are attached with ProbeBpf directly (not the collector) so the raw records are seen.
// Workloads run behind the start gate (tests/probes/start_gate.cc): attached before their first
// call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/probes/collective_alignment.h"
#include "collect/probes/probe_bpf.h"
#include "collect/probes/probe_table.h"
#include "collect/probes/proc_maps.h"
#include "collect/probes/step_inference.h"
#include "collect/probes/target_resolver.h"
#include "core/time.h"
#include "nccl_comm_hash.h"
#include "probes/probe_test_util.h"
#include "testutil/testutil.h"

namespace ithbat::collect::probes {
namespace {

namespace fs = std::filesystem;

using Proc = test_util::GatedChild;
using test_util::Touch;
using test_util::WaitForFile;

class RecordsEbpf : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the probe tests need root (uprobes, BPF)";
    auto b = ProbeBpf::Load();
    ASSERT_TRUE(b) << "the kernel refused the probes: " << b.error().message;
    bpf_ = std::move(*b);
  }

  // Attaches every probe of every libcuda/libnccl the process maps.
  void Attach(pid_t pid) {
    auto libs = ReadMappedLibraries("/proc", pid);
    ASSERT_TRUE(libs) << libs.error().message;
    ASSERT_EQ(libs->size(), 2u) << "libcuda and libnccl expected in pid " << pid;
    for (const MappedLibrary& lib : *libs) {
      auto path = AgentPathFor("/proc", pid, lib);
      ASSERT_TRUE(path) << path.error().message;
      auto resolved = ResolveLibrary(*path, lib.kind, std::nullopt);
      ASSERT_TRUE(resolved) << resolved.error().message;
      auto att = bpf_->Attach(pid, *path, resolved->targets);
      ASSERT_TRUE(att) << att.error().message;
      ASSERT_EQ((*att)->failed(), 0u) << (*att)->first_error();
      attachments_.push_back(std::move(*att));
    }
  }

  void Drain() {
    bpf_->DrainRecords([&](const cuda_probe_record& r) { records_[static_cast<int32_t>(r.tgid)].push_back(r); });
  }

  std::vector<cuda_probe_record> Of(pid_t pid, uint32_t kind) {
    std::vector<cuda_probe_record> v;
    for (const auto& r : records_[pid])
      if (r.kind == kind) v.push_back(r);
    return v;
  }

  std::vector<std::string> Env() {
    return {"LD_LIBRARY_PATH=" + fs::path(ITHBAT_FAKE_CUDA_PATH).parent_path().string(), "ITHBAT_FAKE_STATE=",
            "ITHBAT_FAKE_CUDA_DEVICES=2",
            // A blocking D2H copy of B bytes takes B / 2e6 s: the known time inside loss.item().
            "ITHBAT_FAKE_CUDA_COPY_GBPS=0.002"};
  }

  std::unique_ptr<ProbeBpf> bpf_;
  std::vector<std::unique_ptr<Attachment>> attachments_;
  std::map<int32_t, std::vector<cuda_probe_record>> records_;
  testing::TempDir tmp_;
};

uint16_t ProbeId(std::string_view symbol) {
  for (const ProbeSpec& p : ProbeTable())
    if (p.symbol == symbol) return p.id;
  ADD_FAILURE() << "no probe " << symbol;
  return 0xffff;
}

std::vector<TimeNs> ReadSteps(const fs::path& p) {
  std::vector<TimeNs> v;
  std::ifstream in(p);
  int64_t step = 0;
  TimeNs t = 0;
  while (in >> step >> t) v.push_back(t);
  return v;
}

// NCCL's commHash of the unique id a workload wrote (its 128 bytes).
uint64_t IdFileHash(const std::string& path) {
  unsigned char id[ITHBAT_NCCL_UNIQUE_ID_BYTES] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(id), sizeof(id));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(sizeof(id))) << path;
  return ithbat_nccl_comm_hash(id);
}

struct TrainConfig {
  std::string name;
  std::vector<std::string> extra;  // workload options
};

// Two ranks of one communicator, training-like, attached before their first call.
TEST_F(RecordsEbpf, SyncRecordsCommIdentityAndStepsEndToEnd) {
  constexpr int kSteps = 40;
  constexpr long kLossBytes = 20000;                                 // 10 ms at 0.002 GB/s
  constexpr TimeNs kCopyNs = kLossBytes * kNsPerSec / 2'000'000;     // the fake's copy time
  std::vector<uint64_t> hashes;  // one per run: another unique id, another hash
  for (const TrainConfig& cfg : {TrainConfig{"ddp", {}}, TrainConfig{"fsdp_accum", {"--fsdp", "--accum", "3"}}}) {
    SCOPED_TRACE(cfg.name);
    records_.clear();
    attachments_.clear();
    const std::string id = (tmp_.path() / (cfg.name + ".id")).string();
    Proc r[2];
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::string> a = {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(rank), "--nranks", "2",
                                    "--id-file", id, "--bytes", "1048576", "--train-steps", std::to_string(kSteps),
                                    "--layers", "3", "--compute-ms", "20", "--layer-ms", "2",
                                    "--loss-bytes", std::to_string(kLossBytes), "--steps-file",
                                    (tmp_.path() / fmt::format("{}{}.steps", cfg.name, rank)).string()};
      a.insert(a.end(), cfg.extra.begin(), cfg.extra.end());
      r[rank].Start(tmp_.path(), fmt::format("{}{}", cfg.name, rank), a, Env());
      Attach(r[rank].pid);
    }
    r[0].Go();
    r[1].Go();
    nlohmann::json j[2];
    for (int rank = 0; rank < 2; ++rank) {
      j[rank] = r[rank].Result();
      ASSERT_FALSE(j[rank].is_null() || j[rank].is_discarded());
      Drain();
    }
    Drain();
    EXPECT_EQ(bpf_->Globals().ring_dropped, 0u);

    // 1. Sync records: one per call, durations inside the workload's own window, the D2H copy
    //    at least the fake's copy time.
    const uint16_t dtoh = ProbeId("cuMemcpyDtoH_v2"), ssync = ProbeId("cuStreamSynchronize");
    for (int rank = 0; rank < 2; ++rank) {
      const auto syncs = Of(r[rank].pid, CUDA_REC_SYNC);
      size_t n_dtoh = 0, n_sync = 0;
      TimeNs total = 0;
      for (const auto& s : syncs) {
        total += static_cast<TimeNs>(s.duration_ns);
        if (s.probe == dtoh) {
          ++n_dtoh;
          EXPECT_GE(static_cast<TimeNs>(s.duration_ns), kCopyNs) << "a D2H copy shorter than its known time";
          EXPECT_EQ(s.bytes, static_cast<uint64_t>(kLossBytes));
        } else if (s.probe == ssync) {
          ++n_sync;
        } else {
          ADD_FAILURE() << "unexpected sync probe " << s.probe;
        }
      }
      EXPECT_EQ(n_dtoh, j[rank]["calls"]["cuMemcpyDtoH_v2"].get<size_t>());
      // The workload's cuStreamDestroy path does not sync; its final sync is in its count.
      EXPECT_EQ(n_sync, j[rank]["calls"]["cuStreamSynchronize"].get<size_t>());
      // The workload timed the same calls from outside: the probe's times fit inside.
      EXPECT_LE(total, j[rank]["sync_blocked_ns"].get<TimeNs>());
      EXPECT_GE(total, static_cast<TimeNs>(n_dtoh) * kCopyNs);
    }

    // 2. Communicator identity: one init per rank, the same non-zero hash, exact seq.
    const auto i0 = Of(r[0].pid, CUDA_REC_COMM_INIT), i1 = Of(r[1].pid, CUDA_REC_COMM_INIT);
    ASSERT_EQ(i0.size(), 1u);
    ASSERT_EQ(i1.size(), 1u);
    EXPECT_NE(i0[0].comm_id_hash, 0u);
    EXPECT_EQ(i0[0].comm_id_hash, i1[0].comm_id_hash);
    EXPECT_NE(i0[0].comm, 0u);
    EXPECT_EQ(i0[0].rank, 0);
    EXPECT_EQ(i1[0].rank, 1);
    const uint64_t hash = i0[0].comm_id_hash;
    // The BPF program's hash of the id is NCCL's commHash of it, computed here from the id the
    // workload wrote (the same function the fake libnccl tells profiler plugins).
    EXPECT_EQ(hash, IdFileHash(id)) << "the BPF hash differs from nccl_comm_hash.h's";
    for (uint64_t h : hashes) EXPECT_NE(h, hash) << "two communicators with one hash";
    hashes.push_back(hash);
    const auto c0 = Of(r[0].pid, CUDA_REC_COLLECTIVE), c1 = Of(r[1].pid, CUDA_REC_COLLECTIVE);
    ASSERT_EQ(c0.size(), c1.size());
    ASSERT_GT(c0.size(), static_cast<size_t>(kSteps));
    for (size_t k = 0; k < c0.size(); ++k) {
      EXPECT_EQ(c0[k].comm_id_hash, hash);
      EXPECT_EQ(c1[k].comm_id_hash, hash);
      EXPECT_TRUE(c0[k].rec_flags & CUDA_REC_F_SEQ_EXACT);
      EXPECT_TRUE(c1[k].rec_flags & CUDA_REC_F_SEQ_EXACT);
      EXPECT_EQ(c0[k].seq, k + 1);
      EXPECT_EQ(c1[k].seq, k + 1);
      EXPECT_EQ(c0[k].probe, c1[k].probe) << "seq " << k + 1;
      EXPECT_EQ(c0[k].bytes, c1[k].bytes) << "seq " << k + 1;
    }

    // 3. Alignment across the two processes (host enqueue order).
    CollectiveAlignment al;
    // Init records come first (they precede every collective in the shared ring); then each
    // process's collectives, one process after the other (the worst delivery order).
    for (int rank = 0; rank < 2; ++rank)
      for (const auto& i : Of(r[rank].pid, CUDA_REC_COMM_INIT)) al.AddParticipant(i.comm_id_hash, r[rank].pid, i.rank);
    for (int rank = 0; rank < 2; ++rank) {
      for (const auto& c : Of(r[rank].pid, CUDA_REC_COLLECTIVE)) {
        const ProbeSpec* spec = FindProbe(c.probe);
        al.Add({r[rank].pid, c.rank, c.comm_id_hash, c.seq, (c.rec_flags & CUDA_REC_F_SEQ_EXACT) != 0,
                static_cast<TimeNs>(c.time_ns), spec ? spec->nccl_op : "?", c.bytes});
      }
    }
    al.Flush(kMaxTime);
    const auto aligned = al.TakeCompleted();
    EXPECT_EQ(aligned.size(), c0.size());
    for (const auto& a : aligned) EXPECT_EQ(a.arrivals.size(), 2u);
    EXPECT_EQ(al.Stats().at({hash, r[0].pid, 0}).collectives + 0, c0.size());
    EXPECT_EQ(al.Stats().at({hash, r[0].pid, 0}).last + al.Stats().at({hash, r[1].pid, 1}).last, c0.size());

    // 4. Step inference from each rank's marks vs the steps it printed (same CLOCK_MONOTONIC).
    for (int rank = 0; rank < 2; ++rank) {
      const std::vector<TimeNs> truth = ReadSteps(tmp_.path() / fmt::format("{}{}.steps", cfg.name, rank));
      ASSERT_EQ(truth.size(), static_cast<size_t>(kSteps));
      std::vector<StepMark> marks;
      for (const auto& rec : records_[r[rank].pid]) {
        if (rec.kind == CUDA_REC_COLLECTIVE) {
          const ProbeSpec* spec = FindProbe(rec.probe);
          marks.push_back({static_cast<TimeNs>(rec.time_ns), 0,
                           CollectiveSignature(spec ? spec->nccl_op : "?", rec.bytes, rec.comm_id_hash)});
        } else if (rec.kind == CUDA_REC_SYNC) {
          marks.push_back({static_cast<TimeNs>(rec.time_ns), static_cast<TimeNs>(rec.duration_ns),
                           SyncSignature(rec.probe, rec.bytes)});
        }
      }
      std::stable_sort(marks.begin(), marks.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
      StepInference si;
      for (const StepMark& m : marks) si.Add(m);
      ASSERT_TRUE(si.locked()) << "rank " << rank;
      const auto steps = si.TakeSteps();
      ASSERT_GE(steps.size(), static_cast<size_t>(kSteps) - 6) << "rank " << rank;
      double worst = 0;
      int64_t delta = INT64_MIN;
      for (const InferredStep& s : steps) {
        size_t best = 0;
        for (size_t k = 0; k < truth.size(); ++k)
          if (std::llabs(truth[k] - s.start) < std::llabs(truth[best] - s.start)) best = k;
        const TimeNs dur = best + 1 < truth.size() ? truth[best + 1] - truth[best] : truth[best] - truth[best - 1];
        worst = std::max(worst, std::abs(static_cast<double>(s.start - truth[best])) / static_cast<double>(dur));
        if (delta == INT64_MIN) delta = static_cast<int64_t>(best) - s.index;
        EXPECT_EQ(static_cast<int64_t>(best) - s.index, delta) << "numbering not consecutive";
      }
      EXPECT_LE(worst, 1.0) << "the issue's bar: within one step";
      EXPECT_LE(worst, 0.25);
      std::printf("%s rank %d: period %u marks, %zu steps of %d, worst boundary error %.4f steps\n",
                  cfg.name.c_str(), rank, si.period(), steps.size(), kSteps, worst);
    }
    for (Proc& p : r) p.Finish();
    attachments_.clear();
    for (Proc& p : r) bpf_->ForgetProcess(static_cast<uint32_t>(p.pid));
  }
}

// Pipeline stages make different numbers of p2p calls (ranks 0 and 2: 5, rank 1: 10) before the
// all-reduces: the collectives still carry equal, exact seqs on every rank and align; the p2p
// records are flagged, numbered apart and never aligned.
TEST_F(RecordsEbpf, AsymmetricP2pDoesNotShiftCollectiveSeq) {
  constexpr int kRanks = 3, kP2pRounds = 5, kColl = 12;
  const std::string id = (tmp_.path() / "pp.id").string();
  Proc r[kRanks];
  for (int rank = 0; rank < kRanks; ++rank) {
    r[rank].Start(tmp_.path(), fmt::format("pp{}", rank),
                  {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(rank), "--nranks", std::to_string(kRanks),
                   "--id-file", id, "--collectives", std::to_string(kColl), "--bytes", "4096",
                   "--pipeline-p2p", std::to_string(kP2pRounds)},
                  Env());
    Attach(r[rank].pid);
  }
  for (Proc& p : r) p.Go();
  nlohmann::json j[kRanks];
  for (int rank = 0; rank < kRanks; ++rank) {
    j[rank] = r[rank].Result();
    ASSERT_FALSE(j[rank].is_null() || j[rank].is_discarded());
  }
  Drain();
  EXPECT_EQ(bpf_->Globals().ring_dropped, 0u);
  const uint16_t send = ProbeId("ncclSend"), recv = ProbeId("ncclRecv");
  const uint64_t hash = IdFileHash(id);
  CollectiveAlignment al;
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE(fmt::format("rank {}", rank));
    const auto inits = Of(r[rank].pid, CUDA_REC_COMM_INIT);
    ASSERT_EQ(inits.size(), 1u);
    EXPECT_EQ(inits[0].comm_id_hash, hash);
    al.AddParticipant(inits[0].comm_id_hash, r[rank].pid, inits[0].rank);
    std::vector<cuda_probe_record> p2p, coll;
    for (const auto& c : Of(r[rank].pid, CUDA_REC_COLLECTIVE))
      (c.probe == send || c.probe == recv ? p2p : coll).push_back(c);
    const size_t want_p2p = j[rank]["calls"]["ncclSend"].get<size_t>() + j[rank]["calls"]["ncclRecv"].get<size_t>();
    EXPECT_EQ(want_p2p, static_cast<size_t>(rank == 1 ? 2 * kP2pRounds : kP2pRounds));
    ASSERT_EQ(p2p.size(), want_p2p);
    for (size_t k = 0; k < p2p.size(); ++k) {
      EXPECT_TRUE(p2p[k].rec_flags & CUDA_REC_F_P2P);
      EXPECT_FALSE(p2p[k].rec_flags & CUDA_REC_F_SEQ_EXACT);
      EXPECT_EQ(p2p[k].seq, k + 1);  // the p2p count, apart from the collectives
      EXPECT_EQ(p2p[k].comm_id_hash, hash);
    }
    ASSERT_EQ(coll.size(), static_cast<size_t>(kColl));
    for (size_t k = 0; k < coll.size(); ++k) {
      EXPECT_EQ(coll[k].seq, k + 1) << "a p2p call advanced the collective seq";
      EXPECT_TRUE(coll[k].rec_flags & CUDA_REC_F_SEQ_EXACT);
      EXPECT_FALSE(coll[k].rec_flags & CUDA_REC_F_P2P);
      EXPECT_EQ(coll[k].rank, rank);
    }
    for (const auto& c : Of(r[rank].pid, CUDA_REC_COLLECTIVE)) {
      const ProbeSpec* spec = FindProbe(c.probe);
      CollectiveArrival a{r[rank].pid, c.rank, c.comm_id_hash, c.seq, (c.rec_flags & CUDA_REC_F_SEQ_EXACT) != 0,
                          static_cast<TimeNs>(c.time_ns), spec ? spec->nccl_op : "?", c.bytes};
      a.p2p = (c.rec_flags & CUDA_REC_F_P2P) != 0;
      al.Add(a);
    }
  }
  al.Flush(kMaxTime);
  const auto aligned = al.TakeCompleted();
  ASSERT_EQ(aligned.size(), static_cast<size_t>(kColl));
  for (size_t k = 0; k < aligned.size(); ++k) {
    EXPECT_EQ(aligned[k].seq, k + 1);
    EXPECT_EQ(aligned[k].op, "all_reduce");
    EXPECT_FALSE(aligned[k].op_mismatch);
    EXPECT_EQ(aligned[k].arrivals.size(), static_cast<size_t>(kRanks));
  }
  EXPECT_EQ(al.counters().p2p, static_cast<uint64_t>(4 * kP2pRounds));
  EXPECT_EQ(al.counters().inexact, 0u);
  for (Proc& p : r) p.Finish();
}

// Attached after the communicator's init (the gate holds both ranks before their 21st
// all-reduce): comm_id_hash 0 and seq counted from attachment, flagged inexact.
TEST_F(RecordsEbpf, AttachedAfterInitIsInexact) {
  constexpr int kBefore = 20, kTotal = 60;
  const std::string id = (tmp_.path() / "late.id").string();
  const fs::path resume = tmp_.path() / "late.resume";
  Proc r[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> env = Env();
    env.push_back("ITHBAT_GATE_NCCL_PAUSE_AT=" + std::to_string(kBefore));
    env.push_back("ITHBAT_GATE_PAUSED=" + (tmp_.path() / fmt::format("late{}.paused", rank)).string());
    env.push_back("ITHBAT_GATE_RESUME=" + resume.string());
    r[rank].Start(tmp_.path(), fmt::format("late{}", rank),
                  {ITHBAT_NCCL_WORKLOAD, "--rank", std::to_string(rank), "--nranks", "2", "--id-file", id,
                   "--collectives", std::to_string(kTotal), "--bytes", "4096"},
                  env);
  }
  r[0].Go();
  r[1].Go();
  for (int rank = 0; rank < 2; ++rank)
    ASSERT_TRUE(WaitForFile(tmp_.path() / fmt::format("late{}.paused", rank), 120));
  for (int rank = 0; rank < 2; ++rank) Attach(r[rank].pid);
  Touch(resume);
  for (int rank = 0; rank < 2; ++rank) ASSERT_FALSE(r[rank].Result().is_null());
  Drain();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(Of(r[rank].pid, CUDA_REC_COMM_INIT).empty());
    const auto c = Of(r[rank].pid, CUDA_REC_COLLECTIVE);
    ASSERT_EQ(c.size(), static_cast<size_t>(kTotal - kBefore));
    for (size_t k = 0; k < c.size(); ++k) {
      EXPECT_EQ(c[k].comm_id_hash, 0u);
      EXPECT_FALSE(c[k].rec_flags & CUDA_REC_F_SEQ_EXACT);
      EXPECT_EQ(c[k].seq, k + 1);  // from attachment, not from the init
    }
    // Nothing of it is aligned across processes.
    CollectiveAlignment al;
    for (const auto& x : c)
      al.Add({r[rank].pid, x.rank, x.comm_id_hash, x.seq, (x.rec_flags & CUDA_REC_F_SEQ_EXACT) != 0,
              static_cast<TimeNs>(x.time_ns), "all_reduce", x.bytes});
    al.Flush(kMaxTime);
    EXPECT_TRUE(al.TakeCompleted().empty());
    EXPECT_EQ(al.counters().inexact, c.size());
  }
  for (Proc& p : r) p.Finish();
}

}  // namespace
}  // namespace ithbat::collect::probes
