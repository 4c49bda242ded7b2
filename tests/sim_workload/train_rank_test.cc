// ithbat-sim-train end to end: two ranks on one fake node (a fake-state file, the fake libcuda and
// libnccl), launched with torchrun-style environment variables. Bounded waits only; no timing
// thresholds decide a result.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_state/fake_state_api.h"
#include "testutil/testutil.h"
#include "workload/train_spec.h"

namespace ithbat::sim::workload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

class TrainRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = dir_.path() / "jobs" / "j1";
    fs::create_directories(run_);
    auto st = FakeState::Create((dir_.path() / "gpu.state").string(), {GpuModel::kH100Sxm, GpuModel::kH100Sxm}, "wl");
    ASSERT_TRUE(st) << st.error().ToString();
    state_ = std::move(*st);
  }
  void TearDown() override {
    for (pid_t p : pids_) {
      kill(p, SIGKILL);
      int s = 0;
      waitpid(p, &s, 0);
    }
  }

  TrainSpec BaseSpec() {
    TrainSpec s;
    s.job_id = "j1";
    s.recipe_fingerprint = "5eed5eed";
    s.seed = 11;
    s.world_size = 2;
    s.dp = 2;
    s.steps = 6;
    s.log = {scenario::LogFormat::kHfTrainer, 2, scenario::LogRanks::kRank0, false, 0};
    s.work.compute_ms = 20;
    s.work.seq_len.dist = scenario::Dist::kUniform;
    s.work.seq_len.min = 500;
    s.work.seq_len.max = 1500;
    s.work.sequences_per_step = 4;
    s.work.launches_per_step = 100;
    s.work.memory_bytes = 1 << 30;
    s.collectives = {{scenario::CollectiveOp::kAllReduce, 1 << 24, 1, true, scenario::CommGroup::kWorld}};
    s.data_loader = {2, 2};
    s.lr.warmup_steps = 2;
    return s;
  }

  // Starts rank r with the launcher's environment; its stdout and stderr go to rank<r>.out.
  pid_t Start(const TrainSpec& spec, int r) {
    const fs::path spec_path = run_ / "spec.json";
    if (r == 0) {
      std::ofstream(spec_path) << TrainSpecToJson(spec);
    }
    const std::string out = (run_ / ("rank" + std::to_string(r) + ".out")).string();
    std::vector<std::string> env = {
        "RANK=" + std::to_string(r),
        "LOCAL_RANK=" + std::to_string(r),
        "WORLD_SIZE=" + std::to_string(spec.world_size),
        "CUDA_VISIBLE_DEVICES=" + std::to_string(r),
        "ITHBAT_FAKE_STATE=" + (dir_.path() / "gpu.state").string(),
        "ITHBAT_FAKE_NCCL_SHM_DIR=" + dir_.path().string(),
        "ITHBAT_SIM_RUN_DIR=" + run_.string(),
        "ITHBAT_SIM_NCCL_ID_TIMEOUT_S=60",
        std::string("LD_LIBRARY_PATH=") + ITHBAT_SIM_LIB_DIR,
        "PATH=/usr/bin:/bin",
    };
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      const std::string sp = spec_path.string();
      execle(ITHBAT_SIM_TRAIN, ITHBAT_SIM_TRAIN, "--spec", sp.c_str(), static_cast<char*>(nullptr), envp.data());
      _exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }

  // Waits (bounded) for a rank to exit; returns its exit status, or -1 on timeout / a signal.
  int Wait(pid_t pid, int timeout_s = 120) {
    for (int i = 0; i < timeout_s * 20; ++i) {
      int s = 0;
      if (waitpid(pid, &s, WNOHANG) == pid) {
        std::erase(pids_, pid);
        return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  std::vector<json> Truth(int r) { return JsonLines(ReadAll(run_ / ("rank" + std::to_string(r) + ".truth.jsonl"))); }

  testing::TempDir dir_;
  fs::path run_;
  std::unique_ptr<FakeState> state_;
  std::vector<pid_t> pids_;
};

TEST_F(TrainRankTest, TwoRanksTrainSaveAndExitWithTheSpecsCode) {
  TrainSpec spec = BaseSpec();
  spec.exit_code = 3;
  spec.checkpoint = TrainCheckpointSpec{3, 3 << 20, (dir_.path() / "ckpt" / "j1").string(), false};
  const pid_t a = Start(spec, 0);
  const pid_t b = Start(spec, 1);
  EXPECT_EQ(Wait(a), 3) << ReadAll(run_ / "rank0.out");
  EXPECT_EQ(Wait(b), 3) << ReadAll(run_ / "rank1.out");

  for (int r = 0; r < 2; ++r) {
    std::vector<int64_t> steps, saves;
    int64_t prev_end = 0;
    for (const auto& j : Truth(r)) {
      if (j.contains("step")) {
        steps.push_back(j["step"].get<int64_t>());
        EXPECT_LE(j["start_ns"].get<int64_t>(), j["end_ns"].get<int64_t>());
        EXPECT_GE(j["start_ns"].get<int64_t>(), prev_end);
        prev_end = j["end_ns"].get<int64_t>();
        EXPECT_GE(j["tokens"].get<int64_t>(), 4 * 500);
        EXPECT_LE(j["tokens"].get<int64_t>(), 4 * 1500);
        EXPECT_TRUE(j["loss"].is_number());
      } else if (j.contains("save_step")) {
        saves.push_back(j["save_step"].get<int64_t>());
        EXPECT_EQ(j["bytes"].get<uint64_t>(), 3u << 20);
      }
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6})) << "rank " << r;
    EXPECT_EQ(saves, (std::vector<int64_t>{3, 6})) << "rank " << r;
    for (int s : {3, 6}) {
      const fs::path shard = dir_.path() / "ckpt" / "j1" / ("checkpoint-" + std::to_string(s)) / ("rank" + std::to_string(r) + ".pt");
      ASSERT_TRUE(fs::exists(shard)) << shard;
      EXPECT_EQ(fs::file_size(shard), 3u << 20);
      EXPECT_FALSE(fs::exists(shard.parent_path() / ("rank" + std::to_string(r) + ".tmp")));
    }
    std::istringstream progress(ReadAll(run_ / ("rank" + std::to_string(r) + ".progress")));
    int64_t pstep = -1, pseq = -1;
    progress >> pstep >> pseq;
    EXPECT_EQ(pstep, 6);
    EXPECT_EQ(pseq, 6 + 2);  // one all-reduce per step and a barrier per synchronous save
  }
  EXPECT_EQ(ReadAll(run_ / "rank1.out").find("'loss'"), std::string::npos);  // rank 0 logs alone

  // The agent's own parsers read the job's output: steps, losses, saves.
  const std::string cmd = testing::IthbatBinary().string() + " parse " + (run_ / "rank0.out").string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) text.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  std::vector<int64_t> steps, loss_steps, saves;
  for (const auto& e : JsonLines(text)) {
    EXPECT_EQ(e["framework"], "hf_trainer");
    const std::string kind = e["kind"];
    if (kind == "step") steps.push_back(e["step"]);
    if (kind == "loss" && e.contains("step")) loss_steps.push_back(e["step"]);
    if (kind == "checkpoint_begin") saves.push_back(e["step"]);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6})) << text;
  EXPECT_FALSE(loss_steps.empty()) << text;
  for (int64_t s : loss_steps) EXPECT_EQ(s % 2, 0);
  EXPECT_EQ(saves, (std::vector<int64_t>{3, 6})) << text;
}

TEST_F(TrainRankTest, InjectedHangStopsThePeerAtThatCollective) {
  TrainSpec spec = BaseSpec();
  spec.steps = 1000;
  std::ofstream(run_ / "rank1.inject") << "hang 3\n";
  Start(spec, 0);
  Start(spec, 1);
  // Rank 1 completes steps 1-3 (collectives 0-2) and stops before collective 3.
  bool hung = false;
  for (int i = 0; i < 1200 && !hung; ++i) {
    for (const auto& j : Truth(1))
      if (j.contains("hang_collective")) hung = j["hang_collective"] == 3;
    if (!hung) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(hung) << ReadAll(run_ / "rank1.out");
  // Rank 0 completes step 3 (collective 2 had both ranks); whatever time it is then given, its
  // step 4 (which needs collective 3) never completes.
  auto last_step = [&](int r) {
    int64_t last = 0;
    for (const auto& j : Truth(r))
      if (j.contains("step")) last = j["step"];
    return last;
  };
  for (int i = 0; i < 1200 && last_step(0) < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t last0 = last_step(0);
  int64_t last1 = 0;
  for (const auto& j : Truth(1))
    if (j.contains("step")) last1 = j["step"];
  EXPECT_EQ(last1, 3);
  EXPECT_EQ(last0, 3);
  std::istringstream progress(ReadAll(run_ / "rank1.progress"));
  int64_t pstep = -1, pseq = -1;
  progress >> pstep >> pseq;
  EXPECT_EQ(pseq, 3);
}

TEST_F(TrainRankTest, NanOnOneRankReachesEveryRanksLoss) {
  TrainSpec spec = BaseSpec();
  spec.steps = 8;
  spec.log.every_steps = 1;
  std::ofstream(run_ / "rank1.inject") << "nan\n";
  const pid_t a = Start(spec, 0);
  const pid_t b = Start(spec, 1);
  EXPECT_EQ(Wait(a), 0) << ReadAll(run_ / "rank0.out");
  EXPECT_EQ(Wait(b), 0) << ReadAll(run_ / "rank1.out");
  for (int r = 0; r < 2; ++r) {
    const auto truth = Truth(r);
    ASSERT_FALSE(truth.empty());
    int64_t steps = 0;
    for (const auto& j : truth) steps += j.contains("step") ? 1 : 0;
    EXPECT_EQ(steps, 8);
    EXPECT_TRUE(truth.back()["loss"].is_null()) << "rank " << r;  // NaN from then on
  }
  EXPECT_NE(ReadAll(run_ / "rank0.out").find("'loss': nan"), std::string::npos);
}

TEST_F(TrainRankTest, InjectedCrashExitsWithATraceback) {
  TrainSpec spec = BaseSpec();
  spec.steps = 1000;
  std::ofstream(run_ / "rank0.inject") << "crash\n";
  const pid_t a = Start(spec, 0);
  Start(spec, 1);  // left waiting for its peer; TearDown kills it
  EXPECT_EQ(Wait(a), 1);
  const std::string out = ReadAll(run_ / "rank0.out");
  EXPECT_NE(out.find("Traceback (most recent call last):"), std::string::npos) << out;
  EXPECT_NE(out.find("RuntimeError: CUDA error"), std::string::npos) << out;
}

TEST_F(TrainRankTest, WatchdogTakesThePeerOfAHungRankDown) {
  TrainSpec spec = BaseSpec();
  spec.steps = 1000;
  spec.nccl_timeout_ms = 1500;
  spec.hang = TrainHangSpec{1, 4};  // known in advance, as a rank_hang event is
  const pid_t a = Start(spec, 0);
  Start(spec, 1);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 2400 && !exited; ++i) {
    if (waitpid(a, &status, WNOHANG) == a) {
      exited = true;
      std::erase(pids_, a);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_TRUE(exited) << ReadAll(run_ / "rank0.out");
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  const std::string cmd = testing::IthbatBinary().string() + " parse " + (run_ / "rank0.out").string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) text.append(buf, n);
  pclose(p);
  bool timeout = false;
  for (const auto& e : JsonLines(text)) {
    if (e["kind"] == "error" && e["name"] == "nccl_timeout") {
      timeout = true;
      EXPECT_EQ(e["attrs"]["seq"], "5");  // the 5th work of the default group, 1-based like PyTorch
    }
  }
  EXPECT_TRUE(timeout) << ReadAll(run_ / "rank0.out") << text;
}

}  // namespace
}  // namespace ithbat::sim::workload
