#include "cli/diagnosis_text.h"

#include <cmath>
#include <cstdlib>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "investigate/diagnosis_json.h"

namespace ithbat::cli {
namespace {

struct Paint {
  bool on;
  std::string operator()(std::string_view sgr, std::string_view text) const {
    return on ? fmt::format("\x1b[{}m{}\x1b[0m", sgr, text) : std::string(text);
  }
};

// Red for the infrastructure (someone else must act), yellow for the job, grey when unproven.
std::string_view VerdictColour(Verdict v) {
  switch (v) {
    case Verdict::kInfrastructure:
      return "1;31";
    case Verdict::kJob:
      return "1;33";
    case Verdict::kInconclusive:
      return "1;90";
  }
  return "1";
}

// Terminal text must not carry control characters from the data (a job name, a log line):
// they could move the cursor or recolour the screen.
std::string Clean(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out;
}

std::string Number(double v) { return fmt::format("{:.4g}", v); }

std::string Trim(std::string s) {
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string FormatDiagnosisText(const Diagnosis& d, bool color) {
  const Paint p{color};
  std::string out;
  const std::string head = fmt::format("{}: {}{}", VerdictName(d.verdict), CauseName(d.cause),
                                       d.provisional ? " (provisional)" : "");
  out += fmt::format("{}  {} [{}]\n", p(VerdictColour(d.verdict), head), Clean(d.id),
                     investigate::DiagnosisStateName(d.state));
  if (!d.summary.empty()) out += fmt::format("  {}\n", Clean(d.summary));
  const Subjects& s = d.subjects;
  if (!s.job.empty()) out += fmt::format("  {} {}\n", p("1", "job     "), Clean(s.job));
  if (!s.nodes.empty())
    out += fmt::format("  {} {}\n", p("1", "nodes   "), Clean(fmt::format("{}", fmt::join(s.nodes, ", "))));
  if (!s.ranks.empty()) {
    std::vector<std::string> r;
    for (const auto& x : s.ranks) r.push_back(fmt::format("{}@{}", x.rank, Clean(x.node)));
    out += fmt::format("  {} {}\n", p("1", "ranks   "), fmt::join(r, ", "));
  }
  if (!s.gpus.empty()) {
    std::vector<std::string> g;
    for (const auto& x : s.gpus) g.push_back(fmt::format("{}:{}", Clean(x.node), x.index));
    out += fmt::format("  {} {}\n", p("1", "gpus    "), fmt::join(g, ", "));
  }
  if (!s.resource.empty()) out += fmt::format("  {} {}\n", p("1", "resource"), Clean(s.resource));
  if (!s.other_jobs.empty()) {
    out +=
        fmt::format("  {} {}\n", p("1", "also hit"), Clean(fmt::format("{}", fmt::join(s.other_jobs, ", "))));
  }
  out += fmt::format("  {} {} → {} ({:.1f} s)\n", p("1", "window  "), FormatRfc3339(d.window.start),
                     FormatRfc3339(d.window.end),
                     static_cast<double>(d.window.end - d.window.start) / kNsPerSec);
  out += fmt::format("  {}\n", p("1", "evidence"));
  for (const auto& e : d.evidence) {
    out += fmt::format("    - [{}] {}: observed {} vs expected {} {}\n", Clean(e.collector), Clean(e.signal),
                       Number(e.observed), Number(e.expected), Clean(e.unit));
    if (!e.note.empty()) out += fmt::format("      {}\n", Clean(e.note));
  }
  if (!d.fix.empty()) out += fmt::format("  {} {}\n", p("1;32", "fix     "), Clean(d.fix));
  const Impact& i = d.impact;
  std::string cost = fmt::format("{:.2f} GPU-hours lost", i.gpu_hours_lost);
  if (i.expected_speedup > 1.0) cost += fmt::format("; {:.2f}x faster with the fix", i.expected_speedup);
  cost += fmt::format("; productive share {:.0f}%", 100 * i.productive_share);
  if (i.effective_price_per_gpu_hour > 0)
    cost += fmt::format("; effective ${:.2f}/GPU-hour", i.effective_price_per_gpu_hour);
  out += fmt::format("  {} {}\n", p("1", "cost    "), cost);
  if (!i.speedup_origin.empty())
    out += fmt::format("           speedup from: {}\n", Trim(Clean(i.speedup_origin)));
  if (!i.baseline_origin.empty())
    out += fmt::format("           baseline from: {}\n", Trim(Clean(i.baseline_origin)));
  return out;
}

std::string FormatDiagnosesText(const std::vector<Diagnosis>& ds, bool color) {
  if (ds.empty()) return "no diagnosis: nothing the engine can prove is wrong\n";
  std::string out;
  for (size_t k = 0; k < ds.size(); ++k) {
    if (k > 0) out += "\n";
    out += FormatDiagnosisText(ds[k], color);
  }
  return out;
}

bool UseColor(const std::string& mode, std::FILE* out) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  return ::isatty(::fileno(out)) == 1 && std::getenv("NO_COLOR") == nullptr;
}

void PrintDiagnoses(const std::vector<Diagnosis>& ds, bool json, bool color, std::FILE* out) {
  if (json) {
    for (const auto& d : ds) {
      fmt::print(out, "{}\n",
                 investigate::ToJson(d).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  } else {
    fmt::print(out, "{}", FormatDiagnosesText(ds, color));
  }
}

}  // namespace ithbat::cli
