#include "runner/story.h"

#include <charconv>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::sim::runner {
namespace {

bool ParseInt(std::string_view v, int64_t* out) {
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return ec == std::errc() && p == v.data() + v.size() && *out >= 0;
}

bool ParseSeconds(std::string_view v, double* out) {
  const std::string s(v);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && *out >= 0 && *out <= 1e7;
}

}  // namespace

Result<StoryMilestone> ParseMilestone(std::string_view text) {
  StoryMilestone m;
  int counts = 0;
  auto bad = [&](std::string_view why) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "story milestone \"{}\": {}", text, why);
  };
  if (text.size() > 512) return bad("too long");
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad("each part is KEY=VALUE");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "job" || key == "event") {
      if (!scenario::IsValidName(value)) return bad(fmt::format("{} is not a valid name", key));
      (key == "job" ? m.job : m.event) = std::string(value);
    } else if (key == "step" || key == "steps" || key == "saves") {
      int64_t n = 0;
      if (!ParseInt(value, &n)) return bad(fmt::format("{} is not a count", key));
      (key == "step" ? m.step : key == "steps" ? m.steps : m.saves) = n;
      ++counts;
    } else if (key == "seconds") {
      if (!ParseSeconds(value, &m.seconds)) return bad("seconds is not a number of seconds");
      ++counts;
    } else {
      return bad(fmt::format("unknown key {}", key));
    }
    if (comma == text.size()) break;
  }
  if (counts != 1) return bad("exactly one of step, steps, saves, seconds");
  if (m.step >= 0 && (m.job.empty() || !m.event.empty())) return bad("step= needs job= and no event=");
  if ((m.steps > 0 || m.saves > 0) && (m.job.empty() || m.event.empty())) return bad("steps= and saves= need job= and event=");
  if (m.seconds > 0 && !m.job.empty()) return bad("seconds= counts from an event or the start, not a job");
  return m;
}

std::string FormatMilestone(const StoryMilestone& m) {
  if (m.step >= 0) return fmt::format("job {} reaches step {}", m.job, m.step);
  if (m.steps > 0) return fmt::format("{} steps of job {} after event {}", m.steps, m.job, m.event);
  if (m.saves > 0) return fmt::format("{} saves of job {} after event {}", m.saves, m.job, m.event);
  if (!m.event.empty()) return fmt::format("{:g} s after event {}", m.seconds, m.event);
  return fmt::format("{:g} s of the world", m.seconds);
}

std::vector<StoryMilestone> ImplicitMilestones(const scenario::ResolvedScenario& s) {
  std::vector<StoryMilestone> out;
  for (const auto& job : s.jobs) {
    int64_t step = -1;
    std::string why;
    for (const auto& at : scenario::ScriptedLossSteps(job)) {
      if (at.step > step) {
        step = at.step;
        why = fmt::format("step {} ({})", at.step, at.what);
      }
    }
    if (scenario::ScriptedToEnd(s, job)) {
      step = scenario::LastStep(job);
      why = "its last step (the script has it end within the duration)";
    }
    if (step < 0) continue;
    StoryMilestone m;
    m.job = job.id;
    m.step = step;
    m.why = fmt::format("job {}: {}", job.id, why);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace ithbat::sim::runner
