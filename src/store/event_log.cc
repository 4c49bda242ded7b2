#include "store/event_log.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace ithbat::store {
namespace {

constexpr std::string_view kCutMarker = "…[cut]";
// Attributes are a handful of key/value pairs; a source that sends thousands is broken.
constexpr size_t kMaxAttrs = 64;

// Cuts `s` to at most `max_bytes` (marker included, when max_bytes leaves room for it) on a
// UTF-8 character boundary, so a cut never produces an invalid sequence.
void CutString(std::string* s, size_t max_bytes) {
  if (s->size() <= max_bytes) return;
  size_t keep = max_bytes > kCutMarker.size() ? max_bytes - kCutMarker.size() : 0;
  // Back off over continuation bytes (10xxxxxx) so the kept prefix ends at a character start.
  while (keep > 0 && (static_cast<unsigned char>((*s)[keep]) & 0xC0) == 0x80) --keep;
  s->resize(keep);
  s->append(kCutMarker);
}

uint64_t ApproxBytes(const Event& e) {
  uint64_t n = sizeof(Event) + e.source.capacity() + e.name.capacity() + e.text.capacity() +
               e.identity.cluster.capacity() + e.identity.node.capacity() + e.identity.job.capacity() +
               e.identity.gpu_uuid.capacity();
  n += e.attrs.capacity() * sizeof(e.attrs[0]);
  for (const auto& [k, v] : e.attrs) n += k.capacity() + v.capacity();
  return n;
}

struct Entry {
  Event event;
  uint64_t seq;  // append order: what TakeUnflushed hands out, in this order
  uint64_t bytes;
};

}  // namespace

struct EventLog::Impl {
  size_t max_events;
  size_t max_text_bytes;
  uint64_t max_bytes;  // 0: none
  mutable std::shared_mutex mu;
  std::deque<Entry> entries;  // sorted by event.time; equal times keep append order
  uint64_t next_seq = 1;
  uint64_t flushed_seq = 0;    // every seq <= this was handed to TakeUnflushed (or dropped)
  size_t unflushed_count = 0;  // entries still held with seq > flushed_seq
  uint64_t dropped = 0;
  uint64_t bytes = 0;

  void PopFront() {
    const Entry& e = entries.front();
    if (e.seq > flushed_seq) --unflushed_count;
    bytes -= e.bytes;
    entries.pop_front();
  }
};

EventLog::EventLog(size_t max_events, size_t max_text_bytes, uint64_t max_bytes)
    : impl_(new Impl{std::max<size_t>(max_events, 1), max_text_bytes, max_bytes}) {}

EventLog::~EventLog() { delete impl_; }

void EventLog::Append(Event event) {
  size_t max_text = impl_->max_text_bytes;
  CutString(&event.text, max_text);
  CutString(&event.name, max_text);
  CutString(&event.source, max_text);
  if (event.attrs.size() > kMaxAttrs) event.attrs.resize(kMaxAttrs);
  for (auto& [k, v] : event.attrs) {
    CutString(&k, max_text);
    CutString(&v, max_text);
  }
  uint64_t bytes = ApproxBytes(event);

  std::unique_lock lock(impl_->mu);
  auto& entries = impl_->entries;
  Entry entry{std::move(event), impl_->next_seq++, bytes};
  // Events mostly arrive in order: the common case is a push_back; a late one is placed after
  // every event with the same or an earlier time (stable among equal times).
  if (entries.empty() || entries.back().event.time <= entry.event.time) {
    entries.push_back(std::move(entry));
  } else {
    auto it = std::upper_bound(entries.begin(), entries.end(), entry.event.time,
                               [](TimeNs t, const Entry& e) { return t < e.event.time; });
    entries.insert(it, std::move(entry));
  }
  ++impl_->unflushed_count;
  impl_->bytes += bytes;
  // The newest event always stays (an event bigger than the byte bound alone is still kept:
  // its text and attributes are already cut to max_text_bytes each).
  while (entries.size() > impl_->max_events ||
         (impl_->max_bytes > 0 && impl_->bytes > impl_->max_bytes && entries.size() > 1)) {
    impl_->PopFront();
    ++impl_->dropped;
  }
}

std::vector<Event> EventLog::Query(const EventQuery& query) const {
  std::vector<Event> out;
  if (query.limit == 0 || query.from > query.to) return out;
  bool kind_mask[kEventKindCount] = {};
  for (EventKind k : query.kinds) {
    if (static_cast<int>(k) < kEventKindCount) kind_mask[static_cast<int>(k)] = true;
  }
  std::shared_lock lock(impl_->mu);
  const auto& entries = impl_->entries;
  auto first = std::lower_bound(entries.begin(), entries.end(), query.from,
                                [](const Entry& e, TimeNs t) { return e.event.time < t; });
  auto last = std::upper_bound(first, entries.end(), query.to,
                               [](TimeNs t, const Entry& e) { return t < e.event.time; });
  // Newest first so that the limit keeps the newest matches; reversed at the end.
  for (auto it = last; it != first && out.size() < query.limit;) {
    --it;
    const Event& e = it->event;
    if (!query.kinds.empty() &&
        (static_cast<int>(e.kind) >= kEventKindCount || !kind_mask[static_cast<int>(e.kind)])) {
      continue;
    }
    if (!query.job.empty() && e.identity.job != query.job) continue;
    if (query.rank >= 0 && e.identity.rank != query.rank) continue;
    if (query.pid >= 0 && e.identity.pid != query.pid) continue;
    if (query.gpu >= 0 && e.identity.gpu_index != query.gpu) continue;
    out.push_back(e);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Event> EventLog::TakeUnflushed() {
  std::unique_lock lock(impl_->mu);
  std::vector<std::pair<uint64_t, const Event*>> found;
  found.reserve(impl_->unflushed_count);
  // Unflushed events sit near the back (they are the newest, give or take a late arrival), so
  // the scan stops as soon as all of them are found.
  auto& entries = impl_->entries;
  for (auto it = entries.rbegin(); it != entries.rend() && found.size() < impl_->unflushed_count; ++it) {
    if (it->seq > impl_->flushed_seq) found.emplace_back(it->seq, &it->event);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Event> out;
  out.reserve(found.size());
  for (const auto& [seq, e] : found) out.push_back(*e);
  impl_->flushed_seq = impl_->next_seq - 1;
  impl_->unflushed_count = 0;
  return out;
}

void EventLog::DropBefore(TimeNs t) {
  std::unique_lock lock(impl_->mu);
  while (!impl_->entries.empty() && impl_->entries.front().event.time < t) impl_->PopFront();
}

uint64_t EventLog::DropOldest(TimeNs up_to, uint64_t want_bytes) {
  std::unique_lock lock(impl_->mu);
  uint64_t freed = 0;
  while (freed < want_bytes && !impl_->entries.empty() && impl_->entries.front().event.time <= up_to) {
    freed += impl_->entries.front().bytes;
    impl_->PopFront();
    ++impl_->dropped;
  }
  return freed;
}

std::optional<TimeNs> EventLog::oldest_time() const {
  std::shared_lock lock(impl_->mu);
  if (impl_->entries.empty()) return std::nullopt;
  return impl_->entries.front().event.time;
}

size_t EventLog::size() const {
  std::shared_lock lock(impl_->mu);
  return impl_->entries.size();
}

uint64_t EventLog::dropped() const {
  std::shared_lock lock(impl_->mu);
  return impl_->dropped;
}

uint64_t EventLog::bytes() const {
  std::shared_lock lock(impl_->mu);
  return impl_->bytes;
}

}  // namespace ithbat::store
