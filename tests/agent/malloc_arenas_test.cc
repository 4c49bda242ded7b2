#include "agent/malloc_arenas.h"

#include <barrier>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ithbat::agent {
namespace {

// In a fresh child process (the test binary's own threads have arenas already): optionally
// limit the arenas, then have four threads allocate while all of them are alive, and exit with
// the number of arenas the allocator reports.
size_t ArenasWithFourThreads(bool limit) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (limit) LimitMallocArenas();
    std::barrier both_allocated(4);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&] {
        void* p = std::malloc(256);
        both_allocated.arrive_and_wait();
        std::free(p);
      });
    }
    for (auto& t : threads) t.join();
    _exit(static_cast<int>(MallocArenaCount()));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return SIZE_MAX;
  return static_cast<size_t>(WEXITSTATUS(status));
}

TEST(MallocArenasTest, ThreadsGetTheirOwnArenasUnlessLimited) {
  // glibc gives a new thread its own arena while under its limit (8 per core): the control.
  EXPECT_GE(ArenasWithFourThreads(false), 2u);
  EXPECT_EQ(ArenasWithFourThreads(true), 1u);
}

TEST(MallocArenasTest, CountsAtLeastTheMainArena) { EXPECT_GE(MallocArenaCount(), 1u); }

}  // namespace
}  // namespace ithbat::agent
