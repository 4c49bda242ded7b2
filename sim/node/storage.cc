#include "node/storage.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file_util.h"
#include "node/files.h"

#ifndef ITHBAT_SLOWFS_PATH
#define ITHBAT_SLOWFS_PATH ""
#endif
#ifndef ITHBAT_SIM_IO_WRITER_PATH
#define ITHBAT_SIM_IO_WRITER_PATH ""
#endif

namespace ithbat::sim::node {
namespace {

namespace fs = std::filesystem;
using scenario::EventKind;
using scenario::MountKind;

constexpr size_t kMaxStatsBytes = 1 << 20;
constexpr size_t kMaxClients = 4096;
constexpr const char* kClientEnv = "ITHBAT_SIM_NODE_ID";

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string EscapeMountPath(const std::string& p) {
  std::string out;
  for (char c : p) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      out += fmt::format("\\{:03o}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

// Whether `path` is a mount point now (any mount stacked there).
bool IsMounted(const fs::path& path) {
  auto text = ReadFileBounded("/proc/self/mountinfo", 16 << 20);
  if (!text) return false;
  const std::string want = EscapeMountPath(path.string());
  LineReader lines(*text);
  std::string_view line;
  while (lines.Next(&line)) {
    FieldReader fields(line);
    std::string_view f;
    for (int i = 0; i < 5 && fields.Next(&f); ++i) {
      if (i == 4 && f == want) return true;
    }
  }
  return false;
}

// fork + exec with stdout/stderr to `log` and SIGTERM when the spawning thread dies (a runner
// killed hard must not leave FUSE daemons or writers behind). Only async-signal-safe calls after
// fork: everything is prepared before.
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                    const fs::path& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return MakeErrorF(ErrorCode::kIo, "open {}: {}", log.string(), std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    ::close(log_fd);
    return MakeErrorF(ErrorCode::kInternal, "fork: {}", std::strerror(e));
  }
  if (pid == 0) {
    // A group of its own: a terminal's Ctrl-C reaches the runner, which stops the ranks first
    // and then these (the file systems the ranks write to must outlive them).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    close_range(3, ~0U, 0);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(log_fd);
  setpgid(pid, pid);  // also from here, so the child is out of the terminal's group at once
  return pid;
}

// Waits up to `timeout` for `pid` to exit; true when reaped.
bool WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Terminate(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  if (WaitExit(pid, std::chrono::milliseconds(3000))) return;
  kill(pid, SIGKILL);
  WaitExit(pid, std::chrono::milliseconds(3000));
}

uint64_t Bandwidth(double gbps, double c, double byte_scale) {
  const double v = gbps * 1e9 * c / byte_scale;
  if (!(v >= 1)) return 1;  // 0 would mean "unlimited" to slowfs
  return static_cast<uint64_t>(std::min(v, 1e15));
}

std::string MountDir(const std::string& path) {
  std::string rel = path;
  while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
  return rel;
}

std::string EventKey(const scenario::EventT<scenario::Plain>& e) {
  return fmt::format("{}|{}|{}|{}|{}", static_cast<int>(e.kind), e.id, e.mount, e.at_s, e.at_step);
}

uint64_t Ms(uint64_t ns) { return ns / 1'000'000; }

}  // namespace

std::vector<SlowfsClientStats> ParseSlowfsStats(std::string_view text) {
  std::vector<SlowfsClientStats> out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line) && out.size() < kMaxClients) {
    if (line.size() > 4096) continue;
    SlowfsClientStats s;
    bool ok = true;
    bool have_client = false;
    FieldReader fields(line);
    std::string_view f;
    while (fields.Next(&f)) {
      const size_t eq = f.find('=');
      if (eq == std::string_view::npos) {
        ok = false;
        break;
      }
      const std::string_view key = f.substr(0, eq);
      const std::string_view value = f.substr(eq + 1);
      if (key == "client") {
        s.client = std::string(value);
        have_client = !value.empty();
        continue;
      }
      auto v = ParseUint64(value);
      if (!v) {
        ok = false;
        break;
      }
      uint64_t* dst = key == "writes"        ? &s.writes
                      : key == "write_bytes" ? &s.write_bytes
                      : key == "write_ns"    ? &s.write_ns
                      : key == "reads"       ? &s.reads
                      : key == "read_bytes"  ? &s.read_bytes
                      : key == "read_ns"     ? &s.read_ns
                      : key == "fsyncs"      ? &s.fsyncs
                      : key == "fsync_ns"    ? &s.fsync_ns
                      : key == "closes"      ? &s.closes
                      : key == "close_ns"    ? &s.close_ns
                      : key == "opens"       ? &s.opens
                                             : nullptr;
      if (dst != nullptr) *dst = *v;  // unknown keys: a newer slowfs
    }
    if (ok && have_client) out.push_back(std::move(s));
  }
  return out;
}

struct Storage::Instance {
  std::string mount;
  std::string node;  // "" for a shared mount's one instance
  fs::path dir;      // storage/<mount>[/<node>]
  fs::path backing;
  fs::path mountpoint;
  pid_t pid = -1;
  bool mounted = false;
  fs::path control() const { return dir / "control"; }
  fs::path stats() const { return dir / "stats"; }
};

Storage::Storage(Options options) : options_(std::move(options)) {}

Storage::~Storage() { Stop(); }

Result<std::unique_ptr<Storage>> Storage::Create(const Options& options) {
  if (options.scenario == nullptr) return MakeError(ErrorCode::kInvalidArgument, "Storage: no scenario");
  if (!(options.time_compression > 0) || !(options.byte_scale > 0)) {
    return MakeError(ErrorCode::kInvalidArgument, "Storage: time_compression and byte_scale must be > 0");
  }
  std::unique_ptr<Storage> s(new Storage(options));
  // Absolute: the paths end up in mountinfo, mountstats and the ranks' environment.
  std::error_code ec;
  s->options_.root = fs::absolute(options.root, ec);
  if (ec) return MakeErrorF(ErrorCode::kInvalidArgument, "Storage: root {}: {}", options.root.string(), ec.message());
  if (s->options_.run_start_ns == 0) s->options_.run_start_ns = RealtimeNs();
  if (s->options_.slowfs.empty()) s->options_.slowfs = ITHBAT_SLOWFS_PATH;
  if (s->options_.io_writer.empty()) s->options_.io_writer = ITHBAT_SIM_IO_WRITER_PATH;
  if (Status st = s->Setup(); !st) {
    s->Stop();
    return std::unexpected(st.error());
  }
  return s;
}

Status Storage::Setup() {
  const auto& sc = *options_.scenario;
  if (!sc.mounts.empty() && (options_.slowfs.empty() || !fs::exists(options_.slowfs))) {
    return MakeErrorF(ErrorCode::kNotFound, "ithbat-slowfs not found ('{}'): built only with libfuse3",
                      options_.slowfs.string());
  }
  created_ns_ = RealtimeNs();
  for (size_t i = 0; i < sc.mounts.size(); ++i) {
    const auto& m = sc.mounts[i];
    if (!scenario::IsValidName(m.name) || !scenario::PathProblem(m.path).empty()) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "mount '{}': bad name or path '{}'", m.name, m.path);
    }
    std::vector<std::string> nodes = m.nodes;
    if (nodes.empty()) {
      for (const auto& n : sc.nodes) nodes.push_back(n.name);
    }
    MountInfo info;
    info.name = m.name;
    info.kind = m.kind;
    MountRt rt;
    rt.index = i;
    const fs::path base = options_.root / "storage" / m.name;
    auto node_path = [&](const std::string& node) {
      return options_.root / "nodes" / node / "fs" / MountDir(m.path);
    };
    auto add_instance = [&](const std::string& node, const fs::path& mountpoint) -> Status {
      auto inst = std::make_unique<Instance>();
      inst->mount = m.name;
      inst->node = node;
      inst->dir = node.empty() ? base : base / node;
      inst->backing = inst->dir / "data";
      inst->mountpoint = mountpoint;
      instances_.push_back(std::move(inst));
      rt.instances.push_back(instances_.size() - 1);
      uint64_t bw = 0, fsync_us = 0;
      ControlValues(rt, RealtimeNs(), &bw, &fsync_us);
      if (Status s = WriteFileAtomic(instances_.back()->control(), ControlText(bw, fsync_us)); !s) return s;
      return StartInstance(*instances_.back());
    };
    if (m.kind == MountKind::kSharedNfs) {
      if (Status s = add_instance("", base / "mnt"); !s) return s;
      const fs::path src = instances_.back()->mountpoint;
      info.also_at.push_back(src);
      for (const std::string& node : nodes) {
        const fs::path at = node_path(node);
        std::error_code ec;
        fs::create_directories(at, ec);
        if (ec) return MakeErrorF(ErrorCode::kIo, "create {}: {}", at.string(), ec.message());
        if (::mount(src.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0) {
          return MakeErrorF(ErrorCode::kPermission, "bind mount {} on {}: {}", src.string(), at.string(),
                            std::strerror(errno));
        }
        binds_.push_back(at);
        info.node_paths[node] = at;
      }
    } else {
      for (const std::string& node : nodes) {
        const fs::path at = node_path(node);
        if (Status s = add_instance(node, at); !s) return s;
        info.node_paths[node] = at;
      }
    }
    mounts_.push_back(std::move(info));
    mount_rt_.push_back(std::move(rt));
  }
  for (size_t t = 0; t < sc.tenants.size(); ++t) {
    const auto& ten = sc.tenants[t];
    if (ten.kind != scenario::TenantKind::kIo || ten.write_gbps <= 0) continue;
    if (ten.nodes.empty()) {
      tenants_.push_back(Tenant{t, "", -1, false});
    } else {
      for (const auto& n : ten.nodes) tenants_.push_back(Tenant{t, n, -1, false});
    }
  }
  return WriteNodeFiles(RealtimeNs());
}

Status Storage::StartInstance(Instance& inst) {
  std::error_code ec;
  for (const fs::path& d : {inst.dir, inst.backing, inst.mountpoint}) {
    fs::create_directories(d, ec);
    if (ec) return MakeErrorF(ErrorCode::kIo, "create {}: {}", d.string(), ec.message());
  }
  const std::vector<std::string> args = {options_.slowfs.string(),
                                         "--control",
                                         inst.control().string(),
                                         "--stats",
                                         inst.stats().string(),
                                         "--client-env",
                                         kClientEnv,
                                         "--foreground",
                                         inst.backing.string(),
                                         inst.mountpoint.string()};
  // ITHBAT_SIM_WORLD tags every process of the world (tests look for leftovers by it).
  const std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                        "ITHBAT_SIM_WORLD=" + options_.root.string()};
  auto pid = Spawn(args, env, inst.dir / "slowfs.log");
  if (!pid) return std::unexpected(pid.error());
  inst.pid = *pid;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < end) {
    if (IsMounted(inst.mountpoint)) {
      inst.mounted = true;
      return Ok();
    }
    int status = 0;
    if (waitpid(inst.pid, &status, WNOHANG) == inst.pid) {
      inst.pid = -1;
      auto log = ReadFileBounded(inst.dir / "slowfs.log", 4096);
      return MakeErrorF(ErrorCode::kUnavailable,
                        "ithbat-slowfs for {} exited before mounting (needs /dev/fuse and root): {}",
                        inst.mountpoint.string(), log ? *log : std::string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return MakeErrorF(ErrorCode::kTimeout, "ithbat-slowfs did not mount {} within 15 s",
                    inst.mountpoint.string());
}

void Storage::ControlValues(const MountRt& m, int64_t now, uint64_t* bandwidth,
                            uint64_t* fsync_delay_us) const {
  const auto& mount = options_.scenario->mounts[m.index];
  const uint64_t base_bw = Bandwidth(mount.write_gbps, options_.time_compression, options_.byte_scale);
  const double base_fsync_us = std::max(0.0, mount.fsync_ms) * 1000.0 / options_.time_compression;
  double factor = 1.0;
  double fsync_us = base_fsync_us;
  for (const auto& [key, sd] : m.slowdowns) {
    const auto& e = sd.event;
    const double ramp_ns = std::max(0.0, e.ramp_s) * 1e9;
    const double p =
        ramp_ns > 0 ? std::clamp(static_cast<double>(now - sd.start_ns) / ramp_ns, 0.0, 1.0) : 1.0;
    const double f = std::clamp(e.bandwidth_factor, 0.001, 1.0);
    factor = std::min(factor, 1.0 + (f - 1.0) * p);
    // The event's fsync_ms is real already (the runner compressed it).
    const double target_us = std::max(0.0, e.fsync_ms) * 1000.0;
    fsync_us = std::max(fsync_us, base_fsync_us + (target_us - base_fsync_us) * p);
  }
  *bandwidth =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(static_cast<double>(base_bw) * factor)));
  *fsync_delay_us = static_cast<uint64_t>(std::llround(std::min(fsync_us, 3.6e9)));
}

std::string Storage::ControlText(uint64_t bandwidth, uint64_t fsync_delay_us) {
  return fmt::format("write_bandwidth={}\nfsync_delay_us={}\nflush_delay_us=0\n", bandwidth, fsync_delay_us);
}

Status Storage::WriteControl(MountRt& m, bool force, int64_t now) {
  uint64_t bw = 0, fs_us = 0;
  ControlValues(m, now, &bw, &fs_us);
  if (!force && bw == m.last_bandwidth && fs_us == m.last_fsync_us) return Ok();
  const std::string text = ControlText(bw, fs_us);
  for (size_t i : m.instances) {
    if (i >= instances_.size()) continue;
    if (Status s = WriteFileAtomic(instances_[i]->control(), text); !s) return s;
  }
  m.last_bandwidth = bw;
  m.last_fsync_us = fs_us;
  return Ok();
}

Result<fs::path> Storage::NodePath(std::string_view node, std::string_view mount) const {
  for (const auto& m : mounts_) {
    if (m.name != mount) continue;
    auto it = m.node_paths.find(std::string(node));
    if (it != m.node_paths.end()) return it->second;
    break;
  }
  return MakeErrorF(ErrorCode::kNotFound, "node '{}' does not mount '{}'", node, mount);
}

Status Storage::StartEvent(const scenario::EventT<scenario::Plain>& e, int64_t now_ns) {
  if (e.kind != EventKind::kStorageSlowdown) return Ok();
  for (auto& m : mount_rt_) {
    if (options_.scenario->mounts[m.index].name != e.mount) continue;
    m.slowdowns[EventKey(e)] = Slowdown{e, now_ns};
    return WriteControl(m, false, now_ns);
  }
  return MakeErrorF(ErrorCode::kInvalidArgument, "event {}: no mount '{}'", e.id, e.mount);
}

Status Storage::EndEvent(const scenario::EventT<scenario::Plain>& e, int64_t now_ns) {
  if (e.kind != EventKind::kStorageSlowdown) return Ok();
  for (auto& m : mount_rt_) {
    if (options_.scenario->mounts[m.index].name != e.mount) continue;
    if (m.slowdowns.erase(EventKey(e)) == 0) return Ok();
    return WriteControl(m, false, now_ns);
  }
  return Ok();
}

std::vector<SlowfsClientStats> Storage::Stats(std::string_view mount, std::string_view node) const {
  std::vector<SlowfsClientStats> out;
  std::string node_key;
  const auto& nodes = options_.scenario->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == node) node_key = fmt::format("env:{}", i);
  }
  for (const auto& inst : instances_) {
    if (inst->mount != mount) continue;
    if (!node.empty() && !inst->node.empty() && inst->node != node) continue;
    auto text = ReadFileBounded(inst->stats(), kMaxStatsBytes);
    if (!text) continue;
    for (auto& s : ParseSlowfsStats(*text)) {
      // A node's own local instance serves only that node: all of its clients count.
      if (!node.empty() && inst->node.empty() && s.client != node_key) continue;
      out.push_back(std::move(s));
    }
  }
  return out;
}

void Storage::SetRunStart(int64_t run_start_ns) {
  if (run_start_ns > 0) options_.run_start_ns = run_start_ns;
}

void Storage::UpdateTenants(int64_t now_ns) {
  const double elapsed_s = static_cast<double>(now_ns - options_.run_start_ns) / 1e9;
  const double c = options_.time_compression;
  for (Tenant& t : tenants_) {
    const auto& ten = options_.scenario->tenants[t.index];
    if (t.pid > 0) {
      int status = 0;
      if (waitpid(t.pid, &status, WNOHANG) == t.pid) {  // it gave up (write error): no respawn loop
        t.pid = -1;
        t.done = true;
      }
    }
    const bool on = elapsed_s >= ten.start_s / c && (ten.end_s < 0 || elapsed_s < ten.end_s / c);
    if (on && t.pid < 0 && !t.done) {
      t.pid = SpawnTenant(t);
      if (t.pid < 0) t.done = true;  // could not start: do not retry every tick
    } else if (!on && t.pid > 0) {
      Terminate(t.pid);
      t.pid = -1;
      t.done = elapsed_s >= 0 && ten.end_s >= 0 && elapsed_s >= ten.end_s / c;
    }
  }
}

pid_t Storage::SpawnTenant(const Tenant& t) {
  const auto& sc = *options_.scenario;
  const auto& ten = sc.tenants[t.index];
  fs::path dir;
  std::string node = t.node;
  for (size_t i = 0; i < mounts_.size(); ++i) {
    if (mounts_[i].name != ten.mount) continue;
    if (node.empty() && mounts_[i].kind == MountKind::kSharedNfs) {
      dir = instances_[mount_rt_[i].instances.front()]->mountpoint;
    } else {
      if (node.empty() && !mounts_[i].node_paths.empty()) node = mounts_[i].node_paths.begin()->first;
      auto it = mounts_[i].node_paths.find(node);
      if (it != mounts_[i].node_paths.end()) dir = it->second;
    }
  }
  if (dir.empty() || options_.io_writer.empty()) return -1;
  size_t per = ten.nodes.empty() ? 1 : ten.nodes.size();
  const uint64_t rate =
      std::max<uint64_t>(1, Bandwidth(ten.write_gbps, options_.time_compression, options_.byte_scale) / per);
  // Files of a size that takes about a second at the rate (bounded), so it fsyncs regularly.
  const uint64_t file_bytes = std::clamp<uint64_t>(rate, 1 << 20, 256ull << 20);
  const uint64_t chunk = std::clamp<uint64_t>(rate / 20, 64 << 10, 4 << 20);
  const std::string sub =
      node.empty() ? fmt::format(".tenant-{}", ten.id) : fmt::format(".tenant-{}-{}", ten.id, node);
  const std::vector<std::string> args = {
      options_.io_writer.string(),  "--dir",   (dir / sub).string(),     "--rate",
      fmt::format("{}", rate),      "--chunk", fmt::format("{}", chunk), "--file-bytes",
      fmt::format("{}", file_bytes)};
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "ITHBAT_SIM_WORLD=" + options_.root.string()};
  if (!t.node.empty()) {
    for (size_t i = 0; i < sc.nodes.size(); ++i) {
      if (sc.nodes[i].name == t.node) env.push_back(fmt::format("{}={}", kClientEnv, i));
    }
  }
  std::error_code ec;
  fs::create_directories(options_.root / "storage", ec);
  auto pid = Spawn(args, env, options_.root / "storage" / fmt::format("tenant-{}.log", ten.id));
  return pid ? *pid : -1;
}

Status Storage::Tick(int64_t now_ns) {
  if (stopped_) return Ok();
  Status first = Ok();
  for (auto& m : mount_rt_) {
    if (Status s = WriteControl(m, false, now_ns); !s && first) first = s;
  }
  UpdateTenants(now_ns);
  if (Status s = WriteNodeFiles(now_ns); !s && first) first = s;
  return first;
}

// Per node: proc/self/mountstats (the real NFS client's format, fs/nfs/super.c nfs_show_stats
// and net/sunrpc/stats.c) and proc/diskstats (20-field format of kernels 5.5+).
Status Storage::WriteNodeFiles(int64_t now_ns) {
  const auto& sc = *options_.scenario;
  // Parse every stats file once.
  std::vector<std::vector<SlowfsClientStats>> stats(instances_.size());
  for (size_t i = 0; i < instances_.size(); ++i) {
    auto text = ReadFileBounded(instances_[i]->stats(), kMaxStatsBytes);
    if (text) stats[i] = ParseSlowfsStats(*text);
  }
  const uint64_t age_s = static_cast<uint64_t>(std::max<int64_t>(0, now_ns - created_ns_) / 1'000'000'000);
  Status first = Ok();
  for (size_t n = 0; n < sc.nodes.size(); ++n) {
    const std::string& node = sc.nodes[n].name;
    const std::string key = fmt::format("env:{}", n);
    std::string ms =
        "device /dev/nvme0n1p2 mounted on / with fstype ext4\n"
        "device proc mounted on /proc with fstype proc\n"
        "device sysfs mounted on /sys with fstype sysfs\n"
        "device tmpfs mounted on /dev/shm with fstype tmpfs\n";
    // The OS disk: idle, constant.
    std::string ds =
        " 259       0 nvme0n1 48211 1302 3920544 10873 90112 20471 7313920 51230 0 61200 62103 0 0 0 0 2211 "
        "804\n"
        " 259       1 nvme0n1p1 312 0 10240 41 2 0 16 1 0 60 42 0 0 0 0 0 0\n"
        " 259       2 nvme0n1p2 47899 1302 3910304 10832 90110 20471 7313904 51229 0 61140 62061 0 0 0 0 0 "
        "0\n";
    uint32_t nvme = 1;
    for (size_t mi = 0; mi < mounts_.size(); ++mi) {
      const MountInfo& info = mounts_[mi];
      auto path_it = info.node_paths.find(node);
      if (path_it == info.node_paths.end()) continue;
      const auto& mount = sc.mounts[mount_rt_[mi].index];
      SlowfsClientStats t;
      for (size_t ii : mount_rt_[mi].instances) {
        const bool local = !instances_[ii]->node.empty();
        if (local && instances_[ii]->node != node) continue;
        for (const auto& s : stats[ii]) {
          if (!local && s.client != key) continue;
          t.writes += s.writes;
          t.write_bytes += s.write_bytes;
          t.write_ns += s.write_ns;
          t.reads += s.reads;
          t.read_bytes += s.read_bytes;
          t.read_ns += s.read_ns;
          t.fsyncs += s.fsyncs;
          t.fsync_ns += s.fsync_ns;
          t.closes += s.closes;
          t.close_ns += s.close_ns;
          t.opens += s.opens;
        }
      }
      if (info.kind == MountKind::kSharedNfs) {
        const std::string addr = fmt::format("10.{}.{}.{}", 20 + mi % 200, n / 250, 10 + n % 240);
        ms += fmt::format("device nfs-{}:/export/{} mounted on {} with fstype nfs4 statvers=1.1\n",
                          mount.name, mount.name, EscapeMountPath(path_it->second.string()));
        ms += fmt::format(
            "\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,acdirmin=30,"
            "acdirmax=60,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr={},local_lock=none\n",
            addr);
        ms += fmt::format("\tage:\t{}\n", age_s);
        ms += "\timpl_id:\tname='',domain='',date='0,0'\n";
        ms += "\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=1048576,bsize=0,namlen=255\n";
        ms +=
            "\tnfsv4:\tbm0=0xfdffbfff,bm1=0xf9be3e,bm2=0x68800,acl=0x3,sessions,pnfs=not configured,"
            "lease_time=90,lease_expired=0\n";
        ms += "\tsec:\tflavor=1,pseudoflavor=1\n";
        // events: inode revalidate, dentry revalidate, ..., vfs open, ..., vfs write, ..., fsync
        ms += fmt::format("\tevents:\t{} {} 0 0 {} 0 {} {} 0 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
                          t.opens * 2, t.opens * 2, t.opens, t.opens * 3, t.reads, t.writes, t.fsyncs);
        const uint64_t page = 4096;
        ms += fmt::format("\tbytes:\t{} {} 0 0 {} {} {} {}\n", t.read_bytes, t.write_bytes, t.read_bytes,
                          t.write_bytes, (t.read_bytes + page - 1) / page, (t.write_bytes + page - 1) / page);
        ms += "\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n";
        const uint64_t rpcs = t.writes + t.reads + t.fsyncs + t.opens * 3 + t.closes + 1;
        ms += fmt::format("\txprt:\ttcp 0 0 1 0 {} {} {} 0 {} 0 2 0 0\n", age_s, rpcs, rpcs, rpcs);
        ms += "\tper-op statistics\n";
        auto op = [&](std::string_view name, uint64_t ops, uint64_t sent, uint64_t recv, uint64_t rtt_ms,
                      uint64_t exec_ms) {
          ms +=
              fmt::format("\t{:>12}: {} {} 0 {} {} 0 {} {} 0\n", name, ops, ops, sent, recv, rtt_ms, exec_ms);
        };
        op("NULL", 1, 44, 24, 0, 0);
        op("READ", t.reads, t.reads * 196, t.read_bytes + t.reads * 120, Ms(t.read_ns),
           Ms(t.read_ns) + t.reads / 50);
        op("WRITE", t.writes, t.write_bytes + t.writes * 216, t.writes * 136, Ms(t.write_ns),
           Ms(t.write_ns) + t.writes / 50);
        op("COMMIT", t.fsyncs, t.fsyncs * 184, t.fsyncs * 136, Ms(t.fsync_ns),
           Ms(t.fsync_ns) + t.fsyncs / 50);
        op("OPEN", t.opens, t.opens * 300, t.opens * 400, t.opens / 10, t.opens / 8);
        op("CLOSE", t.closes, t.closes * 200, t.closes * 130, Ms(t.close_ns), Ms(t.close_ns) + t.closes / 50);
        op("GETATTR", t.opens * 3, t.opens * 3 * 180, t.opens * 3 * 240, t.opens * 3 / 20, t.opens * 3 / 16);
        op("LOOKUP", t.opens, t.opens * 200, t.opens * 300, t.opens / 10, t.opens / 8);
        op("SEQUENCE", rpcs, rpcs * 180, rpcs * 100, rpcs / 40, rpcs / 32);
      } else {
        const uint32_t dev = nvme++;
        ms += fmt::format("device /dev/nvme{}n1 mounted on {} with fstype ext4\n", dev,
                          EscapeMountPath(path_it->second.string()));
        const uint64_t io_ms = Ms(t.write_ns + t.read_ns + t.fsync_ns);
        ds += fmt::format(" 259 {:7} nvme{}n1 {} 0 {} {} {} 0 {} {} 0 {} {} 0 0 0 0 {} {}\n", dev * 8, dev,
                          t.reads, t.read_bytes / 512, Ms(t.read_ns), t.writes, t.write_bytes / 512,
                          Ms(t.write_ns), io_ms, io_ms, t.fsyncs, Ms(t.fsync_ns));
      }
    }
    const fs::path proc = options_.root / "nodes" / node / "proc";
    if (Status s = files_.Write(proc / "self" / "mountstats", ms); !s && first) first = s;
    if (Status s = files_.Write(proc / "diskstats", ds); !s && first) first = s;
  }
  return first;
}

void Storage::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (Tenant& t : tenants_) {
    if (t.pid > 0) Terminate(t.pid);
    t.pid = -1;
  }
  // Binds first (they hold the FUSE mounts), lazily: a process still inside keeps its view.
  for (auto it = binds_.rbegin(); it != binds_.rend(); ++it) {
    if (::umount2(it->c_str(), 0) != 0) ::umount2(it->c_str(), MNT_DETACH);
  }
  binds_.clear();
  for (auto& inst : instances_) {
    if (inst->mounted || IsMounted(inst->mountpoint)) {
      if (::umount2(inst->mountpoint.c_str(), 0) != 0) ::umount2(inst->mountpoint.c_str(), MNT_DETACH);
      inst->mounted = false;
    }
    if (inst->pid > 0) {
      // Unmounting ends a foreground slowfs; if it does not go, signal it.
      if (!WaitExit(inst->pid, std::chrono::milliseconds(3000))) Terminate(inst->pid);
      inst->pid = -1;
    }
  }
}

}  // namespace ithbat::sim::node
