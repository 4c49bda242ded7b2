#include "hub/hub_server.h"

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "agent/logging.h"
#include "serve/api.h"
#include "serve/http_base.h"

namespace ithbat::hub {
namespace {

using nlohmann::json;

constexpr std::string_view kHealthPath = "/healthz";

serve::HttpBaseOptions BaseOptions(const HubServerOptions& o) {
  serve::HttpBaseOptions b = serve::ListenOptionsFrom(o);
  b.open_path = std::string(kHealthPath);
  b.owner = "hub";
  b.server_name = "hub's HTTP server";
  b.read_only_note = "the hub's API is read-only";
  b.default_message = [](int status) {
    return std::string(status == 404 ? "no such endpoint; see docs/hub.md" : "request refused");
  };
  b.logger = agent::GetLogger("hub");
  return b;
}

}  // namespace

std::string RenderHubHealth(const Hub& hub) {
  json agents = json::array();
  json stale = json::array();
  json down = json::array();
  for (const AgentState& a : hub.Agents()) {
    agents.push_back(
        {{"agent", a.target.Address()},
         {"node", a.target.node},
         {"up", a.up},
         {"stale", a.stale},
         {"pulls", a.pulls},
         {"pull_errors", a.pull_errors},
         {"last_error", a.last_error},
         {"last_success", a.last_success > 0 ? json(FormatRfc3339(a.last_success)) : json(nullptr)}});
    if (a.stale) stale.push_back(a.target.node);
    if (!a.up) down.push_back(a.target.Address());
  }
  const HubStats s = hub.Stats();
  json body = {{"status", "ok"},
               {"agents", std::move(agents)},
               {"down", std::move(down)},
               {"stale", std::move(stale)},
               {"rounds", s.rounds},
               {"last_round", s.last_round_at > 0 ? json(FormatRfc3339(s.last_round_at)) : json(nullptr)}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct HubServer::Impl {
  Impl(const Hub& h, std::function<NotifyCounters()> n, HubServerOptions o)
      : hub(h), notify(std::move(n)), options(std::move(o)), http(BaseOptions(options)) {}

  void AddRoutes();

  const Hub& hub;
  std::function<NotifyCounters()> notify;
  HubServerOptions options;
  // Last, so that it stops (and joins the handlers' threads) before the members they read go.
  serve::HttpBase http;
};

void HubServer::Impl::AddRoutes() {
  http.Get("/api/v1/diagnoses", "diagnoses",
           [this](const serve::HttpRequest&) { return serve::ServeDiagnoses(true, hub.Current()); });
  http.Get(std::string(kHealthPath), "healthz", [this](const serve::HttpRequest&) {
    return serve::ApiResponse{200, std::string(serve::kJsonContentType), RenderHubHealth(hub)};
  });
  http.Get("/metrics", "metrics", [this](const serve::HttpRequest&) {
    return serve::ApiResponse{200, std::string(serve::kPrometheusContentType),
                              RenderHubMetrics(hub, notify ? notify() : NotifyCounters{})};
  });
  http.Get("/api/v1/version", "version", [](const serve::HttpRequest&) { return serve::ServeVersion(); });
}

HubServer::HubServer() = default;
HubServer::~HubServer() { Stop(); }

Result<std::unique_ptr<HubServer>> HubServer::Start(const Hub& hub, std::function<NotifyCounters()> notify,
                                                    HubServerOptions options) {
  if (options.threads < 1 || options.threads > 64) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "threads must be in [1, 64], got {}", options.threads);
  }
  std::unique_ptr<HubServer> s(new HubServer());
  s->impl_ = std::make_unique<Impl>(hub, std::move(notify), std::move(options));
  Impl& impl = *s->impl_;
  impl.AddRoutes();
  if (Status started = impl.http.Start(); !started) return std::unexpected(started.error());
  return s;
}

void HubServer::Stop() {
  if (impl_) impl_->http.Stop();
}

uint16_t HubServer::port() const { return impl_ ? impl_->http.port() : 0; }

void HubServer::SetBearerToken(std::string token) {
  if (impl_) impl_->http.SetBearerToken(std::move(token));
}

}  // namespace ithbat::hub
