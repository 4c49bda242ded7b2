// ithbat-sim-serve: the simulated inference server (SERVE.md). Started as vLLM is started
// (`vllm serve MODEL --port P ...` through a symlink named vllm, or `--spec FILE`), it:
//   - serves Prometheus text at http://<host>:<port>/metrics with vLLM's metric names (V0 or
//     V1 style), plus /health, /version and /v1/models;
//   - prints vLLM's periodic stats line on stdout, one record per line, flushed;
//   - generates its own load (the clients): Poisson arrivals and request sizes from the seed;
//   - runs one engine thread per replica over the scheduling model (serve_engine.h), launching
//     each step's kernels on the fake (or real) libcuda on every GPU of the replica and
//     synchronising like vLLM does, so utilisation, tensor activity and memory follow the load;
//     the weights and KV cache are allocated up front (cuMemAlloc), as vLLM reserves them.
// Processes, as the engine really runs: a vLLM V1 server (metrics vllm_v1, continuous engine)
// is an API server process (this one: HTTP, clients, scheduling, stats lines; no CUDA) plus one
// `VLLM::EngineCore` child per replica that holds the GPU (tp = 1), or that starts one
// `VLLM::Worker_TP<j>` child per GPU (tp > 1) — so, as in production, the process NVML lists on
// a GPU is not the one whose command line says `vllm serve`. A V0 or naive server is one process
// holding every GPU itself. Children are forked before any thread or CUDA call, renamed like
// setproctitle does, die with their parent (PR_SET_PDEATHSIG) and exit when their command pipe
// closes.
// Exits 0 on SIGTERM/SIGINT or after the spec's duration_s; 1 when it cannot start (bad flags
// or spec, too few GPUs, the weights do not fit, the port is taken).
//
// CPU: every thread blocks (condition variables, synchronising calls, accept); short decode
// steps are grouped so that one synchronisation covers at least kMinSyncNs of GPU work.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda/cuda_abi.h"
#include "workload/serve_args.h"
#include "workload/serve_engine.h"
#include "workload/serve_metrics.h"
#include "workload/serve_spec.h"

namespace {

using namespace ithbat::sim::workload;         // NOLINT
using namespace ithbat::sim::workload::serve;  // NOLINT

constexpr int64_t kMinSyncNs = 2'000'000;  // group decode steps shorter than this per sync
constexpr size_t kMaxInbox = 100000;

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

double RealS() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string LocalStamp() {  // vLLM's logging format: "%m-%d %H:%M:%S", local time
  time_t now = time(nullptr);
  tm t{};
  localtime_r(&now, &t);
  char buf[32];
  strftime(buf, sizeof(buf), "%m-%d %H:%M:%S", &t);
  return buf;
}

std::mutex g_out_mu;
void PrintLine(const std::string& line) {
  std::lock_guard<std::mutex> l(g_out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void Die(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::exit(1);
}

const char* CuName(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s != nullptr ? s : "CUDA_ERROR";
}

#define CU(call)                                                                                      \
  do {                                                                                                \
    const CUresult r_ = (call);                                                                       \
    if (r_ != CUDA_SUCCESS) Die(fmt::format("RuntimeError: CUDA error: {} ({})", CuName(r_), #call)); \
  } while (0)

// The original argv area (setproctitle rewrites it in the children).
char* g_argv_begin = nullptr;
size_t g_argv_span = 0;

void SetProcTitle(const std::string& title) {
  if (g_argv_begin != nullptr && g_argv_span > 1) {
    std::memset(g_argv_begin, 0, g_argv_span);
    std::memcpy(g_argv_begin, title.data(), std::min(title.size(), g_argv_span - 1));
  }
  prctl(PR_SET_NAME, title.substr(0, 15).c_str(), 0, 0, 0);
}

IthbatFakeCudaCosts g_costs{};
bool g_have_costs = false;

// One GPU driven from this process: a context, a stream, the kernels, the model's memory.
class LocalGpu {
 public:
  // Empty string on success, else what went wrong (vLLM-like).
  std::string Init(int ordinal, const ServeSpec& spec) {
    CU(cuInit(0));
    int count = 0;
    CU(cuDeviceGetCount(&count));
    if (ordinal >= count)
      return fmt::format("RuntimeError: CUDA error: invalid device ordinal {} ({} visible)", ordinal, count);
    if (!costs_set_) {
      // Kernel durations: the fake costs a kernel kernel_ns + ns_per_block × blocks (process-wide).
      auto get =
          reinterpret_cast<ithbat_fake_cuda_get_costs_fn>(dlsym(RTLD_DEFAULT, "ithbat_fake_cuda_get_costs"));
      auto set =
          reinterpret_cast<ithbat_fake_cuda_set_costs_fn>(dlsym(RTLD_DEFAULT, "ithbat_fake_cuda_set_costs"));
      if (get != nullptr) {
        get(&g_costs);
        if (g_costs.ns_per_block <= 0 && set != nullptr) {
          g_costs.ns_per_block = 100;
          g_costs.kernel_ns = std::min<int64_t>(g_costs.kernel_ns, 2000);
          set(&g_costs);
          get(&g_costs);
        }
        g_have_costs = true;
      }
      costs_set_ = true;
    }
    CUdevice dev = 0;
    CU(cuDeviceGet(&dev, ordinal));
    CU(cuDevicePrimaryCtxRetain(&ctx_, dev));
    CU(cuCtxSetCurrent(ctx_));
    CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    std::string ptx = ".version 7.0\n.target sm_80\n.address_size 64\n";
    for (std::string_view n : ServeKernelNames())
      ptx += fmt::format(".visible .entry {}()\n{{\n\tret;\n}}\n", n);
    CUmodule mod = nullptr;
    CU(cuModuleLoadData(&mod, ptx.c_str()));
    for (std::string_view n : ServeKernelNames()) {
      CUfunction f = nullptr;
      CU(cuModuleGetFunction(&f, mod, std::string(n).c_str()));
      fns_.push_back(f);
    }
    const uint64_t tp = static_cast<uint64_t>(spec.tensor_parallel);
    const uint64_t weights = spec.model_bytes / tp;
    const uint64_t kv = static_cast<uint64_t>(spec.kv_capacity_tokens) * spec.kv_bytes_per_token / tp;
    constexpr uint64_t kWorkspace = uint64_t{1} << 30;  // activations, CUDA graphs, sampler
    size_t total = 0;
    CU(cuDeviceTotalMem_v2(&total, dev));
    if (Alloc(weights + kWorkspace) < weights + kWorkspace)
      return fmt::format(
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2f} GiB. GPU {} has a total "
          "capacity of {:.2f} GiB",
          static_cast<double>(weights) / (1 << 30), ordinal, static_cast<double>(total) / (1 << 30));
    const uint64_t got = Alloc(kv);
    if (got < kv)
      std::fprintf(stderr,
                   "WARNING: GPU %d: KV cache of %.2f GiB reserved %.2f GiB (the rest does not fit)\n",
                   ordinal, static_cast<double>(kv) / (1 << 30), static_cast<double>(got) / (1 << 30));
    return "";
  }

  void Launch(std::span<const std::pair<uint8_t, int64_t>> kernels) {
    CU(cuCtxSetCurrent(ctx_));
    for (const auto& [id, ns] : kernels) {
      unsigned grid[3] = {1, 1, 1};
      if (g_have_costs) ithbat::sim::cuda::GridForDuration(g_costs, ns, grid);
      CU(cuLaunchKernel(fns_.at(id), grid[0], grid[1], grid[2], 128, 1, 1, 0, stream_, nullptr, nullptr));
    }
  }
  void Sync() {
    CU(cuCtxSetCurrent(ctx_));
    CU(cuStreamSynchronize(stream_));
  }

 private:
  // Allocates up to `bytes` in allocator-sized segments; returns what it got.
  static uint64_t Alloc(uint64_t bytes) {
    uint64_t got = 0;
    while (got < bytes) {
      const size_t seg = static_cast<size_t>(std::min<uint64_t>(bytes - got, uint64_t{2} << 30));
      CUdeviceptr p = 0;
      if (cuMemAlloc_v2(&p, seg) != CUDA_SUCCESS) break;
      got += seg;
    }
    return got;
  }
  static inline bool costs_set_ = false;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUfunction> fns_;
};

// A step's kernels as ids into ServeKernelNames().
std::vector<std::pair<uint8_t, int64_t>> KernelIds(const std::vector<KernelLaunch>& kernels) {
  const auto names = ServeKernelNames();
  std::vector<std::pair<uint8_t, int64_t>> out;
  for (const KernelLaunch& k : kernels) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == k.name) out.emplace_back(static_cast<uint8_t>(i), k.ns);
    }
  }
  return out;
}

// The parent's handle on one GPU: in this process, or a worker process behind two pipes.
class GpuExec {
 public:
  virtual ~GpuExec() = default;
  virtual void Launch(std::span<const std::pair<uint8_t, int64_t>> kernels) = 0;
  virtual void Sync() = 0;
};

class LocalExec final : public GpuExec {
 public:
  explicit LocalExec(LocalGpu* g) : g_(g) {}
  void Launch(std::span<const std::pair<uint8_t, int64_t>> k) override { g_->Launch(k); }
  void Sync() override { g_->Sync(); }

 private:
  LocalGpu* g_;
};

// Pipe protocol (fixed-size messages, atomic on a pipe): 'L' launch n kernels, 'S' synchronise
// and answer one byte. A worker answers one byte after start-up: 0 ready, 1 failed.
struct StepMsg {
  uint8_t op = 0;
  uint8_t n = 0;
  uint8_t ids[6] = {};
  int64_t ns[6] = {};
};
static_assert(sizeof(StepMsg) == 56);

bool ReadFull(int fd, void* buf, size_t len) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t r = read(fd, p, len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    len -= static_cast<size_t>(r);
  }
  return true;
}
bool WriteFull(int fd, const void* buf, size_t len) {
  const auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t r = write(fd, p, len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    len -= static_cast<size_t>(r);
  }
  return true;
}

struct WorkerLink {
  int ordinal = 0;
  int cmd[2] = {-1, -1};  // parent writes cmd[1], worker reads cmd[0]
  int ack[2] = {-1, -1};  // worker writes ack[1], parent reads ack[0]
};

class RemoteExec final : public GpuExec {
 public:
  RemoteExec(int cmd_fd, int ack_fd) : cmd_(cmd_fd), ack_(ack_fd) {}
  void Launch(std::span<const std::pair<uint8_t, int64_t>> kernels) override {
    for (size_t i = 0; i < kernels.size(); i += 6) {
      StepMsg m;
      m.op = 'L';
      for (size_t j = i; j < kernels.size() && j < i + 6; ++j) {
        m.ids[m.n] = kernels[j].first;
        m.ns[m.n++] = kernels[j].second;
      }
      if (!WriteFull(cmd_, &m, sizeof(m))) Die("RuntimeError: Engine core died unexpectedly");
    }
  }
  void Sync() override {
    StepMsg m;
    m.op = 'S';
    char ack = 0;
    if (!WriteFull(cmd_, &m, sizeof(m)) || !ReadFull(ack_, &ack, 1))
      Die("RuntimeError: Engine core died unexpectedly");
  }
  void Close() {
    if (cmd_ >= 0) close(cmd_);
    cmd_ = -1;
  }

 private:
  int cmd_, ack_;
};

// A worker process's life: set up its GPU, answer, then run the parent's commands until EOF.
[[noreturn]] void WorkerMain(const WorkerLink& link, const ServeSpec& spec, const std::string& title) {
  SetProcTitle(title);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  LocalGpu gpu;
  const std::string err = gpu.Init(link.ordinal, spec);
  const char ready = err.empty() ? 0 : 1;
  if (!err.empty()) std::fprintf(stderr, "%s\n", err.c_str());
  WriteFull(link.ack[1], &ready, 1);
  if (!err.empty()) std::exit(1);
  std::vector<std::pair<uint8_t, int64_t>> kernels;
  StepMsg m;
  while (ReadFull(link.cmd[0], &m, sizeof(m))) {
    if (m.op == 'L') {
      kernels.clear();
      for (uint8_t i = 0; i < m.n && i < 6; ++i)
        if (m.ids[i] < ServeKernelNames().size()) kernels.emplace_back(m.ids[i], m.ns[i]);
      gpu.Launch(kernels);
    } else if (m.op == 'S') {
      gpu.Sync();
      const char ok = 'k';
      if (!WriteFull(link.ack[1], &ok, 1)) break;
    }
  }
  std::exit(0);  // atexit: the fake driver flushes the timeline and leaves NVML's process list
}

struct Replica {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<ReplicaEngine> engine;
  std::deque<Request> inbox;
  std::vector<GpuExec*> gpus;
  std::thread thread;
  // Stats interval bookkeeping (stats thread only).
  uint64_t last_prompt = 0, last_gen = 0;
  std::deque<std::pair<uint64_t, uint64_t>> hit_window{{0, 0}};  // (queries, hits) at each interval's end
  bool last_active = false;
};

class Server {
 public:
  explicit Server(ServeSpec spec, std::string host) : spec_(std::move(spec)), host_(std::move(host)) {}

  void Start() {
    // Children first: no thread and no CUDA call may precede a fork.
    const bool split = spec_.metrics == ithbat::scenario::MetricsStyle::kVllmV1 &&
                       spec_.engine == ithbat::scenario::Engine::kContinuous;
    if (split) {
      SpawnEngineCores();
    } else {
      SetupLocal();
    }
    const int64_t n = Replicas(spec_);
    for (int64_t i = 0; i < n; ++i) {
      auto r = std::make_unique<Replica>();
      r->engine = std::make_unique<ReplicaEngine>(spec_);
      for (int64_t g = 0; g < spec_.tensor_parallel; ++g)
        r->gpus.push_back(execs_[static_cast<size_t>(i * spec_.tensor_parallel + g)].get());
      replicas_.push_back(std::move(r));
    }
    created_s_ = RealS();
    StartHttp();
    Banner();
    for (auto& r : replicas_) r->thread = std::thread([this, p = r.get()] { EngineLoop(*p); });
    load_thread_ = std::thread([this] { LoadLoop(); });
    stats_thread_ = std::thread([this] { StatsLoop(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(stop_mu_);
      stop_.store(true);
    }
    stop_cv_.notify_all();
    for (auto& r : replicas_) {
      std::lock_guard<std::mutex> l(r->mu);
      r->cv.notify_all();
    }
    http_.stop();
    if (http_thread_.joinable()) http_thread_.join();
    if (load_thread_.joinable()) load_thread_.join();
    if (stats_thread_.joinable()) stats_thread_.join();
    for (auto& r : replicas_)
      if (r->thread.joinable()) r->thread.join();
    ReapChildren();
    const bool v1 = spec_.metrics == ithbat::scenario::MetricsStyle::kVllmV1;
    PrintLine(
        fmt::format("{}INFO:     Shutting down", v1 ? fmt::format("(APIServer pid={}) ", getpid()) : ""));
    PrintLine(fmt::format("{}INFO:     Application shutdown complete.",
                          v1 ? fmt::format("(APIServer pid={}) ", getpid()) : ""));
  }

 private:
  // A V0 or naive server: every GPU driven from this process.
  void SetupLocal() {
    for (int g = 0; g < spec_.gpus; ++g) {
      local_.push_back(std::make_unique<LocalGpu>());
      const std::string err = local_.back()->Init(g, spec_);
      if (!err.empty()) Die(err);
      execs_.push_back(std::make_unique<LocalExec>(local_.back().get()));
    }
  }

  // A V1 server: one EngineCore per replica, holding its GPU (tp = 1) or starting a worker
  // per GPU (tp > 1).
  void SpawnEngineCores() {
    const int64_t n = Replicas(spec_);
    const int64_t tp = spec_.tensor_parallel;
    std::vector<WorkerLink> links(static_cast<size_t>(spec_.gpus));
    for (size_t g = 0; g < links.size(); ++g) {
      links[g].ordinal = static_cast<int>(g);
      if (pipe2(links[g].cmd, O_CLOEXEC) != 0 || pipe2(links[g].ack, O_CLOEXEC) != 0)
        Die(fmt::format("OSError: pipe: {}", std::strerror(errno)));
    }
    auto close_fd = [](int& fd) {
      if (fd >= 0) close(fd);
      fd = -1;
    };
    // In a child: keep only the worker ends of links [first, last).
    auto keep_only = [&](size_t first, size_t last) {
      for (size_t k = 0; k < links.size(); ++k) {
        close_fd(links[k].cmd[1]);
        close_fd(links[k].ack[0]);
        if (k < first || k >= last) {
          close_fd(links[k].cmd[0]);
          close_fd(links[k].ack[1]);
        }
      }
    };
    std::fflush(stdout);
    std::fflush(stderr);
    for (int64_t r = 0; r < n; ++r) {
      const size_t first = static_cast<size_t>(r * tp), last = first + static_cast<size_t>(tp);
      const pid_t pid = fork();
      if (pid < 0) Die(fmt::format("OSError: fork: {}", std::strerror(errno)));
      if (pid > 0) {
        children_.push_back(pid);
        continue;
      }
      keep_only(first, last);
      const std::string core = n > 1 ? fmt::format("VLLM::EngineCore_DP{}", r) : "VLLM::EngineCore";
      if (tp == 1) WorkerMain(links[first], spec_, core);
      SetProcTitle(core);
      prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
      for (size_t g = first; g < last; ++g) {
        const pid_t w = fork();
        if (w == 0) {
          keep_only(g, g + 1);
          const int64_t rank = static_cast<int64_t>(g - first);
          WorkerMain(links[g], spec_,
                     n > 1 ? fmt::format("VLLM::Worker_DP{}_TP{}", r, rank)
                           : fmt::format("VLLM::Worker_TP{}", rank));
        }
      }
      keep_only(0, 0);
      while (wait(nullptr) > 0 || errno == EINTR) {
      }
      std::exit(0);
    }
    for (WorkerLink& l : links) {
      close_fd(l.cmd[0]);
      close_fd(l.ack[1]);
    }
    for (WorkerLink& l : links) {
      char ready = 1;
      if (!ReadFull(l.ack[0], &ready, 1) || ready != 0) {
        for (pid_t c : children_) kill(c, SIGKILL);
        ReapChildren();
        Die("RuntimeError: Engine core initialization failed. See root cause above.");
      }
      remote_.push_back(new RemoteExec(l.cmd[1], l.ack[0]));
      execs_.emplace_back(remote_.back());
    }
  }

  // Closes the workers' command pipes (they exit) and waits for the children, SIGKILL after 10 s.
  void ReapChildren() {
    for (RemoteExec* r : remote_) r->Close();
    const int64_t deadline = MonoNs() + 10'000'000'000LL;
    for (pid_t c : children_) {
      while (waitpid(c, nullptr, WNOHANG) == 0) {
        if (MonoNs() > deadline) {
          kill(c, SIGKILL);
          waitpid(c, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    children_.clear();
  }

  void Banner() {
    const bool v1 = spec_.metrics == ithbat::scenario::MetricsStyle::kVllmV1;
    const std::string t = LocalStamp();
    if (v1) {
      const std::string pre = fmt::format("(APIServer pid={}) ", getpid());
      PrintLine(fmt::format("{}INFO {} [api_server.py:1805] vLLM API server version 0.10.1.1", pre, t));
      PrintLine(fmt::format("{}INFO {} [api_server.py:1857] Starting vLLM API server 0 on http://{}:{}", pre,
                            t, host_, spec_.port));
      PrintLine(fmt::format("{}INFO:     Started server process [{}]", pre, getpid()));
      PrintLine(fmt::format("{}INFO:     Application startup complete.", pre));
    } else {
      PrintLine(fmt::format("INFO {} api_server.py:546] vLLM API server version 0.6.3.post1", t));
      PrintLine(fmt::format("INFO:     Started server process [{}]", getpid()));
      PrintLine(
          fmt::format("INFO:     Uvicorn running on http://{}:{} (Press CTRL+C to quit)", host_, spec_.port));
    }
  }

  void StartHttp() {
    http_.new_task_queue = [] { return new httplib::ThreadPool(4); };
    http_.set_keep_alive_timeout(2);
    // uvicorn's access log, as vLLM prints it (every scrape shows up in the job's output).
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const bool v1 = spec_.metrics == ithbat::scenario::MetricsStyle::kVllmV1;
      const char* reason = res.status == 200 ? "OK" : res.status == 404 ? "Not Found" : "";
      PrintLine(fmt::format("{}INFO:     {}:{} - \"{} {} {}\" {} {}",
                            v1 ? fmt::format("(APIServer pid={}) ", getpid()) : "", req.remote_addr,
                            req.remote_port, req.method, req.path.substr(0, 256), req.version, res.status,
                            reason));
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    http_.Get("/version", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"version":"0.10.1.1"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const std::string& m = ModelLabel(spec_);
      std::string esc;
      for (char c : m) {
        if (c == '"' || c == '\\') esc += '\\';
        esc += c;
      }
      res.set_content(
          fmt::format(
              R"({{"object":"list","data":[{{"id":"{}","object":"model","owned_by":"vllm","root":"{}","max_model_len":{}}}]}})",
              esc, esc, spec_.max_model_len),
          "application/json");
    });
    if (!http_.bind_to_port(host_.c_str(), static_cast<int>(spec_.port)))
      Die(fmt::format(
          "ERROR:    [Errno 98] error while attempting to bind on address ('{}', {}): address already in use",
          host_, spec_.port));
    http_thread_ = std::thread([this] { http_.listen_after_bind(); });
  }

  std::string Metrics() {
    std::vector<ReplicaView> views(replicas_.size());
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(replicas_.size());
    for (size_t i = 0; i < replicas_.size(); ++i) {
      locks.emplace_back(replicas_[i]->mu);
      const ReplicaEngine& e = *replicas_[i]->engine;
      views[i] = ReplicaView{e.running(), e.waiting() + static_cast<int64_t>(replicas_[i]->inbox.size()),
                             e.used_blocks(), e.total_blocks(), &e.counters()};
    }
    MetricsContext ctx{created_s_, last_prompt_tps_.load(), last_gen_tps_.load()};
    return RenderMetrics(spec_, views, ctx);
  }

  // ---- the engine of one replica ----
  void Launch(Replica& r, const StepPlan& plan) {
    const auto kernels = KernelIds(StepKernels(plan, spec_.costs));
    for (GpuExec* g : r.gpus) g->Launch(kernels);
  }

  void EngineLoop(Replica& r) {
    while (!stop_.load()) {
      StepPlan plan;
      int64_t start = 0;
      {
        std::unique_lock<std::mutex> l(r.mu);
        r.cv.wait(l, [&] {
          return stop_.load() || !r.inbox.empty() || r.engine->running() > 0 || r.engine->waiting() > 0;
        });
        if (stop_.load()) break;
        while (!r.inbox.empty()) {
          if (!r.engine->Enqueue(r.inbox.front())) ++refused_;
          r.inbox.pop_front();
        }
        start = MonoNs();
        plan = r.engine->Plan(start);
        if (plan.empty()) {  // work queued that cannot be admitted now: wait for a change
          r.cv.wait_for(l, std::chrono::milliseconds(50));
          continue;
        }
      }
      Launch(r, plan);
      int64_t group_ns = plan.gpu_ns;
      int64_t host_ns = plan.host_ns;
      // Short decode steps share one synchronisation (vLLM's multi-step scheduling does the
      // same); each is finished at the time it ends on the GPU.
      while (plan.prefill_tokens == 0 && group_ns < kMinSyncNs && !stop_.load()) {
        std::lock_guard<std::mutex> l(r.mu);
        if (!r.inbox.empty()) break;
        r.engine->Finish(start + group_ns);
        plan = r.engine->Plan(start + group_ns);
        if (plan.empty()) break;
        Launch(r, plan);
        group_ns += plan.gpu_ns;
        host_ns += plan.host_ns;
      }
      for (GpuExec* g : r.gpus) g->Sync();
      {
        std::lock_guard<std::mutex> l(r.mu);
        r.engine->Finish(MonoNs());
      }
      if (host_ns > 0) {  // the CPU's share of the steps: scheduling, sampling, Python
        std::unique_lock<std::mutex> l(stop_mu_);
        stop_cv_.wait_for(l, std::chrono::nanoseconds(host_ns), [&] { return stop_.load(); });
      }
    }
  }

  // ---- the clients ----
  void LoadLoop() {
    ArrivalGenerator gen(spec_, MonoNs());
    uint64_t turn = 0;
    std::vector<int64_t> loads(replicas_.size());
    while (!stop_.load()) {
      const Request req = gen.Next();
      if (req.arrival_ns == INT64_MAX) {
        std::unique_lock<std::mutex> l(stop_mu_);
        stop_cv_.wait(l, [&] { return stop_.load(); });
        break;
      }
      {
        std::unique_lock<std::mutex> l(stop_mu_);
        const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(req.arrival_ns));
        if (stop_cv_.wait_until(l, until, [&] { return stop_.load(); })) break;
      }
      for (size_t i = 0; i < replicas_.size(); ++i) {
        std::lock_guard<std::mutex> l(replicas_[i]->mu);
        loads[i] = replicas_[i]->engine->running() + replicas_[i]->engine->waiting() +
                   static_cast<int64_t>(replicas_[i]->inbox.size());
      }
      Replica& r = *replicas_[PickReplica(loads, &turn)];
      std::lock_guard<std::mutex> l(r.mu);
      if (r.inbox.size() < kMaxInbox) {
        r.inbox.push_back(req);
        r.cv.notify_one();
      } else {
        ++refused_;
      }
    }
  }

  // ---- vLLM's periodic stats line ----
  void StatsLoop() {
    const double interval = StatsIntervalS(spec_);
    const bool v1 = spec_.metrics == ithbat::scenario::MetricsStyle::kVllmV1;
    int64_t last = MonoNs();
    while (true) {
      {
        std::unique_lock<std::mutex> l(stop_mu_);
        const auto until = std::chrono::steady_clock::time_point(
            std::chrono::nanoseconds(last + static_cast<int64_t>(interval * 1e9)));
        if (stop_cv_.wait_until(l, until, [&] { return stop_.load(); })) return;
      }
      const int64_t now = MonoNs();
      const double dt = std::max(1e-9, static_cast<double>(now - last) / 1e9);
      last = now;
      const std::string t = LocalStamp();
      StatsSample total;
      int64_t used = 0, blocks = 0;
      uint64_t wq = 0, wh = 0;
      for (size_t i = 0; i < replicas_.size(); ++i) {
        Replica& r = *replicas_[i];
        StatsSample s;
        uint64_t q = 0, h = 0;
        {
          std::lock_guard<std::mutex> l(r.mu);
          const ReplicaCounters& c = r.engine->counters();
          s.prompt_throughput = static_cast<double>(c.prompt_tokens - r.last_prompt) / dt;
          s.generation_throughput = static_cast<double>(c.generation_tokens - r.last_gen) / dt;
          r.last_prompt = c.prompt_tokens;
          r.last_gen = c.generation_tokens;
          s.running = r.engine->running();
          s.waiting = r.engine->waiting() + static_cast<int64_t>(r.inbox.size());
          s.kv_usage = r.engine->kv_usage();
          used += r.engine->used_blocks();
          blocks += r.engine->total_blocks();
          q = c.prefix_queries;
          h = c.prefix_hits;
        }
        // The hit rate over recent lookups (vLLM keeps a window of the last queries).
        r.hit_window.emplace_back(q, h);
        while (r.hit_window.size() > 7) r.hit_window.pop_front();
        const auto& [q0, h0] = r.hit_window.front();
        s.prefix_hit_rate = q > q0 ? static_cast<double>(h - h0) / static_cast<double>(q - q0) : 0.0;
        wq += q - q0;
        wh += h - h0;
        total.prompt_throughput += s.prompt_throughput;
        total.generation_throughput += s.generation_throughput;
        total.running += s.running;
        total.waiting += s.waiting;
        if (v1) {
          // V1 logs at INFO only while there is traffic (else at DEBUG, not shown).
          const bool active = s.prompt_throughput > 0 || s.generation_throughput > 0;
          if (active || r.last_active) {
            for (const std::string& line : StatsLines(spec_, getpid(), t, static_cast<int64_t>(i), s))
              PrintLine(line);
          }
          r.last_active = active;
        }
      }
      last_prompt_tps_.store(total.prompt_throughput);
      last_gen_tps_.store(total.generation_throughput);
      if (!v1) {
        total.kv_usage = blocks > 0 ? static_cast<double>(used) / static_cast<double>(blocks) : 0.0;
        total.prefix_hit_rate = wq > 0 ? static_cast<double>(wh) / static_cast<double>(wq) : 0.0;
        for (const std::string& line : StatsLines(spec_, getpid(), t, 0, total)) PrintLine(line);
      }
    }
  }

  ServeSpec spec_;
  std::string host_;
  std::vector<std::unique_ptr<LocalGpu>> local_;
  std::vector<RemoteExec*> remote_;              // owned by execs_
  std::vector<std::unique_ptr<GpuExec>> execs_;  // one per GPU, in device order
  std::vector<pid_t> children_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  httplib::Server http_;
  std::thread http_thread_, load_thread_, stats_thread_;
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<double> last_prompt_tps_{0}, last_gen_tps_{0};
  double created_s_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv, argv + argc);
  if (argc > 0) {
    g_argv_begin = argv[0];
    g_argv_span = static_cast<size_t>(argv[argc - 1] + std::strlen(argv[argc - 1]) + 1 - argv[0]);
  }
  auto parsed = ParseServeArgs(args);
  if (!parsed) {
    std::fprintf(stderr, "error: %s\n", parsed.error().message.c_str());
    return 1;
  }
  std::string spec_path = parsed->spec_path;
  if (spec_path.empty()) {
    const char* env = std::getenv("ITHBAT_SIM_SPEC");
    if (env != nullptr) spec_path = env;
  }
  ServeSpec spec;
  if (!spec_path.empty()) {
    auto s = ReadServeSpecFile(spec_path);
    if (!s) {
      std::fprintf(stderr, "error: %s\n", s.error().message.c_str());
      return 1;
    }
    spec = std::move(*s);
  }
  if (auto st = ApplyServeArgs(*parsed, &spec); !st) {
    std::fprintf(stderr, "error: %s\n", st.error().message.c_str());
    return 1;
  }
  // vLLM's logging handler writes each record to stdout and flushes it.
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // Signals are taken by the main thread only (every thread started below inherits the mask).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Server server(spec, parsed->host);
  server.Start();
  const int64_t deadline =
      spec.duration_s > 0 ? MonoNs() + static_cast<int64_t>(spec.duration_s * 1e9) : INT64_MAX;
  while (true) {
    const int64_t left = deadline == INT64_MAX ? int64_t{3600} * 1'000'000'000 : deadline - MonoNs();
    if (left <= 0) break;
    timespec ts{left / 1'000'000'000, left % 1'000'000'000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) break;
  }
  server.Stop();
  return 0;
}
