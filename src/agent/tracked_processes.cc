#include "agent/tracked_processes.h"

#include <algorithm>
#include <unordered_set>

namespace ithbat::agent {

void TrackedProcesses::Publish(std::string_view source, std::vector<Process> processes) {
  std::erase_if(processes, [](const Process& p) { return p.pid <= 0; });
  for (auto& p : processes) {
    p.source = std::string(source);
    p.identity.pid = p.pid;
  }
  std::sort(processes.begin(), processes.end(), [](const Process& a, const Process& b) { return a.pid < b.pid; });
  std::lock_guard lock(mu_);
  auto it = by_source_.find(source);
  if (it != by_source_.end() && it->second == processes) return;
  if (processes.empty()) {
    if (it == by_source_.end()) return;
    by_source_.erase(it);
  } else if (it == by_source_.end()) {
    by_source_.emplace(std::string(source), std::move(processes));
  } else {
    it->second = std::move(processes);
  }
  generation_.fetch_add(1, std::memory_order_release);
}

std::vector<TrackedProcesses::Process> TrackedProcesses::Snapshot() const {
  std::vector<Process> out;
  std::unordered_set<int32_t> seen;
  std::lock_guard lock(mu_);
  for (const auto& [source, list] : by_source_) {
    for (const auto& p : list) {
      if (seen.insert(p.pid).second) out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end(), [](const Process& a, const Process& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace ithbat::agent
