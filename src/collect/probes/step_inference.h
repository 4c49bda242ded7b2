#pragma once
// Step boundaries of one training process without its logs (issue 4, item 5), from the marks
// the probes see: NCCL collectives (op, bytes, communicator) and host-blocking syncs (probe).
// Pure: no BPF, no clock; the caller feeds marks in time order and takes finished steps.
//
// Why it works: steady-state training issues the same sequence of collectives and syncs every
// step. The inferrer finds that sequence's length P (marks per step) in a bounded window, takes
// one clean repetition as the template, then follows the stream mark by mark against the
// template, tolerating a missing mark (ring drops), an extra one (eval, checkpoint, logging
// every N steps) and reordering of neighbours, and emits a boundary each time the stream passes
// the template's boundary phase.
//
// Period choice. Every multiple of P repeats too, and so does a micro-batch block inside a step
// (gradient accumulation: k identical blocks, then an optimizer-step collective or sync). The
// inferrer takes the smallest period that matches best, then promotes it to a multiple Q when
// the smaller period's mismatches themselves recur every Q marks (the once-per-step marks break
// the micro-batch symmetry at the same place every step). LIMIT: when nothing happens once per
// step (no optimizer-step collective or sync distinguishes the last micro-batch), a step and a
// micro-batch are indistinguishable from the marks, and the inferred "step" is the micro-batch.
// A stream of one repeated mark (a single identical all-reduce, nothing else) has no pattern
// and never locks. Random or non-repeating streams must not lock (tests show it).
//
// Boundary phase. The pattern says how long a step is in marks, not where it starts. The
// boundary is put after the mark that is followed by the longest median gap of the pattern:
// in a training loop the longest host-side silence is data loading + forward compute at the
// top of the loop, right after the previous step's last sync. The boundary time is the END of
// that mark (entry + duration), so a step = [end of the previous step's last mark, end of its
// own last mark).
//
// Numbering. Without logged steps numbering is RELATIVE: `index` counts steps from the first
// lock (0-based) and `step` is -1. Given logged steps (step number, time of the log line = end
// of that step, of this rank or of the job's logging rank — synchronous training aligns ranks
// in time), the offset between the job's numbers and `index` is the most common one over the
// logged steps the history covers, and every step kept in the history is (re)numbered: steps
// inferred before the first log get their absolute number retroactively.
// After a lock is lost (the pattern changed) and found again, `index` continues with the number
// of steps the gap most likely held (gap / median step time); `numbering_estimated` says so.
//
// Lifecycle: one per process; not thread-safe (the collector owns it). Memory is bounded by
// Options (window of marks, history of steps, logged steps kept).
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ithbat::collect::probes {

// One mark of the stream. `signature` identifies what happened (equal for the same call with the
// same arguments in every step); make it with the helpers below.
struct StepMark {
  TimeNs time = 0;      // entry of the call (any clock, one per inferrer)
  TimeNs duration = 0;  // host time inside the call (syncs), 0 for enqueues
  uint64_t signature = 0;
};

// Signature of a collective: op label, message bytes, communicator (comm_id_hash when known,
// else the communicator's address: stable inside one process).
uint64_t CollectiveSignature(std::string_view op, uint64_t bytes, uint64_t comm);
// Signature of a host-blocking sync or blocking copy: the probe id and (copies) its byte count.
uint64_t SyncSignature(uint16_t probe, uint64_t bytes = 0);

struct InferredStep {
  int64_t index = 0;   // relative number (see top); monotone
  int64_t step = -1;   // the job's own step number once calibrated by logged steps, else -1
  TimeNs start = 0;    // end of the previous step's last mark
  TimeNs end = 0;      // end of this step's last mark
  double confidence = 0;  // 0..1: lock quality × marks of this step that matched the pattern
  uint32_t period = 0;    // marks per step of the pattern in force
  uint32_t epoch = 0;     // lock number (a new pattern after a loss of lock: epoch + 1)
  bool numbering_estimated = false;  // index carried over an unlocked gap by time (see top)
};

class StepInference {
 public:
  struct Options {
    size_t window = 4096;       // marks kept for period detection
    uint32_t max_period = 512;  // longest step, in marks
    uint32_t min_repeats = 3;   // clean consecutive repetitions needed to lock
    double min_match = 0.8;     // fraction of marks that must repeat (allowing one drop/insert)
    size_t history = 4096;      // finished steps kept (retroactive numbering)
    size_t logged_kept = 256;   // logged steps kept for calibration
  };
  StepInference();
  explicit StepInference(Options options);

  // Marks in time order; one older than the last is counted and ignored, so is a time < 0.
  void Add(const StepMark& mark);
  // A logged step: the job's number and the time the line was written (end of that step), in
  // the marks' clock (convert first: the probes' times are CLOCK_MONOTONIC, logs realtime).
  void AddLoggedStep(int64_t step, TimeNs time);

  // Steps finished since the last call, plus every kept step whose absolute number changed
  // (a calibration arrived or moved), oldest index first. Each step appears again only when its
  // number changed.
  std::vector<InferredStep> TakeSteps();
  // Call BEFORE TakeSteps: the lowest index whose earlier-returned steps are void, if any. A lock
  // taken early can be refined to a multiple of its period (gradient accumulation: micro-batches
  // seen before the first optimizer step); the steps of that lock are then inferred again with
  // the same indices. The consumer forgets every step it holds with index >= the returned one,
  // then applies TakeSteps. Happens only while the lock's first mark is still in the window
  // (the first Options::window marks of a lock), so the retracted steps are always inferred again.
  std::optional<int64_t> TakeRetraction();
  // Every kept step (bounded by Options::history), oldest first.
  const std::deque<InferredStep>& History() const { return history_; }

  bool locked() const { return !template_.empty(); }
  uint32_t period() const { return static_cast<uint32_t>(template_.size()); }
  // job step number − index, once logged steps calibrated the current numbering.
  std::optional<int64_t> offset() const { return offset_; }

  struct Stats {
    uint64_t marks = 0;
    uint64_t out_of_order = 0;
    uint64_t invalid = 0;  // a negative or absurd time / step number
    uint64_t matched = 0;   // marks that matched the template in place
    uint64_t dropped = 0;   // template marks taken as missing from the stream
    uint64_t extra = 0;     // stream marks taken as not part of the pattern
    uint64_t locks = 0;
    uint64_t lock_losses = 0;
    uint64_t refinements = 0;  // locks replaced by a multiple of their period
  };
  const Stats& stats() const { return stats_; }

 private:
  void TryLock(bool refine);
  void Follow(uint64_t upto);
  void Consume(size_t i, int kind, uint32_t drops);
  void FinishStep(TimeNs boundary, bool boundary_seen);
  void LoseLock();
  void Recalibrate();
  void Trim();

  Options o_;
  Stats stats_;
  std::deque<StepMark> marks_;  // the window; marks_[0] has absolute position base_
  uint64_t base_ = 0;
  uint64_t detect_from_ = 0;  // absolute position where detection starts (after a loss of lock)
  uint64_t next_detect_ = 0;  // absolute mark count at which detection runs next

  // Lock state.
  std::vector<uint64_t> template_;
  uint32_t boundary_phase_ = 0;
  double lock_quality_ = 0;
  uint64_t follow_pos_ = 0;  // next absolute position to follow
  uint32_t phase_ = 0;       // template phase expected for the next mark
  TimeNs prev_end_ = 0;      // end of the last consumed mark
  bool prev_seen_ = false;
  bool prev_known_ = false;  // prev_end_ is a real mark's end
  bool in_step_ = false;     // a boundary was passed: a step is open
  bool first_in_epoch_ = false;
  bool start_seen_ = false;
  TimeNs step_start_ = 0;
  uint32_t step_matched_ = 0, step_bad_ = 0;
  std::deque<uint8_t> recent_bad_;  // 1 = a drop/extra among the last marks followed
  uint32_t recent_bad_count_ = 0;
  uint32_t epoch_ = 0;
  int64_t epoch_first_index_ = 0;
  // Numbering state when this lock was taken (a refinement restores it).
  bool epoch_any_step_ = false;
  TimeNs epoch_last_step_end_ = 0;
  bool epoch_next_estimated_ = false;
  uint64_t lock_from_ = 0;    // absolute position detection started from for this lock
  uint64_t next_refine_ = 0;
  std::optional<int64_t> retracted_from_;
  int64_t next_index_ = 0;
  bool next_estimated_ = false;
  TimeNs last_step_end_ = 0;
  bool any_step_ = false;

  std::deque<InferredStep> history_;
  std::vector<InferredStep> out_;
  std::deque<std::pair<int64_t, TimeNs>> logged_;
  std::optional<int64_t> offset_;
  std::optional<int64_t> taken_offset_;
};

}  // namespace ithbat::collect::probes
