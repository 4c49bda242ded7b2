#include "collect/probes/step_inference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

namespace ithbat::collect::probes {
namespace {

// Marks looked at past the one being placed, and the longest run of missing marks one step of
// the follower bridges. Small and fixed: they bound the per-mark cost, not the pattern.
constexpr size_t kLookahead = 4;
constexpr uint32_t kMaxDropRun = 8;

uint64_t Mix(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

uint64_t Fnv(std::string_view s, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

TimeNs Median(std::vector<TimeNs> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

enum Kind { kMatch = 0, kDrop = 1, kExtra = 2 };

}  // namespace

uint64_t CollectiveSignature(std::string_view op, uint64_t bytes, uint64_t comm) {
  return Mix(Fnv(op) ^ Mix(bytes + 0x9e3779b97f4a7c15ULL) ^ Mix(comm ^ 0x5bd1e995ULL) * 3);
}

uint64_t SyncSignature(uint16_t probe, uint64_t bytes) {
  return Mix(Fnv("sync") ^ Mix(static_cast<uint64_t>(probe) + 1) ^ Mix(bytes + 0x51ed27ULL) * 5);
}

StepInference::StepInference() : StepInference(Options{}) {}

StepInference::StepInference(Options options) : o_(options) {
  o_.window = std::clamp<size_t>(o_.window, 16, 1 << 20);
  o_.min_repeats = std::max<uint32_t>(o_.min_repeats, 2);
  o_.max_period = std::clamp<uint32_t>(o_.max_period, 1, static_cast<uint32_t>(o_.window / o_.min_repeats));
  o_.min_match = std::clamp(o_.min_match, 0.5, 1.0);
  o_.history = std::clamp<size_t>(o_.history, 1, 1 << 20);
  o_.logged_kept = std::clamp<size_t>(o_.logged_kept, 1, 1 << 16);
}

void StepInference::Add(const StepMark& in) {
  // Times are ns on a clock that starts at 0 (boot or epoch); keep every sum in range.
  if (in.time < 0 || in.time > kMaxTime / 2) {
    ++stats_.invalid;
    return;
  }
  if (!marks_.empty() && in.time < marks_.back().time) {
    ++stats_.out_of_order;
    return;
  }
  StepMark mark = in;
  mark.duration = std::clamp<TimeNs>(mark.duration, 0, kMaxTime / 4);
  marks_.push_back(mark);
  ++stats_.marks;
  const uint64_t total = base_ + marks_.size();
  if (locked()) {
    if (total > kLookahead) Follow(total - kLookahead);
    // Refinement: a lock taken on the first marks may be a sub-period (micro-batches before the
    // first optimizer step was seen). Re-detect as the epoch's data doubles, while the window
    // still holds the lock's first mark: a refinement retracts every step of the lock and
    // follows again from that mark, so once it has left the window the retracted steps could
    // not be inferred again (they would be lost and the later ones renumbered).
    if (locked() && total >= next_refine_ && base_ <= lock_from_ && total - lock_from_ <= o_.window) {
      TryLock(/*refine=*/true);
      next_refine_ = total + std::max<uint64_t>(16, total - lock_from_);
    }
  } else if (total >= next_detect_) {
    TryLock(/*refine=*/false);
    // Detection is O(window × max_period): run it as the data grows by a quarter, not on each
    // mark (a stream that never locks costs O(max_period) per mark amortised).
    const uint64_t n = total - std::max(detect_from_, base_);
    next_detect_ = total + std::max<uint64_t>(16, n / 4);
  }
  Trim();
}

void StepInference::AddLoggedStep(int64_t step, TimeNs time) {
  if (time < 0 || time > kMaxTime / 2 || step < 0 || step > INT64_MAX / 4) {
    ++stats_.invalid;
    return;
  }
  logged_.emplace_back(step, time);
  while (logged_.size() > o_.logged_kept) logged_.pop_front();
  Recalibrate();
}

std::optional<int64_t> StepInference::TakeRetraction() {
  std::optional<int64_t> r = retracted_from_;
  retracted_from_.reset();
  return r;
}

std::vector<InferredStep> StepInference::TakeSteps() {
  std::vector<InferredStep> r;
  if (offset_ != taken_offset_) {
    r.assign(history_.begin(), history_.end());
    taken_offset_ = offset_;
  } else {
    r = std::move(out_);
  }
  out_.clear();
  return r;
}

void StepInference::Trim() {
  while (marks_.size() > o_.window) {
    marks_.pop_front();
    ++base_;
  }
  if (follow_pos_ < base_ && locked()) {
    // Cannot happen while following keeps up (it runs on every Add); be safe anyway.
    LoseLock();
  }
}

void StepInference::TryLock(bool refine) {
  const uint64_t from = std::max(detect_from_, base_);
  const size_t off = static_cast<size_t>(from - base_);
  const size_t n = marks_.size() - off;
  const uint32_t reps = o_.min_repeats;
  if (n < 2 * static_cast<size_t>(reps)) return;
  std::vector<uint64_t> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = marks_[off + i].signature;

  // Chance of two random marks matching (Σ p²), strictly and allowing ±1 shift.
  std::unordered_map<uint64_t, size_t> counts;
  for (uint64_t x : s) ++counts[x];
  double base = 0;
  for (const auto& [sig, c] : counts) base += (static_cast<double>(c) / n) * (static_cast<double>(c) / n);
  const double base_tol = 1 - std::pow(1 - base, 3);

  const uint32_t pmax = std::min<uint32_t>(o_.max_period, static_cast<uint32_t>(n / reps));
  if (pmax < 1) return;
  // The strict rate for every candidate (the O(window × max_period) part: one compare each);
  // the tolerant one only for the period chosen.
  std::vector<double> strict(pmax + 1, 0);
  for (uint32_t p = 1; p <= pmax; ++p) {
    size_t m = 0;
    for (size_t i = 0; i + p < n; ++i) m += s[i] == s[i + p];
    strict[p] = static_cast<double>(m) / static_cast<double>(n - p);
  }
  auto tolerant = [&](uint32_t p) {
    size_t mt = 0;
    for (size_t i = 0; i + p < n; ++i) {
      // A drop or an insertion between i and i+p shifts the repetition by one.
      mt += s[i] == s[i + p] || s[i] == s[i + p - 1] || (i + p + 1 < n && s[i] == s[i + p + 1]);
    }
    return static_cast<double>(mt) / static_cast<double>(n - p);
  };
  const double rmax = *std::max_element(strict.begin() + 1, strict.end());
  uint32_t period = 0;
  for (uint32_t p = 1; p <= pmax; ++p) {
    if (strict[p] >= 0.9 * rmax) {
      period = p;
      break;
    }
  }
  if (period == 0) return;

  // Promotion: the mismatches of a sub-period (a micro-batch) recur at the same place every
  // step, at the step's length Q (not necessarily a multiple: once-per-step marks add to it);
  // those of the true period are noise and do not. Q must also repeat better than the
  // sub-period. The smallest such Q wins; repeated until none.
  for (bool promoted = true; promoted;) {
    promoted = false;
    std::vector<uint8_t> x(n - period);
    size_t mis = 0;
    for (size_t i = 0; i + period < n; ++i) mis += x[i] = s[i] != s[i + period];
    for (uint32_t q = period + 1; q <= pmax; ++q) {
      if (strict[q] <= strict[period] || strict[q] < 0.5 || strict[q] <= base + 0.25 * (1 - base)) continue;
      // Structural: at least one mismatch per two repetitions of q over the window.
      if (static_cast<double>(mis) < static_cast<double>(n) / (2.0 * q)) continue;
      size_t rec = 0, denom = 0;
      for (size_t i = 0; i + q < x.size(); ++i) {
        if (!x[i]) continue;
        ++denom;
        rec += x[i + q];
      }
      if (denom > 0 && static_cast<double>(rec) / static_cast<double>(denom) >= 0.5) {
        period = q;
        promoted = true;
        break;
      }
    }
  }

  // Refinement replaces the lock only with a longer period that repeats better.
  if (refine && (period <= this->period() || this->period() > pmax || strict[period] <= strict[this->period()]))
    return;
  if (strict[period] < base + 0.25 * (1 - base)) return;
  const double tol = tolerant(period);
  if (tol < o_.min_match || tol < base_tol + 0.5 * (1 - base_tol)) return;

  // The template: the earliest stretch of `reps` clean consecutive repetitions.
  const size_t span = static_cast<size_t>(reps - 1) * period;
  size_t run = 0, start = n;
  for (size_t j = 0; j + period < n; ++j) {
    run = s[j] == s[j + period] ? run + 1 : 0;
    if (run >= span) {
      start = j + 1 - span;
      break;
    }
  }
  if (start == n) return;
  // Extend the clean stretch as far as it goes for the gap statistics.
  size_t end = start + span + period;  // exclusive
  while (end < n && s[end] == s[end - period]) ++end;

  // A template of one repeated mark says nothing about where a step starts.
  if (std::all_of(s.begin() + start, s.begin() + start + period, [&](uint64_t x) { return x == s[start]; })) return;
  if (refine) {
    // The sub-period's steps of this epoch are void: retract them and follow again from the
    // lock's first mark (Add refines only while it is in the window: from == lock_from_).
    if (from != lock_from_) return;
    const int64_t first = epoch_first_index_;
    while (!history_.empty() && history_.back().epoch == epoch_) history_.pop_back();
    std::erase_if(out_, [&](const InferredStep& x) { return x.epoch == epoch_; });
    if (!retracted_from_ || first < *retracted_from_) retracted_from_ = first;
    next_index_ = first;
    // Back to the state before the lock's first step: the refined steps are this lock's first,
    // numbered like the retracted ones (not an estimate across a gap).
    any_step_ = epoch_any_step_;
    last_step_end_ = epoch_last_step_end_;
    next_estimated_ = epoch_next_estimated_;
    --epoch_;
    --stats_.locks;
    ++stats_.refinements;
  }
  template_.assign(s.begin() + start, s.begin() + start + period);
  std::vector<std::vector<TimeNs>> gaps(period);
  for (size_t q = std::max<size_t>(start, 1); q < end; ++q) {
    const StepMark& prev = marks_[off + q - 1];
    const StepMark& cur = marks_[off + q];
    gaps[(q - start) % period].push_back(cur.time - (prev.time + prev.duration));
  }
  // The boundary follows the longest silence. Near-ties (gradient accumulation: every
  // micro-batch's forward is as long) go to the phase after a mark that occurs once per step
  // (the optimizer's sync or all-reduce closes the step), then to the longest.
  std::vector<TimeNs> med(period, std::numeric_limits<TimeNs>::min());
  TimeNs longest = std::numeric_limits<TimeNs>::min();
  for (uint32_t j = 0; j < period; ++j) {
    if (gaps[j].empty()) continue;
    med[j] = Median(gaps[j]);
    longest = std::max(longest, med[j]);
  }
  std::unordered_map<uint64_t, uint32_t> in_template;
  for (uint64_t x : template_) ++in_template[x];
  auto score = [&](uint32_t j) {
    const bool near = med[j] != std::numeric_limits<TimeNs>::min() && longest > 0 &&
                      static_cast<double>(med[j]) >= 0.8 * static_cast<double>(longest);
    const bool after_unique = in_template[template_[(j + period - 1) % period]] == 1;
    return std::tuple<bool, bool, TimeNs>(near, near && after_unique, med[j]);
  };
  boundary_phase_ = 0;
  for (uint32_t j = 1; j < period; ++j) {
    if (score(j) > score(boundary_phase_)) boundary_phase_ = j;
  }
  lock_quality_ = tol;
  ++stats_.locks;
  ++epoch_;
  epoch_first_index_ = next_index_;
  epoch_any_step_ = any_step_;
  epoch_last_step_end_ = last_step_end_;
  epoch_next_estimated_ = next_estimated_;
  lock_from_ = from;
  next_refine_ = base_ + marks_.size() + std::max<uint64_t>(16, n);
  follow_pos_ = from + start;
  phase_ = 0;
  prev_seen_ = false;
  in_step_ = false;
  first_in_epoch_ = true;
  recent_bad_.clear();
  recent_bad_count_ = 0;
  prev_known_ = start > 0;
  if (prev_known_) prev_end_ = marks_[off + start - 1].time + marks_[off + start - 1].duration;
  const uint64_t total = base_ + marks_.size();
  if (total > kLookahead) Follow(total - kLookahead);
}

void StepInference::Follow(uint64_t upto) {
  while (locked() && follow_pos_ < upto) {
    const size_t i = static_cast<size_t>(follow_pos_ - base_);
    const uint32_t p = period();
    const uint64_t s = marks_[i].signature;
    const size_t la_end = std::min(marks_.size(), i + 1 + kLookahead);
    auto mism = [&](uint32_t phase) {
      uint32_t c = 0;
      for (size_t k = i + 1; k < la_end; ++k) c += marks_[k].signature != template_[(phase + (k - i - 1)) % p];
      return c;
    };
    int kind = kExtra;
    uint32_t drops = 0;
    uint32_t best = 1 + mism(phase_);
    if (s == template_[phase_]) {
      const uint32_t c = mism((phase_ + 1) % p);
      if (c <= best) {
        best = c;
        kind = kMatch;
      }
    }
    const uint32_t dmax = std::min<uint32_t>(p - 1, kMaxDropRun);
    for (uint32_t d = 1; d <= dmax; ++d) {
      if (s != template_[(phase_ + d) % p]) continue;
      const uint32_t c = d + mism((phase_ + d + 1) % p);
      if (c < best || (c == best && kind == kExtra)) {
        best = c;
        kind = kDrop;
        drops = d;
      }
    }
    Consume(i, kind, drops);
    ++follow_pos_;
  }
}

void StepInference::Consume(size_t i, int kind, uint32_t drops) {
  const StepMark& m = marks_[i];
  const uint32_t p = period();
  bool bad = kind != kMatch;
  if (kind == kExtra) {
    ++stats_.extra;
  } else {
    if (kind == kDrop) stats_.dropped += drops;
    else ++stats_.matched;
    // Phases phase_ .. phase_+drops are passed; the mark takes phase_+drops.
    bool boundary = false, seen = false;
    for (uint32_t k = 0; k <= drops; ++k) {
      if ((phase_ + k) % p == boundary_phase_) {
        boundary = true;
        seen = k == drops && prev_seen_;
      }
    }
    if (boundary && !prev_known_) {
      // The first mark followed opens at the boundary phase: the previous step's end is unknown,
      // so no step opens here; the next boundary opens the first.
      boundary = false;
    }
    if (boundary) {
      // A boundary is exact when both the step's last mark and the next one's first were seen.
      if (in_step_) FinishStep(prev_end_, seen);
      if (first_in_epoch_) {
        first_in_epoch_ = false;
        if (any_step_) {
          // Steps the unlocked stretch most likely held, from the median step time.
          std::vector<TimeNs> d;
          for (size_t k = history_.size() > 16 ? history_.size() - 16 : 0; k < history_.size(); ++k)
            d.push_back(history_[k].end - history_[k].start);
          const TimeNs med = Median(d);
          if (med > 0 && prev_end_ > last_step_end_) {
            next_index_ += static_cast<int64_t>(std::llround(static_cast<double>(prev_end_ - last_step_end_) /
                                                             static_cast<double>(med)));
          }
          next_estimated_ = true;
        }
      }
      in_step_ = true;
      step_start_ = prev_end_;
      start_seen_ = seen;
      step_matched_ = 0;
      step_bad_ = 0;
    }
    phase_ = (phase_ + drops + 1) % p;
    prev_seen_ = kind == kMatch;
  }
  if (kind == kMatch) ++step_matched_;
  else step_bad_ += std::max<uint32_t>(drops, 1);
  prev_end_ = prev_known_ ? std::max(prev_end_, m.time + m.duration) : m.time + m.duration;
  prev_known_ = true;

  // Losing the lock: most of the recent marks do not fit the pattern.
  const size_t qwin = std::max<size_t>(2 * static_cast<size_t>(p), 16);
  recent_bad_.push_back(bad);
  recent_bad_count_ += bad;
  if (recent_bad_.size() > qwin) {
    recent_bad_count_ -= recent_bad_.front();
    recent_bad_.pop_front();
  }
  if (recent_bad_.size() == qwin && recent_bad_count_ * 2 > qwin) LoseLock();
}

void StepInference::FinishStep(TimeNs boundary, bool end_seen) {
  InferredStep st;
  st.index = next_index_++;
  st.start = step_start_;
  st.end = boundary;
  const double fit = static_cast<double>(step_matched_) / std::max<uint32_t>(1, step_matched_ + step_bad_);
  st.confidence = lock_quality_ * fit * (start_seen_ ? 1.0 : 0.75) * (end_seen ? 1.0 : 0.75);
  st.period = period();
  st.epoch = epoch_;
  st.numbering_estimated = next_estimated_;
  if (offset_) st.step = st.index + *offset_;
  last_step_end_ = boundary;
  any_step_ = true;
  history_.push_back(st);
  out_.push_back(st);
  while (history_.size() > o_.history) history_.pop_front();
  if (!logged_.empty()) Recalibrate();
}

void StepInference::LoseLock() {
  ++stats_.lock_losses;
  // Detection restarts where the trouble began: the first bad mark of the recent window.
  uint64_t back = recent_bad_.size();
  for (uint8_t b : recent_bad_) {
    if (b) break;
    --back;
  }
  detect_from_ = follow_pos_ + 1 >= back ? follow_pos_ + 1 - back : 0;
  template_.clear();
  in_step_ = false;
  recent_bad_.clear();
  recent_bad_count_ = 0;
  next_detect_ = 0;
}

void StepInference::Recalibrate() {
  if (history_.empty() || logged_.empty()) return;
  std::vector<TimeNs> d;
  for (size_t k = history_.size() > 64 ? history_.size() - 64 : 0; k < history_.size(); ++k)
    d.push_back(history_[k].end - history_[k].start);
  // A log line marks the end of its step, but not exactly ours: it may come from another rank,
  // whose steps end up to a blocking call's time before or after ours (synchronous training
  // aligns ranks only at the waits: a rank that arrives late at a collective still ends its step
  // later by what its blocking copy or sync hid), and the line may be written a little late. So
  // the logged step is the one whose end is NEAREST to the line, within half a step either way;
  // the latest end before the line plus a fixed slack took the previous step whenever this rank
  // lagged the logging one by more than the slack, numbering every step one (or more) too high.
  const TimeNs reach = Median(d) / 2;
  std::map<int64_t, std::pair<int, size_t>> votes;  // offset -> (count, latest log position)
  for (size_t li = 0; li < logged_.size(); ++li) {
    const auto [step, t] = logged_[li];
    if (t < history_.front().start - reach || t > history_.back().end + reach) continue;
    // The first step ending after t, and the one before it: the nearer end wins (ends ascend
    // along the history).
    auto it = std::upper_bound(history_.begin(), history_.end(), t,
                               [](TimeNs v, const InferredStep& s) { return v < s.end; });
    auto best_it = history_.end();
    TimeNs best_dist = 0;
    for (auto c : {it, it == history_.begin() ? history_.end() : std::prev(it)}) {
      if (c == history_.end()) continue;
      const TimeNs dist = c->end > t ? c->end - t : t - c->end;
      if (best_it == history_.end() || dist < best_dist) {
        best_it = c;
        best_dist = dist;
      }
    }
    if (best_it == history_.end() || best_dist > reach) continue;
    auto& v = votes[step - best_it->index];
    ++v.first;
    v.second = li;
  }
  if (votes.empty()) return;
  auto best = votes.begin();
  for (auto it = votes.begin(); it != votes.end(); ++it) {
    if (it->second.first > best->second.first ||
        (it->second.first == best->second.first && it->second.second > best->second.second))
      best = it;
  }
  if (offset_ == best->first) return;
  offset_ = best->first;
  for (InferredStep& s : history_) s.step = s.index + *offset_;
  for (InferredStep& s : out_) s.step = s.index + *offset_;
}

}  // namespace ithbat::collect::probes
