// The agent's HTTP layer (serve::HttpBase on libmicrohttpd) against the server it replaced
// (cpp-httplib's, configured as the agent's was: a 4-thread pool, TCP_NODELAY), both on
// loopback, answering the same handler; the client is the same keep-alive httplib::Client. Two
// answers: a small JSON one (/healthz, the shape of most API calls) and a 256 KiB text one (the
// size of a busy node's /metrics). A request is a full round trip, so compare the ratio of the
// two servers in one run, not absolute times.
//
// Run: build/bench/http_bench
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <benchmark/benchmark.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "serve/api.h"
#include "serve/http_base.h"

namespace {

using ithbat::serve::ApiResponse;
using ithbat::serve::HttpBase;
using ithbat::serve::HttpBaseOptions;
using ithbat::serve::HttpRequest;

constexpr int kThreads = 4;

const std::string& Body(size_t bytes) {
  static std::string small = R"({"status":"ok","collectors":[]})";
  static std::string large = [] {
    std::string s;
    while (s.size() < 256 * 1024) s += "ithbat_gpu_utilization_ratio{gpu=\"3\",node=\"gpu-a07\"} 0.97 1733476800000\n";
    return s;
  }();
  return bytes < 1024 ? small : large;
}

class Ours {
 public:
  explicit Ours(size_t bytes) {
    HttpBaseOptions o;
    o.threads = kThreads;
    server_ = std::make_unique<HttpBase>(o);
    server_->Get("/x", "x", [bytes](const HttpRequest&) { return ApiResponse{200, "text/plain", Body(bytes)}; });
    if (!server_->Start()) std::abort();
  }
  uint16_t port() const { return server_->port(); }

 private:
  std::unique_ptr<HttpBase> server_;
};

class Httplib {
 public:
  explicit Httplib(size_t bytes) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
    server_.set_tcp_nodelay(true);
    server_.Get("/x", [bytes](const httplib::Request&, httplib::Response& res) {
      res.set_content(Body(bytes), "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Httplib() {
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return static_cast<uint16_t>(port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

template <class Server>
void BM_Get(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  const size_t bytes = static_cast<size_t>(state.range(0));
  Server server(bytes);
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  size_t got = 0;
  for (auto _ : state) {
    auto res = client.Get("/x");
    if (!res || res->status != 200) {
      state.SkipWithError("request failed");
      break;
    }
    got += res->body.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(got));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Get<Ours>)->Name("HttpGet/libmicrohttpd")->Arg(32)->Arg(256 * 1024)->UseRealTime();
BENCHMARK(BM_Get<Httplib>)->Name("HttpGet/cpp-httplib")->Arg(32)->Arg(256 * 1024)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
