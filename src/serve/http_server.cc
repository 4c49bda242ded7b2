// The agent's routes over the shared bounded HTTP machinery (http_base.h: binding, threads, limits,
// auth, JSON errors). What each endpoint answers lives in api.cc (JSON) and exposition.cc
// (/metrics).
#include "serve/http_server.h"

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/time.h"
#include "serve/api.h"
#include "serve/http_base.h"

namespace ithbat::serve {
namespace {

constexpr std::string_view kHealthPath = "/healthz";
constexpr int kMaxThreads = 256;

std::string DefaultMessage(int status) {
  switch (status) {
    case 404:
      return "no such endpoint; see docs/http-api.md";
    default:
      return status >= 500 ? "internal error" : "request refused";
  }
}

HttpBaseOptions BaseOptions(const ServerOptions& o) {
  HttpBaseOptions b = ListenOptionsFrom(o);
  b.open_path = std::string(kHealthPath);
  b.owner = "agent";
  b.server_name = "HTTP server";
  b.read_only_note = "the API is read-only (GET, HEAD)";
  b.default_message = DefaultMessage;
  return b;
}

}  // namespace

struct HttpServer::Impl {
  Impl(const store::Store& s, ServerSources src, ServerOptions o)
      : store(s), sources(std::move(src)), options(std::move(o)), http(BaseOptions(options)) {}

  void AddRoutes();

  // /metrics rendered at most once per kMetricsReuse and shared by the requests in between:
  // a thousand concurrent scrapers (or a thousand that never read their answer) hold one body,
  // not a thousand. The collectors write once a tick (1 s by default), so nothing is missed.
  std::shared_ptr<const std::string> MetricsText() {
    const TimeNs now = NowNs();
    std::lock_guard lock(metrics_mu);
    if (!metrics_body || now - metrics_rendered_at >= kMetricsReuse || now < metrics_rendered_at) {
      metrics_body =
          http.TrackedBody(RenderPrometheusText(store, now - options.stale_after, options.exposition));
      metrics_rendered_at = now;
    }
    return metrics_body;
  }

  static constexpr TimeNs kMetricsReuse = 500 * kNsPerMs;
  std::mutex metrics_mu;
  std::shared_ptr<const std::string> metrics_body;  // guarded by metrics_mu
  TimeNs metrics_rendered_at = 0;

  const store::Store& store;
  ServerSources sources;
  ServerOptions options;
  // Last, so that it stops (and joins the handlers' threads) before the members they read go.
  HttpBase http;
};

void HttpServer::Impl::AddRoutes() {
  http.Get("/metrics", "/metrics", [this](const HttpRequest&) {
    ApiResponse r;
    r.content_type = std::string(kPrometheusContentType);
    r.shared_body = MetricsText();
    return r;
  });
  http.Get("/api/v1/series", "series",
           [this](const HttpRequest& req) { return ServeSeries(store, req.params, options, NowNs()); });
  http.Get("/api/v1/events", "events",
           [this](const HttpRequest& req) { return ServeEvents(store, req.params); });
  http.Get("/api/v1/steps", "steps",
           [this](const HttpRequest& req) { return ServeSteps(store, req.params, NowNs()); });
  http.Get("/api/v1/metrics", "metrics list", [this](const HttpRequest&) {
    return ServeMetricList(store, sources.metric_descs ? sources.metric_descs() : std::vector<MetricDesc>());
  });
  http.Get(std::string(kHealthPath), "healthz", [this](const HttpRequest&) {
    return ServeHealth(sources.collectors ? sources.collectors() : std::vector<agent::CollectorStatus>());
  });
  http.Get("/api/v1/diagnoses", "diagnoses", [this](const HttpRequest&) {
    const bool enabled = static_cast<bool>(sources.diagnoses);
    return ServeDiagnoses(enabled, enabled ? sources.diagnoses() : std::vector<Diagnosis>());
  });
  http.Get("/api/v1/version", "version", [this](const HttpRequest&) { return ServeVersion(options.node); });
}

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const store::Store& store, ServerSources sources,
                                                      ServerOptions options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "threads must be in [1, {}], got {}", kMaxThreads,
                      options.threads);
  }
  if (options.request_timeout <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "request timeout must be positive");
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>(store, std::move(sources), std::move(options));
  Impl& impl = *server->impl_;
  impl.AddRoutes();
  if (Status started = impl.http.Start(); !started) return std::unexpected(started.error());
  const ServerOptions& o = impl.options;
  spdlog::info("http: serving on {}:{}{}", o.bind_address, impl.http.port(),
               o.bearer_token.empty() ? "" : " (bearer token required)");
  return server;
}

void HttpServer::Stop() {
  if (impl_) impl_->http.Stop();
}

uint16_t HttpServer::port() const { return impl_ ? impl_->http.port() : 0; }

void HttpServer::SetBearerToken(std::string token) {
  if (impl_) impl_->http.SetBearerToken(std::move(token));
}

}  // namespace ithbat::serve
