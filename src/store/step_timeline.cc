#include "store/step_timeline.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace ithbat::store {
namespace {

// A job id is a Slurm id, a run id or a pod UID: short. Anything longer is a broken source.
constexpr size_t kMaxJobBytes = 1024;
// (job, rank) pairs held at once: a node runs a few jobs of a few ranks each.
constexpr size_t kMaxTimelines = 1 << 16;
// How far back Record looks for the step it replaces: calibration touches recent steps only;
// a step number seen long ago (a job restarted from a checkpoint) is a new span.
constexpr size_t kReplaceWindow = 4096;

struct Entry {
  StepSpan span;
  uint64_t seq;  // record order: TakeUnflushed hands spans out in this order
};

struct Timeline {
  std::deque<Entry> spans;  // sorted by span.start; equal starts keep record order
  size_t unflushed = 0;     // entries with seq > the log's flushed_seq
  // Step numbers strictly increase along `spans` (the normal case): Find can binary search.
  // Cleared for good by the first span out of step order (a restart from a checkpoint).
  bool steps_sorted = true;
};

struct Key {
  std::string job;
  int32_t rank;
};
struct KeyView {
  std::string_view job;
  int32_t rank;
};

struct KeyLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    int c = std::string_view(a.job).compare(std::string_view(b.job));
    return c < 0 || (c == 0 && a.rank < b.rank);
  }
};

// Index of the last span with start <= t, or -1.
ptrdiff_t LastStartingAtOrBefore(const std::deque<Entry>& spans, TimeNs t) {
  auto it = std::upper_bound(spans.begin(), spans.end(), t,
                             [](TimeNs v, const Entry& e) { return v < e.span.start; });
  return (it - spans.begin()) - 1;
}

}  // namespace

struct StepTimelines::Impl {
  size_t max_steps_per_rank;
  mutable std::shared_mutex mu;
  std::map<Key, Timeline, KeyLess> timelines;
  uint64_t next_seq = 1;
  uint64_t flushed_seq = 0;
  size_t total = 0;

  const Timeline* Get(std::string_view job, int32_t rank) const {
    auto it = timelines.find(KeyView{job, rank});
    return it == timelines.end() ? nullptr : &it->second;
  }
  void Erase(Timeline& tl, std::deque<Entry>::iterator it) {
    if (it->seq > flushed_seq) --tl.unflushed;
    tl.spans.erase(it);
    --total;
  }
};

StepTimelines::StepTimelines(size_t max_steps_per_rank)
    : impl_(new Impl{std::max<size_t>(max_steps_per_rank, 1)}) {}

StepTimelines::~StepTimelines() { delete impl_; }

Status StepTimelines::Record(std::string_view job, int32_t rank, StepSpan span) {
  if (span.end < span.start) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "step {} of {}/{}: end {} before start {}", span.step, job,
                      rank, span.end, span.start);
  }
  if (job.size() > kMaxJobBytes) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "job id of {} bytes (at most {})", job.size(),
                      kMaxJobBytes);
  }
  std::unique_lock lock(impl_->mu);
  auto it = impl_->timelines.find(KeyView{job, rank});
  if (it == impl_->timelines.end()) {
    if (impl_->timelines.size() >= kMaxTimelines) {
      return MakeErrorF(ErrorCode::kResourceExhausted, "{} step timelines held already", kMaxTimelines);
    }
    it = impl_->timelines.emplace(Key{std::string(job), rank}, Timeline{}).first;
  }
  Timeline& tl = it->second;
  auto& spans = tl.spans;
  Entry entry{span, impl_->next_seq++};

  // Replace the newest span of the same step, if it is recent.
  size_t window = std::min(spans.size(), kReplaceWindow);
  for (size_t i = 0; i < window; ++i) {
    auto pos = spans.end() - 1 - static_cast<ptrdiff_t>(i);
    if (pos->span.step == span.step) {
      impl_->Erase(tl, pos);
      break;
    }
  }
  auto pos = spans.end();
  if (!spans.empty() && spans.back().span.start > span.start) {
    pos = std::upper_bound(spans.begin(), spans.end(), span.start,
                           [](TimeNs v, const Entry& e) { return v < e.span.start; });
  }
  if ((pos != spans.begin() && (pos - 1)->span.step >= span.step) ||
      (pos != spans.end() && pos->span.step <= span.step)) {
    tl.steps_sorted = false;
  }
  spans.insert(pos, entry);
  ++tl.unflushed;
  ++impl_->total;
  while (spans.size() > impl_->max_steps_per_rank) impl_->Erase(tl, spans.begin());
  return Ok();
}

std::optional<int64_t> StepTimelines::StepAt(std::string_view job, int32_t rank, int64_t t) const {
  std::shared_lock lock(impl_->mu);
  const Timeline* tl = impl_->Get(job, rank);
  if (tl == nullptr) return std::nullopt;
  // Spans do not overlap in a sane timeline; when they do (an inferred span not yet
  // calibrated), the latest-starting span that holds t wins. Look back a few spans only: an
  // old span that still covers t would be a broken source, not worth a linear scan.
  ptrdiff_t i = LastStartingAtOrBefore(tl->spans, t);
  for (int looked = 0; i >= 0 && looked < 8; --i, ++looked) {
    const StepSpan& s = tl->spans[static_cast<size_t>(i)].span;
    if (t < s.end) return s.step;
  }
  return std::nullopt;
}

std::optional<StepSpan> StepTimelines::Find(std::string_view job, int32_t rank, int64_t step) const {
  std::shared_lock lock(impl_->mu);
  const Timeline* tl = impl_->Get(job, rank);
  if (tl == nullptr || tl->spans.empty()) return std::nullopt;
  const auto& spans = tl->spans;
  if (tl->steps_sorted) {
    auto it = std::lower_bound(spans.begin(), spans.end(), step,
                               [](const Entry& e, int64_t s) { return e.span.step < s; });
    if (it != spans.end() && it->span.step == step) return it->span;
    return std::nullopt;
  }
  // Numbers repeat after a restart from a checkpoint: the newest span of that number wins.
  for (auto r = spans.rbegin(); r != spans.rend(); ++r) {
    if (r->span.step == step) return r->span;
  }
  return std::nullopt;
}

std::vector<StepSpan> StepTimelines::Range(std::string_view job, int32_t rank, int64_t from,
                                           int64_t to) const {
  std::vector<StepSpan> out;
  if (from > to) return out;
  std::shared_lock lock(impl_->mu);
  const Timeline* tl = impl_->Get(job, rank);
  if (tl == nullptr) return out;
  const auto& spans = tl->spans;
  // Spans starting before `from` may still reach into the window; spans are near-disjoint, so
  // backing off from the first span starting at or after `from` finds them quickly.
  auto first = std::lower_bound(spans.begin(), spans.end(), from,
                                [](const Entry& e, TimeNs v) { return e.span.start < v; });
  while (first != spans.begin() && (first - 1)->span.end > from) --first;
  for (auto it = first; it != spans.end() && it->span.start <= to; ++it) {
    const StepSpan& s = it->span;
    // [start, end) overlaps [from, to]; a zero-length span counts when its instant is inside.
    bool overlaps = s.start <= to && (s.end > from || (s.start == s.end && s.start >= from));
    if (overlaps) out.push_back(s);
  }
  return out;
}

std::vector<StepRecord> StepTimelines::TakeUnflushed() {
  std::unique_lock lock(impl_->mu);
  std::vector<std::pair<uint64_t, StepRecord>> found;
  for (auto& [key, tl] : impl_->timelines) {
    size_t want = tl.unflushed;
    for (auto it = tl.spans.rbegin(); it != tl.spans.rend() && want > 0; ++it) {
      if (it->seq > impl_->flushed_seq) {
        found.emplace_back(it->seq, StepRecord{key.job, key.rank, it->span});
        --want;
      }
    }
    tl.unflushed = 0;
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  impl_->flushed_seq = impl_->next_seq - 1;
  std::vector<StepRecord> out;
  out.reserve(found.size());
  for (auto& [seq, rec] : found) out.push_back(std::move(rec));
  return out;
}

void StepTimelines::DropBefore(int64_t t) {
  std::unique_lock lock(impl_->mu);
  for (auto it = impl_->timelines.begin(); it != impl_->timelines.end();) {
    Timeline& tl = it->second;
    // A span goes once all of it lies before t; spans are sorted by start, so stop at the
    // first one still alive (a later span cannot have ended earlier in a sane timeline).
    while (!tl.spans.empty() && tl.spans.front().span.end <= t && tl.spans.front().span.start < t) {
      impl_->Erase(tl, tl.spans.begin());
    }
    if (tl.spans.empty()) {
      it = impl_->timelines.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::pair<std::string, int32_t>> StepTimelines::Keys() const {
  std::shared_lock lock(impl_->mu);
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(impl_->timelines.size());
  for (const auto& [key, tl] : impl_->timelines) {
    if (!tl.spans.empty()) out.emplace_back(key.job, key.rank);
  }
  return out;
}

size_t StepTimelines::size() const {
  std::shared_lock lock(impl_->mu);
  return impl_->total;
}

}  // namespace ithbat::store
