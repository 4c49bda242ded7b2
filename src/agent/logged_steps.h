#pragma once
// Steps that jobs printed (collected from their output by collect/joblog), shared with the
// collectors that infer step boundaries without logs (collect/probes: from the repeating
// pattern of collectives and syncs). A job often logs only every N steps and only on rank 0;
// those few lines are what turns an inferred boundary's relative number into the job's own
// step number. See collect/probes/README.md ("Step inference").
//
// Thread-safe. Bounded: the newest kMaxPerJob marks per job and kMaxJobs jobs (the oldest
// job is dropped when a new one arrives). Readers keep a cursor (the mark count they have
// seen) and ask only for what came after it.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ithbat::agent {

class LoggedSteps {
 public:
  static constexpr size_t kMaxPerJob = 4096;
  static constexpr size_t kMaxJobs = 256;

  struct Mark {
    int32_t rank = -1;  // the rank that printed it (-1: unknown)
    int64_t step = -1;  // the job's own step number
    TimeNs time = 0;    // when the line was written (end of that step, give or take buffering)
    uint64_t index = 0; // position in the job's sequence of marks (1-based), for cursors
  };

  void Add(std::string_view job, int32_t rank, int64_t step, TimeNs time);
  // Marks of `job` with index > after, oldest first (those already dropped are skipped).
  std::vector<Mark> Since(std::string_view job, uint64_t after) const;

 private:
  struct Job {
    std::deque<Mark> marks;
    uint64_t next_index = 1;
    uint64_t created = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Job, std::less<>> jobs_;
  uint64_t created_counter_ = 0;
};

}  // namespace ithbat::agent
