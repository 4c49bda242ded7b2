#include "collect/probes/proc_maps.h"

#include <charconv>
#include <filesystem>

#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "core/file_util.h"

namespace ithbat::collect::probes {
namespace {

constexpr size_t kMaxMapsBytes = 64 << 20;

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string_view NextField(std::string_view& line) {
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  const size_t sp = line.find(' ');
  std::string_view f = line.substr(0, sp);
  line.remove_prefix(sp == std::string_view::npos ? line.size() : sp);
  return f;
}

bool SameFile(const struct stat& st, const MappedLibrary& lib) {
  return static_cast<uint64_t>(st.st_ino) == lib.inode && major(st.st_dev) == lib.dev_major &&
         minor(st.st_dev) == lib.dev_minor;
}

// The file and every directory above it: root-owned, not writable by group or others, no
// symlink on the way (a symlink could be swapped by whoever owns its directory — but its
// directory is checked too, so lstat on the final component is what matters).
Status CheckRootOwnedChain(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.is_absolute()) return MakeErrorF(ErrorCode::kPermission, "{}: not an absolute path", path);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return ErrnoError(ErrorCode::kNotFound, path, errno);
  if (!S_ISREG(st.st_mode)) return MakeErrorF(ErrorCode::kPermission, "{}: not a regular file", path);
  for (std::filesystem::path cur = p;; cur = cur.parent_path()) {
    struct stat s {};
    if (stat(cur.c_str(), &s) != 0) return ErrnoError(ErrorCode::kNotFound, cur.string(), errno);
    if (s.st_uid != 0) return MakeErrorF(ErrorCode::kPermission, "{} is not owned by root", cur.string());
    if ((s.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return MakeErrorF(ErrorCode::kPermission, "{} is writable by group or others", cur.string());
    }
    if (cur == cur.root_path()) break;
  }
  return Ok();
}

}  // namespace

std::string_view LibraryKindName(LibraryKind k) { return k == LibraryKind::kCuda ? "cuda" : "nccl"; }

std::vector<MapsEntry> ParseProcMaps(std::string_view text, size_t* skipped, size_t max_lines) {
  std::vector<MapsEntry> out;
  size_t bad = 0;
  size_t lines = 0;
  while (!text.empty() && lines < max_lines) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++lines;
    if (line.empty()) continue;
    MapsEntry e;
    const std::string_view range = NextField(line);
    const std::string_view perms = NextField(line);
    const std::string_view offset = NextField(line);
    const std::string_view dev = NextField(line);
    const std::string_view inode = NextField(line);
    const size_t dash = range.find('-');
    const size_t colon = dev.find(':');
    uint64_t maj = 0, min = 0;
    if (dash == std::string_view::npos || colon == std::string_view::npos || perms.size() < 4 ||
        !ParseHex(range.substr(0, dash), &e.start) || !ParseHex(range.substr(dash + 1), &e.end) ||
        !ParseHex(offset, &e.offset) || !ParseHex(dev.substr(0, colon), &maj) ||
        !ParseHex(dev.substr(colon + 1), &min) || maj > UINT32_MAX || min > UINT32_MAX) {
      ++bad;
      continue;
    }
    auto [p, ec] = std::from_chars(inode.data(), inode.data() + inode.size(), e.inode, 10);
    if (ec != std::errc() || p != inode.data() + inode.size()) {
      ++bad;
      continue;
    }
    e.executable = perms[2] == 'x';
    e.dev_major = static_cast<uint32_t>(maj);
    e.dev_minor = static_cast<uint32_t>(min);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    e.path = std::string(line);
    out.push_back(std::move(e));
  }
  if (skipped != nullptr) *skipped = bad;
  return out;
}

std::optional<LibraryKind> ClassifyLibrary(std::string_view path) {
  if (path.ends_with(" (deleted)")) return std::nullopt;
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  auto is = [&](std::string_view stem) {
    return base.starts_with(stem) && (base.size() == stem.size() || base[stem.size()] == '.');
  };
  if (is("libcuda.so")) return LibraryKind::kCuda;
  if (is("libnccl.so")) return LibraryKind::kNccl;
  return std::nullopt;
}

std::vector<MappedLibrary> FindLibraries(const std::vector<MapsEntry>& entries) {
  std::vector<MappedLibrary> out;
  for (const MapsEntry& e : entries) {
    if (e.inode == 0 || e.path.empty() || e.path.front() != '/') continue;
    const auto kind = ClassifyLibrary(e.path);
    if (!kind) continue;
    bool seen = false;
    for (const MappedLibrary& m : out) {
      seen |= m.inode == e.inode && m.dev_major == e.dev_major && m.dev_minor == e.dev_minor;
    }
    if (seen) continue;
    out.push_back({*kind, e.path, e.dev_major, e.dev_minor, e.inode, e.start, e.end});
  }
  return out;
}

Result<std::vector<MappedLibrary>> ReadMappedLibraries(const std::string& procfs, int32_t pid) {
  auto text = ReadFileBounded(fmt::format("{}/{}/maps", procfs, pid), kMaxMapsBytes);
  if (!text) return std::unexpected(text.error());
  return FindLibraries(ParseProcMaps(*text));
}

Result<std::string> AgentPathFor(const std::string& procfs, int32_t pid, const MappedLibrary& lib) {
  const std::string via_root = fmt::format("{}/{}/root{}", procfs, pid, lib.path);
  struct stat st {};
  if (stat(via_root.c_str(), &st) == 0 && SameFile(st, lib)) return via_root;
  const std::string via_map =
      fmt::format("{}/{}/map_files/{:x}-{:x}", procfs, pid, lib.map_start, lib.map_end);
  if (stat(via_map.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == lib.inode) return via_map;
  return MakeErrorF(ErrorCode::kNotFound, "pid {}: {} is no longer reachable (process gone or file replaced)",
                    pid, lib.path);
}

Result<std::string> TrustedHostPath(const std::string& procfs, int32_t pid, const MappedLibrary& lib,
                                    const std::vector<std::string>& host_dirs) {
  std::vector<std::string> candidates;
  struct stat agent_root {
  }, proc_root{};
  if (stat("/", &agent_root) == 0 && stat(fmt::format("{}/{}/root/", procfs, pid).c_str(), &proc_root) == 0 &&
      agent_root.st_dev == proc_root.st_dev && agent_root.st_ino == proc_root.st_ino) {
    candidates.push_back(lib.path);
  }
  const size_t slash = lib.path.rfind('/');
  const std::string base = lib.path.substr(slash + 1);
  for (const std::string& d : host_dirs) candidates.push_back(d + "/" + base);
  std::string why = "no candidate path";
  for (const std::string& c : candidates) {
    struct stat st {};
    if (stat(c.c_str(), &st) != 0 || !SameFile(st, lib)) continue;
    if (auto s = CheckRootOwnedChain(c); !s) {
      why = s.error().message;
      continue;
    }
    return c;
  }
  return MakeErrorF(ErrorCode::kPermission, "pid {}: {} is not a trusted host driver library ({})", pid,
                    lib.path, why);
}

const std::vector<std::string>& DefaultDriverDirs() {
  static const std::vector<std::string> dirs = {"/usr/lib/x86_64-linux-gnu",
                                                "/usr/lib/aarch64-linux-gnu",
                                                "/usr/lib64",
                                                "/usr/lib",
                                                "/lib64",
                                                "/usr/local/nvidia/lib64",
                                                "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"};
  return dirs;
}

}  // namespace ithbat::collect::probes
