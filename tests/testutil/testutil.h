#pragma once
// Helpers shared by the test folders: temporary directories, fixture trees, shared/ data.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ithbat::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Writes `contents` to path()/relative, creating parent directories.
  void WriteFile(std::string_view relative, std::string_view contents) const;

 private:
  std::filesystem::path path_;
};

// The project's source directory (for fixtures under tests/) and ../shared/data when present.
std::filesystem::path SourceDir();
std::optional<std::filesystem::path> SharedDataDir();
// The lines of SharedDataDir()/relative (a real log written by others, for conformance tests),
// without its '#' source header and with CRLF endings cut. When the directory or the file is
// absent the test FAILS (ADD_FAILURE naming what is missing) and the result is empty: CI always
// has ../shared, so a missing corpus must not pass silently as a skip.
std::vector<std::string> SharedDataLines(const std::string& relative);
// The built `ithbat` binary.
std::filesystem::path IthbatBinary();

// This process's resident memory (VmRSS) in KiB, or -1: the tests that run a server in-process
// measure what an attack cost it.
long ResidentKiB();
// Writes all of `data` to a socket (MSG_NOSIGNAL: a peer that hung up is a false, not a
// SIGPIPE); false when the peer stops taking it.
bool SendAll(int fd, std::string_view data);

}  // namespace ithbat::testing
