#pragma once
// The command line of the simulated inference server. The runner starts it as vLLM is started
// (through a symlink named `vllm`), so the agent's discovery (src/collect/serving/discovery.h)
// finds it by its command line and reads its limits from the same flags the program obeys:
//
//   vllm serve MODEL [--port P] [--max-num-seqs S] [--tensor-parallel-size T] ...
//   python -m vllm.entrypoints.openai.api_server --model MODEL [flags]   (argv[1] == "-m")
//   ithbat-sim-serve --spec FILE [flags]
//
// The spec (--spec FILE, else the environment's ITHBAT_SIM_SPEC, else built-in defaults) gives
// everything vLLM has no flag for (arrival rate, request sizes, costs, engine, seed); the vLLM
// flags below override its fields. Flag names take '-' or '_' and `--flag=value` or
// `--flag value`, like vLLM's argparse. Other flags are accepted and ignored (with the value
// that follows them when it does not start with '-').
//
//   --spec FILE                  the ServeSpec JSON
//   --host H                     listen address (default 127.0.0.1)
//   --port P                     port
//   --model M                    model (the positional of `vllm serve` wins)
//   --served-model-name N        the model_name label
//   --max-num-seqs S             slots
//   --tensor-parallel-size T, -tp T      tensor_parallel (gpus stays, must be a multiple)
//   --data-parallel-size D, -dp D        replicas: gpus = T × D
//   --max-model-len L            max_model_len
//   --max-num-batched-tokens B   max_num_batched_tokens
//   --block-size B               block_size
//   --[no-]enable-prefix-caching, --[no-]enable-chunked-prefill
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"
#include "workload/serve_spec.h"

namespace ithbat::sim::workload {

struct ServeArgs {
  std::string spec_path;
  std::string host = "127.0.0.1";
  std::optional<std::string> model, served_model_name;
  std::optional<int64_t> port, max_num_seqs, tensor_parallel_size, data_parallel_size, max_model_len,
      max_num_batched_tokens, block_size;
  std::optional<bool> prefix_caching, chunked_prefill;
};

// argv[0] included. kInvalidArgument for a flag value that is not a number where one is needed,
// or a flag that needs a value and has none.
Result<ServeArgs> ParseServeArgs(std::span<const std::string_view> argv);
// The flags applied to a spec, validated again (kInvalidArgument naming the flag).
Status ApplyServeArgs(const ServeArgs& args, ServeSpec* spec);

}  // namespace ithbat::sim::workload
