#include "cli/diagnosis_collector.h"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/labels.h"

namespace ithbat::cli {
namespace {

constexpr char kKeySep = '\x1f';  // cannot appear in a verdict or cause name

std::string Key(std::string_view verdict, std::string_view cause, std::string_view job) {
  std::string key;
  key.reserve(verdict.size() + cause.size() + job.size() + 2);
  key.append(verdict);
  key += kKeySep;
  key.append(cause);
  key += kKeySep;
  key.append(job);
  return key;
}

MetricDesc ActiveDesc() {
  return {"ithbat_diagnosis_active",
          "1 while a diagnosis of this verdict, cause and job is open on this node, 0 once resolved",
          "",
          MetricType::kGauge,
          {"verdict", "cause", "job_id"}};
}
MetricDesc RoundsDesc() {
  return {"ithbat_diagnosis_rounds_total",
          "Diagnosis rounds the agent ran over its own store",
          "",
          MetricType::kCounter,
          {}};
}
MetricDesc ErrorsDesc() {
  return {"ithbat_diagnosis_errors_total",
          "Diagnosis rounds that failed (the previous diagnoses stay served)",
          "",
          MetricType::kCounter,
          {}};
}
MetricDesc RoundSecondsDesc() {
  return {"ithbat_diagnosis_round_seconds",
          "Wall time of the last diagnosis round",
          "seconds",
          MetricType::kGauge,
          {}};
}

}  // namespace

DiagnosisCollector::DiagnosisCollector(investigate::NodeDiagnoser& diagnoser, const store::Store& store,
                                       std::string node)
    : Collector("diagnosis"), diagnoser_(diagnoser), store_(store), node_(std::move(node)) {}

std::vector<MetricDesc> DiagnosisCollector::Describe() const {
  return {ActiveDesc(), ErrorsDesc(), RoundSecondsDesc(), RoundsDesc()};
}

Status DiagnosisCollector::InitImpl(Sink& sink) {
  auto rounds = sink.RegisterSeries(RoundsDesc(), LabelSet());
  if (!rounds) return std::unexpected(rounds.error());
  auto errors = sink.RegisterSeries(ErrorsDesc(), LabelSet());
  if (!errors) return std::unexpected(errors.error());
  auto seconds = sink.RegisterSeries(RoundSecondsDesc(), LabelSet());
  if (!seconds) return std::unexpected(seconds.error());
  rounds_ = *rounds;
  errors_ = *errors;
  round_seconds_ = *seconds;
  sink_ = &sink;
  return Ok();
}

Result<SeriesRef> DiagnosisCollector::ActiveSeries(const std::string& verdict, const std::string& cause,
                                                   const std::string& job) {
  const std::string key = Key(verdict, cause, job);
  if (auto it = active_refs_.find(key); it != active_refs_.end()) return it->second;
  // An empty job (a diagnosis about a server or a resource) drops the label.
  auto labels = LabelSet::From({{"verdict", verdict}, {"cause", cause}, {"job_id", job}});
  if (!labels) return std::unexpected(labels.error());
  auto ref = sink_->RegisterSeries(ActiveDesc(), *labels);
  if (!ref) return std::unexpected(ref.error());
  active_refs_.emplace(key, *ref);
  return *ref;
}

Status DiagnosisCollector::CollectImpl(TimeNs tick_time) {
  // A failed round is a partial failure: the self-metrics and the previous diagnoses are still
  // written, and the collector stays up so one bad round does not look like a dead agent.
  if (auto st = diagnoser_.Round(store_, node_, tick_time); !st) ReportError(st.error());

  auto append = [&](SeriesRef ref, double v) {
    if (auto st = sink_->Append(ref, tick_time, v); !st) ReportError(st.error());
  };
  const investigate::NodeDiagnoserStats stats = diagnoser_.Stats();
  append(rounds_, static_cast<double>(stats.rounds));
  append(errors_, static_cast<double>(stats.errors));
  append(round_seconds_, static_cast<double>(stats.last_round_duration) / kNsPerSec);

  // Several diagnoses may share {verdict, cause, job} (different resources): open wins.
  std::map<std::string, std::tuple<std::string, std::string, std::string, double>> now_active;
  for (const Diagnosis& d : diagnoser_.Current()) {
    const std::string verdict(VerdictName(d.verdict));
    const std::string cause(CauseName(d.cause));
    const std::string key = Key(verdict, cause, d.subjects.job);
    const double v = d.state == DiagnosisState::kResolved ? 0.0 : 1.0;
    auto [it, inserted] = now_active.try_emplace(key, verdict, cause, d.subjects.job, v);
    if (!inserted) std::get<3>(it->second) = std::max(std::get<3>(it->second), v);
  }
  std::set<std::string> written;
  for (const auto& [key, entry] : now_active) {
    const auto& [verdict, cause, job, v] = entry;
    auto ref = ActiveSeries(verdict, cause, job);
    if (!ref) {
      ReportError(ref.error());
      continue;
    }
    append(*ref, v);
    written.insert(key);
  }
  // A diagnosis the investigator forgot (resolved long enough ago) ends at 0, not at its last
  // value, so a dashboard never shows it active until the series goes stale.
  for (const auto& key : written_last_tick_) {
    if (written.contains(key)) continue;
    if (auto it = active_refs_.find(key); it != active_refs_.end()) append(it->second, 0.0);
  }
  written_last_tick_ = std::move(written);
  return Ok();
}

}  // namespace ithbat::cli
