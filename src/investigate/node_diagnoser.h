#pragma once
// The node-local diagnosis engine as the agent runs it: every round, the detectors over this
// node's own store (the last `lookback`), the jobs found there, and the investigator that keeps
// each incident's id across rounds. The agent calls Round on one thread (its diagnosis
// collector's worker); the HTTP server and the metrics read Current() and Stats() on others.
//
// Thread safety: Round must not run concurrently with itself (one caller thread); Current() and
// Stats() may be called from any thread at any time and never wait for a running round (the
// result is swapped in under a mutex once the round is done).
//
// Errors: a detector or the investigator that throws does not escape Round: the round counts as
// an error (Stats().errors), the previous result stays current, and Round returns kInternal with
// the exception's message for the caller to log.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"
#include "investigate/investigator.h"
#include "store/store.h"

namespace ithbat::investigate {

struct NodeDiagnoserOptions {
  // How far back each round looks. 15 min covers the longest detector window (stalls around
  // checkpoints, the divergence and no-learning baselines) while keeping a round cheap.
  TimeNs lookback = 15 * 60 * kNsPerSec;
  InvestigateOptions investigate;
};

struct NodeDiagnoserStats {
  uint64_t rounds = 0;             // rounds finished (with or without error)
  uint64_t errors = 0;             // rounds that threw
  TimeNs last_round_duration = 0;  // ns, wall time of the last round
  TimeNs last_round_at = 0;        // the `now` of the last round (0 = none yet)
};

class NodeDiagnoser {
 public:
  explicit NodeDiagnoser(NodeDiagnoserOptions options = {});
  NodeDiagnoser(const NodeDiagnoser&) = delete;
  NodeDiagnoser& operator=(const NodeDiagnoser&) = delete;

  // One round over `store`, the store of node `node`, judged at `now`.
  Status Round(const store::Store& store, const std::string& node, TimeNs now);

  // The diagnoses of the last successful round (open, updated, and resolved ones not yet
  // forgotten), in opened order. Empty before the first round.
  std::vector<Diagnosis> Current() const;
  NodeDiagnoserStats Stats() const;
  const NodeDiagnoserOptions& options() const { return options_; }

 private:
  const NodeDiagnoserOptions options_;
  Investigator investigator_;  // touched by Round only (one thread)
  mutable std::mutex mu_;      // guards current_ and stats_
  std::vector<Diagnosis> current_;
  NodeDiagnoserStats stats_;
};

}  // namespace ithbat::investigate
