// libithbat_probe_gate.so: LD_PRELOADed into a workload by the probe tests so that the probes can
// be attached before the first call and read before the process goes away, without changing
// the workload. Its constructor runs after every library of the program is mapped (so the
// process's /proc/<pid>/maps already lists libcuda/libnccl); its destructor runs at exit,
// before the process unmaps anything.
//   ITHBAT_GATE_READY=<file>  created by the constructor (the test then attaches)
//   ITHBAT_GATE_START=<file>  the constructor waits until it exists (at most 120 s)
//   ITHBAT_GATE_EXIT=<file>   the destructor flushes stdio, then waits until it exists (120 s)
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fcntl.h>
#include <unistd.h>

namespace {

void WaitFor(const char* env) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') return;
  for (int i = 0; i < 120'000 && access(path, F_OK) != 0; ++i) {
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
}

__attribute__((constructor)) void GateStart() {
  if (const char* ready = std::getenv("ITHBAT_GATE_READY"); ready != nullptr && *ready != '\0') {
    const int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  WaitFor("ITHBAT_GATE_START");
}

__attribute__((destructor)) void GateExit() {
  std::fflush(nullptr);
  WaitFor("ITHBAT_GATE_EXIT");
}

}  // namespace
