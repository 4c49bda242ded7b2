#pragma once
// A bounded, time-ordered log of typed events with lookups by kind, identity and window.
// Thread-safe: any number of writers and readers. Events that arrive out of time order
// (several collectors, several threads) are placed in order.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/event.h"
#include "store/store.h"

namespace ithbat::store {

// When the newest events, held one by one (where a late arrival is placed cheaply), are
// sealed into compact blocks that cost ~12 bytes an event instead of ~136-171 (event_log.cc).
struct EventLogSealing {
  size_t events_per_block = 512;
  // A block's worth is sealed once the head holds two and they are `lag` older than the
  // newest event, or once the head holds max_head_blocks' worth, whichever comes first.
  // Collectors stamp an event when they see it and append it at the end of their tick (2–5 s
  // at the slowest configured interval): ten seconds covers two such ticks, so an event late
  // by a tick lands in the head, not in a sealed block.
  TimeNs lag = 10'000'000'000;
  size_t max_head_blocks = 8;
};

class EventLog {
 public:
  using Sealing = EventLogSealing;

  // Bounded by count and by memory (ApproxBytes of what is held): an Append over either bound
  // drops the oldest events (counted in dropped()). max_bytes 0: no byte bound.
  EventLog(size_t max_events, size_t max_text_bytes, uint64_t max_bytes = 0, Sealing sealing = {});
  ~EventLog();
  EventLog(const EventLog&) = delete;  // owns its Impl
  EventLog& operator=(const EventLog&) = delete;
  // Cuts text and attribute values longer than max_text_bytes (marking the cut with "…[cut]").
  // When full, the oldest event goes (counted in dropped()).
  void Append(Event event);
  std::vector<Event> Query(const EventQuery& query) const;
  // Events appended since the last call (for the flusher), in append order.
  std::vector<Event> TakeUnflushed();
  void DropBefore(TimeNs t);
  // Drops the oldest events whose time is <= up_to until at least `want_bytes` are freed (or
  // none such are left); returns the bytes freed. Counted in dropped(): the store's memory
  // budget evicts events this way, oldest data first across events and samples.
  uint64_t DropOldest(TimeNs up_to, uint64_t want_bytes);
  // The time of the oldest event held; nullopt when empty.
  std::optional<TimeNs> oldest_time() const;
  size_t size() const;
  uint64_t dropped() const;
  uint64_t bytes() const;  // approximate memory held

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace ithbat::store
