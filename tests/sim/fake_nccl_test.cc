// The fake libnccl.so.2 over the fake libcuda: nccl/pnccl aliases, collectives that complete
// only when every rank of the communicator has arrived (in one process with two communicators,
// and across two rank processes of ithbat-nccl-workload), point-to-point pairing inside groups,
// and a hung rank holding the others. The network model: rank processes on two simulated nodes
// over a net state file — a degraded NIC slows the ring, bytes and wait counted per NIC, a link
// that is down holds the collective until it is back, ranks on one node stay on NVLink.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_cuda/cuda_abi.h"
#include "fake_nccl/nccl_abi.h"
#include "fake_state/fake_state_api.h"
#include "net/net_state.h"
#include "testutil/testutil.h"

extern char** environ;

namespace ithbat::sim {

bool EnsureFakeCudaForTests();  // fake_cuda_test.cc: one fake state and cuInit per process

namespace {

// The fake libcuda first (the fake libnccl finds it by its SONAME among loaded objects).
void* Cuda() {
  static void* handle = dlopen(ITHBAT_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  return handle;
}
void* Nccl() {
  static void* handle = (Cuda(), dlopen(ITHBAT_FAKE_NCCL_PATH, RTLD_NOW | RTLD_LOCAL));
  return handle;
}
template <class F>
F CudaSym(const char* name) {
  return reinterpret_cast<F>(dlsym(Cuda(), name));
}
template <class F>
F NcclSym(const char* name) {
  return reinterpret_cast<F>(dlsym(Nccl(), name));
}
#define CU(fn) CudaSym<fn##_fn>(#fn)
#define NC(fn) NcclSym<fn##_fn>(#fn)

template <class Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 20000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(FakeNcclExports, PublicNamesAliasThePNames) {
  ASSERT_NE(Nccl(), nullptr) << dlerror();
#define CHECK_ALIAS(ret, name, params)                            \
  {                                                               \
    void* pub = dlsym(Nccl(), "nccl" #name);                      \
    EXPECT_NE(pub, nullptr) << "nccl" #name;                      \
    EXPECT_EQ(pub, dlsym(Nccl(), "pnccl" #name)) << "nccl" #name; \
  }
  ITHBAT_NCCL_EXPORTS(CHECK_ALIAS)
#undef CHECK_ALIAS
  int version = 0;
  ASSERT_EQ(NC(ncclGetVersion)(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  EXPECT_STREQ(NC(ncclGetErrorString)(ncclInvalidUsage),
               "invalid usage (run with NCCL_DEBUG=WARN for details)");
}

// Two ranks in this process: one communicator each (ncclCommInitAll), each on its own fake GPU
// (of the state the cuda tests create) and stream.
class TwoRanksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Nccl(), nullptr) << dlerror();
    setenv("ITHBAT_FAKE_NCCL_SHM_DIR", dir_.path().c_str(), 1);
    ASSERT_TRUE(EnsureFakeCudaForTests());
    int count = 0;
    ASSERT_EQ(CU(cuDeviceGetCount)(&count), CUDA_SUCCESS);
    ASSERT_GE(count, 2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(CU(cuDevicePrimaryCtxRetain)(&ctx_[r], r), CUDA_SUCCESS);
      ASSERT_EQ(CU(cuCtxSetCurrent)(ctx_[r]), CUDA_SUCCESS);
      ASSERT_EQ(CU(cuStreamCreate)(&stream_[r], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    }
    const int devs[2] = {0, 1};
    ASSERT_EQ(NC(ncclCommInitAll)(comm_, 2, devs), ncclSuccess);
  }
  void TearDown() override {
    for (int r = 0; r < 2; ++r) {
      if (comm_[r] != nullptr) {
        EXPECT_EQ(NC(ncclCommDestroy)(comm_[r]), ncclSuccess);
      }
      CU(cuStreamDestroy_v2)(stream_[r]);
    }
    unsetenv("ITHBAT_FAKE_NCCL_SHM_DIR");
  }
  ncclResult_t AllReduce(int r, size_t count = 1024) {
    return NC(ncclAllReduce)(buf_, buf_, count, ncclFloat32, ncclSum, comm_[r], stream_[r]);
  }
  CUresult Query(int r) { return CU(cuStreamQuery)(stream_[r]); }

  testing::TempDir dir_;
  CUcontext ctx_[2] = {};
  CUstream stream_[2] = {};
  ncclComm_t comm_[2] = {};
  float storage_[1024] = {};
  void* buf_ = storage_;
};

TEST_F(TwoRanksTest, CommunicatorFacts) {
  int n = 0, rank = -1, dev = -1;
  ASSERT_EQ(NC(ncclCommCount)(comm_[1], &n), ncclSuccess);
  ASSERT_EQ(NC(ncclCommUserRank)(comm_[1], &rank), ncclSuccess);
  ASSERT_EQ(NC(ncclCommCuDevice)(comm_[1], &dev), ncclSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(dev, 1);
  ncclResult_t async = ncclInternalError;
  ASSERT_EQ(NC(ncclCommGetAsyncError)(comm_[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(AllReduce(0, 16), ncclSuccess);
  EXPECT_EQ(NC(ncclAllReduce)(buf_, buf_, 16, 99, ncclSum, comm_[0], stream_[0]), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(1, 16), ncclSuccess);
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_[0]), CUDA_SUCCESS);
}

TEST_F(TwoRanksTest, AllReduceCompletesOnlyWhenBothRanksArrive) {
  ASSERT_EQ(AllReduce(0), ncclSuccess);  // returns at once: the host does not block
  ASSERT_EQ(AllReduce(0), ncclSuccess);
  ASSERT_EQ(AllReduce(0), ncclSuccess);
  // Rank 1 has not called: none of rank 0's collectives can complete, however long we look.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Query(0), CUDA_ERROR_NOT_READY);
  std::atomic<bool> synced{false};
  std::thread waiter([&] {
    CU(cuCtxSetCurrent)(ctx_[0]);
    EXPECT_EQ(CU(cuStreamSynchronize)(stream_[0]), CUDA_SUCCESS);
    synced.store(true);
  });
  // Rank 1 reaches sequence numbers 0 and 1 only: rank 0's third collective still waits.
  ASSERT_EQ(AllReduce(1), ncclSuccess);
  ASSERT_EQ(AllReduce(1), ncclSuccess);
  ASSERT_EQ(CU(cuStreamSynchronize)(stream_[1]), CUDA_SUCCESS);
  EXPECT_FALSE(synced.load());
  EXPECT_EQ(Query(0), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(AllReduce(1), ncclSuccess);
  waiter.join();
  EXPECT_TRUE(synced.load());
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_[1]), CUDA_SUCCESS);
}

TEST_F(TwoRanksTest, SendRecvPairInsideAGroup) {
  // Each rank sends to and receives from the other in one group: issued as one fused item, so
  // the exchange completes (two separate FIFO items would deadlock).
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(NC(ncclGroupStart)(), ncclSuccess);
    ASSERT_EQ(NC(ncclSend)(buf_, 256, ncclFloat32, 1 - r, comm_[r], stream_[r]), ncclSuccess);
    ASSERT_EQ(NC(ncclRecv)(buf_, 256, ncclFloat32, 1 - r, comm_[r], stream_[r]), ncclSuccess);
    if (r == 0) {
      EXPECT_EQ(Query(0), CUDA_SUCCESS);  // nothing issued before the outermost GroupEnd
    }
    ASSERT_EQ(NC(ncclGroupEnd)(), ncclSuccess);
  }
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_[0]), CUDA_SUCCESS);
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_[1]), CUDA_SUCCESS);
  // A receive whose send never comes stays pending; the matching send releases it.
  ASSERT_EQ(NC(ncclRecv)(buf_, 256, ncclFloat32, 1, comm_[0], stream_[0]), ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(Query(0), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(NC(ncclSend)(buf_, 256, ncclFloat32, 0, comm_[1], stream_[1]), ncclSuccess);
  EXPECT_EQ(CU(cuStreamSynchronize)(stream_[0]), CUDA_SUCCESS);
  EXPECT_EQ(NC(ncclGroupEnd)(), ncclInvalidUsage);
}

TEST_F(TwoRanksTest, AbortReleasesWaitingWork) {
  ASSERT_EQ(AllReduce(0), ncclSuccess);
  EXPECT_EQ(Query(0), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(NC(ncclCommAbort)(comm_[0]), ncclSuccess);  // returns once its work has drained
  comm_[0] = nullptr;
  EXPECT_EQ(Query(0), CUDA_SUCCESS);
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(NC(ncclCommGetAsyncError)(comm_[1], &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
}

// ---------------------------------------------------------------------------------------------
// Rank processes.

struct Rank {
  pid_t pid = -1;
  int out = -1;  // stdout
  int err = -1;  // stderr
};

Rank Spawn(const std::vector<std::string>& args, const std::string& shm_dir) {
  Rank r;
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  std::vector<std::string> env_strings = {"ITHBAT_FAKE_CUDA_DEVICES=2", "ITHBAT_FAKE_NCCL_SHM_DIR=" + shm_dir,
                                          "PATH=/usr/bin:/bin"};
  std::vector<char*> argv, envp;
  std::string prog = ITHBAT_NCCL_WORKLOAD;
  argv.push_back(prog.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (posix_spawn(&r.pid, prog.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) r.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  r.out = out[0];
  r.err = err[0];
  return r;
}

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

int Wait(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(FakeNcclProcesses, TwoRankAllReduce) {
  testing::TempDir dir;
  const std::string id = (dir.path() / "id").string();
  Rank r0 =
      Spawn({"--rank", "0", "--nranks", "2", "--id-file", id, "--collectives", "40", "--bytes", "65536"},
            dir.path().string());
  Rank r1 = Spawn({"--rank", "1", "--nranks", "2", "--id-file", id, "--collectives", "40", "--bytes", "65536",
                   "--delay-ms", "1"},
                  dir.path().string());
  ASSERT_GT(r0.pid, 0);
  ASSERT_GT(r1.pid, 0);
  const std::string out0 = ReadAll(r0.out), out1 = ReadAll(r1.out);
  const std::string err0 = ReadAll(r0.err), err1 = ReadAll(r1.err);
  ASSERT_EQ(Wait(r0.pid), 0) << err0;
  ASSERT_EQ(Wait(r1.pid), 0) << err1;
  for (const std::string* out : {&out0, &out1}) {
    const auto j = nlohmann::json::parse(*out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << *out;
    EXPECT_EQ(j["nranks"], 2);
    EXPECT_EQ(j["calls"]["ncclAllReduce"], 40);
    EXPECT_EQ(j["calls"]["cuStreamSynchronize"], 11);  // every 4th, plus the final one
    EXPECT_EQ(j["allreduce_bytes"], 40 * 65536);
  }
  EXPECT_EQ(nlohmann::json::parse(out0)["device"], 0);
  EXPECT_EQ(nlohmann::json::parse(out1)["device"], 1);
  // The last rank out removed the communicator's file.
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    left += e.path().filename().string().rfind("ithbat-nccl-", 0) == 0;
  }
  EXPECT_EQ(left, 0);
}

TEST(FakeNcclProcesses, HungRankHoldsTheOther) {
  testing::TempDir dir;
  const std::string id = (dir.path() / "id").string();
  Rank r0 =
      Spawn({"--rank", "0", "--nranks", "2", "--id-file", id, "--collectives", "10", "--sync-every", "1"},
            dir.path().string());
  Rank r1 = Spawn({"--rank", "1", "--nranks", "2", "--id-file", id, "--collectives", "10", "--hang-at", "3"},
                  dir.path().string());
  ASSERT_GT(r0.pid, 0);
  ASSERT_GT(r1.pid, 0);
  // Wait for rank 1 to stop calling before collective 3.
  std::string err1;
  char c;
  while (err1.find("hang at 3") == std::string::npos && read(r1.err, &c, 1) == 1) err1 += c;
  ASSERT_NE(err1.find("hang at 3"), std::string::npos);
  // Rank 0's collective 3 can never complete, so rank 0 is still blocked in its sync.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int status = 0;
  EXPECT_EQ(waitpid(r0.pid, &status, WNOHANG), 0);
  kill(r0.pid, SIGKILL);
  kill(r1.pid, SIGKILL);
  Wait(r0.pid);
  Wait(r1.pid);
  EXPECT_EQ(ReadAll(r0.out), "");  // it never got to print its counts
  close(r0.err);
  close(r1.out);
  close(r1.err);
}

// ---------------------------------------------------------------------------------------------
// The network model: rank processes on different simulated nodes (this test binary re-executed
// as a rank: NetRankMain runs before gtest's main when ITHBAT_TEST_NCCL_NET_RANK is set).
//
// A rank: 2 ranks, one fake GPU each; one tiny all-reduce (both ranks meet there, so the
// collectives after it run back to back on both), then ITHBAT_TEST_NCCL_NET_COLLECTIVES
// all-reduces of ITHBAT_TEST_NCCL_NET_FLOATS floats, an event before the first and after each;
// prints "issued" on stderr once they are all on the stream, then syncs and prints
// {"ms": [event k-1 -> k, simulated], "sync_return_ns": ...} on stdout.
int NetRankMain() {
  auto env = [](const char* n) -> std::string {
    const char* v = std::getenv(n);
    return v != nullptr ? v : "";
  };
  const int rank = std::atoi(env("ITHBAT_TEST_NCCL_NET_RANK").c_str());
  const std::string id_file = env("ITHBAT_TEST_NCCL_NET_ID");
  const size_t floats = std::strtoull(env("ITHBAT_TEST_NCCL_NET_FLOATS").c_str(), nullptr, 10);
  const int collectives = std::atoi(env("ITHBAT_TEST_NCCL_NET_COLLECTIVES").c_str());
#define NET_CHECK(cond)                                        \
  if (!(cond)) {                                               \
    std::fprintf(stderr, "rank %d: %s failed\n", rank, #cond); \
    return 1;                                                  \
  }
  NET_CHECK(Nccl() != nullptr);
  NET_CHECK(CU(cuInit)(0) == CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  NET_CHECK(CU(cuDevicePrimaryCtxRetain)(&ctx, 0) == CUDA_SUCCESS);
  NET_CHECK(CU(cuCtxSetCurrent)(ctx) == CUDA_SUCCESS);
  NET_CHECK(CU(cuStreamCreate)(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  ncclUniqueId id{};
  if (rank == 0) {
    NET_CHECK(NC(ncclGetUniqueId)(&id) == ncclSuccess);
    std::ofstream(id_file + ".tmp", std::ios::binary).write(id.internal, sizeof(id.internal));
    NET_CHECK(std::rename((id_file + ".tmp").c_str(), id_file.c_str()) == 0);
  } else {
    NET_CHECK(Eventually([&] {
      std::ifstream in(id_file, std::ios::binary);
      return in.read(id.internal, sizeof(id.internal)).gcount() == sizeof(id.internal);
    }));
  }
  ncclComm_t comm = nullptr;
  NET_CHECK(NC(ncclCommInitRank)(&comm, 2, id, rank) == ncclSuccess);
  static float buffer[1];  // the fake moves no data: any non-null pointer will do
  NET_CHECK(NC(ncclAllReduce)(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  std::vector<CUevent> events(static_cast<size_t>(collectives) + 1);
  for (CUevent& e : events) NET_CHECK(CU(cuEventCreate)(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  NET_CHECK(CU(cuEventRecord)(events[0], stream) == CUDA_SUCCESS);
  for (int k = 1; k <= collectives; ++k) {
    NET_CHECK(NC(ncclAllReduce)(buffer, buffer, floats, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    NET_CHECK(CU(cuEventRecord)(events[static_cast<size_t>(k)], stream) == CUDA_SUCCESS);
  }
  std::fprintf(stderr, "issued\n");
  NET_CHECK(CU(cuStreamSynchronize)(stream) == CUDA_SUCCESS);
  const int64_t sync_return_ns = RealtimeNs();
  nlohmann::json out;
  out["ms"] = nlohmann::json::array();
  for (int k = 1; k <= collectives; ++k) {
    float ms = -1;
    NET_CHECK(CU(cuEventElapsedTime)(&ms, events[static_cast<size_t>(k) - 1],
                                     events[static_cast<size_t>(k)]) == CUDA_SUCCESS);
    out["ms"].push_back(ms);
  }
  out["sync_return_ns"] = sync_return_ns;
  NET_CHECK(NC(ncclCommDestroy)(comm) == ncclSuccess);
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return 0;
#undef NET_CHECK
}

[[maybe_unused]] const bool kNetRankChild = [] {
  if (std::getenv("ITHBAT_TEST_NCCL_NET_RANK") != nullptr) _exit(NetRankMain());
  return false;
}();

// A world of NICs at 1.6 Gbit/s (200 MB/s: a 4 MiB all-reduce of 2 ranks takes ~21 ms).
constexpr uint64_t kRateBps = 1'600'000'000;
constexpr uint32_t kNics = 6;

class NetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net::NicSlot nics[kNics] = {};
    for (uint32_t i = 0; i < kNics; ++i) {
      std::snprintf(nics[i].node, sizeof(nics[i].node), "node%u", i % 2);
      std::snprintf(nics[i].name, sizeof(nics[i].name), "mlx5_%u", i / 2);
      nics[i].node_id = i % 2;
      nics[i].port = 1;
      nics[i].rate_bps = kRateBps;
    }
    const char* why = "";
    ASSERT_TRUE(net_.Create(net_path().c_str(), nics, kNics, &why)) << why;
  }
  std::string net_path() const { return (dir_.path() / "net.state").string(); }
  net::NicSlot& nic(uint32_t i) { return *net_.nic(i); }

  // Starts the two ranks of one job: rank r on node r, NIC slot nic0 + r.
  std::vector<Rank> StartJob(const std::string& job, uint32_t nic0, size_t floats, int collectives) {
    std::vector<Rank> ranks;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> env = {"ITHBAT_TEST_NCCL_NET_RANK=" + std::to_string(r),
                                      "ITHBAT_TEST_NCCL_NET_ID=" + (dir_.path() / (job + ".id")).string(),
                                      "ITHBAT_TEST_NCCL_NET_FLOATS=" + std::to_string(floats),
                                      "ITHBAT_TEST_NCCL_NET_COLLECTIVES=" + std::to_string(collectives),
                                      "ITHBAT_FAKE_CUDA_DEVICES=1",
                                      "ITHBAT_FAKE_NCCL_SHM_DIR=" + dir_.path().string(),
                                      "ITHBAT_SIM_NET=" + net_path(),
                                      "ITHBAT_SIM_NIC=" + std::to_string(nic0 + static_cast<uint32_t>(r)),
                                      "ITHBAT_SIM_NODE_ID=" + std::to_string(r),
                                      "PATH=/usr/bin:/bin"};
      ranks.push_back(SpawnSelf(env));
    }
    return ranks;
  }

  static Rank SpawnSelf(const std::vector<std::string>& env_strings) {
    Rank r;
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) return r;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addclose(&fa, err[0]);
    std::string prog = std::filesystem::read_symlink("/proc/self/exe").string();
    std::vector<char*> argv = {prog.data(), nullptr};
    std::vector<std::string> copy = env_strings;
    std::vector<char*> envp;
    for (auto& e : copy) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&r.pid, prog.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) r.pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(err[1]);
    r.out = out[0];
    r.err = err[0];
    return r;
  }

  // Waits for both ranks; returns each one's JSON (null when it failed).
  static std::vector<nlohmann::json> Finish(std::vector<Rank>& ranks) {
    std::vector<nlohmann::json> results;
    for (Rank& r : ranks) {
      const std::string out = ReadAll(r.out);
      const std::string err = ReadAll(r.err);
      const int code = Wait(r.pid);
      EXPECT_EQ(code, 0) << err;
      results.push_back(nlohmann::json::parse(out, nullptr, false));
      EXPECT_TRUE(results.back().is_object()) << out << err;
    }
    return results;
  }

  // The shortest collective a rank saw (the first may include waiting for the peer's launch).
  static double MinMs(const nlohmann::json& j) {
    double best = 1e300;
    if (!j.is_object()) return best;
    for (const auto& v : j["ms"]) best = std::min(best, v.get<double>());
    return best;
  }

  testing::TempDir dir_;
  net::NetStateMapping net_;
};

TEST_F(NetTest, DegradedNicSlowsTheCollectiveAndCountsBytes) {
  constexpr size_t kFloats = 1 << 20;  // 4 MiB: all-reduce bus bytes of 2 ranks = 4 MiB
  constexpr int kCollectives = 4;
  constexpr double kBusBytes = 4.0 * kFloats * 2 * (2 - 1) / 2;
  // Job A on healthy NICs 0/1; job B on NICs 2/3, NIC 3 at a quarter of its line rate.
  std::vector<Rank> a = StartJob("a", 0, kFloats, kCollectives);
  std::vector<nlohmann::json> ra = Finish(a);
  net::Store(&nic(3).health_ppm, net::kFullPpm / 4);
  std::vector<Rank> b = StartJob("b", 2, kFloats, kCollectives);
  std::vector<nlohmann::json> rb = Finish(b);
  ASSERT_EQ(ra.size(), 2u);
  ASSERT_EQ(rb.size(), 2u);

  // Healthy: latency + bus bytes / line rate; simulated times, so they hold on any machine.
  const double healthy_ms = std::min(MinMs(ra[0]), MinMs(ra[1]));
  EXPECT_NEAR(healthy_ms, (10'000 + kBusBytes / (kRateBps / 8.0) * 1e9) / 1e6, 0.05);
  // Degraded: the ring runs at its slowest NIC, on both ranks alike.
  for (const auto& j : rb) {
    const double ratio = MinMs(j) / healthy_ms;
    EXPECT_GT(ratio, 3.8) << j.dump();
    EXPECT_LT(ratio, 4.2) << j.dump();
  }
  // Every rank counted its ring bytes on its own NIC: the warm-up (4 B) plus the collectives.
  const uint64_t expected = 4 + static_cast<uint64_t>(kCollectives * kBusBytes);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(net::Load(&nic(i).tx_bytes), expected) << "nic " << i;
    EXPECT_EQ(net::Load(&nic(i).rx_bytes), expected) << "nic " << i;
  }
  // No wait on healthy links; on job B's both NICs the time beyond the healthy transfer.
  EXPECT_EQ(net::Load(&nic(0).tx_wait_ns), 0u);
  EXPECT_EQ(net::Load(&nic(1).tx_wait_ns), 0u);
  const double extra_ns = kCollectives * 3.0 * kBusBytes / (kRateBps / 8.0) * 1e9;
  for (uint32_t i : {2u, 3u}) {
    EXPECT_NEAR(static_cast<double>(net::Load(&nic(i).tx_wait_ns)), extra_ns, extra_ns * 0.01) << "nic " << i;
  }
  EXPECT_EQ(net::Load(&nic(4).tx_bytes), 0u);  // nobody else's
}

TEST_F(NetTest, CollectiveWaitsWhileALinkIsDown) {
  net::Store(&nic(5).health_ppm, 0);  // link down before the job starts
  std::vector<Rank> ranks = StartJob("down", 4, 1024, 1);
  // Both ranks put their work on the stream and sync...
  for (Rank& r : ranks) {
    std::string err;
    char c;
    while (err.find("issued") == std::string::npos && read(r.err, &c, 1) == 1) err += c;
    ASSERT_NE(err.find("issued"), std::string::npos) << err;
  }
  // ... and nothing completes while the link is down: both hang, as peers of a dead link do
  // (the warm-up all-reduce already crosses it).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (Rank& r : ranks) {
    int status = 0;
    EXPECT_EQ(waitpid(r.pid, &status, WNOHANG), 0);
  }
  EXPECT_EQ(net::Load(&nic(4).tx_bytes), 0u);
  EXPECT_EQ(net::Load(&nic(5).tx_bytes), 0u);
  const int64_t up_ns = RealtimeNs();
  net::Store(&nic(5).health_ppm, net::kFullPpm);
  std::vector<nlohmann::json> results = Finish(ranks);
  ASSERT_EQ(results.size(), 2u);
  for (const auto& j : results) {
    ASSERT_TRUE(j.is_object());
    EXPECT_GE(j["sync_return_ns"].get<int64_t>(), up_ns);
  }
  const uint64_t expected = 4 + 4 * 1024;
  EXPECT_EQ(net::Load(&nic(4).tx_bytes), expected);
  EXPECT_EQ(net::Load(&nic(5).rx_bytes), expected);
}

// Ranks on one node with the variables set: the NVLink model, no NIC traffic.
TEST_F(NetTest, OneNodeStaysOnNvlink) {
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(
        SpawnSelf({"ITHBAT_TEST_NCCL_NET_RANK=" + std::to_string(r),
                   "ITHBAT_TEST_NCCL_NET_ID=" + (dir_.path() / "one.id").string(),
                   "ITHBAT_TEST_NCCL_NET_FLOATS=1048576", "ITHBAT_TEST_NCCL_NET_COLLECTIVES=2",
                   "ITHBAT_FAKE_CUDA_DEVICES=1", "ITHBAT_FAKE_NCCL_SHM_DIR=" + dir_.path().string(),
                   "ITHBAT_SIM_NET=" + net_path(), "ITHBAT_SIM_NIC=" + std::to_string(r),
                   "ITHBAT_SIM_NODE_ID=0", "PATH=/usr/bin:/bin"}));
  }
  std::vector<nlohmann::json> results = Finish(ranks);
  ASSERT_EQ(results.size(), 2u);
  // 4 MiB over the default 200 GB/s NVLink: ~0.03 ms, far below the ~21 ms the NICs would take.
  EXPECT_LT(std::min(MinMs(results[0]), MinMs(results[1])), 1.0);
  for (uint32_t i = 0; i < kNics; ++i) EXPECT_EQ(net::Load(&nic(i).tx_bytes), 0u);
}

}  // namespace
}  // namespace ithbat::sim
