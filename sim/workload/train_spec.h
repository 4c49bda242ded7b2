#pragma once
// TrainSpec: everything one training job's rank program (`ithbat-sim-train --spec FILE`,
// sim/workload/train_rank.cc) needs to know, written by the simulator's runner as
// jobs/<job>/spec.json (one per job; every rank of the job reads the same file).
//
// Units: every duration is REAL milliseconds (the runner already divided the scenario's times
// by time_compression), every size is REAL bytes (checkpoint bytes already divided by
// byte_scale; collective bytes are not scaled: the fake NCCL only computes times from them).
// Rates and counts are per rank unless named otherwise.
//
// Contract with the runner (sim/runner, /tmp/sim-design.md "TrainSpec"): fields are only ever
// added, never renamed; ParseTrainSpec fills a missing key with the default written here, so
// an older runner keeps working. Unknown keys are refused (a typo must not silently fall back
// to a default).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "scenario/scenario.h"

namespace ithbat::sim::workload {

// How the job prints its progress (a real framework's exact line formats).
struct TrainLogSpec {
  scenario::LogFormat format = scenario::LogFormat::kHfTrainer;
  int64_t every_steps = 10;                              // one metrics line per this many steps (>= 1)
  scenario::LogRanks ranks = scenario::LogRanks::kRank0;  // who prints: rank 0, or every rank
  bool buffered = true;                                  // stdout fully buffered (a pipe, no flush per line)
  int64_t buffer_bytes = 4096;                           // stdio buffer size when buffered (0 = libc default)
};

// The GPU work of one step, per rank.
struct TrainWorkSpec {
  double compute_ms = 1000.0;          // REAL ms of GPU compute per step at the median sequence length
  scenario::Param<int64_t> seq_len = 2048;  // tokens per sequence; drawn per sequence, per (seed, rank, step)
  int64_t sequences_per_step = 8;      // sequences per rank per step
  bool packing = false;                // packed batches: every rank gets sequences_per_step × median tokens
  double tensor_share = 0.6;           // share of compute time in tensor-core kernels (by kernel name)
  int64_t launches_per_step = 2000;    // kernel launches per step in total (all host threads)
  int64_t host_sync_every_steps = 1;   // a blocking host sync (loss.item()) every this many steps
  uint64_t memory_bytes = 0;           // REAL bytes of device memory the rank allocates at start
};

// One collective the rank issues every step.
struct TrainCollectiveSpec {
  scenario::CollectiveOp op = scenario::CollectiveOp::kAllReduce;
  uint64_t bytes = 0;                  // bytes per call per rank (not scaled)
  int64_t per_step = 1;                // calls per step
  bool overlap = true;                 // issued during backward on the comm stream (else after it)
  scenario::CommGroup group = scenario::CommGroup::kWorld;  // communicator it runs on
};

struct TrainDataLoaderSpec {
  int64_t workers = 4;                 // forked worker processes (0 = batches made on the main thread)
  double cpu_ms_per_batch = 20.0;      // REAL ms of CPU a worker burns per batch (one batch per step)
};

struct TrainCheckpointSpec {
  int64_t every_steps = 0;             // save after every this many steps (0 = never)
  uint64_t bytes_per_rank = 0;         // REAL bytes each rank writes per save
  std::string dir;                     // where this job saves: <node's path of the mount>/<job>
  bool async = false;                  // a thread writes while training continues (else training stops)
};

struct TrainLossSpec {
  scenario::LossModel model = scenario::LossModel::kDecay;
  double initial = 10.0;
  double final = 2.0;
  double noise = 0.02;                 // relative step-to-step noise (standard deviation)
  int64_t drift_start_step = 0;        // drift_explode: loss starts rising here
  int64_t explode_step = 0;            // drift_explode: loss explodes here, NaN a few steps after
  int64_t nan_step = 0;                // nan: loss is NaN from this step on
};

struct TrainLrSpec {
  scenario::LrSchedule schedule = scenario::LrSchedule::kCosine;
  double peak = 3e-4;
  int64_t warmup_steps = 100;          // linear warm-up from 0 to peak
};

// A rank that stops calling NCCL before one collective (a rank_hang event known in advance;
// the runner can also deliver it at run time through the .inject file).
struct TrainHangSpec {
  int64_t rank = 0;                    // global rank that hangs
  int64_t collective = 0;              // stop before this collective: the count of collective
                                       // operations the rank issued before it (0-based; every
                                       // op of `collectives` and each checkpoint barrier counts
                                       // one, whatever its group; rank<R>.progress shows it)
};

// Bursts that stall the rank's host threads (a noisy neighbour on the CPU).
struct TrainHostJitterSpec {
  double burst_ms = 0;                 // REAL ms each burst stalls the host threads (0 = off)
  double bursts_per_min = 0;           // Poisson rate per rank, per REAL minute
};

struct TrainSpec {
  std::string job_id;                  // scenario job id ([A-Za-z0-9._-])
  std::string user = "user";
  std::string recipe_fingerprint;      // hex; printed in the log header as the config hash
  uint64_t seed = 0;                   // the job's seed; each rank mixes in its rank
  int64_t world_size = 1;              // number of ranks
  int64_t tp = 1;                      // tensor-parallel size
  int64_t pp = 1;                      // pipeline-parallel size
  int64_t dp = 1;                      // data-parallel size; world_size == tp * pp * dp
  int64_t steps = 1000;                // steps to run in this launch
  int64_t start_step = 0;              // first step number (resume from a checkpoint; 0 = fresh)
  TrainLogSpec log;
  TrainWorkSpec work;
  std::vector<TrainCollectiveSpec> collectives;
  TrainDataLoaderSpec data_loader;
  std::optional<TrainCheckpointSpec> checkpoint;
  TrainLossSpec loss;
  TrainLrSpec lr;
  int64_t exit_code = 0;               // process exit status after the last step
  // REAL ms between holding the GPU (context and model memory: NVML lists the process) and
  // making the first NCCL communicator: model build and weight loading.
  double startup_ms = 0;
  std::optional<TrainHangSpec> hang;
  TrainHostJitterSpec host_jitter;
  // PyTorch's NCCL watchdog (TORCH_NCCL timeout, 600 000 ms by default in PyTorch, so 600000 / c
  // here): a collective not complete after this many REAL ms makes the rank print the
  // ProcessGroupNCCL "Watchdog caught collective operation timeout" lines and abort (SIGABRT).
  // 0 = no watchdog (the rank waits forever).
  double nccl_timeout_ms = 0;
};

// Limits ParseTrainSpec enforces (bounded input).
inline constexpr size_t kMaxSpecBytes = 1 << 20;
inline constexpr int64_t kMaxWorldSize = 4096;
inline constexpr size_t kMaxCollectives = 64;

// Parses and validates a spec (JSON object, keys as the field names above, nested objects for
// the sub-structs, enums by their scenario file names, seq_len as the scenario JSON writes a
// Param: {"dist":"fixed","value":N} / uniform min,max / normal mean,stddev,min,max / lognormal
// median,sigma,min,max / choice values[,weights], or a plain number). Never throws; kParse for
// malformed JSON, kInvalidArgument for a value out of range or inconsistent (tp*pp*dp !=
// world_size, a hang rank outside the world).
Result<TrainSpec> ParseTrainSpec(std::string_view json);
Result<TrainSpec> ReadTrainSpecFile(const std::string& path);
// The spec as JSON (one object, pretty-printed); ParseTrainSpec(TrainSpecToJson(s)) == s.
std::string TrainSpecToJson(const TrainSpec& spec);

bool operator==(const TrainSpec& a, const TrainSpec& b);

}  // namespace ithbat::sim::workload
