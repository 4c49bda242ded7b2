#pragma once
// What the job-output collector reads of a process in the agent's real /proc (never the
// --procfs statistics root): command line, parent, children, owner, open TensorBoard files.
// Every read is bounded; a process that vanished reads as empty / nullopt, never an error.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::proc {

inline constexpr size_t kMaxCmdlineBytes = 4096;
inline constexpr size_t kMaxArgs = 64;

// argv from /proc/<pid>/cmdline (at most kMaxCmdlineBytes, kMaxArgs).
std::vector<std::string> ReadArgv(const std::filesystem::path& proc_root, int32_t pid);
// argv joined by spaces (the parser's command-line hint).
std::string JoinArgv(const std::vector<std::string>& argv);
// A launcher of distributed training: torchrun, python -m torch.distributed.run/launch,
// deepspeed, accelerate (launch). Its own output carries the elastic failure lines.
bool IsLauncher(const std::vector<std::string>& argv);
// PPid from /proc/<pid>/status.
std::optional<int32_t> ReadPpid(const std::filesystem::path& proc_root, int32_t pid);
// Children of every thread (/proc/<pid>/task/*/children), at most `max`.
std::vector<int32_t> ReadChildren(const std::filesystem::path& proc_root, int32_t pid, size_t max);
bool ProcessExists(const std::filesystem::path& proc_root, int32_t pid);
// The owner of /proc/<pid> (its real uid).
std::optional<uint32_t> ProcessUid(const std::filesystem::path& proc_root, int32_t pid);
// The user name of a uid ("" when it has none).
std::string UserName(uint32_t uid);
struct OpenFileRef {
  int fd = -1;       // the descriptor number in the process
  std::string path;  // what /proc/<pid>/fd/<fd> reads: a path in the process's mount
                     // namespace, for names and messages only, never to be opened
};
// Open files named events.out.tfevents.* among the first max_fds fds of pid (at most 64).
std::vector<OpenFileRef> FindTfeventsFiles(const std::filesystem::path& proc_root, int32_t pid,
                                           size_t max_fds);
// Opens the process's own open file `fd` through /proc/<pid>/fd/<fd> (the file the process
// holds, whatever its path names now or in the agent's mount namespace), read-only, with
// O_NONBLOCK|O_NOCTTY|O_CLOEXEC. Only a regular file is opened: the link is stat'ed first, so
// a FIFO or device the process holds is never opened (no hang, no driver side effects), and
// checked again after the open. Returns the new descriptor, owned by the caller.
// kNotFound when the process or fd is gone, kInvalidArgument when not a regular file, kIo.
Result<int> OpenProcessFile(const std::filesystem::path& proc_root, int32_t pid, int fd);

}  // namespace ithbat::collect::proc
