#include "collect/joblog/text/raw_ring.h"

#include <algorithm>
#include <utility>

#include "collect/joblog/text/redact.h"

namespace ithbat::collect::joblog {

RawRing::RawRing(size_t budget_bytes) : budget_bytes_(std::max(budget_bytes, 2 * kLineOverheadBytes)) {}

size_t RawRing::Append(RawLine line) {
  // Redaction runs outside the lock: it is the expensive part and needs no shared state.
  const size_t secrets = RedactSecrets(line.text);
  AppendRedacted(std::move(line));
  return secrets;
}

void RawRing::AppendRedacted(RawLine line) {
  // One line never takes more than the whole budget (a caller that skipped the assembler's
  // bound); it is cut rather than evicting everything for nothing.
  const size_t max_text = budget_bytes_ - kLineOverheadBytes;
  if (line.text.size() > max_text) line.text.resize(max_text);
  const size_t cost = line.text.size() + kLineOverheadBytes;
  std::lock_guard<std::mutex> lock(mu_);
  while (!lines_.empty() && bytes_ + cost > budget_bytes_) {
    bytes_ -= lines_.front().text.size() + kLineOverheadBytes;
    lines_.pop_front();
    ++dropped_;
  }
  lines_.push_back(std::move(line));
  bytes_ += cost;
}

std::vector<RawLine> RawRing::Read(TimeNs from, TimeNs to, int32_t pid, size_t max_lines) const {
  std::vector<RawLine> out;
  if (max_lines == 0 || from >= to) return out;
  std::lock_guard<std::mutex> lock(mu_);
  // Newest first so the cap keeps the end of the log, then reversed to oldest first. Times
  // of different processes interleave out of order, so this is a scan, not a binary search.
  for (auto it = lines_.rbegin(); it != lines_.rend() && out.size() < max_lines; ++it) {
    if (it->time < from || it->time >= to) continue;
    if (pid >= 0 && it->pid != pid) continue;
    out.push_back(*it);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

size_t RawRing::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t RawRing::dropped_lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace ithbat::collect::joblog
