#include "detect/network/network.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/network/output_errors.h"

namespace ithbat::detect {
namespace {

using Samples = std::vector<store::Sample>;

// "00000000:18:00.0" (NVML) and "0000:18:00.0" (sysfs) name the same function: compare bus,
// device and function only.
std::string BusKey(std::string id) {
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto first = id.find(':');
  if (first != std::string::npos && id.find(':', first + 1) != std::string::npos) id = id.substr(first + 1);
  return id;
}

struct Port {
  std::string node, device, port;
  Samples errors, downed, rate, xmit_wait, tx_bytes;
  Samples state_active;  // 1 while ACTIVE, 0 otherwise (from ithbat_ib_port_state)
  std::string Name() const { return node + "/" + device; }
};

struct Fault {
  TimeNs onset = 0, seen = 0;
  std::string what;
  double observed = 0, expected = 0;
  std::string unit;
};

// A rising counter: the first sample t where the growth over (t - kNetWindow, t] is at least
// `min` and `factor` times the rate before the window. onset: the first growth in that window.
std::optional<Fault> Rising(const Samples& s, double min, double factor) {
  if (s.size() < 2) return std::nullopt;
  const TimeNs first = s.front().t;
  for (const auto& x : s) {
    if (x.t - first < kNetMinHistory + kNetWindow) continue;
    const TimeNs a = x.t - kNetWindow;
    const double in = CounterGrowth(s, a, x.t);
    if (in < min) continue;
    const double before = CounterGrowth(s, first, a) / (static_cast<double>(a - first) / 1e9);
    const double rate = in / (static_cast<double>(kNetWindow) / 1e9);
    if (rate < factor * before) continue;
    Fault f;
    f.seen = x.t;
    f.observed = rate;
    f.expected = before;
    // The onset: the first growth in the window that more growth follows within kOnsetClusterNs.
    // A lone error before it is the port's background (a healthy link has a few an hour), not the
    // start of the fault: a lab world whose background symbol error fell 17 s before its link
    // began to degrade had its onset there, before the job's first steps, and no step rate
    // before it to compare with (no verdict).
    std::optional<double> prev = SampleAt(s, a);
    TimeNs first_growth = 0;
    for (const auto& y : s) {
      if (y.t <= a || y.t > x.t) continue;
      if (prev && y.v > *prev) {
        if (first_growth == 0) first_growth = y.t;
        if (CounterGrowth(s, y.t, std::min(x.t, y.t + kOnsetClusterNs)) > 0) {
          f.onset = y.t;
          break;
        }
      }
      prev = y.v;
    }
    if (f.onset == 0) f.onset = first_growth != 0 ? first_growth : a;
    return f;
  }
  return std::nullopt;
}

std::optional<Fault> LinkFault(const Port& p) {
  std::optional<Fault> out;
  auto keep = [&](std::optional<Fault> f) {
    if (f && (!out || f->seen < out->seen)) out = std::move(f);
  };
  if (auto f = Rising(p.errors, kMinLinkErrors, kLinkErrorRateFactor)) {
    f->what = fmt::format("symbol + receive errors {:.1f}/s, {:.2f}/s before", f->observed, f->expected);
    f->unit = "errors/s";
    keep(f);
  }
  if (!p.downed.empty()) {
    for (const auto& x : p.downed) {
      if (CounterGrowth(p.downed, p.downed.front().t, x.t) > 0) {
        Fault f;
        f.onset = f.seen = x.t;
        f.observed = CounterGrowth(p.downed, p.downed.front().t, p.downed.back().t);
        f.what = fmt::format("link went down {:.0f} time(s)", f.observed);
        f.unit = "link downs";
        keep(f);
        break;
      }
    }
  }
  int inactive = 0;
  for (const auto& x : p.state_active) {
    inactive = x.v < 0.5 ? inactive + 1 : 0;
    if (inactive == 2) {
      Fault f;
      f.onset = f.seen = x.t;
      f.what = "port left the ACTIVE state";
      f.unit = "state";
      keep(f);
      break;
    }
  }
  double best = 0;
  for (const auto& x : p.rate) {
    if (best > 0 && x.v < kDowntrainedShare * best) {
      Fault f;
      f.onset = f.seen = x.t;
      f.observed = x.v * 8 / 1e9;
      f.expected = best * 8 / 1e9;
      f.what = fmt::format("rate trained down to {:.0f} Gb/s from {:.0f}", f.observed, f.expected);
      f.unit = "Gb/s";
      keep(f);
      break;
    }
    best = std::max(best, x.v);
  }
  return out;
}

// Step rates of one rank before and after the onset, from the probes' inferred steps.
struct Slowdown {
  double before = 0, after = 0;
  TimeNs evident = 0;  // the first sample from which the slowdown held
  bool ok() const { return before > 0 && after > 0 && before >= kCollectiveSlowdownFactor * after; }
};
Slowdown RankSlowdown(const Samples& steps, TimeNs onset, TimeNs now) {
  Slowdown s;
  TimeNs begin = 0;
  for (const auto& x : steps) {
    if (x.v > 0) {
      begin = x.t;
      break;
    }
  }
  if (begin == 0 || onset - begin < kMinRateSpan || steps.back().t - onset < kMinRateSpan) return s;
  s.before = CounterGrowth(steps, begin, onset) / (static_cast<double>(onset - begin) / 1e9);
  const TimeNs end = std::min(now, steps.back().t);
  s.after = CounterGrowth(steps, onset, end) / (static_cast<double>(end - onset) / 1e9);
  for (const auto& x : steps) {
    if (x.t - onset < kMinRateSpan) continue;
    const double a = CounterGrowth(steps, onset, x.t) / (static_cast<double>(x.t - onset) / 1e9);
    if (a > 0 && s.before >= kCollectiveSlowdownFactor * a) {
      s.evident = x.t;
      break;
    }
  }
  return s;
}

class Fabric {
 public:
  explicit Fabric(const DetectInput& in) : in_(in) {}

  void Run(std::vector<Finding>& out) {
    LoadPorts();
    if (ports_.empty()) return;
    LoadNicMap();
    for (const auto& job : in_.jobs) JudgeJob(job, out);
  }

 private:
  void LoadPorts() {
    auto add = [&](const char* metric, Samples Port::*field, bool sum) {
      for (auto& [v, s] : in_.view.Samples("", metric, in_.from, in_.now)) {
        Port& p = ports_[{v.node, Label(v.labels, "device"), Label(v.labels, "port")}];
        p.node = v.node;
        p.device = Label(v.labels, "device");
        p.port = Label(v.labels, "port");
        Samples& dst = p.*field;
        if (!sum || dst.empty()) {
          if (dst.empty()) dst = std::move(s);
          continue;
        }
        // Sum two counters sampled on the same ticks.
        std::map<TimeNs, double> m;
        for (const auto& x : dst) m[x.t] += x.v;
        for (const auto& x : s) m[x.t] += x.v;
        dst.clear();
        for (const auto& [t, v2] : m) dst.push_back({t, v2});
      }
    };
    add("ithbat_ib_symbol_errors_total", &Port::errors, true);
    add("ithbat_ib_receive_errors_total", &Port::errors, true);
    add("ithbat_ib_link_downed_total", &Port::downed, false);
    add("ithbat_ib_port_rate_bytes_per_second", &Port::rate, false);
    add("ithbat_ib_transmit_wait_total", &Port::xmit_wait, false);
    add("ithbat_ib_transmit_bytes_total", &Port::tx_bytes, false);
    for (auto& [v, s] : in_.view.Samples("", "ithbat_ib_port_state", in_.from, in_.now)) {
      auto it = ports_.find({v.node, Label(v.labels, "device"), Label(v.labels, "port")});
      if (it == ports_.end()) continue;
      // The gauge carries the state number (4 active, 5 active_defer).
      Samples& dst = it->second.state_active;
      for (const auto& x : s) dst.push_back({x.t, x.v >= 4 ? 1.0 : 0.0});
    }
    for (auto& [k, p] : ports_) faults_[k] = LinkFault(p);
  }

  void LoadNicMap() {
    // GPU index -> PCI bus; GPU PCI bus -> closest NIC.
    std::map<std::pair<std::string, std::string>, std::string> nic_of_bus;
    for (const auto& [v, s] : in_.view.Samples("", "ithbat_topology_gpu_nic_info{closest=\"1\"}", in_.from, in_.now)) {
      nic_of_bus[{v.node, BusKey(Label(v.labels, "gpu_pci_bus_id"))}] = Label(v.labels, "nic");
    }
    for (const auto& [v, s] : in_.view.Samples("", "ithbat_gpu_info", in_.from, in_.now)) {
      auto it = nic_of_bus.find({v.node, BusKey(Label(v.labels, "pci_bus_id"))});
      if (it == nic_of_bus.end()) continue;
      nic_of_gpu_[{v.node, Label(v.labels, "gpu")}] = it->second;
    }
  }

  using PortKey = std::tuple<std::string, std::string, std::string>;

  // The ports the process's traffic crosses: its GPU's closest NIC, or every port of its node
  // when the map does not say.
  std::vector<PortKey> PortsOf(const RankProcess& p) const {
    std::vector<PortKey> out;
    auto it = nic_of_gpu_.find({p.node, std::to_string(p.gpu)});
    for (const auto& [k, port] : ports_) {
      if (std::get<0>(k) != p.node) continue;
      if (it != nic_of_gpu_.end() && std::get<1>(k) != it->second) continue;
      out.push_back(k);
    }
    return out;
  }

  std::map<std::pair<std::string, int32_t>, Samples> StepSamples(const JobView& job) const {
    std::map<std::pair<std::string, int32_t>, Samples> out;
    for (const auto& node : job.Nodes()) {
      for (auto& [v, s] : in_.view.Samples(
               node, fmt::format("ithbat_probe_steps_total{{pid=~\"{}\"}}", job.PidRegex(node)), in_.from, in_.now)) {
        const int32_t pid = ParseInt(Label(v.labels, "pid"));
        if (pid < 0) continue;
        out[{node, pid}] = std::move(s);
      }
    }
    return out;
  }

  // Ranks behind `ports` slowed after `onset`: each one's step rate fell by the factor.
  struct Behind {
    std::vector<const RankProcess*> procs;
    double before = 0, after = 0;
    TimeNs evident = 0;
    int slowed = 0, judged = 0;
  };
  Behind RanksBehind(const JobView& job, const std::set<PortKey>& ports, TimeNs onset) const {
    Behind b;
    const auto steps = StepSamples(job);
    std::vector<double> before, after;
    for (const auto& p : job.processes) {
      bool behind = false;
      for (const auto& k : PortsOf(p)) behind = behind || ports.contains(k);
      if (!behind) continue;
      b.procs.push_back(&p);
      auto it = steps.find({p.node, p.pid});
      if (it == steps.end() || it->second.empty()) continue;
      const Slowdown s = RankSlowdown(it->second, onset, in_.now);
      if (s.before <= 0 || s.after <= 0) continue;
      ++b.judged;
      before.push_back(s.before);
      after.push_back(s.after);
      if (s.ok()) {
        ++b.slowed;
        b.evident = std::max(b.evident, s.evident);
      }
    }
    b.before = Median(before);
    b.after = Median(after);
    return b;
  }

  Subjects JobSubjects(const JobView& job, const Behind& b) const {
    Subjects s;
    s.job = job.id;
    std::set<std::string> nodes;
    for (const auto* p : b.procs) {
      nodes.insert(p->node);
      s.ranks.push_back(p->Ref());
      if (p->gpu >= 0) s.gpus.push_back(p->Gpu());
    }
    s.nodes.assign(nodes.begin(), nodes.end());
    return s;
  }

  void JudgeJob(const JobView& job, std::vector<Finding>& out) const {
    std::set<PortKey> job_ports;
    for (const auto& p : job.processes) {
      for (const auto& k : PortsOf(p)) job_ports.insert(k);
    }
    if (job_ports.empty()) return;
    // 1. A link fault on a port the job uses.
    bool any_fault = false;
    for (const auto& k : job_ports) {
      const auto& fault = faults_.at(k);
      if (!fault) continue;
      any_fault = true;
      const Port& port = ports_.at(k);
      const Behind b = RanksBehind(job, {k}, fault->onset);
      if (in_.trace != nullptr) {
        in_.trace->push_back(fmt::format(
            "network: job {} port {}: {} (onset {:.1f} s, seen {:.1f} s before now); {} rank(s) behind it, {} with "
            "step rates on both sides, {} slowed by {:g}x (median {:.2f} -> {:.2f} steps/s)",
            job.id, port.Name(), fault->what, static_cast<double>(in_.now - fault->onset) / 1e9,
            static_cast<double>(in_.now - fault->seen) / 1e9, b.procs.size(), b.judged, b.slowed,
            kCollectiveSlowdownFactor, b.before, b.after));
      }
      if (b.judged == 0 || b.slowed < b.judged) continue;  // every rank behind it slowed
      Finding f;
      f.detector = "network";
      f.verdict = Verdict::kInfrastructure;
      f.cause = Cause::kNetwork;
      f.subjects = JobSubjects(job, b);
      f.subjects.nodes = {port.node};
      f.subjects.resource = port.Name();
      f.window = {fault->onset, in_.now};
      f.provable_at = std::max(fault->seen, b.evident);
      f.evidence.push_back(MakeEvidence("ithbat_ib_symbol_errors_total/link_downed/port_state/rate", kCollectorNode,
                              port.Name() + " port " + port.port, fault->observed, fault->expected, fault->unit,
                              fmt::format("{}: {}", port.Name(), fault->what), {fault->onset, fault->seen}));
      f.evidence.push_back(MakeEvidence("ithbat_probe_steps_total", kCollectorProbes, "job " + job.id, b.after, b.before,
                              "steps/s",
                              fmt::format("all {} rank(s) whose GPUs use {} slowed from {:.2f} to {:.2f} steps/s "
                                          "(median)",
                                          b.judged, port.Name(), b.before, b.after),
                              f.window));
      const double ratio = b.after > 0 ? b.before / b.after : 1;
      f.speedup_with_fix = ratio;
      f.lost_gpu_seconds = static_cast<double>(in_.now - fault->onset) / 1e9 * (1 - 1 / ratio) *
                           static_cast<double>(job.processes.size());
      f.baseline_origin = "the job's own step rate before the link fault";
      f.confidence = 0.8;
      f.summary = fmt::format("InfiniBand link {} is failing ({}); job {}'s steps slowed {:.2f}x on the {} rank(s) "
                              "behind it",
                              port.Name(), fault->what, job.id, ratio, b.judged);
      out.push_back(std::move(f));
    }
    if (any_fault) return;  // a faulty port explains any xmit wait on the job's other ports
    // 2. Congestion: xmit wait rises on the job's clean ports.
    std::set<PortKey> waiting;
    TimeNs onset = 0, seen = 0;
    double observed = 0, expected = 0;
    for (const auto& k : job_ports) {
      auto r = Rising(ports_.at(k).xmit_wait, kMinXmitWaitTicks, kXmitWaitFactor);
      if (!r) continue;
      waiting.insert(k);
      onset = onset == 0 ? r->onset : std::min(onset, r->onset);
      seen = seen == 0 ? r->seen : std::min(seen, r->seen);
      observed += r->observed;
      expected += r->expected;
    }
    if (waiting.empty()) return;
    const Behind b = RanksBehind(job, waiting, onset);
    if (b.judged == 0 || b.slowed < b.judged) return;
    // Someone else's traffic: other jobs whose ranks' ports transmit faster after the onset.
    std::vector<std::string> others;
    for (const auto& other : in_.jobs) {
      if (other.id == job.id) continue;
      double before = 0, after = 0;
      std::set<PortKey> theirs;
      for (const auto& p : other.processes) {
        for (const auto& k : PortsOf(p)) theirs.insert(k);
      }
      for (const auto& k : theirs) {
        const Samples& tx = ports_.at(k).tx_bytes;
        if (tx.empty() || onset - tx.front().t < kMinRateSpan) continue;
        before += CounterGrowth(tx, tx.front().t, onset) / (static_cast<double>(onset - tx.front().t) / 1e9);
        after += CounterGrowth(tx, onset, in_.now) / (static_cast<double>(in_.now - onset) / 1e9);
      }
      if (after > 0 && after >= kForeignTrafficFactor * before) others.push_back(other.id);
    }
    std::vector<std::string> names;
    for (const auto& k : waiting) names.push_back(ports_.at(k).Name());
    // The waiting ports carry more bytes per step of the job than before: traffic that is not the
    // job's (its own bytes per step are set by its collectives).
    const auto steps = StepSamples(job);
    double per_before = 0, per_after = 0;
    for (const auto& k : waiting) {
      const Samples& tx = ports_.at(k).tx_bytes;
      for (const auto* p : b.procs) {
        bool behind = false;
        for (const auto& pk : PortsOf(*p)) behind = behind || pk == k;
        auto it = steps.find({p->node, p->pid});
        if (!behind || it == steps.end() || it->second.empty() || tx.empty()) continue;
        const TimeNs begin = std::max(tx.front().t, it->second.front().t);
        const double sb = CounterGrowth(it->second, begin, onset), sa = CounterGrowth(it->second, onset, in_.now);
        if (sb <= 0 || sa <= 0) continue;
        per_before += CounterGrowth(tx, begin, onset) / sb;
        per_after += CounterGrowth(tx, onset, in_.now) / sa;
        break;  // one rank's steps pace the port's bytes
      }
    }
    const bool foreign = per_before > 0 && per_after >= kForeignTrafficFactor * per_before;
    Finding f;
    f.detector = "network";
    f.verdict = Verdict::kInfrastructure;
    f.cause = Cause::kNetwork;
    f.subjects = JobSubjects(job, b);
    f.subjects.other_jobs = others;
    f.subjects.resource = others.size() == 1 ? others.front() : fmt::format("fabric via {}", fmt::join(names, ","));
    f.window = {onset, in_.now};
    f.provable_at = std::max(seen, b.evident);
    f.evidence.push_back(MakeEvidence("ithbat_ib_transmit_wait_total", kCollectorNode, fmt::format("{}", fmt::join(names, ",")),
                            observed, expected, "ticks/s",
                            fmt::format("port_xmit_wait on {} rose to {:.0f}/s from {:.0f}/s; the links are clean (no "
                                        "error rise, never down, full rate)",
                                        fmt::join(names, ","), observed, expected),
                            {onset, seen}));
    if (per_before > 0) {
      f.evidence.push_back(MakeEvidence("ithbat_ib_transmit_bytes_total per step", kCollectorNode,
                              fmt::format("{}", fmt::join(names, ",")), per_after, per_before, "bytes/step",
                              foreign ? fmt::format("the ports sent {:.2f}x the bytes per job step they sent before: "
                                                    "someone else's traffic shares them",
                                                    per_after / per_before)
                                      : "the ports' bytes per job step did not grow: no foreign traffic seen on them",
                              f.window));
    }
    f.evidence.push_back(MakeEvidence("ithbat_probe_steps_total", kCollectorProbes, "job " + job.id, b.after, b.before, "steps/s",
                            fmt::format("all {} rank(s) behind the waiting ports slowed from {:.2f} to {:.2f} steps/s "
                                        "(median)",
                                        b.judged, b.before, b.after),
                            f.window));
    const double ratio = b.after > 0 ? b.before / b.after : 1;
    f.speedup_with_fix = ratio;
    f.lost_gpu_seconds =
        static_cast<double>(in_.now - onset) / 1e9 * (1 - 1 / ratio) * static_cast<double>(job.processes.size());
    f.baseline_origin = "the job's own step rate before the congestion";
    f.confidence = others.empty() ? 0.6 : 0.8;
    f.summary = fmt::format("Fabric congestion on {} (port_xmit_wait {:.0f}/s from {:.0f}/s, links clean) slowed job "
                            "{} {:.2f}x{}",
                            fmt::join(names, ","), observed, expected, job.id, ratio,
                            others.empty() ? std::string(" (the other traffic's owner is not seen by these agents)")
                                           : fmt::format("; job(s) {} send more on the same fabric", fmt::join(others, ", ")));
    out.push_back(std::move(f));
  }

  const DetectInput& in_;
  std::map<PortKey, Port> ports_;
  std::map<PortKey, std::optional<Fault>> faults_;
  std::map<std::pair<std::string, std::string>, std::string> nic_of_gpu_;
};

}  // namespace

std::vector<Finding> DetectNetwork(const DetectInput& in) {
  std::vector<Finding> out;
  Fabric(in).Run(out);
  AddJobOutputNetworkErrors(in, out);
  return out;
}

}  // namespace ithbat::detect
