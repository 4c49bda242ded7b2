#include "runner/plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <fmt/format.h>

#include "scenario/rng.h"

namespace ithbat::sim::runner {
namespace {

using scenario::EventKind;
using scenario::Launcher;

int64_t WorldSize(const scenario::JobT<scenario::Plain>& job) {
  return static_cast<int64_t>(job.nodes.size()) * job.gpus_per_node;
}

std::string NodeList(const scenario::JobT<scenario::Plain>& job) {
  std::string out;
  for (const auto& n : job.nodes) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

void Put(Env& env, std::string key, std::string value) {
  for (auto& [k, v] : env) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  env.emplace_back(std::move(key), std::move(value));
}

// The simulator's plumbing: what the fakes and the rank program read (never the agent).
void PutPlumbing(Env& env, const LaunchContext& c) {
  Put(env, "LD_LIBRARY_PATH", c.lib_dir.string());
  Put(env, "ITHBAT_FAKE_STATE", c.state_path.string());
  Put(env, "ITHBAT_FAKE_NCCL_SHM_DIR", c.shm_dir.string());
  Put(env, "ITHBAT_SIM_NET", c.net_path.string());
  Put(env, "ITHBAT_SIM_SPEC", c.spec_path.string());
  Put(env, "ITHBAT_SIM_RUN_DIR", c.job_dir.string());
  if (!c.world_root.empty()) Put(env, "ITHBAT_SIM_WORLD", c.world_root.string());
  // Intra-node transfers follow the same time rule as the rest: c times the bandwidth, the
  // latency / c (the fakes read these once at start).
  const double tc = c.time_compression > 0 ? c.time_compression : 1.0;
  Put(env, "ITHBAT_FAKE_NCCL_GBPS", fmt::format("{}", kFakeNcclNvlinkGbps * tc));
  Put(env, "ITHBAT_FAKE_NCCL_LATENCY_NS", fmt::format("{}", kFakeNcclLatencyNs / tc));
  Put(env, "ITHBAT_FAKE_CUDA_COPY_GBPS", fmt::format("{}", kFakeCudaCopyGbps * tc));
  Put(env, "ITHBAT_FAKE_CUDA_D2D_GBPS", fmt::format("{}", kFakeCudaD2dGbps * tc));
}

}  // namespace

double ChooseByteScale(const Resolved& s) {
  double largest = 0;
  for (const auto& job : s.jobs) {
    if (!job.checkpoint || WorldSize(job) <= 0) continue;
    largest = std::max(largest, job.checkpoint->size_gib * kGiB / static_cast<double>(WorldSize(job)));
  }
  double scale = 1;
  while (largest / scale > kMaxRealSaveBytesPerRank && scale < 0x1.0p60) scale *= 2;
  return scale;
}

std::vector<NicPlan> PlanNics(const Resolved& s) {
  std::vector<NicPlan> out;
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    for (const auto& nic : s.nodes[n].nics) {
      NicPlan p;
      p.node = s.nodes[n].name;
      p.node_index = n;
      p.name = nic.name;
      p.port = nic.port;
      p.slot = static_cast<uint32_t>(out.size());
      p.rate_gbps = nic.rate_gbps;
      p.gpus = nic.gpus;
      p.switch_name = nic.switch_name;
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<uint32_t> NodeNicSlots(const std::vector<NicPlan>& nics, size_t node_index) {
  std::vector<uint32_t> out;
  for (const auto& n : nics) {
    if (n.node_index == node_index) out.push_back(n.slot);
  }
  return out;
}

int64_t NicSlotForGpu(const std::vector<NicPlan>& nics, size_t node_index, int64_t gpu) {
  std::vector<const NicPlan*> mine;
  for (const auto& n : nics) {
    if (n.node_index != node_index) continue;
    if (std::find(n.gpus.begin(), n.gpus.end(), gpu) != n.gpus.end()) return n.slot;
    mine.push_back(&n);
  }
  if (mine.empty()) return -1;
  return mine[static_cast<size_t>(std::max<int64_t>(gpu, 0)) % mine.size()]->slot;
}

Result<std::vector<RankPlace>> PlaceRanks(const Resolved& s, size_t job_index,
                                          const std::vector<NicPlan>& nics) {
  if (job_index >= s.jobs.size()) return MakeError(ErrorCode::kInvalidArgument, "job index out of range");
  const auto& job = s.jobs[job_index];
  std::vector<RankPlace> out;
  for (size_t jn = 0; jn < job.nodes.size(); ++jn) {
    size_t node_index = s.nodes.size();
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      if (s.nodes[n].name == job.nodes[jn]) node_index = n;
    }
    if (node_index == s.nodes.size()) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "job {}: unknown node {}", job.id, job.nodes[jn]);
    }
    for (int64_t local = 0; local < job.gpus_per_node; ++local) {
      RankPlace p;
      p.rank = static_cast<int64_t>(jn) * job.gpus_per_node + local;
      p.local_rank = local;
      p.node = job.nodes[jn];
      p.node_index = node_index;
      p.job_node = jn;
      p.gpu = job.gpu_indices.empty() ? local
                                      : job.gpu_indices[static_cast<size_t>(local) % job.gpu_indices.size()];
      if (p.gpu < 0 || p.gpu >= s.nodes[node_index].gpus.count) {
        return MakeErrorF(ErrorCode::kInvalidArgument, "job {}: GPU {} not on node {}", job.id, p.gpu,
                          p.node);
      }
      p.nic_slot = NicSlotForGpu(nics, node_index, p.gpu);
      out.push_back(std::move(p));
    }
  }
  return out;
}

uint64_t JobSeed(uint64_t world_seed, size_t job) {
  return scenario::FieldSeed(world_seed, fmt::format("runner.jobs[{}].seed", job));
}

uint64_t SlurmJobId(uint64_t world_seed, size_t job) {
  // Six- or seven-digit ids like a cluster some months into its life; distinct per job.
  return 1'000'000 + (scenario::FieldSeed(world_seed, "runner.slurm_job_id") % 8'000'000) + job;
}

Result<workload::TrainSpec> BuildTrainSpec(const Resolved& s, const scenario::Scenario& unresolved,
                                           size_t job_index, const SpecContext& ctx) {
  if (job_index >= s.jobs.size()) return MakeError(ErrorCode::kInvalidArgument, "job index out of range");
  const double c = ctx.time_compression > 0 ? ctx.time_compression : 1.0;
  const double b = ctx.byte_scale > 0 ? ctx.byte_scale : 1.0;
  const auto& job = s.jobs[job_index];
  workload::TrainSpec spec;
  spec.job_id = job.id;
  spec.user = job.user;
  spec.recipe_fingerprint = fmt::format("{:016x}", scenario::RecipeFingerprint(unresolved, job_index));
  spec.seed = JobSeed(ctx.world_seed, job_index);
  spec.world_size = WorldSize(job);
  spec.tp = std::max<int64_t>(job.parallel.tp, 1);
  spec.pp = std::max<int64_t>(job.parallel.pp, 1);
  spec.dp = job.parallel.dp > 0 ? job.parallel.dp : spec.world_size / (spec.tp * spec.pp);
  // `steps` is the last step (docs/scenarios.md); a resumed job starts after its checkpoint's step.
  spec.start_step = job.resume_from ? job.resume_from->step : 0;
  spec.steps = std::max<int64_t>(job.steps - spec.start_step, 0);

  spec.log.format = job.log.format;
  spec.log.every_steps = std::max<int64_t>(job.log.every_steps, 1);
  spec.log.ranks = job.log.ranks;
  spec.log.buffered = job.log.buffered;
  spec.log.buffer_bytes = job.log.buffer_bytes;

  spec.work.compute_ms = job.work.compute_ms / c;
  spec.work.seq_len = job.work.seq_len;
  spec.work.sequences_per_step = job.work.sequences_per_step;
  spec.work.packing = job.work.packing;
  spec.work.tensor_share = job.work.tensor_share;
  spec.work.launches_per_step = job.work.launches_per_step;
  spec.work.host_sync_every_steps = job.work.host_sync_every_steps;
  // Device memory is a number in the fake's accounting, never bytes on this machine: not scaled.
  spec.work.memory_bytes = static_cast<uint64_t>(std::max(job.work.memory_gib, 0.0) * kGiB);

  for (const auto& col : job.collectives) {
    workload::TrainCollectiveSpec cs;
    cs.op = col.op;
    cs.bytes = static_cast<uint64_t>(std::max<int64_t>(col.bytes, 0));
    cs.per_step = col.per_step;
    cs.overlap = col.overlap;
    cs.group = col.group;
    spec.collectives.push_back(cs);
  }
  spec.data_loader.workers = job.data_loader.workers;
  spec.data_loader.cpu_ms_per_batch = job.data_loader.cpu_ms_per_batch / c;

  if (job.checkpoint && job.checkpoint->every_steps > 0 && !ctx.checkpoint_dir.empty()) {
    workload::TrainCheckpointSpec cp;
    cp.every_steps = job.checkpoint->every_steps;
    const double per_rank =
        job.checkpoint->size_gib * kGiB / static_cast<double>(std::max<int64_t>(spec.world_size, 1));
    cp.bytes_per_rank = static_cast<uint64_t>(std::llround(per_rank / b));
    cp.dir = ctx.checkpoint_dir;
    cp.async = job.checkpoint->async;
    spec.checkpoint = cp;
  }
  spec.loss.model = job.loss.model;
  // A zero learning rate moves no weight: a loss model of learning (decay, a later drift or
  // explosion, memorising a batch) stays where it started, noise only, as a real run with lr 0
  // prints. A NaN from the data is not learning and stays.
  if (job.lr.schedule == scenario::LrSchedule::kZero && job.loss.model != scenario::LossModel::kNan)
    spec.loss.model = scenario::LossModel::kFlat;
  spec.loss.initial = job.loss.initial;
  spec.loss.final = job.loss.final;
  spec.loss.noise = job.loss.noise;
  spec.loss.drift_start_step = job.loss.drift_start_step;
  spec.loss.explode_step = job.loss.explode_step;
  spec.loss.nan_step = job.loss.nan_step;
  spec.lr.schedule = job.lr.schedule;
  spec.lr.peak = job.lr.peak;
  spec.lr.warmup_steps = job.lr.warmup_steps;
  spec.exit_code = job.exit_code;
  spec.startup_ms = job.startup_s * 1000.0 / c;

  for (const auto& e : s.timeline) {
    if (e.kind == EventKind::kRankHang && e.job == job.id && e.rank >= 0 && e.rank < spec.world_size) {
      spec.hang = workload::TrainHangSpec{e.rank, std::max<int64_t>(e.collective, 0)};
      break;
    }
  }
  if (s.background.enabled && s.background.host_jitter_burst_ms > 0 &&
      s.background.host_jitter_bursts_per_min > 0) {
    const int64_t ranks = ctx.world_training_ranks > 0 ? ctx.world_training_ranks : spec.world_size;
    spec.host_jitter.burst_ms = s.background.host_jitter_burst_ms / c;
    // Per real minute: the scenario's rate is per scenario minute, c of which pass per real one.
    spec.host_jitter.bursts_per_min =
        s.background.host_jitter_bursts_per_min * c / static_cast<double>(std::max<int64_t>(ranks, 1));
  }
  return spec;
}

std::string LauncherProcessName(Launcher style) {
  switch (style) {
    case Launcher::kSrun:
      return "slurmstepd";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kK8s:
      return "containerd-shim";
  }
  return "launcher";
}

Env LauncherEnv(const Resolved& s, size_t job_index, size_t job_node, const LaunchContext& ctx) {
  Env env;
  if (job_index >= s.jobs.size()) return env;
  const auto& job = s.jobs[job_index];
  const std::string node = job_node < job.nodes.size() ? job.nodes[job_node] : std::string();
  PutPlumbing(env, ctx);
  if (job.launcher == Launcher::kK8s) {
    // A PyTorchJob worker pod: the operator's variables, the pod's host name, the API server.
    Put(env, "HOSTNAME", fmt::format("{}-worker-{}", job.id, job_node));
    Put(env, "MASTER_ADDR", fmt::format("{}-master-0", job.id));
    Put(env, "MASTER_PORT", std::to_string(ctx.master_port));
    Put(env, "WORLD_SIZE", std::to_string(WorldSize(job)));
    Put(env, "PET_NNODES", std::to_string(job.nodes.size()));
    Put(env, "PET_NPROC_PER_NODE", std::to_string(job.gpus_per_node));
    Put(env, "PET_NODE_RANK", std::to_string(job_node));
    Put(env, "KUBERNETES_SERVICE_HOST", "10.96.0.1");
    Put(env, "KUBERNETES_SERVICE_PORT", "443");
    Put(env, "PYTHONUNBUFFERED", "0");
    return env;
  }
  // What sbatch + srun leave in every task's environment.
  Put(env, "SLURM_JOB_ID", std::to_string(ctx.slurm_job_id));
  Put(env, "SLURM_JOBID", std::to_string(ctx.slurm_job_id));
  Put(env, "SLURM_JOB_NAME", job.id);
  Put(env, "SLURM_JOB_USER", job.user);
  Put(env, "SLURM_JOB_NODELIST", NodeList(job));
  Put(env, "SLURM_NODELIST", NodeList(job));
  Put(env, "SLURM_JOB_NUM_NODES", std::to_string(job.nodes.size()));
  Put(env, "SLURM_NNODES", std::to_string(job.nodes.size()));
  Put(env, "SLURM_STEP_ID", "0");
  Put(env, "SLURM_STEPID", "0");
  Put(env, "SLURM_NODEID", std::to_string(job_node));
  Put(env, "SLURMD_NODENAME", node);
  Put(env, "SLURM_CLUSTER_NAME", "sim");
  Put(env, "MASTER_ADDR", job.nodes.empty() ? node : job.nodes.front());
  Put(env, "MASTER_PORT", std::to_string(ctx.master_port));
  if (job.launcher == Launcher::kTorchrun) {
    // srun --ntasks-per-node=1 torchrun ...: one task per node.
    Put(env, "SLURM_NTASKS", std::to_string(job.nodes.size()));
    Put(env, "SLURM_NPROCS", std::to_string(job.nodes.size()));
    Put(env, "SLURM_NTASKS_PER_NODE", "1");
    Put(env, "SLURM_PROCID", std::to_string(job_node));
    Put(env, "SLURM_LOCALID", "0");
  } else {
    Put(env, "SLURM_NTASKS", std::to_string(WorldSize(job)));
    Put(env, "SLURM_NPROCS", std::to_string(WorldSize(job)));
    Put(env, "SLURM_NTASKS_PER_NODE", std::to_string(job.gpus_per_node));
  }
  return env;
}

Env RankEnv(const Resolved& s, size_t job_index, const RankPlace& p, const LaunchContext& ctx) {
  Env env;
  if (job_index >= s.jobs.size()) return env;
  const auto& job = s.jobs[job_index];
  const std::string world = std::to_string(WorldSize(job));
  PutPlumbing(env, ctx);
  Put(env, "CUDA_VISIBLE_DEVICES", std::to_string(p.gpu));
  Put(env, "ITHBAT_SIM_NODE_ID", std::to_string(p.node_index));
  if (p.nic_slot >= 0) Put(env, "ITHBAT_SIM_NIC", std::to_string(p.nic_slot));
  Put(env, "RANK", std::to_string(p.rank));
  Put(env, "LOCAL_RANK", std::to_string(p.local_rank));
  Put(env, "WORLD_SIZE", world);
  switch (job.launcher) {
    case Launcher::kSrun:
      Put(env, "SLURM_PROCID", std::to_string(p.rank));
      Put(env, "SLURM_LOCALID", std::to_string(p.local_rank));
      break;
    case Launcher::kTorchrun:
      Put(env, "LOCAL_WORLD_SIZE", std::to_string(job.gpus_per_node));
      Put(env, "GROUP_RANK", std::to_string(p.job_node));
      Put(env, "GROUP_WORLD_SIZE", std::to_string(job.nodes.size()));
      Put(env, "ROLE_RANK", std::to_string(p.rank));
      Put(env, "ROLE_WORLD_SIZE", world);
      Put(env, "ROLE_NAME", "default");
      Put(env, "TORCHELASTIC_RUN_ID", job.id);
      Put(env, "TORCHELASTIC_RESTART_COUNT", "0");
      Put(env, "TORCHELASTIC_MAX_RESTARTS", "0");
      Put(env, "TORCHELASTIC_USE_AGENT_STORE", "True");
      Put(env, "OMP_NUM_THREADS", "1");
      break;
    case Launcher::kK8s:
      Put(env, "LOCAL_WORLD_SIZE", std::to_string(job.gpus_per_node));
      Put(env, "GROUP_RANK", std::to_string(p.job_node));
      break;
  }
  return env;
}

std::vector<std::string> ServerArgv(const scenario::InferenceT<scenario::Plain>& inf,
                                    const std::string& model, const std::string& vllm_path, int port) {
  std::vector<std::string> argv = {vllm_path,
                                   "serve",
                                   model,
                                   "--port",
                                   std::to_string(port),
                                   "--max-num-seqs",
                                   std::to_string(inf.slots),
                                   "--tensor-parallel-size",
                                   std::to_string(inf.tensor_parallel)};
  if (inf.tensor_parallel > 0 && inf.gpus / inf.tensor_parallel > 1) {
    argv.push_back("--data-parallel-size");
    argv.push_back(std::to_string(inf.gpus / inf.tensor_parallel));
  }
  if (!inf.prefix_caching) argv.push_back("--no-enable-prefix-caching");
  if (!inf.chunked_prefill) argv.push_back("--no-enable-chunked-prefill");
  return argv;
}

Env ServerEnv(const scenario::InferenceT<scenario::Plain>& inf, size_t node_index, const LaunchContext& c) {
  Env env;
  PutPlumbing(env, c);
  std::string devices;
  for (int64_t g = 0; g < inf.gpus; ++g) devices += (g ? "," : "") + std::to_string(g);
  Put(env, "CUDA_VISIBLE_DEVICES", devices);
  Put(env, "ITHBAT_SIM_NODE_ID", std::to_string(node_index));
  return env;
}

Event RealEvent(const Event& e, double c) {
  Event r = e;
  if (c <= 0) return r;
  if (r.at_s >= 0) r.at_s = e.at_s / c;
  r.duration_s = e.duration_s / c;
  r.ramp_s = e.ramp_s / c;
  r.fsync_ms = e.fsync_ms / c;
  return r;
}

std::vector<size_t> TimedEventOrder(const Resolved& s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.timeline.size(); ++i) {
    if (s.timeline[i].at_step < 0 && s.timeline[i].at_s >= 0) out.push_back(i);
  }
  std::stable_sort(out.begin(), out.end(),
                   [&](size_t a, size_t b) { return s.timeline[a].at_s < s.timeline[b].at_s; });
  return out;
}

bool IsGpuFault(EventKind kind) {
  switch (kind) {
    case EventKind::kEccUncorrectable:
    case EventKind::kXid:
    case EventKind::kRowRemap:
    case EventKind::kGpuLost:
    case EventKind::kSilentCorruption:
      return true;
    default:
      return false;
  }
}

std::string EffectInjectLine(scenario::FaultEffect effect) {
  switch (effect) {
    case scenario::FaultEffect::kNan:
      return "nan";
    case scenario::FaultEffect::kLossSpike:
      return "loss_spike";
    case scenario::FaultEffect::kCrash:
      return "crash";
    case scenario::FaultEffect::kNone:
      return "";
  }
  return "";
}

}  // namespace ithbat::sim::runner
