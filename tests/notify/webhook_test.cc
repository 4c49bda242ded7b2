// The webhook notifier against a local HTTP receiver on loopback: one message per transition,
// the Slack payload's fields, retries on 500/429/connection errors, giving up on 400, an answer
// longer than the bound, the queue bound.
#include "notify/webhook.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

namespace ithbat::notify {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr TimeNs kT = 1'800'000'000LL * kNsPerSec;

Diagnosis Storage(std::string id, DiagnosisState state = DiagnosisState::kOpen, bool provisional = true) {
  Diagnosis d;
  d.id = std::move(id);
  d.state = state;
  d.provisional = provisional;
  d.verdict = Verdict::kInfrastructure;
  d.cause = Cause::kStorage;
  d.subjects.job = "77";
  d.subjects.nodes = {"n1", "n2"};
  d.subjects.ranks = {{0, 0, "n1", 100}, {2, 0, "n2", 200}};
  d.subjects.resource = "/mnt/ckpt";
  d.subjects.other_jobs = {"78"};
  d.window = {kT, kT + 60 * kNsPerSec};
  d.summary = "fsync on /mnt/ckpt took 12x its <baseline> & stalled the job";
  d.fix = "move checkpoints to a healthy mount";
  d.impact.gpu_hours_lost = 1.5;
  d.impact.expected_speedup = 1.25;
  d.impact.effective_price_per_gpu_hour = 3.2;
  d.impact.productive_share = 0.78;
  d.opened_at = kT + 30 * kNsPerSec;
  d.updated_at = kT + 60 * kNsPerSec;
  return d;
}

// A receiver that answers each POST with the next status of a script (then 200), and records
// every body it got.
class Receiver {
 public:
  explicit Receiver(std::vector<int> script = {}, std::string retry_after = "", size_t answer_bytes = 0)
      : script_(script.begin(), script.end()), retry_after_(std::move(retry_after)) {
    server_.Post("/hooks/T000", [this, answer_bytes](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      bodies_.push_back(req.body);
      content_types_.push_back(req.get_header_value("Content-Type"));
      res.status = 200;
      if (!script_.empty()) {
        res.status = script_.front();
        script_.pop_front();
      }
      if (res.status == 429 && !retry_after_.empty()) res.set_header("Retry-After", retry_after_);
      res.set_content(answer_bytes > 0 ? std::string(answer_bytes, 'x') : res.status == 200 ? "ok" : "no",
                      "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hooks/T000"; }
  std::vector<std::string> Bodies() const {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  std::vector<std::string> ContentTypes() const {
    std::lock_guard lock(mu_);
    return content_types_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::deque<int> script_;
  std::string retry_after_;
  std::vector<std::string> bodies_;
  std::vector<std::string> content_types_;
};

WebhookOptions Fast(const std::string& url) {
  WebhookOptions o;
  o.url = url;
  o.timeout = 2 * kNsPerSec;
  o.initial_backoff = 10 * kNsPerMs;
  o.max_backoff = 50 * kNsPerMs;
  return o;
}

std::vector<std::string> Headers(const std::vector<std::string>& bodies) {
  std::vector<std::string> out;
  for (const auto& b : bodies) out.push_back(json::parse(b)["blocks"][0]["text"]["text"].get<std::string>());
  return out;
}

TEST(TransitionTracker, OneMessagePerTransitionNeverPerRound) {
  TransitionTracker t;
  EXPECT_EQ(t.Observe({}).size(), 0u);
  auto a = t.Observe({Storage("d1")});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].first, Transition::kOpened);
  // The same diagnosis, updated, every round: nothing new.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(t.Observe({Storage("d1", DiagnosisState::kUpdated)}).empty());
  auto c = t.Observe({Storage("d1", DiagnosisState::kUpdated, /*provisional=*/false)});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].first, Transition::kConfirmed);
  EXPECT_TRUE(t.Observe({Storage("d1", DiagnosisState::kUpdated, false)}).empty());
  auto r = t.Observe({Storage("d1", DiagnosisState::kResolved, false)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].first, Transition::kResolved);
  EXPECT_TRUE(t.Observe({Storage("d1", DiagnosisState::kResolved, false)}).empty());
  EXPECT_TRUE(t.Observe({}).empty());  // forgotten after it resolved: nothing more
}

TEST(TransitionTracker, EdgeCases) {
  TransitionTracker t;
  // First seen resolved: nobody was told it opened, so its end is no news.
  EXPECT_TRUE(t.Observe({Storage("old", DiagnosisState::kResolved)}).empty());
  // Opened already confirmed: one "opened", never a "confirmed".
  auto o = t.Observe({Storage("d2", DiagnosisState::kOpen, false)});
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].first, Transition::kOpened);
  EXPECT_TRUE(t.Observe({Storage("d2", DiagnosisState::kUpdated, false)}).empty());
  // Gone from the list without a resolved state: resolved, once.
  auto g = t.Observe({});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].first, Transition::kResolved);
  EXPECT_EQ(g[0].second.id, "d2");
  EXPECT_EQ(g[0].second.state, DiagnosisState::kResolved);
  EXPECT_TRUE(t.Observe({}).empty());
}

TEST(SlackPayload, CarriesVerdictCauseSubjectsWindowFixAndCost) {
  const json p = SlackPayload(Storage("dx-1"), Transition::kOpened, "hub01");
  ASSERT_TRUE(p["text"].is_string());
  const std::string text = p["text"];
  EXPECT_THAT(text, HasSubstr("opened"));
  EXPECT_THAT(text, HasSubstr("infrastructure (provisional)"));
  EXPECT_THAT(text, HasSubstr("storage"));
  EXPECT_THAT(text, HasSubstr("job 77"));
  ASSERT_TRUE(p["blocks"].is_array());
  EXPECT_EQ(p["blocks"][0]["type"], "header");
  EXPECT_LE(p["blocks"][0]["text"]["text"].get<std::string>().size(), 150u);
  // mrkdwn control characters are escaped in the summary.
  EXPECT_THAT(p["blocks"][1]["text"]["text"].get<std::string>(),
              HasSubstr("12x its &lt;baseline&gt; &amp; stalled"));
  std::string fields;
  for (const auto& f : p["blocks"][2]["fields"]) fields += f["text"].get<std::string>() + "\n";
  EXPECT_THAT(fields, HasSubstr("*Verdict*\ninfrastructure (provisional)"));
  EXPECT_THAT(fields, HasSubstr("*Cause*\nstorage"));
  EXPECT_THAT(fields, HasSubstr("nodes n1, n2"));
  EXPECT_THAT(fields, HasSubstr("ranks 0@n1, 2@n2"));
  EXPECT_THAT(fields, HasSubstr("resource /mnt/ckpt"));
  EXPECT_THAT(fields, HasSubstr("also hurting jobs 78"));
  EXPECT_THAT(fields,
              HasSubstr("*Window*\n2027-01-15T08:00:00.000000000Z to 2027-01-15T08:01:00.000000000Z"));
  EXPECT_THAT(fields, HasSubstr("*Fix*\nmove checkpoints to a healthy mount"));
  EXPECT_THAT(fields, HasSubstr("1.50 GPU-hours lost"));
  EXPECT_THAT(fields, HasSubstr("1.25x faster with the fix"));
  EXPECT_THAT(fields, HasSubstr("$3.20/GPU-hour"));
  EXPECT_THAT(p["blocks"][3]["elements"][0]["text"].get<std::string>(), HasSubstr("id dx-1"));
}

TEST(WebhookNotifier, DeliversOneMessagePerTransition) {
  Receiver rx;
  auto n = WebhookNotifier::Start(Fast(rx.Url()));
  ASSERT_TRUE(n.has_value()) << n.error().ToString();
  EXPECT_EQ((*n)->Observe({Storage("d1")}), 1u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*n)->Observe({Storage("d1", DiagnosisState::kUpdated)}), 0u);
  EXPECT_EQ((*n)->Observe({Storage("d1", DiagnosisState::kUpdated, false)}), 1u);
  EXPECT_EQ((*n)->Observe({Storage("d1", DiagnosisState::kResolved, false)}), 1u);
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  const auto bodies = rx.Bodies();
  ASSERT_EQ(bodies.size(), 3u);
  const auto heads = Headers(bodies);
  EXPECT_THAT(heads[0], HasSubstr("opened"));
  EXPECT_THAT(heads[1], HasSubstr("confirmed"));
  EXPECT_THAT(heads[2], HasSubstr("resolved"));
  EXPECT_EQ(rx.ContentTypes()[0], "application/json");
  const WebhookStats s = (*n)->Stats();
  EXPECT_EQ(s.sent, 3u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.dropped, 0u);
}

TEST(WebhookNotifier, RetriesOn500And429ThenDelivers) {
  Receiver rx({500, 503, 429}, "0");
  auto n = WebhookNotifier::Start(Fast(rx.Url()));
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"hello"})"));
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  EXPECT_EQ(rx.Bodies().size(), 4u);  // three refusals, then delivered
  const WebhookStats s = (*n)->Stats();
  EXPECT_EQ(s.sent, 1u);
  EXPECT_EQ(s.retries, 3u);
  EXPECT_EQ(s.failed, 0u);
}

TEST(WebhookNotifier, RetriesAreBounded) {
  Receiver rx({500, 500, 500, 500, 500, 500});
  WebhookOptions o = Fast(rx.Url());
  o.max_attempts = 3;
  auto n = WebhookNotifier::Start(o);
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"hello"})"));
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  EXPECT_EQ(rx.Bodies().size(), 3u);
  EXPECT_EQ((*n)->Stats().failed, 1u);
  EXPECT_EQ((*n)->Stats().sent, 0u);
}

TEST(WebhookNotifier, GivesUpOn400AtOnce) {
  Receiver rx({400, 200});
  auto n = WebhookNotifier::Start(Fast(rx.Url()));
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"bad"})"));
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  EXPECT_EQ(rx.Bodies().size(), 1u);
  EXPECT_EQ((*n)->Stats().failed, 1u);
  EXPECT_EQ((*n)->Stats().retries, 0u);
  // The next message is delivered: one bad message does not stop the notifier.
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"good"})"));
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  EXPECT_EQ((*n)->Stats().sent, 1u);
}

// A receiver's answer is read up to max_response_bytes; one longer than that is cut off, and the
// status it came with still decides: taken (2xx) is sent, a refusal is retried.
TEST(WebhookNotifier, ALongAnswerIsCutOffAndItsStatusStillCounts) {
  Receiver accepts({}, "", 100 * 1024);
  WebhookOptions o = Fast(accepts.Url());
  o.max_response_bytes = 1024;
  auto n = WebhookNotifier::Start(o);
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"x"})"));
  ASSERT_TRUE((*n)->Flush(5 * kNsPerSec));
  EXPECT_EQ((*n)->Stats().sent, 1u);
  EXPECT_EQ((*n)->Stats().failed, 0u);

  Receiver refuses({503, 503}, "", 100 * 1024);
  o.url = refuses.Url();
  o.max_attempts = 2;
  auto m = WebhookNotifier::Start(o);
  ASSERT_TRUE(m.has_value());
  ASSERT_TRUE((*m)->Enqueue(R"({"text":"x"})"));
  ASSERT_TRUE((*m)->Flush(5 * kNsPerSec));
  EXPECT_EQ(refuses.Bodies().size(), 2u);
  EXPECT_EQ((*m)->Stats().retries, 1u);
  EXPECT_EQ((*m)->Stats().failed, 1u);
  EXPECT_EQ((*m)->Stats().sent, 0u);
}

TEST(WebhookNotifier, ConnectionErrorsAreRetriedThenCounted) {
  std::string url;
  {
    Receiver gone;  // a port that answered once and is closed now
    url = gone.Url();
  }
  WebhookOptions o = Fast(url);
  o.max_attempts = 2;
  auto n = WebhookNotifier::Start(o);
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue(R"({"text":"x"})"));
  ASSERT_TRUE((*n)->Flush(10 * kNsPerSec));
  EXPECT_EQ((*n)->Stats().failed, 1u);
  EXPECT_EQ((*n)->Stats().retries, 1u);
}

TEST(WebhookNotifier, QueueIsBounded) {
  // A receiver that refuses forever with long backoffs keeps the first message in flight; the
  // queue then holds max_queue more and drops the rest.
  Receiver rx(std::vector<int>(100, 500));
  WebhookOptions o = Fast(rx.Url());
  o.max_queue = 3;
  o.initial_backoff = 10 * kNsPerSec;
  o.max_backoff = 10 * kNsPerSec;
  auto n = WebhookNotifier::Start(o);
  ASSERT_TRUE(n.has_value());
  ASSERT_TRUE((*n)->Enqueue("{}"));
  // Wait until the first is taken off the queue (in flight).
  for (int i = 0; i < 200 && (*n)->Stats().queued > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int accepted = 0;
  for (int i = 0; i < 10; ++i) accepted += (*n)->Enqueue("{}") ? 1 : 0;
  EXPECT_EQ(accepted, 3);
  WebhookStats s = (*n)->Stats();
  EXPECT_EQ(s.queued, 3u);
  EXPECT_EQ(s.dropped, 7u);
  // Stop does not wait out the backoff; what was still queued counts as dropped.
  const TimeNs started = MonotonicNowNs();
  (*n)->Stop();
  EXPECT_LT(MonotonicNowNs() - started, 3 * kNsPerSec);
  s = (*n)->Stats();
  EXPECT_EQ(s.dropped, 7u + 3u + 1u);  // the queued ones and the one in flight
  EXPECT_EQ(s.sent, 0u);
}

TEST(WebhookNotifier, RejectsBadUrls) {
  for (const char* bad : {"", "ftp://x/y", "http://", "http://user:pw@host/x", "http://host/a b"}) {
    WebhookOptions o;
    o.url = bad;
    auto n = WebhookNotifier::Start(o);
    EXPECT_FALSE(n.has_value()) << bad;
  }
  WebhookOptions o;
  o.url = "https://hooks.example.invalid/services/T0";
  auto n = WebhookNotifier::Start(o);
  EXPECT_EQ(n.has_value(), HttpsSupported()) << (n.has_value() ? "" : n.error().message);
}

}  // namespace
}  // namespace ithbat::notify
