// libithbat_probe_gate.so: LD_PRELOADed into a workload by the probe tests so that the probes can
// be attached before the first call and read before the process goes away, without changing
// the workload. Its constructor runs after every library of the program is mapped (so the
// process's /proc/<pid>/maps already lists libcuda/libnccl); its destructor runs at exit,
// before the process unmaps anything.
//   ITHBAT_GATE_READY=<file>  created by the constructor (the test then attaches)
//   ITHBAT_GATE_START=<file>  the constructor waits until it exists (at most 120 s)
//   ITHBAT_GATE_EXIT=<file>   the destructor flushes stdio, then waits until it exists (120 s)
//   ITHBAT_GATE_NCCL_PAUSE_AT=<n>, ITHBAT_GATE_PAUSED=<file>, ITHBAT_GATE_RESUME=<file>: before the
//     program's (n+1)-th ncclAllReduce (interposed: the gate is preloaded, so the program's call
//     reaches it first and it forwards to the real one), create PAUSED and wait for RESUME
//     (120 s). The tests attach there: "after n collectives" without a clock.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <dlfcn.h>
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

void Create(const char* env) {
  if (const char* path = std::getenv(env); path != nullptr && *path != '\0') {
    const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
}

__attribute__((constructor)) void GateStart() {
  Create("ITHBAT_GATE_READY");
  WaitFor("ITHBAT_GATE_START");
}

__attribute__((destructor)) void GateExit() {
  std::fflush(nullptr);
  WaitFor("ITHBAT_GATE_EXIT");
}

}  // namespace

// NCCL's ABI for ncclAllReduce (enums are int-sized; ncclResult_t 3 = ncclInternalError).
extern "C" __attribute__((visibility("default"))) int ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                                    size_t count, int datatype, int op,
                                                                    void* comm, void* stream) {
  using Fn = int (*)(const void*, void*, size_t, int, int, void*, void*);
  static Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "ncclAllReduce"));
  static long pause_at = [] {
    const char* v = std::getenv("ITHBAT_GATE_NCCL_PAUSE_AT");
    return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : -1L;
  }();
  static long calls = 0;  // NCCL forbids concurrent calls on one communicator; the workload has one
  if (calls++ == pause_at) {
    Create("ITHBAT_GATE_PAUSED");
    WaitFor("ITHBAT_GATE_RESUME");
  }
  if (next == nullptr) return 3;
  return next(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
