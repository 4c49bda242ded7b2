// The simulated inference server end to end: the binary started as vLLM is (a symlink named
// vllm, `vllm serve MODEL --port P ...`) over a fake GPU state, read back the way the agent
// reads a real server — its command line through discovery, /metrics through the exposition
// parser and vLLM normaliser, its stdout through the joblog vLLM parser, and the GPUs through
// the fake state NVML reports from. No timing thresholds: every wait is a bounded poll for a
// condition, and the conditions are about what happened, not how fast.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/joblog/parsers/parser.h"
#include "collect/serving/discovery.h"
#include "collect/serving/exposition.h"
#include "collect/serving/normalise.h"
#include "fake_state/fake_state_api.h"
#include "testutil/testutil.h"
#include "workload/serve_spec.h"

namespace ithbat::sim::workload {
namespace {

namespace fs = std::filesystem;
using collect::serving::ServingSeries;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// pid's parent, from /proc/<pid>/stat (0 when it cannot be read).
pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadAll(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  char state = 0;
  pid_t ppid = 0;
  in >> state >> ppid;
  return ppid;
}

bool DescendsFrom(pid_t pid, pid_t ancestor) {
  for (int i = 0; i < 8 && pid > 1; ++i) {
    if (pid == ancestor) return true;
    pid = ParentOf(pid);
  }
  return false;
}

struct Child {
  pid_t pid = -1;
  int status = 0;
  bool reaped = false;
  bool Alive() {
    if (reaped || pid <= 0) return false;
    if (waitpid(pid, &status, WNOHANG) == pid) reaped = true;
    return !reaped;
  }
  ~Child() {
    if (Alive()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
};

struct Variant {
  const char* name;
  scenario::MetricsStyle metrics;
  scenario::Engine engine;
  int gpus;
  int tp;
};

class ServeEndToEnd : public ::testing::TestWithParam<Variant> {};

TEST_P(ServeEndToEnd, TheAgentSeesAVllmServerDoingTheWork) {
  const Variant v = GetParam();
  testing::TempDir dir;
  const std::string state_path = (dir.path() / "gpu.state").string();
  auto state = sim::FakeState::CreateDefault(state_path, "serve-node");
  ASSERT_TRUE(state) << state.error().message;

  ServeSpec spec;
  spec.id = "serve-test";
  spec.gpus = v.gpus;
  spec.engine = v.engine;
  spec.metrics = v.metrics;
  spec.model_bytes = uint64_t{4} << 30;
  spec.kv_capacity_tokens = 100000;
  spec.arrival_rate_rps = 20;
  spec.prompt_tokens = 600;
  spec.output_tokens = 40;
  spec.shared_prefix_share = 0.3;
  spec.stats_every_s = 0.5;
  spec.seed = 7;
  spec.costs = DefaultServeCosts(4, v.tp, spec.kv_bytes_per_token, v.engine);
  const fs::path spec_path = dir.path() / "spec.json";
  dir.WriteFile("spec.json", ServeSpecToJson(spec));
  fs::create_directories(dir.path() / "bin");
  const fs::path vllm = dir.path() / "bin" / "vllm";
  fs::create_symlink(ITHBAT_SIM_SERVE, vllm);

  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string port_s = std::to_string(port), tp_s = std::to_string(v.tp);
  const std::string model = "test-org/Test-Model-4B";
  std::vector<std::string> args = {"vllm", "serve",
                                   model,  "--port",
                                   port_s, "--max-num-seqs",
                                   "8",    "--tensor-parallel-size",
                                   tp_s,   "--disable-log-requests"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = (dir.path() / "out.log").string(),
                    err_path = (dir.path() / "err.log").string();
  const std::string visible = v.gpus == 1 ? "0" : "0,1";

  Child child;
  child.pid = fork();
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {
    freopen(out_path.c_str(), "w", stdout);
    freopen(err_path.c_str(), "w", stderr);
    setenv("ITHBAT_FAKE_STATE", state_path.c_str(), 1);
    setenv("ITHBAT_SIM_SPEC", spec_path.c_str(), 1);
    setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
    execv(vllm.c_str(), argv.data());
    _exit(127);
  }

  // The agent's discovery finds it by its command line, with the limits it was started with.
  std::optional<collect::serving::ServerInfo> info;
  for (int i = 0; i < 400 && !info; ++i) {  // up to 20 s on a loaded machine
    info = collect::serving::ReadServer("/proc", child.pid);
    if (!info) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->engine, collect::serving::Engine::kVllm);
  EXPECT_EQ(info->port, port);
  EXPECT_EQ(info->model, model);
  EXPECT_EQ(info->max_num_seqs, 8);
  EXPECT_EQ(info->tensor_parallel_size, v.tp);

  // /metrics, until requests have been served.
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(1);
  cli.set_read_timeout(5);
  std::map<ServingSeries, double> n;
  std::string body;
  double max_running = 0;
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(child.Alive()) << "exited: " << ReadAll(err_path);
    auto res = cli.Get("/metrics");
    if (res && res->status == 200) {
      body = res->body;
      auto expo = collect::serving::ParseExposition(body);
      ASSERT_TRUE(expo);
      ASSERT_EQ(expo->errors, 0u) << expo->first_error;
      n.clear();
      for (const auto& s : collect::serving::Normalise(collect::serving::Engine::kVllm, *expo)) {
        n[s.series] += s.value;
        if (s.series == ServingSeries::kRequestsRunning) max_running = std::max(max_running, s.value);
        if (s.series == ServingSeries::kKvCacheUsageRatio) {
          EXPECT_GE(s.value, 0);
          EXPECT_LE(s.value, 1);
        }
        if (s.series == ServingSeries::kRequestsRunning || s.series == ServingSeries::kKvCacheUsageRatio) {
          EXPECT_EQ(s.model, model);
        }
      }
      if (n[ServingSeries::kGenerationTokensTotal] > 100 && n[ServingSeries::kTtftRequestsTotal] > 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(n[ServingSeries::kGenerationTokensTotal], 100) << body.substr(0, 2000);
  EXPECT_EQ(n.count(ServingSeries::kRequestsRunning), 1u);
  EXPECT_EQ(n.count(ServingSeries::kRequestsWaiting), 1u);
  EXPECT_EQ(n.count(ServingSeries::kKvCacheUsageRatio), 1u);
  EXPECT_GT(n[ServingSeries::kPromptTokensTotal], 0);
  // num_gpu_blocks per engine (V1 labels each engine; V0 has one).
  const int64_t engines = v.metrics == scenario::MetricsStyle::kVllmV1 ? v.gpus / v.tp : 1;
  EXPECT_EQ(n[ServingSeries::kKvCacheBlocks],
            static_cast<double>(engines * (spec.kv_capacity_tokens / spec.block_size)));
  if (v.engine == scenario::Engine::kNaive) {
    EXPECT_LE(max_running, 1);
  }
  if (v.metrics == scenario::MetricsStyle::kVllmV1) {
    EXPECT_NE(body.find("vllm:kv_cache_usage_perc{engine=\"0\""), std::string::npos);
  } else {
    EXPECT_NE(body.find("vllm:gpu_cache_usage_perc{model_name="), std::string::npos);
  }

  // NVML's view: on each GPU it uses, a process of the server holds the weights and the KV
  // cache. A vLLM V1 server's GPU processes are its EngineCore/worker children (their command
  // lines rewritten, not servers themselves); a V0 or naive server holds the GPUs itself.
  const bool split =
      v.metrics == scenario::MetricsStyle::kVllmV1 && v.engine == scenario::Engine::kContinuous;
  const uint64_t per_gpu =
      spec.model_bytes / static_cast<uint64_t>(v.tp) +
      static_cast<uint64_t>(spec.kv_capacity_tokens) * spec.kv_bytes_per_token / static_cast<uint64_t>(v.tp);
  std::vector<uint32_t> gpu_pids;
  for (uint32_t g = 0; g < static_cast<uint32_t>(v.gpus); ++g) {
    auto cfg = (*state)->Config(g);
    ASSERT_TRUE(cfg);
    ASSERT_EQ(cfg->process_count, 1u) << "GPU " << g;
    const uint32_t pid = cfg->processes[0].pid;
    gpu_pids.push_back(pid);
    EXPECT_GE(cfg->processes[0].used_bytes, per_gpu) << "GPU " << g;
    EXPECT_TRUE(DescendsFrom(static_cast<pid_t>(pid), child.pid)) << "GPU " << g << " pid " << pid;
    if (split) {
      EXPECT_NE(pid, static_cast<uint32_t>(child.pid));
      EXPECT_FALSE(collect::serving::ReadServer("/proc", static_cast<int32_t>(pid)).has_value());
      EXPECT_EQ(ReadAll(fs::path("/proc") / std::to_string(pid) / "cmdline").rfind("VLLM::", 0), 0u);
    } else {
      EXPECT_EQ(pid, static_cast<uint32_t>(child.pid));
    }
  }
  if (v.tp > 1) {
    for (size_t g = 1; g < gpu_pids.size(); ++g) EXPECT_NE(gpu_pids[g], gpu_pids[0]);  // a worker per GPU
  }
  auto unused = (*state)->Config(static_cast<uint32_t>(v.gpus));
  ASSERT_TRUE(unused);
  EXPECT_EQ(unused->process_count, 0u);

  // The stats line on stdout, as the agent's joblog parser reads it.
  std::vector<collect::joblog::ParsedEvent> events;
  for (int i = 0; i < 300 && events.empty(); ++i) {
    std::istringstream lines(ReadAll(out_path));
    auto parser = collect::joblog::MakeVllmParser();
    for (std::string line; std::getline(lines, line);) {
      collect::joblog::LineView lv;
      lv.text = line;
      parser->Parse(lv, events);
    }
    if (events.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(events.empty()) << ReadAll(out_path);
  bool running_seen = false, kv_seen = false;
  for (const auto& e : events) {
    EXPECT_EQ(e.kind, EventKind::kServingMetric);
    std::string engine;
    for (const auto& [k, val] : e.attrs)
      if (k == "engine") engine = val;
    EXPECT_EQ(engine, v.metrics == scenario::MetricsStyle::kVllmV1 ? "vllm_v1" : "vllm_v0");
    running_seen |= e.name == "running_requests";
    kv_seen |= e.name == "kv_cache_usage_ratio";
  }
  EXPECT_TRUE(running_seen);
  EXPECT_TRUE(kv_seen);

  // SIGTERM: a clean exit.
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  for (int i = 0; i < 600 && child.Alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(child.reaped) << "still running 30 s after SIGTERM";
  EXPECT_TRUE(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) << child.status << ReadAll(err_path);
  const std::string out = ReadAll(out_path);
  EXPECT_NE(out.find("Shutting down"), std::string::npos);
  EXPECT_NE(out.find(" - \"GET /metrics HTTP/1.1\" 200 OK"), std::string::npos);  // uvicorn's access log

  // The GPUs' timelines: busy intervals of the server's GPU processes, with tensor-pipe work
  // among them; and they left NVML's process list when they exited.
  for (uint32_t g = 0; g < static_cast<uint32_t>(v.gpus); ++g) {
    const GpuTimeline& t = (*state)->layout().gpus[g].timeline;
    const uint64_t head = t.head;
    int mine = 0;
    bool tensor = false;
    for (uint64_t k = head > kTimelineCapacity ? head - kTimelineCapacity : 0; k < head; ++k) {
      const BusyInterval& b = t.entries[k % kTimelineCapacity];
      if (b.pid != gpu_pids[g] || b.end_ns <= b.start_ns) continue;
      ++mine;
      EXPECT_GT(b.sm, 0) << "GPU " << g;
      tensor |= b.tensor > 0;
    }
    EXPECT_GT(mine, 0) << "GPU " << g;
    EXPECT_TRUE(tensor) << "GPU " << g;
    auto cfg = (*state)->Config(g);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->process_count, 0u) << "GPU " << g;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ServeEndToEnd,
    ::testing::Values(Variant{"ContinuousV1TwoReplicas", scenario::MetricsStyle::kVllmV1,
                              scenario::Engine::kContinuous, 2, 1},
                      Variant{"ContinuousV1TensorParallel", scenario::MetricsStyle::kVllmV1,
                              scenario::Engine::kContinuous, 2, 2},
                      Variant{"NaiveV0", scenario::MetricsStyle::kVllmV0, scenario::Engine::kNaive, 1, 1}),
    [](const ::testing::TestParamInfo<Variant>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace ithbat::sim::workload
