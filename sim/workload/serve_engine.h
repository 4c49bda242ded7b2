#pragma once
// The scheduling model of the simulated inference server: pure, on explicit time (ns), no
// threads, no clock, no GPU. serve_main.cc drives one ReplicaEngine per replica in real time
// (plan a step, run its kernels on the virtual GPU, synchronise, finish the step); tests and
// SimulateServe drive the same code on simulated time.
//
// One step = one forward pass over the batch the scheduler picked (SERVE.md has the rules):
//   continuous, chunked prefill   decodes of every running sequence first (1 token each), then
//                                 prefill chunks of sequences still in prefill, then new
//                                 admissions from the FIFO queue while slots, the step's token
//                                 budget and free KV blocks allow (vLLM V1)
//   continuous, no chunking       a prefill-only step when the queue's head fits whole (as many
//                                 whole prompts as fit), else a decode step of everyone (vLLM V0)
//   naive                         one request at a time: its whole prompt in one step, then one
//                                 decode step per token; the queue waits (a loop around generate())
// KV cache in blocks of block_size tokens; a sequence holds the blocks of the tokens computed so
// far. A decode that needs a block when none is free preempts the most recently admitted
// sequence (recompute: back to the queue's head, its blocks freed), as vLLM does. Prefix
// caching: the first shared_prefix_tokens of every prompt are common; once a prompt's prefill
// completed, its full blocks of that prefix stay cached (counted as used while a running
// sequence uses them, reclaimable otherwise) and later prompts skip computing them.
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include "scenario/rng.h"
#include "workload/serve_spec.h"

namespace ithbat::sim::workload::serve {

struct Request {
  uint64_t id = 0;
  int64_t arrival_ns = 0;
  int64_t prompt_tokens = 1;
  int64_t output_tokens = 1;         // generation stops after this many tokens
  int64_t shared_prefix_tokens = 0;  // leading prompt tokens common to every request
};

// Poisson arrivals and request sizes drawn from the spec's seed (documented PRNG, one stream per
// quantity: FieldSeed(seed, "serve.arrivals" / "serve.prompt_tokens" / "serve.output_tokens")).
class ArrivalGenerator {
 public:
  ArrivalGenerator(const ServeSpec& spec, int64_t start_ns);
  // The next request; arrival times never decrease. Rate 0: arrival_ns = INT64_MAX.
  Request Next();

 private:
  const ServeSpec& spec_;
  scenario::Rng arrivals_, prompts_, outputs_;
  double next_ns_;
  uint64_t next_id_ = 0;
};

// A Prometheus histogram with fixed bounds (non-cumulative bucket counts; +Inf last).
struct Histogram {
  std::span<const double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::span<const double> b) : bounds(b), counts(b.size() + 1, 0) {}
  void Observe(double v);
};
// vLLM's buckets (vllm/engine/metrics.py, vllm/v1/metrics/loggers.py).
std::span<const double> TtftBuckets();
std::span<const double> TpotBuckets();
std::span<const double> RequestLatencyBuckets();
std::span<const double> IterationTokenBuckets();
std::vector<double> TokenBuckets(int64_t max_model_len);  // 1, 2, 5, 10, 20, 50, ... ≤ max

// What one replica did (cumulative; the /metrics counters and histograms).
struct ReplicaCounters {
  std::vector<double> token_bounds;  // storage of the two token histograms' bounds (first: built first)
  uint64_t prompt_tokens = 0;        // prompts whose prefill completed (whole prompt, cached part included)
  uint64_t generation_tokens = 0;    // tokens sampled (first token included)
  uint64_t prefix_queries = 0;       // prompt tokens looked up in the prefix cache (prefix caching on)
  uint64_t prefix_hits = 0;          // of which found cached
  uint64_t preemptions = 0;
  uint64_t finished_stop = 0;    // requests done at their natural stop
  uint64_t finished_length = 0;  // ... cut at max_model_len
  uint64_t steps = 0;
  Histogram ttft{TtftBuckets()};
  Histogram tpot{TpotBuckets()};  // each token after the first: time since the previous one
  Histogram e2e{RequestLatencyBuckets()};
  Histogram queue{RequestLatencyBuckets()};
  Histogram inference{RequestLatencyBuckets()};
  Histogram prefill{RequestLatencyBuckets()};
  Histogram decode{RequestLatencyBuckets()};
  Histogram iteration_tokens{IterationTokenBuckets()};
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
  explicit ReplicaCounters(int64_t max_model_len);
  ReplicaCounters(const ReplicaCounters&) = delete;
  ReplicaCounters& operator=(const ReplicaCounters&) = delete;
};

// The work of one planned step.
struct StepPlan {
  int64_t prefill_tokens = 0;  // prompt tokens computed in this step
  int64_t decode_seqs = 0;     // sequences producing a token by decoding
  int64_t context_tokens = 0;  // tokens the decoding sequences attend to
  int64_t gpu_ns = 0;          // GPU time (ServeCosts formula)
  int64_t host_ns = 0;         // CPU time after the step, GPU idle
  bool empty() const { return prefill_tokens == 0 && decode_seqs == 0; }
};

// The kernels a step launches (on each GPU of the replica), with durations that add up to
// gpu_ns. Names are real kernels' (cuBLAS sm90 GEMMs, FlashAttention, vLLM's norms), so the
// fake libcuda classifies them like profilers do: prefill is GEMM-heavy (tensor pipes busy),
// decode's weight reads are memory-bound (a smaller GEMM share the larger the batch is not).
struct KernelLaunch {
  std::string_view name;
  int64_t ns;
};
std::vector<KernelLaunch> StepKernels(const StepPlan& plan, const ServeCosts& costs);
// Every name StepKernels uses (the server loads them once per GPU).
std::span<const std::string_view> ServeKernelNames();

class ReplicaEngine {
 public:
  explicit ReplicaEngine(const ServeSpec& spec);

  // Queues a request (its sizes clamped so prompt + output fits max_model_len and the KV cache).
  // False when the queue is at its bound (kMaxQueued): the request is refused.
  bool Enqueue(Request r);
  // Plans the step starting at now_ns: admissions, chunks, decodes; empty when idle. A plan
  // must be finished (Finish) before the next one is made.
  StepPlan Plan(int64_t now_ns);
  // The planned step ended at end_ns: tokens, first tokens, completions, latencies.
  void Finish(int64_t end_ns);

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t used_blocks() const;
  double kv_usage() const { return static_cast<double>(used_blocks()) / static_cast<double>(total_blocks_); }
  const ReplicaCounters& counters() const { return counters_; }

  static constexpr size_t kMaxQueued = 100000;

 private:
  struct Seq {
    Request r;
    int64_t target = 0;    // tokens to prefill: prompt (+ generated after a preemption)
    int64_t computed = 0;  // of target, in the KV cache
    int64_t generated = 0;
    int64_t hit = 0;         // leading tokens served by the shared prefix blocks
    int64_t own_blocks = 0;  // blocks this sequence holds itself
    int64_t first_sched_ns = -1;
    int64_t first_token_ns = -1;
    int64_t last_token_ns = -1;
    bool cut = false;          // output shortened to fit
    int64_t step_chunk = 0;    // this step: prompt tokens computed
    bool step_decode = false;  // this step: decodes one token
  };
  int64_t FreeBlocks() const;
  int64_t BlocksFor(const Seq& s, int64_t tokens_in_kv) const;
  bool Grow(Seq& s, int64_t tokens_in_kv);  // takes blocks for the sequence's KV to hold that many tokens
  bool Admit(int64_t now_ns, int64_t budget, bool whole);
  void Release(Seq& s);
  void PreemptLast();
  void CachePrefix(Seq& s);

  const ServeSpec& spec_;
  const int64_t block_;
  const int64_t total_blocks_;
  const int64_t budget_;
  std::deque<Seq> waiting_;
  std::vector<Seq> running_;   // in admission order
  int64_t own_blocks_ = 0;     // Σ own_blocks of running sequences
  int64_t prefix_tokens_ = 0;  // cached shared prefix (block-aligned)
  int64_t prefix_users_ = 0;   // running sequences whose hit > 0
  StepPlan plan_;
  bool planned_ = false;
  ReplicaCounters counters_;
};

// Which replica gets a new request: the least loaded (running + waiting), ties in turn.
size_t PickReplica(std::span<const int64_t> loads, uint64_t* turn);

// A whole server on simulated time (tests, SERVE.md figures): arrivals from the seed, every
// replica stepping as the real server does (GPU time, then host time).
struct SimReport {
  int64_t steps = 0;
  int64_t max_running = 0;        // over replicas and time
  int64_t max_waiting = 0;        // over replicas and time
  int64_t max_waiting_total = 0;  // whole server
  double max_kv_usage = 0;        // over replicas
  int64_t max_used_blocks = 0;
  int64_t admitted = 0;
  int64_t finished = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0, prefix_queries = 0, prefix_hits = 0, preemptions = 0;
  int64_t mixed_steps = 0;    // steps with both prefill and decode work
  double gpu_busy_share = 0;  // Σ GPU time / (duration × replicas)
};
SimReport SimulateServe(const ServeSpec& spec, int64_t duration_ns);

}  // namespace ithbat::sim::workload::serve
