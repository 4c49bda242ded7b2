#pragma once
// The processes this node's agent watches closely: the GPU processes (published by the GPU
// collector from NVML's process lists, with the identity it resolved) and whatever another
// source adds. Per-process collectors (job output capture, eBPF probes) read it to know whom
// to follow; they add process trees themselves (a rank's data-loader workers, its launcher).
//
// Thread-safe. Publishers replace their whole set at once (cold path: when the set changes);
// readers poll `generation()` each tick and take a Snapshot only when it moved.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/identity.h"

namespace ithbat::agent {

class TrackedProcesses {
 public:
  struct Process {
    int32_t pid = -1;     // host pid
    Identity identity;    // what the publisher resolved (job, rank, gpu, ...); pid filled in
    std::string source;   // who published it ("gpu")
    friend bool operator==(const Process&, const Process&) = default;
  };

  // Replaces everything `source` published before. Entries with pid <= 0 are ignored.
  void Publish(std::string_view source, std::vector<Process> processes);
  // The union over sources, one entry per pid (the first source by name wins), by pid.
  std::vector<Process> Snapshot() const;
  // Bumps on every change (a Publish that changed nothing leaves it).
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<Process>, std::less<>> by_source_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace ithbat::agent
