#include "agent/logged_steps.h"

#include <algorithm>

namespace ithbat::agent {

void LoggedSteps::Add(std::string_view job, int32_t rank, int64_t step, TimeNs time) {
  if (job.empty() || step < 0) return;
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    if (jobs_.size() >= kMaxJobs) {
      // Drop the job created longest ago: jobs end, and the newest ones are the ones running.
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.created < b.second.created;
      });
      jobs_.erase(oldest);
    }
    it = jobs_.emplace(std::string(job), Job{}).first;
    it->second.created = ++created_counter_;
  }
  Job& j = it->second;
  j.marks.push_back(Mark{rank, step, time, j.next_index++});
  if (j.marks.size() > kMaxPerJob) j.marks.pop_front();
}

std::vector<LoggedSteps::Mark> LoggedSteps::Since(std::string_view job, uint64_t after) const {
  std::lock_guard lock(mu_);
  std::vector<Mark> out;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return out;
  for (const Mark& m : it->second.marks) {
    if (m.index > after) out.push_back(m);
  }
  return out;
}

}  // namespace ithbat::agent
