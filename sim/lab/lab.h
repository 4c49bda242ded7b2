#pragma once
// The scenario lab: runs scenario files through the simulator (`ithbat-sim run`, a child
// process) and checks each against its `expect` block with the signal checks
// (signal_checks.h). `ithbat-lab` and `ithbat demo` are its front ends.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lab/diagnosis_check.h"
#include "lab/signal_checks.h"
#include "lab/story_check.h"

namespace ithbat::sim::lab {

struct LabOptions {
  std::vector<std::string> files;  // scenario files
  bool quick = false;
  std::optional<uint64_t> seed;    // unset: the file's, else a fresh one (printed)
  std::string root;                // parent of the per-scenario run directories ("" = a new temp dir)
  std::string sim_binary;          // ithbat-sim
  std::string ithbat_binary;       // passed to ithbat-sim --ithbat ("" = its default)
  bool json = false;               // one JSON line per scenario on `out`
  std::string world_dir;           // check this finished run directory instead of running (one file)
  bool keep = false;               // keep the run directory of a scenario that passed (a failed one is always kept)
  double magnitude = 1.0;          // fault magnitude for every run (src/scenario/magnitude.h)
  // Non-empty: the sweep — every file at each of these magnitudes; each run records the causes
  // whose signals it showed, and the report ends with the confusion matrix (sweep.h).
  std::vector<double> sweep;
  bool require_diagnosis = false;  // a scenario passes only when the engine's diagnoses match too
  double probe_cost_ns = 0;        // > 0: ithbat-sim --probe-cost-ns (the agents' cost per probe hit)
  double slowdown = 1.0;           // ithbat-sim --slowdown: every world this many times slower than its compression
  // A world this machine could not tell the story of (INVALID) is run once more, slower by what
  // its pace says (kAdaptTargetPace / pace, within [kAdaptMinSlowdown, kAdaptMaxSlowdown]).
  bool adapt = false;
};

// The pace a world run again after an INVALID aims at, and the bounds of its slowdown: a world
// whose demand on the CPUs scales with its time compression (launches, syncs, collectives per real
// second) runs at about its pace × the slowdown; under 1.5 a retry would change too little, past 4
// the demo's worlds take longer than a person waits for them.
inline constexpr double kAdaptTargetPace = 0.8;
inline constexpr double kAdaptMinSlowdown = 1.5;
inline constexpr double kAdaptMaxSlowdown = 4.0;

// What a world's run says, in four words (and two for runs that say nothing about the engine):
//  PASS    the story happened and the engine said what it should, in time;
//  MISSED  the story happened and an expected diagnosis did not come, or came late (or, without
//          --require-diagnosis, the signals proving it were not in the stores);
//  WRONG   the story happened and the engine gave a verdict the story does not support (a
//          diagnosis no expectation matches: on a healthy job, or the wrong cause);
//  INVALID the story did not happen (story_check.h): the engine cannot be judged on this world;
//  SKIP    a cause the lab has no check for; ERROR the world could not run or be read.
enum class Outcome { kPass, kMissed, kWrong, kInvalid, kSkip, kError };
std::string_view OutcomeName(Outcome o);

struct LabResult {
  std::string file;
  std::string scenario;
  uint64_t seed = 0;
  int sim_exit = -1;
  std::string error;               // setup/run/read failure (then check is empty)
  std::optional<ScenarioCheck> check;
  // The diagnosis engine's answer against the expect block (reported; the signal check decides
  // PASS/FAIL unless LabOptions::require_diagnosis).
  std::optional<DiagnosisCheck> diagnosis;
  std::optional<StoryCheck> story;  // did the world tell its story
  bool require_diagnosis = false;
  double slowdown = 1.0;            // how much slower than its compression the world ran
  std::string retried;              // why a first run was INVALID, when this is the adapted rerun
  double wall_seconds = 0;
  std::string run_dir;             // where the run was (removed after a pass unless --keep)
  double magnitude = 1.0;
  std::set<std::string> expected_causes;  // sweep: cause names the file expects ({"none"} for a control)
  std::set<std::string> shown_causes;     // sweep: cause names whose signals the run showed ({"none"}: none)
  Outcome outcome() const;
  bool ok() const { return outcome() == Outcome::kPass; }
  bool skipped() const { return outcome() == Outcome::kSkip; }
};

// Runs every file in turn; progress and the report go to `out`. Returns one result per file.
// In sweep mode (options.sweep) every file runs once per magnitude and the confusion matrix is
// printed at the end.
std::vector<LabResult> RunLab(const LabOptions& options, std::FILE* out);
// The table of every scenario's expected diagnoses → the engine's verdict, cause and time to the
// first verdict (in the budget's unit), and its extra diagnoses (docs/diagnoses.md records it).
std::string FormatDiagnosisTable(const std::vector<LabResult>& results);
// One line per world: its result, what happened in its story, the verdict against the budget, and
// the pace this machine ran it at; then what to do about an INVALID one.
std::string FormatSummary(const std::vector<LabResult>& results);
// The human report of one result (several lines).
std::string FormatResult(const LabResult& r);
// One JSON line: scenario, seed, ok, skipped, each finding with its signals and budget, the
// engine's match; then one line per diagnosis in schema v1 (docs/diagnoses.md).
std::string ResultJson(const LabResult& r);
// Prints every series of the finished run in `world_dir` matching `selector` (node, labels, sample
// count, first and last value): to see what the agents stored when a check fails.
int DumpSeries(const std::string& world_dir, const std::string& selector, std::FILE* out, bool all_samples = false);
// Prints the per-rank step breakdown (detect/breakdown) of every job the agents of the finished
// run in `world_dir` saw, over the job's whole window.
int PrintBreakdowns(const std::string& world_dir, std::FILE* out);

}  // namespace ithbat::sim::lab
