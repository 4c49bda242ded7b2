#include "store/store.h"

#include <re2/re2.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <map>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "store/disk.h"
#include "store/event_log.h"
#include "store/step_timeline.h"

namespace ithbat::store {

// An immutable, sealed run of one series' samples. Readers copy the handle under the series
// lock and decode after releasing it; retention dropping the chunk meanwhile only drops the
// store's reference. The bytes and their reference count share one allocation.
struct SealedChunk {
  std::shared_ptr<const uint8_t[]> bytes;
  uint32_t size = 0;
  uint32_t count = 0;
  TimeNs min_t = 0;
  TimeNs max_t = 0;
};

struct SeriesState {
  SeriesState(SeriesRef r, const MetricDesc* d, LabelSet l) : ref(r), desc(d), labels(std::move(l)) {}

  // Immutable after registration: read without the lock.
  const SeriesRef ref;
  const MetricDesc* const desc;  // owned by the store's metric table
  const LabelSet labels;

  mutable std::mutex mu;  // everything below
  std::vector<SealedChunk> sealed;  // oldest first
  ChunkEncoder open;
  // The newest sample ever accepted, even when retention has dropped it: it keeps the order
  // rule (no sample older than one already seen) across drops.
  bool has_last = false;
  TimeNs last_t = 0;
  double last_v = 0;
  uint64_t sealed_bytes = 0;
  uint64_t sealed_samples = 0;
  uint64_t appended = 0;
  uint64_t rejected = 0;
  // Persistence: a segment may carry the series' samples only once its definition is written
  // (else a crash could leave samples under a ref that the next run hands to another series).
  bool defined_on_disk = false;
  // Samples with t <= flushed_t are in a segment already.
  bool has_flushed = false;
  TimeNs flushed_t = 0;

  bool InMemoryLocked() const { return open.count() > 0 || !sealed.empty(); }
};

namespace {

constexpr size_t kMaxSamplesPerChunk = 1 << 16;
constexpr size_t kMaxSeriesLimit = size_t{1} << 26;  // also bounds refs read from disk
constexpr size_t kMaxPendingSteps = 1'000'000;

// SeriesRef → series, readable without a lock: Append looks its series up on every sample
// while RegisterSeries may be adding others. Blocks are allocated on first use and never
// freed before the table; slots are published with release stores.
class RefTable {
 public:
  static constexpr size_t kBlockBits = 12;
  static constexpr size_t kBlockSize = size_t{1} << kBlockBits;

  explicit RefTable(size_t capacity)
      : n_blocks_((capacity + kBlockSize - 1) / kBlockSize), blocks_(new std::atomic<Block*>[n_blocks_]) {
    for (size_t i = 0; i < n_blocks_; ++i) blocks_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~RefTable() {
    for (size_t i = 0; i < n_blocks_; ++i) delete blocks_[i].load(std::memory_order_relaxed);
  }
  RefTable(const RefTable&) = delete;
  RefTable& operator=(const RefTable&) = delete;

  size_t capacity() const { return n_blocks_ * kBlockSize; }

  SeriesState* Get(SeriesRef ref) const {
    size_t b = ref >> kBlockBits;
    if (b >= n_blocks_) return nullptr;
    Block* block = blocks_[b].load(std::memory_order_acquire);
    if (block == nullptr) return nullptr;
    return block->slots[ref & (kBlockSize - 1)].load(std::memory_order_acquire);
  }

  // Writers are serialized by the caller (the registry lock). ref < capacity().
  void Set(SeriesRef ref, SeriesState* s) {
    size_t b = ref >> kBlockBits;
    Block* block = blocks_[b].load(std::memory_order_relaxed);
    if (block == nullptr) {
      block = new Block();
      blocks_[b].store(block, std::memory_order_release);
    }
    block->slots[ref & (kBlockSize - 1)].store(s, std::memory_order_release);
  }

 private:
  struct Block {
    std::atomic<SeriesState*> slots[kBlockSize] = {};
  };
  size_t n_blocks_;
  std::unique_ptr<std::atomic<Block*>[]> blocks_;
};

struct MetricEntry {
  MetricDesc desc;
  std::unordered_map<LabelSet, SeriesState*, LabelSetHash> by_labels;
  std::map<std::string, SeriesState*> ordered;  // by the labels' text: the order of every listing
};

Status CheckSameDesc(const MetricDesc& have, const MetricDesc& want) {
  if (have.type != want.type) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}' is a {}, not a {}", have.name,
                      MetricTypeName(have.type), MetricTypeName(want.type));
  }
  if (have.unit != want.unit) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}' has unit '{}', not '{}'", have.name, have.unit,
                      want.unit);
  }
  if (have.help != want.help) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "metric '{}' was registered with another help text", have.name);
  }
  return Ok();
}

inline bool SameBits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

// A matcher resolved once per query: interned ids instead of strings, the regex compiled.
struct CompiledMatcher {
  LabelMatcher::Op op = LabelMatcher::Op::kEq;
  bool is_metric_name = false;
  std::optional<uint32_t> name_id;   // nullopt: no series has this label
  std::optional<uint32_t> value_id;  // for kEq/kNe: nullopt: no series has this value
  std::string value;
  std::unique_ptr<RE2> re;

  bool Matches(const MetricDesc& desc, const LabelSet& labels) const {
    if (is_metric_name) return MatchText(desc.name);
    std::optional<uint32_t> found;
    if (name_id) {
      for (const auto& p : labels.pairs()) {
        if (p.name == *name_id) {
          found = p.value;
          break;
        }
      }
    }
    switch (op) {
      case LabelMatcher::Op::kEq:
      case LabelMatcher::Op::kNe: {
        // A missing label equals "" (Prometheus semantics).
        bool eq = found ? (value_id && *value_id == *found) : value.empty();
        return op == LabelMatcher::Op::kEq ? eq : !eq;
      }
      default:
        return MatchText(found ? StringTable::Global().Lookup(*found) : std::string_view());
    }
  }

  bool MatchText(std::string_view text) const {
    switch (op) {
      case LabelMatcher::Op::kEq: return text == value;
      case LabelMatcher::Op::kNe: return text != value;
      case LabelMatcher::Op::kRe: return RE2::FullMatch(text, *re);
      case LabelMatcher::Op::kNre: return !RE2::FullMatch(text, *re);
    }
    return false;
  }
};

Result<std::vector<CompiledMatcher>> Compile(const SeriesSelector& sel) {
  std::vector<CompiledMatcher> out;
  out.reserve(sel.matchers.size());
  auto& table = StringTable::Global();
  for (const auto& m : sel.matchers) {
    CompiledMatcher c;
    c.op = m.op;
    c.value = m.value;
    c.is_metric_name = m.name == "__name__";
    if (!c.is_metric_name) {
      c.name_id = table.Find(m.name);
      if (!m.value.empty()) c.value_id = table.Find(m.value);
    }
    if (m.op == LabelMatcher::Op::kRe || m.op == LabelMatcher::Op::kNre) {
      RE2::Options opts;
      opts.set_log_errors(false);
      c.re = std::make_unique<RE2>(m.value, opts);
      if (!c.re->ok()) {
        return MakeErrorF(ErrorCode::kInvalidArgument, "matcher {}: invalid regular expression: {}", m.name,
                          c.re->error());
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Decodes `chunk` and appends the samples with from <= t <= to.
void DecodeWindow(std::span<const uint8_t> bytes, size_t count, TimeNs from, TimeNs to, std::vector<Sample>* out) {
  ChunkDecoder dec(bytes, count);
  Sample s;
  while (dec.Next(&s)) {
    if (s.t > to) break;
    if (s.t >= from) out->push_back(s);
  }
}

// What a reader copies under a series lock; decoding happens after.
struct Snapshot {
  std::vector<SealedChunk> chunks;
  std::vector<uint8_t> open_bytes;
  size_t open_count = 0;

  void Decode(TimeNs from, TimeNs to, std::vector<Sample>* out) const {
    for (const auto& c : chunks) DecodeWindow({c.bytes.get(), c.size}, c.count, from, to, out);
    if (open_count > 0) DecodeWindow(open_bytes, open_count, from, to, out);
  }
};

Snapshot TakeSnapshotLocked(const SeriesState& s, TimeNs from, TimeNs to) {
  Snapshot snap;
  for (const auto& c : s.sealed) {
    if (c.max_t >= from && c.min_t <= to) snap.chunks.push_back(c);
  }
  if (s.open.count() > 0 && s.open.last_time() >= from && s.open.first_time() <= to) {
    snap.open_bytes = s.open.Bytes();
    snap.open_count = s.open.count();
  }
  return snap;
}

}  // namespace

struct Store::Impl {
  explicit Impl(const StoreOptions& o)
      : options(o), events(o.max_events, o.max_event_text_bytes, o.memory_budget_bytes) {}

  const StoreOptions& options;
  EventLog events;
  StepTimelines steps;
  std::unique_ptr<DiskStore> disk;
  std::unique_ptr<RefTable> table;  // set in Open, before the store is handed out

  mutable std::shared_mutex registry_mu;  // metrics, all_series, next_ref, undefined
  std::map<std::string, std::unique_ptr<MetricEntry>, std::less<>> metrics;
  std::vector<std::unique_ptr<SeriesState>> all_series;  // owns every series, never shrinks
  SeriesRef next_ref = 0;
  std::vector<SeriesState*> undefined;  // created since the last flush, not yet on disk

  std::atomic<uint64_t> unknown_ref_rejected{0};
  std::atomic<uint64_t> chunks_dropped{0};
  std::atomic<uint64_t> flushes{0};
  std::atomic<uint64_t> flush_errors{0};
  std::atomic<TimeNs> last_flush{0};

  std::mutex flush_mu;  // one flush at a time; guards the pending vectors
  std::vector<Event> pending_events;    // taken from the log, not yet written (a failed flush)
  std::vector<StepRecord> pending_steps;
  std::mutex retention_mu;  // one retention pass at a time

  std::vector<SeriesState*> SnapshotSeries() const {
    std::shared_lock lock(registry_mu);
    std::vector<SeriesState*> out;
    out.reserve(all_series.size());
    for (const auto& s : all_series) out.push_back(s.get());
    return out;
  }

  // Finds or creates a series. `ref` is given when reloading a persisted definition.
  Result<SeriesState*> RegisterLocked(const MetricDesc& desc, const LabelSet& labels, std::optional<SeriesRef> ref) {
    auto it = metrics.find(desc.name);
    MetricEntry* entry = nullptr;
    if (it != metrics.end()) {
      entry = it->second.get();
      if (auto st = CheckSameDesc(entry->desc, desc); !st) return std::unexpected(st.error());
      auto found = entry->by_labels.find(labels);
      if (found != entry->by_labels.end()) {
        if (ref && *ref != found->second->ref) {
          return MakeErrorF(ErrorCode::kInvalidArgument, "series {}{} defined twice", desc.name, labels.ToString());
        }
        return found->second;
      }
    }
    if (all_series.size() >= options.max_series) {
      return MakeErrorF(ErrorCode::kResourceExhausted, "series limit reached ({} series)", options.max_series);
    }
    SeriesRef r = ref ? *ref : next_ref;
    if (r >= table->capacity()) {
      return MakeErrorF(ErrorCode::kResourceExhausted, "series ref {} beyond the table ({})", r, table->capacity());
    }
    if (table->Get(r) != nullptr) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "series ref {} defined twice", r);
    }
    if (entry == nullptr) {
      auto e = std::make_unique<MetricEntry>();
      e->desc = desc;
      entry = e.get();
      metrics.emplace(desc.name, std::move(e));
    }
    auto s = std::make_unique<SeriesState>(r, &entry->desc, labels);
    SeriesState* raw = s.get();
    all_series.push_back(std::move(s));
    entry->by_labels.emplace(labels, raw);
    entry->ordered.emplace(labels.ToString(), raw);
    table->Set(r, raw);
    if (r >= next_ref) next_ref = r + 1;
    if (disk && !ref) undefined.push_back(raw);
    return raw;
  }

  // The order and duplicate rules, then the codec. No allocation except when a chunk seals.
  Status AppendLocked(SeriesState& s, TimeNs t, double v) {
    if (s.has_last) {
      if (t < s.last_t) {
        ++s.rejected;
        return MakeErrorF(ErrorCode::kOutOfOrder, "series {}: sample at {} is older than the newest ({})", s.ref, t,
                          s.last_t);
      }
      if (t == s.last_t) {
        if (SameBits(v, s.last_v)) return Ok();  // a resend: accepted and ignored
        ++s.rejected;
        return MakeErrorF(ErrorCode::kDuplicate, "series {}: another value for time {}", s.ref, t);
      }
    }
    s.open.Append(t, v);
    s.has_last = true;
    s.last_t = t;
    s.last_v = v;
    ++s.appended;
    if (s.open.count() >= options.samples_per_chunk) SealLocked(s);
    return Ok();
  }

  void SealLocked(SeriesState& s) {
    SealedChunk c;
    c.size = static_cast<uint32_t>(s.open.size_bytes());
    auto bytes = std::make_shared_for_overwrite<uint8_t[]>(c.size);
    s.open.CopyBytes(std::span<uint8_t>(bytes.get(), c.size));
    c.bytes = std::move(bytes);
    c.count = static_cast<uint32_t>(s.open.count());
    c.min_t = s.open.first_time();
    c.max_t = s.open.last_time();
    s.sealed_bytes += c.size;
    s.sealed_samples += c.count;
    s.sealed.push_back(std::move(c));
    s.open.Clear();  // keeps its buffer: the next chunk appends without allocating
  }

  void DropFrontLocked(SeriesState& s) {
    s.sealed_bytes -= s.sealed.front().size;
    s.sealed_samples -= s.sealed.front().count;
    s.sealed.erase(s.sealed.begin());
    chunks_dropped.fetch_add(1, std::memory_order_relaxed);
  }

  // Series matching the selector, in (metric, labels text) order.
  std::vector<SeriesState*> Match(const SeriesSelector& sel, const std::vector<CompiledMatcher>& matchers) const {
    std::vector<SeriesState*> out;
    auto scan = [&](const MetricEntry& entry) {
      for (const auto& [text, s] : entry.ordered) {
        bool ok = true;
        for (const auto& m : matchers) {
          if (!m.Matches(entry.desc, s->labels)) {
            ok = false;
            break;
          }
        }
        if (ok) out.push_back(s);
      }
    };
    std::shared_lock lock(registry_mu);
    if (!sel.metric.empty()) {
      auto it = metrics.find(sel.metric);
      if (it != metrics.end()) scan(*it->second);
    } else {
      for (const auto& [name, entry] : metrics) scan(*entry);
    }
    return out;
  }

  Status Load();
  Status FlushLocked();
};

// ---------------------------------------------------------------------------------------------
// Lifecycle

Store::Store(StoreOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {}

Store::~Store() {
  if (impl_->disk) (void)Flush();
}

Result<std::unique_ptr<Store>> Store::Open(StoreOptions options) {
  if (options.samples_per_chunk < 1 || options.samples_per_chunk > kMaxSamplesPerChunk) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "samples_per_chunk must be in [1, {}], not {}", kMaxSamplesPerChunk,
                      options.samples_per_chunk);
  }
  if (options.max_series < 1 || options.max_series > kMaxSeriesLimit) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "max_series must be in [1, {}], not {}", kMaxSeriesLimit,
                      options.max_series);
  }
  if (options.retention < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "retention must not be negative");
  }
  std::unique_ptr<Store> store(new Store(std::move(options)));
  Impl& im = *store->impl_;
  if (store->options_.data_dir.empty()) {
    im.table = std::make_unique<RefTable>(store->options_.max_series);
    return store;
  }
  auto disk = DiskStore::Open(store->options_.data_dir, store->options_.disk_budget_bytes);
  if (!disk) return std::unexpected(disk.error());
  im.disk = std::move(*disk);
  if (auto st = im.Load(); !st) {
    im.disk.reset();  // nothing to flush: do not write into a directory we could not read
    return std::unexpected(st.error());
  }
  return store;
}

Status Store::Impl::Load() {
  const TimeNs now = NowNs();
  const TimeNs cutoff = options.retention > 0 && now >= kMinTime + options.retention ? now - options.retention : kMinTime;
  std::vector<SeriesDefinition> defs;
  // The ref table is sized once every definition is known: refs persisted by an earlier run
  // (perhaps with a larger max_series) must stay valid.
  auto materialize = [&] {
    if (table) return;
    size_t capacity = options.max_series;
    for (const auto& d : defs) {
      if (d.ref < kMaxSeriesLimit) capacity = std::max(capacity, static_cast<size_t>(d.ref) + 1);
    }
    table = std::make_unique<RefTable>(capacity);
    std::unique_lock lock(registry_mu);
    for (const auto& d : defs) {
      // A definition that no longer validates (or conflicts) loses its history, not the store.
      if (d.ref >= kMaxSeriesLimit || !ValidateMetricDesc(d.desc)) continue;
      (void)RegisterLocked(d.desc, d.labels, d.ref);
    }
    defs.clear();
  };
  auto st = disk->Load([&](const SeriesDefinition& def) { defs.push_back(def); },
                       [&](const SegmentContents& seg) {
                         materialize();
                         for (const auto& batch : seg.series) {
                           SeriesState* s = table->Get(batch.ref);
                           if (s == nullptr) continue;
                           std::lock_guard lock(s->mu);
                           for (const auto& sample : batch.samples) {
                             if (sample.t < cutoff) continue;
                             (void)AppendLocked(*s, sample.t, sample.v);
                           }
                         }
                         for (const auto& e : seg.events) {
                           if (e.time >= cutoff) events.Append(e);
                         }
                         for (const auto& r : seg.steps) {
                           if (r.span.end >= cutoff) (void)steps.Record(r.job, r.rank, r.span);
                         }
                       });
  materialize();
  if (!st) return st;
  // What came from disk is on disk: only newer samples, events and steps go to the next segment.
  for (SeriesState* s : SnapshotSeries()) {
    std::lock_guard lock(s->mu);
    s->defined_on_disk = true;
    s->has_flushed = s->has_last;
    s->flushed_t = s->last_t;
    s->appended = 0;
    s->rejected = 0;
  }
  (void)events.TakeUnflushed();
  (void)steps.TakeUnflushed();
  return Ok();
}

// ---------------------------------------------------------------------------------------------
// Sink

Result<SeriesRef> Store::RegisterSeries(const MetricDesc& desc, const LabelSet& labels) {
  Impl& im = *impl_;
  {
    std::shared_lock lock(im.registry_mu);
    auto it = im.metrics.find(desc.name);
    if (it != im.metrics.end()) {
      if (auto st = CheckSameDesc(it->second->desc, desc); !st) return std::unexpected(st.error());
      auto found = it->second->by_labels.find(labels);
      if (found != it->second->by_labels.end()) return found->second->ref;
    }
  }
  if (auto st = ValidateMetricDesc(desc); !st) return std::unexpected(st.error());
  std::unique_lock lock(im.registry_mu);
  auto s = im.RegisterLocked(desc, labels, std::nullopt);
  if (!s) return std::unexpected(s.error());
  return (*s)->ref;
}

Status Store::Append(SeriesRef ref, TimeNs t, double value) {
  SeriesState* s = impl_->table->Get(ref);
  if (s == nullptr) {
    impl_->unknown_ref_rejected.fetch_add(1, std::memory_order_relaxed);
    return MakeErrorF(ErrorCode::kNotFound, "unknown series ref {}", ref);
  }
  std::lock_guard lock(s->mu);
  return impl_->AppendLocked(*s, t, value);
}

Status Store::AppendEvent(Event event) {
  impl_->events.Append(std::move(event));
  return Ok();
}

Status Store::RecordStep(std::string_view job, int32_t rank, StepSpan span) {
  return impl_->steps.Record(job, rank, span);
}

// ---------------------------------------------------------------------------------------------
// Queries

Result<std::vector<SeriesData>> Store::Select(const SeriesSelector& selector, TimeNs from, TimeNs to) const {
  auto matchers = Compile(selector);
  if (!matchers) return std::unexpected(matchers.error());
  std::vector<SeriesData> out;
  if (from > to) return out;
  for (SeriesState* s : impl_->Match(selector, *matchers)) {
    Snapshot snap;
    {
      std::lock_guard lock(s->mu);
      snap = TakeSnapshotLocked(*s, from, to);
    }
    SeriesData data;
    snap.Decode(from, to, &data.samples);
    if (data.samples.empty()) continue;
    data.info = SeriesInfo{s->ref, s->desc, s->labels};
    out.push_back(std::move(data));
  }
  return out;
}

std::vector<SeriesInfo> Store::ListSeries(const SeriesSelector& selector) const {
  auto matchers = Compile(selector);
  if (!matchers) return {};
  std::vector<SeriesInfo> out;
  for (SeriesState* s : impl_->Match(selector, *matchers)) out.push_back(SeriesInfo{s->ref, s->desc, s->labels});
  return out;
}

std::optional<Sample> Store::Latest(SeriesRef ref) const {
  SeriesState* s = impl_->table->Get(ref);
  if (s == nullptr) return std::nullopt;
  std::lock_guard lock(s->mu);
  // Drops go oldest first and an open chunk only goes when everything is stale, so while any
  // sample is held the newest accepted one is among them.
  if (!s->InMemoryLocked()) return std::nullopt;
  return Sample{s->last_t, s->last_v};
}

void Store::ForEachLatest(TimeNs stale_before,
                          const std::function<void(const MetricDesc&, const LabelSet&, Sample)>& fn) const {
  // Collected under the registry lock, called without it: fn may take its time or call back.
  std::vector<SeriesState*> series;
  {
    std::shared_lock lock(impl_->registry_mu);
    series.reserve(impl_->all_series.size());
    for (const auto& [name, entry] : impl_->metrics) {
      for (const auto& [text, s] : entry->ordered) series.push_back(s);
    }
  }
  for (SeriesState* s : series) {
    Sample latest;
    {
      std::lock_guard lock(s->mu);
      if (!s->InMemoryLocked() || s->last_t < stale_before) continue;
      latest = Sample{s->last_t, s->last_v};
    }
    fn(*s->desc, s->labels, latest);
  }
}

std::vector<MetricDesc> Store::Metrics() const {
  std::shared_lock lock(impl_->registry_mu);
  std::vector<MetricDesc> out;
  out.reserve(impl_->metrics.size());
  for (const auto& [name, entry] : impl_->metrics) out.push_back(entry->desc);
  return out;
}

std::vector<Event> Store::Events(const EventQuery& query) const { return impl_->events.Query(query); }

std::optional<int64_t> Store::StepAt(std::string_view job, int32_t rank, TimeNs t) const {
  return impl_->steps.StepAt(job, rank, t);
}

std::optional<StepSpan> Store::FindStep(std::string_view job, int32_t rank, int64_t step) const {
  return impl_->steps.Find(job, rank, step);
}

std::vector<StepSpan> Store::Steps(std::string_view job, int32_t rank, TimeNs from, TimeNs to) const {
  return impl_->steps.Range(job, rank, from, to);
}

std::vector<std::pair<std::string, int32_t>> Store::StepKeys() const { return impl_->steps.Keys(); }

// ---------------------------------------------------------------------------------------------
// Flush and retention

Status Store::Flush() {
  Impl& im = *impl_;
  if (!im.disk) return Ok();
  std::lock_guard lock(im.flush_mu);
  Status st = im.FlushLocked();
  if (!st) {
    im.flush_errors.fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  im.flushes.fetch_add(1, std::memory_order_relaxed);
  im.last_flush.store(NowNs(), std::memory_order_relaxed);
  return Ok();
}

Status Store::Compact() {
  if (!impl_->disk) return Ok();
  return impl_->disk->Compact();
}

Status Store::Impl::FlushLocked() {
  // 1. Definitions of new series, before any segment refers to them.
  std::vector<SeriesState*> to_define;
  {
    std::unique_lock lock(registry_mu);
    to_define.swap(undefined);
  }
  for (size_t i = 0; i < to_define.size(); ++i) {
    SeriesState* s = to_define[i];
    Status st = disk->DefineSeries(SeriesDefinition{s->ref, *s->desc, s->labels});
    if (!st) {
      std::unique_lock lock(registry_mu);
      undefined.insert(undefined.begin(), to_define.begin() + static_cast<std::ptrdiff_t>(i), to_define.end());
      return st;
    }
    std::lock_guard lock(s->mu);
    s->defined_on_disk = true;
  }

  // 2. The samples each series received since its last flush, re-read from its chunks.
  SegmentContents contents;
  std::vector<std::pair<SeriesState*, TimeNs>> written;
  for (SeriesState* s : SnapshotSeries()) {
    Snapshot snap;
    TimeNs from;
    TimeNs upto;
    {
      std::lock_guard lock(s->mu);
      if (!s->defined_on_disk || !s->has_last || (s->has_flushed && s->last_t <= s->flushed_t)) continue;
      from = s->has_flushed ? s->flushed_t + 1 : kMinTime;
      upto = s->last_t;
      snap = TakeSnapshotLocked(*s, from, upto);
    }
    SeriesBatch batch;
    batch.ref = s->ref;
    snap.Decode(from, upto, &batch.samples);
    written.emplace_back(s, upto);
    if (!batch.samples.empty()) contents.series.push_back(std::move(batch));
  }

  // 3. Events and steps; kept here when a write fails, for the next try.
  {
    auto ev = events.TakeUnflushed();
    pending_events.insert(pending_events.end(), std::make_move_iterator(ev.begin()), std::make_move_iterator(ev.end()));
    if (pending_events.size() > options.max_events) {
      pending_events.erase(pending_events.begin(),
                           pending_events.begin() + static_cast<std::ptrdiff_t>(pending_events.size() - options.max_events));
    }
    auto sp = steps.TakeUnflushed();
    pending_steps.insert(pending_steps.end(), std::make_move_iterator(sp.begin()), std::make_move_iterator(sp.end()));
    if (pending_steps.size() > kMaxPendingSteps) {
      pending_steps.erase(pending_steps.begin(),
                          pending_steps.begin() + static_cast<std::ptrdiff_t>(pending_steps.size() - kMaxPendingSteps));
    }
  }
  contents.events = pending_events;
  contents.steps = pending_steps;

  if (Status st = disk->WriteSegment(contents); !st) return st;
  pending_events.clear();
  pending_steps.clear();
  for (auto [s, upto] : written) {
    std::lock_guard lock(s->mu);
    if (!s->has_flushed || upto > s->flushed_t) s->flushed_t = upto;
    s->has_flushed = true;
  }
  return Ok();
}

void Store::EnforceRetention(TimeNs now) {
  Impl& im = *impl_;
  std::lock_guard retention_lock(im.retention_mu);
  const TimeNs retention = options_.retention;
  const bool by_time = retention > 0;
  const TimeNs cutoff = by_time && now >= kMinTime + retention ? now - retention : kMinTime;
  auto series = im.SnapshotSeries();

  // 1. By time: whole chunks whose newest sample is too old; a stale open chunk goes with its
  // buffer (the series may be gone for good: a process that exited).
  uint64_t sample_bytes = 0;
  for (SeriesState* s : series) {
    std::lock_guard lock(s->mu);
    if (by_time) {
      while (!s->sealed.empty() && s->sealed.front().max_t < cutoff) im.DropFrontLocked(*s);
      if (s->open.count() > 0 && s->open.last_time() < cutoff) {
        s->open = ChunkEncoder();
        im.chunks_dropped.fetch_add(1, std::memory_order_relaxed);
      }
    }
    sample_bytes += s->sealed_bytes + s->open.size_bytes();
  }
  if (by_time) {
    im.events.DropBefore(cutoff);
    im.steps.DropBefore(cutoff);
  }

  // 2. By memory: the globally oldest data until the budget holds, sealed chunks and events
  // alike (an event costs a few hundred bytes, a sample about one: a job that prints floods of
  // parsed lines must not keep every sample's history in memory nor be kept whole itself). Open
  // chunks stay: they hold the newest data and are small. What goes is still on disk when the
  // store has a data directory (flushed before it ages out).
  uint64_t total = sample_bytes + im.events.bytes();
  if (total > options_.memory_budget_bytes) {
    using Entry = std::pair<TimeNs, SeriesState*>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> oldest;
    for (SeriesState* s : series) {
      std::lock_guard lock(s->mu);
      if (!s->sealed.empty()) oldest.emplace(s->sealed.front().min_t, s);
    }
    while (total > options_.memory_budget_bytes) {
      const std::optional<TimeNs> oldest_event = im.events.oldest_time();
      if (oldest_event && (oldest.empty() || *oldest_event <= oldest.top().first)) {
        // Events up to the oldest chunk's start (all of them when no chunk is left to drop).
        const TimeNs up_to = oldest.empty() ? kMaxTime : oldest.top().first;
        const uint64_t freed = im.events.DropOldest(up_to, total - options_.memory_budget_bytes);
        if (freed == 0) break;  // cannot happen (the oldest event is <= up_to); never spin
        total -= std::min(total, freed);
        continue;
      }
      if (oldest.empty()) break;
      SeriesState* s = oldest.top().second;
      oldest.pop();
      std::lock_guard lock(s->mu);
      if (s->sealed.empty()) continue;  // only this pass drops, but be safe
      total -= s->sealed.front().size;
      im.DropFrontLocked(*s);
      if (!s->sealed.empty()) oldest.emplace(s->sealed.front().min_t, s);
    }
  }

  if (im.disk) im.disk->EnforceRetention(cutoff);  // kMinTime: only the disk budget
}

StoreStats Store::Stats() const {
  Impl& im = *impl_;
  StoreStats st;
  auto series = im.SnapshotSeries();
  st.series = series.size();
  for (SeriesState* s : series) {
    std::lock_guard lock(s->mu);
    st.samples_appended += s->appended;
    st.samples_rejected += s->rejected;
    st.samples_in_memory += s->sealed_samples + s->open.count();
    st.sample_bytes_in_memory += s->sealed_bytes + s->open.size_bytes();
  }
  st.samples_rejected += im.unknown_ref_rejected.load(std::memory_order_relaxed);
  st.chunks_dropped = im.chunks_dropped.load(std::memory_order_relaxed);
  st.events = im.events.size();
  st.event_bytes_in_memory = im.events.bytes();
  st.events_dropped = im.events.dropped();
  if (im.disk) {
    const DiskStats disk = im.disk->Stats();
    st.bytes_on_disk = disk.bytes;
    st.corrupt_segments = disk.corrupt_segments;
  }
  st.flushes = im.flushes.load(std::memory_order_relaxed);
  st.flush_errors = im.flush_errors.load(std::memory_order_relaxed);
  st.last_flush = im.last_flush.load(std::memory_order_relaxed);
  return st;
}

}  // namespace ithbat::store
