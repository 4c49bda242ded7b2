// The hub's self-metrics in the Prometheus text format 0.0.4 (rendered from the hub's state on
// each scrape: the hub keeps no store of its own).
#include <map>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/labels.h"
#include "core/version.h"
#include "hub/hub.h"
#include "serve/text_format.h"

namespace ithbat::hub {
namespace {

void Family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, serve::EscapeHelp(help), name, type);
}

std::string Value(double v) { return serve::FormatSampleValue(v); }

}  // namespace

std::string RenderHubMetrics(const Hub& hub, const NotifyCounters& notify) {
  const HubStats stats = hub.Stats();
  const std::vector<AgentState> agents = hub.Agents();
  const std::vector<Diagnosis> diagnoses = hub.Current();
  std::string out;

  // The same family as the agents' (agent/runtime.cc): one count by version covers the fleet.
  Family(out, "ithbat_build_info", "gauge",
         "Always 1; labels carry the hub's version, build type and compiler");
  out += fmt::format("ithbat_build_info{{version=\"{}\",build_type=\"{}\",compiler=\"{}\"}} 1\n",
                     EscapeLabelValue(kVersion), EscapeLabelValue(*kBuildType ? kBuildType : "none"),
                     EscapeLabelValue(kCompiler));

  Family(out, "ithbat_hub_agent_up", "gauge", "Whether the hub's last pull reached the agent (1) or not (0)");
  for (const auto& a : agents) {
    out += fmt::format("ithbat_hub_agent_up{{agent=\"{}\",node=\"{}\"}} {}\n",
                       EscapeLabelValue(a.target.Address()), EscapeLabelValue(a.target.node), a.up ? 1 : 0);
  }
  Family(out, "ithbat_hub_agent_pull_seconds", "gauge", "Wall time of the hub's last pull from the agent");
  for (const auto& a : agents) {
    out += fmt::format("ithbat_hub_agent_pull_seconds{{agent=\"{}\",node=\"{}\"}} {}\n",
                       EscapeLabelValue(a.target.Address()), EscapeLabelValue(a.target.node),
                       Value(a.last_pull_seconds));
  }
  Family(out, "ithbat_hub_agent_pull_errors_total", "counter",
         "Pulls from the agent that failed or were partial");
  for (const auto& a : agents) {
    out += fmt::format("ithbat_hub_agent_pull_errors_total{{agent=\"{}\",node=\"{}\"}} {}\n",
                       EscapeLabelValue(a.target.Address()), EscapeLabelValue(a.target.node), a.pull_errors);
  }

  // Several diagnoses may share {verdict, cause, job} (different resources): open wins.
  std::map<std::tuple<std::string, std::string, std::string>, int> active;
  for (const Diagnosis& d : diagnoses) {
    auto key =
        std::make_tuple(std::string(VerdictName(d.verdict)), std::string(CauseName(d.cause)), d.subjects.job);
    const int v = d.state == DiagnosisState::kResolved ? 0 : 1;
    auto [it, inserted] = active.try_emplace(key, v);
    if (!inserted) it->second = std::max(it->second, v);
  }
  Family(out, "ithbat_hub_diagnosis_active", "gauge",
         "1 while a hub diagnosis of this verdict, cause and job is open, 0 once resolved");
  for (const auto& [key, v] : active) {
    const auto& [verdict, cause, job] = key;
    out += fmt::format("ithbat_hub_diagnosis_active{{cause=\"{}\",job_id=\"{}\",verdict=\"{}\"}} {}\n",
                       EscapeLabelValue(cause), EscapeLabelValue(job), EscapeLabelValue(verdict), v);
  }

  Family(out, "ithbat_hub_round_errors_total", "counter",
         "Hub rounds whose engine failed (the previous diagnoses stay)");
  out += fmt::format("ithbat_hub_round_errors_total {}\n", stats.round_errors);
  Family(out, "ithbat_hub_round_seconds", "gauge", "Wall time of the hub's last round (pulls and engine)");
  out += fmt::format("ithbat_hub_round_seconds {}\n", Value(stats.last_round_seconds));
  Family(out, "ithbat_hub_rounds_total", "counter", "Rounds the hub ran");
  out += fmt::format("ithbat_hub_rounds_total {}\n", stats.rounds);

  if (notify.enabled) {
    Family(out, "ithbat_hub_webhook_dropped_total", "counter",
           "Webhook messages never tried: the queue was full or the hub stopped first");
    out += fmt::format("ithbat_hub_webhook_dropped_total {}\n", notify.dropped);
    Family(out, "ithbat_hub_webhook_failed_total", "counter",
           "Webhook messages given up (a 4xx other than 429, or retries exhausted)");
    out += fmt::format("ithbat_hub_webhook_failed_total {}\n", notify.failed);
    Family(out, "ithbat_hub_webhook_queued", "gauge", "Webhook messages waiting to be sent");
    out += fmt::format("ithbat_hub_webhook_queued {}\n", notify.queued);
    Family(out, "ithbat_hub_webhook_retries_total", "counter", "Webhook delivery attempts after the first");
    out += fmt::format("ithbat_hub_webhook_retries_total {}\n", notify.retries);
    Family(out, "ithbat_hub_webhook_sent_total", "counter", "Webhook messages delivered (2xx)");
    out += fmt::format("ithbat_hub_webhook_sent_total {}\n", notify.sent);
  }
  return out;
}

}  // namespace ithbat::hub
