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

class EventLog {
 public:
  // Bounded by count and by memory (ApproxBytes of what is held): an Append over either bound
  // drops the oldest events (counted in dropped()). max_bytes 0: no byte bound.
  EventLog(size_t max_events, size_t max_text_bytes, uint64_t max_bytes = 0);
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
