#pragma once
// Slurm's word on the jobs of this node: the records `ithbat slurm-hook prolog|epilog` left in
// the spool (spool.h) become kJobStart / kJobEnd events — job id, user, uid, account,
// partition, GPUs, and on the end the exit code or the signal — and counters of job ends by
// outcome. This is the identity that does not depend on reading a job process's /proc.
//
// Each Collect lists the spool (at most max_entries_per_collect names), reads the oldest
// max_records_per_collect records in time order (each opened O_NOFOLLOW, a regular file of at
// most kMaxRecordBytes), turns them into events and removes them; a malformed record is removed
// too, counted and reported with its name (it would otherwise be read again every tick). A spool
// that does not exist (Slurm's hooks not installed here) is no error; one that cannot be trusted
// (spool.h) is degraded mode and left unread.
//
// Events: kJobStart and kJobEnd with identity.job = the Slurm job id (the node is the agent's);
// name "slurm"; attrs user, uid, gid, account, partition, gpus, cluster, slurm_node and,
// on the end, exit_code or signal, derived_exit_code; an end's value is the exit code, or 128 +
// the signal as a shell reports it; its text says the outcome in words.
#include <cstddef>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/collector.h"
#include "collect/slurm/job_record.h"
#include "core/metric.h"
#include "core/sink.h"

namespace ithbat::collect {

struct SlurmHookOptions {
  std::filesystem::path spool_dir;
  size_t max_records_per_collect = 256;
  size_t max_entries_per_collect = 16384;  // names listed per tick: bounds the time of one Collect
  size_t max_running_jobs = 4096;          // jobs started and not yet ended that are remembered
  // Remove each record once read (the agent). Off for `ithbat agent --once` beside a running
  // agent, which must not take its records; records then repeat on every Collect.
  bool remove_read = true;
};

class SlurmHookCollector final : public agent::Collector {
 public:
  static std::unique_ptr<SlurmHookCollector> Create(SlurmHookOptions options);

  std::vector<MetricDesc> Describe() const override;

  uint64_t records_read() const { return records_read_; }
  uint64_t records_rejected() const { return records_rejected_; }

 protected:
  Status InitImpl(Sink& sink) override;
  Status CollectImpl(TimeNs tick_time) override;

 private:
  explicit SlurmHookCollector(SlurmHookOptions options);

  Result<SlurmJobRecord> ReadRecord(int dirfd, const std::string& name);
  void Handle(const SlurmJobRecord& r);

  SlurmHookOptions options_;
  std::vector<MetricDesc> descs_;
  Sink* sink_ = nullptr;
  std::deque<std::string> running_;  // job ids, oldest first
  std::set<std::string> kept_;       // remove_read off: the records already read

  struct Counter {
    std::optional<SeriesRef> ref;
    uint64_t value = 0;
  };
  Counter starts_, ends_completed_, ends_failed_, ends_signaled_, rejected_;
  std::optional<SeriesRef> running_ref_;
  uint64_t records_read_ = 0;
  uint64_t records_rejected_ = 0;
};

}  // namespace ithbat::collect
