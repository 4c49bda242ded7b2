#pragma once
// Internal to src/scenario: the one list of every field of format v1 — key as written, where it
// lives in the structs, and its limits. The parser, the resolver and the JSON writer all walk
// this list (a visitor gets the field of view A and of view B), so a field added here is
// parsed, validated, drawn and printed without touching anything else. Keep docs/scenarios.md
// in step with it.
#include <limits>

#include "scenario/scenario.h"

namespace ithbat::scenario::internal {

// Allowed values of a number (whole range of a distribution included) and whether the key
// must be written.
struct Lim {
  double lo = 0;
  double hi = std::numeric_limits<double>::max();
  bool required = false;
};
inline constexpr double kBig = 1e15;
inline constexpr Lim kRequired{0, kBig, true};
inline constexpr Lim kPositive{1e-9, kBig};
inline constexpr Lim kNonNeg{0, kBig};
inline constexpr Lim kShare{0, 1};
// One save of a whole job (docs/scenarios.md): the largest optimizer states of today's models;
// the simulator writes real bytes and may scale them down, the cap keeps a typo from asking
// for petabytes.
inline constexpr double kMaxCheckpointGib = 4096;

// List caps (bounded input).
inline constexpr size_t kMaxNodes = 256;
inline constexpr size_t kMaxJobs = 64;
inline constexpr size_t kMaxEvents = 4096;
inline constexpr size_t kMaxSmall = 64;

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, GpusT<A>& a, GpusT<B>& b) {
  v.Int("count", a.count, b.count, {1, 16, true});
  v.Enum("model", a.model, b.model);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, NicT<A>& a, NicT<B>& b) {
  v.Name("name", a.name, b.name, true);
  v.Int("port", a.port, b.port, {1, 8});
  v.Num("rate_gbps", a.rate_gbps, b.rate_gbps, {1, 3200});
  v.Ints("gpus", a.gpus, b.gpus, {0, 15});
  v.Name("switch", a.switch_name, b.switch_name, false);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, NodeT<A>& a, NodeT<B>& b) {
  v.Name("name", a.name, b.name, true);
  v.Obj("gpus", a.gpus, b.gpus, true);
  v.List("nics", a.nics, b.nics, 16);
  v.Int("cpus", a.cpus, b.cpus, {1, 1024});
  v.Num("clock_skew_ms", a.clock_skew_ms, b.clock_skew_ms, {-3.6e6, 3.6e6});
  v.Num("clock_drift_ppm", a.clock_drift_ppm, b.clock_drift_ppm, {-1e4, 1e4});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, LogT<A>& a, LogT<B>& b) {
  v.Enum("format", a.format, b.format);
  v.Int("every_steps", a.every_steps, b.every_steps, {1, 1e6});
  v.Enum("ranks", a.ranks, b.ranks);
  v.Bool("buffered", a.buffered, b.buffered);
  v.Int("buffer_bytes", a.buffer_bytes, b.buffer_bytes, {0, 1 << 20});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, WorkT<A>& a, WorkT<B>& b) {
  v.Num("compute_ms", a.compute_ms, b.compute_ms, {0.01, 3.6e6});
  v.Sampled("seq_len", a.seq_len, b.seq_len, {1, 1 << 24});
  v.Int("sequences_per_step", a.sequences_per_step, b.sequences_per_step, {1, 1 << 20});
  v.Bool("packing", a.packing, b.packing);
  v.Num("tensor_share", a.tensor_share, b.tensor_share, kShare);
  v.Int("launches_per_step", a.launches_per_step, b.launches_per_step, {1, 1e7});
  v.Int("host_sync_every_steps", a.host_sync_every_steps, b.host_sync_every_steps, {1, 1e6});
  v.Num("memory_gib", a.memory_gib, b.memory_gib, {0, 1024});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, ParallelT<A>& a, ParallelT<B>& b) {
  v.Int("tp", a.tp, b.tp, {1, 1024});
  v.Int("pp", a.pp, b.pp, {1, 1024});
  v.Int("dp", a.dp, b.dp, {1, 1 << 20});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, CollectiveT<A>& a, CollectiveT<B>& b) {
  v.Enum("op", a.op, b.op);
  v.Num("bytes", a.bytes, b.bytes, {1, 1e13, true});
  v.Int("per_step", a.per_step, b.per_step, {1, 1e5});
  v.Bool("overlap", a.overlap, b.overlap);
  v.Enum("group", a.group, b.group);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, DataLoaderT<A>& a, DataLoaderT<B>& b) {
  v.Int("workers", a.workers, b.workers, {0, 256});
  v.Num("cpu_ms_per_batch", a.cpu_ms_per_batch, b.cpu_ms_per_batch, {0, 3.6e6});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, CheckpointT<A>& a, CheckpointT<B>& b) {
  v.Int("every_steps", a.every_steps, b.every_steps, {1, 1e9, true});
  v.Num("size_gib", a.size_gib, b.size_gib, {1e-6, kMaxCheckpointGib});
  v.Name("mount", a.mount, b.mount, true);
  v.Bool("async", a.async, b.async);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, LossT<A>& a, LossT<B>& b) {
  v.Enum("model", a.model, b.model);
  v.Num("initial", a.initial, b.initial, {1e-6, 1e6});
  v.Num("final", a.final, b.final, {0, 1e6});
  v.Num("noise", a.noise, b.noise, {0, 10});
  v.Num("drift_start_step", a.drift_start_step, b.drift_start_step, kNonNeg);
  v.Num("explode_step", a.explode_step, b.explode_step, kNonNeg);
  v.Num("nan_step", a.nan_step, b.nan_step, kNonNeg);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, LrT<A>& a, LrT<B>& b) {
  v.Enum("schedule", a.schedule, b.schedule);
  v.Num("peak", a.peak, b.peak, {0, 100});
  v.Int("warmup_steps", a.warmup_steps, b.warmup_steps, {0, 1e9});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, ResumeT<A>& a, ResumeT<B>& b) {
  v.Name("job", a.job, b.job, true);
  v.Int("step", a.step, b.step, {1, 1e12, true});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, RerunT<A>& a, RerunT<B>& b) {
  v.Name("job", a.job, b.job, true);
  v.Bool("disjoint_gpus", a.disjoint_gpus, b.disjoint_gpus);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, JobT<A>& a, JobT<B>& b) {
  v.Name("id", a.id, b.id, true);
  v.Name("user", a.user, b.user, false);
  v.Enum("launcher", a.launcher, b.launcher);
  v.Names("nodes", a.nodes, b.nodes, true);
  v.Int("gpus_per_node", a.gpus_per_node, b.gpus_per_node, {1, 16});
  v.Ints("gpu_indices", a.gpu_indices, b.gpu_indices, {0, 15});
  v.Num("start_s", a.start_s, b.start_s, kNonNeg);
  v.Name("after", a.after, b.after, false);
  v.Num("startup_s", a.startup_s, b.startup_s, {0, 3600});
  v.Num("steps", a.steps, b.steps, {1, 1e12, true});
  v.Obj("log", a.log, b.log, false);
  v.Obj("work", a.work, b.work, false);
  v.Obj("parallel", a.parallel, b.parallel, false);
  v.List("collectives", a.collectives, b.collectives, kMaxSmall);
  v.Obj("data_loader", a.data_loader, b.data_loader, false);
  v.Opt("checkpoint", a.checkpoint, b.checkpoint);
  v.Obj("loss", a.loss, b.loss, false);
  v.Obj("lr", a.lr, b.lr, false);
  v.Int("exit_code", a.exit_code, b.exit_code, {0, 255});
  v.Opt("resume_from", a.resume_from, b.resume_from);
  v.Opt("rerun_of", a.rerun_of, b.rerun_of);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, InferenceT<A>& a, InferenceT<B>& b) {
  v.Name("id", a.id, b.id, true);
  v.Name("node", a.node, b.node, true);
  v.Int("gpus", a.gpus, b.gpus, {1, 16});
  v.Int("tensor_parallel", a.tensor_parallel, b.tensor_parallel, {1, 16});
  v.Enum("engine", a.engine, b.engine);
  v.Int("slots", a.slots, b.slots, {1, 4096});
  v.Bool("chunked_prefill", a.chunked_prefill, b.chunked_prefill);
  v.Bool("prefix_caching", a.prefix_caching, b.prefix_caching);
  v.Num("kv_capacity_tokens", a.kv_capacity_tokens, b.kv_capacity_tokens, {1, 1e9});
  v.Num("arrival_rate_rps", a.arrival_rate_rps, b.arrival_rate_rps, {0, 1e5});
  v.Sampled("prompt_tokens", a.prompt_tokens, b.prompt_tokens, {1, 1 << 22});
  v.Sampled("output_tokens", a.output_tokens, b.output_tokens, {1, 1 << 20});
  v.Num("shared_prefix_share", a.shared_prefix_share, b.shared_prefix_share, kShare);
  v.Num("model_gib", a.model_gib, b.model_gib, {0.001, 4096});
  v.Num("slo_ttft_ms", a.slo_ttft_ms, b.slo_ttft_ms, {1, 3.6e6});
  v.Num("slo_tpot_ms", a.slo_tpot_ms, b.slo_tpot_ms, {0.1, 3.6e5});
  v.Enum("metrics", a.metrics, b.metrics);
  v.Int("port", a.port, b.port, {1, 65535});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, MountT<A>& a, MountT<B>& b) {
  v.Name("name", a.name, b.name, true);
  v.Path("path", a.path, b.path, true);
  v.Enum("kind", a.kind, b.kind);
  v.Names("nodes", a.nodes, b.nodes, false);
  v.Num("write_gbps", a.write_gbps, b.write_gbps, {1e-6, 1e4});
  v.Num("read_gbps", a.read_gbps, b.read_gbps, {1e-6, 1e4});
  v.Num("fsync_ms", a.fsync_ms, b.fsync_ms, {0, 3.6e6});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, SwitchT<A>& a, SwitchT<B>& b) {
  v.Name("name", a.name, b.name, true);
  v.Enum("tier", a.tier, b.tier);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, LinkT<A>& a, LinkT<B>& b) {
  v.Str("a", a.a, b.a, true);
  v.Str("b", a.b, b.b, true);
  v.Num("rate_gbps", a.rate_gbps, b.rate_gbps, {1, 3200});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, FabricT<A>& a, FabricT<B>& b) {
  v.List("switches", a.switches, b.switches, kMaxNodes);
  v.List("links", a.links, b.links, kMaxNodes * 8);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, EventT<A>& a, EventT<B>& b) {
  v.Name("id", a.id, b.id, false);
  v.Enum("kind", a.kind, b.kind, true);
  v.Num("at_s", a.at_s, b.at_s, kNonNeg);
  v.Num("at_step", a.at_step, b.at_step, kNonNeg);
  v.Name("job", a.job, b.job, false);
  v.Name("node", a.node, b.node, false);
  v.Int("gpu", a.gpu, b.gpu, {0, 15});
  v.Name("nic", a.nic, b.nic, false);
  v.Name("mount", a.mount, b.mount, false);
  v.Int("rank", a.rank, b.rank, {0, 1 << 20});
  v.Int("collective", a.collective, b.collective, {0, 1e12});
  v.Int("link", a.link, b.link, {0, 17});
  v.Int("xid", a.xid, b.xid, {1, 1000});
  v.Int("count", a.count, b.count, {1, 1e9});
  v.Bool("failure", a.failure, b.failure);
  v.Num("duration_s", a.duration_s, b.duration_s, kNonNeg);
  v.Num("ramp_s", a.ramp_s, b.ramp_s, kNonNeg);
  v.Num("clock_factor", a.clock_factor, b.clock_factor, {0.05, 1});
  v.Num("power_limit_w", a.power_limit_w, b.power_limit_w, {50, 1000});
  v.Num("bandwidth_factor", a.bandwidth_factor, b.bandwidth_factor, {0, 1});
  v.Num("fsync_ms", a.fsync_ms, b.fsync_ms, {0, 3.6e6});
  v.Num("cpu_share", a.cpu_share, b.cpu_share, kShare);
  v.Num("symbol_errors_per_s", a.symbol_errors_per_s, b.symbol_errors_per_s, {0, 1e6});
  v.Name("other_job", a.other_job, b.other_job, false);
  v.Enum("effect", a.effect, b.effect);
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, BackgroundT<A>& a, BackgroundT<B>& b) {
  v.Bool("enabled", a.enabled, b.enabled);
  v.Bool("power_capping", a.power_capping, b.power_capping);
  v.Num("clock_spread_pct", a.clock_spread_pct, b.clock_spread_pct, {0, 50});
  v.Num("corrected_ecc_per_hour", a.corrected_ecc_per_hour, b.corrected_ecc_per_hour, {0, 1e6});
  v.Num("ib_symbol_errors_per_hour", a.ib_symbol_errors_per_hour, b.ib_symbol_errors_per_hour, {0, 1e6});
  v.Bool("old_row_remap", a.old_row_remap, b.old_row_remap);
  v.Int("earlier_xid", a.earlier_xid, b.earlier_xid, {0, 1000});
  v.Num("seq_len_jitter", a.seq_len_jitter, b.seq_len_jitter, {0, 10});
  v.Int("host_jitter_processes", a.host_jitter_processes, b.host_jitter_processes, {0, 1024});
  v.Num("host_jitter_burst_ms", a.host_jitter_burst_ms, b.host_jitter_burst_ms, {0, 60000});
  v.Num("host_jitter_bursts_per_min", a.host_jitter_bursts_per_min, b.host_jitter_bursts_per_min, {0, 6000});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, TenantT<A>& a, TenantT<B>& b) {
  v.Name("id", a.id, b.id, true);
  v.Enum("kind", a.kind, b.kind);
  v.Name("mount", a.mount, b.mount, false);
  v.Names("nodes", a.nodes, b.nodes, false);
  v.Name("switch", a.switch_name, b.switch_name, false);
  v.Num("write_gbps", a.write_gbps, b.write_gbps, {0, 1e4});
  v.Num("traffic_gbps", a.traffic_gbps, b.traffic_gbps, {0, 1e5});
  v.Num("start_s", a.start_s, b.start_s, kNonNeg);
  v.Num("end_s", a.end_s, b.end_s, {-1, kBig});  // -1 = until the end; other values checked >= 0
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, QuickT<A>& a, QuickT<B>& b) {
  v.Num("time_compression", a.time_compression, b.time_compression, {0.001, 1e4});
  v.Num("duration_s", a.duration_s, b.duration_s, {1, 1e7});
}

template <class V, template <class> class A, template <class> class B>
void VisitFields(V& v, ScenarioT<A>& a, ScenarioT<B>& b) {
  v.Int("version", a.version, b.version, {0, 1e9, true});
  v.Name("name", a.name, b.name, true);
  v.Str("description", a.description, b.description, false);
  v.Seed("seed", a.seed, b.seed);
  v.Num("time_compression", a.time_compression, b.time_compression, {0.001, 1e4});
  v.Num("duration_s", a.duration_s, b.duration_s, {1, 1e7, true});
  v.List("nodes", a.nodes, b.nodes, kMaxNodes);
  v.List("jobs", a.jobs, b.jobs, kMaxJobs);
  v.List("inference", a.inference, b.inference, kMaxJobs);
  v.Group("storage", [&](auto& g) { g.List("mounts", a.mounts, b.mounts, kMaxSmall); });
  v.Obj("fabric", a.fabric, b.fabric, false);
  v.List("timeline", a.timeline, b.timeline, kMaxEvents);
  v.Obj("background", a.background, b.background, false);
  v.List("tenants", a.tenants, b.tenants, kMaxSmall);
  v.Obj("quick", a.quick, b.quick, false);
  v.Ignore("expect");  // only ParseExpectations reads it
}

}  // namespace ithbat::scenario::internal
