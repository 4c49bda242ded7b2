// ithbat-probe-late-loader: a process that maps libcuda only after it started (as a Python
// framework does on `import torch`), for the probes' late-load test. Steps, each behind a file:
//   late_loader READY GO LIB LOADED CALL N DONE EXIT
// creates READY; waits for GO; dlopens LIB; creates LOADED; waits for CALL; calls
// cuMemAlloc_v2 N times (no context needed: the call fails, the probe counts it); creates DONE;
// waits for EXIT. Every wait is bounded (120 s).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

namespace {

void Create(const char* p) {
  const int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}

bool WaitFor(const char* p) {
  for (int i = 0; i < 120'000; ++i) {
    if (access(p, F_OK) == 0) return true;
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s READY GO LIB LOADED CALL N DONE EXIT\n", argv[0]);
    return 2;
  }
  Create(argv[1]);
  if (!WaitFor(argv[2])) return 1;
  void* h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  using AllocFn = int (*)(unsigned long long*, size_t);
  auto alloc = reinterpret_cast<AllocFn>(dlsym(h, "cuMemAlloc_v2"));
  if (alloc == nullptr) return 1;
  Create(argv[4]);
  if (!WaitFor(argv[5])) return 1;
  const long n = std::strtol(argv[6], nullptr, 10);
  for (long i = 0; i < n; ++i) {
    unsigned long long p = 0;
    (void)alloc(&p, 4096);
  }
  Create(argv[7]);
  return WaitFor(argv[8]) ? 0 : 1;
}
