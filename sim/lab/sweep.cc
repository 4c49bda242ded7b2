#include "lab/sweep.h"

#include <algorithm>

#include <fmt/core.h>
#include <fmt/format.h>

#include "lab/signal_checks.h"

namespace ithbat::sim::lab {
namespace {

using scenario::Cause;

bool SignalsHold(const FindingCheck& c) {
  if (c.skipped || c.signals.empty()) return false;
  return std::all_of(c.signals.begin(), c.signals.end(), [](const SignalResult& s) { return s.ok; });
}

std::string CheckpointMount(const scenario::ResolvedScenario& resolved, const std::string& job) {
  for (const auto& j : resolved.jobs) {
    if (j.id == job && j.checkpoint) return j.checkpoint->mount;
  }
  return "";
}

std::string Name(Cause c) { return std::string(scenario::CauseName(c)); }

}  // namespace

const std::vector<Cause>& CheckableCauses() {
  static const std::vector<Cause> kCauses = {
      Cause::kDataImbalance, Cause::kInputPipeline, Cause::kHostBottleneck, Cause::kServingConfig,
      Cause::kRecipeNumerics, Cause::kNoLearning, Cause::kStorage, Cause::kNetwork,
      Cause::kGpuHardware, Cause::kThermalPower, Cause::kSilentDataCorruption, Cause::kHang,
  };
  return kCauses;
}

std::set<Cause> ShownCauses(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                            const scenario::Expectations& expect) {
  std::vector<scenario::ExpectedFinding> subjects = expect.findings;
  if (subjects.empty()) {
    for (const auto& j : world.jobs) {
      scenario::ExpectedFinding f;
      f.job = j.id;
      subjects.push_back(f);
    }
    for (const auto& s : world.servers) {
      scenario::ExpectedFinding f;
      f.job = s.id;
      subjects.push_back(f);
    }
  }
  std::set<Cause> shown;
  for (const auto& base : subjects) {
    for (Cause c : CheckableCauses()) {
      if (shown.count(c) > 0) continue;
      scenario::ExpectedFinding f = base;
      f.cause = c;
      if (c == Cause::kStorage && world.Mount(f.resource) == nullptr) f.resource = CheckpointMount(resolved, f.job);
      if (SignalsHold(CheckFinding(world, evidence, resolved, f))) shown.insert(c);
    }
  }
  return shown;
}

std::string FormatSweep(const std::vector<SweepRun>& runs) {
  std::string out;
  // Causes in a fixed order: every checkable one that appears, then "none".
  std::vector<std::string> order;
  auto seen = [&](const std::string& name) {
    for (const auto& r : runs) {
      if (r.expected.count(name) > 0 || r.shown.count(name) > 0) return true;
    }
    return false;
  };
  for (Cause c : CheckableCauses()) {
    if (seen(Name(c))) order.push_back(Name(c));
  }
  order.push_back("none");
  std::set<double> magnitudes;
  for (const auto& r : runs) magnitudes.insert(r.magnitude);

  auto matrix = [&](const std::string& title, auto include) {
    std::map<std::pair<std::string, std::string>, int> m;
    int n = 0, exact = 0;
    for (const auto& r : runs) {
      if (!r.ran || !include(r)) continue;
      ++n;
      exact += r.expected == r.shown ? 1 : 0;
      for (const auto& e : r.expected) {
        for (const auto& s : r.shown) ++m[{e, s}];
      }
    }
    out += fmt::format("\n{} — {} run(s), {} with exactly the expected causes shown\n", title, n, exact);
    out += fmt::format("{:>24} |", "expected \\ shown");
    for (size_t i = 0; i < order.size(); ++i) out += fmt::format(" {:>3}", i + 1);
    out += "\n";
    for (const auto& e : order) {
      bool any = false;
      for (const auto& s : order) any |= m.count({e, s}) > 0;
      if (!any) continue;
      out += fmt::format("{:>24} |", e);
      for (const auto& s : order) {
        auto it = m.find({e, s});
        out += it == m.end() ? "   ." : fmt::format(" {:>3}", it->second);
      }
      out += "\n";
    }
  };
  out += "columns: ";
  for (size_t i = 0; i < order.size(); ++i) out += fmt::format("{}{}={}", i ? ", " : "", i + 1, order[i]);
  out += "\n";
  if (magnitudes.size() > 1) {
    for (double mg : magnitudes) {
      matrix(fmt::format("magnitude {:g}", mg), [&](const SweepRun& r) { return r.magnitude == mg; });
    }
  }
  matrix("all magnitudes", [](const SweepRun&) { return true; });

  out += "\nruns:\n";
  for (const auto& r : runs) {
    if (!r.ran) {
      out += fmt::format("  {} m={:g} seed {}: ERROR {}\n", r.scenario, r.magnitude, r.seed, r.error);
      continue;
    }
    std::vector<std::string> missed, extra;
    std::set_difference(r.expected.begin(), r.expected.end(), r.shown.begin(), r.shown.end(),
                        std::back_inserter(missed));
    std::set_difference(r.shown.begin(), r.shown.end(), r.expected.begin(), r.expected.end(),
                        std::back_inserter(extra));
    out += fmt::format("  {} m={:g} seed {}: expected {{{}}} shown {{{}}}{}{}\n", r.scenario, r.magnitude, r.seed,
                       fmt::join(r.expected, ","), fmt::join(r.shown, ","),
                       missed.empty() ? "" : fmt::format(" missed {{{}}}", fmt::join(missed, ",")),
                       extra.empty() ? "" : fmt::format(" extra {{{}}}", fmt::join(extra, ",")));
  }
  return out;
}

}  // namespace ithbat::sim::lab
