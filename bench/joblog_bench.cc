// Job-output benchmarks (docs/performance.md). The log is generated here: four jobs' outputs
// (a Hugging Face Trainer run, a Megatron run, a torchtitan run, a vLLM server), each with the
// lines its framework prints (numbers varying), NCCL WARN and traceback lines, and noise
// (Python warnings, library INFO lines, data-loader chatter), so that at least 30% of the lines
// match a parser — the counter `matched` reports the fraction the real parsers recognised. Each
// job is one stream with its own StreamParser in auto mode, as in the agent.
//
// Every figure quoted is a ratio against BM_ReadLinesBaseline: the same bytes split into lines
// with memchr and nothing else, measured in the same run (absolute MB/s drift with the machine).
//
//   build/bench/joblog_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/text/line_assembler.h"
#include "collect/joblog/text/redact.h"

namespace ithbat::bench {
namespace {

using collect::joblog::AssembledLine;
using collect::joblog::LineAssembler;
using collect::joblog::LineView;
using collect::joblog::ParsedEvent;
using collect::joblog::RedactSecrets;
using collect::joblog::StreamParser;
using collect::joblog::StreamParserOptions;

// Deterministic numbers: the same log in every run.
class Rng {
 public:
  uint32_t Next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state_ >> 33);
  }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * (Next() % 1000000) / 1e6; }
  uint32_t Below(uint32_t n) { return Next() % n; }

 private:
  uint64_t state_ = 42;
};

std::string Noise(Rng& rng, int step) {
  switch (rng.Below(8)) {
    case 0:
      return fmt::format("/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:{}: UserWarning: This "
                         "DataLoader will create {} worker processes in total.",
                         rng.Below(600), rng.Below(32));
    case 1:
      return fmt::format("[2024-06-01 10:{:02}:{:02},{:03}] [INFO] [real_accelerator.py:{}:get_accelerator] Setting "
                         "ds_accelerator to cuda (auto detect)",
                         rng.Below(60), rng.Below(60), rng.Below(1000), rng.Below(300));
    case 2:
      return fmt::format("Loading shard {} of {} from /data/tokenized/train-{:05}.bin ({} documents)", rng.Below(64),
                         64, rng.Below(99999), rng.Below(100000));
    case 3:
      return fmt::format("wandb: Syncing run sunny-field-{} to https://wandb.example/runs/{:08x}", rng.Below(999),
                         rng.Next());
    case 4:
      return fmt::format("  warnings.warn(  # step {} of the data pipeline is deprecated", step);
    case 5:
      return fmt::format("INFO:root:Prefetched {} batches; queue depth {}; host memory {:.1f} GiB", rng.Below(64),
                         rng.Below(16), rng.Uniform(10, 500));
    case 6:
      return "";
    default:
      return fmt::format("NCCL INFO Channel {:02}/0 : {}[{}] -> {}[{}] via P2P/IPC/read", rng.Below(32),
                         rng.Below(8), rng.Below(8), rng.Below(8), rng.Below(8));
  }
}

std::string Always(Rng& rng) {
  if (rng.Below(2) == 0) {
    return fmt::format("node{}:{}:{} [{}] NCCL WARN NET/IB : Got completion from peer 10.0.{}.{}<{}> with error 12, "
                       "opcode 0, len 0, vendor err 129",
                       rng.Below(16), 1000 + rng.Below(9000), 1000 + rng.Below(9000), rng.Below(8), rng.Below(255),
                       rng.Below(255), 10000 + rng.Below(50000));
  }
  return "Traceback (most recent call last):";
}

std::string FrameworkLine(int job, Rng& rng, int step) {
  switch (job) {
    case 0:  // Hugging Face Trainer
      if (step % 50 == 0) {
        return fmt::format("{{'eval_loss': {:.4f}, 'eval_runtime': {:.2f}, 'eval_samples_per_second': {:.3f}, "
                           "'eval_steps_per_second': {:.3f}, 'epoch': {:.2f}}}",
                           rng.Uniform(1, 3), rng.Uniform(10, 60), rng.Uniform(10, 200), rng.Uniform(1, 20),
                           step / 1000.0);
      }
      return fmt::format("{{'loss': {:.4f}, 'grad_norm': {:.6f}, 'learning_rate': {:.4e}, 'epoch': {:.2f}}}",
                         rng.Uniform(1, 4), rng.Uniform(0.1, 5), rng.Uniform(1e-6, 1e-4), step / 1000.0);
    case 1:  // Megatron-LM
      return fmt::format(
          " iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): {:.1f} | learning "
          "rate: {:.6E} | global batch size: {:>5} | lm loss: {:.6E} | loss scale: {:.1f} | grad norm: {:.3f} | "
          "number of skipped iterations: {:>3} | number of nan iterations: {:>3} |",
          step, 500000, step * 512, rng.Uniform(800, 2000), rng.Uniform(1e-5, 3e-4), 512, rng.Uniform(1, 8), 65536.0,
          rng.Uniform(0.5, 3), 0, 0);
    case 2:  // torchtitan, rank-prefixed
      return fmt::format("[rank{}]:[titan] 2025-01-01 12:{:02}:{:02},{:03} - root - INFO - step: {:>2}  loss: {:7.4f}  "
                         "memory: {:5.2f}GiB({:.2f}%)  tps: {},{:03}  tflops: {:.2f}  mfu: {:.2f}%",
                         rng.Below(8), rng.Below(60), rng.Below(60), rng.Below(1000), step, rng.Uniform(2, 9),
                         rng.Uniform(20, 70), rng.Uniform(20, 90), 5 + rng.Below(3), rng.Below(1000), rng.Uniform(100, 400),
                         rng.Uniform(10, 50));
    default:  // vLLM V1 engine stats
      return fmt::format("INFO 06-01 10:{:02}:{:02} [loggers.py:116] Engine 000: Avg prompt throughput: {:.1f} tokens/s, "
                         "Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, Waiting: {} reqs, GPU KV cache "
                         "usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
                         rng.Below(60), rng.Below(60), rng.Uniform(0, 5000), rng.Uniform(0, 3000), rng.Below(256),
                         rng.Below(64), rng.Uniform(0, 100), rng.Uniform(0, 100));
  }
}

struct Job {
  std::string command_line;
  std::string text;  // lines, '\n'-terminated
};

// ~1 MiB per job: 40% framework lines, 2% always-on (NCCL WARN, tracebacks), the rest noise.
const std::vector<Job>& Jobs() {
  static const std::vector<Job>* jobs = [] {
    auto* v = new std::vector<Job>;
    const char* commands[] = {"python train.py --model_name_or_path gpt2", "python pretrain_gpt.py --num-layers 24",
                              "torchrun -m torchtitan.train", "vllm serve meta-llama/Llama-3-8B"};
    for (int job = 0; job < 4; ++job) {
      Rng rng;
      Job j;
      j.command_line = commands[job];
      int step = 1;
      while (j.text.size() < (1u << 20)) {
        const uint32_t r = rng.Below(100);
        if (r < 40) {
          j.text += FrameworkLine(job, rng, step++);
        } else if (r < 42) {
          j.text += Always(rng);
        } else {
          j.text += Noise(rng, step);
        }
        j.text.push_back('\n');
      }
      v->push_back(std::move(j));
    }
    return v;
  }();
  return *jobs;
}

size_t TotalBytes() {
  size_t n = 0;
  for (const Job& j : Jobs()) n += j.text.size();
  return n;
}

template <class F>
void ForEachLine(std::string_view text, F&& f) {
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (nl == nullptr) nl = end;
    f(std::string_view(p, static_cast<size_t>(nl - p)));
    p = nl + 1;
  }
}

// The floor: read the bytes and find the lines, nothing else.
void BM_ReadLinesBaseline(benchmark::State& state) {
  const auto& jobs = Jobs();
  for (auto _ : state) {
    size_t sum = 0;
    for (const Job& j : jobs) ForEachLine(j.text, [&](std::string_view line) { sum += line.size(); });
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * TotalBytes()));
}
BENCHMARK(BM_ReadLinesBaseline);

// (a) The agent's parse path: one auto-mode StreamParser per job, every line through it.
void BM_StreamParserAuto(benchmark::State& state) {
  const auto& jobs = Jobs();
  uint64_t lines = 0, recognised = 0, events_total = 0;
  std::vector<ParsedEvent> events;
  for (auto _ : state) {
    lines = recognised = events_total = 0;
    for (const Job& j : jobs) {
      StreamParserOptions options;
      options.command_line = j.command_line;
      auto parser = StreamParser::Create(options);
      if (!parser) {
        state.SkipWithError("StreamParser::Create failed");
        return;
      }
      ForEachLine(j.text, [&](std::string_view text) {
        events.clear();
        parser->Parse(LineView{.text = text}, events);
        events_total += events.size();
      });
      lines += parser->lines();
      recognised += parser->recognised_lines();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * TotalBytes()));
  state.counters["matched"] = lines ? static_cast<double>(recognised) / static_cast<double>(lines) : 0;
  state.counters["events_per_line"] = lines ? static_cast<double>(events_total) / static_cast<double>(lines) : 0;
}
BENCHMARK(BM_StreamParserAuto);

// Breakdown of (a): one job's stream alone (0 HF Trainer, 1 Megatron, 2 torchtitan, 3 vLLM: no
// framework ever owns that stream, so every framework candidate and the generic parser keep
// seeing its lines).
void BM_StreamParserAutoJob(benchmark::State& state) {
  const Job& j = Jobs()[static_cast<size_t>(state.range(0))];
  std::vector<ParsedEvent> events;
  for (auto _ : state) {
    StreamParserOptions options;
    options.command_line = j.command_line;
    auto parser = StreamParser::Create(options);
    if (!parser) {
      state.SkipWithError("StreamParser::Create failed");
      return;
    }
    ForEachLine(j.text, [&](std::string_view text) {
      events.clear();
      parser->Parse(LineView{.text = text}, events);
    });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * j.text.size()));
}
BENCHMARK(BM_StreamParserAutoJob)->DenseRange(0, 3);

// Breakdown by parser: one built-in parser alone over all four jobs' lines, called directly (as
// StreamParser calls it, but without the others), to see where (a)'s time goes.
void BM_Parser(benchmark::State& state, std::string_view name) {
  const auto* info = collect::joblog::FindParser(name);
  if (info == nullptr) {
    state.SkipWithError("unknown parser");
    return;
  }
  std::vector<ParsedEvent> events;
  for (auto _ : state) {
    for (const Job& j : Jobs()) {
      auto parser = info->make();
      ForEachLine(j.text, [&](std::string_view text) {
        events.clear();
        parser->Parse(LineView{.text = text}, events);
      });
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * TotalBytes()));
}
BENCHMARK_CAPTURE(BM_Parser, hf_trainer, "hf_trainer");
BENCHMARK_CAPTURE(BM_Parser, megatron, "megatron");
BENCHMARK_CAPTURE(BM_Parser, nemo2, "nemo2");
BENCHMARK_CAPTURE(BM_Parser, lightning, "lightning");
BENCHMARK_CAPTURE(BM_Parser, torchtitan, "torchtitan");
BENCHMARK_CAPTURE(BM_Parser, nanogpt, "nanogpt");
BENCHMARK_CAPTURE(BM_Parser, fairseq, "fairseq");
BENCHMARK_CAPTURE(BM_Parser, mmengine, "mmengine");
BENCHMARK_CAPTURE(BM_Parser, loss_scale, "loss_scale");
BENCHMARK_CAPTURE(BM_Parser, errors, "errors");
BENCHMARK_CAPTURE(BM_Parser, vllm, "vllm");
BENCHMARK_CAPTURE(BM_Parser, sglang, "sglang");
BENCHMARK_CAPTURE(BM_Parser, generic, "generic");

// (b) Line assembly of block-buffered output: 8 KiB writes, as Python's stdout into a pipe.
void BM_LineAssembler8KiB(benchmark::State& state) {
  const auto& jobs = Jobs();
  std::vector<AssembledLine> out;
  for (auto _ : state) {
    for (const Job& j : jobs) {
      LineAssembler assembler;
      std::string_view text = j.text;
      for (size_t off = 0; off < text.size(); off += 8192) {
        out.clear();
        assembler.Feed(text.substr(off, 8192), static_cast<TimeNs>(off), out);
        benchmark::DoNotOptimize(out.data());
      }
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * TotalBytes()));
}
BENCHMARK(BM_LineAssembler8KiB);

// (c) Redaction, per line (the copy into the line buffer included, as RawRing does it).
void RedactLines(benchmark::State& state, const std::vector<std::string>& lines) {
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  std::string buf;
  size_t found = 0;
  for (auto _ : state) {
    found = 0;
    for (const auto& l : lines) {
      buf.assign(l);
      found += RedactSecrets(buf);
    }
    benchmark::DoNotOptimize(found);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["secrets_per_line"] = static_cast<double>(found) / static_cast<double>(lines.size());
}

void BM_RedactLinesWithoutSecrets(benchmark::State& state) {
  std::vector<std::string> lines;
  for (const Job& j : Jobs()) ForEachLine(j.text, [&](std::string_view l) { lines.emplace_back(l); });
  RedactLines(state, lines);
}
BENCHMARK(BM_RedactLinesWithoutSecrets);

void BM_RedactLinesWithSecrets(benchmark::State& state) {
  Rng rng;
  std::vector<std::string> lines;
  for (int k = 0; k < 10000; ++k) {
    switch (k % 5) {
      case 0:
        lines.push_back(fmt::format("export HF_TOKEN=hf_{:08x}{:08x}{:08x}{:08x}AB", rng.Next(), rng.Next(),
                                    rng.Next(), rng.Next()));
        break;
      case 1:
        lines.push_back(fmt::format("requests: GET https://api.example/v1 headers={{'Authorization': 'Bearer "
                                    "{:08x}{:08x}'}} status=200",
                                    rng.Next(), rng.Next()));
        break;
      case 2:
        lines.push_back(fmt::format("connecting to postgres://trainer:{:08x}@db.internal:5432/runs", rng.Next()));
        break;
      case 3:
        lines.push_back(fmt::format("config: {{'lr': 3e-4, 'wandb_api_key': '{:08x}{:08x}', 'batch_size': 32}}",
                                    rng.Next(), rng.Next()));
        break;
      default:
        lines.push_back(fmt::format("aws_access_key_id=AKIA{:08X}{:08X} region=us-east-1", rng.Next(), rng.Next()));
    }
  }
  RedactLines(state, lines);
}
BENCHMARK(BM_RedactLinesWithSecrets);

}  // namespace
}  // namespace ithbat::bench

BENCHMARK_MAIN();
