#include "detect/fleet_view.h"

#include <algorithm>

namespace ithbat::detect {

std::optional<double> SampleAt(const std::vector<store::Sample>& samples, TimeNs t) {
  std::optional<double> v;
  for (const auto& x : samples) {
    if (x.t > t) break;
    v = x.v;
  }
  return v;
}

double CounterGrowth(const std::vector<store::Sample>& samples, TimeNs a, TimeNs b) {
  double total = 0;
  std::optional<double> prev = SampleAt(samples, a);
  for (const auto& x : samples) {
    if (x.t <= a) continue;
    if (x.t > b) break;
    if (prev) total += x.v >= *prev ? x.v - *prev : x.v;
    prev = x.v;
  }
  return total;
}

FleetView FleetView::Owning(std::map<std::string, std::unique_ptr<store::Store>> stores) {
  FleetView v;
  v.owned_ = std::make_shared<std::vector<std::unique_ptr<store::Store>>>();
  for (auto& [name, s] : stores) {
    v.stores_.emplace(name, s.get());
    v.owned_->push_back(std::move(s));
  }
  return v;
}

FleetView FleetView::Borrowing(std::map<std::string, const store::Store*> stores) {
  FleetView v;
  v.stores_ = std::move(stores);
  return v;
}

FleetView FleetView::AsOf(TimeNs horizon) const {
  FleetView v;
  v.stores_ = stores_;
  v.owned_ = owned_;  // shared: the clamped view keeps owned stores alive too
  v.horizon_ = std::min(horizon_, horizon);
  return v;
}

const store::Store* FleetView::StoreOf(const std::string& node) const {
  auto it = stores_.find(node);
  return it == stores_.end() ? nullptr : it->second;
}

std::vector<std::string> FleetView::Nodes() const {
  std::vector<std::string> out;
  for (const auto& [name, s] : stores_) out.push_back(name);
  return out;
}

std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> FleetView::Samples(const std::string& node,
                                                                                   const std::string& selector,
                                                                                   TimeNs from, TimeNs to) const {
  std::vector<std::pair<SeriesValue, std::vector<store::Sample>>> out;
  to = std::min(to, horizon_);
  if (from > to) return out;
  auto sel = store::SeriesSelector::Parse(selector);
  if (!sel) return out;
  for (const auto& [name, s] : stores_) {
    if (!node.empty() && name != node) continue;
    auto data = s->Select(*sel, from, to);
    if (!data) continue;
    for (auto& d : *data) out.push_back({SeriesValue{name, d.info.labels, 0}, std::move(d.samples)});
  }
  return out;
}

std::vector<SeriesValue> FleetView::Increase(const std::string& node, const std::string& selector, TimeNs from,
                                             TimeNs to, Birth birth) const {
  std::vector<SeriesValue> out;
  // From the last sample before the window (the counter's value when it opened); a series born
  // inside it starts at its first sample or at zero (Birth).
  for (auto& [v, samples] : Samples(node, selector, kMinTime, to)) {
    size_t first = 0;
    while (first < samples.size() && samples[first].t < from) ++first;
    if (first == samples.size()) continue;  // nothing in the window
    double prev = first > 0 ? samples[first - 1].v : birth == Birth::kZero ? 0 : samples[first].v;
    double growth = 0;
    for (size_t i = first; i < samples.size(); ++i) {
      const double d = samples[i].v - prev;
      growth += d >= 0 ? d : samples[i].v;  // a reset: the new value is growth
      prev = samples[i].v;
    }
    v.value = growth;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<SeriesValue> FleetView::Mean(const std::string& node, const std::string& selector, TimeNs from,
                                         TimeNs to) const {
  std::vector<SeriesValue> out;
  for (auto& [v, samples] : Samples(node, selector, from, to)) {
    if (samples.empty()) continue;
    double sum = 0;
    for (const auto& s : samples) sum += s.v;
    v.value = sum / static_cast<double>(samples.size());
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<SeriesValue> FleetView::Max(const std::string& node, const std::string& selector, TimeNs from,
                                        TimeNs to) const {
  std::vector<SeriesValue> out;
  for (auto& [v, samples] : Samples(node, selector, from, to)) {
    if (samples.empty()) continue;
    double m = samples.front().v;
    for (const auto& s : samples) m = std::max(m, s.v);
    v.value = m;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Event> FleetView::Events(const store::EventQuery& query) const {
  std::vector<Event> out;
  store::EventQuery q = query;
  q.to = std::min(q.to, horizon_);
  if (q.from > q.to) return out;
  for (const auto& [name, s] : stores_) {
    auto e = s->Events(q);
    for (auto& ev : e) {
      if (ev.identity.node.empty()) ev.identity.node = name;
      out.push_back(std::move(ev));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) { return a.time < b.time; });
  return out;
}

std::vector<StepSpan> FleetView::Steps(const std::string& node, const std::string& job, int32_t rank, TimeNs from,
                                       TimeNs to) const {
  const store::Store* s = StoreOf(node);
  if (s == nullptr) return {};
  to = std::min(to, horizon_);
  if (from > to) return {};
  auto spans = s->Steps(job, rank, from, to);
  // A step still open at the horizon is not known yet.
  std::erase_if(spans, [&](const StepSpan& sp) { return sp.end > to; });
  return spans;
}

}  // namespace ithbat::detect
