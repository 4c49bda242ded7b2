#pragma once
// Which libcuda / libnccl files a process maps (/proc/<pid>/maps), how the agent reaches each
// file (through /proc/<pid>/root for processes in containers), and whether a file is the host's
// own driver library (the only kind the agent may dlopen: see TrustedHostPath).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "core/result.h"

namespace ithbat::collect::probes {

enum class LibraryKind : uint8_t { kCuda, kNccl };
std::string_view LibraryKindName(LibraryKind k);  // "cuda" / "nccl"

struct MapsEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  bool executable = false;
  uint64_t offset = 0;
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  std::string path;  // as the process sees it; may end in " (deleted)"
};

// Parses a maps file's text. Malformed lines are skipped (counted in *skipped when given);
// at most `max_lines` lines are read.
std::vector<MapsEntry> ParseProcMaps(std::string_view text, size_t* skipped = nullptr,
                                     size_t max_lines = 1 << 20);

// The library kind a file name means: libcuda.so[.*] / libnccl.so[.*] (not libcudart, libcudnn).
std::optional<LibraryKind> ClassifyLibrary(std::string_view path);

struct MappedLibrary {
  LibraryKind kind = LibraryKind::kCuda;
  std::string path;  // in the process's mount namespace
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  uint64_t map_start = 0;  // one mapping of the file (for /proc/<pid>/map_files)
  uint64_t map_end = 0;
  friend bool operator==(const MappedLibrary&, const MappedLibrary&) = default;
};

// Distinct (dev, inode) libcuda/libnccl files among the entries, first mapping of each.
std::vector<MappedLibrary> FindLibraries(const std::vector<MapsEntry>& entries);

// Reads /proc/<pid>/maps under `procfs` (bounded) and returns its libraries.
// Errors: kNotFound when the process is gone.
Result<std::vector<MappedLibrary>> ReadMappedLibraries(const std::string& procfs, int32_t pid);

// A path through which the agent reaches exactly the file the process maps: <procfs>/<pid>/root
// + path when that names the same (dev, inode), else <procfs>/<pid>/map_files/<start>-<end>.
// Errors: kNotFound when neither does (process gone, file replaced).
Result<std::string> AgentPathFor(const std::string& procfs, int32_t pid, const MappedLibrary& lib);

// The host path of `lib` the agent may dlopen, or an error saying why not. Only a host driver
// library qualifies: a regular file with the same (dev, inode) as the mapped one, at a path in the
// agent's own mount namespace whose file and every parent directory are owned by root and not
// writable by group or others. Candidates: the mapped path itself when the process shares the
// agent's root directory, then each of `host_dirs` + the file's base name. A file that only a
// container's view reaches is never a candidate.
Result<std::string> TrustedHostPath(const std::string& procfs, int32_t pid, const MappedLibrary& lib,
                                    const std::vector<std::string>& host_dirs);

// Directories where distributions and the NVIDIA installer put libcuda.so.1.
const std::vector<std::string>& DefaultDriverDirs();

}  // namespace ithbat::collect::probes
