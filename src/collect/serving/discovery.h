#pragma once
// Finding inference servers on the node from their command lines, and the limits they were
// started with. Pure parsing over a NUL-separated /proc/<pid>/cmdline, plus a scanner over a
// proc root. The environment of a process is never read (it holds secrets such as HF_TOKEN),
// so settings given only through environment variables are not seen.
//
// Recognised:
//   vLLM    `vllm serve ...`, `python -m vllm.entrypoints.openai.api_server ...`
//           (also vllm.entrypoints.api_server)
//   SGLang  `python -m sglang.launch_server ...`
//   TGI     `text-generation-launcher ...`, `text-generation-router ...`
// The program is looked for in the first four arguments before the first option (so
// `python3 -m X`, `/venv/bin/vllm serve`, `uv run vllm serve` are found, while a model path or
// a flag value naming "vllm" is not).
//
// Metrics port (where /metrics is scraped):
//   vLLM    --port, default 8000 (metrics are served by the API server)
//   SGLang  --port, default 30000
//   TGI     --prometheus-port when given (newer TGI serves metrics apart from the API, default
//           9000 there, but we cannot tell the version from the command line), else --port,
//           default 80: the official container sets PORT=80 through the environment, which we
//           do not read, and the container is how TGI is run almost everywhere.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::serving {

enum class Engine : uint8_t { kVllm, kSglang, kTgi };
std::string_view EngineName(Engine engine);  // "vllm", "sglang", "tgi"

struct ServerInfo {
  Engine engine = Engine::kVllm;
  int32_t pid = 0;
  uint16_t port = 0;          // the metrics port (see above)
  bool tgi_router = false;    // TGI: the router (serves the metrics) rather than the launcher
  std::string model;          // --model / --model-path / --model-id / the positional of `vllm serve`
  // Limits from flags; absent when the flag is not given (engine defaults vary by version and
  // hardware, so none is invented).
  std::optional<int64_t> max_num_seqs;            // vLLM --max-num-seqs, SGLang --max-running-requests, TGI --max-batch-size
  std::optional<int64_t> max_num_batched_tokens;  // vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, TGI --max-batch-total-tokens
  std::optional<int64_t> max_model_len;           // vLLM --max-model-len, SGLang --context-length, TGI --max-total-tokens
  std::optional<int64_t> tensor_parallel_size;    // --tensor-parallel-size / --tp / --tp-size, TGI --num-shard
  std::optional<int64_t> max_concurrent_requests; // TGI --max-concurrent-requests
  std::optional<bool> prefix_caching;             // --enable-prefix-caching / --no-enable-prefix-caching, SGLang --disable-radix-cache
  std::optional<bool> chunked_prefill;            // --enable-chunked-prefill / --no-enable-chunked-prefill
};

inline constexpr size_t kMaxCmdlineBytes = 64 << 10;

// The server a command line (argv joined by NUL, as in /proc/<pid>/cmdline) starts, or nullopt
// if it is not one. pid is left 0. A flag value that is not a valid number is ignored (the
// server itself would refuse it), and a port outside 1..65535 means "not a server we can
// scrape": nullopt.
std::optional<ServerInfo> ParseServerCmdline(std::string_view cmdline);

// Every server under a proc root (numeric directories with a cmdline), at most max_servers,
// sorted by pid. Processes that vanish or cannot be read while scanning are skipped. One
// server per (engine, port): a vLLM API server's forked workers share its command line, and
// the TGI launcher passes its port to the router; the router, else the lowest pid, is kept.
// Errors: kNotFound/kIo when the root itself cannot be listed.
Result<std::vector<ServerInfo>> ScanServers(const std::filesystem::path& proc_root, size_t max_servers = 64);

// The pieces ScanServers is made of, for a caller that caches by pid: the numeric entries of
// the root (at most max_pids, sorted), and the server a pid runs (nullopt when it is none, has
// exited, or its cmdline cannot be read).
Result<std::vector<int32_t>> ListPids(const std::filesystem::path& proc_root, size_t max_pids = 1 << 20);
std::optional<ServerInfo> ReadServer(const std::filesystem::path& proc_root, int32_t pid);

// Keeps one server per (engine, port) as described above; input in any order, output by pid.
std::vector<ServerInfo> DedupeServers(std::vector<ServerInfo> servers);

}  // namespace ithbat::collect::serving
