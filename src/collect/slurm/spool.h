#pragma once
// The spool directory between `ithbat slurm-hook` (writer, run by slurmd as root) and the
// agent's SlurmHookCollector (reader). One file per record, written to a temporary name and
// renamed, so the reader never sees half a record; the reader removes what it has read.
//
// Trust: the agent turns these files into job identity and exit codes, so the directory must be
// writable by root (or the agent's own user) alone: a directory that is a symlink, owned by
// another user or writable by group or others is refused (a user could otherwise forge the end
// of someone else's job).
#include <cstddef>
#include <filesystem>

#include "collect/slurm/job_record.h"
#include "core/result.h"

namespace ithbat::collect {

inline constexpr const char* kDefaultSlurmSpool = "/run/ithbat/slurm";
// Records waiting in the spool at most: with no agent reading them (stopped, not installed), a
// node that runs a job a minute fills it in about 35 hours; the hook then drops new records
// (and says so on stderr, which slurmd logs) instead of filling /run.
inline constexpr size_t kMaxSpoolFiles = 4096;

// Whether `dir` may be trusted (above). kNotFound when it does not exist.
Status CheckSpoolDirectory(const std::filesystem::path& dir);

// Writes one record: creates `dir` (0700) and its parent (0755) when missing, refuses with
// kResourceExhausted when `max_files` records already wait, kPermission when the directory
// cannot be trusted.
Status WriteSpoolRecord(const std::filesystem::path& dir, const SlurmJobRecord& record,
                        size_t max_files = kMaxSpoolFiles);

}  // namespace ithbat::collect
