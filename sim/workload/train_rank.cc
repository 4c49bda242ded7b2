// ithbat-sim-train: one rank of a simulated training job (sim/workload/README.md). Everything it
// does is real to an observer: real data-loader processes burning CPU, kernel launches and NCCL
// calls through libcuda/libnccl (the fakes here, the real ones on a GPU node), real checkpoint
// bytes, the framework's real log lines on stdout/stderr.
//
// Usage: ithbat-sim-train --spec FILE   (or ITHBAT_SIM_SPEC=FILE)
// Identity: RANK or SLURM_PROCID; LOCAL_RANK or SLURM_LOCALID; WORLD_SIZE or SLURM_NTASKS (must
// match the spec). Files under ITHBAT_SIM_RUN_DIR (default: the spec's directory): nccl/*.id,
// rank<R>.truth.jsonl, rank<R>.progress, rank<R>.inject.
// Exit: the spec's exit_code after the last step; 1 when a CUDA/NCCL call or the setup fails
// (message on stderr), or on an injected crash; 2 usage.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "fake_cuda/cuda_abi.h"
#include "fake_nccl/nccl_abi.h"
#include "scenario/rng.h"
#include "workload/log_formats.h"
#include "workload/train_model.h"
#include "workload/train_spec.h"

namespace {

using namespace ithbat::sim::workload;  // NOLINT: a program's own namespace
namespace fs = std::filesystem;
using ithbat::scenario::CollectiveOp;
using ithbat::scenario::CommGroup;

constexpr const char* kProg = "ithbat-sim-train";

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t WallNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
void SleepNs(int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

[[noreturn]] void Die(const std::string& why, int code = 1) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
  std::_Exit(code);
}

#define CU(call)                                                                             \
  do {                                                                                       \
    const CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) Die(fmt::format("{} failed: CUresult {}", #call, static_cast<int>(r_))); \
  } while (0)
#define NC(call)                                                                             \
  do {                                                                                       \
    const ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) Die(fmt::format("{} failed: {}", #call, ncclGetErrorString(r_))); \
  } while (0)

std::optional<int64_t> EnvInt(const char* a, const char* b) {
  for (const char* name : {a, b}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (end != v && *end == '\0' && x >= 0) return x;
  }
  return std::nullopt;
}

// Writes `text` to `path` whole (tmp file, then rename), so a reader never sees half of it.
bool WriteWhole(const std::string& path, std::string_view text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

void BurnCpuNs(int64_t ns) {
  if (ns <= 0) return;
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  const int64_t until = cpu() + ns;
  volatile uint64_t x = 88172645463325252ULL;
  while (cpu() < until) {
    for (int i = 0; i < 20000; ++i) x = x ^ (x << 13) ^ (x >> 7);  // real work between clock reads
  }
}

// ---- data loader ---------------------------------------------------------------------------

// PyTorch's DataLoader with workers: batch i comes from worker i % W, each worker has at most
// prefetch_factor (2) requests outstanding, the main process blocks reading the batch it needs.
class DataLoader {
 public:
  struct Batch {
    int64_t step = 0;
    int64_t tokens = 0;
  };

  DataLoader(const TrainSpec& spec, int64_t rank) : spec_(spec), rank_(rank) {}

  // Forks the workers; call before any thread or CUDA exists.
  void Start(int64_t first_step, int64_t last_step) {
    first_ = first_step;
    last_ = last_step;
    const int64_t n = spec_.data_loader.workers;
    const pid_t parent = getpid();
    for (int64_t w = 0; w < n; ++w) {
      int req[2], resp[2];
      if (pipe2(req, O_CLOEXEC) != 0 || pipe2(resp, O_CLOEXEC) != 0) Die("pipe failed");
      const pid_t pid = fork();
      if (pid < 0) Die("fork failed");
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) std::_Exit(0);
        prctl(PR_SET_NAME, "pt_data_worker");
        close(req[1]);
        close(resp[0]);
        for (auto& wk : workers_) {
          close(wk.req);
          close(wk.resp);
        }
        WorkerLoop(req[0], resp[1]);
        std::_Exit(0);
      }
      close(req[0]);
      close(resp[1]);
      workers_.push_back({pid, req[1], resp[0]});
    }
    for (int64_t s = first_; s <= last_ && s < first_ + 2 * n; ++s) Request(s);
  }

  Batch Next(int64_t step) {
    const int64_t n = static_cast<int64_t>(workers_.size());
    if (n == 0) {
      BurnCpuNs(static_cast<int64_t>(spec_.data_loader.cpu_ms_per_batch * 1e6));
      return {step, StepTokens(spec_.work, spec_.seed, rank_, step)};
    }
    const Worker& w = workers_[static_cast<size_t>((step - first_) % n)];
    Batch b;
    size_t got = 0;
    while (got < sizeof(b)) {
      const ssize_t r = read(w.resp, reinterpret_cast<char*>(&b) + got, sizeof(b) - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) Die("a data-loader worker died");
      got += static_cast<size_t>(r);
    }
    if (step + 2 * n <= last_) Request(step + 2 * n);
    return b;
  }

  void Stop() {
    for (auto& w : workers_) {
      close(w.req);
      close(w.resp);
    }
    for (auto& w : workers_) {
      int st = 0;
      waitpid(w.pid, &st, 0);
    }
    workers_.clear();
  }

 private:
  struct Worker {
    pid_t pid;
    int req;
    int resp;
  };

  void Request(int64_t step) {
    const Worker& w = workers_[static_cast<size_t>((step - first_) % static_cast<int64_t>(workers_.size()))];
    if (write(w.req, &step, sizeof(step)) != static_cast<ssize_t>(sizeof(step))) Die("data-loader request failed");
  }

  void WorkerLoop(int req, int resp) {
    for (;;) {
      int64_t step = 0;
      const ssize_t r = read(req, &step, sizeof(step));
      if (r < 0 && errno == EINTR) continue;
      if (r != static_cast<ssize_t>(sizeof(step))) return;  // the main process closed: done
      BurnCpuNs(static_cast<int64_t>(spec_.data_loader.cpu_ms_per_batch * 1e6));
      const Batch b{step, StepTokens(spec_.work, spec_.seed, rank_, step)};
      if (write(resp, &b, sizeof(b)) != static_cast<ssize_t>(sizeof(b))) return;
    }
  }

  const TrainSpec& spec_;
  int64_t rank_;
  int64_t first_ = 0;
  int64_t last_ = 0;
  std::vector<Worker> workers_;
};

// ---- the rank ------------------------------------------------------------------------------

struct Comm {
  CommGroup group;
  GroupPlace place;
  ncclComm_t comm = nullptr;
  int pg = 0;             // PyTorch's process-group number (0 = the default group)
  int64_t pg_seq = 0;     // works enqueued on it (PyTorch's SeqNum, 1-based)
};

// A collective the watchdog waits for (ProcessGroupNCCL's WorkNCCL).
struct Watched {
  const Comm* comm;
  int64_t seq;
  const char* op;
  size_t numel_in;
  size_t numel_out;
  int64_t enqueued_ns;
  size_t event;
};

struct InjectFile {
  struct stat st {};
  size_t lines = 0;
};

struct PendingStep {
  int64_t step;
  int64_t host_start_ns;
  int64_t tokens;
  double loss;
  size_t event;
  int64_t planned_ns;  // what the script asks of the step (PlannedStepNs)
};

class Rank {
 public:
  Rank(TrainSpec spec, std::string run_dir, int64_t rank, int64_t local_rank)
      : spec_(std::move(spec)),
        run_dir_(std::move(run_dir)),
        rank_(rank),
        local_rank_(local_rank),
        loader_(spec_, rank),
        fmt_(spec_.log.format, static_cast<int>(rank)),
        prints_(spec_.log.ranks == ithbat::scenario::LogRanks::kAll || rank == 0) {}

  int Run();

 private:
  void SetupOutput();
  void SetupCuda();
  void SetupComms();
  void LoadFunctions();
  void Launch(const KernelPlan& k);
  void LaunchPhase(Phase phase, int64_t launches, int64_t ns, const std::vector<const TrainCollectiveSpec*>& colls);
  void IssueCollective(const TrainCollectiveSpec& c);
  void Watch(Comm& comm, const char* op, size_t in, size_t out);
  void WatchdogThread();
  void Barrier();
  void BackwardThread();
  void PollInject(int64_t step);
  void JitterCheck();
  void Print(const std::vector<LogLine>& lines);
  void Truth(const std::string& line);
  void Progress(int64_t step);
  void SyncAndRecord();
  int64_t PlannedStepNs(int64_t compute_ns) const;
  void Save(int64_t step, const StepReport& report);
  void WriteCheckpoint(int64_t step, std::string dir);
  [[noreturn]] void HangForever();
  [[noreturn]] void Crash();

  TrainSpec spec_;
  std::string run_dir_;
  int64_t rank_;
  int64_t local_rank_;
  DataLoader loader_;
  LogFormatter fmt_;
  bool prints_;

  CUcontext ctx_ = nullptr;
  CUdevice dev_ = 0;
  CUstream comm_stream_ = nullptr;
  CUdeviceptr buf_ = 0;
  size_t total_mem_ = 0;
  std::map<std::string_view, CUfunction> functions_;
  IthbatFakeCudaCosts costs_{};
  bool have_costs_ = false;
  std::vector<Comm> comms_;
  std::vector<CUevent> events_;
  std::deque<PendingStep> pending_;
  int64_t prev_end_ns_ = 0;

  std::atomic<int64_t> collective_seq_{0};
  std::atomic<int64_t> hang_at_{-1};
  std::atomic<int64_t> progress_step_{0};
  int truth_fd_ = -1;
  std::mutex truth_mu_;

  // Autograd-like backward thread.
  std::mutex bw_mu_;
  std::condition_variable bw_cv_;
  int64_t bw_request_ = 0;  // step number to run, 0 = none
  int64_t bw_done_ = 0;
  int64_t bw_ns_ = 0;
  int64_t bw_launches_ = 0;
  bool bw_quit_ = false;
  std::vector<const TrainCollectiveSpec*> overlapped_;

  // Faults delivered at run time.
  InjectFile rank_inject_;
  InjectFile job_inject_;
  bool nan_ = false;
  int64_t spike_step_ = -1;
  double slow_factor_ = 1.0;
  int64_t slow_until_ns_ = 0;
  bool crash_ = false;

  // Host jitter.
  std::mutex jitter_mu_;
  int64_t next_burst_ns_ = INT64_MAX;
  int64_t stall_until_ns_ = 0;
  std::optional<ithbat::scenario::Rng> jitter_rng_;

  // Async checkpoints.
  std::thread ckpt_thread_;

  // NCCL watchdog.
  std::mutex watch_mu_;
  std::deque<Watched> watched_;
  std::vector<CUevent> watch_events_;
  std::vector<size_t> watch_free_;
  bool watch_quit_ = false;
  std::condition_variable watch_cv_;
};

void Rank::SetupOutput() {
  static std::vector<char> buffer;
  if (spec_.log.buffered) {
    if (spec_.log.buffer_bytes > 0) {
      buffer.resize(static_cast<size_t>(spec_.log.buffer_bytes));
      setvbuf(stdout, buffer.data(), _IOFBF, buffer.size());
    } else {
      setvbuf(stdout, nullptr, _IOFBF, 8192);  // Python's default for a pipe
    }
  } else {
    setvbuf(stdout, nullptr, _IOLBF, 0);
  }
  const std::string truth = fmt::format("{}/rank{}.truth.jsonl", run_dir_, rank_);
  truth_fd_ = open(truth.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (truth_fd_ < 0) Die(fmt::format("cannot open {}: {}", truth, std::strerror(errno)));
}

void Rank::SetupCuda() {
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  if (count == 0) Die("no CUDA device");
  // With CUDA_VISIBLE_DEVICES naming the rank's GPU the driver shows it as device 0.
  const int ordinal = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? 0 : static_cast<int>(local_rank_ % count);
  CU(cuDeviceGet(&dev_, ordinal));
  CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
  CU(cuCtxSetCurrent(ctx_));
  CU(cuDeviceTotalMem_v2(&total_mem_, dev_));
  CU(cuStreamCreate(&comm_stream_, CU_STREAM_NON_BLOCKING));
  // Kernel durations: the fake costs a kernel kernel_ns + ns_per_block × blocks; pick the grid
  // from that. A real driver has no such symbol (the grid then only shapes an empty kernel).
  auto get = reinterpret_cast<ithbat_fake_cuda_get_costs_fn>(dlsym(RTLD_DEFAULT, "ithbat_fake_cuda_get_costs"));
  auto set = reinterpret_cast<ithbat_fake_cuda_set_costs_fn>(dlsym(RTLD_DEFAULT, "ithbat_fake_cuda_set_costs"));
  if (get != nullptr) {
    IthbatFakeCudaCosts c{};
    get(&c);
    if (c.ns_per_block <= 0 && set != nullptr) {
      c.ns_per_block = 10;
      c.kernel_ns = std::min<int64_t>(c.kernel_ns, 2000);
      set(&c);
      get(&c);
    }
    costs_ = c;
    have_costs_ = true;
  }
  LoadFunctions();
  // The model's memory (weights, optimizer state, activations), in allocator-sized segments.
  uint64_t left = spec_.work.memory_bytes;
  while (left > 0) {
    const size_t seg = static_cast<size_t>(std::min<uint64_t>(left, uint64_t{2} << 30));
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, seg);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "[rank%lld]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total "
                   "capacity of %.2f GiB of which %.2f GiB is free.\n",
                   static_cast<long long>(rank_), static_cast<double>(seg) / (1 << 30), static_cast<int>(local_rank_),
                   static_cast<double>(total_mem_) / (1 << 30),
                   static_cast<double>(left > total_mem_ ? 0 : total_mem_ - (spec_.work.memory_bytes - left)) / (1 << 30));
      std::_Exit(1);
    }
    CU(r);
    left -= seg;
  }
  uint64_t comm_bytes = 4096;
  for (const auto& c : spec_.collectives) comm_bytes = std::max(comm_bytes, c.bytes);
  CU(cuMemAlloc_v2(&buf_, static_cast<size_t>(comm_bytes)));
  events_.resize(65);
  for (auto& e : events_) CU(cuEventCreate(&e, 0));
}

void Rank::LoadFunctions() {
  // A PTX module with one empty kernel per name, so the same program runs on a real driver.
  std::string ptx = ".version 7.0\n.target sm_80\n.address_size 64\n";
  for (std::string_view n : AllKernelNames()) ptx += fmt::format(".visible .entry {}()\n{{\n\tret;\n}}\n", n);
  CUmodule mod = nullptr;
  CU(cuModuleLoadData(&mod, ptx.c_str()));
  for (std::string_view n : AllKernelNames()) {
    CUfunction f = nullptr;
    CU(cuModuleGetFunction(&f, mod, std::string(n).c_str()));
    functions_[n] = f;
  }
}

void Rank::SetupComms() {
  std::vector<CommGroup> groups{CommGroup::kWorld};
  for (CommGroup g : {CommGroup::kTp, CommGroup::kDp, CommGroup::kPp}) {
    for (const auto& c : spec_.collectives)
      if (c.group == g && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  const std::string dir = run_dir_ + "/nccl";
  std::error_code ec;
  fs::create_directories(dir, ec);
  const double timeout_s = [] {
    const char* v = std::getenv("ITHBAT_SIM_NCCL_ID_TIMEOUT_S");
    return v != nullptr ? std::max(1.0, std::atof(v)) : 300.0;
  }();
  for (CommGroup g : groups) {
    Comm c{g, PlaceInGroup(g, rank_, spec_.tp, spec_.pp, spec_.dp), nullptr};
    const std::string path = fmt::format("{}/{}-{}.id", dir, ithbat::scenario::EnumName(g), c.place.index);
    ncclUniqueId id{};
    if (c.place.rank_in_group == 0) {
      NC(ncclGetUniqueId(&id));
      if (!WriteWhole(path, std::string_view(id.internal, sizeof(id.internal))))
        Die(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    } else {
      const int64_t deadline = MonoNs() + static_cast<int64_t>(timeout_s * 1e9);
      for (;;) {
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          const ssize_t n = read(fd, id.internal, sizeof(id.internal));
          close(fd);
          if (n == static_cast<ssize_t>(sizeof(id.internal))) break;
        }
        if (MonoNs() > deadline)
          Die(fmt::format("rank {}: no NCCL unique id in {} after {:.0f} s (did rank {} of the {} group start?)", rank_,
                          path, timeout_s, c.place.members.front(), ithbat::scenario::EnumName(g)));
        SleepNs(20'000'000);
      }
    }
    NC(ncclCommInitRank(&c.comm, static_cast<int>(c.place.members.size()), id, static_cast<int>(c.place.rank_in_group)));
    c.pg = static_cast<int>(comms_.size());
    comms_.push_back(std::move(c));
  }
}

void Rank::JitterCheck() {
  if (!jitter_rng_) return;
  const int64_t now = MonoNs();
  int64_t until = 0;
  {
    std::lock_guard<std::mutex> l(jitter_mu_);
    if (now >= next_burst_ns_) {
      stall_until_ns_ = now + static_cast<int64_t>(spec_.host_jitter.burst_ms * 1e6);
      const double mean_ns = 60e9 / spec_.host_jitter.bursts_per_min;
      next_burst_ns_ = stall_until_ns_ + static_cast<int64_t>(-std::log(1.0 - jitter_rng_->Uniform()) * mean_ns);
    }
    until = stall_until_ns_;
  }
  if (now < until) SleepNs(until - now);
}

void Rank::Launch(const KernelPlan& k) {
  unsigned grid[3] = {1, 1, 1};
  if (have_costs_ && ithbat::sim::cuda::GridForDuration(costs_, k.duration_ns, grid) < 0) grid[0] = grid[1] = grid[2] = 1;
  if (!have_costs_) grid[0] = 132;  // a real driver: a grid that fills an H100, the duration is the GPU's
  CU(cuLaunchKernel(functions_.at(k.name), grid[0], grid[1], grid[2], 128, 1, 1, 0, nullptr, nullptr, nullptr));
}

// Launches a phase's kernels on the compute stream; with `colls`, one collective after each
// equal share of them (DDP's gradient buckets, reduced as backward produces them).
void Rank::LaunchPhase(Phase phase, int64_t launches, int64_t ns, const std::vector<const TrainCollectiveSpec*>& colls) {
  const double share = spec_.work.tensor_share;
  const std::vector<KernelPlan> plan = PlanPhase(phase, launches, ns, share);
  const size_t buckets = colls.size();
  size_t next = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    if ((i & 63) == 0) JitterCheck();
    Launch(plan[i]);
    while (next < buckets && (i + 1) * buckets >= (next + 1) * plan.size()) {
      CUevent ev = events_.back();  // a scratch event: the wait captures it at call time
      CU(cuEventRecord(ev, nullptr));
      CU(cuStreamWaitEvent(comm_stream_, ev, 0));
      IssueCollective(*colls[next]);
      ++next;
    }
  }
}

void Rank::IssueCollective(const TrainCollectiveSpec& c) {
  const int64_t seq = collective_seq_.load();
  if (seq == hang_at_.load() || (spec_.hang && spec_.hang->rank == rank_ && spec_.hang->collective == seq)) HangForever();
  Comm* comm = nullptr;
  for (auto& x : comms_)
    if (x.group == c.group) comm = &x;
  if (comm == nullptr) Die("no communicator for a collective's group");
  const size_t n = comm->place.members.size();
  void* p = reinterpret_cast<void*>(buf_);
  const size_t count = std::max<size_t>(1, c.bytes / 4);
  const size_t part = std::max<size_t>(1, count / n);
  ncclComm_t cm = comm->comm;
  switch (c.op) {
    case CollectiveOp::kAllReduce:
      NC(ncclAllReduce(p, p, count, ncclFloat32, ncclSum, cm, comm_stream_));
      Watch(*comm, "ALLREDUCE", count, count);
      break;
    case CollectiveOp::kAllGather:
      NC(ncclAllGather(p, p, part, ncclFloat32, cm, comm_stream_));
      Watch(*comm, "_ALLGATHER_BASE", part, part * n);
      break;
    case CollectiveOp::kReduceScatter:
      NC(ncclReduceScatter(p, p, part, ncclFloat32, ncclSum, cm, comm_stream_));
      Watch(*comm, "_REDUCE_SCATTER_BASE", part * n, part);
      break;
    case CollectiveOp::kBroadcast:
      NC(ncclBroadcast(p, p, count, ncclFloat32, 0, cm, comm_stream_));
      Watch(*comm, "BROADCAST", count, count);
      break;
    case CollectiveOp::kAllToAll:  // as torch.distributed does it with NCCL: grouped send/recv
      NC(ncclGroupStart());
      for (size_t peer = 0; peer < n; ++peer) {
        NC(ncclSend(p, part, ncclFloat32, static_cast<int>(peer), cm, comm_stream_));
        NC(ncclRecv(p, part, ncclFloat32, static_cast<int>(peer), cm, comm_stream_));
      }
      NC(ncclGroupEnd());
      Watch(*comm, "ALLTOALL_BASE", part * n, part * n);
      break;
    case CollectiveOp::kSendRecv: {  // a pipeline's activations: from the previous stage, to the next
      const int64_t me = comm->place.rank_in_group;
      NC(ncclGroupStart());
      if (me > 0) NC(ncclRecv(p, count, ncclFloat32, static_cast<int>(me - 1), cm, comm_stream_));
      if (me + 1 < static_cast<int64_t>(n)) NC(ncclSend(p, count, ncclFloat32, static_cast<int>(me + 1), cm, comm_stream_));
      NC(ncclGroupEnd());
      Watch(*comm, me > 0 ? "RECV" : "SEND", count, count);
      break;
    }
  }
  collective_seq_.fetch_add(1);
}

void Rank::Watch(Comm& comm, const char* op, size_t in, size_t out) {
  ++comm.pg_seq;
  if (spec_.nccl_timeout_ms <= 0) return;
  std::lock_guard<std::mutex> l(watch_mu_);
  if (watch_free_.empty()) return;  // more in flight than the pool: those go unwatched
  const size_t ev = watch_free_.back();
  watch_free_.pop_back();
  CU(cuEventRecord(watch_events_[ev], comm_stream_));
  watched_.push_back({&comm, comm.pg_seq, op, in, out, MonoNs(), ev});
}

// ProcessGroupNCCL's watchdog: polls the oldest outstanding collective; past the timeout it says
// so the way PyTorch does and takes the process down (SIGABRT).
void Rank::WatchdogThread() {
  CU(cuCtxSetCurrent(ctx_));
  const auto timeout_ns = static_cast<int64_t>(spec_.nccl_timeout_ms * 1e6);
  const auto poll = std::chrono::nanoseconds(std::clamp<int64_t>(timeout_ns / 10, 1'000'000, 100'000'000));
  std::unique_lock<std::mutex> l(watch_mu_);
  for (;;) {
    if (watch_cv_.wait_for(l, poll, [&] { return watch_quit_; })) return;
    std::map<const Comm*, int64_t> completed;
    while (!watched_.empty() && cuEventQuery(watch_events_[watched_.front().event]) == CUDA_SUCCESS) {
      completed[watched_.front().comm] = watched_.front().seq;
      watch_free_.push_back(watched_.front().event);
      watched_.pop_front();
    }
    if (watched_.empty()) continue;
    const Watched& w = watched_.front();
    const int64_t ran_ns = MonoNs() - w.enqueued_ns;
    if (ran_ns < timeout_ns) continue;
    const int64_t now = WallNs();
    const time_t secs = static_cast<time_t>(now / 1'000'000'000);
    struct tm tm {};
    localtime_r(&secs, &tm);
    const std::string head = fmt::format("[rank{}]:[E{}{:02} {:02}:{:02}:{:02}.{:09} {} ProcessGroupNCCL.cpp:", rank_,
                                         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                                         now % 1'000'000'000, static_cast<long>(gettid()));
    const std::string pg = w.comm->pg == 0 ? fmt::format("Rank {}", rank_)
                                           : fmt::format("PG {} Rank {}", w.comm->pg, w.comm->place.rank_in_group);
    const int64_t timeout_ms = timeout_ns / 1'000'000;
    std::string text = fmt::format(
        "{}607] [{}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={}, OpType={}, NumelIn={}, "
        "NumelOut={}, Timeout(ms)={}) ran for {} milliseconds before timing out.\n",
        head, pg, w.seq, w.op, w.numel_in, w.numel_out, timeout_ms, ran_ns / 1'000'000);
    text += fmt::format(
        "{}1664] [{}] Exception (either an error or timeout) detected by watchdog at work: {}, last enqueued NCCL "
        "work: {}, last completed NCCL work: {}.\n",
        head, pg, w.seq, w.comm->pg_seq, w.seq - 1);
    text += fmt::format("{}630] [{}] Timeout at NCCL work: {}, last enqueued NCCL work: {}, last completed NCCL work: {}.\n",
                        head, pg, w.seq, w.comm->pg_seq, w.seq - 1);
    text += fmt::format("{}636] [{}] To avoid data inconsistency, we are taking the entire process down.\n", head, pg);
    text += "terminate called after throwing an instance of 'c10::DistBackendError'\n";
    if (write(2, text.data(), text.size()) < 0) {
      // Dying anyway.
    }
    Truth(fmt::format("{{\"watchdog_timeout\":{},\"at_ns\":{}}}\n", w.seq, now));
    signal(SIGABRT, SIG_DFL);
    struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    abort();
  }
}

// torch.distributed.barrier() with NCCL: a one-element all-reduce, waited for.
void Rank::Barrier() {
  TrainCollectiveSpec b;
  b.op = CollectiveOp::kAllReduce;
  b.bytes = 4;
  b.group = CommGroup::kWorld;
  IssueCollective(b);
  CU(cuStreamSynchronize(comm_stream_));
}

void Rank::HangForever() {
  const int64_t seq = collective_seq_.load();
  Truth(fmt::format("{{\"hang_collective\":{},\"at_ns\":{}}}\n", seq, WallNs()));
  WriteWhole(fmt::format("{}/rank{}.progress", run_dir_, rank_), fmt::format("{} {}\n", progress_step_.load(), seq));
  // Nothing on stdout/stderr: a hung rank says nothing (the agent must not read the answer).
  for (;;) pause();
}

void Rank::Crash() {
  std::fflush(stdout);
  std::fprintf(stderr,
               "[rank%lld]: Traceback (most recent call last):\n"
               "[rank%lld]:   File \"train.py\", line 412, in <module>\n"
               "[rank%lld]:     loss.backward()\n"
               "[rank%lld]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
               static_cast<long long>(rank_), static_cast<long long>(rank_), static_cast<long long>(rank_),
               static_cast<long long>(rank_));
  std::_Exit(1);
}

void Rank::BackwardThread() {
  CU(cuCtxSetCurrent(ctx_));
  for (;;) {
    int64_t step = 0, ns = 0, launches = 0;
    {
      std::unique_lock<std::mutex> l(bw_mu_);
      bw_cv_.wait(l, [&] { return bw_request_ != 0 || bw_quit_; });
      if (bw_quit_) return;
      step = bw_request_;
      ns = bw_ns_;
      launches = bw_launches_;
    }
    LaunchPhase(Phase::kBackward, launches, ns, overlapped_);
    {
      std::lock_guard<std::mutex> l(bw_mu_);
      bw_request_ = 0;
      bw_done_ = step;
    }
    bw_cv_.notify_all();
  }
}

// New complete lines of an inject file since the last poll (the file only grows).
std::vector<std::string> NewLines(const std::string& path, InjectFile& f) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  if (st.st_mtim.tv_sec == f.st.st_mtim.tv_sec && st.st_mtim.tv_nsec == f.st.st_mtim.tv_nsec && st.st_size == f.st.st_size)
    return {};
  f.st = st;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text(64 * 1024, '\0');
  const ssize_t n = read(fd, text.data(), text.size());
  close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::vector<std::string> lines;
  size_t b = 0;
  while (b < text.size()) {
    const size_t e = text.find('\n', b);
    if (e == std::string::npos) break;  // a line still being written
    lines.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  std::vector<std::string> fresh;
  for (size_t i = f.lines; i < lines.size(); ++i) fresh.push_back(lines[i]);
  f.lines = std::max(f.lines, lines.size());
  return fresh;
}

void Rank::PollInject(int64_t step) {
  // The job-wide file: a NaN or a spike one rank's GPU produced reaches every rank through the
  // gradient all-reduce, so the loss every rank (and rank 0's log) reports has it too.
  for (const std::string& line : NewLines(fmt::format("{}/job.inject", run_dir_), job_inject_)) {
    char word[32] = {};
    long long from = 0;
    const int k = std::sscanf(line.c_str(), "%31s %lld", word, &from);
    if (k < 1) continue;
    const std::string w = word;
    if (w == "nan") nan_ = true;
    if (w == "loss_spike") spike_step_ = k >= 2 ? from : step;
  }
  for (const std::string& line : NewLines(fmt::format("{}/rank{}.inject", run_dir_, rank_), rank_inject_)) {
    char word[32] = {};
    double a = 0, c = 0;
    const int k = std::sscanf(line.c_str(), "%31s %lf %lf", word, &a, &c);
    if (k < 1) continue;
    const std::string w = word;
    if (w == "nan" || w == "loss_spike") {
      if (w == "nan") nan_ = true;
      if (w == "loss_spike") spike_step_ = step;
      const std::string fwd = fmt::format("{} {}\n", w, step);
      const std::string job = fmt::format("{}/job.inject", run_dir_);
      const int fd = open(job.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        if (write(fd, fwd.data(), fwd.size()) < 0) {
          // The other ranks then keep their loss: only this rank's is affected.
        }
        close(fd);
      }
    } else if (w == "crash") {
      crash_ = true;
    } else if (w == "hang" && k >= 2 && a >= 0) {
      hang_at_.store(static_cast<int64_t>(a));
    } else if (w == "slow" && k >= 3 && a > 0) {
      slow_factor_ = a;
      slow_until_ns_ = MonoNs() + static_cast<int64_t>(c * 1e6);
    } else {
      // Not on stderr (the job's output is the agent's to read): the truth file keeps it.
      std::string safe;
      for (char ch : line.substr(0, 80)) safe += (std::isalnum(static_cast<unsigned char>(ch)) || ch == ' ' || ch == '.') ? ch : '?';
      Truth(fmt::format("{{\"ignored_inject\":\"{}\"}}\n", safe));
    }
  }
}

void Rank::Print(const std::vector<LogLine>& lines) {
  if (!prints_) return;
  for (const auto& l : lines) std::fputs(l.text.c_str(), l.fd == 2 ? stderr : stdout);
}

void Rank::Truth(const std::string& line) {
  std::lock_guard<std::mutex> l(truth_mu_);
  if (write(truth_fd_, line.data(), line.size()) < 0) {
    // Nothing sensible to do: the truth file is the simulator's, not the job's.
  }
}

void Rank::Progress(int64_t step) {
  progress_step_.store(step);
  WriteWhole(fmt::format("{}/rank{}.progress", run_dir_, rank_), fmt::format("{} {}\n", step, collective_seq_.load()));
}

// When the framework prints its metrics line: nanoGPT at iter_num % log_interval == 0 (iter_num
// = completed steps - 1), torchtitan at step 1 and every log_freq, the others every N steps.
bool LogsAt(const TrainLogSpec& log, int64_t step) {
  switch (log.format) {
    case ithbat::scenario::LogFormat::kNanogpt: return (step - 1) % log.every_steps == 0;
    case ithbat::scenario::LogFormat::kTorchtitan: return step == 1 || step % log.every_steps == 0;
    default: return step % log.every_steps == 0;
  }
}

std::string JsonNumber(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

// loss.item(): a 4-byte copy on the compute stream that waits for every step launched; then the
// end of each pending step from its end event (elapsed time to the last one).
// What the script asks of a step, in real ns: its compute (the slow factor of an inject
// included), or the data loader's pace when that is slower — W workers make a batch every
// cpu_ms / W; without workers the main thread makes it before the step. The lab compares it with
// the step's real duration: the pace at which this machine ran the world (a step also waits for
// its collectives, which this leaves out, so a world on a perfect machine paces a little under 1).
int64_t Rank::PlannedStepNs(int64_t compute_ns) const {
  const double loader_ns = spec_.data_loader.cpu_ms_per_batch * 1e6;
  if (spec_.data_loader.workers <= 0) return compute_ns + static_cast<int64_t>(loader_ns);
  return std::max(compute_ns, static_cast<int64_t>(loader_ns / static_cast<double>(spec_.data_loader.workers)));
}

void Rank::SyncAndRecord() {
  float host = 0;
  CU(cuMemcpyDtoH_v2(&host, buf_, sizeof(host)));
  const int64_t now = WallNs();
  if (pending_.empty()) return;
  const CUevent last = events_[pending_.back().event];
  for (const auto& p : pending_) {
    float ms = 0;
    int64_t end = now;
    if (cuEventElapsedTime(&ms, events_[p.event], last) == CUDA_SUCCESS && ms >= 0)
      end = now - static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    const int64_t start = std::max(p.host_start_ns, prev_end_ns_);
    Truth(fmt::format("{{\"step\":{},\"start_ns\":{},\"end_ns\":{},\"tokens\":{},\"loss\":{},\"compute_ns\":{}}}\n",
                      p.step, std::min(start, end), end, p.tokens, JsonNumber(p.loss), p.planned_ns));
    prev_end_ns_ = end;
  }
  pending_.clear();
}

void Rank::WriteCheckpoint(int64_t step, std::string dir) {
  const uint64_t bytes = spec_.checkpoint->bytes_per_rank;
  const int64_t start = WallNs();
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string tmp = fmt::format("{}/rank{}.tmp", dir, rank_);
  const std::string final_path = fmt::format("{}/rank{}.pt", dir, rank_);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  std::vector<char> chunk(static_cast<size_t>(std::min<uint64_t>(bytes, 4 << 20)));
  ithbat::scenario::Rng rng(spec_.seed ^ static_cast<uint64_t>(step));
  for (size_t i = 0; i + 8 <= chunk.size(); i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(chunk.data() + i, &v, 8);
  }
  uint64_t left = bytes;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    const ssize_t w = write(fd, chunk.data(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die(fmt::format("write {}: {}", tmp, std::strerror(errno)));
    left -= static_cast<uint64_t>(w);
  }
  if (fsync(fd) != 0) Die(fmt::format("fsync {}: {}", tmp, std::strerror(errno)));
  close(fd);
  if (rename(tmp.c_str(), final_path.c_str()) != 0) Die(fmt::format("rename {}: {}", tmp, std::strerror(errno)));
  const int64_t end = WallNs();
  Truth(fmt::format("{{\"save_step\":{},\"start_ns\":{},\"end_ns\":{},\"bytes\":{}}}\n", step, start, end, bytes));
}

void Rank::Save(int64_t step, const StepReport& report) {
  const auto& cp = *spec_.checkpoint;
  const std::string dir = fmt::format("{}/{}", cp.dir, CheckpointDirName(spec_.log.format, step));
  CheckpointReport c{step, dir, cp.async, 0};
  if (ckpt_thread_.joinable()) ckpt_thread_.join();  // one save at a time: the previous must end
  Print(fmt_.SaveBegin(c, report, WallNs()));
  const int64_t t0 = MonoNs();
  if (cp.async) {
    ckpt_thread_ = std::thread([this, step, dir, c, t0]() mutable {
      WriteCheckpoint(step, dir);
      c.seconds = static_cast<double>(MonoNs() - t0) / 1e9;
      Print(fmt_.SaveEnd(c, WallNs()));
    });
    return;
  }
  WriteCheckpoint(step, dir);
  Barrier();  // every rank's shard is down before rank 0 says so
  c.seconds = static_cast<double>(MonoNs() - t0) / 1e9;
  Print(fmt_.SaveEnd(c, WallNs()));
}

int Rank::Run() {
  const int64_t first = spec_.start_step + 1;
  const int64_t last = spec_.start_step + spec_.steps;
  const int64_t total = last;
  SetupOutput();
  loader_.Start(first, last);  // fork before CUDA and before any thread
  SetupCuda();
  // Model build and weight loading: the GPU is held, the communicators come later (PyTorch
  // makes them at the first collective).
  if (spec_.startup_ms > 0) SleepNs(static_cast<int64_t>(spec_.startup_ms * 1e6));
  SetupComms();
  if (spec_.host_jitter.burst_ms > 0 && spec_.host_jitter.bursts_per_min > 0) {
    jitter_rng_.emplace(ithbat::scenario::FieldSeed(spec_.seed, fmt::format("host_jitter/{}", rank_)));
    const double mean_ns = 60e9 / spec_.host_jitter.bursts_per_min;
    next_burst_ns_ = MonoNs() + static_cast<int64_t>(-std::log(1.0 - jitter_rng_->Uniform()) * mean_ns);
  }
  for (const auto& c : spec_.collectives)
    for (int64_t i = 0; i < c.per_step; ++i)
      if (c.overlap) overlapped_.push_back(&c);
  std::vector<const TrainCollectiveSpec*> after;
  for (const auto& c : spec_.collectives)
    for (int64_t i = 0; i < c.per_step; ++i)
      if (!c.overlap) after.push_back(&c);

  Print(fmt_.Header(spec_, WallNs()));
  Progress(spec_.start_step);
  std::thread bw([this] { BackwardThread(); });
  std::thread watchdog;
  if (spec_.nccl_timeout_ms > 0) {
    watch_events_.resize(128);
    for (size_t i = 0; i < watch_events_.size(); ++i) {
      CU(cuEventCreate(&watch_events_[i], 0));
      watch_free_.push_back(i);
    }
    watchdog = std::thread([this] { WatchdogThread(); });
  }

  const int64_t launches = spec_.work.launches_per_step;
  const int64_t opt_launches = std::max<int64_t>(1, launches / 20);
  const int64_t fwd_launches = std::max<int64_t>(1, (launches - opt_launches) / 3);
  const int64_t bwd_launches = std::max<int64_t>(1, launches - opt_launches - fwd_launches);
  const int64_t median_tokens = spec_.work.sequences_per_step * MedianSeqLen(spec_.work.seq_len);
  const int64_t train_start = MonoNs();
  int64_t interval_start = train_start;
  int64_t last_step_end = train_start;
  double loss_sum = 0;
  int64_t loss_n = 0, nan_n = 0, interval_steps = 0;
  bool interval_nan = false;
  StepReport report;
  report.total_steps = total;
  report.sequences = spec_.work.sequences_per_step * spec_.dp;
  report.memory_gib = static_cast<double>(spec_.work.memory_bytes) / (1 << 30);
  report.memory_share = total_mem_ > 0 ? static_cast<double>(spec_.work.memory_bytes) / static_cast<double>(total_mem_) : 0;

  for (int64_t step = first; step <= last; ++step) {
    PollInject(step);
    if (crash_) Crash();
    const int64_t host_start = WallNs();
    const DataLoader::Batch batch = loader_.Next(step);
    double compute_ns = spec_.work.compute_ms * 1e6 * static_cast<double>(batch.tokens) /
                        static_cast<double>(std::max<int64_t>(median_tokens, 1));
    if (slow_until_ns_ > MonoNs()) compute_ns *= slow_factor_;
    const auto ns = static_cast<int64_t>(compute_ns);

    LaunchPhase(Phase::kForward, fwd_launches, ns * 95 / 300, {});
    {
      std::lock_guard<std::mutex> l(bw_mu_);
      bw_request_ = step;
      bw_ns_ = ns * 95 * 2 / 300;
      bw_launches_ = bwd_launches;
    }
    bw_cv_.notify_all();
    {
      std::unique_lock<std::mutex> l(bw_mu_);
      bw_cv_.wait(l, [&] { return bw_done_ == step; });
    }
    if (!after.empty()) {
      CUevent ev = events_.back();
      CU(cuEventRecord(ev, nullptr));
      CU(cuStreamWaitEvent(comm_stream_, ev, 0));
      for (const auto* c : after) IssueCollective(*c);
    }
    if (!spec_.collectives.empty()) {  // the optimizer needs the reduced gradients
      CUevent ev = events_.back();
      CU(cuEventRecord(ev, comm_stream_));
      CU(cuStreamWaitEvent(nullptr, ev, 0));
    }
    LaunchPhase(Phase::kOptimizer, opt_launches, ns - ns * 95 / 300 - ns * 95 * 2 / 300, {});

    double loss = LossAt(spec_.loss, step, total, spec_.seed);
    double grad_norm = GradNormAt(spec_.loss, step, total, spec_.seed);
    if (nan_) loss = grad_norm = std::nan("");
    if (spike_step_ >= 0) {
      const double f = 1.0 + 3.0 * std::exp(-static_cast<double>(step - spike_step_) / 3.0);
      loss *= f;
      grad_norm *= f * f;
    }
    const size_t ev = pending_.size();
    CU(cuEventRecord(events_[ev], nullptr));
    pending_.push_back({step, host_start, batch.tokens, loss, ev, PlannedStepNs(ns)});

    const bool log_step = LogsAt(spec_.log, step);
    const bool save_step = spec_.checkpoint && spec_.checkpoint->every_steps > 0 && step % spec_.checkpoint->every_steps == 0;
    if (step % spec_.work.host_sync_every_steps == 0 || log_step || save_step || step == last ||
        pending_.size() + 1 >= events_.size())
      SyncAndRecord();

    const int64_t now = MonoNs();
    if (std::isnan(loss)) {
      ++nan_n;
      interval_nan = true;
    } else {
      loss_sum += loss;
      ++loss_n;
    }
    ++interval_steps;
    report.step = step;
    report.grad_norm = grad_norm;
    report.lr = LrAt(spec_.lr, step, total);
    report.tokens = batch.tokens;
    report.elapsed_s = static_cast<double>(now - train_start) / 1e9;
    report.epoch = static_cast<double>(step) / static_cast<double>(total);
    report.step_ms = static_cast<double>(now - last_step_end) / 1e6;
    last_step_end = now;
    Print(fmt_.Progress(report));
    if (log_step) {
      const double interval_ms = static_cast<double>(now - interval_start) / 1e6 / static_cast<double>(interval_steps);
      const double mean = loss_n > 0 ? loss_sum / static_cast<double>(loss_n) : std::nan("");
      switch (spec_.log.format) {
        case ithbat::scenario::LogFormat::kHfTrainer:  // tr_loss / steps: a NaN poisons the mean
          report.loss = interval_nan ? std::nan("") : mean;
          break;
        case ithbat::scenario::LogFormat::kMegatron:  // NaN iterations are counted, not averaged
          report.loss = mean;
          report.step_ms = interval_ms;
          break;
        default:
          report.loss = loss;
      }
      report.nan_steps = nan_n;
      report.mfu = std::clamp(0.45 * spec_.work.compute_ms / std::max(report.step_ms, 1e-3), 0.0, 0.6);
      report.tflops = report.mfu * 989.0;
      Print(fmt_.Metrics(report, WallNs()));
      interval_start = now;
      loss_sum = 0;
      loss_n = nan_n = interval_steps = 0;
      interval_nan = false;
    }
    if (save_step) {
      report.loss = loss;
      Save(step, report);
    }
    Progress(step);
  }
  SyncAndRecord();
  if (ckpt_thread_.joinable()) ckpt_thread_.join();
  {
    std::lock_guard<std::mutex> l(bw_mu_);
    bw_quit_ = true;
  }
  bw_cv_.notify_all();
  bw.join();
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> l(watch_mu_);
      watch_quit_ = true;
    }
    watch_cv_.notify_all();
    watchdog.join();
  }
  CU(cuStreamSynchronize(comm_stream_));
  Print(fmt_.Summary(report, static_cast<double>(MonoNs() - train_start) / 1e9));
  std::fflush(stdout);
  loader_.Stop();
  if (spec_.exit_code != 0) {
    std::fprintf(stderr,
                 "[rank%lld]: Traceback (most recent call last):\n"
                 "[rank%lld]:   File \"train.py\", line 431, in <module>\n"
                 "[rank%lld]:     main()\n"
                 "[rank%lld]: SystemExit: %lld\n",
                 static_cast<long long>(rank_), static_cast<long long>(rank_), static_cast<long long>(rank_),
                 static_cast<long long>(rank_), static_cast<long long>(spec_.exit_code));
    return static_cast<int>(spec_.exit_code);
  }
  for (auto& c : comms_) ncclCommDestroy(c.comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec_path;
  if (const char* e = std::getenv("ITHBAT_SIM_SPEC")) spec_path = e;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--spec" && i + 1 < argc) {
      spec_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s --spec FILE (sim/workload/README.md)\n", kProg);
      return 2;
    }
  }
  if (spec_path.empty()) {
    std::fprintf(stderr, "usage: %s --spec FILE (sim/workload/README.md)\n", kProg);
    return 2;
  }
  auto spec = ReadTrainSpecFile(spec_path);
  if (!spec) Die(spec.error().ToString(), 2);
  const auto rank = EnvInt("RANK", "SLURM_PROCID");
  const auto local_rank = EnvInt("LOCAL_RANK", "SLURM_LOCALID");
  const auto world = EnvInt("WORLD_SIZE", "SLURM_NTASKS");
  if (!rank) Die("no rank: set RANK or SLURM_PROCID", 2);
  if (world && *world != spec->world_size)
    Die(fmt::format("the launcher says {} ranks, the spec {}", *world, spec->world_size), 2);
  if (*rank >= spec->world_size) Die(fmt::format("rank {} outside the world of {}", *rank, spec->world_size), 2);
  std::string run_dir;
  if (const char* e = std::getenv("ITHBAT_SIM_RUN_DIR"); e != nullptr && *e != '\0')
    run_dir = e;
  else
    run_dir = fs::path(spec_path).parent_path().string();
  if (run_dir.empty()) run_dir = ".";
  Rank r(std::move(*spec), run_dir, *rank, local_rank.value_or(0));
  const int code = r.Run();
  std::fflush(stdout);
  std::exit(code);
}
