// The runner's pure parts: scale, NIC slots, rank placement, the TrainSpec in real units, each
// launcher style's environment, the timeline's order, launch descriptions and pid reports,
// world.json and the merge of the ranks' truth files.
#include "runner/plan.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "runner/process.h"
#include "runner/world_record.h"
#include "scenario/scenario.h"
#include "testutil/testutil.h"

namespace ithbat::sim::runner {
namespace {

using ::testing::Contains;
using ::testing::Pair;

constexpr const char* kTwoNodes = R"(
version: 1
name: plan-test
time_compression: 10
duration_s: 600
nodes:
  - name: n1
    gpus: {count: 4, model: H100-SXM}
    nics:
      - {name: mlx5_0, rate_gbps: 400, gpus: [0, 1], switch: leaf-1}
      - {name: mlx5_1, rate_gbps: 200, gpus: [2, 3], switch: leaf-1}
  - name: n2
    gpus: {count: 4, model: H100-SXM}
    nics:
      - {name: mlx5_0, rate_gbps: 400, gpus: [0, 1, 2, 3], switch: leaf-2}
fabric:
  switches: [{name: leaf-1, tier: leaf}, {name: leaf-2, tier: leaf}]
storage:
  mounts:
    - {name: home, path: /shared/home, kind: shared_nfs, nodes: [n1, n2], write_gbps: 2, fsync_ms: 5}
jobs:
  - id: train-a
    user: rana
    launcher: LAUNCHER
    nodes: [n1, n2]
    gpus_per_node: 2
    gpu_indices: [2, 3]
    steps: 100
    log: {format: megatron, every_steps: 5}
    work: {compute_ms: 500, seq_len: 1024, sequences_per_step: 4, tensor_share: 0.5, memory_gib: 10}
    collectives:
      - {op: all_reduce, bytes: 1000000, per_step: 1, overlap: false}
    data_loader: {workers: 2, cpu_ms_per_batch: 30}
    checkpoint: {every_steps: 50, size_gib: 4, mount: home, async: false}
    loss: {model: decay, initial: 3, final: 1}
    lr: {schedule: cosine, peak: 1e-4, warmup_steps: 10}
    exit_code: 3
timeline:
  - {id: late, kind: xid, node: n1, gpu: 2, xid: 31, at_s: 300}
  - {id: early, kind: thermal_throttle, node: n2, gpu: 0, at_s: 100, duration_s: 50}
  - {id: stuck, kind: rank_hang, job: train-a, rank: 3, collective: 7, at_step: 40}
  - {id: same-time, kind: xid, node: n1, gpu: 3, xid: 13, at_s: 100}
background:
  enabled: true
  host_jitter_burst_ms: 200
  host_jitter_bursts_per_min: 4
)";

struct Loaded {
  scenario::Scenario unresolved;
  Resolved resolved;
};

Loaded Load(const std::string& launcher) {
  std::string text = kTwoNodes;
  text.replace(text.find("LAUNCHER"), 8, launcher);
  auto parsed = scenario::ParseScenario(text);
  EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().message);
  auto resolved = scenario::Resolve(*parsed, 7);
  EXPECT_TRUE(resolved.has_value()) << (resolved ? "" : resolved.error().message);
  return {*parsed, *resolved};
}

std::map<std::string, std::string> AsMap(const Env& env) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : env) m[k] = v;
  return m;
}

TEST(PlanTest, ByteScaleKeepsOneRankSaveUnder4MiB) {
  Loaded w = Load("srun");
  // 4 GiB over 4 ranks = 1 GiB per rank: 256 brings it to 4 MiB exactly.
  EXPECT_EQ(ChooseByteScale(w.resolved), 256.0);
  w.resolved.jobs[0].checkpoint->size_gib = 0.001;
  EXPECT_EQ(ChooseByteScale(w.resolved), 1.0);
  w.resolved.jobs[0].checkpoint.reset();
  EXPECT_EQ(ChooseByteScale(w.resolved), 1.0);
}

TEST(PlanTest, NicSlotsInNodeOrderAndGpuAffinity) {
  Loaded w = Load("srun");
  auto nics = PlanNics(w.resolved);
  ASSERT_EQ(nics.size(), 3u);
  EXPECT_EQ(nics[0].node, "n1");
  EXPECT_EQ(nics[1].name, "mlx5_1");
  EXPECT_EQ(nics[2].node, "n2");
  EXPECT_EQ(nics[2].slot, 2u);
  EXPECT_EQ(NodeNicSlots(nics, 1), std::vector<uint32_t>{2});
  EXPECT_EQ(NicSlotForGpu(nics, 0, 1), 0);
  EXPECT_EQ(NicSlotForGpu(nics, 0, 3), 1);
  EXPECT_EQ(NicSlotForGpu(nics, 1, 3), 2);
}

TEST(PlanTest, RanksNumberedNodeByNodeOnTheListedGpus) {
  Loaded w = Load("srun");
  auto nics = PlanNics(w.resolved);
  auto places = PlaceRanks(w.resolved, 0, nics);
  ASSERT_TRUE(places.has_value());
  ASSERT_EQ(places->size(), 4u);
  EXPECT_EQ((*places)[0].node, "n1");
  EXPECT_EQ((*places)[0].gpu, 2);
  EXPECT_EQ((*places)[0].nic_slot, 1);
  EXPECT_EQ((*places)[1].gpu, 3);
  EXPECT_EQ((*places)[2].rank, 2);
  EXPECT_EQ((*places)[2].local_rank, 0);
  EXPECT_EQ((*places)[2].node, "n2");
  EXPECT_EQ((*places)[2].node_index, 1u);
  EXPECT_EQ((*places)[2].job_node, 1u);
  EXPECT_EQ((*places)[2].nic_slot, 2);
  EXPECT_FALSE(PlaceRanks(w.resolved, 5, nics).has_value());
}

TEST(PlanTest, TrainSpecInRealUnits) {
  Loaded w = Load("srun");
  SpecContext ctx;
  ctx.time_compression = 10;
  ctx.byte_scale = 32;
  ctx.world_seed = 7;
  ctx.checkpoint_dir = "/run/nodes/n1/fs/shared/home/train-a";
  ctx.world_training_ranks = 4;
  auto spec = BuildTrainSpec(w.resolved, w.unresolved, 0, ctx);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->job_id, "train-a");
  EXPECT_EQ(spec->user, "rana");
  EXPECT_EQ(spec->world_size, 4);
  EXPECT_EQ(spec->dp, 4);
  EXPECT_EQ(spec->steps, 100);
  EXPECT_EQ(spec->start_step, 0);
  EXPECT_DOUBLE_EQ(spec->work.compute_ms, 50.0);
  EXPECT_DOUBLE_EQ(spec->data_loader.cpu_ms_per_batch, 3.0);
  EXPECT_EQ(spec->work.memory_bytes, 10ull << 30);  // device memory is not scaled
  ASSERT_EQ(spec->collectives.size(), 1u);
  EXPECT_EQ(spec->collectives[0].bytes, 1000000u);  // network bytes are not scaled
  ASSERT_TRUE(spec->checkpoint.has_value());
  EXPECT_EQ(spec->checkpoint->bytes_per_rank, (4ull << 30) / 4 / 32);
  EXPECT_EQ(spec->checkpoint->dir, ctx.checkpoint_dir);
  EXPECT_EQ(spec->exit_code, 3);
  EXPECT_EQ(spec->log.format, scenario::LogFormat::kMegatron);
  ASSERT_TRUE(spec->hang.has_value());
  EXPECT_EQ(spec->hang->rank, 3);
  EXPECT_EQ(spec->hang->collective, 7);
  EXPECT_DOUBLE_EQ(spec->host_jitter.burst_ms, 20.0);
  // 4 bursts per scenario minute, 10 scenario minutes per real one, split over 4 ranks.
  EXPECT_DOUBLE_EQ(spec->host_jitter.bursts_per_min, 10.0);
  EXPECT_EQ(spec->recipe_fingerprint, fmt::format("{:016x}", scenario::RecipeFingerprint(w.unresolved, 0)));
  EXPECT_NE(spec->seed, BuildTrainSpec(w.resolved, w.unresolved, 0, SpecContext{10, 32, 8, "", 4})->seed);
  // What the rank program will read back.
  auto back = workload::ParseTrainSpec(workload::TrainSpecToJson(*spec));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_TRUE(*back == *spec);
}

TEST(PlanTest, ZeroLearningRateLearnsNothing) {
  Loaded w = Load("srun");
  SpecContext ctx{10, 32, 7, "", 4};
  auto spec = BuildTrainSpec(w.resolved, w.unresolved, 0, ctx);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->loss.model, scenario::LossModel::kDecay);  // as written, with a cosine schedule
  w.resolved.jobs[0].lr.schedule = scenario::LrSchedule::kZero;
  spec = BuildTrainSpec(w.resolved, w.unresolved, 0, ctx);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->loss.model, scenario::LossModel::kFlat);
  EXPECT_EQ(spec->lr.schedule, scenario::LrSchedule::kZero);
  w.resolved.jobs[0].loss.model = scenario::LossModel::kNan;  // bad data is not learning
  spec = BuildTrainSpec(w.resolved, w.unresolved, 0, ctx);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->loss.model, scenario::LossModel::kNan);
}

TEST(PlanTest, NoCheckpointDirMeansNoCheckpoint) {
  Loaded w = Load("srun");
  auto spec = BuildTrainSpec(w.resolved, w.unresolved, 0, SpecContext{1, 1, 1, "", 0});
  ASSERT_TRUE(spec.has_value());
  EXPECT_FALSE(spec->checkpoint.has_value());
}

LaunchContext Context() {
  LaunchContext c;
  c.lib_dir = "/b/sim/lib";
  c.state_path = "/run/nodes/n2/gpu.state";
  c.net_path = "/run/net.state";
  c.shm_dir = "/dev/shm/x";
  c.spec_path = "/run/jobs/train-a/spec-n2.json";
  c.job_dir = "/run/jobs/train-a";
  c.slurm_job_id = 1234567;
  c.master_addr = "n1";
  return c;
}

TEST(PlanTest, SrunEnvironment) {
  Loaded w = Load("srun");
  auto places = *PlaceRanks(w.resolved, 0, PlanNics(w.resolved));
  auto launcher = AsMap(LauncherEnv(w.resolved, 0, 1, Context()));
  auto rank = AsMap(RankEnv(w.resolved, 0, places[3], Context()));
  EXPECT_EQ(launcher["SLURM_JOB_ID"], "1234567");
  EXPECT_EQ(launcher["SLURM_NTASKS"], "4");
  EXPECT_EQ(launcher["SLURM_NODEID"], "1");
  EXPECT_EQ(launcher["SLURM_JOB_NODELIST"], "n1,n2");
  EXPECT_EQ(launcher["SLURM_JOB_USER"], "rana");
  EXPECT_EQ(rank["SLURM_PROCID"], "3");
  EXPECT_EQ(rank["SLURM_LOCALID"], "1");
  EXPECT_EQ(rank["RANK"], "3");
  EXPECT_EQ(rank["LOCAL_RANK"], "1");
  EXPECT_EQ(rank["WORLD_SIZE"], "4");
  EXPECT_EQ(rank["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(rank["ITHBAT_SIM_NODE_ID"], "1");
  EXPECT_EQ(rank["ITHBAT_SIM_NIC"], "2");
  EXPECT_EQ(rank["ITHBAT_FAKE_STATE"], "/run/nodes/n2/gpu.state");
  EXPECT_EQ(rank["LD_LIBRARY_PATH"], "/b/sim/lib");
  EXPECT_EQ(rank["ITHBAT_SIM_SPEC"], "/run/jobs/train-a/spec-n2.json");
  EXPECT_EQ(rank.count("TORCHELASTIC_RUN_ID"), 0u);
  EXPECT_EQ(LauncherProcessName(scenario::Launcher::kSrun), "slurmstepd");
}

TEST(PlanTest, TorchrunUnderSrunEnvironment) {
  Loaded w = Load("torchrun");
  auto places = *PlaceRanks(w.resolved, 0, PlanNics(w.resolved));
  auto launcher = AsMap(LauncherEnv(w.resolved, 0, 1, Context()));
  auto rank = AsMap(RankEnv(w.resolved, 0, places[2], Context()));
  // srun started one torchrun per node: its task is the node.
  EXPECT_EQ(launcher["SLURM_PROCID"], "1");
  EXPECT_EQ(launcher["SLURM_NTASKS"], "2");
  EXPECT_EQ(launcher["SLURM_JOB_ID"], "1234567");
  EXPECT_EQ(rank["RANK"], "2");
  EXPECT_EQ(rank["LOCAL_RANK"], "0");
  EXPECT_EQ(rank["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(rank["GROUP_RANK"], "1");
  EXPECT_EQ(rank["TORCHELASTIC_RUN_ID"], "train-a");
  EXPECT_EQ(rank.count("SLURM_PROCID"), 0u);  // inherited from torchrun, not set per rank
  EXPECT_EQ(LauncherProcessName(scenario::Launcher::kTorchrun), "torchrun");
}

TEST(PlanTest, KubernetesEnvironment) {
  Loaded w = Load("k8s");
  auto places = *PlaceRanks(w.resolved, 0, PlanNics(w.resolved));
  auto launcher = AsMap(LauncherEnv(w.resolved, 0, 1, Context()));
  auto rank = AsMap(RankEnv(w.resolved, 0, places[3], Context()));
  EXPECT_EQ(launcher["HOSTNAME"], "train-a-worker-1");
  EXPECT_EQ(launcher["MASTER_ADDR"], "train-a-master-0");
  EXPECT_EQ(launcher.count("SLURM_JOB_ID"), 0u);
  EXPECT_EQ(rank["RANK"], "3");
  EXPECT_EQ(rank["WORLD_SIZE"], "4");
  EXPECT_EQ(rank["LOCAL_RANK"], "1");
  EXPECT_EQ(rank.count("SLURM_PROCID"), 0u);
}

// Time compression reaches the fakes' intra-node figures: NVLink bandwidth and host<->device
// copies c times faster, the collective latency c times shorter; without compression the fakes'
// own defaults.
TEST(PlanTest, PlumbingScalesTheFakesIntraNodeFiguresWithTimeCompression) {
  Loaded w = Load("srun");
  auto places = *PlaceRanks(w.resolved, 0, PlanNics(w.resolved));
  LaunchContext c = Context();
  auto plain = AsMap(RankEnv(w.resolved, 0, places[0], c));
  EXPECT_DOUBLE_EQ(std::stod(plain["ITHBAT_FAKE_NCCL_GBPS"]), kFakeNcclNvlinkGbps);
  EXPECT_DOUBLE_EQ(std::stod(plain["ITHBAT_FAKE_NCCL_LATENCY_NS"]), kFakeNcclLatencyNs);
  EXPECT_DOUBLE_EQ(std::stod(plain["ITHBAT_FAKE_CUDA_COPY_GBPS"]), kFakeCudaCopyGbps);
  c.time_compression = 8;
  c.world_root = "/run";
  for (const auto& env : {AsMap(RankEnv(w.resolved, 0, places[0], c)), AsMap(LauncherEnv(w.resolved, 0, 0, c))}) {
    auto e = env;
    EXPECT_DOUBLE_EQ(std::stod(e["ITHBAT_FAKE_NCCL_GBPS"]), kFakeNcclNvlinkGbps * 8);
    EXPECT_DOUBLE_EQ(std::stod(e["ITHBAT_FAKE_NCCL_LATENCY_NS"]), kFakeNcclLatencyNs / 8);
    EXPECT_DOUBLE_EQ(std::stod(e["ITHBAT_FAKE_CUDA_COPY_GBPS"]), kFakeCudaCopyGbps * 8);
    EXPECT_DOUBLE_EQ(std::stod(e["ITHBAT_FAKE_CUDA_D2D_GBPS"]), kFakeCudaD2dGbps * 8);
    EXPECT_EQ(e["ITHBAT_SIM_WORLD"], "/run");
  }
}

TEST(PlanTest, TimedEventsInTimeOrderTiesInFileOrder) {
  Loaded w = Load("srun");
  auto order = TimedEventOrder(w.resolved);
  ASSERT_EQ(order.size(), 3u);  // the at_step event waits for its job
  EXPECT_EQ(w.resolved.timeline[order[0]].id, "early");
  EXPECT_EQ(w.resolved.timeline[order[1]].id, "same-time");
  EXPECT_EQ(w.resolved.timeline[order[2]].id, "late");
  Event real = RealEvent(w.resolved.timeline[1], 10);
  EXPECT_DOUBLE_EQ(real.at_s, 10);
  EXPECT_DOUBLE_EQ(real.duration_s, 5);
  EXPECT_TRUE(IsGpuFault(scenario::EventKind::kXid));
  EXPECT_FALSE(IsGpuFault(scenario::EventKind::kThermalThrottle));
  EXPECT_EQ(EffectInjectLine(scenario::FaultEffect::kNan), "nan");
  EXPECT_EQ(EffectInjectLine(scenario::FaultEffect::kNone), "");
}

TEST(ProcessTest, LaunchDescriptionRoundTripAndPidReport) {
  LaunchDescription d;
  d.style = "k8s";
  d.job = "j";
  d.node = "n";
  d.process_name = "containerd-shim";
  d.program = {"/bin/true", "--spec", "x"};
  d.output = "/o";
  d.pids = "/p";
  d.ranks.push_back({0, 0, {{"RANK", "0"}, {"A", "b=c"}}});
  auto back = ParseLaunchDescription(LaunchDescriptionToJson(d));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->program, d.program);
  ASSERT_EQ(back->ranks.size(), 1u);
  EXPECT_THAT(back->ranks[0].env, Contains(Pair("A", "b=c")));
  EXPECT_FALSE(ParseLaunchDescription("{").has_value());
  EXPECT_FALSE(ParseLaunchDescription(R"({"style":1})").has_value());

  PidReport r = ParsePidReport("start 0 123\nstart 1 124\ngarbage\nexit 1 3\nexit 0\n");
  ASSERT_EQ(r.started.size(), 2u);
  EXPECT_EQ(r.started[1], (std::pair<int64_t, int64_t>(1, 124)));
  ASSERT_EQ(r.exited.size(), 1u);
  EXPECT_EQ(r.exited[0], (std::pair<int64_t, int64_t>(1, 3)));
}

TEST(ProcessTest, MergedEnvironmentDropsTheHostsLauncherVariables) {
  setenv("SLURM_JOB_ID", "999", 1);
  setenv("RANK", "7", 1);
  setenv("ITHBAT_RUNNER_TEST_KEEP", "1", 1);
  auto env = MergedEnvironment({{"RANK", "0"}, {"X", "y"}}, {"SLURM_*", "RANK"});
  auto has = [&](const std::string& entry) { return std::find(env.begin(), env.end(), entry) != env.end(); };
  EXPECT_TRUE(has("RANK=0"));
  EXPECT_FALSE(has("RANK=7"));
  EXPECT_FALSE(has("SLURM_JOB_ID=999"));
  EXPECT_TRUE(has("X=y"));
  EXPECT_TRUE(has("ITHBAT_RUNNER_TEST_KEEP=1"));
  unsetenv("SLURM_JOB_ID");
  unsetenv("RANK");
  unsetenv("ITHBAT_RUNNER_TEST_KEEP");
}

// Workloads get only an allow-list of the runner's environment: a CI secret stays behind.
TEST(ProcessTest, WorkloadEnvironmentKeepsOnlyTheAllowList) {
  setenv("CI_JOB_TOKEN", "secret", 1);
  setenv("LC_TIME", "C", 1);
  auto env = MergedEnvironment({{"RANK", "0"}}, {}, WorkloadAllowList());
  auto has_key = [&](const std::string& key) {
    return std::any_of(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(key + "=", 0) == 0; });
  };
  EXPECT_FALSE(has_key("CI_JOB_TOKEN"));
  EXPECT_TRUE(has_key("LC_TIME"));
  EXPECT_EQ(has_key("PATH"), getenv("PATH") != nullptr);
  EXPECT_TRUE(has_key("RANK"));
  for (const auto& e : env) {
    const std::string key = e.substr(0, e.find('='));
    const bool allowed = key == "RANK" || key == "PATH" || key == "HOME" || key == "LANG" || key == "TZ" ||
                         key == "TMPDIR" || key.rfind("LC_", 0) == 0;
    EXPECT_TRUE(allowed) << e;
  }
  unsetenv("CI_JOB_TOKEN");
  unsetenv("LC_TIME");
}

// A listening socket is told apart by its owner: ours, not another process's.
TEST(ProcessTest, ListenerOwnedByTellsTheOwnerOfAPort) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_TRUE(ListenerOwnedBy(getpid(), port));
  EXPECT_FALSE(ListenerOwnedBy(getppid(), port));
  ::close(fd);
  EXPECT_FALSE(ListenerOwnedBy(getpid(), port));
}

TEST(WorldRecordTest, JsonSchema) {
  WorldRecord w;
  w.scenario = "s";
  w.seed = 42;
  w.time_compression = 10;
  w.byte_scale = 32;
  NodeRecord n;
  n.name = "n1";
  n.agent_url = "http://127.0.0.1:1";
  n.gpus.push_back({0, "GPU-x"});
  n.nics.push_back({"mlx5_0", 1, 0, {0, 1}});
  w.nodes.push_back(n);
  JobRecord j;
  j.id = "j";
  j.launcher = "srun";
  j.ranks.push_back({0, 0, "n1", 0, "GPU-x", 99, 0});
  j.saves.push_back({10, 1, 2, 3});
  w.jobs.push_back(j);
  EventRecord e;
  e.kind = "xid";
  w.events.push_back(e);
  w.mounts.push_back({"home", "shared_nfs", {{"n1", "/r/nodes/n1/fs/home"}}});
  auto json = nlohmann::json::parse(WorldToJson(w));
  EXPECT_EQ(json["format"], 1);
  EXPECT_EQ(json["seed"], 42);
  EXPECT_EQ(json["byte_scale"], 32.0);
  EXPECT_EQ(json["nodes"][0]["gpus"][0]["uuid"], "GPU-x");
  EXPECT_EQ(json["nodes"][0]["nics"][0]["gpus"].size(), 2u);
  EXPECT_EQ(json["jobs"][0]["ranks"][0]["pid"], 99);
  EXPECT_TRUE(json["jobs"][0]["exit_code"].is_null());
  EXPECT_EQ(json["jobs"][0]["saves"][0]["step"], 10);
  EXPECT_EQ(json["events"][0]["kind"], "xid");
  EXPECT_EQ(json["mounts"][0]["nodes"]["n1"], "/r/nodes/n1/fs/home");
  for (const char* key :
       {"scenario", "quick", "time_compression", "root", "started_ns", "ended_ns", "phase", "stop_reason"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }

  testing::TempDir dir;
  ASSERT_TRUE(WriteWorldJson(dir.path() / "world.json", w).has_value());
  std::ifstream in(dir.path() / "world.json");
  EXPECT_EQ(nlohmann::json::parse(in)["scenario"], "s");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "world.json.tmp"));
}

TEST(WorldRecordTest, MergeTruthAcrossRanks) {
  testing::TempDir dir;
  dir.WriteFile("rank0.truth.jsonl",
                "{\"step\":1,\"start_ns\":100,\"end_ns\":200,\"tokens\":10,\"loss\":2}\n"
                "{\"step\":2,\"start_ns\":200,\"end_ns\":300,\"tokens\":50,\"loss\":2}\n"
                "{\"save_step\":2,\"start_ns\":300,\"end_ns\":400,\"bytes\":5}\n"
                "not json\n"
                "{\"step\":3,\"start_ns\":300}\n");
  dir.WriteFile("rank1.truth.jsonl",
                "{\"step\":1,\"start_ns\":90,\"end_ns\":210,\"tokens\":20,\"loss\":2}\n"
                "{\"step\":2,\"start_ns\":205,\"end_ns\":290,\"tokens\":30,\"loss\":2}\n"
                "{\"save_step\":2,\"start_ns\":310,\"end_ns\":450,\"bytes\":7}\n");
  JobRecord job;
  job.ranks.push_back({0, 0, "n", 0, "", 0, std::nullopt});
  job.ranks.push_back({1, 1, "n", 1, "", 0, std::nullopt});
  job.ranks.push_back({2, 2, "n", 2, "", 0, std::nullopt});  // never wrote a file
  MergeTruth(dir.path(), job);
  ASSERT_EQ(job.steps.size(), 2u);
  EXPECT_EQ(job.steps[0].start_ns, 90);
  EXPECT_EQ(job.steps[0].end_ns, 210);
  EXPECT_EQ(job.steps[0].slowest_rank, 1);
  EXPECT_EQ(job.steps[1].slowest_rank, 0);
  EXPECT_EQ(job.steps[1].ranks, 2);
  ASSERT_EQ(job.saves.size(), 1u);
  EXPECT_EQ(job.saves[0].start_ns, 300);
  EXPECT_EQ(job.saves[0].end_ns, 450);
  EXPECT_EQ(job.saves[0].bytes, 12u);
  EXPECT_EQ(job.steps_done, 0);  // rank 2 finished no step
  job.ranks.pop_back();
  MergeTruth(dir.path(), job);
  EXPECT_EQ(job.steps_done, 2);
}

// A line over the bound (1 MiB) is skipped whole; the lines after it still count.
TEST(WorldRecordTest, MergeTruthSkipsOverlongLines) {
  testing::TempDir dir;
  std::string text = "{\"step\":1,\"start_ns\":100,\"end_ns\":200,\"tokens\":10,\"pad\":\"" +
                     std::string(kMaxTruthLineBytes + 10, 'x') + "\"}\n";
  text += "{\"step\":2,\"start_ns\":200,\"end_ns\":300,\"tokens\":10}\n";
  dir.WriteFile("rank0.truth.jsonl", text);
  JobRecord job;
  job.ranks.push_back({0, 0, "n", 0, "", 0, std::nullopt});
  MergeTruth(dir.path(), job);
  ASSERT_EQ(job.steps.size(), 1u);
  EXPECT_EQ(job.steps[0].step, 2);
}

}  // namespace
}  // namespace ithbat::sim::runner
