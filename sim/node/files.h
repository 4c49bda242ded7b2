#pragma once
// File writing shared by NodeWorld and Storage: the agent reads these files while we rewrite
// them, so every write goes to a temporary name in the same directory and is renamed over the
// target (a reader sees the old or the new content, never a half-written one).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/result.h"

namespace ithbat::sim::node {

// Writes `content` to `path` atomically (tmp + rename). Creates missing parent directories.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content);

// Remembers what it last wrote per path and skips identical rewrites (most sysfs counters do
// not move between ticks). Not thread-safe.
class FileWriter {
 public:
  Status Write(const std::filesystem::path& path, std::string_view content, bool force = false);

 private:
  std::unordered_map<std::string, std::string> last_;
};

// A stream of draws independent of every other stream: SplitMix64 of seed ^ FNV-1a(tag).
uint64_t StreamSeed(uint64_t seed, std::string_view tag);

// CLOCK_REALTIME and CLOCK_BOOTTIME in ns.
int64_t RealtimeNs();
int64_t BoottimeNs();

}  // namespace ithbat::sim::node
