// Discovery of inference servers from command lines, and the scanner over a fixture proc tree.
#include "collect/serving/discovery.h"

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "testutil/testutil.h"

namespace ithbat::collect::serving {
namespace {

using ::ithbat::testing::TempDir;

// argv joined by NUL with the trailing NUL the kernel writes.
std::string Cmdline(std::initializer_list<std::string_view> argv) {
  std::string s;
  for (std::string_view a : argv) {
    s.append(a);
    s.push_back('\0');
  }
  return s;
}

TEST(ServingDiscovery, VllmServe) {
  auto s = ParseServerCmdline(Cmdline({"/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", "Qwen/Qwen3-8B",
                                       "--port", "8100", "--max-num-seqs", "256", "--max-num-batched-tokens=8192",
                                       "--max-model-len", "32768", "--tensor-parallel-size", "4",
                                       "--enable-prefix-caching", "--enable-chunked-prefill"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->engine, Engine::kVllm);
  EXPECT_EQ(s->port, 8100);
  EXPECT_EQ(s->model, "Qwen/Qwen3-8B");
  EXPECT_EQ(s->max_num_seqs, 256);
  EXPECT_EQ(s->max_num_batched_tokens, 8192);
  EXPECT_EQ(s->max_model_len, 32768);
  EXPECT_EQ(s->tensor_parallel_size, 4);
  EXPECT_EQ(s->prefix_caching, true);
  EXPECT_EQ(s->chunked_prefill, true);
}

TEST(ServingDiscovery, VllmApiServerModuleDefaults) {
  auto s = ParseServerCmdline(Cmdline({"python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                                       "meta-llama/Llama-3.1-8B-Instruct", "--no-enable-prefix-caching", "--tp", "2"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->engine, Engine::kVllm);
  EXPECT_EQ(s->port, 8000);
  EXPECT_EQ(s->model, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(s->prefix_caching, false);
  EXPECT_EQ(s->tensor_parallel_size, 2);
  EXPECT_FALSE(s->max_num_seqs.has_value());  // no default is invented
  EXPECT_FALSE(s->chunked_prefill.has_value());
}

TEST(ServingDiscovery, Sglang) {
  auto s = ParseServerCmdline(Cmdline({"python3", "-m", "sglang.launch_server", "--model-path",
                                       "deepseek-ai/DeepSeek-R1", "--tp", "8", "--max-running-requests", "64",
                                       "--context-length=16384"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->engine, Engine::kSglang);
  EXPECT_EQ(s->port, 30000);
  EXPECT_EQ(s->model, "deepseek-ai/DeepSeek-R1");
  EXPECT_EQ(s->tensor_parallel_size, 8);
  EXPECT_EQ(s->max_num_seqs, 64);
  EXPECT_EQ(s->max_model_len, 16384);
  s = ParseServerCmdline(Cmdline({"python3", "-m", "sglang.launch_server", "--port=31000", "--disable-radix-cache"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->port, 31000);
  EXPECT_EQ(s->prefix_caching, false);
}

TEST(ServingDiscovery, Tgi) {
  auto launcher = ParseServerCmdline(Cmdline({"text-generation-launcher", "--model-id", "bigscience/bloom-560m",
                                              "--num-shard", "2", "--max-concurrent-requests", "128",
                                              "--max-batch-size", "32"}));
  ASSERT_TRUE(launcher.has_value());
  EXPECT_EQ(launcher->engine, Engine::kTgi);
  EXPECT_FALSE(launcher->tgi_router);
  EXPECT_EQ(launcher->port, 80);
  EXPECT_EQ(launcher->tensor_parallel_size, 2);
  EXPECT_EQ(launcher->max_concurrent_requests, 128);
  EXPECT_EQ(launcher->max_num_seqs, 32);
  auto router = ParseServerCmdline(Cmdline({"/usr/local/bin/text-generation-router", "--port", "3000",
                                            "--prometheus-port", "9000"}));
  ASSERT_TRUE(router.has_value());
  EXPECT_TRUE(router->tgi_router);
  EXPECT_EQ(router->port, 9000);
}

TEST(ServingDiscovery, NotAServer) {
  EXPECT_FALSE(ParseServerCmdline("").has_value());
  EXPECT_FALSE(ParseServerCmdline(Cmdline({"bash"})).has_value());
  EXPECT_FALSE(ParseServerCmdline(Cmdline({"python", "train.py", "--model", "vllm"})).has_value());
  // A flag value that names the module is not the program.
  EXPECT_FALSE(ParseServerCmdline(Cmdline({"python", "bench.py", "--x", "sglang.launch_server"})).has_value());
  EXPECT_FALSE(ParseServerCmdline(Cmdline({"vllm", "bench", "serve"})).has_value());
  // A port out of range cannot be scraped.
  EXPECT_FALSE(ParseServerCmdline(Cmdline({"vllm", "serve", "m", "--port", "70000"})).has_value());
  // Garbage values are ignored, the server is still found with its default port.
  auto s = ParseServerCmdline(Cmdline({"vllm", "serve", "m", "--port", "abc", "--max-num-seqs", "-3"}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->port, 8000);
  EXPECT_FALSE(s->max_num_seqs.has_value());
  // No trailing NUL, embedded junk, a huge cmdline: no crash.
  EXPECT_TRUE(ParseServerCmdline(std::string("vllm\0serve", 10)).has_value());
  std::string huge = Cmdline({"vllm", "serve"}) + std::string(1 << 20, '\0');
  EXPECT_TRUE(ParseServerCmdline(huge).has_value());
}

TEST(ServingDiscovery, ScanFixtureTreeDedupes) {
  TempDir proc;
  proc.WriteFile("100/cmdline", Cmdline({"vllm", "serve", "m", "--port", "8001"}));
  proc.WriteFile("101/cmdline", Cmdline({"vllm", "serve", "m", "--port", "8001"}));  // forked worker
  proc.WriteFile("200/cmdline", Cmdline({"text-generation-launcher", "--port", "3000"}));
  proc.WriteFile("201/cmdline", Cmdline({"text-generation-router", "--port", "3000"}));
  proc.WriteFile("300/cmdline", Cmdline({"sleep", "100"}));
  proc.WriteFile("400/status", "no cmdline here");
  proc.WriteFile("self/cmdline", Cmdline({"vllm", "serve"}));  // not numeric
  proc.WriteFile("meminfo", "MemTotal: 1 kB\n");
  auto servers = ScanServers(proc.path());
  ASSERT_TRUE(servers.has_value()) << servers.error().message;
  ASSERT_EQ(servers->size(), 2u);
  EXPECT_EQ((*servers)[0].pid, 100);
  EXPECT_EQ((*servers)[0].port, 8001);
  EXPECT_EQ((*servers)[1].pid, 201);  // the router, not the launcher
  EXPECT_TRUE((*servers)[1].tgi_router);
  EXPECT_EQ(ScanServers(proc.path() / "missing").error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ithbat::collect::serving
