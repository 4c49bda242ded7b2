#pragma once
// A bounded, time-ordered log of typed events with lookups by kind, identity and window.
// Thread-safe: any number of writers and readers. Events that arrive out of time order
// (several collectors, several threads) are placed in order.
#include <cstdint>
#include <vector>

#include "core/event.h"
#include "store/store.h"

namespace ithbat::store {

class EventLog {
 public:
  EventLog(size_t max_events, size_t max_text_bytes);
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
  size_t size() const;
  uint64_t dropped() const;
  uint64_t bytes() const;  // approximate memory held

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace ithbat::store
