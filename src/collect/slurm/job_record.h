#pragma once
// What Slurm's prolog and epilog tell the agent about a job on this node: one record per job
// start or end, written by `ithbat slurm-hook prolog|epilog` (run by slurmd as root) into a
// spool directory the agent reads (slurm_hook_collector.h). The identity comes from slurmd's own
// environment for the hook — job id, user, account, partition, GPUs, exit code — and so does not
// depend on reading any job process's /proc environment.
//
// slurmd's Prolog/Epilog environment (slurm.conf(5), "Prolog and Epilog Scripts"; checked on
// Debian 12's slurm-wlm 22.05): SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_GID,
// SLURM_JOB_PARTITION, SLURM_JOB_ACCOUNT (only with accounting), SLURM_JOB_GPUS (only with a
// gpu GRES), SLURM_CLUSTER_NAME, SLURMD_NODENAME, SLURM_SCRIPT_CONTEXT (prolog_slurmd /
// epilog_slurmd); the epilog adds SLURM_JOB_EXIT_CODE2 ("3:0" = exit 3, "0:9" = signal 9),
// SLURM_JOB_EXIT_CODE (the raw wait status: 768, 9) and SLURM_JOB_DERIVED_EC (the highest exit
// of any step, also a raw status).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/time.h"

namespace ithbat::collect {

enum class JobHookEvent : uint8_t { kStart, kEnd };
std::string_view JobHookEventName(JobHookEvent e);  // "start", "end"

struct SlurmJobRecord {
  JobHookEvent event = JobHookEvent::kStart;
  TimeNs time = 0;        // when the hook ran (realtime)
  std::string job_id;     // SLURM_JOB_ID
  std::string user;       // SLURM_JOB_USER
  int64_t uid = -1;       // SLURM_JOB_UID
  int64_t gid = -1;       // SLURM_JOB_GID
  std::string account;    // SLURM_JOB_ACCOUNT ("" without accounting)
  std::string partition;  // SLURM_JOB_PARTITION
  std::string gpus;       // SLURM_JOB_GPUS: GPU indices on this node, "0,1" ("" = none known)
  std::string cluster;    // SLURM_CLUSTER_NAME
  std::string node;       // SLURMD_NODENAME
  // End only: the batch script's exit code, or the signal that ended it (exactly one of the two
  // is meaningful: a job killed by a signal has no exit code).
  std::optional<int32_t> exit_code;
  std::optional<int32_t> signal;
  std::optional<int32_t> derived_exit_code;  // the highest exit code of any step

  bool Failed() const { return event == JobHookEvent::kEnd && ((exit_code && *exit_code != 0) || signal); }
  // "exit code 3", "signal 9 (SIGKILL)", "exit code 0", "unknown" (an end without either).
  std::string OutcomeText() const;

  friend bool operator==(const SlurmJobRecord&, const SlurmJobRecord&) = default;
};

// Bounds on what a record may hold: values become event attributes and labels, so each is one
// short line of printable ASCII; a record file is at most kMaxRecordBytes.
inline constexpr size_t kMaxRecordValueBytes = 256;
inline constexpr size_t kMaxRecordBytes = 16 * 1024;

// The exit status as Slurm's SLURM_JOB_EXIT_CODE2 writes it, "EXIT:SIGNAL" ("3:0", "0:9").
struct ExitStatus {
  int32_t exit_code = 0;
  int32_t signal = 0;
};
Result<ExitStatus> ParseSlurmExitCode2(std::string_view text);
// A raw wait(2) status (SLURM_JOB_EXIT_CODE, SLURM_JOB_DERIVED_EC): 768 → exit 3, 9 → signal 9.
Result<ExitStatus> ParseWaitStatus(std::string_view text);

// The record for `event` from an environment (`getenv` returns nullptr for an unset variable).
// Errors: kInvalidArgument when SLURM_JOB_ID is missing or malformed; a malformed optional
// variable is left out (a hook must record what it can).
using EnvLookup = std::function<const char*(const char*)>;
Result<SlurmJobRecord> RecordFromEnvironment(JobHookEvent event, const EnvLookup& getenv, TimeNs now);

// One JSON object (one line). ParseRecord reads it back, strictly: unknown event, missing job,
// values over the bounds or outside printable ASCII → kParse naming the field.
std::string RecordToJson(const SlurmJobRecord& r);
Result<SlurmJobRecord> ParseRecord(std::string_view json);

// The name of the spool file for a record: "<time_ns, 20 digits>-<job>-<event>.json", so that a
// directory listing sorted by name is in time order.
std::string RecordFileName(const SlurmJobRecord& r);

}  // namespace ithbat::collect
