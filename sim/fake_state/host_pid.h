#pragma once
// The process's pid as the host sees it, for the fake libraries. Inside a container's PID
// namespace getpid() is the namespace's pid, but NVML (and so the agent) reports host pids, and
// /proc here is the host's mount: readlink("/proc/self") names the host pid. Header-only and free
// of the project's libraries, so every fake shared library can include it (each gets its own
// copy of the cache, which is per process anyway).
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include <unistd.h>

namespace ithbat::sim {

// Cached per process (re-read after a fork, when getpid() changes); getpid() when /proc cannot tell.
inline uint32_t HostPid() {
  static std::atomic<pid_t> cached_ns_pid{-1};
  static std::atomic<uint32_t> cached_host_pid{0};
  const pid_t me = getpid();
  if (cached_ns_pid.load(std::memory_order_acquire) == me) return cached_host_pid.load(std::memory_order_relaxed);
  uint32_t host = static_cast<uint32_t>(me);
  char buf[32];
  const ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
  if (n > 0) {
    uint64_t v = 0;
    bool ok = true;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] < '0' || buf[i] > '9' || v > 0xffffffffull / 10) {
        ok = false;
        break;
      }
      v = v * 10 + static_cast<uint64_t>(buf[i] - '0');
    }
    if (ok && v > 0 && v <= 0x7fffffffull) host = static_cast<uint32_t>(v);
  }
  cached_host_pid.store(host, std::memory_order_relaxed);
  cached_ns_pid.store(me, std::memory_order_release);
  return host;
}

// Whether a host pid (HostPid() of another process) still runs: /proc is the host's, so this
// holds across PID namespaces, where kill(pid, 0) would name another process.
inline bool HostPidAlive(uint32_t pid) {
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%u", pid);
  return access(path, F_OK) == 0 || errno != ENOENT;
}

}  // namespace ithbat::sim
