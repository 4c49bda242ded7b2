// The hub over two real agent HTTP servers (serve::HttpServer on loopback) built from synthetic
// stores: one NFS mount slows the checkpoints of job j1 on node n1 and of job j2 on node n2. Each
// agent alone sees its own job's storage stall; only the union of both nodes shows that the
// mount hurts both jobs (blast radius: other_jobs). Then one agent goes away: the hub keeps
// answering, reports it down and its node stale, and the diagnosis keeps its last state.
#include "hub/hub.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "detect/fleet_view.h"
#include "hub/hub_server.h"
#include "investigate/diagnosis_json.h"
#include "investigate/investigator.h"
#include "notify/webhook.h"
#include "serve/http_server.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::hub {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testutil::kS;
using testutil::kT0;
using testutil::SyntheticFleet;

constexpr TimeNs kNow = kT0 + 119 * kS;

testutil::Labels With(testutil::Labels l, const testutil::Labels& more) {
  l.insert(l.end(), more.begin(), more.end());
  return l;
}

// A 2-rank training job on `node` (as tests/detect/stalls_inference_network_test.cc builds
// them): GPUs busy 0.9 except during its saves every 20 s from 20 s, each save one write, one
// fsync and one close per rank on the NFS mount /mnt/projects; the first two saves healthy
// (fsync 0.2 s, 1 s stall), the next three slow (fsync 2 s, 4 s stall). Checkpoint events from
// rank 0's output.
void AddCheckpointingJob(SyntheticFleet& f, const std::string& job, const std::string& node) {
  struct Save {
    int begin, end;
    double fsync;
  };
  std::vector<Save> saves;
  for (int k = 0; k < 5; ++k) {
    const int begin = 20 + 20 * k, stall = k >= 2 ? 4 : 1;
    saves.push_back({begin, begin + stall, k >= 2 ? 2.0 : 0.2});
  }
  constexpr int kSeconds = 120;
  for (int r = 0; r < 2; ++r) {
    const int pid = 100 + r;
    const testutil::Labels id = {{"job_id", job},
                                 {"rank", std::to_string(r)},
                                 {"local_rank", std::to_string(r)},
                                 {"world_size", "2"},
                                 {"pid", std::to_string(pid)},
                                 {"gpu", std::to_string(r)},
                                 {"gpu_uuid", node + "-GPU-" + std::to_string(r)}};
    std::vector<double> util, launches, on, sleep, children;
    double l = 0, ch = 0;
    for (int i = 0; i < kSeconds; ++i) {
      bool stalled = false;
      for (const Save& s : saves) stalled = stalled || (i >= s.begin && i < s.end);
      util.push_back(stalled ? 0.0 : 0.9);
      l += stalled ? 0 : 500;
      launches.push_back(l);
      on.push_back(0.2);
      sleep.push_back(0);
      ch += 0.02;
      children.push_back(ch);
    }
    f.Series(node, "ithbat_gpu_utilization_ratio", MetricType::kGauge,
             {{"gpu", std::to_string(r)}, {"gpu_uuid", node + "-GPU-" + std::to_string(r)}}, util);
    f.Series(node, "ithbat_probe_launches_total", MetricType::kCounter, With(id, {{"api", "cuLaunchKernel"}}),
             launches);
    f.Series(node, "ithbat_probe_launch_on_fraction", MetricType::kGauge, id, on);
    f.Series(node, "ithbat_sched_offcpu_seconds_total", MetricType::kCounter,
             With(id, {{"scope", "main"}, {"class", "sleep"}}), sleep);
    f.Series(node, "ithbat_sched_oncpu_seconds_total", MetricType::kCounter,
             With(id, {{"scope", "children"}}), children);
    for (const auto& [op, fixed] :
         std::vector<std::pair<std::string, double>>{{"write", 0.01}, {"fsync", -1}, {"close", 0.001}}) {
      std::vector<double> secs, calls;
      double sv = 0, cv = 0;
      for (int i = 0; i < kSeconds; ++i) {
        for (const Save& s : saves) {
          if (i == s.end) {
            sv += fixed >= 0 ? fixed : s.fsync;
            cv += 1;
          }
        }
        secs.push_back(sv);
        calls.push_back(cv);
      }
      const auto io = With(id, {{"op", op}, {"mount", "/mnt/projects"}, {"fstype", "nfs4"}});
      f.Series(node, "ithbat_io_seconds_total", MetricType::kCounter, io, secs);
      f.Series(node, "ithbat_io_calls_total", MetricType::kCounter, io, calls);
    }
  }
  for (const Save& s : saves) {
    for (EventKind k : {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd}) {
      Event e;
      e.identity.job = job;
      e.identity.rank = 0;
      e.identity.pid = 100;
      e.time = kT0 + (k == EventKind::kCheckpointBegin ? s.begin : s.end) * kS;
      e.kind = k;
      e.source = "joblog";
      e.step = s.begin;
      f.AddEvent(node, e);
    }
  }
}

const Diagnosis* FindStorage(const std::vector<Diagnosis>& ds) {
  for (const auto& d : ds) {
    if (d.cause == Cause::kStorage && d.verdict == Verdict::kInfrastructure) return &d;
  }
  return nullptr;
}

std::set<std::string> JobsOf(const Diagnosis& d) {
  std::set<std::string> out(d.subjects.other_jobs.begin(), d.subjects.other_jobs.end());
  if (!d.subjects.job.empty()) out.insert(d.subjects.job);
  return out;
}

class HubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddCheckpointingJob(fleet_, "j1", "n1");
    AddCheckpointingJob(fleet_, "j2", "n2");
    for (const char* node : {"n1", "n2"}) {
      serve::ServerOptions o;
      o.port = 0;
      auto s = serve::HttpServer::Start(fleet_.Node(node), {}, o);
      ASSERT_TRUE(s.has_value()) << s.error().ToString();
      servers_.push_back(std::move(*s));
    }
  }

  HubOptions Options() const {
    HubOptions o;
    o.agents = {{"n1", "127.0.0.1", servers_[0]->port()}, {"n2", "127.0.0.1", servers_[1]->port()}};
    o.client.connect_timeout = kNsPerSec;
    return o;
  }

  // What one agent's engine concludes from its own store alone (as NodeDiagnoser does).
  std::vector<Diagnosis> NodeLocal(const std::string& node) {
    const detect::FleetView view = detect::FleetView::Borrowing({{node, &fleet_.Node(node)}});
    return investigate::DiagnoseAsOf(view, kNow - 15 * 60 * kS, kNow, {});
  }

  SyntheticFleet fleet_;
  std::vector<std::unique_ptr<serve::HttpServer>> servers_;
};

TEST_F(HubTest, TheUnionOfNodesShowsTheMountHurtingBothJobs) {
  // Each agent alone: its own job's storage stall, naming no other job.
  for (const char* node : {"n1", "n2"}) {
    const auto local = NodeLocal(node);
    const Diagnosis* d = FindStorage(local);
    ASSERT_NE(d, nullptr) << node;
    EXPECT_EQ(JobsOf(*d).size(), 1u) << node;
    EXPECT_TRUE(d->subjects.other_jobs.empty()) << node;
    EXPECT_EQ(d->subjects.nodes, std::vector<std::string>{node});
  }

  auto hub = Hub::Create(Options());
  ASSERT_TRUE(hub.has_value()) << hub.error().ToString();
  ASSERT_TRUE((*hub)->Round(kNow).has_value());
  const auto ds = (*hub)->Current();
  const Diagnosis* d = FindStorage(ds);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(JobsOf(*d), (std::set<std::string>{"j1", "j2"}));
  EXPECT_FALSE(d->subjects.other_jobs.empty());
  EXPECT_EQ(d->subjects.resource, "/mnt/projects");
  std::set<std::string> nodes(d->subjects.nodes.begin(), d->subjects.nodes.end());
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2"}));
  // Exactly one incident for the mount (not one per job).
  EXPECT_EQ(
      std::count_if(ds.begin(), ds.end(), [](const Diagnosis& x) { return x.cause == Cause::kStorage; }), 1);
  for (const auto& x : ds)
    EXPECT_TRUE(investigate::ValidateDiagnosisJson(investigate::ToJson(x)).has_value());
  for (const auto& a : (*hub)->Agents()) {
    EXPECT_TRUE(a.up) << a.target.node << ": " << a.last_error;
    EXPECT_FALSE(a.stale);
    EXPECT_EQ(a.last_error, "");
  }
  EXPECT_TRUE((*hub)->StaleNodes().empty());
}

TEST_F(HubTest, AnAgentThatGoesAwayIsReportedAndItsDiagnosesKeepTheirState) {
  auto hub = Hub::Create(Options());
  ASSERT_TRUE(hub.has_value());
  ASSERT_TRUE((*hub)->Round(kNow).has_value());
  const auto first = (*hub)->Current();
  const Diagnosis* before = FindStorage(first);
  ASSERT_NE(before, nullptr);
  const Diagnosis kept = *before;

  const uint16_t gone_port = servers_[1]->port();
  servers_[1].reset();  // agent n2 stops
  const TimeNs started = MonotonicNowNs();
  ASSERT_TRUE((*hub)->Round(kNow + 10 * kS).has_value());
  EXPECT_LT(MonotonicNowNs() - started, 5 * kNsPerSec);

  const auto agents = (*hub)->Agents();
  ASSERT_EQ(agents.size(), 2u);
  EXPECT_TRUE(agents[0].up);
  EXPECT_FALSE(agents[1].up);
  EXPECT_TRUE(agents[1].stale);
  EXPECT_THAT(agents[1].last_error, HasSubstr("cannot reach the agent"));
  EXPECT_EQ((*hub)->StaleNodes(), std::vector<std::string>{"n2"});

  const auto second = (*hub)->Current();
  const Diagnosis* after = FindStorage(second);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->id, kept.id);
  EXPECT_EQ(after->updated_at, kept.updated_at);
  EXPECT_EQ(after->state, kept.state);

  const json health = json::parse(RenderHubHealth(**hub));
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["stale"], json::array({"n2"}));
  EXPECT_EQ(health["agents"][1]["up"], false);
  EXPECT_EQ(health["rounds"], 2);
  const std::string metrics = RenderHubMetrics(**hub, {});
  EXPECT_THAT(metrics, HasSubstr(fmt::format("ithbat_hub_agent_up{{agent=\"127.0.0.1:{}\",node=\"n2\"}} 0",
                                             gone_port)));
  EXPECT_THAT(metrics, HasSubstr(fmt::format("ithbat_hub_agent_up{{agent=\"127.0.0.1:{}\",node=\"n1\"}} 1",
                                             servers_[0]->port())));
  EXPECT_THAT(metrics,
              HasSubstr(fmt::format(
                  "ithbat_hub_agent_pull_errors_total{{agent=\"127.0.0.1:{}\",node=\"n2\"}} 1", gone_port)));
  EXPECT_THAT(metrics, HasSubstr("ithbat_hub_rounds_total 2\n"));
  EXPECT_THAT(metrics, HasSubstr("ithbat_build_info{version=\""));
  EXPECT_THAT(metrics, HasSubstr("ithbat_hub_diagnosis_active{cause=\"storage\",job_id=\""));
}

TEST_F(HubTest, RoundsAreIncrementalAndKeepTheIncidentsId) {
  auto hub = Hub::Create(Options());
  ASSERT_TRUE(hub.has_value());
  std::vector<std::vector<Diagnosis>> observed;
  (*hub)->SetObserver([&](const std::vector<Diagnosis>& ds) { observed.push_back(ds); });
  ASSERT_TRUE((*hub)->Round(kNow).has_value());
  ASSERT_TRUE((*hub)->Round(kNow + kS).has_value());
  ASSERT_EQ(observed.size(), 2u);
  const Diagnosis* a = FindStorage(observed[0]);
  const Diagnosis* b = FindStorage(observed[1]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ((*hub)->Stats().rounds, 2u);
  for (const auto& ag : (*hub)->Agents()) EXPECT_EQ(ag.pull_errors, 0u) << ag.last_error;
}

TEST_F(HubTest, ServerAnswersDiagnosesHealthAndMetricsBehindAToken) {
  auto hub = Hub::Create(Options());
  ASSERT_TRUE(hub.has_value());
  ASSERT_TRUE((*hub)->Round(kNow).has_value());
  HubServerOptions so;
  so.port = 0;
  so.bearer_token = "hub-token";
  auto server = HubServer::Start(
      **hub, [] { return NotifyCounters{true, 3, 1, 0, 2, 0}; }, so);
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  httplib::Client c("127.0.0.1", (*server)->port());
  auto anon = c.Get("/api/v1/diagnoses");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
  auto health = c.Get("/healthz");  // never needs the token
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["agents"].size(), 2u);

  httplib::Headers auth = {{"Authorization", "Bearer hub-token"}};
  auto diag = c.Get("/api/v1/diagnoses", auth);
  ASSERT_TRUE(diag);
  ASSERT_EQ(diag->status, 200);
  const json doc = json::parse(diag->body);
  EXPECT_EQ(doc["schema"], investigate::kDiagnosisSchema);
  ASSERT_FALSE(doc["diagnoses"].empty());
  for (const auto& d : doc["diagnoses"])
    EXPECT_TRUE(investigate::ValidateDiagnosisJson(d).has_value()) << d.dump();
  auto metrics = c.Get("/metrics", auth);
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("ithbat_hub_webhook_sent_total 3\n"));
  EXPECT_THAT(metrics->body, HasSubstr("ithbat_hub_rounds_total 1\n"));
  auto post = c.Post("/api/v1/diagnoses", auth, "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  auto missing = c.Get("/nope", auth);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(HubTest, TheWebhookHearsOfEachTransitionOnce) {
  std::mutex mu;
  std::vector<std::string> bodies;
  httplib::Server receiver;
  receiver.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    bodies.push_back(req.body);
    res.set_content("ok", "text/plain");
  });
  const int port = receiver.bind_to_any_port("127.0.0.1");
  std::thread t([&] { receiver.listen_after_bind(); });
  while (!receiver.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  notify::WebhookOptions wo;
  wo.url = fmt::format("http://127.0.0.1:{}/hook", port);
  auto notifier = notify::WebhookNotifier::Start(wo);
  ASSERT_TRUE(notifier.has_value());
  auto hub = Hub::Create(Options());
  ASSERT_TRUE(hub.has_value());
  (*hub)->SetObserver([n = notifier->get()](const std::vector<Diagnosis>& ds) { n->Observe(ds); });
  for (int round = 0; round < 3; ++round) ASSERT_TRUE((*hub)->Round(kNow + round * kS).has_value());
  ASSERT_TRUE((*notifier)->Flush(5 * kNsPerSec));
  receiver.stop();
  t.join();
  // One message per diagnosis the hub opened, however many rounds saw it.
  EXPECT_EQ(bodies.size(), (*hub)->Current().size());
  size_t storage = 0;
  for (const auto& b : bodies) {
    const json p = json::parse(b);
    const std::string head = p["blocks"][0]["text"]["text"];
    EXPECT_THAT(head, HasSubstr("opened"));
    storage += head.find("storage") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(storage, 1u);
  EXPECT_EQ((*notifier)->Stats().sent, bodies.size());
  EXPECT_THAT(RenderHubMetrics(**hub, NotifyCounters{true, (*notifier)->Stats().sent, 0, 0, 0, 0}),
              HasSubstr(fmt::format("ithbat_hub_webhook_sent_total {}\n", bodies.size())));
}

// Agents given by address only: each is filed under the node name it reports (its --node, the
// name its own diagnoses use), so the hub's diagnoses name the same nodes as the agents' own. A
// name another node has already stays the address's; NODE= is never replaced.
TEST_F(HubTest, AnUnnamedAgentIsFiledUnderTheNodeItReports) {
  servers_.clear();
  for (const char* node : {"n1", "n2"}) {
    serve::ServerOptions o;
    o.port = 0;
    o.node = node;
    auto s = serve::HttpServer::Start(fleet_.Node(node), {}, o);
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    servers_.push_back(std::move(*s));
  }
  const std::string a = fmt::format("127.0.0.1:{}", servers_[0]->port());
  const std::string b = fmt::format("127.0.0.1:{}", servers_[1]->port());
  {
    HubOptions o = Options();
    auto targets = ParseAgentTargets({a, b});
    ASSERT_TRUE(targets.has_value());
    EXPECT_EQ((*targets)[0].node, a);  // until the agent answers
    o.agents = *targets;
    auto hub = Hub::Create(o);
    ASSERT_TRUE(hub.has_value());
    ASSERT_TRUE((*hub)->Round(kNow).has_value());
    std::set<std::string> named;
    for (const auto& s : (*hub)->Agents()) named.insert(s.target.node);
    EXPECT_EQ(named, (std::set<std::string>{"n1", "n2"}));
    const auto ds = (*hub)->Current();
    const Diagnosis* d = FindStorage(ds);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(std::set<std::string>(d->subjects.nodes.begin(), d->subjects.nodes.end()),
              (std::set<std::string>{"n1", "n2"}));
  }
  {
    // The second agent claims a name the first one is given explicitly: it keeps its address.
    HubOptions o = Options();
    auto targets = ParseAgentTargets({"n2=" + a, b});
    ASSERT_TRUE(targets.has_value());
    o.agents = *targets;
    auto hub = Hub::Create(o);
    ASSERT_TRUE(hub.has_value());
    ASSERT_TRUE((*hub)->Round(kNow).has_value());
    const auto agents = (*hub)->Agents();
    ASSERT_EQ(agents.size(), 2u);
    EXPECT_EQ(agents[0].target.node, "n2");  // NODE= kept, though the agent reports n1
    EXPECT_EQ(agents[1].target.node, b);
  }
}

TEST(AgentTargets, NamesNodesByHostOrAddress) {
  auto a = ParseAgentTargets({"node01:9479", "node02"});
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ((*a)[0].node, "node01");
  EXPECT_EQ((*a)[1].node, "node02");
  EXPECT_EQ((*a)[1].port, 9479);
  auto b = ParseAgentTargets({"127.0.0.1:1000", "127.0.0.1:1001", "gpu7=10.0.0.7:9479"});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0].node, "127.0.0.1:1000");
  EXPECT_EQ((*b)[1].node, "127.0.0.1:1001");
  EXPECT_EQ((*b)[2].node, "gpu7");
  EXPECT_EQ((*b)[2].host, "10.0.0.7");
  EXPECT_TRUE((*b)[2].named);
  EXPECT_FALSE((*b)[0].named);
  EXPECT_FALSE(ParseAgentTargets({"h:1", "h:1"}).has_value());
  EXPECT_FALSE(ParseAgentTargets({"x=h:1", "x=g:1"}).has_value());
  EXPECT_FALSE(ParseAgentTargets({"=h:1"}).has_value());
  EXPECT_FALSE(ParseAgentTargets({"h:99999"}).has_value());
  EXPECT_FALSE(Hub::Create(HubOptions{}).has_value());
}

}  // namespace
}  // namespace ithbat::hub
