// ithbat_probe_short_lived: one of the many short-lived CUDA processes of the probes' scale test
// (scale_ebpf_test.cc). It maps libcuda (linked directly: LD_LIBRARY_PATH picks which copy),
// sets up a context, a module and a stream, then for each phase: says it is ready, waits for
// its go byte, makes exactly LAUNCHES cuLaunchKernel calls and one cuStreamSynchronize. Then it
// exits. Nothing else is called after the first go byte, so the probes' counts for this pid are
// known exactly, and a test can hold it between phases.
//
// Usage: ithbat_probe_short_lived LAUNCHES [LAUNCHES...]   (one argument per phase, at most 8)
//   fd 3  (optional) the ready pipe: one byte before each phase
//   fd 0  the go pipe: each phase starts when the process reads one byte (EOF: exits 3)
// Exit: 0 done, 1 a CUDA call failed, 2 usage, 3 no go byte.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include "fake_cuda/cuda_abi.h"

namespace {

// One empty kernel (the fake accepts any PTX; a real driver would run this one).
const char kPtx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry ithbat_empty()\n{\n\tret;\n}\n";

#define CHECK(call)                                                             \
  do {                                                                          \
    const CUresult r_ = (call);                                                 \
    if (r_ != CUDA_SUCCESS) {                                                   \
      std::fprintf(stderr, "short_lived: %s failed: CUresult %d\n", #call, r_); \
      _exit(1);                                                                 \
    }                                                                           \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 9) {
    std::fprintf(stderr, "usage: %s LAUNCHES [LAUNCHES...] (at most 8 phases)\n", argv[0]);
    return 2;
  }
  long phases[8] = {};
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    phases[i - 1] = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || phases[i - 1] < 0 || phases[i - 1] > 1'000'000'000) {
      std::fprintf(stderr, "short_lived: LAUNCHES must be 0..1000000000\n");
      return 2;
    }
  }
  CHECK(cuInit(0));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod = nullptr;
  CUfunction f = nullptr;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&f, mod, "ithbat_empty"));
  CUstream s = nullptr;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  for (int phase = 0; phase < argc - 1; ++phase) {
    const char r = 'r';
    (void)!write(3, &r, 1);  // fd 3 absent (EBADF): nobody waits for readiness
    char go = 0;
    ssize_t n = 0;
    do {
      n = read(0, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) return 3;
    for (long i = 0; i < phases[phase]; ++i)
      CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr));
    CHECK(cuStreamSynchronize(s));
  }
  return 0;
}
