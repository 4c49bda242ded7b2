#pragma once
// Parsers of a job's own output: one line in, typed events out. No I/O and no clock here —
// the capture (eBPF or file tail) assembles lines and stamps times; these functions only read
// text, so every rule is tested on strings, fuzzed, and run by `ithbat parse` exactly as the
// agent runs it.
//
// Three roles:
//   * framework parsers (HF Trainer, Megatron, torchtitan, ...): the job's progress — step,
//     loss, lr, grad-norm, throughput, checkpoints, evals. One of them "owns" a stream once it
//     has recognised a line (auto-detection, see StreamParser).
//   * always-on parsers: error classes (CUDA OOM, NCCL watchdog, NaN loss, ...), the DeepSpeed
//     / apex loss scaler, inference-server stats lines (vLLM, SGLang). They run on every line
//     whatever the framework, because any job can print them.
//   * the generic `key: value` / `key=value` parser, used only while no framework owns the
//     stream, and user pattern sets (RE2 with named groups, loaded from a file).
//
// Hot path: a parser sees every line of every tracked process. Each parser rejects a line that
// is not its own with a cheap test (a memchr / substring check on an anchor) before any regex,
// and allocates nothing for a rejected line. No std::regex anywhere.
//
// Bounds: lines reach a parser already cut to kMaxLineBytes by the line assembler; a parser
// never keeps more than O(1) state per stream (a few numbers, no history of lines), and emits
// at most kMaxEventsPerLine events per line.
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/event.h"
#include "core/result.h"

namespace ithbat::collect::joblog {

inline constexpr size_t kMaxLineBytes = 16 * 1024;
inline constexpr size_t kMaxEventsPerLine = 32;
inline constexpr size_t kMaxEventTextBytes = 512;  // error excerpts are cut to this

// One value a line carried. Field use by kind (the names are the documented vocabulary of
// docs/joblog.md; parsers map each framework's spelling onto them):
//   kStep           step = the step the line reports as completed (global step, 1-based as
//                   the framework prints it); value = seconds per step if printed;
//                   attrs: total_steps, epoch (when printed). A Lightning bar without
//                   global_step= gives a derived batch index instead (lightning.cc), with attrs
//                   epoch, batch, epoch_batches, source=bar
//   kLoss           the training loss of that step: name "loss"; value may be NaN/Inf
//   kTrainMetric    name in: lr, grad_norm, loss_scale, tokens_per_second, samples_per_second,
//                   step_time_seconds, mfu, tflops, epoch, consumed_samples, skipped_iterations,
//                   nan_iterations, memory_bytes, or "loss_<part>" for extra losses
//                   (loss_mtp_1, loss_load_balancing); unknown keys of the generic parser keep
//                   their own snake_case name
//   kEvalMetric     name = "eval_loss", "eval_accuracy", ... (prefix eval_ always)
//   kCheckpointBegin / kCheckpointEnd
//                   attrs: path (when printed), bytes (when printed), async ("1" for async
//                   saves); step = iteration when printed
//   kError          name = one of the classes below; text = the line (cut); attrs per class
//                   (op_type, seq, timeout_ms, exit_code, local_rank, pid, signal, gpu, ...)
//   kServingMetric  name in: prompt_tokens_per_second, generation_tokens_per_second,
//                   running_requests, waiting_requests, swapped_requests,
//                   kv_cache_usage_ratio, cpu_kv_cache_usage_ratio, prefix_cache_hit_ratio,
//                   cpu_prefix_cache_hit_ratio, external_prefix_cache_hit_ratio,
//                   batch_size (SGLang #running-req), queued_requests, token_usage_ratio,
//                   new_tokens, cached_tokens, ... ; attrs: engine ("vllm_v0", "vllm_v1",
//                   "sglang"), phase ("prefill"/"decode") where the line says
struct ParsedEvent {
  EventKind kind = EventKind::kLogLine;
  int64_t step = -1;
  double value = std::nan("");
  std::string name;
  std::string text;
  std::vector<std::pair<std::string, std::string>> attrs;
  // The rank a prefix in the line names ("[rank3]:", "[default3]:", "3: "), -1 when the line
  // has none (then the line belongs to the rank of the process that wrote it).
  int32_t rank = -1;

  friend bool operator==(const ParsedEvent& a, const ParsedEvent& b);  // NaN == NaN
};

// Error classes (kError names). Closed set, documented in docs/joblog.md.
inline constexpr std::string_view kErrorCudaOom = "cuda_oom";
inline constexpr std::string_view kErrorNanLoss = "nan_loss";             // loss printed as nan/inf
inline constexpr std::string_view kErrorGradOverflow = "grad_overflow";   // fp16 scaler skipped a step
inline constexpr std::string_view kErrorLossScaleMin = "loss_scale_min";  // scaler hit its floor
// A Megatron iteration line without its mean loss although every iteration of the interval
// advanced ("number of skipped iterations: 0", nan counter 0 or absent): the mean was NaN or <= 0
// and Megatron dropped the field instead of printing it (megatron.cc). attrs: grad_norm (as
// printed, "nan" for a NaN).
inline constexpr std::string_view kErrorLossMissing = "loss_missing";
inline constexpr std::string_view kErrorNcclTimeout = "nccl_timeout";     // watchdog: seq, op_type, timeout_ms
inline constexpr std::string_view kErrorNcclWatchdogStuck = "nccl_watchdog_stuck";  // heartbeat monitor
inline constexpr std::string_view kErrorNcclWarn = "nccl_warn";  // "NCCL WARN ..." (other than below)
// A NCCL WARN of the network transport: an InfiniBand/RoCE work completion with an error status,
// or a socket transport failure. attr `suspect` says what the status points at (errors.cc).
inline constexpr std::string_view kErrorNcclNetError = "nccl_net_error";
inline constexpr std::string_view kErrorNcclError = "nccl_error";         // ncclUnhandledCudaError, ncclSystemError, ...
inline constexpr std::string_view kErrorElasticFailure = "elastic_failure";  // torchrun: exit_code, local_rank, pid
inline constexpr std::string_view kErrorPythonTraceback = "python_traceback";  // "Traceback (most recent call last):"
inline constexpr std::string_view kErrorEccUncorrectable = "ecc_uncorrectable";  // CUDA error reported by the app
inline constexpr std::string_view kErrorNvlinkUncorrectable = "nvlink_uncorrectable";
inline constexpr std::string_view kErrorCudaError = "cuda_error";         // other sticky CUDA errors

// A line as the capture delivered it: no trailing newline, ANSI escapes removed, carriage-
// return progress segments delivered one by one with `progress` set.
struct LineFacts;  // scan.h: what every parser's first test needs, computed once per line
struct LineView {
  std::string_view text;
  bool progress = false;  // a \r-terminated segment (tqdm / Lightning bar refresh)
  int fd = 1;             // 1 = stdout, 2 = stderr (a parser may ignore it)
  // Optional, borrowed for the call: LineFacts::Of(text), which lets a parser rule its anchors
  // out with a few bit tests. StreamParser computes them once per line while several parsers
  // share them (auto-detection undecided). Null: each parser runs its own searches (same
  // results, no pre-test). When set, they must be the facts of this very `text`.
  const LineFacts* facts = nullptr;
};

// One parser of one family, with its per-stream state (HF Trainer derives the step from the
// progress bar; Megatron remembers the last iteration for its checkpoint lines). A stream is
// one process: stdout and stderr share one instance, because frameworks split their output
// between the two (tqdm on stderr, dicts on stdout).
class FormatParser {
 public:
  virtual ~FormatParser() = default;
  virtual std::string_view name() const = 0;  // "hf_trainer", "megatron", "errors", ...
  // Appends the events of `line` to `out` (nothing for a line that is not this format's).
  // Returns true when the line was recognised as this format's (even when it produced no event,
  // e.g. a Megatron header line), which is what auto-detection counts.
  virtual bool Parse(const LineView& line, std::vector<ParsedEvent>& out) = 0;
};

// The families, by name. Framework parsers own a stream; the others always run.
enum class ParserRole : uint8_t { kFramework, kAlwaysOn, kGeneric };
struct ParserInfo {
  std::string_view name;
  ParserRole role;
  std::string_view description;  // one line for `ithbat parse --list`
  std::unique_ptr<FormatParser> (*make)();
};
// Every built-in parser, in detection order (registry.cc).
const std::vector<ParserInfo>& BuiltinParsers();
const ParserInfo* FindParser(std::string_view name);

// ---- built-in factories (one .cc per family in this folder) ----
std::unique_ptr<FormatParser> MakeHfTrainerParser();     // hf_trainer.cc
std::unique_ptr<FormatParser> MakeMegatronParser();      // megatron.cc (Megatron-LM, -DeepSpeed, -Core/Bridge)
std::unique_ptr<FormatParser> MakeLightningParser();     // lightning.cc (PyTorch Lightning bars, NeMo 1.x)
std::unique_ptr<FormatParser> MakeNemo2Parser();         // nemo2.cc (nemo.lightning text logger)
std::unique_ptr<FormatParser> MakeTorchtitanParser();    // torchtitan.cc
std::unique_ptr<FormatParser> MakeNanoGptParser();       // nanogpt.cc
std::unique_ptr<FormatParser> MakeFairseqParser();       // fairseq.cc
std::unique_ptr<FormatParser> MakeMmengineParser();      // mmengine.cc (mmengine LogProcessor, mmcv 1.x)
std::unique_ptr<FormatParser> MakeLossScaleParser();     // loss_scale.cc (DeepSpeed, apex, Megatron fp16)
std::unique_ptr<FormatParser> MakeErrorParser();         // errors.cc (every error class above)
std::unique_ptr<FormatParser> MakeVllmParser();          // serving.cc
std::unique_ptr<FormatParser> MakeSglangParser();        // serving.cc
std::unique_ptr<FormatParser> MakeGenericParser();       // generic.cc

// ---- user pattern sets (user_patterns.cc) ----
// A file of pattern sets that users write without recompiling (JSON, docs/joblog.md):
//   {"pattern_sets": [{"name": "mytrainer",
//                      "patterns": [{"regex": "step (?P<step>\\d+) .*loss=(?P<loss>\\S+)"},
//                                   {"regex": "saved to (?P<path>\\S+)", "event": "checkpoint_end"},
//                                   {"regex": "FATAL: (?P<text>.*)", "event": "error", "class": "my_fatal"}]}]}
// Named groups map to events by name: step → kStep, loss → kLoss, eval_* → kEvalMetric,
// path/bytes/text → attributes of the pattern's `event`, any other numeric group →
// kTrainMetric of that name. A set with a bad regex, an unknown event or group, or too many
// patterns is refused with the set, pattern index and reason. Bounded: ≤64 sets, ≤64 patterns
// per set, regex ≤1 KiB, file ≤1 MiB.
struct PatternSet;  // compiled; opaque
class UserPatterns {
 public:
  static Result<UserPatterns> Parse(std::string_view json_text);
  static Result<UserPatterns> Load(const std::string& path);
  UserPatterns();
  ~UserPatterns();
  UserPatterns(UserPatterns&&) noexcept;
  UserPatterns& operator=(UserPatterns&&) noexcept;
  std::vector<std::string> names() const;
  // A parser running every set (role kFramework: a user set that matches owns the stream).
  // The parser shares the compiled sets; `this` may be destroyed after.
  std::unique_ptr<FormatParser> MakeParser() const;

 private:
  std::vector<std::shared_ptr<const PatternSet>> sets_;
};

// ---- the per-stream orchestrator (stream_parser.cc) ----
struct StreamParserOptions {
  // "auto" (default), or one framework's name: only that framework parser runs (always-on
  // parsers still run). "none": always-on parsers only.
  std::string format = "auto";
  // The process's command line (argv joined by spaces), a hint for auto-detection:
  // "megatron" / "pretrain_gpt" → megatron, "torchtitan" → torchtitan, "fairseq-train" →
  // fairseq, "vllm" → vllm ... A hint orders the candidates; the lines still decide.
  std::string command_line;
  const UserPatterns* user_patterns = nullptr;  // optional; copied into the stream's parsers
};

// All parsers for one stream (one process). Auto-detection: until a framework parser
// recognises a line, every framework parser (hinted ones first) and the generic parser see
// each line; the first framework to recognise 2 lines owns the stream, and from then on only
// it (plus the always-on parsers) runs. A user pattern set that matches owns the stream the
// same way and wins over built-ins. Events are de-duplicated within a line (two parsers
// reporting the same kind, name and step), and a line stamped with a step whose events equal a
// line's of the last 512 is a copy (ranks merged into one stream): it gives nothing.
class StreamParser {
 public:
  static Result<StreamParser> Create(StreamParserOptions options);  // kInvalidArgument: unknown format
  StreamParser(StreamParser&&) noexcept;
  StreamParser& operator=(StreamParser&&) noexcept;
  ~StreamParser();

  // Appends the events of one line to `out`. Never fails; a line that no parser knows adds
  // nothing.
  void Parse(const LineView& line, std::vector<ParsedEvent>& out);

  // The framework that owns the stream ("" while undecided).
  std::string_view framework() const;
  uint64_t lines() const;
  uint64_t recognised_lines() const;
  // Lines dropped as copies of a recent line of the stream (see CopyOf in stream_parser.cc).
  uint64_t copies() const;

 private:
  StreamParser();
  struct State;
  static bool CopyOf(State& st, const std::vector<ParsedEvent>& out, size_t base);
  std::unique_ptr<State> state_;
};

// "nan", "NaN", "nan.0" (NeMo 2), "inf", "-inf", "Infinity" → the IEEE value; ordinary decimal
// and scientific numbers; nullopt otherwise. Shared by every parser so that NaN spellings are
// handled once.
std::optional<double> ParseNumber(std::string_view text);

}  // namespace ithbat::collect::joblog
