#pragma once
// Whether the process a command line names is the one answering on the port it names (issue 20
// item 2). Any local user can start a process called `vllm serve --port 8000`; the agent, as
// root, must scrape port 8000 only when that process (or another of the same server's
// processes) holds the socket listening there: its namespace's /proc/<pid>/net/tcp and tcp6 give
// the inodes of the sockets listening on the port, and one of /proc/<pid>/fd/* must link to
// "socket:[inode]". Otherwise port 8000 may be another user's service, scraped under a vLLM
// label.
//
// Bounded: a socket table is read up to kMaxSocketTableBytes (a node with 100 000 connections
// writes ~15 MB), at most kMaxDescriptorsScanned of a process's descriptors are looked at.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::serving {

inline constexpr size_t kMaxSocketTableBytes = 32 << 20;
inline constexpr size_t kMaxDescriptorsScanned = 1 << 16;

// The inodes of the sockets in LISTEN state on `port`, any local address, in the text of a
// /proc/net/tcp or /proc/net/tcp6 table. Lines that do not parse are skipped.
std::vector<uint64_t> ListeningInodes(std::string_view table, uint16_t port);

// Whether `pid` holds a socket listening on `port`, per the tables of its own network namespace
// (proc_root/pid/net/tcp, tcp6) and its descriptors (proc_root/pid/fd). false when nothing
// listens on the port or another process holds the socket. Errors: kNotFound (the pid is gone),
// kPermission, kResourceExhausted (a table over its bound, or more descriptors than are scanned
// without finding the socket).
Result<bool> HoldsListener(const std::filesystem::path& proc_root, int32_t pid, uint16_t port);

}  // namespace ithbat::collect::serving
