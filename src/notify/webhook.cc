#include "notify/webhook.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "agent/logging.h"
#include "net/http_client.h"

namespace ithbat::notify {
namespace {

using nlohmann::json;

// Slack's limits (api.slack.com/reference/block-kit/blocks): header text 150 characters,
// section text 3000, a field 2000, a fallback text 40 000 (we stay far below).
constexpr size_t kHeaderMax = 150;
constexpr size_t kSectionMax = 3000;
constexpr size_t kFieldMax = 2000;
constexpr size_t kListMax = 8;  // names listed per kind of subject before "and N more"

// Cuts at a UTF-8 character boundary and marks the cut.
std::string Cut(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max >= 3 ? max - 3 : 0;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  s += "…";
  return s;
}

// mrkdwn's three control characters.
std::string Escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

template <class T, class F>
std::string List(const std::vector<T>& items, F name) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kListMax; ++i)
    out += fmt::format("{}{}", i ? ", " : "", name(items[i]));
  if (items.size() > kListMax) out += fmt::format(" and {} more", items.size() - kListMax);
  return out;
}

std::string SubjectsText(const Subjects& s) {
  std::vector<std::string> parts;
  if (!s.job.empty()) parts.push_back("job " + s.job);
  if (!s.nodes.empty()) parts.push_back("nodes " + List(s.nodes, [](const std::string& n) { return n; }));
  if (!s.ranks.empty()) {
    parts.push_back("ranks " + List(s.ranks, [](const RankRef& r) {
                      return r.node.empty() ? fmt::format("{}", r.rank)
                                            : fmt::format("{}@{}", r.rank, r.node);
                    }));
  }
  if (!s.gpus.empty()) {
    parts.push_back("GPUs " + List(s.gpus, [](const GpuRef& g) {
                      return g.uuid.empty() ? fmt::format("{}:{}", g.node, g.index) : g.uuid;
                    }));
  }
  if (!s.resource.empty()) parts.push_back("resource " + s.resource);
  if (!s.other_jobs.empty()) {
    parts.push_back("also hurting jobs " + List(s.other_jobs, [](const std::string& j) { return j; }));
  }
  if (parts.empty()) return "(none named)";
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

std::string CostText(const Impact& m) {
  std::string out = fmt::format("{:.2f} GPU-hours lost so far", m.gpu_hours_lost);
  if (m.expected_speedup > 1.0) out += fmt::format("; {:.2f}x faster with the fix", m.expected_speedup);
  if (m.effective_price_per_gpu_hour > 0) {
    out += fmt::format("; effective price ${:.2f}/GPU-hour (productive share {:.0f}%)",
                       m.effective_price_per_gpu_hour, 100 * m.productive_share);
  }
  return out;
}

std::string VerdictText(const Diagnosis& d) {
  return fmt::format("{}{}", VerdictName(d.verdict), d.provisional ? " (provisional)" : "");
}

json Field(std::string_view title, const std::string& value) {
  return {{"type", "mrkdwn"}, {"text", Cut(fmt::format("*{}*\n{}", title, Escape(value)), kFieldMax)}};
}

}  // namespace

std::string_view TransitionName(Transition t) {
  switch (t) {
    case Transition::kOpened:
      return "opened";
    case Transition::kConfirmed:
      return "confirmed";
    case Transition::kResolved:
      return "resolved";
  }
  return "unknown";
}

std::vector<std::pair<Transition, Diagnosis>> TransitionTracker::Observe(
    const std::vector<Diagnosis>& current) {
  std::vector<std::pair<Transition, Diagnosis>> out;
  std::set<std::string> present;
  for (const Diagnosis& d : current) {
    present.insert(d.id);
    auto [it, is_new] = seen_.try_emplace(d.id);
    Seen& s = it->second;
    s.last = d;
    if (d.state == DiagnosisState::kResolved) {
      if (is_new) {
        s.resolved = true;  // never announced: no one waits for its end
      } else if (s.announced && !s.resolved) {
        s.resolved = true;
        out.emplace_back(Transition::kResolved, d);
      }
      continue;
    }
    if (!s.announced) {
      s.announced = true;
      s.provisional = d.provisional;
      out.emplace_back(Transition::kOpened, d);
    } else if (s.provisional && !d.provisional && !s.confirmed) {
      s.confirmed = true;
      out.emplace_back(Transition::kConfirmed, d);
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (present.contains(it->first)) {
      ++it;
      continue;
    }
    // Gone without a resolved state (forgotten): its end is still news to whoever was told.
    if (it->second.announced && !it->second.resolved) {
      Diagnosis last = it->second.last;
      last.state = DiagnosisState::kResolved;
      out.emplace_back(Transition::kResolved, std::move(last));
    }
    it = seen_.erase(it);
  }
  return out;
}

json SlackPayload(const Diagnosis& d, Transition t, std::string_view origin) {
  const std::string headline =
      fmt::format("Diagnosis {}: {} — {}{}", TransitionName(t), VerdictText(d), CauseName(d.cause),
                  d.subjects.job.empty() ? "" : " — job " + d.subjects.job);
  std::string text = fmt::format("[ithbat] {}. {} Subjects: {}. Fix: {}", headline,
                                 d.summary.empty() ? "" : d.summary + ".", SubjectsText(d.subjects), d.fix);
  json fields = json::array(
      {Field("Verdict", VerdictText(d)), Field("Cause", std::string(CauseName(d.cause))),
       Field("Subjects", SubjectsText(d.subjects)),
       Field("Window", fmt::format("{} to {}", FormatRfc3339(d.window.start), FormatRfc3339(d.window.end))),
       Field("Fix", d.fix.empty() ? std::string("(none known)") : d.fix), Field("Cost", CostText(d.impact))});
  json blocks = json::array();
  blocks.push_back(
      {{"type", "header"}, {"text", {{"type", "plain_text"}, {"text", Cut(headline, kHeaderMax)}}}});
  if (!d.summary.empty()) {
    blocks.push_back(
        {{"type", "section"}, {"text", {{"type", "mrkdwn"}, {"text", Cut(Escape(d.summary), kSectionMax)}}}});
  }
  blocks.push_back({{"type", "section"}, {"fields", std::move(fields)}});
  blocks.push_back(
      {{"type", "context"},
       {"elements", json::array({{{"type", "mrkdwn"},
                                  {"text", Cut(Escape(fmt::format("{} · id {} · opened {} · updated {}",
                                                                  origin, d.id, FormatRfc3339(d.opened_at),
                                                                  FormatRfc3339(d.updated_at))),
                                               kSectionMax)}}})}});
  return {{"text", Cut(text, kSectionMax)}, {"blocks", std::move(blocks)}};
}

bool HttpsSupported() { return net::HttpsSupported(); }

struct WebhookNotifier::Impl {
  WebhookOptions options;
  std::string scheme_host_port;  // for the log and errors: never the path (it may hold a secret)
  std::string url;
  std::unique_ptr<net::HttpClient> client;

  mutable std::mutex mu;
  std::condition_variable cv;       // work arrived, or stop
  std::condition_variable idle_cv;  // the queue drained
  std::deque<std::string> queue;
  bool in_flight = false;
  bool stopping = false;
  WebhookStats stats;
  TransitionTracker tracker;  // guarded by mu
  std::thread thread;
  std::shared_ptr<spdlog::logger> log = agent::GetLogger("notify");

  enum class Outcome { kSent, kRetry, kGiveUp };
  Outcome Attempt(const std::string& payload, TimeNs* retry_after, std::string* why);
  void Run();
  // Sleeps up to `d`; false when stopping.
  bool Sleep(TimeNs d) {
    std::unique_lock lock(mu);
    return !cv.wait_for(lock, std::chrono::nanoseconds(d), [&] { return stopping; });
  }
};

WebhookNotifier::Impl::Outcome WebhookNotifier::Impl::Attempt(const std::string& payload, TimeNs* retry_after,
                                                              std::string* why) {
  net::HttpCall call;
  call.method = "POST";
  call.url = url;
  call.headers = {{"Content-Type", "application/json"}, {"User-Agent", "ithbat-notify"}};
  call.body = payload;
  // The receiver's answer is read but not kept beyond a bound: a hostile endpoint cannot make
  // the notifier hold a large body. The status arrives with the headers, before the body: an
  // answer cut off at the bound still says whether the message was taken (a receiver that
  // accepts with a long page is not a failure).
  call.keep_cut_body = true;
  auto r = client->Send(call);
  if (!r) {
    *why = fmt::format("cannot deliver to {}: {}", scheme_host_port, r.error().message);
    return Outcome::kRetry;
  }
  const int status = r->status;
  if (status >= 200 && status < 300) return Outcome::kSent;
  const std::string_view answer = std::string_view(r->body).substr(0, 200);
  *why = fmt::format("{} answered {}{}{}{}", scheme_host_port, status, answer.empty() ? "" : ": ", answer,
                     r->cut ? fmt::format(" (answer cut at {} bytes)", options.max_response_bytes) : "");
  if (status == 429) {
    const std::string& text = r->retry_after;
    unsigned seconds = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size()) {
      *retry_after = std::min<TimeNs>(static_cast<TimeNs>(seconds) * kNsPerSec, options.max_backoff);
    }
    return Outcome::kRetry;
  }
  return status >= 500 ? Outcome::kRetry : Outcome::kGiveUp;
}

void WebhookNotifier::Impl::Run() {
  while (true) {
    std::string payload;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      payload = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
    }
    TimeNs backoff = options.initial_backoff;
    bool sent = false, abandoned = false;
    std::string why;
    for (int attempt = 1; attempt <= options.max_attempts; ++attempt) {
      TimeNs retry_after = 0;
      const Outcome o = Attempt(payload, &retry_after, &why);
      if (o == Outcome::kSent) {
        sent = true;
        break;
      }
      if (o == Outcome::kGiveUp || attempt == options.max_attempts) break;
      if (!Sleep(std::max(backoff, retry_after))) {
        abandoned = true;
        break;
      }
      backoff = std::min(backoff * 2, options.max_backoff);
      std::lock_guard lock(mu);
      ++stats.retries;
    }
    {
      std::lock_guard lock(mu);
      if (sent) {
        ++stats.sent;
      } else if (abandoned) {
        ++stats.dropped;
      } else {
        ++stats.failed;
      }
      in_flight = false;
    }
    if (!sent && !abandoned) log->warn("webhook: gave up a message: {}", why);
    idle_cv.notify_all();
  }
}

WebhookNotifier::WebhookNotifier() = default;

Result<std::unique_ptr<WebhookNotifier>> WebhookNotifier::Start(WebhookOptions options) {
  const std::string& url = options.url;
  std::string_view rest = url;
  bool https = false;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
    https = true;
  } else {
    return MakeError(ErrorCode::kInvalidArgument, "the webhook URL must start with http:// or https://");
  }
  if (https && !HttpsSupported()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "webhook URL is https://, but libcurl (libcurl.so.4) is missing or has no TLS "
                     "support; use an http:// relay or install a libcurl built with TLS");
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.find('@') != std::string_view::npos) {
    // The URL is not quoted back: credentials in it (or a webhook's secret path) must not reach
    // a log.
    return MakeError(ErrorCode::kInvalidArgument, "webhook URL: no host, or credentials in it (unsupported)");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "webhook URL holds a space or a non-ASCII byte; percent-encode it");
    }
  }
  if (options.max_queue == 0 || options.max_attempts < 1 || options.timeout <= 0 ||
      options.initial_backoff < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "webhook: queue, attempts and timeout must be positive");
  }
  std::unique_ptr<WebhookNotifier> n(new WebhookNotifier());
  n->impl_ = std::make_unique<Impl>();
  Impl& impl = *n->impl_;
  impl.options = std::move(options);
  impl.scheme_host_port = fmt::format("{}://{}", https ? "https" : "http", authority);
  impl.url = impl.options.url;  // `url` named options.url, moved from above
  net::HttpLimits limits;
  limits.connect_timeout = impl.options.timeout;
  limits.deadline = impl.options.timeout;
  limits.max_body_bytes = impl.options.max_response_bytes;
  impl.client = std::make_unique<net::HttpClient>(limits);
  impl.thread = std::thread([&impl] { impl.Run(); });
  impl.log->info("webhook: notifying {} ({})", impl.scheme_host_port,
                 https ? "https, server certificate verified" : "plain http");
  return n;
}

WebhookNotifier::~WebhookNotifier() { Stop(); }

size_t WebhookNotifier::Observe(const std::vector<Diagnosis>& current) {
  std::vector<std::pair<Transition, Diagnosis>> transitions;
  {
    std::lock_guard lock(impl_->mu);
    transitions = impl_->tracker.Observe(current);
  }
  for (const auto& [t, d] : transitions) {
    Enqueue(SlackPayload(d, t, impl_->options.origin).dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return transitions.size();
}

bool WebhookNotifier::Enqueue(std::string payload) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping || impl_->queue.size() >= impl_->options.max_queue) {
      ++impl_->stats.dropped;
      if (!impl_->stopping)
        impl_->log->warn("webhook: queue full ({} messages); a message was dropped", impl_->queue.size());
      return false;
    }
    impl_->queue.push_back(std::move(payload));
  }
  impl_->cv.notify_all();
  return true;
}

bool WebhookNotifier::Flush(TimeNs timeout) {
  std::unique_lock lock(impl_->mu);
  return impl_->idle_cv.wait_for(
             lock, std::chrono::nanoseconds(timeout),
             [&] { return impl_->stopping || (impl_->queue.empty() && !impl_->in_flight); }) &&
         impl_->queue.empty() && !impl_->in_flight;
}

void WebhookNotifier::Stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping && !impl_->thread.joinable()) return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->idle_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  std::lock_guard lock(impl_->mu);
  impl_->stats.dropped += impl_->queue.size();
  impl_->queue.clear();
}

WebhookStats WebhookNotifier::Stats() const {
  std::lock_guard lock(impl_->mu);
  WebhookStats s = impl_->stats;
  s.queued = impl_->queue.size();
  return s;
}

const WebhookOptions& WebhookNotifier::options() const { return impl_->options; }

}  // namespace ithbat::notify
