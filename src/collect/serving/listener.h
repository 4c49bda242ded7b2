#pragma once
// Whether the process a command line names is the one answering on the port it names (issue 20
// item 2). Any local user can start a process called `vllm serve --port 8000`; the agent, as
// root, must scrape port 8000 only when that process (or another of the same server's
// processes) holds the socket listening there. Otherwise port 8000 may be another program's,
// scraped under a vLLM label.
//
// Two halves: which sockets listen on the port, asked of the kernel by sock_diag netlink in the
// agent's own network namespace (where the scrape connects); and whether one of them is among
// the process's descriptors (/proc/<pid>/fd/* → "socket:[inode]"). Netlink, not
// /proc/net/tcp: asked for listening sockets only, the kernel walks its listening table, while
// /proc/net/tcp lists every connection of the namespace (24 ms for 14 000 sockets in
// TIME_WAIT on the development VM; docs/performance.md).
//
// Bounded: at most kMaxListeners inodes kept, at most kMaxDescriptorsScanned of a process's
// descriptors looked at.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::serving {

inline constexpr size_t kMaxListeners = 4096;
inline constexpr size_t kMaxDescriptorsScanned = 1 << 16;

// The inodes of the TCP sockets (IPv4 and IPv6) listening on `port`, any local address, in this
// process's network namespace, sorted. Errors: kUnavailable (netlink refused or answered
// something else), kResourceExhausted (more than kMaxListeners).
Result<std::vector<uint64_t>> ListeningInodes(uint16_t port);

// Whether one of `pid`'s descriptors (proc_root/pid/fd) is a socket whose inode is in `inodes`
// (sorted). Errors: kNotFound (the pid is gone), kPermission, kResourceExhausted (more
// descriptors than are scanned, none of them a match).
Result<bool> HoldsSocket(const std::filesystem::path& proc_root, int32_t pid, const std::vector<uint64_t>& inodes);

}  // namespace ithbat::collect::serving
