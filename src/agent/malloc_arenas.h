#pragma once
// glibc gives each thread that allocates its own arena (up to 8 per core) and keeps each
// arena's freed pages for its next allocations. The agent has ~30 threads that are idle most
// of the time and a few that churn megabytes a second (job-output capture at 10,000 lines/s):
// with many arenas the churn of one thread and the long-lived objects of another sit on pages
// none can give back, and malloc_trim finds little to return (measured: 14.7 MB in the second
// arena for 2.6 MB in use). One arena, trimmed once a second, held the agent beside such a job
// at 29.5 MiB median RSS instead of 34.0 with two (docs/performance.md, "The agent's memory",
// third pass); the threads rarely allocate at the same moment, so the arena's lock costs no
// measurable CPU (0.037 cores against 0.038).
#include <cstddef>

namespace ithbat::agent {

// Limits the process to one malloc arena. Call before starting threads: a thread that already
// has an arena keeps it.
void LimitMallocArenas();

// How many arenas the process's allocator has (from malloc_info); 0 if it cannot tell.
size_t MallocArenaCount();

}  // namespace ithbat::agent
