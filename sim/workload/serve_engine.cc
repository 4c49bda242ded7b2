#include "workload/serve_engine.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <memory>

namespace ithbat::sim::workload::serve {
namespace {

constexpr std::array<double, 22> kTtft = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr std::array<double, 19> kTpot = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
constexpr std::array<double, 21> kLatency = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
constexpr std::array<double, 13> kIteration = {1,   8,    16,   32,   64,   128,  256,
                                               512, 1024, 2048, 4096, 8192, 16384};

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

// Real kernels' names as PTX entry points (plain or Itanium-mangled identifiers, so the same
// module loads on a real driver).
constexpr std::string_view kPrefillGemm =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_"
    "kernel__5x_"
    "cublas";
constexpr std::string_view kPrefillAttention = "flash_fwd_kernel";
constexpr std::string_view kNorm = "_ZN4vllm24fused_add_rms_norm_kernelIN3c108BFloat16ELi8EEEvPT_S4_PKS3_fii";
constexpr std::string_view kDecodeGemm =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_on_"
    "kernel__5x_"
    "cublas";
constexpr std::string_view kSplitKReduce =
    "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EifN3c108BFloat16EfS2_Lb0ELb0ELb0EEEvNS_"
    "18cublasSplitKParamsIT2_"
    "EEPKT1_PKT3_PS8_PKS5_SD_";
constexpr std::string_view kDecodeAttention = "flash_fwd_splitkv_kernel";
constexpr std::string_view kSampler =
    "_ZN2at6native43_GLOBAL__N__softmax_cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_"
    "i";
constexpr std::array<std::string_view, 7> kKernelNames = {
    kPrefillGemm, kPrefillAttention, kNorm, kDecodeGemm, kSplitKReduce, kDecodeAttention, kSampler};

}  // namespace

std::span<const std::string_view> ServeKernelNames() { return kKernelNames; }

std::span<const double> TtftBuckets() { return kTtft; }
std::span<const double> TpotBuckets() { return kTpot; }
std::span<const double> RequestLatencyBuckets() { return kLatency; }
std::span<const double> IterationTokenBuckets() { return kIteration; }

std::vector<double> TokenBuckets(int64_t max_model_len) {
  std::vector<double> out;
  for (double exp = 1; exp <= 1e12; exp *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * exp > static_cast<double>(max_model_len)) return out;
      out.push_back(m * exp);
    }
  }
  return out;
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

ReplicaCounters::ReplicaCounters(int64_t max_model_len)
    : token_bounds(TokenBuckets(max_model_len)),
      request_prompt_tokens(token_bounds),
      request_generation_tokens(token_bounds) {}

// ---------------------------------------------------------------------------------------------

ArrivalGenerator::ArrivalGenerator(const ServeSpec& spec, int64_t start_ns)
    : spec_(spec),
      arrivals_(scenario::FieldSeed(spec.seed, "serve.arrivals")),
      prompts_(scenario::FieldSeed(spec.seed, "serve.prompt_tokens")),
      outputs_(scenario::FieldSeed(spec.seed, "serve.output_tokens")),
      next_ns_(static_cast<double>(start_ns)) {}

Request ArrivalGenerator::Next() {
  Request r;
  r.id = next_id_++;
  if (spec_.arrival_rate_rps > 0) {
    next_ns_ += -std::log(1.0 - arrivals_.Uniform()) / spec_.arrival_rate_rps * 1e9;
    r.arrival_ns = next_ns_ >= 9e18 ? INT64_MAX : static_cast<int64_t>(next_ns_);
  } else {
    r.arrival_ns = INT64_MAX;
  }
  r.prompt_tokens = std::max<int64_t>(1, std::llround(scenario::Sample(spec_.prompt_tokens, prompts_)));
  r.output_tokens = std::max<int64_t>(1, std::llround(scenario::Sample(spec_.output_tokens, outputs_)));
  r.shared_prefix_tokens =
      static_cast<int64_t>(std::floor(spec_.shared_prefix_share * static_cast<double>(r.prompt_tokens)));
  return r;
}

// ---------------------------------------------------------------------------------------------

std::vector<KernelLaunch> StepKernels(const StepPlan& p, const ServeCosts& c) {
  std::vector<KernelLaunch> out;
  if (p.empty()) return out;
  const int64_t base = std::max(c.step_ns, c.prefill_ns_per_token * p.prefill_tokens);
  const int64_t dec = c.decode_ns_per_seq * p.decode_seqs;
  const int64_t attn = static_cast<int64_t>(c.attn_ns_per_kv_token * static_cast<double>(p.context_tokens));
  if (p.prefill_tokens > 0) {
    // Compute-bound: the GEMMs dominate, then attention over the chunk, then norms.
    const int64_t gemm = base * 8 / 10;
    const int64_t flash = base * 12 / 100;
    out.push_back({kPrefillGemm, gemm});
    out.push_back({kPrefillAttention, flash});
    out.push_back({kNorm, base - gemm - flash});
  } else {
    // Decode only: reading the weights is memory-bound; the larger the batch, the more of the
    // time the GEMMs' tensor pipes do useful work (a batch of one is a GEMV).
    const double g = std::clamp(0.1 + 0.6 * static_cast<double>(p.decode_seqs) / 64.0, 0.1, 0.7);
    const int64_t gemm = static_cast<int64_t>(static_cast<double>(base) * g);
    out.push_back({kDecodeGemm, gemm});
    out.push_back({kSplitKReduce, base - gemm});
  }
  if (p.decode_seqs > 0) {
    out.push_back({kDecodeAttention, attn});
    out.push_back({kSampler, dec});
  }
  // A kernel shorter than a few µs is not worth a launch: its time goes to the first kernel.
  constexpr int64_t kMinKernelNs = 3000;
  int64_t spill = 0;
  std::vector<KernelLaunch> kept;
  for (const auto& k : out) {
    if (k.ns < kMinKernelNs) {
      spill += std::max<int64_t>(0, k.ns);
    } else {
      kept.push_back(k);
    }
  }
  if (kept.empty()) kept.push_back({out.front().name, 0});
  kept.front().ns += spill;
  return kept;
}

// ---------------------------------------------------------------------------------------------

ReplicaEngine::ReplicaEngine(const ServeSpec& spec)
    : spec_(spec),
      block_(std::max<int64_t>(1, spec.block_size)),
      total_blocks_(std::max<int64_t>(1, spec.kv_capacity_tokens / std::max<int64_t>(1, spec.block_size))),
      budget_(spec.engine == scenario::Engine::kNaive ? INT64_MAX / 4 : StepTokenBudget(spec)),
      counters_(spec.max_model_len) {}

bool ReplicaEngine::Enqueue(Request r) {
  if (waiting_.size() >= kMaxQueued) return false;
  // What fits one sequence: the model's length, and the KV cache less one block.
  const int64_t limit = std::max<int64_t>(2, std::min(spec_.max_model_len, (total_blocks_ - 1) * block_));
  Seq s;
  r.prompt_tokens = std::clamp<int64_t>(r.prompt_tokens, 1, limit - 1);
  if (r.prompt_tokens + r.output_tokens > limit) {
    r.output_tokens = limit - r.prompt_tokens;
    s.cut = true;
  }
  r.shared_prefix_tokens = std::clamp<int64_t>(r.shared_prefix_tokens, 0, r.prompt_tokens);
  s.r = r;
  s.target = r.prompt_tokens;
  waiting_.push_back(std::move(s));
  return true;
}

int64_t ReplicaEngine::used_blocks() const {
  return own_blocks_ + (prefix_users_ > 0 ? prefix_tokens_ / block_ : 0);
}
int64_t ReplicaEngine::FreeBlocks() const { return total_blocks_ - used_blocks(); }

int64_t ReplicaEngine::BlocksFor(const Seq& s, int64_t tokens_in_kv) const {
  return std::max<int64_t>(0, (tokens_in_kv + block_ - 1) / block_ - s.hit / block_);
}

bool ReplicaEngine::Grow(Seq& s, int64_t tokens_in_kv) {
  const int64_t need = BlocksFor(s, tokens_in_kv) - s.own_blocks;
  if (need <= 0) return true;
  if (need > FreeBlocks()) return false;
  // Cached prefix blocks nobody uses are free blocks; taking them evicts the prefix.
  if (prefix_users_ == 0 && prefix_tokens_ > 0 &&
      own_blocks_ + need > total_blocks_ - prefix_tokens_ / block_)
    prefix_tokens_ = 0;
  s.own_blocks += need;
  own_blocks_ += need;
  return true;
}

void ReplicaEngine::Release(Seq& s) {
  own_blocks_ -= s.own_blocks;
  s.own_blocks = 0;
  if (s.hit > 0) --prefix_users_;
  s.hit = 0;
}

void ReplicaEngine::PreemptLast() {
  Seq s = std::move(running_.back());
  running_.pop_back();
  Release(s);
  // Recompute: the prompt and what was generated so far are prefilled again on readmission.
  s.target = s.r.prompt_tokens + s.generated;
  s.computed = 0;
  s.step_chunk = 0;
  s.step_decode = false;
  waiting_.push_front(std::move(s));
  ++counters_.preemptions;
}

bool ReplicaEngine::Admit(int64_t now_ns, int64_t budget, bool whole) {
  if (waiting_.empty()) return false;
  const int64_t slots = spec_.engine == scenario::Engine::kNaive ? 1 : spec_.slots;
  if (static_cast<int64_t>(running_.size()) >= slots) return false;
  Seq& s = waiting_.front();
  const bool caching = PrefixCachingOn(spec_);
  int64_t hit = 0;
  if (caching) {
    hit = std::min(s.r.shared_prefix_tokens / block_ * block_, prefix_tokens_);
    hit = std::min(hit, (s.target - 1) / block_ * block_);  // at least one token is computed
  }
  const int64_t remaining = s.target - hit;
  const int64_t chunk = whole ? remaining : std::min(remaining, budget);
  if (chunk <= 0 || (whole && remaining > budget)) return false;
  s.hit = hit;
  if (hit > 0) ++prefix_users_;
  // vLLM keeps a 1% watermark of free blocks when admitting, so running sequences can grow.
  const int64_t watermark = running_.empty() ? 0 : total_blocks_ / 100;
  if (BlocksFor(s, hit + chunk) + watermark > FreeBlocks() || !Grow(s, hit + chunk)) {
    if (hit > 0) --prefix_users_;
    s.hit = 0;
    return false;
  }
  if (caching) {
    counters_.prefix_queries += static_cast<uint64_t>(s.target);
    counters_.prefix_hits += static_cast<uint64_t>(hit);
  }
  s.computed = hit;
  s.step_chunk = chunk;
  s.step_decode = false;
  if (s.first_sched_ns < 0) s.first_sched_ns = now_ns;
  running_.push_back(std::move(s));
  waiting_.pop_front();
  return true;
}

StepPlan ReplicaEngine::Plan(int64_t now_ns) {
  if (planned_) return plan_;
  for (Seq& s : running_) {
    s.step_chunk = 0;
    s.step_decode = false;
  }
  int64_t budget = budget_;
  // Decodes of every running sequence past its prefill, oldest first; a sequence that needs a
  // block when none is free makes room by preempting the newest.
  auto decode_all = [&]() {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      if (running_[i].computed < running_[i].target) continue;
      bool ok = true;
      while (!Grow(running_[i], running_[i].computed + running_[i].generated)) {
        const bool self = i + 1 == running_.size();
        PreemptLast();
        if (self) {
          ok = false;
          break;
        }
      }
      if (!ok) break;
      running_[i].step_decode = true;
      --budget;
    }
  };
  if (spec_.engine == scenario::Engine::kNaive) {
    if (running_.empty()) {
      Admit(now_ns, budget, true);
    } else {
      decode_all();
    }
  } else if (spec_.chunked_prefill) {
    decode_all();
    for (Seq& s : running_) {
      if (s.computed >= s.target || s.step_decode || budget <= 0) continue;
      const int64_t chunk = std::min(s.target - s.computed, budget);
      if (!Grow(s, s.computed + chunk)) continue;
      s.step_chunk = chunk;
      budget -= chunk;
    }
    while (budget > 0 && Admit(now_ns, budget, false)) budget -= running_.back().step_chunk;
  } else {
    int64_t admitted = 0;
    while (Admit(now_ns, budget, true)) {
      budget -= running_.back().step_chunk;
      ++admitted;
    }
    if (admitted == 0) decode_all();
  }
  plan_ = StepPlan{};
  for (const Seq& s : running_) {
    plan_.prefill_tokens += s.step_chunk;
    if (s.step_decode) {
      ++plan_.decode_seqs;
      plan_.context_tokens += s.computed + s.generated;
    }
  }
  if (!plan_.empty()) {
    const ServeCosts& c = spec_.costs;
    plan_.gpu_ns = std::max(c.step_ns, c.prefill_ns_per_token * plan_.prefill_tokens) +
                   c.decode_ns_per_seq * plan_.decode_seqs +
                   static_cast<int64_t>(c.attn_ns_per_kv_token * static_cast<double>(plan_.context_tokens));
    plan_.gpu_ns = std::max<int64_t>(plan_.gpu_ns, 1000);
    plan_.host_ns = c.host_ns_per_step;
    planned_ = true;
  }
  return plan_;
}

void ReplicaEngine::CachePrefix(Seq& s) {
  if (!PrefixCachingOn(spec_)) return;
  const int64_t shared = std::min(s.r.shared_prefix_tokens, s.computed) / block_ * block_;
  // Only a sequence that extends the cached prefix from its end hands its blocks over.
  if (shared <= prefix_tokens_ || s.hit != prefix_tokens_) return;
  const int64_t moved = (shared - s.hit) / block_;
  s.own_blocks -= moved;
  own_blocks_ -= moved;
  if (s.hit == 0) ++prefix_users_;
  s.hit = shared;
  prefix_tokens_ = shared;
}

void ReplicaEngine::Finish(int64_t end_ns) {
  if (!planned_) return;
  planned_ = false;
  ++counters_.steps;
  counters_.iteration_tokens.Observe(static_cast<double>(plan_.prefill_tokens + plan_.decode_seqs));
  std::vector<Seq> still;
  still.reserve(running_.size());
  for (Seq& s : running_) {
    if (s.step_chunk > 0) {
      s.computed += s.step_chunk;
      if (s.computed >= s.target) {
        CachePrefix(s);
        if (s.generated == 0) {  // the prefill's forward pass samples the first token
          s.generated = 1;
          s.first_token_ns = s.last_token_ns = end_ns;
          counters_.ttft.Observe(Seconds(end_ns - s.r.arrival_ns));
          counters_.queue.Observe(Seconds(s.first_sched_ns - s.r.arrival_ns));
          counters_.prefill.Observe(Seconds(end_ns - s.first_sched_ns));
          counters_.prompt_tokens += static_cast<uint64_t>(s.r.prompt_tokens);
          ++counters_.generation_tokens;
        }
      }
    } else if (s.step_decode) {
      ++s.generated;
      ++counters_.generation_tokens;
      counters_.tpot.Observe(Seconds(end_ns - s.last_token_ns));
      s.last_token_ns = end_ns;
    }
    s.step_chunk = 0;
    s.step_decode = false;
    if (s.computed >= s.target && s.generated >= s.r.output_tokens) {
      counters_.e2e.Observe(Seconds(end_ns - s.r.arrival_ns));
      counters_.inference.Observe(Seconds(end_ns - s.first_sched_ns));
      counters_.decode.Observe(Seconds(end_ns - s.first_token_ns));
      counters_.request_prompt_tokens.Observe(static_cast<double>(s.r.prompt_tokens));
      counters_.request_generation_tokens.Observe(static_cast<double>(s.generated));
      ++(s.cut ? counters_.finished_length : counters_.finished_stop);
      Release(s);
      continue;
    }
    still.push_back(std::move(s));
  }
  running_ = std::move(still);
}

size_t PickReplica(std::span<const int64_t> loads, uint64_t* turn) {
  const size_t n = loads.size();
  if (n == 0) return 0;
  size_t best = static_cast<size_t>(*turn % n);
  for (size_t k = 1; k < n; ++k) {
    const size_t i = static_cast<size_t>((*turn + k) % n);
    if (loads[i] < loads[best]) best = i;
  }
  *turn = best + 1;
  return best;
}

// ---------------------------------------------------------------------------------------------

SimReport SimulateServe(const ServeSpec& spec, int64_t duration_ns) {
  SimReport rep;
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, Replicas(spec)));
  enum class Phase { kIdle, kGpu, kHost };
  struct Rep {
    std::unique_ptr<ReplicaEngine> engine;
    Phase phase = Phase::kIdle;
    int64_t at = INT64_MAX;
    StepPlan plan;
  };
  std::vector<Rep> reps(n);
  for (Rep& r : reps) r.engine = std::make_unique<ReplicaEngine>(spec);
  ArrivalGenerator gen(spec, 0);
  Request next = gen.Next();
  uint64_t turn = 0;
  std::vector<int64_t> loads(n);
  int64_t gpu_total = 0;
  auto start_step = [&](Rep& r, int64_t t) {
    r.plan = r.engine->Plan(t);
    if (r.plan.empty()) {
      r.phase = Phase::kIdle;
      r.at = INT64_MAX;
      return;
    }
    r.phase = Phase::kGpu;
    r.at = t + r.plan.gpu_ns;
    gpu_total += r.plan.gpu_ns;
    ++rep.steps;
    if (r.plan.prefill_tokens > 0 && r.plan.decode_seqs > 0) ++rep.mixed_steps;
  };
  for (int64_t iter = 0; iter < (int64_t{1} << 30); ++iter) {
    size_t ri = 0;
    int64_t te = INT64_MAX;
    for (size_t i = 0; i < n; ++i) {
      if (reps[i].phase != Phase::kIdle && reps[i].at < te) {
        te = reps[i].at;
        ri = i;
      }
    }
    const int64_t t = std::min(te, next.arrival_ns);
    if (t > duration_ns) break;
    if (next.arrival_ns <= te) {
      for (size_t i = 0; i < n; ++i) loads[i] = reps[i].engine->running() + reps[i].engine->waiting();
      const size_t pick = PickReplica(loads, &turn);
      if (reps[pick].engine->Enqueue(next)) ++rep.admitted;
      if (reps[pick].phase == Phase::kIdle) start_step(reps[pick], next.arrival_ns);
      next = gen.Next();
    } else {
      Rep& r = reps[ri];
      if (r.phase == Phase::kGpu) {
        r.engine->Finish(te);
        r.phase = Phase::kHost;
        r.at = te + r.plan.host_ns;
      } else {
        start_step(r, te);
      }
    }
    int64_t waiting_total = 0;
    for (const Rep& r : reps) {
      rep.max_running = std::max(rep.max_running, r.engine->running());
      rep.max_waiting = std::max(rep.max_waiting, r.engine->waiting());
      rep.max_kv_usage = std::max(rep.max_kv_usage, r.engine->kv_usage());
      rep.max_used_blocks = std::max(rep.max_used_blocks, r.engine->used_blocks());
      waiting_total += r.engine->waiting();
    }
    rep.max_waiting_total = std::max(rep.max_waiting_total, waiting_total);
  }
  for (const Rep& r : reps) {
    const ReplicaCounters& c = r.engine->counters();
    rep.finished += static_cast<int64_t>(c.finished_stop + c.finished_length);
    rep.prompt_tokens += c.prompt_tokens;
    rep.generation_tokens += c.generation_tokens;
    rep.prefix_queries += c.prefix_queries;
    rep.prefix_hits += c.prefix_hits;
    rep.preemptions += c.preemptions;
  }
  if (duration_ns > 0)
    rep.gpu_busy_share = static_cast<double>(gpu_total) / (static_cast<double>(duration_ns) * n);
  return rep;
}

}  // namespace ithbat::sim::workload::serve
