#pragma once
// The pure part of the simulator's runner (ithbat-sim): every decision that does not touch a
// process or a file — time compression and byte scale, NIC slots, rank placement, the TrainSpec
// of a job in REAL units, the environment each launcher style gives its ranks, event times —
// so tests can check them without starting a world (sim/runner/README.md).
//
// Units: the scenario speaks scenario seconds and GiB; everything returned here is REAL (what the
// processes on this machine run with): seconds / c, bytes / byte_scale (design: "Time and scale").
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "scenario/scenario.h"
#include "workload/train_spec.h"

namespace ithbat::sim::runner {

using Resolved = scenario::ResolvedScenario;
using Event = scenario::EventT<scenario::Plain>;
using Env = std::vector<std::pair<std::string, std::string>>;

// One rank's save is at most this many real bytes: checkpoints are real files written through
// ithbat-slowfs (FUSE) by up to 16 ranks at a time, and what that costs the machine must stay
// well under the save time the storage model gives, or the machine, not the model, decides
// what the agents see. Measured on the 2-core VMs: 16 ranks x 32 MiB took 1.1-2.0 s a save
// (quiet, beside a busy loop), as long as case02's modelled slow save at time compression 4
// (1.75-3.75 s) and 4x its healthy one; 16 x 4 MiB costs ~0.15-0.25 s.
inline constexpr double kMaxRealSaveBytesPerRank = 4.0 * 1024 * 1024;
inline constexpr double kGiB = 1024.0 * 1024 * 1024;

// The factor checkpoint and storage bytes are divided by: the smallest power of two that brings
// the largest per-rank save of any job to at most kMaxRealSaveBytesPerRank (1 when none is over).
// A power of two keeps sizes whole and the ratio exact in world.json.
double ChooseByteScale(const Resolved& scenario);

// One NIC of the world, in slot order (node order, then the node's nics[] order): the slot index
// is the position in net.state.
struct NicPlan {
  std::string node;
  size_t node_index = 0;
  std::string name;
  int64_t port = 1;
  uint32_t slot = 0;
  double rate_gbps = 0;  // scenario line rate (gigabits/s)
  std::vector<int64_t> gpus;
  std::string switch_name;
};
std::vector<NicPlan> PlanNics(const Resolved& scenario);
// Slots of one node's NICs, in its nics[] order (NodeWorld::Options::nic_slots).
std::vector<uint32_t> NodeNicSlots(const std::vector<NicPlan>& nics, size_t node_index);
// The slot of the NIC a GPU uses (the scenario's affinity; a GPU no NIC lists uses the node's
// NIC number gpu % count, as NCCL picks the nearest otherwise); -1 when the node has no NIC.
int64_t NicSlotForGpu(const std::vector<NicPlan>& nics, size_t node_index, int64_t gpu);

// Where one rank of a job runs. Ranks are numbered node by node (docs/scenarios.md).
struct RankPlace {
  int64_t rank = 0;
  int64_t local_rank = 0;
  std::string node;
  size_t node_index = 0;  // into scenario.nodes
  size_t job_node = 0;    // index of the node in the job's nodes (SLURM_NODEID, GROUP_RANK)
  int64_t gpu = 0;
  int64_t nic_slot = -1;
};
Result<std::vector<RankPlace>> PlaceRanks(const Resolved& scenario, size_t job,
                                          const std::vector<NicPlan>& nics);

// A per-job seed, derived from the world's (each rank mixes in its rank).
uint64_t JobSeed(uint64_t world_seed, size_t job);
// The numeric Slurm job id a job gets (real SLURM_JOB_ID values are integers); stable per seed.
uint64_t SlurmJobId(uint64_t world_seed, size_t job);

// The job's TrainSpec in REAL units. `unresolved` is the scenario as parsed (after QuickVariant
// when quick), for the recipe fingerprint; `checkpoint_dir` is where the job saves (Storage's
// node path of the mount + /<job>; "" when the job does not checkpoint). Per-rank host-jitter
// bursts: the scenario's world-wide Poisson rate is split evenly over every training rank of
// the world (each burst hits one rank drawn at random).
struct SpecContext {
  double time_compression = 1.0;
  double byte_scale = 1.0;
  uint64_t world_seed = 0;
  std::string checkpoint_dir;
  int64_t world_training_ranks = 0;  // 0 = this job's world size
};
Result<workload::TrainSpec> BuildTrainSpec(const Resolved& scenario, const scenario::Scenario& unresolved,
                                           size_t job, const SpecContext& context);

// The paths and ids a launcher's environment needs.
struct LaunchContext {
  std::filesystem::path lib_dir;     // the fakes (LD_LIBRARY_PATH)
  std::filesystem::path state_path;  // the node's gpu.state
  std::filesystem::path net_path;    // net.state
  std::filesystem::path shm_dir;     // ITHBAT_FAKE_NCCL_SHM_DIR
  std::filesystem::path spec_path;   // jobs/<job>/spec.json
  std::filesystem::path job_dir;     // jobs/<job>
  uint64_t slurm_job_id = 0;
  std::string master_addr;  // first node of the job
  int64_t master_port = 29500;
  double time_compression = 1.0;  // the fakes' intra-node figures are scaled by it (PutPlumbing)
  std::filesystem::path world_root;  // ITHBAT_SIM_WORLD: tags every process of the world
};

// The fakes' own intra-node figures (sim/fake_nccl/fake_nccl.cc, sim/fake_cuda/fake_cuda.cc
// defaults), which the plumbing scales by c so that NVLink collectives and host<->device copies
// take scenario time / c like everything else.
inline constexpr double kFakeNcclNvlinkGbps = 200;      // ITHBAT_FAKE_NCCL_GBPS
inline constexpr double kFakeNcclLatencyNs = 10000;     // ITHBAT_FAKE_NCCL_LATENCY_NS
inline constexpr double kFakeCudaCopyGbps = 25;         // ITHBAT_FAKE_CUDA_COPY_GBPS
inline constexpr double kFakeCudaD2dGbps = 1000;        // ITHBAT_FAKE_CUDA_D2D_GBPS

// What a launcher process is called (argv[0] and comm, as ps shows it): slurmstepd for srun,
// torchrun for torchrun under srun, containerd-shim for a Kubernetes pod.
std::string LauncherProcessName(scenario::Launcher style);
// The name of the process that is PID 1 of a k8s pod's namespace (the container's entrypoint).
inline constexpr const char* kPodInitName = "torchrun";

// Environment of the launcher process of `job` on the job's node `job_node` (added to the
// runner's own): srun's step variables of the node's step daemon, for torchrun the variables
// srun gives the one torchrun task per node (SLURM_PROCID = node index), for k8s the pod's.
Env LauncherEnv(const Resolved& scenario, size_t job, size_t job_node, const LaunchContext& context);
// Environment a rank gets on top of its launcher's (LauncherEnv is inherited, as in real life).
Env RankEnv(const Resolved& scenario, size_t job, const RankPlace& place, const LaunchContext& context);

// An inference server's command line, as vLLM is started: `<vllm_path> serve MODEL --port P
// --max-num-seqs S --tensor-parallel-size T [--no-enable-prefix-caching]
// [--no-enable-chunked-prefill]` (vllm_path is a link named `vllm` to ithbat-sim-serve). The
// agent reads these flags; the server obeys them (sim/workload/SERVE.md).
std::vector<std::string> ServerArgv(const scenario::InferenceT<scenario::Plain>& inference,
                                    const std::string& model, const std::string& vllm_path, int port);
// The server's environment: the plumbing of LaunchContext (spec_path = its ServeSpec) and
// CUDA_VISIBLE_DEVICES = the node's first `gpus` GPUs.
Env ServerEnv(const scenario::InferenceT<scenario::Plain>& inference, size_t node_index,
              const LaunchContext& context);

// Scenario seconds → real seconds.
inline double RealSeconds(double scenario_s, double c) { return c > 0 ? scenario_s / c : scenario_s; }
// The event with every time and latency converted to REAL (at_s, duration_s, ramp_s, fsync_ms),
// as NodeWorld and Storage take them. Rates per second stay per scenario second (they scale
// them themselves).
Event RealEvent(const Event& e, double c);

// The at_s events in the order they fire (by time, ties in file order), as indices into
// scenario.timeline; at_step events are not in it (they wait for their job's progress).
std::vector<size_t> TimedEventOrder(const Resolved& scenario);
// True for kinds whose `effect` reaches the jobs on that GPU.
bool IsGpuFault(scenario::EventKind kind);
// The line a fault effect writes to a rank's inject file ("" for none).
std::string EffectInjectLine(scenario::FaultEffect effect);

}  // namespace ithbat::sim::runner
