// ithbat-slowfs: a FUSE file system that passes through to a backing directory and models slow
// shared storage (the storage model of the simulator; options in sim/README.md, "slowfs").
//
//   ithbat-slowfs [--write-bandwidth BYTES_PER_S] [--fsync-delay-ms MS] [--flush-delay-ms MS]
//                 [--control FILE] [--stats FILE] [--client-env NAME] [--foreground]
//                 BACKING_DIR MOUNTPOINT
//
// Model: every write() waits for a shared link of the configured bandwidth (one virtual clock
// for the whole mount: concurrent writers share it, like a saturated NFS/Lustre client link);
// every fsync/fdatasync waits fsync-delay (and does not sync the backing file: the model, not
// the simulation machine's disk, is the storage); every close() (FUSE
// flush) waits flush-delay. The control file, when given, is re-read whenever its mtime
// changes, so a running simulation can degrade the mount mid-run:
//   write_bandwidth=1000000
//   fsync_delay_ms=200
//   flush_delay_ms=50
// (one key=value per line; unknown keys and malformed lines are ignored; missing keys keep
// their value).
//
// Per-client counters (--stats FILE, rewritten atomically every 100 ms and at unmount): one line
// per client, `client=<key> writes=N write_bytes=N write_ns=N reads=N read_bytes=N read_ns=N
// fsyncs=N fsync_ns=N closes=N close_ns=N opens=N`, where the key is `env:<value>` of the
// variable named by --client-env in the calling process's environment (read once per thread id
// from /proc/<tid>/environ), or `pid:<tgid>` when it is not set or no --client-env was given.
// The times are what the caller waited in the request (the modelled delay plus the backing
// file's own time): a client-side view, like the NFS client's per-op rtt.
#define FUSE_USE_VERSION 31

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <fuse.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace {

struct Config {
  std::atomic<uint64_t> write_bandwidth{0};  // bytes/s, 0 = unlimited
  std::atomic<uint64_t> fsync_delay_us{0};
  std::atomic<uint64_t> flush_delay_us{0};
};

Config g_config;
int g_backing = -1;  // O_PATH fd of the backing directory
std::string g_control;
std::mutex g_control_mu;
timespec g_control_mtime{};
std::chrono::steady_clock::time_point g_control_checked{};

std::mutex g_link_mu;
std::chrono::steady_clock::time_point g_link_free{};  // when the modelled link is idle again

bool ParseU64(std::string_view s, uint64_t* out);

// ---- per-client statistics ------------------------------------------------------------------

struct ClientStats {
  uint64_t writes = 0, write_bytes = 0, write_ns = 0;
  uint64_t reads = 0, read_bytes = 0, read_ns = 0;
  uint64_t fsyncs = 0, fsync_ns = 0;
  uint64_t closes = 0, close_ns = 0;
  uint64_t opens = 0;
};

constexpr size_t kMaxClients = 4096;   // distinct keys kept; more fold into "other"
constexpr size_t kMaxKeyCache = 8192;  // thread id -> key; cleared when full
constexpr size_t kMaxEnvironBytes = 1 << 20;

std::string g_stats_path;
std::string g_client_env;
std::mutex g_stats_mu;
std::map<std::string, ClientStats> g_stats;
std::unordered_map<pid_t, std::string> g_key_cache;
std::atomic<bool> g_stats_stop{false};
std::thread g_stats_thread;

int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Reads a small /proc file of another process (bounded).
std::string ReadProc(const std::string& path, size_t max) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[8192];
  while (out.size() < max) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(std::min<size_t>(static_cast<size_t>(n), max - out.size())));
  }
  close(fd);
  return out;
}

// The key of the calling thread `tid` (the FUSE request's pid is the caller's thread id).
std::string ClientKeyUncached(pid_t tid) {
  if (!g_client_env.empty()) {
    const std::string env = ReadProc("/proc/" + std::to_string(tid) + "/environ", kMaxEnvironBytes);
    const std::string prefix = g_client_env + "=";
    size_t pos = 0;
    while (pos < env.size()) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      std::string_view var(env.data() + pos, end - pos);
      if (var.substr(0, prefix.size()) == prefix) {
        std::string value(var.substr(prefix.size(), 128));
        for (char& c : value) {
          if (c <= ' ' || c > '~') c = '_';
        }
        return "env:" + value;
      }
      pos = end + 1;
    }
  }
  pid_t tgid = tid;
  const std::string status = ReadProc("/proc/" + std::to_string(tid) + "/status", 16384);
  if (size_t p = status.find("\nTgid:"); p != std::string::npos) {
    uint64_t v = 0;
    size_t i = p + 6;
    while (i < status.size() && (status[i] == ' ' || status[i] == '\t')) ++i;
    size_t j = i;
    while (j < status.size() && status[j] >= '0' && status[j] <= '9') ++j;
    if (j > i && ParseU64(std::string_view(status).substr(i, j - i), &v)) tgid = static_cast<pid_t>(v);
  }
  return "pid:" + std::to_string(tgid);
}

// Adds to the caller's counters (called after the operation, with its duration).
template <class Fn>
void Account(Fn&& fn) {
  const fuse_context* ctx = fuse_get_context();
  const pid_t tid = ctx != nullptr ? ctx->pid : 0;
  std::string key;
  {
    std::lock_guard lock(g_stats_mu);
    auto it = g_key_cache.find(tid);
    if (it != g_key_cache.end()) key = it->second;
  }
  if (key.empty()) {
    key = tid > 0 ? ClientKeyUncached(tid) : std::string("pid:0");
    std::lock_guard lock(g_stats_mu);
    if (g_key_cache.size() >= kMaxKeyCache) g_key_cache.clear();
    g_key_cache[tid] = key;
  }
  std::lock_guard lock(g_stats_mu);
  auto it = g_stats.find(key);
  if (it == g_stats.end()) {
    if (g_stats.size() >= kMaxClients) key = "other";
    it = g_stats.try_emplace(key).first;
  }
  fn(it->second);
}

void WriteStats() {
  if (g_stats_path.empty()) return;
  std::string text;
  {
    std::lock_guard lock(g_stats_mu);
    for (const auto& [key, s] : g_stats) {
      char line[512];
      std::snprintf(
          line, sizeof(line),
          "client=%s writes=%llu write_bytes=%llu write_ns=%llu reads=%llu read_bytes=%llu read_ns=%llu "
          "fsyncs=%llu fsync_ns=%llu closes=%llu close_ns=%llu opens=%llu\n",
          key.c_str(), static_cast<unsigned long long>(s.writes),
          static_cast<unsigned long long>(s.write_bytes), static_cast<unsigned long long>(s.write_ns),
          static_cast<unsigned long long>(s.reads), static_cast<unsigned long long>(s.read_bytes),
          static_cast<unsigned long long>(s.read_ns), static_cast<unsigned long long>(s.fsyncs),
          static_cast<unsigned long long>(s.fsync_ns), static_cast<unsigned long long>(s.closes),
          static_cast<unsigned long long>(s.close_ns), static_cast<unsigned long long>(s.opens));
      text += line;
    }
  }
  const std::string tmp = g_stats_path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (done == text.size()) rename(tmp.c_str(), g_stats_path.c_str());
}

void StatsLoop() {
  while (!g_stats_stop.load()) {
    WriteStats();
    for (int i = 0; i < 10 && !g_stats_stop.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// Applies key=value lines (bounded: the first 4 KiB).
void ApplyControl(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = line.substr(0, eq);
    uint64_t v = 0;
    if (!ParseU64(line.substr(eq + 1), &v)) continue;
    if (key == "write_bandwidth")
      g_config.write_bandwidth = v;
    else if (key == "fsync_delay_ms")
      g_config.fsync_delay_us = v * 1000;
    else if (key == "flush_delay_ms")
      g_config.flush_delay_us = v * 1000;
    else if (key == "fsync_delay_us")
      g_config.fsync_delay_us = v;
    else if (key == "flush_delay_us")
      g_config.flush_delay_us = v;
  }
}

// Re-reads the control file when its mtime moved (checked at most every 20 ms).
void CheckControl() {
  if (g_control.empty()) return;
  std::lock_guard lock(g_control_mu);
  const auto now = std::chrono::steady_clock::now();
  if (now - g_control_checked < std::chrono::milliseconds(20)) return;
  g_control_checked = now;
  struct stat st {};
  if (stat(g_control.c_str(), &st) != 0) return;
  if (st.st_mtim.tv_sec == g_control_mtime.tv_sec && st.st_mtim.tv_nsec == g_control_mtime.tv_nsec) return;
  g_control_mtime = st.st_mtim;
  int fd = open(g_control.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n > 0) ApplyControl(std::string_view(buf, static_cast<size_t>(n)));
}

void SleepUs(uint64_t us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// Waits for `bytes` to cross the modelled link.
void ThrottleWrite(size_t bytes) {
  const uint64_t bw = g_config.write_bandwidth.load();
  if (bw == 0 || bytes == 0) return;
  std::chrono::steady_clock::time_point done;
  {
    std::lock_guard lock(g_link_mu);
    const auto now = std::chrono::steady_clock::now();
    const auto start = g_link_free > now ? g_link_free : now;
    done = start + std::chrono::nanoseconds(static_cast<int64_t>(bytes * 1'000'000'000ull / bw));
    g_link_free = done;
  }
  std::this_thread::sleep_until(done);
}

// "/a/b" -> "a/b", "/" -> "." (relative to the backing directory fd).
std::string Rel(const char* path) {
  while (*path == '/') ++path;
  return *path ? std::string(path) : std::string(".");
}

int Err() { return -errno; }

int FsGetattr(const char* path, struct stat* st, fuse_file_info* fi) {
  if (fi) return fstat(static_cast<int>(fi->fh), st) == 0 ? 0 : Err();
  return fstatat(g_backing, Rel(path).c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : Err();
}

int FsReaddir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  int fd = openat(g_backing, Rel(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err();
  DIR* d = fdopendir(fd);
  if (!d) {
    int e = Err();
    close(fd);
    return e;
  }
  while (dirent* e = readdir(d)) {
    struct stat st {};
    st.st_ino = e->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(e->d_type));
    if (fill(buf, e->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0))) break;
  }
  closedir(d);
  return 0;
}

int FsOpen(const char* path, fuse_file_info* fi) {
  int fd = openat(g_backing, Rel(path).c_str(), (fi->flags & ~O_NOFOLLOW) | O_CLOEXEC);
  if (fd < 0) return Err();
  fi->fh = static_cast<uint64_t>(fd);
  Account([](ClientStats& s) { s.opens++; });
  return 0;
}

int FsCreate(const char* path, mode_t mode, fuse_file_info* fi) {
  int fd = openat(g_backing, Rel(path).c_str(), fi->flags | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return Err();
  fi->fh = static_cast<uint64_t>(fd);
  Account([](ClientStats& s) { s.opens++; });
  return 0;
}

int FsRead(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  const int64_t t0 = MonoNs();
  ssize_t n = pread(static_cast<int>(fi->fh), buf, size, off);
  if (n < 0) return Err();
  const int64_t dt = MonoNs() - t0;
  Account([&](ClientStats& s) {
    s.reads++;
    s.read_bytes += static_cast<uint64_t>(n);
    s.read_ns += static_cast<uint64_t>(dt);
  });
  return static_cast<int>(n);
}

int FsWrite(const char*, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  const int64_t t0 = MonoNs();
  CheckControl();
  ThrottleWrite(size);
  ssize_t n = pwrite(static_cast<int>(fi->fh), buf, size, off);
  if (n < 0) return Err();
  const int64_t dt = MonoNs() - t0;
  Account([&](ClientStats& s) {
    s.writes++;
    s.write_bytes += static_cast<uint64_t>(n);
    s.write_ns += static_cast<uint64_t>(dt);
  });
  return static_cast<int>(n);
}

int FsFlush(const char*, fuse_file_info*) {
  const int64_t t0 = MonoNs();
  CheckControl();
  SleepUs(g_config.flush_delay_us.load());
  const int64_t dt = MonoNs() - t0;
  Account([&](ClientStats& s) {
    s.closes++;
    s.close_ns += static_cast<uint64_t>(dt);
  });
  return 0;
}

int FsRelease(const char*, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  return 0;
}

int FsFsync(const char*, int, fuse_file_info*) {
  const int64_t t0 = MonoNs();
  CheckControl();
  // The modelled delay is the whole fsync: the backing file is not synced. Its own flush is
  // the simulation machine's disk, not the modelled storage, and it is neither small nor
  // steady: on the 2-core dev VMs a save's fsync took 0.12-0.34 s for a modelled 1-2 ms,
  // and twice as long beside an io tenant, so the healthy baseline swallowed the modelled
  // slowdown (docs/diagnoses.md, "Session 14"). The data stays in the page cache, which
  // writes it back on its own; nothing reads it after the run.
  SleepUs(g_config.fsync_delay_us.load());
  const int64_t dt = MonoNs() - t0;
  Account([&](ClientStats& s) {
    s.fsyncs++;
    s.fsync_ns += static_cast<uint64_t>(dt);
  });
  return 0;
}

int FsUnlink(const char* path) { return unlinkat(g_backing, Rel(path).c_str(), 0) == 0 ? 0 : Err(); }
int FsMkdir(const char* path, mode_t mode) {
  return mkdirat(g_backing, Rel(path).c_str(), mode) == 0 ? 0 : Err();
}
int FsRmdir(const char* path) {
  return unlinkat(g_backing, Rel(path).c_str(), AT_REMOVEDIR) == 0 ? 0 : Err();
}
int FsRename(const char* from, const char* to, unsigned int flags) {
  if (flags) return -EINVAL;
  return renameat(g_backing, Rel(from).c_str(), g_backing, Rel(to).c_str()) == 0 ? 0 : Err();
}
int FsTruncate(const char* path, off_t size, fuse_file_info* fi) {
  if (fi) return ftruncate(static_cast<int>(fi->fh), size) == 0 ? 0 : Err();
  int fd = openat(g_backing, Rel(path).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Err();
  int r = ftruncate(fd, size) == 0 ? 0 : Err();
  close(fd);
  return r;
}
int FsChmod(const char* path, mode_t mode, fuse_file_info*) {
  return fchmodat(g_backing, Rel(path).c_str(), mode, 0) == 0 ? 0 : Err();
}
int FsUtimens(const char* path, const timespec tv[2], fuse_file_info*) {
  return utimensat(g_backing, Rel(path).c_str(), tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : Err();
}
int FsStatfs(const char*, struct statvfs* st) { return fstatvfs(g_backing, st) == 0 ? 0 : Err(); }

void* FsInit(fuse_conn_info*, fuse_config* cfg) {
  // Every write reaches the model (no kernel write-back cache), attributes are not cached
  // long: the backing directory is the truth.
  cfg->use_ino = 1;
  cfg->direct_io = 0;
  cfg->kernel_cache = 0;
  // Started here, after fuse_main daemonized (a thread would not survive the fork).
  if (!g_stats_path.empty()) g_stats_thread = std::thread(StatsLoop);
  return nullptr;
}

void FsDestroy(void*) {
  g_stats_stop = true;
  if (g_stats_thread.joinable()) g_stats_thread.join();
  WriteStats();
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--write-bandwidth BYTES_PER_S] [--fsync-delay-ms MS] [--flush-delay-ms MS]\n"
               "          [--control FILE] [--stats FILE] [--client-env NAME] [--foreground]\n"
               "          BACKING_DIR MOUNTPOINT\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  bool foreground = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](uint64_t* out) {
      if (i + 1 >= argc || !ParseU64(argv[i + 1], out)) return false;
      ++i;
      return true;
    };
    uint64_t v = 0;
    if (a == "--write-bandwidth") {
      if (!value(&v)) return Usage(argv[0]);
      g_config.write_bandwidth = v;
    } else if (a == "--fsync-delay-ms") {
      if (!value(&v)) return Usage(argv[0]);
      g_config.fsync_delay_us = v * 1000;
    } else if (a == "--flush-delay-ms") {
      if (!value(&v)) return Usage(argv[0]);
      g_config.flush_delay_us = v * 1000;
    } else if (a == "--control") {
      if (i + 1 >= argc) return Usage(argv[0]);
      g_control = argv[++i];
    } else if (a == "--stats") {
      if (i + 1 >= argc) return Usage(argv[0]);
      g_stats_path = argv[++i];
    } else if (a == "--client-env") {
      if (i + 1 >= argc) return Usage(argv[0]);
      g_client_env = argv[++i];
    } else if (a == "--foreground" || a == "-f") {
      foreground = true;
    } else if (a == "--help" || a == "-h") {
      Usage(argv[0]);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return Usage(argv[0]);
    } else {
      positional.emplace_back(a);
    }
  }
  if (positional.size() != 2) return Usage(argv[0]);
  g_backing = open(positional[0].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_backing < 0) {
    std::fprintf(stderr, "ithbat-slowfs: cannot open backing directory %s: %s\n", positional[0].c_str(),
                 std::strerror(errno));
    return 1;
  }
  CheckControl();

  fuse_operations ops{};
  ops.getattr = FsGetattr;
  ops.readdir = FsReaddir;
  ops.open = FsOpen;
  ops.create = FsCreate;
  ops.read = FsRead;
  ops.write = FsWrite;
  ops.flush = FsFlush;
  ops.release = FsRelease;
  ops.fsync = FsFsync;
  ops.unlink = FsUnlink;
  ops.mkdir = FsMkdir;
  ops.rmdir = FsRmdir;
  ops.rename = FsRename;
  ops.truncate = FsTruncate;
  ops.chmod = FsChmod;
  ops.utimens = FsUtimens;
  ops.statfs = FsStatfs;
  ops.init = FsInit;
  ops.destroy = FsDestroy;

  std::vector<std::string> fargs = {argv[0], positional[1],   "-o", "fsname=ithbat-slowfs,subtype=slowfs",
                                    "-o",    "max_threads=64"};
  if (foreground) fargs.emplace_back("-f");
  std::vector<char*> cargs;
  for (auto& s : fargs) cargs.push_back(s.data());
  return fuse_main(static_cast<int>(cargs.size()), cargs.data(), &ops, nullptr);
}
