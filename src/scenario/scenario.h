#pragma once
// The scenario format, v1 (docs/scenarios.md): what the fleet simulator (issue 6) runs — nodes,
// GPUs, jobs, inference servers, storage, fabric, a timeline of faults, background mess, other
// tenants. A file is YAML; ParseScenario turns it into a `Scenario` whose numeric parameters may
// still be ranges; Resolve draws every range from a seed into a `ResolvedScenario` of plain
// values, which is what the simulator consumes.
//
// The `expect` block of a file (the verdicts the diagnosis must reach) is deliberately NOT part
// of `Scenario`: simulator code that takes a Scenario or ResolvedScenario cannot see it, so the
// simulator cannot bend the world toward the answer. Only the lab's checker reads it, through
// the separate entry point ParseExpectationsText (scenario/expect/expect.h, library
// ithbat_scenario_expect, which simulator code does not link).
//
// Every struct is a template over how a number is held: `Param` (value or range, as written)
// for Scenario, `Plain` (the drawn value) for ResolvedScenario, so both views have exactly the
// same fields. Units are in the key names (`_s`, `_ms`, `_gbps`, `_gib`, `_w`).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::scenario {

inline constexpr int kFormatVersion = 1;

// ---- numbers that may be ranges ----------------------------------------------------------

enum class Dist { kFixed, kUniform, kNormal, kLognormal, kChoice };

// A numeric parameter as written: `5`, `[min, max]` (uniform), or
// `{dist: uniform|normal|lognormal|choice, ...}`. Every distribution is bounded (normal and
// lognormal need `min`/`max`; draws outside are clamped), so validation can check the whole
// range against the field's limits and against other fields before anything is drawn.
// Integer fields (T integral) round draws to the nearest integer.
template <class T>
struct Param {
  Dist dist = Dist::kFixed;
  double value = 0;    // kFixed
  double min = 0;      // kUniform, kNormal, kLognormal (clamp)
  double max = 0;
  double mean = 0;     // kNormal
  double stddev = 0;   // kNormal
  double median = 0;   // kLognormal: exp(mu)
  double sigma = 0;    // kLognormal: standard deviation of log(x)
  std::vector<double> choices;  // kChoice
  std::vector<double> weights;  // kChoice, optional (empty = equal)

  Param() = default;
  Param(T v) : value(static_cast<double>(v)) {}  // NOLINT: a default is written as a value

  // The smallest and largest value a draw can take.
  double Lower() const;
  double Upper() const;
  bool IsFixed() const { return dist == Dist::kFixed; }
};

template <class T>
using Plain = T;

// ---- closed sets (names as written in files; docs/scenarios.md) ----------------------------

enum class GpuModel { kH100Sxm, kH200Sxm };
enum class Launcher { kSrun, kTorchrun, kK8s };
enum class LogFormat { kHfTrainer, kMegatron, kTorchtitan, kNanogpt };
enum class LogRanks { kRank0, kAll };
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSendRecv };
// The ranks a collective spans (JobT::parallel): all of them, or the job's tensor-, pipeline- or
// data-parallel groups.
enum class CommGroup { kWorld, kTp, kPp, kDp };
enum class LossModel { kDecay, kDriftExplode, kFlat, kNan, kRepeatedBatch };
enum class LrSchedule { kConstant, kCosine, kLinear, kZero };
enum class Engine { kContinuous, kNaive };
enum class MetricsStyle { kVllmV0, kVllmV1 };
enum class MountKind { kLocalNvme, kSharedNfs };
enum class SwitchTier { kLeaf, kSpine };
enum class TenantKind { kTraining, kIo, kInference };
enum class EventKind {
  kThermalThrottle,   // node, gpu; clock_factor, duration_s
  kPowerCap,          // node, gpu; power_limit_w, duration_s
  kEccUncorrectable,  // node, gpu; xid (default 48)
  kEccCorrected,      // node, gpu; count
  kXid,               // node, gpu; xid
  kRowRemap,          // node, gpu; count, failure
  kNvlinkErrors,      // node, gpu; link, count
  kIbLinkDegrade,     // node, nic; bandwidth_factor, symbol_errors_per_s, duration_s
  kIbLinkDown,        // node, nic; duration_s
  kIbCongestion,      // node, nic; bandwidth_factor, other_job, duration_s (port_xmit_wait rises)
  kStorageSlowdown,   // mount; bandwidth_factor, fsync_ms, duration_s
  kHostCpuContention, // node; cpu_share, duration_s
  kRankHang,          // job, rank, collective
  kGpuLost,           // node, gpu (Xid 79)
  kSilentCorruption,  // node, gpu, effect; wrong values, every counter clean
};
// What a hardware fault does to the jobs computing on that GPU from the event on (the
// cause -> effect tie: a NaN after an uncorrectable ECC error, a loss spike from silent
// corruption). `none`: only the counters and logs of the fault itself.
enum class FaultEffect { kNone, kNan, kLossSpike, kCrash };

// The name of a closed-set value as written in files, and all names of a set (for errors and
// docs). Templates specialised in scenario.cc for every enum above.
template <class E>
std::string_view EnumName(E e);
template <class E>
std::span<const std::string_view> EnumNames();

// Real limits of a GPU model (table in docs/scenarios.md; the fake NVML uses the same figures).
struct GpuModelSpec {
  GpuModel model;
  std::string_view name;          // as NVML reports it
  uint64_t memory_bytes;
  int max_sm_clock_mhz;
  int memory_clock_mhz;
  int power_limit_w;              // default = max enforced limit (SXM: 700 W)
  int min_power_limit_w;
  int idle_power_w;
  int nvlink_links;
  double nvlink_gbytes_per_link;  // GB/s per direction
};
const GpuModelSpec& ModelSpec(GpuModel model);

// ---- the scenario -------------------------------------------------------------------------

template <template <class> class P>
struct GpusT {
  int64_t count = 8;
  GpuModel model = GpuModel::kH100Sxm;
};

template <template <class> class P>
struct NicT {
  std::string name;              // e.g. mlx5_0
  int64_t port = 1;
  P<double> rate_gbps = 400.0;
  std::vector<int64_t> gpus;     // GPU indices that use this NIC (GPU↔NIC affinity)
  std::string switch_name;       // fabric.switches[].name, optional ("switch" in files)
};

template <template <class> class P>
struct NodeT {
  std::string name;
  GpusT<P> gpus;
  std::vector<NicT<P>> nics;
  int64_t cpus = 64;
  P<double> clock_skew_ms = 0.0;          // the node's agent clock offset
  P<double> clock_drift_ppm = 0.0;
};

template <template <class> class P>
struct LogT {
  LogFormat format = LogFormat::kHfTrainer;
  int64_t every_steps = 10;
  LogRanks ranks = LogRanks::kRank0;
  bool buffered = true;
  int64_t buffer_bytes = 4096;
};

template <template <class> class P>
struct WorkT {
  P<double> compute_ms = 1000.0;        // per step at the median sequence length
  Param<int64_t> seq_len = 2048;        // tokens per sequence; sampled per sequence by the simulator
  int64_t sequences_per_step = 8;       // per rank
  bool packing = false;                 // packed batches: every rank gets the same tokens
  P<double> tensor_share = 0.6;         // share of compute time on tensor cores
  int64_t launches_per_step = 2000;
  P<double> memory_gib = 40.0;          // GPU memory each rank holds; above the GPU's = OOM
  int64_t host_sync_every_steps = 1;
};

template <template <class> class P>
struct CollectiveT {
  CollectiveOp op = CollectiveOp::kAllReduce;
  P<int64_t> bytes = 0;
  int64_t per_step = 1;
  bool overlap = true;                  // overlaps the backward compute
  CommGroup group = CommGroup::kWorld;  // one communicator per group of this kind
};

// How the ranks of a job are split. Rank order (Megatron-LM's default): tensor-parallel index
// fastest, then data-parallel, then pipeline stage: rank = (pp_i * dp + dp_i) * tp + tp_i.
template <template <class> class P>
struct ParallelT {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 0;                       // 0 = ranks / (tp * pp); if written, must equal it
};

template <template <class> class P>
struct DataLoaderT {
  int64_t workers = 4;
  P<double> cpu_ms_per_batch = 20.0;
};

template <template <class> class P>
struct CheckpointT {
  int64_t every_steps = 0;
  P<double> size_gib = 10.0;
  std::string mount;                    // storage.mounts[].name
  bool async = false;
};

template <template <class> class P>
struct LossT {
  LossModel model = LossModel::kDecay;
  P<double> initial = 10.0;
  P<double> final = 2.0;
  P<double> noise = 0.02;               // relative step-to-step noise
  P<int64_t> drift_start_step = 0;      // drift_explode
  P<int64_t> explode_step = 0;          // drift_explode
  P<int64_t> nan_step = 0;              // nan
};

template <template <class> class P>
struct LrT {
  LrSchedule schedule = LrSchedule::kCosine;
  P<double> peak = 3e-4;
  int64_t warmup_steps = 100;
};

template <template <class> class P>
struct ResumeT {
  std::string job;                      // jobs[].id whose checkpoint is loaded
  int64_t step = 0;                     // a step at which that job saved
};

template <template <class> class P>
struct RerunT {
  std::string job;                      // jobs[].id this job reruns: recipe fields not written are inherited
  bool disjoint_gpus = true;            // must not share a GPU with the original
};

template <template <class> class P>
struct JobT {
  std::string id;
  std::string user = "user";
  Launcher launcher = Launcher::kSrun;
  std::vector<std::string> nodes;
  int64_t gpus_per_node = 8;
  std::vector<int64_t> gpu_indices;     // empty = 0 .. gpus_per_node-1
  P<double> start_s = 0.0;
  // Another job this one starts after: not before that job has ended, whatever start_s says (a
  // rerun that confirms a failed run follows it). "" = none. On a machine slower than the world's
  // pace this keeps the script's order, where start_s alone would run the two side by side.
  std::string after;
  // From launch to the first collective: model build and weight loading. The processes hold
  // their GPUs (NVML lists them) but have not made their NCCL communicators yet.
  P<double> startup_s = 10.0;
  P<int64_t> steps = 1000;
  LogT<P> log;
  WorkT<P> work;
  ParallelT<P> parallel;
  std::vector<CollectiveT<P>> collectives;
  DataLoaderT<P> data_loader;
  std::optional<CheckpointT<P>> checkpoint;
  LossT<P> loss;
  LrT<P> lr;
  int64_t exit_code = 0;
  std::optional<ResumeT<P>> resume_from;
  std::optional<RerunT<P>> rerun_of;
};

template <template <class> class P>
struct InferenceT {
  std::string id;
  std::string node;
  int64_t gpus = 8;
  int64_t tensor_parallel = 1;          // replicas = gpus / tensor_parallel
  Engine engine = Engine::kContinuous;
  int64_t slots = 32;                   // max concurrent sequences per replica
  bool chunked_prefill = true;
  bool prefix_caching = true;
  P<int64_t> kv_capacity_tokens = 500000;
  P<double> arrival_rate_rps = 5.0;
  Param<int64_t> prompt_tokens = 1000;  // sampled per request
  Param<int64_t> output_tokens = 300;   // sampled per request
  P<double> shared_prefix_share = 0.0;  // share of the prompt common to requests
  P<double> model_gib = 16.0;           // weights of one replica (split over tensor_parallel GPUs)
  P<double> slo_ttft_ms = 2000.0;       // the service level: time to first token, p95
  P<double> slo_tpot_ms = 100.0;        // time per output token, p95
  MetricsStyle metrics = MetricsStyle::kVllmV1;
  int64_t port = 8000;
};

template <template <class> class P>
struct MountT {
  std::string name;
  std::string path;
  MountKind kind = MountKind::kSharedNfs;
  std::vector<std::string> nodes;       // nodes that mount it (local_nvme: one device per node)
  P<double> write_gbps = 2.0;           // GB/s
  P<double> read_gbps = 4.0;
  P<double> fsync_ms = 5.0;
};

template <template <class> class P>
struct SwitchT {
  std::string name;
  SwitchTier tier = SwitchTier::kLeaf;
};

template <template <class> class P>
struct LinkT {
  std::string a;                        // a switch name or NODE/NIC
  std::string b;
  P<double> rate_gbps = 400.0;
};

template <template <class> class P>
struct FabricT {
  std::vector<SwitchT<P>> switches;
  std::vector<LinkT<P>> links;
};

template <template <class> class P>
struct EventT {
  std::string id;                       // optional; `expect` budgets may count from it
  EventKind kind = EventKind::kXid;
  P<double> at_s = -1.0;                // one of at_s or at_step (with job)
  P<int64_t> at_step = -1;
  std::string job;
  std::string node;
  int64_t gpu = -1;
  std::string nic;
  std::string mount;
  int64_t rank = -1;
  int64_t collective = -1;              // rank_hang: the collective's sequence number
  int64_t link = 0;                     // nvlink_errors
  int64_t xid = 0;                      // not written: 48 for ecc_uncorrectable, 79 for gpu_lost
  int64_t count = 1;
  bool failure = false;                 // row_remap: remap failed
  P<double> duration_s = 0.0;           // 0 = until the end
  P<double> ramp_s = 0.0;               // ib_link_degrade, storage_slowdown: reach the factor linearly over this
  P<double> clock_factor = 0.7;
  P<double> power_limit_w = 500.0;
  P<double> bandwidth_factor = 0.3;
  P<double> fsync_ms = 2000.0;
  P<double> cpu_share = 0.5;
  P<double> symbol_errors_per_s = 0.0;
  std::string other_job;                // ib_congestion: the tenant causing it
  FaultEffect effect = FaultEffect::kNone;  // GPU faults: what the job sees
};

template <template <class> class P>
struct BackgroundT {
  bool enabled = true;
  bool power_capping = true;
  P<double> clock_spread_pct = 3.0;
  P<double> corrected_ecc_per_hour = 2.0;
  P<double> ib_symbol_errors_per_hour = 5.0;
  bool old_row_remap = true;
  int64_t earlier_xid = 13;             // 0 = none
  P<double> seq_len_jitter = 0.1;
  int64_t host_jitter_processes = 16;
  P<double> host_jitter_burst_ms = 0.0;        // 0 = steady; else bursts that stall one rank's host threads
  P<double> host_jitter_bursts_per_min = 2.0;  // Poisson rate of bursts; each hits one rank drawn at random
};

template <template <class> class P>
struct TenantT {
  std::string id;
  TenantKind kind = TenantKind::kIo;
  std::string mount;
  std::vector<std::string> nodes;
  std::string switch_name;
  P<double> write_gbps = 0.0;
  P<double> traffic_gbps = 0.0;
  P<double> start_s = 0.0;
  P<double> end_s = -1.0;               // -1 = until the end
};

// The smaller CI configuration (`ithbat demo --quick`): values that replace the top-level ones
// when the lab runs the file quick. 0 = unchanged.
template <template <class> class P>
struct QuickT {
  P<double> time_compression = 0.0;
  P<double> duration_s = 0.0;
};

template <template <class> class P>
struct ScenarioT {
  int64_t version = 0;
  std::string name;
  std::string description;
  std::optional<uint64_t> seed;
  P<double> time_compression = 1.0;
  P<double> duration_s = 600.0;
  std::vector<NodeT<P>> nodes;
  std::vector<JobT<P>> jobs;
  std::vector<InferenceT<P>> inference;
  std::vector<MountT<P>> mounts;        // "storage: {mounts: [...]}" in files
  FabricT<P> fabric;
  std::vector<EventT<P>> timeline;
  BackgroundT<P> background;
  std::vector<TenantT<P>> tenants;
  QuickT<P> quick;
};

struct Scenario : ScenarioT<Param> {
  // Field path → 1-based line:column where it was written, so later checks (the lab, the
  // simulator) can point at the file.
  std::map<std::string, std::pair<int, int>> marks;
};
using ResolvedScenario = ScenarioT<Plain>;

// ---- parsing and validation ----------------------------------------------------------------

// Every name in a file (nodes, NICs, jobs, users, servers, tenants, mounts, switches, events,
// the scenario) becomes part of file paths, process names and metric labels in the simulator,
// so it is [A-Za-z0-9._-]{1,64} and not "." or "..".
inline constexpr size_t kMaxNameBytes = 64;
bool IsValidName(std::string_view name);
// A mount path is absolute and normalised (no empty, "." or ".." component, no trailing '/'),
// at most kMaxPathBytes of [A-Za-z0-9._-/]. The simulator maps it under its own root directory,
// never onto the host's. Returns the problem, or "" when the path is fine.
inline constexpr size_t kMaxPathBytes = 1024;
std::string PathProblem(std::string_view path);

// One problem in a file. path is the field path (`jobs[1].checkpoint.mount`), line/column are
// 1-based (0 when the problem is not tied to a place, e.g. the file is too big).
struct Issue {
  std::string path;
  int line = 0;
  int column = 0;
  std::string message;
  std::string ToString(std::string_view source = "") const;  // "src:line:col: path: message"
};

// Input bounds (hostile files must fail cleanly, not exhaust memory or the stack).
inline constexpr size_t kMaxFileBytes = 1 << 20;
inline constexpr int kMaxDepth = 24;
inline constexpr size_t kMaxYamlNodes = 200000;

struct ParsedScenario {
  std::optional<Scenario> scenario;     // set when issues is empty
  std::vector<Issue> issues;            // every problem found, in file order
};

// Parses and validates a whole file. Never throws; all problems at once. YAML anchors and
// aliases are refused (alias bombs), as are files over kMaxFileBytes or deeper than kMaxDepth.
ParsedScenario ParseScenarioText(std::string_view text);
ParsedScenario ParseScenarioFile(const std::string& path);
// The same as a Result: the error message lists every issue, one per line.
Result<Scenario> ParseScenario(std::string_view text, std::string_view source = "<scenario>");

// Draws every range with `seed`: the same seed gives the same values, whatever fields are
// added to the format later (each field draws from its own stream, seeded from
// SplitMix64(seed ^ FNV-1a-64(field path))). Fails only when drawn values break a rule that
// ranges could not be checked for statically.
Result<ResolvedScenario> Resolve(const Scenario& scenario, uint64_t seed);
// A hash of a job's recipe as written (work, collectives, data loader, loss, lr, log format;
// not its nodes, times, checkpoint target or exit): two jobs with the same fingerprint run the
// same code on the same data. A rerun_of job that overrides nothing has its original's
// fingerprint. The simulator hands it to the workload (a config hash, as real launchers
// log), never to the agent by a side channel. 0 for an index out of range.
uint64_t RecipeFingerprint(const Scenario& scenario, size_t job);
// The file as `--quick` runs it: quick.* written values replace the top-level ones (validation
// already checked that every at_s event and job start fits in the quick duration).
Scenario QuickVariant(const Scenario& scenario);
// A fresh seed for a run that has none (the lab prints it so the run can be repeated).
uint64_t DrawSeed();

// The resolved values as JSON (one object, keys as in files).
std::string ResolvedToJson(const ResolvedScenario& resolved);

}  // namespace ithbat::scenario
