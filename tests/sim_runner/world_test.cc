// ithbat-sim end to end: a tiny healthy world with a real agent (world.json, the agent's API
// queried while the runner holds the agents after the world ended, nothing left behind), and a
// 2-node x 8-GPU launch under torchrun without agents (a scenario written here: no test knows a
// scenario file's name or parameters). Runs as root (FUSE mounts, eBPF in the agent). No timing in the
// verdicts: only what happened.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_runner/sim_run.h"
#include "testutil/testutil.h"

namespace ithbat::sim::runner {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kTiny = R"(
version: 1
name: runner-tiny-healthy
duration_s: 300
nodes:
  - name: tiny-n1
    gpus: {count: 2, model: H100-SXM}
    nics: [{name: mlx5_0, rate_gbps: 400, gpus: [0, 1], switch: leaf-1}]
fabric:
  switches: [{name: leaf-1, tier: leaf}]
storage:
  mounts:
    - {name: scratch, path: /local/scratch, kind: local_nvme, nodes: [tiny-n1], write_gbps: 4, fsync_ms: 1}
jobs:
  - id: tiny-job
    user: tester
    launcher: srun
    nodes: [tiny-n1]
    gpus_per_node: 2
    start_s: 3
    steps: 8
    log: {format: hf_trainer, every_steps: 2, ranks: rank0, buffered: false}
    work: {compute_ms: 600, seq_len: 512, sequences_per_step: 2, launches_per_step: 50, memory_gib: 2}
    collectives:
      - {op: all_reduce, bytes: 1000000, per_step: 1, overlap: false}
    data_loader: {workers: 1, cpu_ms_per_batch: 5}
    checkpoint: {every_steps: 4, size_gib: 0.01, mount: scratch, async: false}
    loss: {model: decay, initial: 3, final: 1}
    lr: {schedule: cosine, peak: 1e-4, warmup_steps: 2}
background:
  enabled: true
  host_jitter_processes: 4
)";

TEST(WorldTest, TinyHealthyWorldWithARealAgent) {
  ASSERT_EQ(geteuid(), 0u) << "the simulator needs root (FUSE mounts, the agent's eBPF)";
  testing::TempDir dir;
  dir.WriteFile("tiny.yaml", kTiny);
  const fs::path root = dir.path() / "run";
  // --hold-agents-s: when the world has ended, the agents stay up (phase "holding") with
  // world.json complete, and the test queries them like the lab's checker; SIGTERM ends it.
  const pid_t pid = Start({"run", (dir.path() / "tiny.yaml").string(), "--seed", "11", "--root",
                           root.string(), "--hold-agents-s", "600"},
                          dir.path() / "sim.log");
  ASSERT_GT(pid, 0);
  std::string agent_url;
  for (int i = 0; i < 3000 && agent_url.empty(); ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      FAIL() << "ithbat-sim ended early:\n" << ReadFile(dir.path() / "sim.log");
    }
    json w = ReadWorld(root);
    if (w.is_object() && w.value("phase", "") == "holding") agent_url = w["nodes"][0].value("agent_url", "");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(agent_url.empty()) << ReadFile(dir.path() / "sim.log");
  httplib::Client cli(agent_url);
  cli.set_read_timeout(10, 0);
  auto res = cli.Get("/api/v1/series?match=ithbat_gpu_memory_total_bytes");
  ASSERT_TRUE(res) << "no answer from " << agent_url;
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << res->body;
  const json gpu_series = body["data"];
  // The ranks' processes as the agent saw them (its NVML process list, with their identity).
  auto procs = cli.Get("/api/v1/series?match=ithbat_gpu_process_memory_used_bytes");
  ASSERT_TRUE(procs);
  json proc_body = json::parse(procs->body, nullptr, false);

  kill(pid, SIGTERM);
  const int code = Wait(pid, 600);
  const std::string log = ReadFile(dir.path() / "sim.log");
  ASSERT_EQ(code, 0) << log;

  const json w = ReadWorld(root);
  ASSERT_TRUE(w.is_object()) << log;
  EXPECT_EQ(w["format"], 1);
  EXPECT_EQ(w["scenario"], "runner-tiny-healthy");
  EXPECT_EQ(w["seed"], 11);
  EXPECT_EQ(w["phase"], "ended");
  EXPECT_EQ(w["stop_reason"], "jobs_ended") << log;
  ASSERT_EQ(w["nodes"].size(), 1u);
  const json& node = w["nodes"][0];
  EXPECT_EQ(node["agent_url"], agent_url);
  EXPECT_GT(node["agent_pid"].get<int64_t>(), 0);
  ASSERT_EQ(node["gpus"].size(), 2u);
  std::set<std::string> uuids;
  for (const auto& g : node["gpus"]) uuids.insert(g["uuid"].get<std::string>());

  // The GPU series are the node's GPUs, by UUID.
  std::set<std::string> seen;
  for (const auto& s : gpu_series) seen.insert(s["labels"].value("gpu_uuid", ""));
  EXPECT_EQ(seen, uuids) << gpu_series.dump();
  std::set<std::string> rank_pids, agent_pids;

  ASSERT_EQ(w["jobs"].size(), 1u);
  const json& job = w["jobs"][0];
  EXPECT_EQ(job["state"], "ended");
  EXPECT_EQ(job["exit_code"], 0) << log;
  EXPECT_GT(job["slurm_job_id"].get<uint64_t>(), 0u);
  ASSERT_EQ(job["ranks"].size(), 2u);
  for (const auto& r : job["ranks"]) {
    rank_pids.insert(std::to_string(r["pid"].get<int64_t>()));
    EXPECT_GT(r["pid"].get<int64_t>(), 0) << r.dump();
    EXPECT_EQ(r["exit_code"], 0) << r.dump();
    EXPECT_TRUE(uuids.count(r["gpu_uuid"].get<std::string>())) << r.dump();
  }
  for (const auto& s : proc_body["data"]) agent_pids.insert(s["labels"].value("pid", ""));
  EXPECT_EQ(agent_pids, rank_pids) << proc_body.dump();
  EXPECT_EQ(job["steps_done"], 8) << log;
  // every_steps 4 of 8 steps: saves at steps 4 and 8, each from every rank.
  ASSERT_EQ(job["saves"].size(), 2u) << log;
  EXPECT_EQ(job["saves"][0]["step"], 4);
  EXPECT_EQ(job["saves"][1]["step"], 8);
  ASSERT_EQ(w["mounts"].size(), 1u);
  EXPECT_TRUE(w["mounts"][0]["nodes"].contains("tiny-n1"));
  EXPECT_TRUE(fs::exists(root / "jobs" / "tiny-job" / "spec.json"));
  EXPECT_TRUE(fs::exists(root / "jobs" / "tiny-job" / "launcher-tiny-n1.out"));
  EXPECT_TRUE(fs::exists(root / "nodes" / "tiny-n1" / "agent" / "agent.log"));
  EXPECT_EQ(w["host_jitter_processes"], 4);
  ExpectNothingLeft(w, root);
}

constexpr const char* kTwoNodesSixteenRanks = R"(
version: 1
name: runner-two-by-eight
duration_s: 3000
time_compression: 10
nodes:
  - name: wide-a
    gpus: {count: 8, model: H100-SXM}
    nics: [{name: mlx5_0, rate_gbps: 400, gpus: [0, 1, 2, 3], switch: leaf-1},
           {name: mlx5_1, rate_gbps: 400, gpus: [4, 5, 6, 7], switch: leaf-1}]
  - name: wide-b
    gpus: {count: 8, model: H100-SXM}
    nics: [{name: mlx5_0, rate_gbps: 400, gpus: [0, 1, 2, 3], switch: leaf-1},
           {name: mlx5_1, rate_gbps: 400, gpus: [4, 5, 6, 7], switch: leaf-1}]
fabric:
  switches: [{name: leaf-1, tier: leaf}]
jobs:
  - id: wide-job
    user: tester
    launcher: torchrun
    nodes: [wide-a, wide-b]
    gpus_per_node: 8
    steps: 100000
    log: {format: torchtitan, every_steps: 10, buffered: false}
    work: {compute_ms: 2000, seq_len: 256, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}
    collectives:
      - {op: all_reduce, bytes: 1000000}
    data_loader: {workers: 1, cpu_ms_per_batch: 2}
    loss: {model: decay, initial: 3, final: 1}
    lr: {schedule: constant, peak: 1e-4, warmup_steps: 0}
background: {enabled: false}
)";

// Two nodes of eight GPUs under torchrun, without agents: every rank starts through its node's
// launcher with its pid reported, and everything stops at the end.
TEST(WorldTest, TwoNodesOfEightGpusLaunchEveryRank) {
  ASSERT_EQ(geteuid(), 0u) << "the simulator needs root (PID namespaces, FUSE)";
  testing::TempDir dir;
  dir.WriteFile("wide.yaml", kTwoNodesSixteenRanks);
  const fs::path root = dir.path() / "run";
  const pid_t pid = Start({"run", (dir.path() / "wide.yaml").string(), "--no-agents", "--duration-s", "20",
                           "--seed", "3", "--root", root.string()},
                          dir.path() / "sim.log");
  ASSERT_GT(pid, 0);
  const int code = Wait(pid, 600);
  const std::string log = ReadFile(dir.path() / "sim.log");
  ASSERT_EQ(code, 0) << log;
  const json w = ReadWorld(root);
  ASSERT_TRUE(w.is_object()) << log;
  EXPECT_EQ(w["stop_reason"], "duration") << log;
  ASSERT_EQ(w["nodes"].size(), 2u);
  EXPECT_EQ(w["nodes"][0]["agent_url"], "");
  ASSERT_EQ(w["jobs"].size(), 1u);
  const json& job = w["jobs"][0];
  EXPECT_EQ(job["launcher"], "torchrun");
  ASSERT_EQ(job["ranks"].size(), 16u);
  std::set<int64_t> pids;
  std::map<std::string, int> per_node;
  for (const auto& r : job["ranks"]) {
    EXPECT_GT(r["pid"].get<int64_t>(), 0) << r.dump() << "\n" << log;
    pids.insert(r["pid"].get<int64_t>());
    ++per_node[r["node"].get<std::string>()];
  }
  EXPECT_EQ(pids.size(), 16u);
  EXPECT_EQ(per_node, (std::map<std::string, int>{{"wide-a", 8}, {"wide-b", 8}}));
  EXPECT_TRUE(fs::exists(root / "jobs" / "wide-job" / "launcher-wide-a.out"));
  EXPECT_TRUE(fs::exists(root / "jobs" / "wide-job" / "launcher-wide-b.out"));
  ExpectNothingLeft(w, root);
}

// The story (sim/runner/story.h): a world ends at the later of its duration and its story. Four
// jobs on one node, a 2 s duration they cannot fit in: `resumed` resumes from `first`'s step-20
// checkpoint and must wait for it; `follower` wants `first`'s GPU and waits for it to end; `long`
// never ends by itself. The caller asks for `first` to reach step 30. No timing in the verdicts
// but the order of things and that the world neither stopped at its duration nor ran on.
constexpr const char* kStory = R"(
version: 1
name: runner-story
duration_s: 2
nodes:
  - name: story-n1
    gpus: {count: 4, model: H100-SXM}
storage:
  mounts:
    - {name: scratch, path: /local/scratch, kind: local_nvme, nodes: [story-n1], write_gbps: 4, fsync_ms: 1}
jobs:
  - id: first
    nodes: [story-n1]
    gpus_per_node: 1
    gpu_indices: [0]
    startup_s: 0.2
    steps: 30
    work: {compute_ms: 100, seq_len: 512, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}
    data_loader: {workers: 0, cpu_ms_per_batch: 1}
    checkpoint: {every_steps: 10, size_gib: 0.001, mount: scratch, async: false}
  - id: resumed
    nodes: [story-n1]
    gpus_per_node: 1
    gpu_indices: [1]
    start_s: 0.2
    startup_s: 0.2
    steps: 40
    work: {compute_ms: 100, seq_len: 512, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}
    data_loader: {workers: 0, cpu_ms_per_batch: 1}
    resume_from: {job: first, step: 20}
  - id: follower
    nodes: [story-n1]
    gpus_per_node: 1
    gpu_indices: [0]
    start_s: 0.5
    startup_s: 0.2
    steps: 5
    work: {compute_ms: 100, seq_len: 512, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}
    data_loader: {workers: 0, cpu_ms_per_batch: 1}
  - id: long
    nodes: [story-n1]
    gpus_per_node: 1
    gpu_indices: [3]
    startup_s: 0.2
    steps: 100000
    work: {compute_ms: 100, seq_len: 512, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}
    data_loader: {workers: 0, cpu_ms_per_batch: 1}
background: {enabled: false}
)";

int64_t StepEnd(const json& job, int64_t step) {
  for (const auto& s : job["steps"]) {
    if (s["step"].get<int64_t>() == step) return s["end_ns"].get<int64_t>();
  }
  return 0;
}

TEST(StoryTest, TheWorldWaitsForItsStoryAndJobsForWhatTheyNeed) {
  ASSERT_EQ(geteuid(), 0u) << "the simulator needs root (PID namespaces, FUSE)";
  testing::TempDir dir;
  dir.WriteFile("story.yaml", kStory);
  const fs::path root = dir.path() / "run";
  const pid_t pid = Start({"run", (dir.path() / "story.yaml").string(), "--no-agents", "--seed", "5", "--root",
                           root.string(), "--until", "job=first,step=30", "--story-cap-factor", "30"},
                          dir.path() / "sim.log");
  ASSERT_GT(pid, 0);
  const int code = Wait(pid, 300);
  const std::string log = ReadFile(dir.path() / "sim.log");
  ASSERT_EQ(code, 0) << log;
  const json w = ReadWorld(root);
  ASSERT_TRUE(w.is_object()) << log;
  EXPECT_EQ(w["stop_reason"], "story_told") << log;
  EXPECT_TRUE(w["story"]["untold"].empty()) << log;
  EXPECT_THAT(w["story"]["milestones"].dump(), ::testing::HasSubstr("job first reaches step 30"));
  ASSERT_EQ(w["jobs"].size(), 4u);
  const json& first = w["jobs"][0];
  const json& resumed = w["jobs"][1];
  const json& follower = w["jobs"][2];
  EXPECT_GE(first["steps_done"].get<int64_t>(), 30) << log;
  // resumed waited for first's step-20 checkpoint, follower for first's GPU.
  ASSERT_FALSE(resumed["held"].empty()) << log;
  EXPECT_THAT(resumed["held"][0]["reason"].get<std::string>(), ::testing::HasSubstr("checkpoint of job first at step 20"));
  EXPECT_GE(resumed["started_ns"].get<int64_t>(), StepEnd(first, 20)) << log;
  ASSERT_FALSE(follower["held"].empty()) << log;
  EXPECT_THAT(follower["held"][0]["reason"].get<std::string>(), ::testing::HasSubstr("held by job first"));
  EXPECT_GE(follower["started_ns"].get<int64_t>(), first["ended_ns"].get<int64_t>()) << log;
  EXPECT_GT(follower["steps_done"].get<int64_t>(), 0) << log;
  ExpectNothingLeft(w, root);
}

TEST(StoryTest, TheCapEndsAWorldWhoseStoryCannotBeToldAndSaysWhat) {
  ASSERT_EQ(geteuid(), 0u) << "the simulator needs root (PID namespaces, FUSE)";
  testing::TempDir dir;
  dir.WriteFile("story.yaml", kStory);
  const fs::path root = dir.path() / "run";
  const pid_t pid = Start({"run", (dir.path() / "story.yaml").string(), "--no-agents", "--seed", "5", "--root",
                           root.string(), "--until", "job=long,step=99999", "--story-cap-factor", "3"},
                          dir.path() / "sim.log");
  ASSERT_GT(pid, 0);
  const int code = Wait(pid, 300);
  const std::string log = ReadFile(dir.path() / "sim.log");
  ASSERT_EQ(code, 0) << log;
  const json w = ReadWorld(root);
  ASSERT_TRUE(w.is_object()) << log;
  EXPECT_EQ(w["stop_reason"], "story_cap") << log;
  EXPECT_EQ(w["story"]["cap_real_s"].get<double>(), 6.0);
  EXPECT_THAT(w["story"]["untold"].dump(), ::testing::HasSubstr("job long reaches step 99999")) << log;
  ExpectNothingLeft(w, root);
}

// A wrong milestone is a usage error, before anything starts.
TEST(StoryTest, AMalformedMilestoneIsAUsageError) {
  testing::TempDir dir;
  dir.WriteFile("story.yaml", kStory);
  for (const char* bad : {"job=first", "job=first,step=x", "event=e,job=first,step=3", "color=red,step=1"}) {
    const pid_t pid = Start({"run", (dir.path() / "story.yaml").string(), "--no-agents", "--until", bad},
                            dir.path() / "sim.log");
    EXPECT_EQ(Wait(pid, 60), 2) << bad << ": " << ReadFile(dir.path() / "sim.log");
  }
  const pid_t pid = Start({"run", (dir.path() / "story.yaml").string(), "--no-agents", "--until", "job=nobody,step=3",
                           "--root", (dir.path() / "run").string()},
                          dir.path() / "sim.log");
  EXPECT_EQ(Wait(pid, 60), 1) << ReadFile(dir.path() / "sim.log");  // a setup failure: no such job
}

}  // namespace
}  // namespace ithbat::sim::runner
