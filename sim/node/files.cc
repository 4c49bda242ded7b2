#include "node/files.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/core.h>
#include <time.h>
#include <unistd.h>

namespace ithbat::sim::node {

Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return MakeErrorF(ErrorCode::kIo, "create {}: {}", path.parent_path().string(), ec.message());
  const std::string tmp = fmt::format("{}.tmp{}", path.string(), getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return MakeErrorF(ErrorCode::kIo, "create {}: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return MakeErrorF(ErrorCode::kIo, "write {}: {}", tmp, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return MakeErrorF(ErrorCode::kIo, "rename {}: {}", path.string(), std::strerror(e));
  }
  return Ok();
}

Status FileWriter::Write(const std::filesystem::path& path, std::string_view content, bool force) {
  auto it = last_.find(path.string());
  if (!force && it != last_.end() && it->second == content) return Ok();
  if (Status s = WriteFileAtomic(path, content); !s) return s;
  if (it == last_.end()) {
    last_.emplace(path.string(), std::string(content));
  } else {
    it->second.assign(content);
  }
  return Ok();
}

uint64_t StreamSeed(uint64_t seed, std::string_view tag) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : tag) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  uint64_t z = seed ^ h;
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {
int64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t RealtimeNs() { return ClockNs(CLOCK_REALTIME); }
int64_t BoottimeNs() { return ClockNs(CLOCK_BOOTTIME); }

}  // namespace ithbat::sim::node
