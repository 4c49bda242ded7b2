// What an agent answers the hub (and `ithbat record --agent`, `diagnose --agent`) is input from
// another machine: the client must turn any answers into copied data, partial-pull errors or a
// refusal, never a crash, a hang or a log line the size of an answer. The input is a sequence of
// answers, each "@@" + a 3-digit HTTP status + "\n" + body; they are handed out in order to the
// client's requests (metric list, series, events pages, steps, then diagnoses and version), and
// a request past the last answer fails as an unreachable agent.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "remote/agent_client.h"
#include "require.h"
#include "store/store.h"

namespace {

using ithbat::fuzz::Require;
using ithbat::remote::AgentAnswer;

// The answers in the input, in order.
std::vector<AgentAnswer> SplitAnswers(std::string_view in) {
  std::vector<AgentAnswer> out;
  size_t at = in.find("@@");
  while (at != std::string_view::npos && out.size() < 4096) {
    const size_t head = at + 2;
    size_t next = in.find("\n@@", head);
    std::string_view chunk =
        in.substr(head, next == std::string_view::npos ? std::string_view::npos : next - head);
    AgentAnswer a;
    a.status = 200;
    if (chunk.size() >= 3 && chunk[0] >= '1' && chunk[0] <= '5' && chunk[1] >= '0' && chunk[1] <= '9' &&
        chunk[2] >= '0' && chunk[2] <= '9') {
      a.status = (chunk[0] - '0') * 100 + (chunk[1] - '0') * 10 + (chunk[2] - '0');
      chunk.remove_prefix(3);
    }
    if (!chunk.empty() && chunk.front() == '\n') chunk.remove_prefix(1);
    a.body = std::string(chunk);
    out.push_back(std::move(a));
    at = next == std::string_view::npos ? next : next + 1;
  }
  return out;
}

// What a hub does with an error: log it. One must stay a line, whatever the agent sent.
void RequireShort(const std::string& message) {
  Require(message.size() <= 4096, "an error message stays short");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat;
  const std::vector<AgentAnswer> answers =
      SplitAnswers(std::string_view(reinterpret_cast<const char*>(data), size));
  size_t next = 0;
  size_t asked = 0;
  remote::AgentClientOptions options;
  options.max_requests_per_pull = 64;
  options.transport = [&](const std::string& target) -> Result<AgentAnswer> {
    ++asked;
    Require(!target.empty() && target.front() == '/', "a request target is a path");
    if (next >= answers.size()) return MakeError(ErrorCode::kUnavailable, "no more answers");
    return answers[next++];
  };

  auto store = store::Store::Open(store::StoreOptions{});
  Require(store.has_value(), "store opens");
  {
    remote::AgentClient client(options);
    remote::PullStats stats;
    constexpr TimeNs kFrom = 1'700'000'000'000'000'000, kTo = kFrom + 3600 * kNsPerSec;
    Status pulled = client.PullInto(**store, kFrom, kTo, &stats);
    Require(stats.requests <= options.max_requests_per_pull, "a pull keeps to its request budget");
    Require(asked == stats.requests, "every request is counted");
    if (!pulled) RequireShort(pulled.error().message);
    for (const std::string& e : stats.errors) RequireShort(e);
    Require(pulled.has_value() == stats.errors.empty() || !stats.reached, "a pull with errors says so");
    // What was copied is readable back, in time order per series.
    static const store::SeriesSelector every = *store::SeriesSelector::Parse(R"({__name__=~".+"})");
    auto copied = (*store)->Select(every, kMinTime, kMaxTime);
    Require(copied.has_value(), "the copy is readable");
    for (const store::SeriesData& series : *copied) {
      for (size_t i = 1; i < series.samples.size(); ++i) {
        Require(series.samples[i - 1].t < series.samples[i].t, "samples in order");
      }
    }
  }
  // The other calls read what is left, one answer each.
  remote::AgentClient client(options);
  if (auto d = client.Diagnoses(); !d) RequireShort(d.error().message);
  if (auto n = client.NodeName(); !n) {
    RequireShort(n.error().message);
  } else {
    Require(n->size() <= 253, "a node name is bounded");
  }
  if (auto h = client.Health(); !h) RequireShort(h.error().message);
  return 0;
}
