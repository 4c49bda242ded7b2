#include "lab/story_check.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/jobs.h"
#include "detect/stragglers/stragglers.h"
#include "lab/check_util.h"
#include "scenario/script.h"

namespace ithbat::sim::lab {
namespace {

using scenario::BudgetFrom;
using scenario::BudgetUnit;
using scenario::ExpectedBudget;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Scenario seconds from the world's start.
double ScenarioSeconds(const World& world, TimeNs t) {
  return static_cast<double>(t - world.started) / 1e9 * world.time_compression;
}

std::vector<double> ScenarioTimes(const World& world, const std::vector<TimeNs>& times) {
  std::vector<double> out;
  for (TimeNs t : times) out.push_back(ScenarioSeconds(world, t));
  return out;
}

std::string EventName(const scenario::ResolvedScenario& s, size_t i) {
  return s.timeline[i].id.empty() ? fmt::format("event #{}", i) : s.timeline[i].id;
}

int64_t LastStepReached(const WorldJob& job) {
  int64_t last = -1;
  for (const auto& s : job.steps) last = std::max(last, s.step);
  return last;
}

// The world stopped the job (it did not end by itself before the world did).
bool StoppedByTheWorld(const World& world, const WorldJob& job) {
  return job.ended == 0 || (world.ended > 0 && job.ended >= world.ended);
}

// When the story's first timeline event fired (0: none did).
TimeNs FirstEventTime(const World& world) {
  TimeNs first = 0;
  for (const auto& e : world.events) {
    if (e.started > 0 && (first == 0 || e.started < first)) first = e.started;
  }
  return first;
}

// Every rank's step against what the script asks of it, before the first timeline event.
std::optional<JobPace> PaceOf(const World& world, const WorldJob& job) {
  const TimeNs first_event = FirstEventTime(world);
  std::vector<double> planned, achieved;
  auto saving = [&](int64_t step) {
    return std::any_of(job.saves.begin(), job.saves.end(),
                       [&](const WorldSave& s) { return s.step == step || s.step + 1 == step; });
  };
  for (size_t i = 1; i < job.steps.size(); ++i) {
    const WorldStep& prev = job.steps[i - 1];
    const WorldStep& s = job.steps[i];
    if (s.step != prev.step + 1 || s.planned_ns <= 0 || s.end <= prev.end || saving(s.step)) continue;
    if (first_event > 0 && s.end >= first_event) break;
    planned.push_back(static_cast<double>(s.planned_ns));
    achieved.push_back(static_cast<double>(s.end - prev.end));
  }
  if (static_cast<int>(planned.size()) < kMinPaceSteps) return std::nullopt;
  JobPace p;
  p.job = job.id;
  p.steps = static_cast<int>(planned.size());
  p.scripted_s = Median(planned) / 1e9 * world.time_compression;
  p.achieved_s = Median(achieved) / 1e9 * world.time_compression;
  return p;
}

// The job a budget counts in: the finding's, or its confirmation's.
struct CountedBudget {
  const ExpectedBudget* budget;
  std::string job;
  std::string what;  // for messages
};

std::vector<CountedBudget> Budgets(const scenario::Expectations& expect) {
  std::vector<CountedBudget> out;
  for (const auto& f : expect.findings) {
    const std::string what = fmt::format("{} {}", scenario::VerdictName(f.verdict), scenario::CauseName(f.cause));
    if (f.budget.unit) out.push_back({&f.budget, f.job, what});
    if (f.confirm && f.confirm->budget.unit)
      out.push_back({&f.confirm->budget, f.confirm->job, what + " (its confirmation)"});
  }
  return out;
}

// "" when the world covered the budget's window, else why not.
std::string Uncovered(const World& world, const scenario::ResolvedScenario& resolved, const CountedBudget& b) {
  const WorldJob* job = b.job.empty() ? nullptr : world.Job(b.job);
  const auto start = BudgetStart(world, resolved, *b.budget, job);
  const std::string unit = UnitName(*b.budget->unit);
  if (!start) return fmt::format("{}: its budget ({:g} {}) never began counting", b.what, b.budget->value, unit);
  double had = 0;
  switch (*b.budget->unit) {
    case BudgetUnit::kSteps:
      if (job != nullptr) had = static_cast<double>(job->StepsBetween(*start, world.ended + 1));
      break;
    case BudgetUnit::kSaves:
      if (job != nullptr)
        had = static_cast<double>(std::count_if(job->saves.begin(), job->saves.end(),
                                                [&](const WorldSave& s) { return s.start >= *start; }));
      break;
    case BudgetUnit::kSeconds:
      had = static_cast<double>(world.ended - *start) / 1e9 * world.time_compression;
      break;
  }
  if (had >= b.budget->value) return "";
  return fmt::format("{}: the world ended {:g} {} into its budget of {:g}", b.what, std::floor(had * 10) / 10, unit,
                     b.budget->value);
}

}  // namespace

StoryCheck CheckStory(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                      const scenario::Expectations& expect) {
  StoryCheck out;
  out.real_s = static_cast<double>(world.ended - world.started) / 1e9;
  out.planned_real_s = world.duration_real_s;
  out.host_load = scenario::ScriptedHostLoad(resolved);

  // The timeline.
  for (size_t i = 0; i < resolved.timeline.size(); ++i) {
    const auto& ev = resolved.timeline[i];
    const WorldEvent* we = i < world.events.size() ? &world.events[i] : nullptr;
    const std::string name = EventName(resolved, i);
    const std::string scripted =
        ev.at_step >= 0 ? fmt::format("at step {} of job {}", ev.at_step, ev.job) : fmt::format("at {:g} s", ev.at_s);
    if (we != nullptr && we->started > 0) {
      const double at = ScenarioSeconds(world, we->started);
      std::string step;
      if (we->fired_step >= 0) step = fmt::format(", after step {} of job {}", we->fired_step, we->job);
      out.items.push_back({fmt::format("event {} ({}) fired", name, we->kind), true, fmt::format("scripted {}, fired at {:.0f} s{}", scripted, at, step), we->started});
      out.happened.push_back(
          fmt::format("{} {:.0f} s{}", name, at, we->fired_step >= 0 ? fmt::format(" (step {})", we->fired_step) : ""));
      continue;
    }
    std::string why = fmt::format("event {} ({}) never fired", name, scripted);
    if (ev.at_step >= 0) {
      const WorldJob* job = world.Job(ev.job);
      why += job == nullptr || job->started == 0 ? fmt::format(": job {} never started", ev.job)
                                                 : fmt::format(": job {} reached step {}", ev.job, LastStepReached(*job));
    } else {
      why += fmt::format(": the world ended after {:.0f} s", ScenarioSeconds(world, world.ended));
    }
    out.items.push_back({fmt::format("event {} fired", name), false, why, std::nullopt});
    out.invalid.push_back(why);
  }

  // The jobs: started, and the steps their own loss model scripts.
  for (const auto& job : resolved.jobs) {
    const WorldJob* wj = world.Job(job.id);
    if (wj == nullptr || wj->started == 0) {
      std::string why = fmt::format("job {} never started", job.id);
      if (wj != nullptr && !wj->held.empty()) why += fmt::format(" (it waited for {})", wj->held.back().first);
      out.items.push_back({fmt::format("job {} ran", job.id), false, why, std::nullopt});
      out.invalid.push_back(why);
      continue;
    }
    const int64_t last = LastStepReached(*wj);
    // A job killed before its first step (the world stopped early) did no steps at all.
    const std::string steps = last >= scenario::FirstStep(job)
                                  ? fmt::format("steps {}–{}", scenario::FirstStep(job), last)
                                  : std::string("no steps");
    std::string ran = steps;
    if (wj->scripted_start > 0 && wj->started > wj->scripted_start + kNsPerSec) {
      ran += fmt::format(", started {:.0f} s after its scripted start",
                         static_cast<double>(wj->started - wj->scripted_start) / 1e9 * world.time_compression);
      if (!wj->held.empty()) ran += fmt::format(" (it waited for {})", wj->held.back().first);
    }
    bool all = true;
    std::vector<std::string> moments;
    for (const auto& at : scenario::ScriptedLossSteps(job)) {
      if (last >= at.step) {
        ran += fmt::format("; {} at step {}", at.what, at.step);
        moments.push_back(fmt::format("{} {}", at.word, at.step));
        continue;
      }
      if (!StoppedByTheWorld(world, *wj)) continue;  // it ended by itself first: that is its story
      all = false;
      out.invalid.push_back(fmt::format("job {} reached step {} of the {} where {} (the world ended first)", job.id,
                                        last, at.step, at.what));
    }
    out.items.push_back({fmt::format("job {} ran its scripted steps", job.id), all, ran, std::nullopt});
    out.happened.push_back(fmt::format("{} {}{}", job.id, steps,
                                       moments.empty() ? "" : fmt::format(" ({})", fmt::join(moments, ", "))));
  }
  for (const auto& sv : world.servers) {
    if (sv.started > 0) {
      const TimeNs end = sv.ended > 0 ? sv.ended : world.ended;
      out.happened.push_back(fmt::format("{} served {:.0f} s", sv.id, static_cast<double>(end - sv.started) / 1e9 *
                                                                             world.time_compression));
    }
  }
  if (world.stop_reason == "story_cap") {
    std::string why = fmt::format("the world stopped at its cap ({:.0f} s, {:.1f}× its {:.0f} s) before its story: {}",
                                  out.real_s, out.planned_real_s > 0 ? out.real_s / out.planned_real_s : 0,
                                  out.planned_real_s, fmt::join(world.story_untold, "; "));
    out.items.push_back({"the story was told before the cap", false, why, std::nullopt});
    out.invalid.push_back(why);
  }

  // The pace.
  for (const auto& wj : world.jobs) {
    auto p = PaceOf(world, wj);
    if (!p) continue;
    const bool judged = out.host_load.empty();
    const bool ok = !judged || p->pace() >= kMinPace;
    out.items.push_back({judged ? fmt::format("job {} kept its pace (at least {:g})", wj.id, kMinPace)
                                : fmt::format("job {}'s pace (not judged: the story loads the hosts)", wj.id),
                         ok,
                         fmt::format("{:.2f} s a step against the {:.2f} s its script asks: pace {:.2f} over {} steps",
                                     p->achieved_s, p->scripted_s, p->pace(), p->steps),
                         std::nullopt});
    if (!ok)
      out.invalid.push_back(fmt::format("this machine ran job {} at {:.2f}× its pace ({:.2f} s a step against {:.2f} s)",
                                        wj.id, p->pace(), p->achieved_s, p->scripted_s));
    out.min_pace = out.min_pace ? std::min(*out.min_pace, p->pace()) : p->pace();
    out.paces.push_back(*p);
  }

  // Host starvation the story does not script, before its first event: after it an idle GPU among
  // busy peers may be the story itself (a hung rank, a lost GPU, a stalled save).
  {
    const TimeNs first_event = FirstEventTime(world);
    const TimeNs until = first_event > 0 ? first_event : world.ended;
    int worst = 0, before_all = 0, after_all = 0;
    std::string where;
    std::vector<TimeNs> times;
    for (const auto& job : detect::DiscoverJobs(evidence, world.started, world.ended)) {
      for (const auto& n : detect::MeasureHostStarvation(evidence, job, world.started, world.ended)) {
        out.starved += n.samples;
        out.starved_contended += n.contended;
        std::vector<TimeNs> before;
        for (TimeNs t : n.times) {
          if (t < until) before.push_back(t);
        }
        before_all += static_cast<int>(before.size());
        after_all += static_cast<int>(n.times.size() - before.size());
        if (static_cast<int>(before.size()) > worst) {
          worst = static_cast<int>(before.size());
          where = n.node;
          times = before;
        }
      }
    }
    const bool seen = worst >= detect::kMinStarvedSamples;
    const std::string observed = fmt::format(
        "{} sample(s) of a GPU starved of launches while its node peers were busy{} ({} of all {} while its rank's "
        "main thread waited for a CPU){}",
        before_all, first_event > 0 ? fmt::format(" before the first event, {} after it", after_all) : "",
        out.starved_contended, out.starved + out.starved_contended,
        seen ? fmt::format("; most on {} ({}, at {:.0f} s)", where, worst, fmt::join(ScenarioTimes(world, times), ", "))
             : "");
    if (!out.host_load.empty()) {
      out.items.push_back({fmt::format("host starvation (not judged: the story loads the hosts with {})", out.host_load),
                           true, observed, std::nullopt});
    } else {
      out.items.push_back({"no host starvation the story does not script", !seen, observed, std::nullopt});
      if (seen)
        out.invalid.push_back(fmt::format("the machine starved GPUs of launches {} times on {} (the story loads no "
                                          "host): this machine is too busy for the world",
                                          worst, where));
    }
  }

  // The budget windows.
  for (const auto& b : Budgets(expect)) {
    std::string why = Uncovered(world, resolved, b);
    if (!why.empty()) out.uncovered.push_back(std::move(why));
  }
  return out;
}

std::vector<std::string> BudgetMilestones(const scenario::ResolvedScenario& resolved,
                                          const scenario::Expectations& expect) {
  std::vector<std::string> out;
  auto job_of = [&](const std::string& id) -> const scenario::ResolvedJob* {
    for (const auto& j : resolved.jobs) {
      if (j.id == id) return &j;
    }
    return nullptr;
  };
  for (const auto& b : Budgets(expect)) {
    const ExpectedBudget& budget = *b.budget;
    const auto n = static_cast<int64_t>(std::ceil(budget.value));
    const scenario::ResolvedJob* job = job_of(b.job);
    std::string event;
    if (budget.from == BudgetFrom::kEvent && budget.from_event >= 0 &&
        static_cast<size_t>(budget.from_event) < resolved.timeline.size()) {
      event = resolved.timeline[static_cast<size_t>(budget.from_event)].id;
      if (event.empty()) continue;  // an event without an id cannot be named to the runner
    }
    switch (*budget.unit) {
      case BudgetUnit::kSteps:
        if (job == nullptr) break;
        if (!event.empty()) {
          out.push_back(fmt::format("event={},job={},steps={}", event, job->id, n));
        } else if (budget.from == BudgetFrom::kStep) {
          out.push_back(fmt::format("job={},step={}", job->id, budget.from_step + n));
        } else {
          out.push_back(fmt::format("job={},step={}", job->id, scenario::FirstStep(*job) + n));
        }
        break;
      case BudgetUnit::kSaves:
        if (job == nullptr || !job->checkpoint || job->checkpoint->every_steps <= 0) break;
        if (!event.empty()) {
          out.push_back(fmt::format("event={},job={},saves={}", event, job->id, n));
        } else {
          const int64_t every = job->checkpoint->every_steps;
          const int64_t from = budget.from == BudgetFrom::kStep ? budget.from_step : scenario::FirstStep(*job);
          out.push_back(fmt::format("job={},step={}", job->id, ((from + every - 1) / every + n - 1) * every));
        }
        break;
      case BudgetUnit::kSeconds:
        if (!event.empty()) {
          out.push_back(fmt::format("event={},seconds={:g}", event, budget.value));
        } else if (budget.from != BudgetFrom::kStep) {
          // From the start: a job's budget counts from its first step, after its start-up.
          const double lead = job != nullptr ? job->start_s + job->startup_s : 0;
          out.push_back(fmt::format("seconds={:g}", lead + budget.value));
        }
        break;
    }
  }
  return out;
}

}  // namespace ithbat::sim::lab
