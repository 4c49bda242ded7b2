#include "detect/detector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "detect/registry.h"

namespace ithbat::detect {

std::span<const DetectorInfo> Detectors() { return RegisteredDetectors(); }

std::vector<Finding> RunDetectors(const FleetView& view, TimeNs from, TimeNs now) {
  const FleetView clamped = view.AsOf(now);
  const std::vector<JobView> jobs = DiscoverJobs(clamped, from, now);
  return RunDetectors(DetectInput{clamped, jobs, from, now});
}

std::vector<Finding> RunDetectors(const DetectInput& in) {
  std::vector<Finding> out;
  for (const auto& d : Detectors()) {
    auto f = d.run(in);
    for (auto& x : f) {
      if (x.detector.empty()) x.detector = std::string(d.name);
      out.push_back(std::move(x));
    }
  }
  return out;
}

std::string EventAttr(const Event& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return {};
}

Evidence MakeEvidence(std::string signal, std::string_view collector, std::string subject, double observed,
                      double expected, std::string unit, std::string note, TimeWindow window) {
  Evidence e;
  e.signal = std::move(signal);
  e.collector = std::string(collector);
  e.subject = std::move(subject);
  e.observed = observed;
  e.expected = expected;
  e.unit = std::move(unit);
  e.note = std::move(note);
  e.window = window;
  return e;
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

double Mean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

}  // namespace ithbat::detect
