// The serving collector end to end: a loopback httplib::Server serving a fixture /metrics body,
// a fixture proc tree whose cmdline points at its port, and a FakeSink that records the result.
#include "collect/serving/serving_collector.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collect/serving/listener.h"
#include "collect/serving/workload_tie.h"
#include "core/file_util.h"
#include "core/metric.h"
#include "testutil/testutil.h"

namespace ithbat::collect {
namespace {

using ::ithbat::testing::SourceDir;
using ::ithbat::testing::TempDir;

class FakeSink : public Sink {
 public:
  struct Series {
    MetricDesc desc;
    LabelSet labels;
    std::vector<std::pair<TimeNs, double>> samples;
  };

  Result<SeriesRef> RegisterSeries(const MetricDesc& desc, const LabelSet& labels) override {
    if (Status s = ValidateMetricDesc(desc); !s) return std::unexpected(s.error());
    for (size_t i = 0; i < series.size(); i++) {
      if (series[i].desc.name != desc.name) continue;
      if (series[i].desc.help != desc.help || series[i].desc.type != desc.type || series[i].desc.unit != desc.unit) {
        return MakeErrorF(ErrorCode::kInvalidArgument, "desc of {} conflicts", desc.name);
      }
      if (series[i].labels == labels) return static_cast<SeriesRef>(i);
    }
    series.push_back(Series{desc, labels, {}});
    return static_cast<SeriesRef>(series.size() - 1);
  }
  Status Append(SeriesRef ref, TimeNs t, double value) override {
    if (ref >= series.size()) return MakeError(ErrorCode::kNotFound, "unknown ref");
    auto& s = series[ref].samples;
    if (!s.empty() && t <= s.back().first) return MakeError(ErrorCode::kOutOfOrder, "not newer");
    s.emplace_back(t, value);
    return Ok();
  }
  Status AppendEvent(Event) override { return Ok(); }
  Status RecordStep(std::string_view, int32_t, StepSpan) override { return Ok(); }

  // The newest value of the series with this name whose labels include all of `want`.
  std::optional<double> Last(std::string_view name,
                             std::initializer_list<std::pair<std::string_view, std::string_view>> want) const {
    for (const Series& s : series) {
      if (s.desc.name != name || s.samples.empty()) continue;
      bool match = true;
      for (const auto& [k, v] : want) match = match && s.labels.Get(k) == v;
      if (match) return s.samples.back().second;
    }
    return std::nullopt;
  }
  size_t Count(std::string_view name) const {
    size_t n = 0;
    for (const Series& s : series) n += s.desc.name == name ? 1 : 0;
    return n;
  }

  std::vector<Series> series;
};

std::string Cmdline(std::initializer_list<std::string_view> argv) {
  std::string s;
  for (std::string_view a : argv) {
    s.append(a);
    s.push_back('\0');
  }
  return s;
}

// A /metrics server on a free loopback port, serving a body the test can change.
class MetricsServer {
 public:
  MetricsServer() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mu_);
      ++requests_;
      res.set_content(body_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (port_ > 0 && !server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~MetricsServer() {
    server_.stop();
    thread_.join();
  }
  void SetBody(std::string body) {
    std::lock_guard lock(mu_);
    body_ = std::move(body);
  }
  int port() const { return port_; }
  int requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::mutex mu_;
  std::string body_;
  int requests_ = 0;
  int port_ = 0;
};

std::string FixtureBody(int queries, int hits) {
  auto text = ReadFileBounded(SourceDir() / "tests/collect/fixtures/serving/vllm_v1_metrics.txt", 1 << 20);
  EXPECT_TRUE(text.has_value());
  std::string body = text ? *text : std::string();
  body.replace(body.find("QUERIES"), 7, std::to_string(queries));
  body.replace(body.find("HITS"), 4, std::to_string(hits));
  return body;
}

// In the fixture proc tree: pid's descriptor 7 is the socket that really listens on `port` on
// this machine (its inode asked of the kernel, as the collector does), or, when `holds` is
// false, no descriptor at all.
void WriteListener(const TempDir& proc, int pid, int port, bool holds = true) {
  std::filesystem::create_directories(proc.path() / std::to_string(pid) / "fd");
  if (!holds) return;
  auto inodes = serving::ListeningInodes(static_cast<uint16_t>(port));
  ASSERT_TRUE(inodes.has_value()) << inodes.error().ToString();
  ASSERT_EQ(inodes->size(), 1u);
  std::filesystem::create_symlink(fmt::format("socket:[{}]", inodes->front()),
                                  proc.path() / std::to_string(pid) / "fd" / "7");
}

// In the fixture proc tree: pid runs in Slurm job 77's cgroup, which ties it to the workload.
void WriteJobCgroup(const TempDir& proc, int pid) {
  proc.WriteFile(fmt::format("{}/cgroup", pid),
                 "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n");
}

// In the fixture proc tree: pid's parent is ppid.
void WriteParent(const TempDir& proc, int pid, int ppid) {
  proc.WriteFile(fmt::format("{}/status", pid), fmt::format("Name:\tx\nPid:\t{}\nPPid:\t{}\n", pid, ppid));
}

// A port nothing listens on: bound, then closed.
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);  // never listened: a connect is refused
  return port;
}

// Options for the discovery tests: proc root `proc`, a full rescan every `rescan` ticks, new
// non-server pids read again on their next `grace` ticks.
ServingOptions Discovery(const TempDir& proc, uint32_t rescan, uint32_t grace) {
  ServingOptions options;
  options.procfs = proc.path();
  options.rescan_every_ticks = rescan;
  options.exec_grace_ticks = grace;
  return options;
}

// A collector created with `options`, initialised on `sink` and started; nullptr if either
// step fails. The sink must outlive it.
std::unique_ptr<ServingCollector> Started(const ServingOptions& options, FakeSink& sink) {
  auto collector = ServingCollector::Create(options);
  if (!collector->Init(sink) || !collector->Start()) return nullptr;
  return collector;
}

TEST(ServingCollector, EndToEnd) {
  MetricsServer server;
  ASSERT_GT(server.port(), 0);
  server.SetBody(FixtureBody(1000, 250));
  const int dead = DeadPort();

  TempDir proc;
  const std::string port = std::to_string(server.port());
  proc.WriteFile("4242/cmdline", Cmdline({"python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                                          "meta-llama/Llama-3.1-8B-Instruct", "--port", port, "--max-num-seqs", "128",
                                          "--enable-prefix-caching"}));
  proc.WriteFile("4243/cmdline", Cmdline({"python3", "-m", "vllm.entrypoints.openai.api_server", "--port", port}));
  proc.WriteFile("5000/cmdline", Cmdline({"python3", "-m", "sglang.launch_server", "--port", std::to_string(dead)}));
  proc.WriteFile("6000/cmdline", Cmdline({"/usr/bin/python3", "train.py"}));
  // The listening socket is held by 4243, the other process of the same server: 4242 is the one
  // scraped and labelled (the lowest pid), and it is scraped because its server holds the port.
  WriteListener(proc, 4242, server.port(), /*holds=*/false);
  WriteListener(proc, 4243, server.port());
  WriteJobCgroup(proc, 4242);

  ServingOptions options;
  options.procfs = proc.path();
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  for (const MetricDesc& d : collector->Describe()) {
    EXPECT_TRUE(ValidateMetricDesc(d).has_value()) << d.name;
  }
  ASSERT_TRUE(collector->Collect(1000).has_value());

  const std::pair<std::string_view, std::string_view> vllm = {"pid", "4242"};
  EXPECT_EQ(sink.Last("ithbat_serving_up", {vllm, {"engine", "vllm"}, {"port", port}}), 1.0);
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "5000"}, {"engine", "sglang"}}), 0.0);
  EXPECT_EQ(sink.Count("ithbat_serving_up"), 2u);  // pid 4243 shares 4242's port: one server
  EXPECT_EQ(sink.Last("ithbat_serving_requests_running",
                      {vllm, {"engine_index", "0"}, {"model", "meta-llama/Llama-3.1-8B-Instruct"}}),
            8.0);
  EXPECT_EQ(sink.Last("ithbat_serving_requests_waiting", {vllm}), 3.0);
  EXPECT_EQ(sink.Last("ithbat_serving_kv_cache_usage_ratio", {vllm}), 0.42);
  EXPECT_EQ(sink.Last("ithbat_serving_prompt_tokens_total", {vllm}), 1196.0);
  EXPECT_EQ(sink.Last("ithbat_serving_generation_tokens_total", {vllm}), 27453.0);
  EXPECT_EQ(sink.Last("ithbat_serving_time_to_first_token_seconds_total", {vllm}), 6.5);
  EXPECT_EQ(sink.Last("ithbat_serving_time_to_first_token_requests_total", {vllm}), 140.0);
  EXPECT_EQ(sink.Last("ithbat_serving_prefill_seconds_total", {vllm}), 2.25);
  EXPECT_EQ(sink.Last("ithbat_serving_decode_seconds_total", {vllm}), 120.5);
  EXPECT_EQ(sink.Last("ithbat_serving_prefix_cache_queries_total", {vllm}), 1000.0);
  EXPECT_EQ(sink.Last("ithbat_serving_prefix_cache_hits_total", {vllm}), 250.0);
  EXPECT_EQ(sink.Last("ithbat_serving_max_num_seqs", {vllm}), 128.0);
  EXPECT_EQ(sink.Last("ithbat_serving_prefix_caching_enabled", {vllm}), 1.0);
  // The first scrape has no earlier counters: no derived ratio yet.
  EXPECT_FALSE(sink.Last("ithbat_serving_prefix_cache_hit_ratio", {vllm}).has_value());

  agent::CollectorHealth h = collector->Health();
  EXPECT_TRUE(h.up);
  EXPECT_GE(h.errors, 2u);  // the dead sglang server and the garbage line in the body
  EXPECT_NE(h.last_error.find("pid"), std::string::npos) << h.last_error;

  // Second tick: 600 more lookups of which 150 hit → 0.25.
  server.SetBody(FixtureBody(1600, 400));
  ASSERT_TRUE(collector->Collect(2000).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_prefix_cache_hit_ratio", {vllm}), 0.25);
  EXPECT_EQ(sink.Last("ithbat_serving_prefix_cache_queries_total", {vllm}), 1600.0);

  // The server goes away: up 0, the collector stays up.
  std::filesystem::remove_all(proc.path() / "4242");
  std::filesystem::remove_all(proc.path() / "4243");
  ASSERT_TRUE(collector->Collect(3000).has_value());
  EXPECT_EQ(sink.Count("ithbat_serving_up"), 2u);
  collector->Stop();
}

TEST(ServingCollector, OversizedBodyIsReported) {
  MetricsServer server;
  server.SetBody(std::string(4096, '#'));
  TempDir proc;
  proc.WriteFile("7/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(server.port())}));
  WriteListener(proc, 7, server.port());
  WriteJobCgroup(proc, 7);
  ServingOptions options;
  options.procfs = proc.path();
  options.max_body_bytes = 1024;
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "7"}}), 0.0);
  EXPECT_NE(collector->Health().last_error.find("larger than 1024 bytes"), std::string::npos) << collector->Health().last_error;
}

TEST(ServingCollector, CmdlineReadAgainOnlyOnRescan) {
  TempDir proc;
  proc.WriteFile("9/cmdline", Cmdline({"sleep", "100"}));
  FakeSink sink;
  auto collector = Started(Discovery(proc, 4, 1), sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());  // tick 0: full scan, pid 9 is not a server
  ASSERT_TRUE(collector->Collect(2).has_value());  // tick 1: its one grace read, still not one
  proc.WriteFile("9/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(DeadPort())}));
  ASSERT_TRUE(collector->Collect(3).has_value());  // ticks 2, 3: pid 9 known, its cmdline not read again
  ASSERT_TRUE(collector->Collect(4).has_value());
  EXPECT_EQ(sink.Count("ithbat_serving_up"), 0u);
  ASSERT_TRUE(collector->Collect(5).has_value());  // tick 4: the rescan finds it
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "9"}}), 0.0);
}

// A launcher forks and then execs the server: a pid listed between the two shows the launcher's
// cmdline. It is read again on its next exec_grace_ticks ticks, and not after.
TEST(ServingCollector, PidCaughtBeforeItsExecIsReadAgain) {
  TempDir proc;
  FakeSink sink;
  auto collector = Started(Discovery(proc, 1000, 2), sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  const std::string launcher = Cmdline({"/usr/bin/python3", "launch.py", "--serve"});
  const std::string port = std::to_string(DeadPort());
  proc.WriteFile("12/cmdline", launcher);
  proc.WriteFile("13/cmdline", launcher);
  ASSERT_TRUE(collector->Collect(2).has_value());  // both first seen as the launcher
  proc.WriteFile("12/cmdline", Cmdline({"vllm", "serve", "m", "--port", port}));
  ASSERT_TRUE(collector->Collect(3).has_value());  // grace read 1: 12 has exec'd
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "12"}}), 0.0);
  EXPECT_FALSE(sink.Last("ithbat_serving_up", {{"pid", "13"}}).has_value());
  ASSERT_TRUE(collector->Collect(4).has_value());  // grace read 2: 13 is still the launcher
  proc.WriteFile("13/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(DeadPort())}));
  ASSERT_TRUE(collector->Collect(5).has_value());  // past its grace: left to the rescan
  EXPECT_FALSE(sink.Last("ithbat_serving_up", {{"pid", "13"}}).has_value());
}

TEST(ServingCollector, NewPidIsFoundOnTheNextTick) {
  TempDir proc;
  FakeSink sink;
  auto collector = Started(Discovery(proc, 1000, ServingOptions{}.exec_grace_ticks), sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  proc.WriteFile("11/cmdline", Cmdline({"text-generation-launcher", "--port", std::to_string(DeadPort()),
                                        "--max-batch-size", "16"}));
  ASSERT_TRUE(collector->Collect(2).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "11"}, {"engine", "tgi"}}), 0.0);
  EXPECT_EQ(sink.Last("ithbat_serving_max_num_seqs", {{"pid", "11"}}), 16.0);
}

TEST(ServingCollector, MissingProcRoot) {
  ServingOptions options;
  options.procfs = "/nonexistent/proc";
  auto collector = ServingCollector::Create(options);
  FakeSink sink;
  EXPECT_EQ(collector->Init(sink).error().code, ErrorCode::kNotFound);
}

TEST(ServingCollector, NoServersNoSeries) {
  TempDir proc;
  proc.WriteFile("1/cmdline", Cmdline({"/sbin/init"}));
  ServingOptions options;
  options.procfs = proc.path();
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  EXPECT_TRUE(sink.series.empty());
  EXPECT_EQ(collector->Health().errors, 0u);
}

}  // namespace
}  // namespace ithbat::collect

namespace ithbat::collect {
namespace {

TEST(ServingCollector, ALookAlikeOnAnotherProgramsPortIsNotScraped) {
  // Another program serves /metrics on the port; a process anyone could start names that port in
  // a vLLM command line but holds no socket on it.
  MetricsServer other;
  ASSERT_GT(other.port(), 0);
  other.SetBody(FixtureBody(10, 5));
  TempDir proc;
  proc.WriteFile("8/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(other.port())}));
  WriteListener(proc, 8, other.port(), /*holds=*/false);
  WriteJobCgroup(proc, 8);
  ServingOptions options;
  options.procfs = proc.path();
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "8"}}), 0.0);
  EXPECT_EQ(other.requests(), 0);
  EXPECT_NE(collector->Health().last_error.find("not scraped"), std::string::npos) << collector->Health().last_error;

  // Once the process holds the socket, it is scraped.
  WriteListener(proc, 8, other.port());
  ASSERT_TRUE(collector->Collect(2).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "8"}}), 1.0);
  EXPECT_EQ(other.requests(), 1);
}

// A server that answers on its own port but belongs to no job and holds no GPU (anyone's
// `vllm serve` experiment, or a squatter) is never contacted; it is once one of its descendants
// is a GPU process (vLLM V1: the EngineCore child, or a Worker_TP grandchild), or once it runs in
// a job's cgroup.
TEST(ServingCollector, OnlyServersTiedToTheWorkloadAreScraped) {
  MetricsServer server;
  ASSERT_GT(server.port(), 0);
  server.SetBody(FixtureBody(10, 5));
  TempDir proc;
  // 20 is the API server (holds the socket); 21 its EngineCore child, 22 a worker under it; 30
  // an unrelated GPU process whose parent is 1.
  proc.WriteFile("20/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(server.port())}));
  WriteListener(proc, 20, server.port());
  WriteParent(proc, 20, 1);
  proc.WriteFile("20/cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n");
  proc.WriteFile("21/cmdline", Cmdline({"VLLM::EngineCore"}));
  WriteParent(proc, 21, 20);
  proc.WriteFile("22/cmdline", Cmdline({"VLLM::Worker_TP1"}));
  WriteParent(proc, 22, 21);
  proc.WriteFile("30/cmdline", Cmdline({"python3", "train.py"}));
  WriteParent(proc, 30, 1);

  agent::TrackedProcesses gpu;
  gpu.Publish("gpu", {agent::TrackedProcesses::Process{.pid = 30}});
  ServingOptions options;
  options.procfs = proc.path();
  options.gpu_processes = &gpu;
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "20"}}), 0.0);
  EXPECT_EQ(server.requests(), 0);
  EXPECT_NE(collector->Health().last_error.find("not tied to the node's workload"), std::string::npos)
      << collector->Health().last_error;

  // Another source's process in the tree is not a GPU process.
  gpu.Publish("other", {agent::TrackedProcesses::Process{.pid = 22}});
  ASSERT_TRUE(collector->Collect(2).has_value());
  EXPECT_EQ(server.requests(), 0);

  // The grandchild holds a GPU: scraped, and the tie is remembered when the GPU list changes.
  gpu.Publish("gpu",
              {agent::TrackedProcesses::Process{.pid = 22}, agent::TrackedProcesses::Process{.pid = 30}});
  ASSERT_TRUE(collector->Collect(3).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "20"}}), 1.0);
  EXPECT_EQ(server.requests(), 1);
  gpu.Publish("gpu", {});
  ASSERT_TRUE(collector->Collect(4).has_value());
  EXPECT_EQ(server.requests(), 2);
}

TEST(ServingCollector, AJobsCgroupTiesAServerWithoutGpuProcesses) {
  MetricsServer server;
  server.SetBody(FixtureBody(10, 5));
  TempDir proc;
  proc.WriteFile("40/cmdline", Cmdline({"vllm", "serve", "m", "--port", std::to_string(server.port())}));
  WriteListener(proc, 40, server.port());
  proc.WriteFile("40/cgroup", "0::/user.slice\n");
  ServingOptions options;  // no GPU list at all
  options.procfs = proc.path();
  FakeSink sink;
  auto collector = Started(options, sink);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->Collect(1).has_value());
  EXPECT_EQ(server.requests(), 0);
  // A Kubernetes pod's cgroup (the systemd driver's form).
  proc.WriteFile("40/cgroup",
                 "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8a9b_"
                 "0c1d2e3f4a5b.slice/cri-containerd-" +
                     std::string(64, 'a') + ".scope\n");
  ASSERT_TRUE(collector->Collect(2).has_value());
  EXPECT_EQ(sink.Last("ithbat_serving_up", {{"pid", "40"}}), 1.0);
  EXPECT_EQ(server.requests(), 1);
}

TEST(ServingWorkloadTie, GpuTieWalksAncestorsBoundedly) {
  TempDir proc;
  // A chain 100 ← 101 ← … ← 120: the GPU process 120 is 20 levels under 100.
  WriteParent(proc, 100, 1);
  for (int pid = 101; pid <= 120; pid++) WriteParent(proc, pid, pid - 1);
  const auto lines = serving::ReadGpuProcessLines(proc.path(), std::vector<int32_t>{120});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].ancestors.size(), static_cast<size_t>(serving::kMaxTreeDepth));
  EXPECT_EQ(lines[0].ancestors.front(), 119);
  const std::vector<int32_t> near = {120 - serving::kMaxTreeDepth};
  const std::vector<int32_t> far = {120 - serving::kMaxTreeDepth - 1};
  EXPECT_EQ(serving::GpuTie(near, lines).kind, serving::TieKind::kGpu);
  EXPECT_EQ(serving::GpuTie(near, lines).via_pid, 120);
  EXPECT_EQ(serving::GpuTie(far, lines).kind, serving::TieKind::kNone);
  const std::vector<int32_t> self = {120};
  EXPECT_EQ(serving::GpuTie(self, lines).kind, serving::TieKind::kGpu);
  // A loop in a hostile or racing tree ends the walk.
  WriteParent(proc, 200, 201);
  WriteParent(proc, 201, 200);
  const auto loop = serving::ReadGpuProcessLines(proc.path(), std::vector<int32_t>{200});
  ASSERT_EQ(loop.size(), 1u);
  EXPECT_EQ(loop[0].ancestors, std::vector<int32_t>{201});
  EXPECT_EQ(serving::GpuTie(std::vector<int32_t>{5}, loop).kind, serving::TieKind::kNone);
  // A GPU process that is gone has no ancestors and ties only a server of its own pid.
  const auto gone = serving::ReadGpuProcessLines(proc.path(), std::vector<int32_t>{999});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_TRUE(gone[0].ancestors.empty());
  EXPECT_EQ(serving::GpuTie(self, gone).kind, serving::TieKind::kNone);
  // No more GPU processes are walked than the bound.
  const std::vector<int32_t> many(serving::kMaxGpuProcessesWalked + 10, 999);
  EXPECT_EQ(serving::ReadGpuProcessLines(proc.path(), many).size(), serving::kMaxGpuProcessesWalked);
}

TEST(ServingWorkloadTie, OnlyACgroupNamesAJob) {
  TempDir proc;
  proc.WriteFile("50/cgroup", "0::/user.slice/user-1000.slice/session-1.scope\n");
  // SLURM_JOB_ID in the environment: anyone can set it, so it is never read here.
  proc.WriteFile("50/environ", std::string("SLURM_JOB_ID=12\0", 16));
  auto none = serving::JobTie(proc.path(), std::vector<int32_t>{50, 51});
  ASSERT_TRUE(none.has_value()) << none.error().ToString();
  EXPECT_EQ(none->kind, serving::TieKind::kNone);
  proc.WriteFile("51/cgroup", "12:pids:/slurm/uid_1000/job_4242/step_0/task_1\n");
  auto slurm = serving::JobTie(proc.path(), std::vector<int32_t>{50, 51});
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->kind, serving::TieKind::kJob);
  EXPECT_EQ(slurm->via_pid, 51);
  EXPECT_NE(slurm->what.find("4242"), std::string::npos) << slurm->what;
}

TEST(ServingListener, FindsThisProcesssOwnListeningSocket) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  auto inodes = serving::ListeningInodes(port);
  ASSERT_TRUE(inodes.has_value()) << inodes.error().ToString();
  ASSERT_EQ(inodes->size(), 1u);
  auto mine = serving::HoldsSocket("/proc", getpid(), *inodes);
  ASSERT_TRUE(mine.has_value()) << mine.error().ToString();
  EXPECT_TRUE(*mine);
  // pid 1 does not hold it.
  auto init = serving::HoldsSocket("/proc", 1, *inodes);
  EXPECT_TRUE(!init.has_value() || !*init);
  // A connected socket on the port is not a listener; once closed, nothing listens there.
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  auto still = serving::ListeningInodes(port);
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(*still, *inodes);
  close(client);
  close(fd);
  auto none = serving::ListeningInodes(port);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  auto gone = serving::HoldsSocket("/proc", 999999999, *inodes);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ithbat::collect
