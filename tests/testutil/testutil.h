#pragma once
// Helpers shared by the test folders: temporary directories, fixture trees, shared/ data.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

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
// The built `ithbat` binary.
std::filesystem::path IthbatBinary();

}  // namespace ithbat::testing
