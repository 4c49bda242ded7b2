#include "store/event_log.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/block_codec.h"
#include "store/decimal.h"

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
// Only the newest events stay in this form (the head); older ones are sealed into blocks.
struct Entry {
  TimeNs time = 0;
  uint64_t seq = 0;  // append order: what TakeUnflushed hands out, in this order
  int64_t step = -1;
  double value = 0;
  int32_t rank = -1, local_rank = -1, world_size = -1, pid = -1, gpu_index = -1;
  EventKind kind = EventKind::kLogLine;
  uint32_t packed_size = 0;
  std::unique_ptr<char[]> packed;

  std::string_view packed_view() const { return {packed.get(), packed_size}; }
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

// The bytes are ours (Pack and Seal wrote them), so no length bound is needed beyond what is
// there.
constexpr size_t kAnyLength = std::numeric_limits<size_t>::max();

std::string_view JobOf(std::string_view packed) {
  codec::Reader r(packed);
  r.GetString(kAnyLength);  // cluster
  r.GetString(kAnyLength);  // node
  return r.GetString(kAnyLength);
}

std::string_view NameOf(std::string_view packed) {
  codec::Reader r(packed);
  for (int i = 0; i < 5; ++i) r.GetString(kAnyLength);  // cluster, node, job, gpu_uuid, source
  return r.GetString(kAnyLength);
}

// What repeats from event to event: the kind, the identity numbers and the packed strings. A
// job's metric events differ only in time, step and value, so a block holds each shape once.
struct Shape {
  EventKind kind = EventKind::kLogLine;
  int32_t rank = -1, local_rank = -1, world_size = -1, pid = -1, gpu_index = -1;
  std::string_view packed;

  bool operator==(const Shape&) const = default;
};

Shape ShapeOf(const Entry& e) {
  return {e.kind, e.rank, e.local_rank, e.world_size, e.pid, e.gpu_index, e.packed_view()};
}

// What changes from event to event.
struct Point {
  TimeNs time = 0;
  uint64_t seq = 0;
  int64_t step = -1;
  double value = 0;
};

Event Unpack(const Shape& shape, const Point& point) {
  Event e;
  e.time = point.time;
  e.kind = shape.kind;
  e.step = point.step;
  e.value = point.value;
  e.identity.rank = shape.rank;
  e.identity.local_rank = shape.local_rank;
  e.identity.world_size = shape.world_size;
  e.identity.pid = shape.pid;
  e.identity.gpu_index = shape.gpu_index;
  codec::Reader r(shape.packed);
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

Event Unpack(const Entry& entry) {
  return Unpack(ShapeOf(entry), {entry.time, entry.seq, entry.step, entry.value});
}

// Older events sealed: a run of consecutive events (in time order) encoded once, each distinct
// Shape written once in the block's dictionary and each event as its shape's index and the
// deltas of its Point. A joblog metric event costs ~12 bytes here against ~136-171 in the head
// (docs/performance.md, "The agent's memory", third pass). Blocks are immutable but for `skip`
// (events dropped from the front); a late event that belongs inside one re-seals it.
//
// Layout: shape count, then per shape: kind, the five identity numbers (zigzag), packed
// strings; then per event: shape index, time − previous time, seq − previous seq (zigzag),
// step − previous step (zigzag), the value (a decimal exponent byte and zigzag mantissa, or
// kRawValue and the IEEE bits).
struct Block {
  TimeNs max_time = 0;                // of every event encoded, the skipped ones included
  TimeNs front_time = 0;              // of the first event not skipped
  uint64_t max_seq = 0;
  uint64_t kind_mask = 0;   // bit k: an event of EventKind k is in the block
  uint32_t count = 0;       // events encoded
  uint32_t skip = 0;        // the first `skip` of them were dropped
  uint64_t bytes_left = 0;  // what the events not yet dropped are charged
  uint32_t size = 0;
  std::unique_ptr<char[]> data;

  uint32_t live() const { return count - skip; }
  std::string_view view() const { return {data.get(), size}; }
  // What dropping one more event frees: an equal share, the last one the rest.
  uint64_t share() const { return live() <= 1 ? bytes_left : bytes_left / live(); }
};

static_assert(kEventKindCount <= 64, "Block::kind_mask has a bit per kind");
constexpr uint8_t kRawValue = 0x80;

// Deltas in two's complement: a step parsed from job output can be any int64, and the difference
// of two such must wrap, not overflow.
int64_t WrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// Reads a block in order: its shapes first, then one event per Next.
class BlockReader {
 public:
  explicit BlockReader(const Block& block) : r_(block.view()), left_(block.count) {
    const uint64_t shapes = r_.GetVarint();
    shapes_.reserve(shapes);
    for (uint64_t i = 0; i < shapes; ++i) {
      Shape s;
      s.kind = static_cast<EventKind>(r_.GetU8());
      for (int32_t* v : {&s.rank, &s.local_rank, &s.world_size, &s.pid, &s.gpu_index}) {
        *v = static_cast<int32_t>(r_.GetZigZag());
      }
      s.packed = r_.GetString(kAnyLength);
      shapes_.push_back(s);
    }
  }
  const std::vector<Shape>& shapes() const { return shapes_; }
  // The next event's shape index and point; false after the last.
  bool Next(uint32_t* shape, Point* p) {
    if (left_ == 0) return false;
    --left_;
    *shape = static_cast<uint32_t>(r_.GetVarint());
    point_.time = WrapAdd(point_.time, static_cast<int64_t>(r_.GetVarint()));
    point_.seq += static_cast<uint64_t>(r_.GetZigZag());
    point_.step = WrapAdd(point_.step, r_.GetZigZag());
    const uint8_t exponent = r_.GetU8();
    if (exponent == kRawValue) {
      point_.value = std::bit_cast<double>(r_.GetU64());
    } else {
      point_.value = FromDecimal({r_.GetZigZag(), static_cast<int8_t>(exponent)});
    }
    *p = point_;
    return true;
  }

 private:
  codec::Reader r_;
  uint32_t left_;
  std::vector<Shape> shapes_;
  Point point_{0, 0, 0, 0};
};

// Encodes time-ordered events, each a shape index and a point, into one block.
Block Encode(const std::vector<Shape>& shapes, const std::vector<std::pair<uint32_t, Point>>& events) {
  Block block;
  codec::Writer w;
  w.PutVarint(shapes.size());
  for (const Shape& s : shapes) {
    w.PutU8(static_cast<uint8_t>(s.kind));
    for (int32_t v : {s.rank, s.local_rank, s.world_size, s.pid, s.gpu_index}) w.PutZigZag(v);
    w.PutString(s.packed);
  }
  Point prev{0, 0, 0, 0};
  int8_t hint = 0;
  for (const auto& [shape, p] : events) {
    if (block.count == 0) {
      block.front_time = p.time;
    }
    block.max_time = p.time;
    block.max_seq = std::max(block.max_seq, p.seq);
    block.kind_mask |= uint64_t{1} << static_cast<int>(shapes[shape].kind);
    ++block.count;
    w.PutVarint(shape);
    w.PutVarint(static_cast<uint64_t>(WrapSub(p.time, prev.time)));  // times are in order: >= 0 but the first
    w.PutZigZag(static_cast<int64_t>(p.seq - prev.seq));
    w.PutZigZag(WrapSub(p.step, prev.step));
    const std::optional<Decimal> d = ToDecimal(p.value, hint);
    if (d) {
      hint = d->exponent;
      w.PutU8(static_cast<uint8_t>(d->exponent));
      w.PutZigZag(d->mantissa);
    } else {
      w.PutU8(kRawValue);
      w.PutU64(std::bit_cast<uint64_t>(p.value));
    }
    prev = p;
  }
  block.size = static_cast<uint32_t>(w.size());
  block.data = std::make_unique<char[]>(w.size());
  std::memcpy(block.data.get(), w.data().data(), w.size());
  block.bytes_left = sizeof(Block) + block.size + Entry::kMallocOverhead;
  return block;
}

// The index of `s` in `shapes`, added when absent. Only the newest kRecentShapes are compared:
// the shapes that repeat (a job's metrics, a collector's events) recur within a few events,
// and a block of distinct log lines must not cost a quadratic search; a shape seen again
// after that is written twice, which costs bytes, never correctness.
constexpr size_t kRecentShapes = 16;
uint32_t IndexOf(std::vector<Shape>& shapes, const Shape& s) {
  const size_t stop = shapes.size() > kRecentShapes ? shapes.size() - kRecentShapes : 0;
  for (size_t i = shapes.size(); i > stop; --i) {
    if (shapes[i - 1] == s) return static_cast<uint32_t>(i - 1);
  }
  shapes.push_back(s);
  return static_cast<uint32_t>(shapes.size() - 1);
}

// Seals entries [first, last) (time-ordered) into one block.
template <typename It>
Block Seal(It first, It last) {
  std::vector<Shape> shapes;
  std::vector<std::pair<uint32_t, Point>> events;
  for (It it = first; it != last; ++it) {
    events.emplace_back(IndexOf(shapes, ShapeOf(*it)), Point{it->time, it->seq, it->step, it->value});
  }
  return Encode(shapes, events);
}

// The block with `entry` placed after every event of the same or an earlier time, its dropped
// events left out. Works on the encoded form: no event is unpacked.
Block InsertInto(const Block& block, const Entry& entry) {
  BlockReader reader(block);
  std::vector<Shape> shapes;
  std::vector<uint32_t> remap(reader.shapes().size(), UINT32_MAX);  // old index -> new
  std::vector<std::pair<uint32_t, Point>> events;
  events.reserve(block.live() + 1);
  uint32_t shape = 0;
  Point p;
  bool placed = false;
  for (uint32_t i = 0; reader.Next(&shape, &p); ++i) {
    if (i < block.skip) continue;
    if (!placed && entry.time < p.time) {
      events.emplace_back(IndexOf(shapes, ShapeOf(entry)),
                          Point{entry.time, entry.seq, entry.step, entry.value});
      placed = true;
    }
    if (remap[shape] == UINT32_MAX) remap[shape] = IndexOf(shapes, reader.shapes()[shape]);
    events.emplace_back(remap[shape], p);
  }
  if (!placed) {
    events.emplace_back(IndexOf(shapes, ShapeOf(entry)),
                        Point{entry.time, entry.seq, entry.step, entry.value});
  }
  return Encode(shapes, events);
}

}  // namespace

struct EventLog::Impl {
  size_t max_events;
  size_t max_text_bytes;
  uint64_t max_bytes;  // 0: none
  Sealing sealing;
  mutable std::shared_mutex mu;
  // Time-ordered, oldest first: every sealed block, then the head. Equal times keep append order.
  std::deque<Block> blocks;
  std::deque<Entry> head;
  size_t count = 0;  // events held, in blocks and head
  uint64_t next_seq = 1;
  uint64_t flushed_seq = 0;    // every seq <= this was handed to TakeUnflushed (or dropped)
  size_t unflushed_count = 0;  // events still held with seq > flushed_seq
  uint64_t dropped = 0;
  uint64_t bytes = 0;

  // Drops the oldest events while should_drop(time of the oldest, bytes freed so far) says so,
  // and while any are held; returns the bytes freed. A block is read once however many of its
  // events go.
  template <typename ShouldDrop>
  uint64_t DropWhile(ShouldDrop should_drop) {
    uint64_t freed = 0;
    auto forget = [&](uint64_t seq, uint64_t charged) {
      if (seq > flushed_seq) --unflushed_count;
      freed += charged;
      bytes -= charged;
      --count;
    };
    while (!blocks.empty()) {
      Block& b = blocks.front();
      if (!should_drop(b.front_time, freed)) return freed;
      BlockReader reader(b);
      uint32_t shape = 0;
      Point p;
      for (uint32_t i = 0; i <= b.skip; ++i) reader.Next(&shape, &p);  // p: the first live event
      bool more = true;
      while (more && should_drop(p.time, freed)) {
        const uint64_t charged = b.share();
        b.bytes_left -= charged;
        ++b.skip;
        forget(p.seq, charged);
        more = reader.Next(&shape, &p);
      }
      if (more) {
        b.front_time = p.time;
        return freed;
      }
      blocks.pop_front();
    }
    while (!head.empty() && should_drop(head.front().time, freed)) {
      forget(head.front().seq, head.front().bytes());
      head.pop_front();
    }
    return freed;
  }

  std::optional<TimeNs> FrontTime() const {
    if (!blocks.empty()) return blocks.front().front_time;
    if (!head.empty()) return head.front().time;
    return std::nullopt;
  }

  // Seals the oldest block's worth of the head when Sealing says so (a fast source must not
  // grow the head, a slow one must not see its late events land in sealed blocks). A late event
  // that lands in the head costs a move of entries; one in a sealed block, its re-encoding.
  void MaybeSeal() {
    const size_t n = sealing.events_per_block;
    if (head.size() < 2 * n) return;
    // The head is in time order, so this difference is >= 0 (unsigned: times may span int64).
    const uint64_t age = static_cast<uint64_t>(head.back().time) - static_cast<uint64_t>(head[n - 1].time);
    if (age < static_cast<uint64_t>(std::max<TimeNs>(sealing.lag, 0)) &&
        head.size() < sealing.max_head_blocks * n) {
      return;
    }
    const auto last = head.begin() + static_cast<std::ptrdiff_t>(n);
    uint64_t head_bytes = 0;
    for (auto it = head.begin(); it != last; ++it) head_bytes += it->bytes();
    Block block = Seal(head.begin(), last);
    head.erase(head.begin(), last);
    bytes = bytes - head_bytes + block.bytes_left;
    blocks.push_back(std::move(block));
  }

  // Places an event older than the newest block's last one into the block it belongs in (after
  // every event with the same or an earlier time), re-sealing that block.
  void InsertIntoBlocks(const Entry& entry) {
    // The last block whose first live event is not after the entry; the first block if none.
    auto it = std::upper_bound(blocks.begin(), blocks.end(), entry.time,
                               [](TimeNs t, const Block& b) { return t < b.front_time; });
    if (it != blocks.begin()) --it;
    Block resealed = InsertInto(*it, entry);
    bytes = bytes - it->bytes_left + resealed.bytes_left;
    *it = std::move(resealed);
  }
};

EventLog::EventLog(size_t max_events, size_t max_text_bytes, uint64_t max_bytes, Sealing sealing)
    : impl_(new Impl{std::max<size_t>(max_events, 1), max_text_bytes, max_bytes, sealing}) {
  impl_->sealing.events_per_block = std::max<size_t>(sealing.events_per_block, 1);
  impl_->sealing.max_head_blocks = std::max<size_t>(sealing.max_head_blocks, 2);
}

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
  Impl& im = *impl_;
  auto& head = im.head;
  entry.seq = im.next_seq++;
  ++im.unflushed_count;
  ++im.count;
  // Events mostly arrive in order: the common case is a push_back; a late one is placed after
  // every event with the same or an earlier time (stable among equal times).
  if (head.empty() ? im.blocks.empty() || im.blocks.back().max_time <= entry.time
                   : head.back().time <= entry.time) {
    head.push_back(std::move(entry));
    im.bytes += bytes;
  } else if (im.blocks.empty() || im.blocks.back().max_time <= entry.time) {
    auto it = std::upper_bound(head.begin(), head.end(), entry.time,
                               [](TimeNs t, const Entry& e) { return t < e.time; });
    head.insert(it, std::move(entry));
    im.bytes += bytes;
  } else {
    im.InsertIntoBlocks(entry);
  }
  im.MaybeSeal();
  // The newest event always stays (an event bigger than the byte bound alone is still kept:
  // its text and attributes are already cut to max_text_bytes each).
  const uint64_t before = im.count;
  im.DropWhile([&im](TimeNs, uint64_t) {
    return im.count > im.max_events || (im.max_bytes > 0 && im.bytes > im.max_bytes && im.count > 1);
  });
  im.dropped += before - im.count;
}

std::vector<Event> EventLog::Query(const EventQuery& query) const {
  std::vector<Event> out;
  if (query.limit == 0 || query.from > query.to) return out;
  bool kind_mask[kEventKindCount] = {};
  uint64_t kind_bits = 0;
  for (EventKind k : query.kinds) {
    if (static_cast<int>(k) < kEventKindCount) {
      kind_mask[static_cast<int>(k)] = true;
      kind_bits |= uint64_t{1} << static_cast<int>(k);
    }
  }
  auto matches = [&](const Shape& s) {
    if (!query.kinds.empty() &&
        (static_cast<int>(s.kind) >= kEventKindCount || !kind_mask[static_cast<int>(s.kind)])) {
      return false;
    }
    if (query.rank >= 0 && s.rank != query.rank) return false;
    if (query.pid >= 0 && s.pid != query.pid) return false;
    if (query.gpu >= 0 && s.gpu_index != query.gpu) return false;
    if (!query.job.empty() && JobOf(s.packed) != query.job) return false;
    return query.names.empty() ||
           std::find(query.names.begin(), query.names.end(), NameOf(s.packed)) != query.names.end();
  };
  std::shared_lock lock(impl_->mu);
  // Newest first so that the limit keeps the newest matches; reversed at the end.
  const auto& head = impl_->head;
  auto first = std::lower_bound(head.begin(), head.end(), query.from,
                                [](const Entry& e, TimeNs t) { return e.time < t; });
  auto last =
      std::upper_bound(first, head.end(), query.to, [](TimeNs t, const Entry& e) { return t < e.time; });
  for (auto it = last; it != first && out.size() < query.limit;) {
    --it;
    if (matches(ShapeOf(*it))) out.push_back(Unpack(*it));
  }
  std::vector<std::pair<uint32_t, Point>> found;  // one block's matches, oldest first
  std::vector<char> shape_matches;
  for (auto b = impl_->blocks.rbegin(); b != impl_->blocks.rend() && out.size() < query.limit; ++b) {
    if (b->max_time < query.from) break;
    if (b->front_time > query.to) continue;
    if (!query.kinds.empty() && (b->kind_mask & kind_bits) == 0) continue;
    BlockReader reader(*b);
    shape_matches.clear();
    for (const Shape& s : reader.shapes()) shape_matches.push_back(matches(s));
    found.clear();
    uint32_t shape = 0;
    Point p;
    for (uint32_t i = 0; reader.Next(&shape, &p); ++i) {
      if (i < b->skip || p.time < query.from || p.time > query.to || !shape_matches[shape]) continue;
      found.emplace_back(shape, p);
    }
    for (auto f = found.rbegin(); f != found.rend() && out.size() < query.limit; ++f) {
      out.push_back(Unpack(reader.shapes()[f->first], f->second));
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Event> EventLog::TakeUnflushed() {
  std::unique_lock lock(impl_->mu);
  Impl& im = *impl_;
  std::vector<std::pair<uint64_t, Event>> found;
  found.reserve(im.unflushed_count);
  // Unflushed events sit near the back (they are the newest, give or take a late arrival), so
  // the scan stops as soon as all of them are found.
  for (auto it = im.head.rbegin(); it != im.head.rend() && found.size() < im.unflushed_count; ++it) {
    if (it->seq > im.flushed_seq) found.emplace_back(it->seq, Unpack(*it));
  }
  for (auto b = im.blocks.rbegin(); b != im.blocks.rend() && found.size() < im.unflushed_count; ++b) {
    if (b->max_seq <= im.flushed_seq) continue;
    BlockReader reader(*b);
    uint32_t shape = 0;
    Point p;
    for (uint32_t i = 0; reader.Next(&shape, &p); ++i) {
      if (i >= b->skip && p.seq > im.flushed_seq)
        found.emplace_back(p.seq, Unpack(reader.shapes()[shape], p));
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Event> out;
  out.reserve(found.size());
  for (auto& [seq, e] : found) out.push_back(std::move(e));
  im.flushed_seq = im.next_seq - 1;
  im.unflushed_count = 0;
  return out;
}

void EventLog::DropBefore(TimeNs t) {
  std::unique_lock lock(impl_->mu);
  impl_->DropWhile([t](TimeNs front, uint64_t) { return front < t; });
}

uint64_t EventLog::DropOldest(TimeNs up_to, uint64_t want_bytes) {
  std::unique_lock lock(impl_->mu);
  Impl& im = *impl_;
  const uint64_t before = im.count;
  const uint64_t freed =
      im.DropWhile([&](TimeNs front, uint64_t so_far) { return so_far < want_bytes && front <= up_to; });
  im.dropped += before - im.count;
  return freed;
}

std::optional<TimeNs> EventLog::oldest_time() const {
  std::shared_lock lock(impl_->mu);
  return impl_->FrontTime();
}

size_t EventLog::size() const {
  std::shared_lock lock(impl_->mu);
  return impl_->count;
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
