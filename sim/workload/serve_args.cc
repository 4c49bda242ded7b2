#include "workload/serve_args.h"

#include <algorithm>
#include <charconv>

#include <fmt/core.h>

namespace ithbat::sim::workload {
namespace {

std::optional<int64_t> ToInt(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

Result<ServeArgs> ParseServeArgs(std::span<const std::string_view> argv) {
  ServeArgs a;
  size_t i = 1;
  if (argv.size() > 1 && argv[1] == "serve") {
    i = 2;
    if (argv.size() > 2 && !argv[2].starts_with("-")) {
      a.model = std::string(argv[2]);
      i = 3;
    }
  } else if (argv.size() > 2 && argv[1] == "-m") {
    i = 3;  // python -m vllm.entrypoints.openai.api_server
  }
  std::optional<std::string> flag_model;
  for (; i < argv.size(); ++i) {
    std::string_view arg = argv[i];
    if (!arg.starts_with("-") || arg == "-" || arg == "--") continue;
    std::string_view body = arg.substr(arg.starts_with("--") ? 2 : 1);
    std::optional<std::string_view> value;
    bool inline_value = false;
    if (const size_t eq = body.find('='); eq != std::string_view::npos) {
      value = body.substr(eq + 1);
      body = body.substr(0, eq);
      inline_value = true;
    }
    std::string name(body);
    std::replace(name.begin(), name.end(), '_', '-');
    auto take = [&]() -> Result<std::string_view> {
      if (value) return *value;
      if (i + 1 < argv.size() && !argv[i + 1].starts_with("--")) return argv[++i];
      return MakeErrorF(ErrorCode::kInvalidArgument, "{}: expected a value", arg.substr(0, 64));
    };
    auto number = [&]() -> Result<int64_t> {
      auto v = take();
      if (!v) return std::unexpected(v.error());
      auto n = ToInt(*v);
      if (!n)
        return MakeErrorF(ErrorCode::kInvalidArgument, "{}: invalid int value '{}'", arg.substr(0, 64),
                          v->substr(0, 64));
      return *n;
    };
    auto boolean = [&](bool when_bare) -> Result<bool> {
      if (!inline_value) return when_bare;
      if (*value == "true" || *value == "True" || *value == "1") return when_bare;
      if (*value == "false" || *value == "False" || *value == "0") return !when_bare;
      return MakeErrorF(ErrorCode::kInvalidArgument, "{}: not a boolean", arg.substr(0, 64));
    };
    auto set_int = [&](std::optional<int64_t>& out) -> Status {
      auto n = number();
      if (!n) return std::unexpected(n.error());
      out = *n;
      return Ok();
    };
    auto set_bool = [&](std::optional<bool>& out, bool when_bare) -> Status {
      auto b = boolean(when_bare);
      if (!b) return std::unexpected(b.error());
      out = *b;
      return Ok();
    };
    Status st = Ok();
    if (name == "spec") {
      auto v = take();
      if (!v) return std::unexpected(v.error());
      a.spec_path = std::string(*v);
    } else if (name == "host") {
      auto v = take();
      if (!v) return std::unexpected(v.error());
      a.host = std::string(*v);
    } else if (name == "model") {
      auto v = take();
      if (!v) return std::unexpected(v.error());
      flag_model = std::string(*v);
    } else if (name == "served-model-name") {
      auto v = take();
      if (!v) return std::unexpected(v.error());
      a.served_model_name = std::string(*v);
      while (i + 1 < argv.size() && !argv[i + 1].starts_with("-"))
        ++i;  // nargs='+': the first names the label
    } else if (name == "port") {
      st = set_int(a.port);
    } else if (name == "max-num-seqs") {
      st = set_int(a.max_num_seqs);
    } else if (name == "tensor-parallel-size" || name == "tp") {
      st = set_int(a.tensor_parallel_size);
    } else if (name == "data-parallel-size" || name == "dp") {
      st = set_int(a.data_parallel_size);
    } else if (name == "max-model-len") {
      st = set_int(a.max_model_len);
    } else if (name == "max-num-batched-tokens") {
      st = set_int(a.max_num_batched_tokens);
    } else if (name == "block-size") {
      st = set_int(a.block_size);
    } else if (name == "enable-prefix-caching") {
      st = set_bool(a.prefix_caching, true);
    } else if (name == "no-enable-prefix-caching") {
      st = set_bool(a.prefix_caching, false);
    } else if (name == "enable-chunked-prefill") {
      st = set_bool(a.chunked_prefill, true);
    } else if (name == "no-enable-chunked-prefill") {
      st = set_bool(a.chunked_prefill, false);
    } else if (!value && i + 1 < argv.size() && !argv[i + 1].starts_with("-")) {
      ++i;  // an option we do not model, with its value
    }
    if (!st) return std::unexpected(st.error());
  }
  if (!a.model && flag_model) a.model = flag_model;
  return a;
}

Status ApplyServeArgs(const ServeArgs& a, ServeSpec* s) {
  auto in = [](std::optional<int64_t> v, int64_t lo, int64_t hi, const char* flag) -> Status {
    if (v && (*v < lo || *v > hi))
      return MakeErrorF(ErrorCode::kInvalidArgument, "{} {} outside [{}, {}]", flag, *v, lo, hi);
    return Ok();
  };
  for (Status st : {in(a.port, 1, 65535, "--port"), in(a.max_num_seqs, 1, kMaxServeSlots, "--max-num-seqs"),
                    in(a.tensor_parallel_size, 1, kMaxServeGpus, "--tensor-parallel-size"),
                    in(a.data_parallel_size, 1, kMaxServeGpus, "--data-parallel-size"),
                    in(a.max_model_len, 2, kMaxKvTokens, "--max-model-len"),
                    in(a.max_num_batched_tokens, 1, kMaxKvTokens, "--max-num-batched-tokens"),
                    in(a.block_size, 1, 1024, "--block-size")}) {
    if (!st) return st;
  }
  if (a.model) s->model = *a.model;
  if (a.served_model_name) s->served_model_name = *a.served_model_name;
  if (a.port) s->port = *a.port;
  if (a.max_num_seqs) s->slots = *a.max_num_seqs;
  if (a.tensor_parallel_size) s->tensor_parallel = *a.tensor_parallel_size;
  if (a.data_parallel_size) s->gpus = s->tensor_parallel * *a.data_parallel_size;
  if (a.max_model_len) s->max_model_len = *a.max_model_len;
  if (a.max_num_batched_tokens) s->max_num_batched_tokens = *a.max_num_batched_tokens;
  if (a.block_size) s->block_size = *a.block_size;
  if (a.prefix_caching) s->prefix_caching = *a.prefix_caching;
  if (a.chunked_prefill) s->chunked_prefill = *a.chunked_prefill;
  if (s->gpus > kMaxServeGpus)
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} GPUs (tensor × data parallel) over {}", s->gpus,
                      kMaxServeGpus);
  if (s->gpus % s->tensor_parallel != 0)
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "--tensor-parallel-size {} does not divide the server's {} GPUs", s->tensor_parallel,
                      s->gpus);
  if (s->kv_capacity_tokens < s->block_size)
    return MakeErrorF(ErrorCode::kInvalidArgument, "--block-size {} over the KV capacity {}", s->block_size,
                      s->kv_capacity_tokens);
  return Ok();
}

}  // namespace ithbat::sim::workload
