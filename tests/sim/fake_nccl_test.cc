// The fake libnccl.so.2 over the fake libcuda: nccl/pnccl aliases, collectives that complete
// only when every rank of the communicator has arrived (in one process with two communicators,
// and across two rank processes of ithbat-nccl-workload), point-to-point pairing inside groups,
// and a hung rank holding the others.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

}  // namespace
}  // namespace ithbat::sim
