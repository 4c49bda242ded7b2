#pragma once
// The `expect` block of a scenario file: what the diagnosis must conclude. Only the lab's
// checker calls ParseExpectations; the simulator takes a Scenario (scenario/scenario.h), which
// has no trace of this block, so nothing the simulator does can depend on the answer.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "scenario/scenario.h"

namespace ithbat::scenario {

enum class Verdict { kJob, kInfrastructure, kInconclusive, kNone };
// The closed set of causes (issue 7; docs/diagnoses.md once it exists).
enum class Cause {
  kNone,
  kDataImbalance,
  kInputPipeline,
  kHostBottleneck,
  kCheckpointStrategy,
  kServingConfig,
  kOverProvisioned,
  kUnderProvisioned,
  kRecipeNumerics,
  kNoLearning,
  kOutOfMemory,
  kHang,
  kStorage,
  kNetwork,
  kGpuHardware,
  kThermalPower,
  kNvlink,
  kDriver,
  kSilentDataCorruption,
  kScheduler,
};
enum class BudgetUnit { kSteps, kSaves, kSeconds };
// Where the budget starts counting (`from:` in a budget; docs/scenarios.md).
enum class BudgetFrom {
  kDefault,  // not written, no scenario to resolve it against: first timeline event if any, else start
  kStart,    // the start of the scenario (the subject job's first step for steps and saves)
  kEvent,    // timeline event `budget_from_event` (written as its index or its id)
  kStep,     // step `budget_from_step` of the subject job
};

// The time allowed to reach a verdict: `{steps|saves|seconds: N, from: ...}`.
struct ExpectedBudget {
  std::optional<BudgetUnit> unit;       // unset: no budget written
  double value = 0;                     // the verdict within this many `unit`
  BudgetFrom from = BudgetFrom::kDefault;  // resolved when a scenario is given
  int64_t from_event = -1;              // index into timeline (kEvent)
  int64_t from_step = -1;               // kStep: a step of the job the budget counts in
};

// How a provisional finding becomes final: the rerun `job` (a job with rerun_of the
// finding's subject job) reproduces the problem, within `budget` counted in that job.
struct ExpectedConfirmation {
  std::string job;
  ExpectedBudget budget;
};

struct ExpectedGpu {
  std::string node;
  int64_t index = 0;
};

struct ExpectedFinding {
  Verdict verdict = Verdict::kNone;
  Cause cause = Cause::kNone;
  bool provisional = false;             // e.g. recipe suspected before the rerun
  std::string job;
  std::vector<std::string> nodes;
  std::vector<int64_t> ranks;
  std::vector<ExpectedGpu> gpus;
  std::string resource;                 // a mount, NIC (NODE/NIC), switch, or other job
  ExpectedBudget budget;                // to the first (possibly provisional) verdict
  std::optional<ExpectedConfirmation> confirm;  // only with provisional: true
  int line = 0;                         // where the finding starts in the file
};

struct Expectations {
  // Empty with `verdict: none` written: nothing may be diagnosed (controls).
  std::vector<ExpectedFinding> findings;
  bool expects_nothing = false;
};

struct ParsedExpectations {
  std::optional<Expectations> expectations;
  std::vector<Issue> issues;
  bool present = false;  // the file has an `expect` key (issues then concern the block itself)
};

// Reads only the `expect` key of a scenario file. With `scenario` given, the subjects are
// checked against it (jobs, nodes, ranks < the job's rank count, GPU indices, a resource that
// is a mount, switch, NODE/NIC, job, server or tenant of the scenario; `ranks` and a budget
// `from: step:N` need `job`), and a budget without `from` is resolved to the first timeline
// event if there is one, else the start. A file without an
// `expect` block is an issue: every lab scenario states its answer.
ParsedExpectations ParseExpectationsText(std::string_view text, const Scenario* scenario = nullptr);

std::string_view VerdictName(Verdict v);
std::string_view CauseName(Cause c);
std::span<const std::string_view> CauseNames();

}  // namespace ithbat::scenario
