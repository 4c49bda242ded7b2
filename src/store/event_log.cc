#include "store/event_log.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "store/block_codec.h"

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

// An event held in memory: the fixed-size fields as they are, every string (identity strings,
// source, name, text, attributes) packed into one allocation as length-prefixed bytes. An Event
// object costs ~320 bytes before its strings (nine std::string and a vector of pairs of them)
// and another allocation for each string past 15 bytes (the GPU UUID always is); a joblog
// event held that way took ~520 bytes, packed ~136 (docs/performance.md, "The agent's memory").
// Queries filter on the fixed fields and the job (read in place), and unpack only what they
// return.
struct Entry {
  TimeNs time = 0;
  uint64_t seq = 0;  // append order: what TakeUnflushed hands out, in this order
  int64_t step = -1;
  double value = 0;
  int32_t rank = -1, local_rank = -1, world_size = -1, pid = -1, gpu_index = -1;
  EventKind kind = EventKind::kLogLine;
  uint32_t packed_size = 0;
  std::unique_ptr<char[]> packed;

  uint64_t bytes() const { return sizeof(Entry) + packed_size + kMallocOverhead; }
  static constexpr uint64_t kMallocOverhead = 16;  // glibc: 8 bytes of header, 16-byte rounding
};

// Packed order: cluster, node, job, gpu_uuid, source, name, text, attribute count, then each
// attribute's key and value. The job comes early so a query by job reads three strings.
// The entry's seq is set by the caller, under the log's lock.
Entry Pack(Event&& e) {
  Entry entry;
  entry.time = e.time;
  entry.step = e.step;
  entry.value = e.value;
  entry.rank = e.identity.rank;
  entry.local_rank = e.identity.local_rank;
  entry.world_size = e.identity.world_size;
  entry.pid = e.identity.pid;
  entry.gpu_index = e.identity.gpu_index;
  entry.kind = e.kind;
  codec::Writer w;
  w.buffer().reserve(e.identity.node.size() + e.identity.job.size() + e.identity.gpu_uuid.size() +
                     e.source.size() + e.name.size() + e.text.size() + 16);
  for (const std::string* str : {&e.identity.cluster, &e.identity.node, &e.identity.job, &e.identity.gpu_uuid,
                                 &e.source, &e.name, &e.text}) {
    w.PutString(*str);
  }
  w.PutVarint(e.attrs.size());
  for (const auto& [k, v] : e.attrs) {
    w.PutString(k);
    w.PutString(v);
  }
  const std::string& out = w.data();
  entry.packed_size = static_cast<uint32_t>(out.size());
  entry.packed = std::make_unique<char[]>(out.size());
  std::memcpy(entry.packed.get(), out.data(), out.size());
  return entry;
}

// The bytes are ours (Pack wrote them), so no length bound is needed beyond what is there.
constexpr size_t kAnyLength = std::numeric_limits<size_t>::max();

codec::Reader ReaderOf(const Entry& entry) { return codec::Reader({entry.packed.get(), entry.packed_size}); }

std::string_view JobOf(const Entry& entry) {
  codec::Reader r = ReaderOf(entry);
  r.GetString(kAnyLength);  // cluster
  r.GetString(kAnyLength);  // node
  return r.GetString(kAnyLength);
}

Event Unpack(const Entry& entry) {
  Event e;
  e.time = entry.time;
  e.kind = entry.kind;
  e.step = entry.step;
  e.value = entry.value;
  e.identity.rank = entry.rank;
  e.identity.local_rank = entry.local_rank;
  e.identity.world_size = entry.world_size;
  e.identity.pid = entry.pid;
  e.identity.gpu_index = entry.gpu_index;
  codec::Reader r = ReaderOf(entry);
  for (std::string* str : {&e.identity.cluster, &e.identity.node, &e.identity.job, &e.identity.gpu_uuid,
                           &e.source, &e.name, &e.text}) {
    *str = std::string(r.GetString(kAnyLength));
  }
  const uint64_t attrs = std::min<uint64_t>(r.GetVarint(), kMaxAttrs);
  e.attrs.reserve(attrs);
  for (uint64_t i = 0; i < attrs; ++i) {
    std::string k(r.GetString(kAnyLength));
    e.attrs.emplace_back(std::move(k), std::string(r.GetString(kAnyLength)));
  }
  return e;
}

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
    bytes -= e.bytes();
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
  // Packed outside the lock (seq is set under it).
  Entry entry = Pack(std::move(event));
  const uint64_t bytes = entry.bytes();

  std::unique_lock lock(impl_->mu);
  auto& entries = impl_->entries;
  entry.seq = impl_->next_seq++;
  // Events mostly arrive in order: the common case is a push_back; a late one is placed after
  // every event with the same or an earlier time (stable among equal times).
  if (entries.empty() || entries.back().time <= entry.time) {
    entries.push_back(std::move(entry));
  } else {
    auto it = std::upper_bound(entries.begin(), entries.end(), entry.time,
                               [](TimeNs t, const Entry& e) { return t < e.time; });
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
                                [](const Entry& e, TimeNs t) { return e.time < t; });
  auto last =
      std::upper_bound(first, entries.end(), query.to, [](TimeNs t, const Entry& e) { return t < e.time; });
  // Newest first so that the limit keeps the newest matches; reversed at the end.
  for (auto it = last; it != first && out.size() < query.limit;) {
    --it;
    const Entry& e = *it;
    if (!query.kinds.empty() &&
        (static_cast<int>(e.kind) >= kEventKindCount || !kind_mask[static_cast<int>(e.kind)])) {
      continue;
    }
    if (query.rank >= 0 && e.rank != query.rank) continue;
    if (query.pid >= 0 && e.pid != query.pid) continue;
    if (query.gpu >= 0 && e.gpu_index != query.gpu) continue;
    if (!query.job.empty() && JobOf(e) != query.job) continue;
    out.push_back(Unpack(e));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Event> EventLog::TakeUnflushed() {
  std::unique_lock lock(impl_->mu);
  std::vector<const Entry*> found;
  found.reserve(impl_->unflushed_count);
  // Unflushed events sit near the back (they are the newest, give or take a late arrival), so
  // the scan stops as soon as all of them are found.
  auto& entries = impl_->entries;
  for (auto it = entries.rbegin(); it != entries.rend() && found.size() < impl_->unflushed_count; ++it) {
    if (it->seq > impl_->flushed_seq) found.push_back(&*it);
  }
  std::sort(found.begin(), found.end(), [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  std::vector<Event> out;
  out.reserve(found.size());
  for (const Entry* e : found) out.push_back(Unpack(*e));
  impl_->flushed_seq = impl_->next_seq - 1;
  impl_->unflushed_count = 0;
  return out;
}

void EventLog::DropBefore(TimeNs t) {
  std::unique_lock lock(impl_->mu);
  while (!impl_->entries.empty() && impl_->entries.front().time < t) impl_->PopFront();
}

uint64_t EventLog::DropOldest(TimeNs up_to, uint64_t want_bytes) {
  std::unique_lock lock(impl_->mu);
  uint64_t freed = 0;
  while (freed < want_bytes && !impl_->entries.empty() && impl_->entries.front().time <= up_to) {
    freed += impl_->entries.front().bytes();
    impl_->PopFront();
    ++impl_->dropped;
  }
  return freed;
}

std::optional<TimeNs> EventLog::oldest_time() const {
  std::shared_lock lock(impl_->mu);
  if (impl_->entries.empty()) return std::nullopt;
  return impl_->entries.front().time;
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
