// ithbat-nccl-workload: one rank of an NCCL job. Rank 0 makes the unique id and publishes it
// in --id-file (written whole, then renamed into place); the others wait for the file. Each rank
// joins with ncclCommInitRank, then issues K all-reduces of B bytes on one stream without
// blocking, synchronising the stream every --sync-every collectives (PyTorch-like: the host
// runs ahead, a slow or missing peer shows up as time blocked in cuStreamSynchronize). It
// prints its own counts as one JSON object on stdout at the end.
//
// Usage: ithbat-nccl-workload --rank R --nranks N --id-file F [--collectives K] [--bytes B]
//          [--sync-every S] [--hang-at K] [--device D] [--delay-ms M]
//   --hang-at K   before collective K (0-based) print "hang at K" on stderr and stop calling
//                 (sleep until killed): the other ranks' collective K never completes
//   --delay-ms M  sleep M ms before every collective (a straggler)
//   --device D    CUDA device (default: R modulo the device count)
// Exit: 0 done, 1 a CUDA/NCCL call failed or the id never appeared, 2 usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda/cuda_abi.h"
#include "fake_nccl/nccl_abi.h"

namespace {

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "ithbat-nccl-workload: %s\n(see the comment at the top of sim/tools/nccl_workload.cc)\n", why);
  std::exit(2);
}

long ParseLong(const char* v, long lo, long hi, const char* opt) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) Usage(opt);
  return x;
}

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepMs(long ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#define CU(call)                                                                         \
  do {                                                                                   \
    const CUresult r_ = (call);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                            \
      std::fprintf(stderr, "ithbat-nccl-workload: %s failed: CUresult %d\n", #call, r_); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)
#define NC(call)                                                                                    \
  do {                                                                                              \
    const ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) {                                                                        \
      std::fprintf(stderr, "ithbat-nccl-workload: %s failed: %s\n", #call, ncclGetErrorString(r_)); \
      return 1;                                                                                     \
    }                                                                                               \
  } while (0)

bool WriteId(const std::string& path, const ncclUniqueId& id) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = write(fd, id.internal, sizeof(id.internal)) == static_cast<ssize_t>(sizeof(id.internal));
  close(fd);
  return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

bool ReadId(const std::string& path, ncclUniqueId* id, int timeout_s) {
  for (int i = 0; i < timeout_s * 100; ++i) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      const ssize_t n = read(fd, id->internal, sizeof(id->internal));
      close(fd);
      if (n == static_cast<ssize_t>(sizeof(id->internal))) return true;
    }
    SleepMs(10);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  long rank = -1, nranks = -1, collectives = 100, bytes = 1 << 20, sync_every = 4, hang_at = -1, device = -1;
  long delay_ms = 0;
  std::string id_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--rank")
      rank = ParseLong(value(), 0, ithbat::sim::nccl::kMaxRanks - 1, "--rank");
    else if (a == "--nranks")
      nranks = ParseLong(value(), 1, ithbat::sim::nccl::kMaxRanks, "--nranks");
    else if (a == "--id-file")
      id_file = value();
    else if (a == "--collectives")
      collectives = ParseLong(value(), 0, 1'000'000'000, "--collectives");
    else if (a == "--bytes")
      bytes = ParseLong(value(), 4, 1L << 40, "--bytes");
    else if (a == "--sync-every")
      sync_every = ParseLong(value(), 0, 1'000'000'000, "--sync-every");
    else if (a == "--hang-at")
      hang_at = ParseLong(value(), 0, 1'000'000'000, "--hang-at");
    else if (a == "--device")
      device = ParseLong(value(), 0, 63, "--device");
    else if (a == "--delay-ms")
      delay_ms = ParseLong(value(), 0, 3'600'000, "--delay-ms");
    else
      Usage(("unknown option " + a).c_str());
  }
  if (rank < 0 || nranks < 1 || id_file.empty() || rank >= nranks)
    Usage("--rank, --nranks and --id-file are required");

  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  if (count == 0) {
    std::fprintf(stderr, "ithbat-nccl-workload: no CUDA device\n");
    return 1;
  }
  CUdevice dev = 0;
  CU(cuDeviceGet(&dev, static_cast<int>(device >= 0 ? device : rank % count)));
  CUcontext ctx = nullptr;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream = nullptr;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  ncclUniqueId id{};
  if (rank == 0) {
    NC(ncclGetUniqueId(&id));
    if (!WriteId(id_file, id)) {
      std::fprintf(stderr, "ithbat-nccl-workload: cannot write %s\n", id_file.c_str());
      return 1;
    }
  } else if (!ReadId(id_file, &id, 60)) {
    std::fprintf(stderr, "ithbat-nccl-workload: no id in %s after 60 s\n", id_file.c_str());
    return 1;
  }
  ncclComm_t comm = nullptr;
  const int64_t init0 = MonoNs();
  NC(ncclCommInitRank(&comm, static_cast<int>(nranks), id, static_cast<int>(rank)));
  const int64_t init_ns = MonoNs() - init0;
  int comm_rank = -1, comm_count = -1;
  NC(ncclCommUserRank(comm, &comm_rank));
  NC(ncclCommCount(comm, &comm_count));

  CUdeviceptr buf = 0;
  CU(cuMemAlloc_v2(&buf, static_cast<size_t>(bytes)));
  const size_t elems = static_cast<size_t>(bytes) / sizeof(float);
  long issued = 0, syncs = 0;
  int64_t blocked_ns = 0;
  for (long k = 0; k < collectives; ++k) {
    if (k == hang_at) {
      std::fprintf(stderr, "hang at %ld\n", k);
      std::fflush(stderr);
      for (;;) pause();
    }
    if (delay_ms > 0) SleepMs(delay_ms);
    void* p = reinterpret_cast<void*>(buf);
    NC(ncclAllReduce(p, p, elems, ncclFloat32, ncclSum, comm, stream));
    ++issued;
    if (sync_every > 0 && (k + 1) % sync_every == 0) {
      const int64_t t0 = MonoNs();
      CU(cuStreamSynchronize(stream));
      blocked_ns += MonoNs() - t0;
      ++syncs;
    }
  }
  const int64_t t0 = MonoNs();
  CU(cuStreamSynchronize(stream));
  blocked_ns += MonoNs() - t0;
  ++syncs;
  NC(ncclCommDestroy(comm));
  CU(cuMemFree_v2(buf));
  CU(cuStreamDestroy_v2(stream));
  // Bytes per §4.3: an all-reduce moves count × sizeof(float) per rank.
  std::printf(
      "{\"pid\":%d,\"rank\":%d,\"nranks\":%d,\"device\":%d,\"init_ns\":%lld,\"calls\":{\"ncclCommInitRank\":"
      "1,"
      "\"ncclAllReduce\":%ld,\"cuStreamSynchronize\":%ld},\"allreduce_bytes\":%llu,\"sync_blocked_ns\":%lld}"
      "\n",
      static_cast<int>(getpid()), comm_rank, comm_count, static_cast<int>(dev),
      static_cast<long long>(init_ns), issued, syncs,
      static_cast<unsigned long long>(issued) * elems * sizeof(float), static_cast<long long>(blocked_ns));
  return 0;
}
