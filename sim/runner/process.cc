#include "runner/process.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scenario/rng.h"

extern char** environ;

namespace ithbat::sim::runner {
namespace {

using json = nlohmann::json;

// argv/envp as char* arrays over strings that outlive the fork.
struct CStrings {
  explicit CStrings(const std::vector<std::string>& v) {
    for (const auto& s : v) ptrs.push_back(const_cast<char*>(s.c_str()));
    ptrs.push_back(nullptr);
  }
  char** data() { return ptrs.data(); }
  std::vector<char*> ptrs;
};

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int StatusCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// Child side, after fork: restore what exec does not (ignored signals, the mask).
void ResetSignalsInChild() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

Result<std::string> ReadBounded(const std::filesystem::path& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeErrorF(ErrorCode::kNotFound, "cannot open {}", path.string());
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_bytes)
    return MakeErrorF(ErrorCode::kResourceExhausted, "{} is over {} bytes", path.string(), max_bytes);
  return text;
}

volatile sig_atomic_t g_launcher_term = 0;
volatile sig_atomic_t g_pod_init = 0;

void OnLauncherTerm(int) {
  g_launcher_term = 1;
  // PID 1 of a pod namespace gets only the signals it handles: pass SIGTERM on to the pod.
  if (g_pod_init) kill(-1, SIGTERM);
}

// Forks every rank of `d` with stdout/stderr on `out_fd`; returns pid → rank.
std::map<pid_t, int64_t> ForkRanks(const LaunchDescription& d, int out_fd, int pids_fd) {
  std::map<pid_t, int64_t> pids;
  CStrings argv(d.program);
  for (const auto& r : d.ranks) {
    std::vector<std::string> env_strings = MergedEnvironment(r.env);
    CStrings envp(env_strings);
    const std::string prefix = fmt::format("start {} ", r.rank);
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string msg =
          fmt::format("launcher: fork of rank {} failed: {}\n", r.rank, std::strerror(errno));
      WriteAll(out_fd, msg.data(), msg.size());
      continue;
    }
    if (pid == 0) {
      ResetSignalsInChild();
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out_fd, STDOUT_FILENO);
      dup2(out_fd, STDERR_FILENO);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
      // The host pid, also from inside a pod's PID namespace: /proc is still the host's.
      char buf[96];
      std::memcpy(buf, prefix.data(), prefix.size());
      ssize_t n = readlink("/proc/self", buf + prefix.size(), 24);
      if (n > 0 && pids_fd >= 0) {
        buf[prefix.size() + static_cast<size_t>(n)] = '\n';
        WriteAll(pids_fd, buf, prefix.size() + static_cast<size_t>(n) + 1);
      }
      execve(d.program[0].c_str(), argv.data(), envp.data());
      const char msg[] = "launcher: cannot execute the rank program\n";
      WriteAll(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    pids[pid] = r.rank;
  }
  return pids;
}

void ReportExit(int pids_fd, int64_t rank, int code) {
  const std::string line = fmt::format("exit {} {}\n", rank, code);
  WriteAll(pids_fd, line.data(), line.size());
}

// Waits for every rank, reaping orphans too (PID 1 of the pod namespace). The first nonzero code.
int PodInit(const LaunchDescription& d, int out_fd, int pids_fd) {
  g_pod_init = 1;
  prctl(PR_SET_NAME, kPodInitName);
  auto ranks = ForkRanks(d, out_fd, pids_fd);
  ::close(out_fd);
  int first_bad = 0;
  while (!ranks.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = ranks.find(pid);
    if (it == ranks.end()) continue;
    const int code = StatusCode(status);
    ReportExit(pids_fd, it->second, code);
    if (code != 0 && first_bad == 0) first_bad = code;
    ranks.erase(it);
  }
  return first_bad;
}

}  // namespace

namespace {
// `key` matches a list entry: the same name, or an entry "X_*" and a key starting with "X_".
bool KeyMatches(std::string_view key, const std::vector<std::string>& list) {
  for (const auto& u : list) {
    if (u.empty()) continue;
    if (u.back() == '*' ? key.substr(0, u.size() - 1) == std::string_view(u).substr(0, u.size() - 1)
                        : key == u) {
      return true;
    }
  }
  return false;
}
}  // namespace

std::vector<std::string> MergedEnvironment(const Env& env, const std::vector<std::string>& unset,
                                           const std::vector<std::string>& keep_only) {
  std::vector<std::string> out;
  auto dropped = [&](std::string_view entry) {
    const size_t eq = entry.find('=');
    const std::string_view key = entry.substr(0, eq);
    if (!keep_only.empty() && !KeyMatches(key, keep_only)) return true;
    if (KeyMatches(key, unset)) return true;
    for (const auto& [k, v] : env) {
      if (key == k) return true;
    }
    return false;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!dropped(*e)) out.emplace_back(*e);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

const std::vector<std::string>& WorkloadAllowList() {
  static const std::vector<std::string> kVars = {"PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR"};
  return kVars;
}

const std::vector<std::string>& HostLauncherVariables() {
  static const std::vector<std::string> kVars = {"SLURM_*",
                                                 "SLURMD_*",
                                                 "TORCHELASTIC_*",
                                                 "OMPI_*",
                                                 "PMI_*",
                                                 "PMIX_*",
                                                 "KUBERNETES_*",
                                                 "PET_*",
                                                 "ITHBAT_*",
                                                 "RANK",
                                                 "LOCAL_RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_WORLD_SIZE",
                                                 "GROUP_RANK",
                                                 "GROUP_WORLD_SIZE",
                                                 "ROLE_RANK",
                                                 "ROLE_WORLD_SIZE",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "CUDA_VISIBLE_DEVICES",
                                                 "NVIDIA_VISIBLE_DEVICES",
                                                 "LD_PRELOAD"};
  return kVars;
}

Result<pid_t> Spawn(const SpawnOptions& o) {
  if (o.path.empty() || o.argv.empty()) return MakeError(ErrorCode::kInvalidArgument, "nothing to spawn");
  std::vector<std::string> env_strings = MergedEnvironment(o.env, o.unset, o.keep_only);
  CStrings envp(env_strings);
  CStrings argv(o.argv);
  int out_fd = -1;
  if (!o.output.empty()) {
    out_fd = ::open(o.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) return ErrnoError(ErrorCode::kIo, o.output, errno);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    if (out_fd >= 0) ::close(out_fd);
    return ErrnoError(ErrorCode::kIo, "fork", err);
  }
  if (pid == 0) {
    ResetSignalsInChild();
    if (o.own_process_group) setpgid(0, 0);
    if (o.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
    }
    if (o.nice != 0) setpriority(PRIO_PROCESS, 0, o.nice);
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    const int sink = out_fd >= 0 ? out_fd : null_fd;
    if (sink >= 0) {
      dup2(sink, STDOUT_FILENO);
      dup2(sink, STDERR_FILENO);
    }
    execve(o.path.c_str(), argv.data(), envp.data());
    const char msg[] = "ithbat-sim: exec failed\n";
    WriteAll(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  // Also from the parent, so a kill of the group right after Spawn cannot miss it.
  if (o.own_process_group) setpgid(pid, pid);
  if (out_fd >= 0) ::close(out_fd);
  return pid;
}

Result<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(ErrorCode::kIo, "socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(ErrorCode::kIo, "bind 127.0.0.1:0", err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<HttpAnswer> HttpGet(int port, const std::string& path, int timeout_ms, size_t max_body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoError(ErrorCode::kIo, "socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int64_t deadline = MonoNs() + static_cast<int64_t>(timeout_ms) * 1'000'000;
  auto wait_for = [&](short events) {
    for (;;) {
      const int64_t left_ms = (deadline - MonoNs()) / 1'000'000;
      if (left_ms <= 0) return false;
      pollfd p{fd, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left_ms));
      if (r < 0 && errno == EINTR) continue;
      return r > 0;
    }
  };
  auto fail = [&](const char* what) {
    ::close(fd);
    return MakeErrorF(ErrorCode::kUnavailable, "127.0.0.1:{}{}: {}", port, path, what);
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) return fail("connection refused");
    if (!wait_for(POLLOUT)) return fail("connect timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail("connection refused");
  }
  const std::string request =
      fmt::format("GET {} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
  size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_for(POLLOUT)) return fail("send timed out");
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return fail("send failed");
    sent += static_cast<size_t>(n);
  }
  // Connection: close — the answer ends when the server closes; kept up to the head + max_body.
  std::string head;
  const size_t keep = max_body + 16384;
  for (;;) {
    if (!wait_for(POLLIN)) {
      if (head.find("\r\n") == std::string::npos) return fail("no answer");
      break;  // a slow or endless body: what came is enough
    }
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    head.append(buf, std::min(static_cast<size_t>(n), keep - std::min(keep, head.size())));
    if (head.size() >= keep) break;
  }
  ::close(fd);
  // "HTTP/1.1 200 OK"
  const size_t sp = head.find(' ');
  if (head.rfind("HTTP/", 0) != 0 || sp == std::string::npos || head.size() < sp + 4) {
    return MakeErrorF(ErrorCode::kParse, "127.0.0.1:{}{}: not an HTTP answer", port, path);
  }
  int code = 0;
  for (size_t i = sp + 1; i < sp + 4; ++i) {
    if (head[i] < '0' || head[i] > '9') return MakeErrorF(ErrorCode::kParse, "bad HTTP status line");
    code = code * 10 + (head[i] - '0');
  }
  HttpAnswer answer;
  answer.status = code;
  if (const size_t body = head.find("\r\n\r\n"); body != std::string::npos)
    answer.body = head.substr(body + 4, max_body);
  return answer;
}

Result<int> HttpGetStatus(int port, const std::string& path, int timeout_ms) {
  auto answer = HttpGet(port, path, timeout_ms, 0);
  if (!answer) return std::unexpected(answer.error());
  return answer->status;
}

bool ListenerOwnedBy(pid_t pid, int port) {
  // /proc/net/tcp{,6}: "sl local_address rem_address st ... uid timeout inode"; LISTEN is 0A.
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    auto text = ReadBounded(table, 16u << 20);
    if (!text) continue;
    std::istringstream in(*text);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      if (!(ls >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos || st != "0A") continue;
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) != port) continue;
      inodes.push_back("socket:[" + inode + "]");
    }
  }
  if (inodes.empty()) return false;
  std::error_code ec;
  const std::filesystem::path fd_dir = fmt::format("/proc/{}/fd", pid);
  for (std::filesystem::directory_iterator it(fd_dir, ec), end; !ec && it != end; it.increment(ec)) {
    char target[64];
    const ssize_t n = readlink(it->path().c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (std::find(inodes.begin(), inodes.end(), t) != inodes.end()) return true;
  }
  return false;
}

std::string LaunchDescriptionToJson(const LaunchDescription& d) {
  json ranks = json::array();
  for (const auto& r : d.ranks) {
    json env = json::array();
    for (const auto& [k, v] : r.env) env.push_back({k, v});
    ranks.push_back({{"rank", r.rank}, {"local_rank", r.local_rank}, {"env", env}});
  }
  json j = {{"style", d.style},     {"job", d.job},       {"node", d.node}, {"process_name", d.process_name},
            {"program", d.program}, {"output", d.output}, {"pids", d.pids}, {"ranks", ranks}};
  return j.dump(1) + "\n";
}

Result<LaunchDescription> ParseLaunchDescription(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return MakeError(ErrorCode::kParse, "launch description: not a JSON object");
  LaunchDescription d;
  try {
    d.style = j.at("style").get<std::string>();
    d.job = j.at("job").get<std::string>();
    d.node = j.at("node").get<std::string>();
    d.process_name = j.at("process_name").get<std::string>();
    d.program = j.at("program").get<std::vector<std::string>>();
    d.output = j.at("output").get<std::string>();
    d.pids = j.at("pids").get<std::string>();
    for (const auto& r : j.at("ranks")) {
      LaunchRank lr;
      lr.rank = r.at("rank").get<int64_t>();
      lr.local_rank = r.at("local_rank").get<int64_t>();
      for (const auto& kv : r.at("env"))
        lr.env.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
      d.ranks.push_back(std::move(lr));
    }
  } catch (const json::exception& e) {
    return MakeErrorF(ErrorCode::kParse, "launch description: {}", e.what());
  }
  if (d.program.empty()) return MakeError(ErrorCode::kInvalidArgument, "launch description: no program");
  if (d.ranks.size() > 4096)
    return MakeError(ErrorCode::kInvalidArgument, "launch description: too many ranks");
  return d;
}

PidReport ParsePidReport(std::string_view text) {
  PidReport r;
  std::istringstream in{std::string(text)};
  std::string word;
  int64_t a = 0, b = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (!(ls >> word >> a >> b)) continue;
    if (word == "start") r.started.emplace_back(a, b);
    if (word == "exit") r.exited.emplace_back(a, b);
  }
  return r;
}

int RunLauncherMode(const std::filesystem::path& desc_path) {
  auto text = ReadBounded(desc_path, 4u << 20);
  if (!text) {
    fmt::print(stderr, "launch: {}\n", text.error().message);
    return 2;
  }
  auto desc = ParseLaunchDescription(*text);
  if (!desc) {
    fmt::print(stderr, "launch: {}\n", desc.error().message);
    return 2;
  }
  const LaunchDescription& d = *desc;
  prctl(PR_SET_NAME, d.process_name.substr(0, 15).c_str());
  // Loader workers a rank leaves behind come back to us and are reaped, like under slurmstepd.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction sa {};
  sa.sa_handler = OnLauncherTerm;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  const int out_fd = ::open(d.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int pids_fd = ::open(d.pids.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out_fd < 0 || pids_fd < 0) {
    fmt::print(stderr, "launch: cannot open {} or {}\n", d.output, d.pids);
    return 2;
  }
  // The ranks write into a pipe, as under slurmstepd or a container runtime; we copy it out.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    fmt::print(stderr, "launch: pipe: {}\n", std::strerror(errno));
    return 2;
  }
  std::map<pid_t, int64_t> children;  // pid → rank (-1: the pod's init)
  int alive_fd_keep = -1;              // k8s: held open while we live (the pod init watches it)
  if (d.style == "k8s") {
    if (unshare(CLONE_NEWPID) != 0) {
      const std::string msg = fmt::format("launch: unshare(CLONE_NEWPID): {}\n", std::strerror(errno));
      WriteAll(out_fd, msg.data(), msg.size());
      return 2;
    }
    // The init learns of our death through a pipe: from inside its PID namespace getppid() is
    // 0 whoever its parent is, so it cannot tell a dead launcher from a live one that way.
    int alive_fds[2];
    if (pipe2(alive_fds, O_CLOEXEC) != 0) return 2;
    const pid_t init = fork();
    if (init < 0) return 2;
    if (init == 0) {
      ::close(pipe_fds[0]);
      ::close(alive_fds[1]);
      // The pod dies with its launcher, like a container whose shim is gone; a launcher that died
      // between fork() and here is caught by the pipe (every write end closed: POLLHUP).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      pollfd alive{alive_fds[0], POLLIN, 0};
      if (::poll(&alive, 1, 0) > 0 && (alive.revents & (POLLHUP | POLLIN)) != 0) _exit(126);
      ::close(alive_fds[0]);
      _exit(PodInit(d, pipe_fds[1], pids_fd));
    }
    ::close(alive_fds[0]);
    alive_fd_keep = alive_fds[1];
    children[init] = -1;
  } else {
    children = ForkRanks(d, pipe_fds[1], pids_fd);
  }
  ::close(pipe_fds[1]);

  int first_bad = 0;
  bool eof = false;
  int64_t all_done_at = 0;
  char buf[65536];
  while (!(all_done_at != 0 && (eof || MonoNs() - all_done_at > 2'000'000'000))) {
    if (!eof) {
      pollfd p{pipe_fds[0], POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r > 0) {
        const ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf));
        if (n > 0) {
          WriteAll(out_fd, buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          eof = true;
        }
      }
    } else {
      usleep(50'000);
    }
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = children.find(pid);
      if (it == children.end()) continue;  // an orphan, reaped
      const int code = StatusCode(status);
      if (it->second >= 0) ReportExit(pids_fd, it->second, code);
      if (code != 0 && first_bad == 0) first_bad = code;
      children.erase(it);
    }
    if (children.empty() && all_done_at == 0) all_done_at = MonoNs();
  }
  ::close(pipe_fds[0]);
  ::close(out_fd);
  ::close(pids_fd);
  if (alive_fd_keep >= 0) ::close(alive_fd_keep);
  return first_bad > 255 ? 255 : first_bad;
}

int RunBurnMode(double duty, double period_min_ms, double period_max_ms, uint64_t seed) {
  signal(SIGTERM, SIG_DFL);
  if (duty < 0) duty = 0;
  if (duty > 1) duty = 1;
  if (period_min_ms < 1) period_min_ms = 1;
  if (period_max_ms < period_min_ms) period_max_ms = period_min_ms;
  scenario::Rng rng(seed);
  // A random phase, so many burners do not wake together.
  usleep(static_cast<useconds_t>(rng.Uniform() * period_max_ms * 1000));
  volatile uint64_t sink = 0;
  for (;;) {
    const double period_ms = period_min_ms + rng.Uniform() * (period_max_ms - period_min_ms);
    const int64_t busy_ns = static_cast<int64_t>(period_ms * duty * 1e6);
    const int64_t start = MonoNs();
    while (MonoNs() - start < busy_ns) {
      for (int i = 0; i < 1000; ++i) sink = sink * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    const int64_t idle_ns = static_cast<int64_t>(period_ms * 1e6) - busy_ns;
    if (idle_ns > 0) {
      timespec ts{static_cast<time_t>(idle_ns / 1'000'000'000), static_cast<long>(idle_ns % 1'000'000'000)};
      nanosleep(&ts, nullptr);
    }
  }
}

}  // namespace ithbat::sim::runner
