#include "collect/identity/identity_resolver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "core/file_util.h"

namespace ithbat::collect::identity {
namespace {

namespace fs = std::filesystem;

using Fd = UniqueFd;

ErrorCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ESRCH:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
      return ErrorCode::kPermission;
    default:
      return ErrorCode::kIo;
  }
}

int32_t FirstInt(const AllowedEnv& env, std::initializer_list<EnvKey> keys) {
  for (EnvKey k : keys) {
    const auto& v = env.Get(k);
    if (!v) continue;
    int32_t n = -1;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec == std::errc() && p == v->data() + v->size() && n >= 0) return n;
  }
  return -1;
}

// An ancestor's contribution is labelled with its pid so that a surprising job is explained.
std::string Source(std::string_view what, bool own, int32_t pid) {
  return own ? std::string(what) : fmt::format("ancestor-{}:{}", what, pid);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ProcessIdentity::Attributes() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!slurm_step.empty()) out.emplace_back("slurm_step", slurm_step);
  if (!torchelastic_run_id.empty()) out.emplace_back("torchelastic_run_id", torchelastic_run_id);
  if (!pod_uid.empty()) out.emplace_back("pod_uid", pod_uid);
  if (!container_id.empty()) out.emplace_back("container_id", container_id);
  return out;
}

std::string ProcessIdentity::DebugString() const {
  return fmt::format(
      "pid={} ns_pid={} nspid=[{}] ppid={} start={} job={} ({}) slurm_job={} step={} rank={} "
      "local_rank={} world_size={} gpu_index={} gpu_uuid={} ({}) torchelastic={} master={} "
      "pod={} container={} environ_truncated={} environ_error={}",
      identity.pid, ns_pid, fmt::join(nspid, ","), ppid, start_time, identity.job, job_source,
      slurm_job, slurm_step, identity.rank, identity.local_rank, identity.world_size,
      identity.gpu_index, identity.gpu_uuid, gpu_source, torchelastic_run_id, master_addr,
      pod_uid, container_id, environ_truncated, environ_error);
}

Result<AllowedEnv> ReadAllowedEnviron(const fs::path& path, size_t max_bytes, bool* truncated) {
  *truncated = false;
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoError(CodeForErrno(errno), path.string(), errno);
  // One fixed buffer, never grown: growing a std::string would leave copies of the environment
  // in freed memory that explicit_bzero cannot reach.
  std::unique_ptr<char[]> buf(new char[max_bytes + 1]);
  size_t n = 0;
  int read_errno = 0;
  while (n < max_bytes + 1) {
    ssize_t r = read(fd.get(), buf.get() + n, max_bytes + 1 - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      read_errno = errno;
      break;
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
  }
  AllowedEnv env;
  if (read_errno == 0) {
    std::string_view text(buf.get(), n);
    if (n > max_bytes) {
      *truncated = true;
      text = text.substr(0, max_bytes);
      // The last entry was cut: drop it rather than keep a partial value.
      size_t last_nul = text.rfind('\0');
      text = last_nul == std::string_view::npos ? std::string_view() : text.substr(0, last_nul);
    }
    env = ParseEnviron(text);
  }
  explicit_bzero(buf.get(), max_bytes + 1);
  if (read_errno != 0) return ErrnoError(CodeForErrno(read_errno), path.string(), read_errno);
  return env;
}

IdentityResolver::IdentityResolver(Options options) : options_(std::move(options)) {}

Result<uint64_t> IdentityResolver::ReadStartTime(int32_t pid) const {
  fs::path dir = options_.proc_root / std::to_string(pid);
  auto stat = ReadFileBounded(dir / "stat", 4096);
  if (!stat) {
    std::error_code ec;
    if (stat.error().code == ErrorCode::kNotFound || !fs::exists(dir, ec)) {
      return MakeErrorF(ErrorCode::kNotFound, "process {} not found", pid);
    }
    return std::unexpected(stat.error());
  }
  return ParseStatStartTime(*stat);
}

Result<IdentityResolver::Record> IdentityResolver::ReadRecord(int32_t pid,
                                                              uint64_t start_time) const {
  fs::path dir = options_.proc_root / std::to_string(pid);
  Record rec;
  rec.start_time = start_time;
  auto status = ReadFileBounded(dir / "status", 64 * 1024);
  if (!status) {
    if (status.error().code == ErrorCode::kNotFound) {
      return MakeErrorF(ErrorCode::kNotFound, "process {} exited", pid);
    }
    return std::unexpected(status.error());
  }
  auto parsed = ParseStatus(*status);
  if (!parsed) return std::unexpected(parsed.error());
  rec.status = std::move(*parsed);
  // cgroup is optional: a kernel without cgroups, or a fixture without the file.
  if (auto cg = ReadFileBounded(dir / "cgroup", 64 * 1024)) rec.cgroup = ParseCgroup(*cg);
  auto env = ReadAllowedEnviron(dir / "environ", options_.environ_max_bytes,
                                &rec.environ_truncated);
  if (env) {
    rec.env = std::move(*env);
  } else {
    rec.environ_error = env.error().ToString();
  }
  // The pid may have exited, or been reused, while its files were read: only a start time that
  // is still the same proves the files belong to one process.
  auto again = ReadStartTime(pid);
  if (!again || *again != start_time) {
    return MakeErrorF(ErrorCode::kNotFound, "process {} exited while being read", pid);
  }
  return rec;
}

Result<const IdentityResolver::Record*> IdentityResolver::Load(int32_t pid) {
  auto start = ReadStartTime(pid);
  if (!start) return std::unexpected(start.error());
  auto it = cache_.find(pid);
  if (it != cache_.end() && it->second.start_time == *start) return &it->second;
  auto rec = ReadRecord(pid, *start);
  if (!rec) {
    if (it != cache_.end()) cache_.erase(it);
    return std::unexpected(rec.error());
  }
  if (it != cache_.end()) {
    it->second = std::move(*rec);
    return &it->second;
  }
  return &cache_.emplace(pid, std::move(*rec)).first->second;
}

void IdentityResolver::Forget(int32_t pid) {
  std::lock_guard lock(mu_);
  cache_.erase(pid);
}

size_t IdentityResolver::cached() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

Result<ProcessIdentity> IdentityResolver::Resolve(
    int32_t pid, const std::unordered_map<int32_t, GpuRef>* gpus) {
  if (pid <= 0) return MakeErrorF(ErrorCode::kInvalidArgument, "bad pid {}", pid);
  std::lock_guard lock(mu_);
  // Records are never erased while a Resolve holds pointers to them, except here, first.
  if (cache_.size() >= options_.max_cached) cache_.clear();
  auto self = Load(pid);
  if (!self) return std::unexpected(self.error());

  std::vector<std::pair<int32_t, const Record*>> chain{{pid, *self}};
  int32_t cur = (*self)->status.ppid;
  while (cur > 0 && static_cast<int>(chain.size()) <= options_.max_depth) {
    bool loop = false;
    for (const auto& [p, r] : chain) loop = loop || p == cur;
    if (loop) break;
    auto rec = Load(cur);
    if (!rec) break;  // an ancestor that exited ends the walk; it is not an error
    chain.emplace_back(cur, *rec);
    cur = (*rec)->status.ppid;
  }

  const Record& own = **self;
  ProcessIdentity out;
  out.identity.pid = pid;
  out.ppid = own.status.ppid;
  out.nspid = own.status.nspid;
  out.ns_pid = own.status.nspid.empty() ? pid : own.status.nspid.back();
  out.start_time = own.start_time;
  out.environ_truncated = own.environ_truncated;
  out.environ_error = own.environ_error;

  // Rank, local rank and world size: this process's own environment only. An ancestor's
  // SLURM_PROCID is the rank of the launcher (a torchrun agent is one Slurm task per node), not
  // of its workers.
  const AllowedEnv& env = own.env;
  out.identity.rank =
      FirstInt(env, {EnvKey::kRank, EnvKey::kOmpiRank, EnvKey::kPmiRank, EnvKey::kSlurmProcId});
  out.identity.local_rank =
      FirstInt(env, {EnvKey::kLocalRank, EnvKey::kOmpiLocalRank, EnvKey::kSlurmLocalId});
  out.identity.world_size =
      FirstInt(env, {EnvKey::kWorldSize, EnvKey::kOmpiSize, EnvKey::kPmiSize, EnvKey::kSlurmNtasks});

  // Job: the nearest process (self first) that names a Slurm job; within one process the
  // cgroup (set by slurmd, not forgeable by the job) before the environment.
  for (const auto& [p, r] : chain) {
    bool is_self = p == pid;
    if (!r->cgroup.slurm_job.empty()) {
      out.slurm_job = r->cgroup.slurm_job;
      out.slurm_step = r->cgroup.slurm_step;
      out.job_source = Source("cgroup", is_self, p);
    } else if (const auto& j = r->env.Get(EnvKey::kSlurmJobId); j && !j->empty()) {
      out.slurm_job = *j;
      out.slurm_step = r->env.Get(EnvKey::kSlurmStepId).value_or("");
      out.job_source = Source("env", is_self, p);
    } else {
      continue;
    }
    if (out.slurm_step.empty()) {
      out.slurm_step = r->env.Get(EnvKey::kSlurmStepId).value_or(r->cgroup.slurm_step);
    }
    break;
  }
  for (const auto& [p, r] : chain) {
    const auto& run = r->env.Get(EnvKey::kTorchelasticRunId);
    // torchrun's default rendezvous id is "none": not an identity.
    if (out.torchelastic_run_id.empty() && run && !run->empty() && *run != "none") {
      out.torchelastic_run_id = *run;
      if (out.slurm_job.empty()) out.job_source = Source("torchelastic", p == pid, p);
    }
    const auto& master = r->env.Get(EnvKey::kMasterAddr);
    if (out.master_addr.empty() && master) out.master_addr = *master;
    if (out.pod_uid.empty() && !r->cgroup.pod_uid.empty()) {
      out.pod_uid = r->cgroup.pod_uid;
      if (out.slurm_job.empty() && out.torchelastic_run_id.empty()) {
        out.job_source = Source("pod", p == pid, p);
      }
    }
    if (out.container_id.empty()) out.container_id = r->cgroup.container_id;
  }
  out.identity.job = !out.slurm_job.empty()             ? out.slurm_job
                     : !out.torchelastic_run_id.empty() ? out.torchelastic_run_id
                                                        : out.pod_uid;

  // GPU: the driver's own process list wins; then the visible-devices list.
  GpuRef gpu;
  if (gpus) {
    if (auto it = gpus->find(pid); it != gpus->end() && it->second.known()) {
      gpu = it->second;
      out.gpu_source = "nvml";
    }
  }
  if (!gpu.known()) {
    std::optional<std::string> visible = env.Get(EnvKey::kCudaVisibleDevices);
    std::string source = "CUDA_VISIBLE_DEVICES";
    if (!visible) {
      visible = env.Get(EnvKey::kNvidiaVisibleDevices);
      source = "NVIDIA_VISIBLE_DEVICES";
      if (visible && (*visible == "all" || visible->empty())) visible.reset();
    }
    gpu = ResolveGpu(visible, out.identity.local_rank);
    if (gpu.known()) out.gpu_source = visible ? source : "LOCAL_RANK";
  }
  out.identity.gpu_index = gpu.index;
  out.identity.gpu_uuid = gpu.uuid;
  return out;
}

Result<std::string> RunCommandBounded(const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout, size_t max_bytes) {
  if (argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty command");
  // Everything the child needs is prepared before fork: after fork in a threaded process only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError(ErrorCode::kIo, "pipe", errno);
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError(ErrorCode::kIo, "pipe", errno);
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);
  Fd null_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (null_fd.get() < 0) return ErrnoError(ErrorCode::kIo, "/dev/null", errno);

  pid_t child = fork();
  if (child < 0) return ErrnoError(ErrorCode::kIo, "fork", errno);
  if (child == 0) {
    dup2(null_fd.get(), 0);
    dup2(out_w.get(), 1);
    dup2(null_fd.get(), 2);
    execvp(args[0], args.data());
    int e = errno;
    ssize_t ignored = write(err_w.get(), &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  out_w.Reset();
  err_w.Reset();
  auto reap = [&](bool kill_first) {
    if (kill_first) kill(child, SIGKILL);
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
  };
  // The exec-error pipe closes (read returns 0) as soon as exec succeeds.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(err_r.get(), &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  if (got == sizeof(exec_errno)) {
    reap(false);
    return ErrnoError(exec_errno == ENOENT || exec_errno == EACCES ? ErrorCode::kNotFound
                                                                   : ErrorCode::kIo,
                      fmt::format("exec {}", argv[0]), exec_errno);
  }

  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string output;
  char chunk[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      reap(true);
      return MakeErrorF(ErrorCode::kTimeout, "{} did not finish in {} ms", argv[0],
                        timeout.count());
    }
    pollfd pfd{out_r.get(), POLLIN, 0};
    int pr = poll(&pfd, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno != EINTR) {
      reap(true);
      return ErrnoError(ErrorCode::kIo, "poll", errno);
    }
    if (pr <= 0) continue;
    ssize_t r = read(out_r.get(), chunk, sizeof(chunk));
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      reap(true);
      return ErrnoError(ErrorCode::kIo, "read", errno);
    }
    if (r == 0) break;
    if (output.size() + static_cast<size_t>(r) > max_bytes) {
      reap(true);
      return MakeErrorF(ErrorCode::kResourceExhausted, "{} wrote more than {} bytes", argv[0],
                        max_bytes);
    }
    output.append(chunk, static_cast<size_t>(r));
  }
  // stdout is closed; the child may still linger (or hang): wait for it within the deadline.
  int st = 0;
  for (;;) {
    pid_t w = waitpid(child, &st, WNOHANG);
    if (w == child) break;
    if (w < 0 && errno != EINTR) return ErrnoError(ErrorCode::kIo, "waitpid", errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      reap(true);
      return MakeErrorF(ErrorCode::kTimeout, "{} did not exit in {} ms", argv[0],
                        timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return MakeErrorF(ErrorCode::kUnavailable, "{} failed (status {}): {}", argv[0], st,
                      QuoteForError(output));
  }
  return output;
}

Result<SlurmJobInfo> SlurmJobCache::Get(const std::string& job_id) {
  std::lock_guard lock(mu_);
  if (scontrol_missing_) {
    return MakeErrorF(ErrorCode::kNotFound, "{} is not installed", options_.scontrol);
  }
  bool valid = !job_id.empty() && job_id.size() <= 32 &&
               job_id.find_first_not_of("0123456789_") == std::string::npos;
  if (!valid) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "bad job id {}", QuoteForError(job_id));
  }
  auto now = std::chrono::steady_clock::now();
  if (auto it = cache_.find(job_id); it != cache_.end() && now - it->second.at < options_.ttl) {
    return it->second.info;
  }
  ++runs_;
  auto out = RunCommandBounded({options_.scontrol, "show", "job", "-o", job_id}, options_.timeout,
                               options_.max_output_bytes);
  Result<SlurmJobInfo> info = MakeError(ErrorCode::kInternal, "unset");
  if (!out) {
    if (out.error().code == ErrorCode::kNotFound) {
      scontrol_missing_ = true;
      cache_.clear();
      return std::unexpected(out.error());
    }
    // A job scontrol does not know fails with a non-zero exit: remembered like a success, so a
    // finished job is not asked about on every tick.
    info = out.error().code == ErrorCode::kUnavailable
               ? Result<SlurmJobInfo>(MakeErrorF(ErrorCode::kNotFound, "slurm job {}: {}", job_id,
                                                 out.error().message))
               : Result<SlurmJobInfo>(std::unexpected(out.error()));
    if (out.error().code != ErrorCode::kUnavailable) return info;  // timeouts are retried
  } else {
    info = ParseScontrolJob(*out);
  }
  if (cache_.size() >= 4096) cache_.clear();
  cache_.insert_or_assign(job_id, Entry{now, info});
  return info;
}

int SlurmJobCache::runs() const {
  std::lock_guard lock(mu_);
  return runs_;
}

}  // namespace ithbat::collect::identity
