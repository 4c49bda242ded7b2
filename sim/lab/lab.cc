#include "lab/lab.h"

#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file_util.h"
#include "detect/breakdown/step_breakdown.h"
#include "detect/jobs.h"
#include "investigate/diagnosis_json.h"
#include "lab/sweep.h"
#include "scenario/expect/expect.h"
#include "scenario/magnitude.h"
#include "scenario/scenario.h"

extern char** environ;

namespace ithbat::sim::lab {
namespace {

volatile std::sig_atomic_t g_child = 0;
// The signal that stopped a world (SIGINT from the terminal, SIGTERM from a CI timeout): the
// person or the job wants the lab to stop, not a slower rerun of a world they cut short.
volatile std::sig_atomic_t g_interrupted = 0;

void ForwardSignal(int sig) {
  g_interrupted = sig;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

// Runs argv, forwarding SIGINT/SIGTERM to it; returns its exit status (128+sig when killed).
int RunChild(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  g_child = pid;
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = ForwardSignal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string Advice(const LabResult& r) {
  const StoryCheck& s = *r.story;
  if (s.min_pace && *s.min_pace < kMinPace)
    return fmt::format("this machine ran the world at {:.2f}× its pace{}: close other programs, or run it slower "
                       "(ithbat demo --quick --slowdown {:g}; make demo DEMO_ARGS='--quick --slowdown {:g}')",
                       *s.min_pace, r.slowdown > 1 ? fmt::format(" even {:.1f}× slower", r.slowdown) : "",
                       std::ceil(2 * r.slowdown / *s.min_pace) / 2, std::ceil(2 * r.slowdown / *s.min_pace) / 2);
  if (s.starved + s.starved_contended > 0 && s.host_load.empty())
    return "this machine could not feed the world's GPUs: close other programs, or run it slower "
           "(ithbat demo --quick --slowdown 2)";
  return "the world ended before its story: run it slower (ithbat demo --quick --slowdown 2), or, for a file of "
         "your own, check that its events fit its duration (ithbat scenario check --resolve)";
}

std::string Slug(std::string_view s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return out.substr(0, 64);
}

LabResult RunOne(const LabOptions& options, const std::string& file, const std::string& parent, std::FILE* out,
                 double magnitude, bool sweep) {
  LabResult r;
  r.file = file;
  r.magnitude = magnitude;
  const auto t_begin = std::chrono::steady_clock::now();
  auto text = ReadFileBounded(file, scenario::kMaxFileBytes + 1);
  if (!text) {
    r.error = fmt::format("cannot read: {}", text.error().message);
    return r;
  }
  auto parsed = scenario::ParseScenarioText(*text);
  if (!parsed.scenario) {
    r.error = fmt::format("{} problem(s) in the file; run `ithbat scenario check {}`", parsed.issues.size(), file);
    return r;
  }
  auto expect = scenario::ParseExpectationsText(*text, &*parsed.scenario);
  if (!expect.expectations) {
    r.error = expect.present ? "the expect block has problems; run `ithbat scenario check`" : "no expect block";
    return r;
  }
  const scenario::Scenario sc = options.quick ? scenario::QuickVariant(*parsed.scenario) : *parsed.scenario;
  r.scenario = sc.name;
  r.seed = options.seed ? *options.seed : sc.seed ? *sc.seed : scenario::DrawSeed();
  auto resolved = scenario::Resolve(sc, r.seed);
  if (!resolved) {
    r.error = fmt::format("seed {}: {}", r.seed, resolved.error().message);
    return r;
  }
  // The checker must see the world the simulator built: the same fault magnitude.
  if (auto st = scenario::ScaleFaultMagnitude(*resolved, magnitude); !st) {
    r.error = st.error().message;
    return r;
  }
  // ithbat-sim refuses a run directory that exists: the same file and seed twice get -2, -3, ...
  std::string run_dir = fmt::format("{}/{}-{}", parent, Slug(sc.name), r.seed);
  for (int n = 2; std::filesystem::exists(run_dir) && n < 1000; ++n) {
    run_dir = fmt::format("{}/{}-{}-{}", parent, Slug(sc.name), r.seed, n);
  }
  if (!options.world_dir.empty()) {
    // Re-check a finished run: its world.json says which seed it drew.
    run_dir = options.world_dir;
    auto world = ReadWorld(run_dir + "/world.json");
    if (!world) {
      r.error = world.error().message;
      return r;
    }
    r.seed = world->seed;
    r.magnitude = world->magnitude;
    resolved = scenario::Resolve(sc, r.seed);
    if (!resolved) {
      r.error = fmt::format("seed {}: {}", r.seed, resolved.error().message);
      return r;
    }
    if (auto st = scenario::ScaleFaultMagnitude(*resolved, r.magnitude); !st) {
      r.error = st.error().message;
      return r;
    }
  }
  fmt::print(out, "== {} (seed {}{}{}) → {}\n", sc.name, r.seed, options.quick ? ", quick" : "",
             r.magnitude != 1.0 ? fmt::format(", magnitude {:g}", r.magnitude) : "", run_dir);
  std::fflush(out);
  std::vector<std::string> argv = {options.sim_binary, "run", file, "--seed", std::to_string(r.seed), "--root", run_dir};
  if (options.quick) argv.push_back("--quick");
  if (options.slowdown > 1.0) {
    argv.push_back("--slowdown");
    argv.push_back(fmt::format("{}", options.slowdown));
  }
  r.slowdown = options.slowdown;
  // How long the story must run for every budget to be judged (never the answer).
  for (const auto& m : BudgetMilestones(*resolved, *expect.expectations)) {
    argv.push_back("--until");
    argv.push_back(m);
  }
  if (magnitude != 1.0) {
    argv.push_back("--magnitude");
    argv.push_back(fmt::format("{}", magnitude));
  }
  if (options.probe_cost_ns > 0) {
    argv.push_back("--probe-cost-ns");
    argv.push_back(fmt::format("{}", options.probe_cost_ns));
  }
  if (!options.ithbat_binary.empty()) {
    argv.push_back("--ithbat");
    argv.push_back(options.ithbat_binary);
  }
  r.sim_exit = options.world_dir.empty() ? RunChild(argv) : 0;
  if (g_interrupted != 0) {
    r.error = fmt::format("interrupted by {} while the world ran; not judged", strsignal(g_interrupted));
  } else if (r.sim_exit != 0) {
    r.error = fmt::format("ithbat-sim exited with {}", r.sim_exit);
  } else {
    auto world = ReadWorld(run_dir + "/world.json");
    if (!world) {
      r.error = world.error().message;
    } else {
      auto evidence = Evidence::Open(*world);
      if (!evidence) {
        r.error = evidence.error().message;
      } else {
        r.check = CheckScenario(*world, *evidence, *resolved, *expect.expectations);
        r.story = CheckStory(*world, *evidence, *resolved, *expect.expectations);
        r.slowdown = world->time_compression > 0 && resolved->time_compression > 0
                         ? resolved->time_compression / world->time_compression
                         : 1.0;
        r.require_diagnosis = options.require_diagnosis;
        r.diagnosis = CheckDiagnoses(*world, *evidence, *resolved, *expect.expectations, /*replay=*/!sweep);
        if (sweep) {
          for (const auto& f : expect.expectations->findings) {
            r.expected_causes.insert(std::string(scenario::CauseName(f.cause)));
          }
          if (r.expected_causes.empty()) r.expected_causes.insert("none");
          for (auto c : ShownCauses(*world, *evidence, *resolved, *expect.expectations)) {
            r.shown_causes.insert(std::string(scenario::CauseName(c)));
          }
          if (r.shown_causes.empty()) r.shown_causes.insert("none");
        }
      }
    }
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count();
  r.run_dir = run_dir;
  // A passed run's directory holds gigabytes of (scaled) checkpoints: remove it unless asked to
  // keep it; a failed one stays for `--world DIR` and `--series`. A sweep keeps none (dozens of
  // runs; each prints its seed, and one run is reproduced with --seed and --magnitude).
  if ((r.ok() || sweep) && !options.keep && options.world_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
    if (!ec) r.run_dir.clear();
  }
  return r;
}

}  // namespace

std::vector<LabResult> RunLab(const LabOptions& options, std::FILE* out) {
  std::string parent = options.root;
  if (parent.empty()) {
    char tmpl[] = "/tmp/ithbat-lab-XXXXXX";
    const char* made = mkdtemp(tmpl);
    parent = made != nullptr ? made : "/tmp";
  } else {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
  }
  std::vector<LabResult> results;
  if (!options.sweep.empty()) {
    std::vector<SweepRun> runs;
    for (const auto& file : options.files) {
      for (double m : options.sweep) {
        results.push_back(RunOne(options, file, parent, out, m, true));
        if (g_interrupted != 0) break;
        const LabResult& r = results.back();
        SweepRun s{r.scenario.empty() ? file : r.scenario, r.seed, m, r.error.empty() && r.check.has_value(), r.error,
                   r.expected_causes, r.shown_causes};
        runs.push_back(s);
        fmt::print(out, "{} m={:g} seed {} ({:.0f} s): expected {{{}}} shown {{{}}}{}\n", s.scenario, m, s.seed,
                   r.wall_seconds, fmt::join(s.expected, ","), fmt::join(s.shown, ","),
                   s.ran ? "" : " ERROR " + s.error);
        std::fflush(out);
      }
      if (g_interrupted != 0) break;
    }
    fmt::print(out, "{}", FormatSweep(runs));
    return results;
  }
  for (const auto& file : options.files) {
    results.push_back(RunOne(options, file, parent, out, options.magnitude, false));
    LabResult& first = results.back();
    if (g_interrupted != 0) {
      fmt::print(out, "{}", FormatResult(first));
      fmt::print(out, "lab: stopped by {}; the worlds after {} were not run\n", strsignal(g_interrupted), file);
      std::fflush(out);
      break;
    }
    if (options.adapt && options.world_dir.empty() && first.outcome() == Outcome::kInvalid) {
      const double pace = first.story->min_pace.value_or(kAdaptTargetPace / 2);
      LabOptions slower = options;
      slower.seed = first.seed;  // the same world, only slower
      slower.slowdown = std::clamp(options.slowdown * kAdaptTargetPace / std::max(pace, 0.01),
                                   options.slowdown * kAdaptMinSlowdown, options.slowdown * kAdaptMaxSlowdown);
      const std::string why = fmt::format("{}", fmt::join(first.story->invalid, "; "));
      fmt::print(out, "INVALID {} (seed {}): {}\n  running it again {:.1f}× slower\n", first.scenario, first.seed, why,
                 slower.slowdown);
      std::fflush(out);
      if (!first.run_dir.empty() && !options.keep) {
        std::error_code ec;
        std::filesystem::remove_all(first.run_dir, ec);
      }
      LabResult again = RunOne(slower, file, parent, out, options.magnitude, false);
      again.retried = why;
      results.back() = std::move(again);
    }
    if (options.json) {
      fmt::print(out, "{}\n", ResultJson(results.back()));
    } else {
      fmt::print(out, "{}", FormatResult(results.back()));
    }
    std::fflush(out);
  }
  return results;
}

std::string FormatSummary(const std::vector<LabResult>& results) {
  std::string s = "\nworlds (scenario | result | what happened | verdict | first verdict / budget | pace)\n";
  std::vector<std::string> advice;
  for (const auto& r : results) {
    const std::string name = r.scenario.empty() ? r.file : r.scenario;
    std::string happened = "-", verdict = "-", first = "-", pace = "-";
    if (r.story) {
      if (!r.story->happened.empty()) happened = fmt::format("{}", fmt::join(r.story->happened, "; "));
      if (r.story->min_pace) pace = fmt::format("{:.2f}", *r.story->min_pace);
    }
    if (r.slowdown > 1) pace += fmt::format(" ({:.1f}× slower)", r.slowdown);
    if (r.diagnosis) {
      std::vector<std::string> verdicts, firsts;
      for (const auto& e : r.diagnosis->expected) {
        if (e.matched) {
          const Diagnosis& d = r.diagnosis->diagnoses[*e.matched];
          verdicts.push_back(fmt::format("{} {}", VerdictName(d.verdict), CauseName(d.cause)));
        } else {
          verdicts.push_back(fmt::format("none (expected {})", e.expected));
        }
        if (e.budget) {
          firsts.push_back(e.budget->used ? fmt::format("{:.3g} of {:g} {}", *e.budget->used, e.budget->allowed,
                                                         e.budget->unit)
                                          : fmt::format("never of {:g} {}", e.budget->allowed, e.budget->unit));
        }
      }
      for (size_t i : r.diagnosis->extra) {
        const Diagnosis& d = r.diagnosis->diagnoses[i];
        verdicts.push_back(fmt::format("extra: {} {}", VerdictName(d.verdict), CauseName(d.cause)));
      }
      if (verdicts.empty()) verdicts.push_back("none");
      verdict = fmt::format("{}", fmt::join(verdicts, ", "));
      if (!firsts.empty()) first = fmt::format("{}", fmt::join(firsts, ", "));
    }
    const Outcome o = r.outcome();
    s += fmt::format("  {} | {} | {} | {} | {} | {}\n", name, OutcomeName(o), happened, verdict, first, pace);
    if (o == Outcome::kInvalid && r.story) advice.push_back(fmt::format("  {}: {}", name, Advice(r)));
    if (o == Outcome::kError) advice.push_back(fmt::format("  {}: {}", name, r.error));
  }
  if (!advice.empty()) s += "what to do:\n" + fmt::format("{}\n", fmt::join(advice, "\n"));
  return s;
}

std::string FormatDiagnosisTable(const std::vector<LabResult>& results) {
  std::string s = "\ndiagnoses (scenario | expected | engine | first verdict | budget)\n";
  for (const auto& r : results) {
    const std::string name = r.scenario.empty() ? r.file : r.scenario;
    if (!r.diagnosis) {
      s += fmt::format("  {} | - | not run{} | - | -\n", name, r.error.empty() ? "" : ": " + r.error);
      continue;
    }
    const DiagnosisCheck& c = *r.diagnosis;
    if (c.expected.empty()) {
      s += fmt::format("  {} | none | {} | - | -\n", name, c.diagnoses.empty() ? "none [ok]" : "diagnoses [EXTRA]");
    }
    for (const auto& e : c.expected) {
      std::string got = "none [MISSED]";
      if (e.matched) {
        const Diagnosis& d = c.diagnoses[*e.matched];
        got = fmt::format("{} {}{} [{}]", VerdictName(d.verdict), CauseName(d.cause), d.provisional ? " (provisional)" : "",
                          e.ok() ? "ok" : "LATE");
      }
      std::string first = "-", budget = "-";
      if (e.budget) {
        budget = fmt::format("{:g} {}", e.budget->allowed, e.budget->unit);
        if (e.budget->used) first = fmt::format("{:.3g} {}", *e.budget->used, e.budget->unit);
      }
      s += fmt::format("  {} | {} | {} | {} | {}\n", name, e.expected, got, first, budget);
    }
    for (size_t i : c.extra) {
      const Diagnosis& d = c.diagnoses[i];
      s += fmt::format("  {} | - | extra: {} {} (job {}) [EXTRA] | - | -\n", name, VerdictName(d.verdict),
                       CauseName(d.cause), d.subjects.job);
    }
  }
  return s;
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "PASS";
    case Outcome::kMissed:
      return "MISSED";
    case Outcome::kWrong:
      return "WRONG";
    case Outcome::kInvalid:
      return "INVALID";
    case Outcome::kSkip:
      return "SKIP";
    case Outcome::kError:
      return "ERROR";
  }
  return "?";
}

Outcome LabResult::outcome() const {
  if (!error.empty() || !check) return Outcome::kError;
  if (story && !story->ok()) return Outcome::kInvalid;
  if (require_diagnosis && diagnosis && !diagnosis->extra.empty()) return Outcome::kWrong;
  const bool told = check->ok() && (!require_diagnosis || (diagnosis && diagnosis->ok()));
  if (!told) {
    // The expected verdict did not come in time, but the world ended inside its budget: the
    // engine was not given the time the file allows it.
    if (story && !story->uncovered.empty()) return Outcome::kInvalid;
    return check->any_skipped() && (!require_diagnosis || (diagnosis && diagnosis->ok())) ? Outcome::kSkip
                                                                                           : Outcome::kMissed;
  }
  return check->any_skipped() ? Outcome::kSkip : Outcome::kPass;
}

std::string FormatResult(const LabResult& r) {
  std::string s;
  s += fmt::format("{} {} (seed {}, {:.0f} s{})\n", OutcomeName(r.outcome()), r.scenario.empty() ? r.file : r.scenario,
                   r.seed, r.wall_seconds, r.slowdown > 1 ? fmt::format(", {:.1f}× slower", r.slowdown) : "");
  if (!r.error.empty()) s += fmt::format("  error: {}\n", r.error);
  if (!r.run_dir.empty()) s += fmt::format("  run directory: {}\n", r.run_dir);
  if (!r.retried.empty()) s += fmt::format("  first run INVALID: {}\n", r.retried);
  if (r.story) {
    s += fmt::format("  story ({:.0f} s real of a planned {:.0f} s):\n", r.story->real_s, r.story->planned_real_s);
    for (const auto& item : r.story->items) {
      s += fmt::format("    [{}] {}: {}\n", item.ok ? "ok" : "NO", item.name, item.observed);
    }
    if (r.outcome() == Outcome::kInvalid) {
      for (const auto& why : r.story->invalid) s += fmt::format("  INVALID: {}\n", why);
      if (r.story->invalid.empty()) {
        for (const auto& why : r.story->uncovered) s += fmt::format("  INVALID: {}\n", why);
      }
      s += fmt::format("  what to do: {}\n", Advice(r));
    }
  }
  if (!r.check) return s;
  for (const auto& w : r.check->world) {
    s += fmt::format("  [{}] {}: {}\n", w.ok ? "ok" : "NO", w.name, w.observed);
  }
  for (const auto& f : r.check->findings) {
    s += fmt::format("  expected {}\n", f.expected);
    if (f.skipped) s += fmt::format("    skipped: {}\n", f.skip_reason);
    for (const auto& sig : f.signals) {
      s += fmt::format("    [{}] {}: {}\n", sig.ok ? "ok" : "NO", sig.name, sig.observed);
    }
    if (f.budget) {
      s += fmt::format("    [{}] budget {} {}: used {}\n", f.budget->ok() ? "ok" : "NO", f.budget->allowed,
                       f.budget->unit, f.budget->used ? fmt::format("{:g}", *f.budget->used) : "never");
    }
  }
  if (r.diagnosis) s += FormatDiagnosisCheck(*r.diagnosis);
  return s;
}

std::string ResultJson(const LabResult& r) {
  nlohmann::json j;
  j["file"] = r.file;
  j["scenario"] = r.scenario;
  j["seed"] = r.seed;
  j["result"] = OutcomeName(r.outcome());
  j["ok"] = r.ok();
  j["skipped"] = r.skipped();
  if (r.slowdown > 1) j["slowdown"] = r.slowdown;
  if (!r.retried.empty()) j["retried_after"] = r.retried;
  if (r.story) {
    nlohmann::json st{{"ok", r.story->ok()},
                      {"invalid", r.story->invalid},
                      {"uncovered", r.story->uncovered},
                      {"happened", r.story->happened},
                      {"real_s", r.story->real_s},
                      {"planned_real_s", r.story->planned_real_s},
                      {"starved_samples", r.story->starved},
                      {"starved_samples_cpu_contended", r.story->starved_contended},
                      {"host_load", r.story->host_load}};
    if (r.story->min_pace) st["pace"] = *r.story->min_pace;
    st["jobs"] = nlohmann::json::array();
    for (const auto& p : r.story->paces) {
      st["jobs"].push_back({{"job", p.job}, {"steps", p.steps}, {"scripted_step_s", p.scripted_s},
                            {"achieved_step_s", p.achieved_s}, {"pace", p.pace()}});
    }
    j["story"] = st;
  }
  j["wall_seconds"] = r.wall_seconds;
  if (!r.run_dir.empty()) j["run_dir"] = r.run_dir;
  if (r.magnitude != 1.0) j["magnitude"] = r.magnitude;
  if (!r.error.empty()) j["error"] = r.error;
  if (r.check) {
    auto signal = [](const SignalResult& s) {
      nlohmann::json o{{"name", s.name}, {"ok", s.ok}, {"observed", s.observed}};
      if (s.first_seen) o["first_seen_ns"] = *s.first_seen;
      return o;
    };
    j["world"] = nlohmann::json::array();
    for (const auto& w : r.check->world) j["world"].push_back(signal(w));
    j["findings"] = nlohmann::json::array();
    for (const auto& f : r.check->findings) {
      nlohmann::json o{{"expected", f.expected}, {"ok", f.ok()}, {"skipped", f.skipped}};
      if (f.skipped) o["skip_reason"] = f.skip_reason;
      o["signals"] = nlohmann::json::array();
      for (const auto& s : f.signals) o["signals"].push_back(signal(s));
      if (f.budget) {
        o["budget"] = {{"unit", f.budget->unit}, {"allowed", f.budget->allowed}, {"ok", f.budget->ok()}};
        if (f.budget->used) o["budget"]["used"] = *f.budget->used;
      }
      j["findings"].push_back(o);
    }
  }
  std::string lines;
  if (r.diagnosis) {
    nlohmann::json d{{"ok", r.diagnosis->ok()}, {"expected", nlohmann::json::array()}, {"extra", r.diagnosis->extra.size()}};
    for (const auto& e : r.diagnosis->expected) {
      nlohmann::json o{{"expected", e.expected}, {"ok", e.ok()}};
      if (e.matched) o["id"] = r.diagnosis->diagnoses[*e.matched].id;
      if (!e.mismatch.empty()) o["mismatch"] = e.mismatch;
      if (e.budget) {
        o["budget"] = {{"unit", e.budget->unit}, {"allowed", e.budget->allowed}, {"ok", e.budget->ok()}};
        if (e.budget->used) o["budget"]["used"] = *e.budget->used;
      }
      d["expected"].push_back(o);
    }
    j["diagnosis"] = d;
    for (const auto& diag : r.diagnosis->diagnoses) {
      lines += "\n" + investigate::ToJson(diag).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + lines;
}

namespace {

// The stores of a finished run, or nullopt after saying why on stderr.
std::optional<Evidence> OpenFinishedRun(const std::string& world_dir) {
  auto world = ReadWorld(world_dir + "/world.json");
  if (!world) {
    fmt::print(stderr, "ithbat-lab: {}\n", world.error().message);
    return std::nullopt;
  }
  auto evidence = Evidence::Open(*world);
  if (!evidence) {
    fmt::print(stderr, "ithbat-lab: {}\n", evidence.error().message);
    return std::nullopt;
  }
  return std::move(*evidence);
}

}  // namespace

int DumpSeries(const std::string& world_dir, const std::string& selector, std::FILE* out, bool all_samples) {
  auto evidence = OpenFinishedRun(world_dir);
  if (!evidence) return 1;
  for (const auto& [v, samples] : evidence->Samples("", selector, kMinTime, kMaxTime)) {
    fmt::print(out, "{} {} samples={}", v.node, v.labels.ToString(), samples.size());
    if (!samples.empty()) fmt::print(out, " first={:g} last={:g}", samples.front().v, samples.back().v);
    fmt::print(out, "\n");
    if (all_samples) {
      for (const auto& smp : samples) fmt::print(out, "  {:.3f} {:g}\n", static_cast<double>(smp.t) / 1e9, smp.v);
    }
  }
  return 0;
}

int PrintBreakdowns(const std::string& world_dir, std::FILE* out) {
  auto evidence = OpenFinishedRun(world_dir);
  if (!evidence) return 1;
  for (const auto& job : detect::DiscoverJobs(*evidence, kMinTime, kMaxTime)) {
    fmt::print(out, "job {} ({} processes on {} node(s))\n{}", job.id, job.processes.size(), job.Nodes().size(),
               detect::FormatBreakdown(detect::StepBreakdown(*evidence, job, job.window.start, job.window.end)));
  }
  return 0;
}

}  // namespace ithbat::sim::lab
