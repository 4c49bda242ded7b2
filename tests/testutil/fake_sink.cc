#include "testutil/fake_sink.h"

#include <algorithm>
#include <bit>

namespace ithbat::testing {
namespace {

bool Matches(const FakeSink::Series& s, std::string_view name, const FakeSink::LabelSubset& subset) {
  if (s.desc.name != name) return false;
  for (const auto& [k, v] : subset) {
    if (s.labels.Get(k) != std::optional<std::string_view>(v)) return false;
  }
  return true;
}

}  // namespace

Result<SeriesRef> FakeSink::RegisterSeries(const MetricDesc& desc, const LabelSet& labels) {
  std::lock_guard lock(mu_);
  registrations_++;
  if (refused_names_.contains(desc.name)) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "registration of {} refused by the test", desc.name);
  }
  if (Status s = ValidateMetricDesc(desc); !s) return std::unexpected(s.error());
  for (size_t i = 0; i < series_.size(); i++) {
    const MetricDesc& d = series_[i].desc;
    if (d.name != desc.name) continue;
    if (d.help != desc.help || d.unit != desc.unit || d.type != desc.type) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "desc of {} conflicts with an earlier one", desc.name);
    }
    if (series_[i].labels == labels) return static_cast<SeriesRef>(i);
  }
  if (max_series_ && series_.size() >= *max_series_) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{} series held already", series_.size());
  }
  series_.push_back(Series{.desc = desc, .labels = labels});
  return static_cast<SeriesRef>(series_.size() - 1);
}

Status FakeSink::Append(SeriesRef ref, TimeNs t, double value) {
  std::lock_guard lock(mu_);
  if (refuse_appends_) return MakeError(*refuse_appends_, "append refused by the test");
  if (ref >= series_.size()) return MakeErrorF(ErrorCode::kNotFound, "unknown series ref {}", ref);
  Series& s = series_[ref];
  // Tracked before the order check: a refused append from a second thread is still a second writer.
  if (s.samples.empty()) {
    s.writer = std::this_thread::get_id();
  } else if (s.writer != std::this_thread::get_id()) {
    s.many_writers = true;
  }
  if (!s.samples.empty()) {
    const auto [last_t, last_v] = s.samples.back();
    if (t < last_t) {
      out_of_order_++;
      return MakeErrorF(ErrorCode::kOutOfOrder, "series {}: sample at {} is older than the newest ({})", ref,
                        t, last_t);
    }
    if (t == last_t) {
      // Bitwise, as the store compares: a resent NaN is the same sample.
      if (std::bit_cast<uint64_t>(value) == std::bit_cast<uint64_t>(last_v)) {
        repeats_++;
        return Ok();
      }
      duplicates_++;
      return MakeErrorF(ErrorCode::kDuplicate, "series {}: another value for time {}", ref, t);
    }
  }
  s.samples.emplace_back(t, value);
  appends_++;
  return Ok();
}

Status FakeSink::AppendEvent(Event event) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(event));
  return Ok();
}

Status FakeSink::RecordStep(std::string_view job, int32_t rank, StepSpan span) {
  if (span.end < span.start) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "step {} of {}/{}: end before start", span.step, job,
                      rank);
  }
  std::lock_guard lock(mu_);
  // A step already known is updated in place (logged steps calibrate inferred ones).
  for (Step& s : steps_) {
    if (s.job == job && s.rank == rank && s.span.step == span.step) {
      s.span = span;
      return Ok();
    }
  }
  steps_.push_back(Step{std::string(job), rank, span});
  return Ok();
}

void FakeSink::RefuseRegistration(std::string name) {
  std::lock_guard lock(mu_);
  refused_names_.insert(std::move(name));
}

void FakeSink::SetMaxSeries(size_t max_series) {
  std::lock_guard lock(mu_);
  max_series_ = max_series;
}

void FakeSink::RefuseAppends(std::optional<ErrorCode> code) {
  std::lock_guard lock(mu_);
  refuse_appends_ = code;
}

std::vector<FakeSink::Series> FakeSink::series() const {
  std::lock_guard lock(mu_);
  return series_;
}

std::vector<Event> FakeSink::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

std::vector<FakeSink::Step> FakeSink::steps() const {
  std::lock_guard lock(mu_);
  return steps_;
}

size_t FakeSink::series_count() const {
  std::lock_guard lock(mu_);
  return series_.size();
}

size_t FakeSink::event_count() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::optional<FakeSink::Series> FakeSink::Find(std::string_view name, std::string_view labels) const {
  std::lock_guard lock(mu_);
  for (const Series& s : series_) {
    if (s.desc.name == name && s.labels.ToString() == labels) return s;
  }
  return std::nullopt;
}

std::optional<FakeSink::Series> FakeSink::FindWith(std::string_view name, const LabelSubset& subset) const {
  std::lock_guard lock(mu_);
  for (const Series& s : series_) {
    if (Matches(s, name, subset)) return s;
  }
  return std::nullopt;
}

std::optional<double> FakeSink::Last(std::string_view name, std::string_view labels) const {
  std::lock_guard lock(mu_);
  for (const Series& s : series_) {
    if (s.desc.name == name && s.labels.ToString() == labels) {
      if (s.samples.empty()) return std::nullopt;
      return s.samples.back().second;
    }
  }
  return std::nullopt;
}

std::optional<double> FakeSink::ValueAt(std::string_view name, const LabelSubset& subset, TimeNs t) const {
  std::lock_guard lock(mu_);
  for (const Series& s : series_) {
    if (!Matches(s, name, subset)) continue;
    for (const auto& [st, sv] : s.samples) {
      if (st == t) return sv;
    }
  }
  return std::nullopt;
}

size_t FakeSink::CountSeries(std::string_view name) const {
  std::lock_guard lock(mu_);
  return std::count_if(series_.begin(), series_.end(), [&](const Series& s) { return s.desc.name == name; });
}

size_t FakeSink::CountByPrefix(std::string_view name_prefix) const {
  std::lock_guard lock(mu_);
  return std::count_if(series_.begin(), series_.end(),
                       [&](const Series& s) { return s.desc.name.starts_with(name_prefix); });
}

size_t FakeSink::CountWithSamples(std::string_view name_prefix) const {
  std::lock_guard lock(mu_);
  return std::count_if(series_.begin(), series_.end(), [&](const Series& s) {
    return !s.samples.empty() && s.desc.name.starts_with(name_prefix);
  });
}

size_t FakeSink::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

uint64_t FakeSink::appends() const {
  std::lock_guard lock(mu_);
  return appends_;
}

uint64_t FakeSink::out_of_order() const {
  std::lock_guard lock(mu_);
  return out_of_order_;
}

uint64_t FakeSink::duplicates() const {
  std::lock_guard lock(mu_);
  return duplicates_;
}

uint64_t FakeSink::repeats() const {
  std::lock_guard lock(mu_);
  return repeats_;
}

uint64_t FakeSink::appends_not_newer() const {
  std::lock_guard lock(mu_);
  return out_of_order_ + duplicates_ + repeats_;
}

}  // namespace ithbat::testing
