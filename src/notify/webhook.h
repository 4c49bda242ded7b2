#pragma once
// A Slack-compatible incoming-webhook notifier: one POST of {"text": ..., "blocks": [...]} to a
// configured URL when a diagnosis opens, turns from provisional to confirmed, or resolves —
// one message per transition, never one per round (TransitionTracker keys them by diagnosis id
// and state). Slack, Mattermost and Rocket.Chat incoming webhooks read this payload; `text` is
// the plain fallback every one of them shows.
//
// Delivery runs on the notifier's own thread behind a bounded queue, so a slow or dead
// receiver never holds up the caller (the hub's round): a full queue drops the new message
// (counted), each POST has a timeout, 5xx, 429 and connection errors are retried a bounded
// number of times with exponential backoff (429's Retry-After honoured up to max_backoff), and
// any other 4xx is given up at once (the request itself is wrong; repeating it cannot help).
//
// URLs: http:// always; https:// when libcurl has TLS (Debian's libcurl4-openssl does:
// HttpsSupported() says so, and Start refuses an https URL otherwise, saying why). The server
// certificate is verified against the system's CA store. Each POST goes through net::HttpClient:
// the receiver's answer is bounded (headers, max_response_bytes, the timeout), never
// decompressed, never redirected. The URL is never quoted in a log or error (its path is the
// secret of a Slack-style webhook).
//
// Thread safety: Observe/Enqueue/Stats/Flush may be called from any thread.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"

namespace ithbat::notify {

enum class Transition { kOpened, kConfirmed, kResolved };
std::string_view TransitionName(Transition t);  // "opened", "confirmed", "resolved"

// Which transitions a sequence of rounds' diagnosis lists makes, each once. A diagnosis first
// seen open (or updated) is "opened"; one seen provisional and later not is "confirmed"; one
// announced and then seen resolved — or gone from the list without a resolved state — is
// "resolved". A diagnosis first seen already resolved is never announced (nobody was told it
// opened). Memory: the diagnoses of the last round only.
class TransitionTracker {
 public:
  std::vector<std::pair<Transition, Diagnosis>> Observe(const std::vector<Diagnosis>& current);

 private:
  struct Seen {
    bool announced = false;    // "opened" was emitted
    bool provisional = false;  // as it was announced
    bool confirmed = false;    // "confirmed" was emitted
    bool resolved = false;     // "resolved" was emitted (or it was first seen resolved)
    Diagnosis last;
  };
  std::map<std::string, Seen> seen_;
};

// The message for one transition: {"text": ..., "blocks": [header, summary, fields (verdict,
// cause, subjects, window, fix, cost), context (id, times)]}, every text cut to Slack's limits
// and mrkdwn-escaped. `origin` names the sender ("hub", a host name) in the context line.
nlohmann::json SlackPayload(const Diagnosis& d, Transition t, std::string_view origin);

struct WebhookOptions {
  std::string url;  // http://host[:port]/path or https://...
  std::string origin = "ithbat hub";
  size_t max_queue = 256;              // messages waiting; more are dropped (counted)
  TimeNs timeout = 5 * kNsPerSec;      // connecting, and the whole of one POST
  int max_attempts = 4;                // the first try and three retries
  TimeNs initial_backoff = kNsPerSec;  // doubled after each retry
  TimeNs max_backoff = 30 * kNsPerSec;
  size_t max_response_bytes = 64 * 1024;  // a receiver's answer body beyond this is cut off
};

struct WebhookStats {
  uint64_t sent = 0;     // delivered (2xx)
  uint64_t failed = 0;   // given up: a 4xx other than 429, or retries exhausted
  uint64_t dropped = 0;  // never tried: the queue was full, or the notifier stopped first
  uint64_t retries = 0;  // attempts after the first
  size_t queued = 0;     // waiting now
};

bool HttpsSupported();

class WebhookNotifier {
 public:
  // Checks the URL (scheme, host, https support) and starts the delivery thread.
  // Errors: kInvalidArgument with the reason.
  static Result<std::unique_ptr<WebhookNotifier>> Start(WebhookOptions options);
  ~WebhookNotifier();  // Stop()
  WebhookNotifier(const WebhookNotifier&) = delete;
  WebhookNotifier& operator=(const WebhookNotifier&) = delete;

  // One round's diagnoses: a message is queued for each new transition. Returns how many.
  size_t Observe(const std::vector<Diagnosis>& current);
  // Queues one payload; false (and counted as dropped) when the queue is full or stopped.
  bool Enqueue(std::string payload);
  // Waits until every queued message was delivered or given up, at most `timeout`; false if
  // messages are still pending then. For `--once` runs that exit right after.
  bool Flush(TimeNs timeout);
  // Stops the thread after the attempt in flight; messages still queued count as dropped.
  void Stop();
  WebhookStats Stats() const;
  const WebhookOptions& options() const;

 private:
  WebhookNotifier();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ithbat::notify
