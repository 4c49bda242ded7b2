#include "collect/proc/proc_tree.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/identity/identity_parse.h"

namespace ithbat::collect::proc {
namespace {

// Reads at most max bytes of a /proc file (they report size 0, so no stat-based bound).
std::string ReadSmall(const std::filesystem::path& path, size_t max) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = read(fd, out.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return out;
}

std::filesystem::path PidDir(const std::filesystem::path& root, int32_t pid) {
  return root / std::to_string(pid);
}

std::string_view Basename(std::string_view s) {
  size_t slash = s.rfind('/');
  return slash == std::string_view::npos ? s : s.substr(slash + 1);
}

}  // namespace

std::vector<std::string> ReadArgv(const std::filesystem::path& proc_root, int32_t pid) {
  std::vector<std::string> argv;
  if (pid <= 0) return argv;
  std::string raw = ReadSmall(PidDir(proc_root, pid) / "cmdline", kMaxCmdlineBytes);
  size_t start = 0;
  while (start < raw.size() && argv.size() < kMaxArgs) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    argv.emplace_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

bool IsLauncher(const std::vector<std::string>& argv) {
  auto launcher_name = [](std::string_view base) {
    return base == "torchrun" || base == "deepspeed" || base == "accelerate";
  };
  if (argv.empty()) return false;
  std::string_view base0 = Basename(argv[0]);
  if (launcher_name(base0)) return true;
  if (base0.substr(0, 6) != "python") return false;
  // python [options] -m MODULE ... | python [options] SCRIPT ...
  const size_t n = std::min<size_t>(argv.size(), 8);
  for (size_t i = 1; i < n; ++i) {
    std::string_view a = argv[i];
    if (a == "-m") {
      if (i + 1 >= argv.size()) return false;
      std::string_view m = argv[i + 1];
      return m == "torch.distributed.run" || m == "torch.distributed.launch" ||
             m == "deepspeed.launcher.runner" || m == "deepspeed.launcher.launch" ||
             m == "accelerate.commands.launch" || launcher_name(m);
    }
    if (!a.empty() && a[0] == '-') continue;
    return launcher_name(Basename(a));
  }
  return false;
}

std::optional<int32_t> ReadPpid(const std::filesystem::path& proc_root, int32_t pid) {
  if (pid <= 0) return std::nullopt;
  std::string status = ReadSmall(PidDir(proc_root, pid) / "status", 8192);
  if (status.empty()) return std::nullopt;
  auto parsed = identity::ParseStatus(status);
  if (!parsed || parsed->ppid < 0) return std::nullopt;
  return parsed->ppid;
}

std::vector<int32_t> ReadChildren(const std::filesystem::path& proc_root, int32_t pid, size_t max) {
  std::vector<int32_t> out;
  if (pid <= 0) return out;
  const auto task_dir = PidDir(proc_root, pid) / "task";
  DIR* dir = opendir(task_dir.c_str());
  if (!dir) return out;
  size_t threads = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (++threads > 4096 || out.size() >= max) break;
    std::string text = ReadSmall(task_dir / e->d_name / "children", 64 * 1024);
    std::string_view rest = text;
    while (!rest.empty() && out.size() < max) {
      size_t sp = rest.find(' ');
      std::string_view tok = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
      int32_t child = 0;
      auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), child);
      if (ec == std::errc() && child > 0) out.push_back(child);
    }
  }
  closedir(dir);
  return out;
}

bool ProcessExists(const std::filesystem::path& proc_root, int32_t pid) {
  if (pid <= 0) return false;
  struct stat st {};
  return stat(PidDir(proc_root, pid).c_str(), &st) == 0;
}

std::optional<uint32_t> ProcessUid(const std::filesystem::path& proc_root, int32_t pid) {
  if (pid <= 0) return std::nullopt;
  struct stat st {};
  if (stat(PidDir(proc_root, pid).c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint32_t>(st.st_uid);
}

std::string UserName(uint32_t uid) {
  std::array<char, 4096> buf{};
  passwd pw{};
  passwd* result = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &result) != 0 || result == nullptr) return "";
  return result->pw_name ? std::string(result->pw_name) : std::string();
}

std::vector<OpenFileRef> FindTfeventsFiles(const std::filesystem::path& proc_root, int32_t pid,
                                           size_t max_fds) {
  std::vector<OpenFileRef> out;
  if (pid <= 0) return out;
  const auto fd_dir = PidDir(proc_root, pid) / "fd";
  DIR* dir = opendir(fd_dir.c_str());
  if (!dir) return out;
  size_t seen = 0;
  std::array<char, 4096> target{};
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (++seen > max_fds) break;
    char* end = nullptr;
    const long num = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || num < 0 || num > INT32_MAX) continue;
    ssize_t n = readlinkat(dirfd(dir), e->d_name, target.data(), target.size() - 1);
    if (n <= 0) continue;
    std::string_view path(target.data(), static_cast<size_t>(n));
    if (path.empty() || path[0] != '/') continue;  // pipe:[..], socket:[..], anon_inode:...
    if (Basename(path).substr(0, 20) != "events.out.tfevents.") continue;
    // A deleted file reads "... (deleted)": nothing more will be appended under that path.
    if (path.size() > 10 && path.substr(path.size() - 10) == " (deleted)") continue;
    out.push_back(OpenFileRef{static_cast<int>(num), std::string(path)});
    if (out.size() >= 64) break;
  }
  closedir(dir);
  return out;
}

Result<int> OpenProcessFile(const std::filesystem::path& proc_root, int32_t pid, int fd) {
  if (pid <= 0 || fd < 0) return MakeError(ErrorCode::kInvalidArgument, "no such process file");
  const auto link = PidDir(proc_root, pid) / "fd" / std::to_string(fd);
  struct stat before {};
  if (stat(link.c_str(), &before) != 0) {
    const int err = errno;
    return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, link.string(), err);
  }
  if (!S_ISREG(before.st_mode)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: not a regular file", link.string());
  }
  const int opened = open(link.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (opened < 0) {
    const int err = errno;
    return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, link.string(), err);
  }
  // The process may have put another file on that fd between the stat and the open.
  struct stat after {};
  if (fstat(opened, &after) != 0 || !S_ISREG(after.st_mode) || after.st_dev != before.st_dev ||
      after.st_ino != before.st_ino) {
    close(opened);
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: changed while opened", link.string());
  }
  return opened;
}

}  // namespace ithbat::collect::proc
