#pragma once
// `ithbat slurm-hook prolog|epilog`: what slurmd runs as its Prolog/Epilog (docs/slurm.md). It
// writes one record of the job's start or end — identity and exit code from slurmd's
// environment — into the spool the agent reads (collect/slurm/). It never fails the job: a
// prolog that exits non-zero makes slurmd drain the node and requeue the job, so every error of
// the hook's own (a bad flag, a full spool, a missing variable) is printed to stderr, which
// slurmd logs, and the exit code is still 0 — unless --strict asks otherwise (tests).
#include <cstdio>
#include <functional>

#include "collect/slurm/job_record.h"

namespace ithbat::cli {

// argv[0] is "slurm-hook". `getenv` is the environment (tests pass their own).
int RunSlurmHookCommand(int argc, const char* const* argv, const collect::EnvLookup& getenv, std::FILE* err);

}  // namespace ithbat::cli
