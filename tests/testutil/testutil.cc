#include "testutil/testutil.h"

#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <gtest/gtest.h>

namespace ithbat::testing {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ithbat-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void TempDir::WriteFile(std::string_view relative, std::string_view contents) const {
  auto full = path_ / std::filesystem::path(relative);
  std::filesystem::create_directories(full.parent_path());
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) throw std::runtime_error("cannot write " + full.string());
}

std::filesystem::path SourceDir() { return ITHBAT_SOURCE_DIR; }

std::optional<std::filesystem::path> SharedDataDir() {
  if (const char* env = std::getenv("ITHBAT_SHARED_DIR"); env && *env) {
    std::filesystem::path p = std::filesystem::path(env) / "data";
    if (std::filesystem::is_directory(p)) return p;
  }
  auto p = SourceDir().parent_path() / "shared" / "data";
  if (std::filesystem::is_directory(p)) return p;
  return std::nullopt;
}

std::vector<std::string> SharedDataLines(const std::string& relative) {
  const auto dir = SharedDataDir();
  if (!dir) {
    ADD_FAILURE() << "../shared/data is absent: the conformance tests read real logs written by others from it "
                     "(check out shared/ next to the project, or set ITHBAT_SHARED_DIR to its parent)";
    return {};
  }
  std::ifstream in(*dir / relative);
  if (!in) {
    ADD_FAILURE() << "cannot read " << (*dir / relative).string();
    return {};
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line[0] == '#') continue;  // the file's source header
    lines.push_back(std::move(line));
  }
  return lines;
}

std::filesystem::path IthbatBinary() { return ITHBAT_BINARY; }

long ResidentKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace ithbat::testing
