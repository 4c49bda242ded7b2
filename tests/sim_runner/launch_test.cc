// ithbat-sim end to end, without agents unless needed: each launcher style starts its ranks the
// way the real one does (process tree, environment, PID namespace), the timeline fires (at_s
// and at_step, a GPU fault's effect reaching the rank, host CPU contention), SIGTERM to the
// runner stops everything; a setup failure half way leaves nothing behind; a skewed node's agent
// runs under faketime; another tenant's fabric traffic reaches the NICs on its switch; an
// inference server runs as `vllm serve`.
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include "fake_state/fake_state.h"
#include "net/net_state.h"
#include "sim_runner/sim_run.h"
#include "testutil/testutil.h"

namespace ithbat::sim::runner {
namespace {

std::string Scenario(const std::string& launcher) {
  return fmt::format(R"(
version: 1
name: runner-launch-{0}
duration_s: 300
nodes:
  - name: ln1
    gpus: {{count: 2, model: H100-SXM}}
    nics: [{{name: mlx5_0, rate_gbps: 400, gpus: [0, 1], switch: leaf-1}}]
fabric:
  switches: [{{name: leaf-1, tier: leaf}}]
storage:
  mounts:
    - {{name: home, path: /shared/home, kind: shared_nfs, nodes: [ln1], write_gbps: 2, fsync_ms: 5}}
tenants:
  - {{id: other-train, kind: training, switch: leaf-1, traffic_gbps: 100, start_s: 0}}
jobs:
  - id: lj
    user: tester
    launcher: {0}
    nodes: [ln1]
    gpus_per_node: 2
    steps: 400
    log: {{format: megatron, every_steps: 5, buffered: false}}
    work: {{compute_ms: 200, seq_len: 256, sequences_per_step: 1, launches_per_step: 20, memory_gib: 1}}
    collectives:
      - {{op: all_reduce, bytes: 100000}}
    data_loader: {{workers: 1, cpu_ms_per_batch: 2}}
    loss: {{model: decay, initial: 3, final: 1}}
    lr: {{schedule: constant, peak: 1e-4, warmup_steps: 0}}
timeline:
  - {{id: hot, kind: thermal_throttle, node: ln1, gpu: 0, at_s: 0.5, duration_s: 1}}
  - {{id: busy, kind: host_cpu_contention, node: ln1, cpu_share: 0.5, at_s: 0.5, duration_s: 1}}
  - {{id: bad-gpu, kind: xid, node: ln1, gpu: 1, xid: 79, effect: nan, job: lj, at_step: 3}}
  - {{id: slow-nfs, kind: storage_slowdown, mount: home, bandwidth_factor: 0.2, fsync_ms: 500, at_s: 0.5, duration_s: 1}}
background:
  enabled: true
  host_jitter_processes: 2
)",
                     launcher);
}

std::map<std::string, std::string> Environ(int64_t pid) {
  std::map<std::string, std::string> out;
  std::string text = ReadFile(fmt::format("/proc/{}/environ", pid));
  std::stringstream in(text);
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

int64_t ParentPid(int64_t pid) {
  std::string status = ReadFile(fmt::format("/proc/{}/status", pid));
  const size_t at = status.find("PPid:");
  return at == std::string::npos ? 0 : std::stoll(status.substr(at + 5));
}

std::string Comm(int64_t pid) {
  std::string comm = ReadFile(fmt::format("/proc/{}/comm", pid));
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

// "NSpid:\t<host>\t<in namespace>" → how many levels.
size_t NsLevels(int64_t pid) {
  std::string status = ReadFile(fmt::format("/proc/{}/status", pid));
  const size_t at = status.find("NSpid:");
  if (at == std::string::npos) return 0;
  std::stringstream line(status.substr(at + 6, status.find('\n', at) - at - 6));
  size_t n = 0;
  int64_t v = 0;
  while (line >> v) ++n;
  return n;
}

// The pids in the node's NVML process lists (the fake state the fake libcuda registers in).
std::set<int64_t> NvmlPids(const fs::path& state_path) {
  StateMapping state;
  std::string error;
  if (!state.Open(state_path.string(), &error)) {
    ADD_FAILURE() << state_path << ": " << error;
    return {};
  }
  std::set<int64_t> out;
  auto config = std::make_unique<GpuConfig>();
  for (uint32_t g = 0; g < state.layout()->header.gpu_count && g < kMaxGpus; ++g) {
    if (!ReadConfig(state.layout()->gpus[g], config.get())) continue;
    for (uint32_t i = 0; i < config->process_count && i < kMaxProcesses; ++i) out.insert(config->processes[i].pid);
  }
  return out;
}

const json* FindEvent(const json& w, const std::string& id) {
  for (const auto& e : w["events"]) {
    if (e["id"] == id) return &e;
  }
  return nullptr;
}

// Polls world.json until `ready` holds (bounded: a safety net, not a verdict).
template <class Pred>
json WaitForWorld(pid_t sim, const fs::path& root, const fs::path& log, Pred ready) {
  for (int i = 0; i < 3000; ++i) {
    int status = 0;
    if (waitpid(sim, &status, WNOHANG) == sim) {
      ADD_FAILURE() << "ithbat-sim ended early:\n" << ReadFile(log);
      return json();
    }
    json w = ReadWorld(root);
    if (w.is_object() && ready(w)) return w;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "world.json never got there:\n" << ReadFile(log);
  return json();
}

class LauncherStyleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LauncherStyleTest, RanksStartLikeTheRealLauncherAndTheTimelineFires) {
  ASSERT_EQ(geteuid(), 0u) << "the simulator needs root (PID namespaces, FUSE)";
  const std::string style = GetParam();
  ithbat::testing::TempDir dir;
  dir.WriteFile("s.yaml", Scenario(style));
  const fs::path root = dir.path() / "run";
  const fs::path log = dir.path() / "sim.log";
  // As if the test ran inside a Slurm job: nothing of it may reach the simulated ranks.
  setenv("SLURM_JOB_ID", "424242", 1);
  setenv("RANK", "99", 1);
  const pid_t sim = Start(
      {"run", (dir.path() / "s.yaml").string(), "--no-agents", "--seed", "5", "--root", root.string()}, log);
  unsetenv("SLURM_JOB_ID");
  unsetenv("RANK");
  ASSERT_GT(sim, 0);

  json w = WaitForWorld(sim, root, log, [](const json& w) {
    if (w["jobs"].empty() || w["jobs"][0]["ranks"].size() != 2) return false;
    for (const auto& r : w["jobs"][0]["ranks"]) {
      if (r["pid"].get<int64_t>() <= 0) return false;
    }
    const json* hot = FindEvent(w, "hot");
    const json* bad = FindEvent(w, "bad-gpu");
    const json* nfs = FindEvent(w, "slow-nfs");
    return hot && (*hot)["ended_ns"].get<int64_t>() > 0 && bad && (*bad)["started_ns"].get<int64_t>() > 0 &&
           nfs && (*nfs)["ended_ns"].get<int64_t>() > 0;
  });
  ASSERT_TRUE(w.is_object());

  // While it runs: the process tree and environment of each rank.
  const json& job = w["jobs"][0];
  for (const auto& r : job["ranks"]) {
    const int64_t pid = r["pid"].get<int64_t>();
    const int64_t rank = r["rank"].get<int64_t>();
    auto env = Environ(pid);
    ASSERT_FALSE(env.empty()) << "rank " << rank << " (pid " << pid << ") is gone:\n" << ReadFile(log);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r["local_rank"].get<int64_t>()));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], std::to_string(r["gpu"].get<int64_t>()));
    EXPECT_EQ(env["ITHBAT_FAKE_STATE"], (root / "nodes" / "ln1" / "gpu.state").string());
    const int64_t parent = ParentPid(pid);
    if (style == "srun") {
      EXPECT_EQ(Comm(parent), "slurmstepd");
      EXPECT_EQ(env["SLURM_PROCID"], std::to_string(rank));
      EXPECT_EQ(env["SLURM_JOB_ID"], std::to_string(job["slurm_job_id"].get<uint64_t>()));
      EXPECT_EQ(NsLevels(pid), 1u);
    } else if (style == "torchrun") {
      EXPECT_EQ(Comm(parent), "torchrun");
      EXPECT_EQ(env["SLURM_PROCID"], "0");  // torchrun's task under srun: the node
      EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "lj");
      EXPECT_EQ(NsLevels(pid), 1u);
    } else {
      EXPECT_EQ(Comm(parent), "torchrun");  // the pod's entrypoint, PID 1 of its namespace
      EXPECT_EQ(Comm(ParentPid(parent)), "containerd-shim");
      EXPECT_EQ(NsLevels(pid), 2u);
      EXPECT_EQ(env["HOSTNAME"], "lj-worker-0");
      EXPECT_EQ(env.count("SLURM_JOB_ID"), 0u);
    }
  }
  // NVML's process list carries the ranks' host pids (as the real driver reports them), also
  // for ranks inside a pod's PID namespace, where getpid() is a small namespace pid.
  std::set<int64_t> rank_pids;
  for (const auto& r : job["ranks"]) rank_pids.insert(r["pid"].get<int64_t>());
  EXPECT_EQ(NvmlPids(root / "nodes" / "ln1" / "gpu.state"), rank_pids);
  // The run dir is private to the runner.
  struct stat st {};
  ASSERT_EQ(stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // The GPU fault's effect reached the rank on that GPU, and only it.
  EXPECT_EQ(ReadFile(root / "jobs" / "lj" / "rank1.inject"), "nan\n");
  EXPECT_FALSE(fs::exists(root / "jobs" / "lj" / "rank0.inject"));
  const json* busy = FindEvent(w, "busy");
  ASSERT_NE(busy, nullptr);
  EXPECT_GT((*busy)["started_ns"].get<int64_t>(), 0);

  // SIGTERM to the runner: everything stops, world.json says why.
  kill(sim, SIGTERM);
  EXPECT_EQ(Wait(sim, 120), 0);
  w = ReadWorld(root);
  EXPECT_EQ(w["stop_reason"], "signal");
  EXPECT_EQ(w["phase"], "ended");
  EXPECT_EQ(w["jobs"][0]["state"], "stopped");
  EXPECT_EQ(w["host_jitter_processes"], 2);
  EXPECT_GT(w["jobs"][0]["steps_done"].get<int64_t>(), 0);
  // The other tenant's traffic went through the NIC on its switch.
  net::NetStateMapping net;
  const char* why = nullptr;
  ASSERT_TRUE(net.Open((root / "net.state").c_str(), &why)) << why;
  ASSERT_NE(net.nic(0), nullptr);
  EXPECT_GT(net::Load(&net.nic(0)->other_tx_bytes), 0u);
  ExpectNothingLeft(w, root);
}

INSTANTIATE_TEST_SUITE_P(Styles, LauncherStyleTest, ::testing::Values("srun", "torchrun", "k8s"));

// An inference server: started as `vllm serve ...` on the node's GPUs, serving vLLM's metrics on
// the port world.json names, until the runner stops it.
TEST(ServerTest, InferenceServerRunsAsVllmServe) {
  ASSERT_EQ(geteuid(), 0u);
  ithbat::testing::TempDir dir;
  dir.WriteFile("s.yaml", R"(
version: 1
name: runner-serve
duration_s: 300
nodes:
  - name: sv1
    gpus: {count: 2, model: H100-SXM}
inference:
  - {id: chat, node: sv1, gpus: 2, tensor_parallel: 1, engine: continuous, slots: 8, arrival_rate_rps: 2,
     prompt_tokens: 200, output_tokens: 20, model_gib: 4, port: 8000}
background: {enabled: false}
)");
  const fs::path root = dir.path() / "run";
  const fs::path log = dir.path() / "sim.log";
  const pid_t sim = Start({"run", (dir.path() / "s.yaml").string(), "--no-agents", "--root", root.string()}, log);
  ASSERT_GT(sim, 0);
  json w = WaitForWorld(sim, root, log, [](const json& w) {
    // url: set once /metrics answered 200 from the server's own listening socket.
    return w.value("phase", "") == "running" && w["servers"].size() == 1 &&
           w["servers"][0]["pid"].get<int64_t>() > 0 && !w["servers"][0].value("url", "").empty();
  });
  ASSERT_TRUE(w.is_object());
  const json& server = w["servers"][0];
  const int64_t pid = server["pid"].get<int64_t>();
  std::string cmdline = ReadFile(fmt::format("/proc/{}/cmdline", pid));
  for (char& c : cmdline) c = c == '\0' ? ' ' : c;
  EXPECT_NE(cmdline.find("/bin/vllm serve "), std::string::npos) << cmdline;
  EXPECT_NE(cmdline.find(fmt::format("--port {}", server["port"].get<int64_t>())), std::string::npos) << cmdline;
  EXPECT_EQ(Environ(pid)["CUDA_VISIBLE_DEVICES"], "0,1");
  std::string metrics;
  httplib::Client cli(server["url"].get<std::string>());
  for (int i = 0; i < 300 && metrics.find("vllm:") == std::string::npos; ++i) {
    if (auto res = cli.Get("/metrics"); res && res->status == 200) metrics = res->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(metrics.find("vllm:num_requests_running"), std::string::npos) << metrics.substr(0, 2000);

  kill(sim, SIGTERM);
  EXPECT_EQ(Wait(sim, 120), 0);
  w = ReadWorld(root);
  EXPECT_EQ(w["servers"][0]["state"], "stopped");
  EXPECT_EQ(w["servers"][0]["exit_code"], 0);
  ExpectNothingLeft(w, root);
}

TEST(SetupTest, AnAgentThatDiesFailsTheSetupAndLeavesNothing) {
  ASSERT_EQ(geteuid(), 0u);
  ithbat::testing::TempDir dir;
  dir.WriteFile("s.yaml", R"(
version: 1
name: runner-setup-fails
duration_s: 60
nodes:
  - name: sf1
    gpus: {count: 1, model: H100-SXM}
storage:
  mounts:
    - {name: home, path: /home, kind: shared_nfs, nodes: [sf1]}
)");
  const fs::path root = dir.path() / "run";
  const pid_t sim =
      Start({"run", (dir.path() / "s.yaml").string(), "--ithbat", "/bin/false", "--root", root.string()},
            dir.path() / "sim.log");
  EXPECT_EQ(Wait(sim, 120), 1);
  const std::string log = ReadFile(dir.path() / "sim.log");
  EXPECT_NE(log.find("setup failed"), std::string::npos) << log;
  EXPECT_NE(log.find("sf1"), std::string::npos) << log;
  json w = ReadWorld(root);
  EXPECT_EQ(w["phase"], "failed");
  EXPECT_EQ(w["stop_reason"], "setup_failed");
  ExpectNothingLeft(w, root);
}

TEST(SetupTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Wait(Start({"run"}, "/dev/null"), 60), 2);
  EXPECT_EQ(Wait(Start({"frobnicate"}, "/dev/null"), 60), 2);
  ithbat::testing::TempDir dir;
  dir.WriteFile("bad.yaml", "version: 1\nname: x\nnodes: 3\n");
  EXPECT_EQ(Wait(Start({"run", (dir.path() / "bad.yaml").string(), "--root", (dir.path() / "r").string()},
                       dir.path() / "log"),
                 60),
            1);
  EXPECT_NE(ReadFile(dir.path() / "log").find("nodes"), std::string::npos);
  // A run dir that exists and is not empty is refused (an old world's files would mix in), and
  // left as it was.
  dir.WriteFile("empty.yaml", "version: 1\nname: reuse\nduration_s: 10\nnodes:\n  - name: r1\n    gpus: {count: 1}\n");
  dir.WriteFile("used/world.json", "{}");
  EXPECT_EQ(Wait(Start({"run", (dir.path() / "empty.yaml").string(), "--no-agents", "--root",
                        (dir.path() / "used").string()},
                       dir.path() / "log2"),
                 60),
            1);
  EXPECT_NE(ReadFile(dir.path() / "log2").find("not empty"), std::string::npos) << ReadFile(dir.path() / "log2");
  EXPECT_EQ(ReadFile(dir.path() / "used" / "world.json"), "{}");
}

std::set<std::string> FaketimeShmFiles() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.find("faketime") != std::string::npos) out.insert(name);
  }
  return out;
}

// A node with a skewed, drifting clock: its agent runs with the real libfaketime preloaded (the
// agent itself, no wrapper process between: the runner's signals reach it) and the skew in
// FAKETIME; the other node's agent has the true clock; nothing is left in /dev/shm.
TEST(SetupTest, SkewedNodeAgentRunsUnderLibfaketime) {
  ASSERT_EQ(geteuid(), 0u);
  const fs::path lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
  // scripts/install-deps.sh installs faketime: its absence is a broken setup, not a reason to skip.
  ASSERT_TRUE(fs::exists(lib)) << "libfaketime is not installed (Debian package faketime)";
  ithbat::testing::TempDir dir;
  dir.WriteFile("s.yaml", R"(
version: 1
name: runner-skew
duration_s: 60
nodes:
  - name: sk1
    gpus: {count: 1, model: H100-SXM}
    clock_skew_ms: 1500
    clock_drift_ppm: 50
  - name: sk2
    gpus: {count: 1, model: H100-SXM}
background: {enabled: false}
)");
  const std::set<std::string> shm_before = FaketimeShmFiles();
  const fs::path root = dir.path() / "run";
  const fs::path log = dir.path() / "sim.log";
  const pid_t sim = Start({"run", (dir.path() / "s.yaml").string(), "--duration-s", "2", "--hold-agents-s", "600",
                           "--root", root.string()},
                          log);
  ASSERT_GT(sim, 0);
  json w = WaitForWorld(sim, root, log, [](const json& w) { return w.value("phase", "") == "holding"; });
  ASSERT_TRUE(w.is_object());
  ASSERT_EQ(w["nodes"].size(), 2u);
  const int64_t skewed = w["nodes"][0]["agent_pid"].get<int64_t>();
  const int64_t plain = w["nodes"][1]["agent_pid"].get<int64_t>();
  EXPECT_EQ(Comm(skewed), "ithbat");  // the agent itself, not a faketime wrapper
  auto env = Environ(skewed);
  EXPECT_EQ(env["FAKETIME"], "+1.500 x1.000050000");
  EXPECT_EQ(env["LD_PRELOAD"], lib.string());
  EXPECT_EQ(env["FAKETIME_DONT_FAKE_MONOTONIC"], "1");
  EXPECT_EQ(env["ITHBAT_SIM_WORLD"], root.string());
  // The library is really mapped into the agent.
  EXPECT_NE(ReadFile(fmt::format("/proc/{}/maps", skewed)).find("libfaketimeMT"), std::string::npos);
  EXPECT_EQ(Comm(plain), "ithbat");
  EXPECT_EQ(Environ(plain).count("FAKETIME"), 0u);
  EXPECT_EQ(Environ(plain).count("LD_PRELOAD"), 0u);
  kill(sim, SIGTERM);
  EXPECT_EQ(Wait(sim, 300), 0) << ReadFile(log);
  w = ReadWorld(root);
  EXPECT_EQ(w["nodes"][0]["clock"]["faked"], true);
  EXPECT_EQ(w["nodes"][1]["clock"]["faked"], false);
  EXPECT_EQ(w["stop_reason"], "duration");
  EXPECT_NE(w["nodes"][0]["agent_url"], "");
  EXPECT_EQ(FaketimeShmFiles(), shm_before);
  ExpectNothingLeft(w, root);
}

}  // namespace
}  // namespace ithbat::sim::runner
