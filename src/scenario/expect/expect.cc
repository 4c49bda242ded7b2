#include "scenario/expect/expect.h"

#include <algorithm>
#include <array>
#include <set>

#include <fmt/core.h>

#include "scenario/yaml_util.h"

namespace ithbat::scenario {
namespace {

constexpr auto kVerdictNames = std::to_array<std::string_view>({"job", "infrastructure", "inconclusive", "none"});
constexpr auto kCauseNames = std::to_array<std::string_view>({"none",
                                                              "data_imbalance",
                                                              "input_pipeline",
                                                              "host_bottleneck",
                                                              "checkpoint_strategy",
                                                              "serving_config",
                                                              "over_provisioned",
                                                              "under_provisioned",
                                                              "recipe_numerics",
                                                              "no_learning",
                                                              "out_of_memory",
                                                              "hang",
                                                              "storage",
                                                              "network",
                                                              "gpu_hardware",
                                                              "thermal_power",
                                                              "nvlink",
                                                              "driver",
                                                              "silent_data_corruption",
                                                              "scheduler"});
constexpr auto kUnitNames = std::to_array<std::string_view>({"steps", "saves", "seconds"});
// Causes that only make sense under one verdict (the rest are job or infrastructure by
// their nature too; listed so a file cannot say "infrastructure: data_imbalance").
constexpr std::string_view kJobCauses[] = {
    "data_imbalance",   "input_pipeline",    "host_bottleneck", "checkpoint_strategy", "serving_config",
    "over_provisioned", "under_provisioned", "recipe_numerics", "no_learning",         "out_of_memory"};
constexpr std::string_view kInfraCauses[] = {"storage", "network", "gpu_hardware", "thermal_power", "nvlink",
                                             "driver", "silent_data_corruption", "scheduler"};

template <size_t N>
int Find(const std::array<std::string_view, N>& names, const std::string& s) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == s) return static_cast<int>(i);
  }
  return -1;
}

class ExpectReader {
 public:
  ExpectReader(const Scenario* s, std::vector<Issue>* issues) : s_(s), issues_(issues) {}

  void Finding(const YAML::Node& n, const std::string& path, ExpectedFinding* f) {
    if (!n.IsMap()) return Bad(n, path, "expected a mapping");
    f->line = internal::LineCol(n).first;
    static const std::vector<std::string> kKeys = {"verdict", "cause", "provisional", "subjects", "budget", "confirm"};
    Unknown(n, path, kKeys);
    const YAML::Node& c = n;
    YAML::Node v = c["verdict"];
    if (!v.IsDefined()) {
      Bad(n, path + ".verdict", "required key is missing");
    } else {
      int i = v.IsScalar() ? Find(kVerdictNames, v.Scalar()) : -1;
      if (i < 0) Bad(v, path + ".verdict", fmt::format("not one of: {}", Join(kVerdictNames)));
      else f->verdict = static_cast<Verdict>(i);
    }
    if (f->verdict == Verdict::kNone && v.IsDefined() && v.IsScalar() && v.Scalar() == "none") {
      // A control expects nothing: anything else written would be silently meaningless.
      for (const char* k : {"cause", "provisional", "subjects", "budget", "confirm"}) {
        YAML::Node x = c[k];
        if (x.IsDefined()) Bad(x, fmt::format("{}.{}", path, k), "verdict none takes no cause, provisional, subjects or budget");
      }
      return;
    }
    YAML::Node cause = c["cause"];
    if (cause.IsDefined()) {
      int i = cause.IsScalar() ? Find(kCauseNames, cause.Scalar()) : -1;
      if (i < 0) {
        std::vector<std::string> known(kCauseNames.begin(), kCauseNames.end());
        std::string hint = internal::DidYouMean(cause.IsScalar() ? cause.Scalar() : "", known);
        Bad(cause, path + ".cause", fmt::format("not one of: {}{}", Join(kCauseNames), hint.empty() ? "" : fmt::format(" (did you mean {}?)", hint)));
      } else {
        f->cause = static_cast<Cause>(i);
        std::string_view name = kCauseNames[i];
        bool job = std::find(std::begin(kJobCauses), std::end(kJobCauses), name) != std::end(kJobCauses);
        bool infra = std::find(std::begin(kInfraCauses), std::end(kInfraCauses), name) != std::end(kInfraCauses);
        if ((job && f->verdict == Verdict::kInfrastructure) || (infra && f->verdict == Verdict::kJob)) {
          Bad(cause, path + ".cause", fmt::format("cause {} does not go with verdict {}", name, VerdictName(f->verdict)));
        }
      }
    } else if (f->verdict == Verdict::kJob || f->verdict == Verdict::kInfrastructure) {
      Bad(n, path + ".cause", "a job or infrastructure verdict names its cause");
    }
    YAML::Node prov = c["provisional"];
    if (prov.IsDefined()) {
      if (prov.IsScalar() && (prov.Scalar() == "true" || prov.Scalar() == "false")) f->provisional = prov.Scalar() == "true";
      else Bad(prov, path + ".provisional", "expected true or false");
    }
    YAML::Node subj = c["subjects"];
    if (subj.IsDefined()) Subjects(subj, path + ".subjects", f);
    YAML::Node budget = c["budget"];
    if (budget.IsDefined()) Budget(budget, path + ".budget", f->job, &f->budget);
    if (YAML::Node conf = c["confirm"]; conf.IsDefined()) Confirm(conf, path + ".confirm", f);
  }

 private:
  static std::string Join(std::span<const std::string_view> names) {
    std::string out;
    for (auto x : names) out += (out.empty() ? "" : ", ") + std::string(x);
    return out;
  }
  void Bad(const YAML::Node& n, const std::string& path, std::string msg) {
    auto [l, c] = internal::LineCol(n);
    issues_->push_back({path, l, c, std::move(msg)});
  }
  void Unknown(const YAML::Node& n, const std::string& path, const std::vector<std::string>& keys) {
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: it-> returns a short-lived proxy
      if (!key.IsScalar()) {
        Bad(key, path, "keys must be plain strings");
        continue;
      }
      const std::string k = key.Scalar();
      if (!seen.insert(k).second) {
        Bad(key, path + "." + k, "duplicate key");
      } else if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        std::string hint = internal::DidYouMean(k, keys);
        Bad(key, path + "." + k, fmt::format("unknown key '{}'{}", k, hint.empty() ? "" : fmt::format(" (did you mean {}?)", hint)));
      }
    }
  }
  std::optional<int64_t> Int(const YAML::Node& n, const std::string& path) {
    try {
      if (n.IsScalar()) {
        int64_t v = n.as<int64_t>();
        if (v >= 0) return v;
      }
    } catch (const YAML::Exception&) {
    }
    Bad(n, path, "expected a non-negative integer");
    return std::nullopt;
  }
  void Subjects(const YAML::Node& n, const std::string& path, ExpectedFinding* f) {
    if (!n.IsMap()) return Bad(n, path, "expected a mapping");
    static const std::vector<std::string> kKeys = {"job", "nodes", "ranks", "gpus", "resource"};
    Unknown(n, path, kKeys);
    const YAML::Node& c = n;
    if (YAML::Node j = c["job"]; j.IsDefined()) {
      if (!j.IsScalar()) Bad(j, path + ".job", "expected a job id");
      else f->job = j.Scalar();
      if (s_ != nullptr && !f->job.empty() && !HasJob(f->job)) Bad(j, path + ".job", fmt::format("no job or server '{}' in the scenario", f->job));
    }
    if (YAML::Node ns = c["nodes"]; ns.IsDefined()) {
      if (!ns.IsSequence() || ns.size() > 1024) {
        Bad(ns, path + ".nodes", "expected a list of node names");
      } else {
        for (size_t i = 0; i < ns.size(); ++i) {
          if (!ns[i].IsScalar()) {
            Bad(ns[i], fmt::format("{}.nodes[{}]", path, i), "expected a node name");
            continue;
          }
          f->nodes.push_back(ns[i].Scalar());
          if (s_ != nullptr && Node(ns[i].Scalar()) == nullptr) Bad(ns[i], fmt::format("{}.nodes[{}]", path, i), fmt::format("no node '{}'", ns[i].Scalar()));
        }
      }
    }
    if (YAML::Node rs = c["ranks"]; rs.IsDefined()) {
      if (!rs.IsSequence() || rs.size() > 4096) {
        Bad(rs, path + ".ranks", "expected a list of ranks");
      } else {
        const JobT<Param>* job = s_ != nullptr ? Job(f->job) : nullptr;
        if (s_ != nullptr && job == nullptr) {
          Bad(rs, path + ".ranks", f->job.empty() || HasJob(f->job) ? "ranks need job: the training job whose ranks they are"
                                                                    : "ranks need an existing training job");
        }
        int64_t count = job != nullptr ? static_cast<int64_t>(job->nodes.size()) * job->gpus_per_node : 0;
        for (size_t i = 0; i < rs.size(); ++i) {
          std::string rp = fmt::format("{}.ranks[{}]", path, i);
          auto v = Int(rs[i], rp);
          if (!v) continue;
          if (job != nullptr && *v >= count) Bad(rs[i], rp, fmt::format("rank {} but job '{}' has {} ranks (0..{})", *v, job->id, count, count - 1));
          f->ranks.push_back(*v);
        }
      }
    }
    if (YAML::Node gs = c["gpus"]; gs.IsDefined()) {
      if (!gs.IsSequence() || gs.size() > 4096) {
        Bad(gs, path + ".gpus", "expected a list of NODE:INDEX");
      } else {
        for (size_t i = 0; i < gs.size(); ++i) {
          std::string gp = fmt::format("{}.gpus[{}]", path, i);
          std::string s = gs[i].IsScalar() ? gs[i].Scalar() : "";
          size_t colon = s.rfind(':');
          ExpectedGpu g;
          bool ok = colon != std::string::npos && colon > 0 && colon + 1 < s.size() &&
                    s.find_first_not_of("0123456789", colon + 1) == std::string::npos && s.size() - colon < 4;
          if (!ok) {
            Bad(gs[i], gp, "expected NODE:INDEX (e.g. node-a:3)");
            continue;
          }
          g.node = s.substr(0, colon);
          g.index = std::stoll(s.substr(colon + 1));
          if (s_ != nullptr) {
            const auto* n = Node(g.node);
            if (n == nullptr) Bad(gs[i], gp, fmt::format("no node '{}'", g.node));
            else if (g.index >= n->gpus.count) Bad(gs[i], gp, fmt::format("GPU index {} is beyond node '{}' ({} GPUs)", g.index, g.node, n->gpus.count));
          }
          f->gpus.push_back(g);
        }
      }
    }
    if (YAML::Node r = c["resource"]; r.IsDefined()) {
      if (!r.IsScalar()) {
        Bad(r, path + ".resource", "expected a mount, NODE/NIC, switch or job name");
      } else {
        f->resource = r.Scalar();
        if (s_ != nullptr && !IsResource(f->resource)) {
          Bad(r, path + ".resource", fmt::format("'{}' is not a mount, switch, NODE/NIC, job, server or tenant of the scenario", f->resource));
        }
      }
    }
  }
  void Confirm(const YAML::Node& n, const std::string& path, ExpectedFinding* f) {
    if (!n.IsMap()) return Bad(n, path, "expected {job: RERUN-ID, budget: {...}}");
    if (!f->provisional) Bad(n, path, "confirm goes with provisional: true");
    static const std::vector<std::string> kKeys = {"job", "budget"};
    Unknown(n, path, kKeys);
    ExpectedConfirmation c;
    const YAML::Node& cn = n;
    YAML::Node j = cn["job"];
    if (!j.IsDefined() || !j.IsScalar() || j.Scalar().empty()) {
      Bad(j.IsDefined() ? j : n, path + ".job", "required: the id of the rerun that confirms the finding");
    } else {
      c.job = j.Scalar();
      if (s_ != nullptr) {
        const auto* rerun = Job(c.job);
        if (rerun == nullptr) Bad(j, path + ".job", fmt::format("no job '{}'", c.job));
        else if (!rerun->rerun_of || rerun->rerun_of->job != f->job) Bad(j, path + ".job", fmt::format("job '{}' is not a rerun_of the subject job '{}'", c.job, f->job));
      }
    }
    if (YAML::Node b = cn["budget"]; b.IsDefined()) Budget(b, path + ".budget", c.job, &c.budget);
    f->confirm = std::move(c);
  }
  void Budget(const YAML::Node& n, const std::string& path, const std::string& job_id, ExpectedBudget* f) {
    static constexpr const char* kShape = "expected {steps|saves|seconds: N} with an optional from: start | event:INDEX-or-ID | step:N";
    if (!n.IsMap()) return Bad(n, path, kShape);
    bool have_unit = false;
    YAML::Node from;
    bool have_from = false;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node key = it->first;  // copies: it-> returns a short-lived proxy
      const YAML::Node value = it->second;
      std::string k = key.IsScalar() ? key.Scalar() : "";
      if (k == "from") {
        if (have_from) return Bad(key, path + ".from", "duplicate key");
        have_from = true;
        from = value;
        continue;
      }
      int u = Find(kUnitNames, k);
      if (u < 0) return Bad(key, path + "." + k, "budget unit is steps, saves or seconds (and an optional from)");
      if (have_unit) return Bad(key, path + "." + k, "one budget unit per finding");
      have_unit = true;
      double v = -1;
      try {
        if (value.IsScalar()) v = value.as<double>();
      } catch (const YAML::Exception&) {
      }
      if (!(v > 0 && v < 1e9)) return Bad(value, path + "." + k, "expected a positive number");
      f->unit = static_cast<BudgetUnit>(u);
      f->value = v;
    }
    if (!have_unit) return Bad(n, path, kShape);
    if (!have_from) {
      if (s_ != nullptr) {
        f->from = s_->timeline.empty() ? BudgetFrom::kStart : BudgetFrom::kEvent;
        f->from_event = s_->timeline.empty() ? -1 : 0;
      }
      return;
    }
    std::string fp = path + ".from";
    std::string x = from.IsScalar() ? from.Scalar() : "";
    auto digits = [](std::string_view d) { return !d.empty() && d.size() <= 12 && d.find_first_not_of("0123456789") == std::string_view::npos; };
    if (x == "start") {
      f->from = BudgetFrom::kStart;
    } else if (x.starts_with("event:") && x.size() > 6) {
      std::string ref = x.substr(6);
      f->from = BudgetFrom::kEvent;
      if (digits(ref)) f->from_event = std::stoll(ref);
      if (s_ != nullptr) {
        if (f->from_event < 0) {
          for (size_t i = 0; i < s_->timeline.size(); ++i) {
            if (s_->timeline[i].id == ref) f->from_event = static_cast<int64_t>(i);
          }
          if (f->from_event < 0) Bad(from, fp, fmt::format("no timeline event with id '{}'", ref));
        } else if (f->from_event >= static_cast<int64_t>(s_->timeline.size())) {
          Bad(from, fp, fmt::format("event {} but the timeline has {} event(s)", f->from_event, s_->timeline.size()));
        }
      } else if (f->from_event < 0 && !IsValidName(ref)) {
        Bad(from, fp, "event:INDEX or event:ID");
      }
    } else if (x.starts_with("step:") && digits(std::string_view(x).substr(5))) {
      f->from = BudgetFrom::kStep;
      f->from_step = std::stoll(x.substr(5));
      if (s_ != nullptr) {
        const auto* job = Job(job_id);
        if (job == nullptr) Bad(from, fp, "from step:N needs subjects.job, a training job whose steps count");
        else if (static_cast<double>(f->from_step) > job->steps.Lower()) Bad(from, fp, fmt::format("step {} is beyond job '{}'", f->from_step, job->id));
      }
    } else {
      Bad(from, fp, "expected start, event:INDEX-or-ID or step:N");
    }
  }
  const JobT<Param>* Job(const std::string& id) const {
    if (s_ == nullptr || id.empty()) return nullptr;
    for (const auto& j : s_->jobs) if (j.id == id) return &j;
    return nullptr;
  }
  bool IsResource(const std::string& r) const {
    if (HasJob(r)) return true;
    for (const auto& m : s_->mounts) if (m.name == r) return true;
    for (const auto& sw : s_->fabric.switches) if (sw.name == r) return true;
    for (const auto& t : s_->tenants) if (t.id == r) return true;
    size_t slash = r.find('/');
    if (slash == std::string::npos) return false;
    const auto* node = Node(r.substr(0, slash));
    if (node == nullptr) return false;
    for (const auto& nic : node->nics) if (nic.name == r.substr(slash + 1)) return true;
    return false;
  }
  bool HasJob(const std::string& id) const {
    for (const auto& j : s_->jobs) if (j.id == id) return true;
    for (const auto& j : s_->inference) if (j.id == id) return true;
    return false;
  }
  const NodeT<Param>* Node(const std::string& name) const {
    for (const auto& n : s_->nodes) if (n.name == name) return &n;
    return nullptr;
  }

  const Scenario* s_;
  std::vector<Issue>* issues_;
};

}  // namespace

std::string_view VerdictName(Verdict v) { return kVerdictNames[static_cast<size_t>(v)]; }
std::string_view CauseName(Cause c) { return kCauseNames[static_cast<size_t>(c)]; }
std::span<const std::string_view> CauseNames() { return kCauseNames; }

ParsedExpectations ParseExpectationsText(std::string_view text, const Scenario* scenario) {
  ParsedExpectations out;
  YAML::Node root;
  if (!internal::LoadBounded(text, &root, &out.issues)) return out;
  const YAML::Node& croot = root;
  YAML::Node e = root.IsMap() ? croot["expect"] : YAML::Node(YAML::NodeType::Undefined);
  if (!e.IsDefined()) {
    out.issues.push_back({"expect", 1, 1, "no expect block: every lab scenario states the diagnosis it expects"});
    return out;
  }
  out.present = true;
  if (!e.IsSequence() || e.size() == 0 || e.size() > 64) {
    auto [l, c] = internal::LineCol(e);
    out.issues.push_back({"expect", l, c, "expect is a list of 1 to 64 findings"});
    return out;
  }
  Expectations x;
  ExpectReader reader(scenario, &out.issues);
  for (size_t i = 0; i < e.size(); ++i) {
    ExpectedFinding f;
    reader.Finding(e[i], fmt::format("expect[{}]", i), &f);
    if (f.verdict == Verdict::kNone) {
      if (e.size() != 1) {
        auto [l, c] = internal::LineCol(e[i]);
        out.issues.push_back({fmt::format("expect[{}].verdict", i), l, c, "verdict none stands alone (a control expects nothing)"});
      }
      x.expects_nothing = true;
      continue;
    }
    x.findings.push_back(std::move(f));
  }
  if (out.issues.empty()) out.expectations = std::move(x);
  return out;
}

}  // namespace ithbat::scenario
