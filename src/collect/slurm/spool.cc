#include "collect/slurm/spool.h"

#include <cerrno>
#include <string>

#include <dirent.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ithbat::collect {
namespace {

// Counts the records waiting (names ending in .json), stopping at `limit`.
size_t CountRecords(int dirfd, size_t limit) {
  const int fd = dup(dirfd);
  if (fd < 0) return 0;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return 0;
  }
  size_t n = 0;
  while (const dirent* e = readdir(d)) {
    const std::string_view name(e->d_name);
    if (name.size() > 5 && name.ends_with(".json") && ++n >= limit) break;
  }
  closedir(d);
  return n;
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(ErrorCode::kIo, "write spool record", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok();
}

}  // namespace

Status CheckSpoolDirectory(const std::filesystem::path& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return MakeErrorF(ErrorCode::kNotFound, "spool {}: does not exist", dir.string());
    return ErrnoError(ErrorCode::kIo, fmt::format("spool {}", dir.string()), errno);
  }
  if (S_ISLNK(st.st_mode))
    return MakeErrorF(ErrorCode::kPermission, "spool {}: is a symlink, refused", dir.string());
  if (!S_ISDIR(st.st_mode))
    return MakeErrorF(ErrorCode::kPermission, "spool {}: not a directory", dir.string());
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return MakeErrorF(ErrorCode::kPermission,
                      "spool {}: owned by uid {}, not root: refused (anyone could forge job records)",
                      dir.string(), st.st_uid);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return MakeErrorF(
        ErrorCode::kPermission,
        "spool {}: writable by group or others (mode {:o}): refused (anyone could forge job records)",
        dir.string(), st.st_mode & 07777);
  }
  return Ok();
}

Status WriteSpoolRecord(const std::filesystem::path& dir, const SlurmJobRecord& record, size_t max_files) {
  // The parent (/run/ithbat) may hold other things of the agent's; only the spool is private.
  if (dir.has_parent_path() && mkdir(dir.parent_path().c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(ErrorCode::kIo, fmt::format("create {}", dir.parent_path().string()), errno);
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError(ErrorCode::kIo, fmt::format("create {}", dir.string()), errno);
  }
  if (auto s = CheckSpoolDirectory(dir); !s) return s;
  const int dirfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0) return ErrnoError(ErrorCode::kIo, fmt::format("open {}", dir.string()), errno);
  const size_t waiting = CountRecords(dirfd, max_files);
  if (waiting >= max_files) {
    close(dirfd);
    return MakeErrorF(ErrorCode::kResourceExhausted,
                      "spool {}: {} records wait already (is the agent running with --slurm-spool {}?); "
                      "this one is dropped",
                      dir.string(), waiting, dir.string());
  }
  const std::string name = RecordFileName(record);
  const std::string tmp = fmt::format(".tmp-{}-{}", getpid(), name);
  const int fd = openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    close(dirfd);
    return ErrnoError(ErrorCode::kIo, fmt::format("create {}/{}", dir.string(), tmp), err);
  }
  Status s = WriteAll(fd, RecordToJson(record) + "\n");
  if (close(fd) != 0 && s) s = ErrnoError(ErrorCode::kIo, "close spool record", errno);
  if (s && renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    s = ErrnoError(ErrorCode::kIo, fmt::format("rename to {}/{}", dir.string(), name), errno);
  }
  if (!s) unlinkat(dirfd, tmp.c_str(), 0);
  close(dirfd);
  return s;
}

}  // namespace ithbat::collect
