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
//   --pipeline-p2p K  before the collectives, K rounds of a pipeline's forward pass: per round,
//                 in one ncclGroupStart/End, ncclRecv from rank R-1 (R > 0) and ncclSend to rank
//                 R+1 (R < N-1), of --bytes. Ranks make different numbers of p2p calls (the first
//                 and last stage half as many as the middle ones), as in pipeline parallelism
//
// Training-like mode (--train-steps N; --collectives, --sync-every, --hang-at and --delay-ms are
// then ignored): N steps, each
//     [step start] K micro-batches of { sleep --compute-ms (forward), then per layer l < L:
//     sleep --layer-ms and one collective of B/(l+1) bytes (all-reduce; with --fsdp an all-gather
//     then a reduce-scatter), then cuMemcpyDtoH_v2 of --loss-bytes (4; loss.item(): with the
//     fake's ITHBAT_FAKE_CUDA_COPY_GBPS the copy blocks a known time) }, then with K > 1 a
//     4-byte all-reduce (grad-norm clip), then cuStreamSynchronize (optimizer step)
//   --train-steps N --layers L (4) --accum K (1) --compute-ms C (20) --layer-ms M (2) --fsdp
//   --steps-file F  writes "<step> <CLOCK_MONOTONIC ns at the step's start>" per step (the truth
//                   step inference is checked against), written at the end
//   (allreduce_bytes in the JSON is meaningful in the plain mode only)
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
  long train_steps = 0, layers = 4, accum = 1, compute_ms = 20, layer_ms = 2;
  long loss_bytes = 4;
  long pipeline_p2p = 0;
  bool fsdp = false;
  std::string id_file, steps_file;
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
    else if (a == "--train-steps")
      train_steps = ParseLong(value(), 1, 1'000'000, "--train-steps");
    else if (a == "--layers")
      layers = ParseLong(value(), 1, 1000, "--layers");
    else if (a == "--accum")
      accum = ParseLong(value(), 1, 1000, "--accum");
    else if (a == "--compute-ms")
      compute_ms = ParseLong(value(), 0, 60'000, "--compute-ms");
    else if (a == "--layer-ms")
      layer_ms = ParseLong(value(), 0, 60'000, "--layer-ms");
    else if (a == "--loss-bytes")
      loss_bytes = ParseLong(value(), 1, 1L << 30, "--loss-bytes");
    else if (a == "--pipeline-p2p")
      pipeline_p2p = ParseLong(value(), 0, 1'000'000, "--pipeline-p2p");
    else if (a == "--fsdp")
      fsdp = true;
    else if (a == "--steps-file")
      steps_file = value();
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
  long gathers = 0, scatters = 0, dtoh = 0;
  std::string step_lines;
  if (train_steps > 0 && loss_bytes > bytes) Usage("--loss-bytes larger than --bytes");
  std::string loss(static_cast<size_t>(loss_bytes), '\0');
  for (long step = 0; step < train_steps; ++step) {
    step_lines += std::to_string(step) + " " + std::to_string(MonoNs()) + "\n";
    for (long m = 0; m < accum; ++m) {
      SleepMs(compute_ms);
      for (long l = 0; l < layers; ++l) {
        SleepMs(layer_ms);
        void* p = reinterpret_cast<void*>(buf);
        const size_t n = elems / static_cast<size_t>(l + 1);
        if (fsdp) {
          NC(ncclAllGather(p, p, n / static_cast<size_t>(nranks), ncclFloat32, comm, stream));
          NC(ncclReduceScatter(p, p, n / static_cast<size_t>(nranks), ncclFloat32, ncclSum, comm, stream));
          ++gathers;
          ++scatters;
        } else {
          NC(ncclAllReduce(p, p, n, ncclFloat32, ncclSum, comm, stream));
          ++issued;
        }
      }
      const int64_t t0 = MonoNs();
      CU(cuMemcpyDtoH_v2(loss.data(), buf, loss.size()));
      blocked_ns += MonoNs() - t0;
      ++dtoh;
    }
    if (accum > 1) {
      void* p = reinterpret_cast<void*>(buf);
      NC(ncclAllReduce(p, p, 1, ncclFloat32, ncclSum, comm, stream));
      ++issued;
    }
    const int64_t t0 = MonoNs();
    CU(cuStreamSynchronize(stream));
    blocked_ns += MonoNs() - t0;
    ++syncs;
  }
  if (!steps_file.empty()) {
    const int fd = open(steps_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, step_lines.data(), step_lines.size()) != static_cast<ssize_t>(step_lines.size())) {
      std::fprintf(stderr, "ithbat-nccl-workload: cannot write %s\n", steps_file.c_str());
      return 1;
    }
    close(fd);
  }
  if (train_steps > 0) collectives = 0;
  long sends = 0, recvs = 0;
  for (long k = 0; k < pipeline_p2p; ++k) {
    void* p = reinterpret_cast<void*>(buf);
    NC(ncclGroupStart());
    if (rank > 0) {
      NC(ncclRecv(p, elems, ncclFloat32, static_cast<int>(rank - 1), comm, stream));
      ++recvs;
    }
    if (rank + 1 < nranks) {
      NC(ncclSend(p, elems, ncclFloat32, static_cast<int>(rank + 1), comm, stream));
      ++sends;
    }
    NC(ncclGroupEnd());
  }
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
      "\"ncclAllReduce\":%ld,\"cuStreamSynchronize\":%ld,\"ncclAllGather\":%ld,\"ncclReduceScatter\":%ld,"
      "\"cuMemcpyDtoH_v2\":%ld,\"ncclSend\":%ld,\"ncclRecv\":%ld},\"allreduce_bytes\":%llu,"
      "\"sync_blocked_ns\":%lld}"
      "\n",
      static_cast<int>(getpid()), comm_rank, comm_count, static_cast<int>(dev),
      static_cast<long long>(init_ns), issued, syncs, gathers, scatters, dtoh, sends, recvs,
      static_cast<unsigned long long>(issued) * elems * sizeof(float), static_cast<long long>(blocked_ns));
  return 0;
}
