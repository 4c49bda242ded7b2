#include "collect/serving/discovery.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <system_error>
#include <utility>

#include "core/file_util.h"

namespace ithbat::collect::serving {
namespace {

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::optional<int64_t> ToInt(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<Engine> ProgramOf(const std::vector<std::string_view>& argv, bool* tgi_router, size_t* vllm_serve_at) {
  const size_t n = std::min<size_t>(argv.size(), 4);
  for (size_t i = 0; i < n; i++) {
    const std::string_view a = argv[i];
    if (a.starts_with("--")) break;
    const std::string_view base = BaseName(a);
    if (base == "vllm" && i + 1 < argv.size() && argv[i + 1] == "serve") {
      *vllm_serve_at = i + 1;
      return Engine::kVllm;
    }
    if (a == "vllm.entrypoints.openai.api_server" || a == "vllm.entrypoints.api_server") return Engine::kVllm;
    if (a == "sglang.launch_server") return Engine::kSglang;
    if (base == "text-generation-launcher") return Engine::kTgi;
    if (base == "text-generation-router") {
      *tgi_router = true;
      return Engine::kTgi;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view EngineName(Engine engine) {
  switch (engine) {
    case Engine::kVllm: return "vllm";
    case Engine::kSglang: return "sglang";
    case Engine::kTgi: return "tgi";
  }
  return "unknown";
}

std::optional<ServerInfo> ParseServerCmdline(std::string_view cmdline) {
  if (cmdline.size() > kMaxCmdlineBytes) cmdline = cmdline.substr(0, kMaxCmdlineBytes);
  std::vector<std::string_view> argv;
  while (!cmdline.empty() && argv.size() < 4096) {
    const size_t nul = cmdline.find('\0');
    argv.push_back(cmdline.substr(0, nul));
    if (nul == std::string_view::npos) break;
    cmdline.remove_prefix(nul + 1);
  }
  ServerInfo info;
  size_t vllm_serve_at = 0;
  const std::optional<Engine> engine = ProgramOf(argv, &info.tgi_router, &vllm_serve_at);
  if (!engine) return std::nullopt;
  info.engine = *engine;
  if (vllm_serve_at > 0 && vllm_serve_at + 1 < argv.size() && !argv[vllm_serve_at + 1].starts_with("-")) {
    info.model = std::string(argv[vllm_serve_at + 1]);
  }

  std::optional<int64_t> port, prometheus_port;
  for (size_t i = 0; i < argv.size(); i++) {
    std::string_view flag = argv[i];
    if (!flag.starts_with("--")) continue;
    std::optional<std::string_view> value;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); eq != std::string_view::npos) {
      inline_value = true;
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argv.size() && !argv[i + 1].starts_with("--")) {
      value = argv[i + 1];  // only consumed by flags that take one
    }
    // Command-line spellings: vLLM and SGLang accept both '-' and '_' in flag names.
    std::string name(flag.substr(2));
    std::replace(name.begin(), name.end(), '_', '-');
    auto number = [&]() { return value ? ToInt(*value) : std::nullopt; };
    auto boolean = [&](bool when_bare) -> std::optional<bool> {
      // BooleanOptionalAction flags are bare; a few older ones take true/false.
      if (!inline_value) return when_bare;
      if (*value == "true" || *value == "True" || *value == "1") return when_bare;
      if (*value == "false" || *value == "False" || *value == "0") return !when_bare;
      return std::nullopt;
    };
    if (name == "port") {
      port = number();
    } else if (name == "prometheus-port" && info.engine == Engine::kTgi) {
      prometheus_port = number();
    } else if (name == "model" || name == "model-path" || name == "model-id") {
      if (value) info.model = std::string(*value);
    } else if (name == "max-num-seqs" || name == "max-running-requests" || name == "max-batch-size") {
      if (auto v = number()) info.max_num_seqs = v;
    } else if (name == "max-num-batched-tokens" || name == "chunked-prefill-size" || name == "max-batch-total-tokens") {
      if (auto v = number()) info.max_num_batched_tokens = v;
    } else if (name == "max-model-len" || name == "context-length" || name == "max-total-tokens") {
      if (auto v = number()) info.max_model_len = v;
    } else if (name == "tensor-parallel-size" || name == "tp" || name == "tp-size" || name == "num-shard") {
      if (auto v = number()) info.tensor_parallel_size = v;
    } else if (name == "max-concurrent-requests") {
      if (auto v = number()) info.max_concurrent_requests = v;
    } else if (name == "enable-prefix-caching") {
      info.prefix_caching = boolean(true);
    } else if (name == "no-enable-prefix-caching" || name == "disable-radix-cache") {
      info.prefix_caching = boolean(false);
    } else if (name == "enable-chunked-prefill") {
      info.chunked_prefill = boolean(true);
    } else if (name == "no-enable-chunked-prefill") {
      info.chunked_prefill = boolean(false);
    }
  }
  int64_t p = 0;
  switch (info.engine) {
    case Engine::kVllm: p = port.value_or(8000); break;
    case Engine::kSglang: p = port.value_or(30000); break;
    case Engine::kTgi: p = prometheus_port ? *prometheus_port : port.value_or(80); break;
  }
  if (p < 1 || p > 65535) return std::nullopt;
  info.port = static_cast<uint16_t>(p);
  return info;
}

Result<std::vector<int32_t>> ListPids(const std::filesystem::path& proc_root, size_t max_pids) {
  std::error_code ec;
  std::filesystem::directory_iterator it(proc_root, ec);
  if (ec) {
    return MakeErrorF(ec == std::errc::no_such_file_or_directory ? ErrorCode::kNotFound : ErrorCode::kIo,
                      "cannot list {}: {}", proc_root.string(), ec.message());
  }
  std::vector<int32_t> pids;
  for (; it != std::filesystem::directory_iterator() && pids.size() < max_pids; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    int32_t pid = 0;
    auto [end, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (perr == std::errc() && end == name.data() + name.size() && pid > 0) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::optional<ServerInfo> ReadServer(const std::filesystem::path& proc_root, int32_t pid) {
  std::string cmdline;
  // A cmdline longer than the bound is cut, not refused: the program comes first.
  Status s = ReadFileBoundedInto(proc_root / std::to_string(pid) / "cmdline", kMaxCmdlineBytes * 4, &cmdline);
  if (!s) return std::nullopt;
  std::optional<ServerInfo> info = ParseServerCmdline(cmdline);
  if (info) info->pid = pid;
  return info;
}

std::vector<ServerInfo> DedupeServers(std::vector<ServerInfo> servers) {
  std::map<std::pair<Engine, uint16_t>, ServerInfo> best;
  for (ServerInfo& s : servers) {
    auto [it, inserted] = best.try_emplace({s.engine, s.port}, s);
    if (inserted) continue;
    ServerInfo& have = it->second;
    const bool better = (s.tgi_router && !have.tgi_router) || (s.tgi_router == have.tgi_router && s.pid < have.pid);
    if (better) have = std::move(s);
  }
  std::vector<ServerInfo> out;
  out.reserve(best.size());
  for (auto& [key, s] : best) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const ServerInfo& a, const ServerInfo& b) { return a.pid < b.pid; });
  return out;
}

Result<std::vector<ServerInfo>> ScanServers(const std::filesystem::path& proc_root, size_t max_servers) {
  auto pids = ListPids(proc_root);
  if (!pids) return std::unexpected(pids.error());
  std::vector<ServerInfo> found;
  for (int32_t pid : *pids) {
    if (auto info = ReadServer(proc_root, pid)) found.push_back(std::move(*info));
  }
  std::vector<ServerInfo> out = DedupeServers(std::move(found));
  if (out.size() > max_servers) out.resize(max_servers);
  return out;
}

}  // namespace ithbat::collect::serving
