#include "detect/gpu/hardware_faults.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/core.h>
#include <fmt/format.h>

#include "detect/numerics/divergence.h"

namespace ithbat::detect {
namespace {

// Thermal or power-brake clock reasons; never the power cap or idle (every loaded or idle GPU
// shows those).
constexpr const char* kThermalReasons = "sw_thermal_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown|hw_slowdown";

// The job's output that says it was hurt: error classes a dying GPU or its peers print.
bool IsConsequenceError(const std::string& name) {
  static const std::set<std::string> kNames = {"ecc_uncorrectable", "nvlink_uncorrectable", "cuda_error",
                                               "nan_loss",          "loss_missing",         "nccl_timeout",
                                               "nccl_error",        "nccl_watchdog_stuck",  "elastic_failure",
                                               "nccl_net_error"};
  return kNames.count(name) > 0;
}

// The window's start moved back by kHistoryLookbackNs, saturating (a window from kMinTime).
TimeNs Lookback(TimeNs from) { return from > kMinTime + kHistoryLookbackNs ? from - kHistoryLookbackNs : kMinTime; }

using GpuKey = std::pair<std::string, std::string>;  // node, NVML index as labelled

struct Growth {
  double total = 0;
  std::optional<TimeNs> first;
  std::optional<TimeNs> last;
  void Add(double v, TimeNs t) {
    total += v;
    if (!first || t < *first) first = t;
    if (!last || t > *last) last = t;
  }
};

// Per GPU of `node` ("" every node) matching `selector`: the growth at sample times in
// [from, to]. A series' first sample is history (a lifetime or since-start counter), a value
// below the previous one is a reset whose new value is growth.
std::map<GpuKey, Growth> CounterGrowth(const FleetView& view, const std::string& node, const std::string& selector,
                                       TimeNs from, TimeNs to) {
  std::map<GpuKey, Growth> out;
  for (const auto& [v, samples] : view.Samples(node, selector, Lookback(from), to)) {
    const GpuKey key{v.node, Label(v.labels, "gpu")};
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].t < from) continue;
      const double d = samples[i].v - samples[i - 1].v;
      const double grew = d >= 0 ? d : samples[i].v;
      if (grew > 0) out[key].Add(grew, samples[i].t);
    }
  }
  return out;
}

// Per GPU: the first time a 0/1 gauge went from 0 to 1 inside [from, to]. A flag already set at
// the series' first sample (or before the window) is history.
std::map<GpuKey, TimeNs> FlagRaised(const FleetView& view, const std::string& node, const std::string& selector,
                                    TimeNs from, TimeNs to) {
  std::map<GpuKey, TimeNs> out;
  for (const auto& [v, samples] : view.Samples(node, selector, Lookback(from), to)) {
    const GpuKey key{v.node, Label(v.labels, "gpu")};
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].t < from) continue;
      if (samples[i].v > 0.5 && samples[i - 1].v <= 0.5) {
        auto it = out.find(key);
        if (it == out.end() || samples[i].t < it->second) out[key] = samples[i].t;
        break;
      }
    }
  }
  return out;
}

std::string LowerPci(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// node → (pci bus id, lowercased → GPU index label, uuid) from ithbat_gpu_info.
struct GpuInfo {
  std::string index;
  std::string uuid;
};
std::map<std::string, std::map<std::string, GpuInfo>> PciMap(const FleetView& view, const std::string& node,
                                                             TimeNs from, TimeNs to) {
  std::map<std::string, std::map<std::string, GpuInfo>> out;
  for (const auto& v : view.Max(node, "ithbat_gpu_info", Lookback(from), to)) {
    const std::string pci = LowerPci(Label(v.labels, "pci_bus_id"));
    if (pci.empty()) continue;
    out[v.node][pci] = {Label(v.labels, "gpu"), Label(v.labels, "gpu_uuid")};
  }
  return out;
}

void Note(std::optional<TimeNs>& first, TimeNs t) {
  if (!first || t < *first) first = t;
}

// The deltas of every GPU of `node` ("" = all) whose selector suffix matches (`gpu="3"` or "").
std::map<GpuKey, GpuDeltas> CollectDeltas(const FleetView& view, const std::string& node, const std::string& gpu_sel,
                                          TimeNs from, TimeNs to) {
  std::map<GpuKey, GpuDeltas> out;
  auto sel = [&](const std::string& metric, const std::string& extra = "") {
    std::string inner = gpu_sel;
    if (!extra.empty()) inner += (inner.empty() ? "" : ",") + extra;
    return inner.empty() ? metric : metric + "{" + inner + "}";
  };
  auto at = [&](const GpuKey& k) -> GpuDeltas& {
    GpuDeltas& d = out[k];
    d.gpu.node = k.first;
    d.gpu.index = ParseInt(k.second);
    return d;
  };
  for (const auto& [k, g] : CounterGrowth(view, node, sel("ithbat_gpu_xid_errors_total"), from, to)) {
    GpuDeltas& d = at(k);
    d.xid_count += g.total;
    Note(d.first_nvml, *g.first);
    if (!d.last || *g.last > *d.last) d.last = g.last;
  }
  // Volatile and aggregate count the same errors: the larger growth, not the sum.
  std::map<GpuKey, Growth> ecc_v =
      CounterGrowth(view, node, sel("ithbat_gpu_ecc_errors_total", "type=\"uncorrected\",counter=\"volatile\""), from, to);
  std::map<GpuKey, Growth> ecc_a = CounterGrowth(
      view, node, sel("ithbat_gpu_ecc_errors_total", "type=\"uncorrected\",counter=\"aggregate\""), from, to);
  for (auto* m : {&ecc_v, &ecc_a}) {
    for (const auto& [k, g] : *m) {
      GpuDeltas& d = at(k);
      d.ecc_uncorrected = std::max(d.ecc_uncorrected, g.total);
      Note(d.first_nvml, *g.first);
      if (!d.last || *g.last > *d.last) d.last = g.last;
    }
  }
  for (const auto& [k, g] : CounterGrowth(view, node, sel("ithbat_gpu_remapped_rows", "kind=\"uncorrected\""), from, to)) {
    GpuDeltas& d = at(k);
    d.remapped_rows += g.total;
    Note(d.first_nvml, *g.first);
  }
  for (const auto& [k, g] : CounterGrowth(view, node, sel("ithbat_gpu_nvlink_errors_total"), from, to)) {
    at(k).nvlink_errors += g.total;
  }
  struct FlagSpec {
    const char* metric;
    bool GpuDeltas::*field;
  };
  for (const FlagSpec& f : {FlagSpec{"ithbat_gpu_row_remap_pending", &GpuDeltas::remap_pending},
                            FlagSpec{"ithbat_gpu_row_remap_failure", &GpuDeltas::remap_failure},
                            FlagSpec{"ithbat_gpu_retired_pages_pending", &GpuDeltas::retired_pending},
                            FlagSpec{"ithbat_gpu_lost", &GpuDeltas::lost}}) {
    for (const auto& [k, t] : FlagRaised(view, node, sel(f.metric), from, to)) {
      GpuDeltas& d = at(k);
      d.*(f.field) = true;
      Note(d.first_nvml, t);
      if (!d.last || t > *d.last) d.last = t;
    }
  }
  // Thermal / power-brake clock events: samples with one active (any reason) per GPU.
  std::map<GpuKey, std::set<TimeNs>> hot;
  for (const auto& [v, samples] : view.Samples(
           node, sel("ithbat_gpu_clock_event_active", fmt::format("reason=~\"{}\"", kThermalReasons)), from, to)) {
    for (const auto& s : samples) {
      if (s.v > 0.5) hot[{v.node, Label(v.labels, "gpu")}].insert(s.t);
    }
  }
  for (const auto& [k, ts] : hot) at(k).thermal_samples = static_cast<double>(ts.size());

  // Xid events with their codes. NVML's carry the GPU index; the kernel log's the PCI address.
  store::EventQuery q;
  q.kinds = {EventKind::kXid};
  q.from = from;
  q.to = to;
  auto pci = PciMap(view, node, from, to);
  for (const auto& e : view.Events(q)) {
    if (!node.empty() && e.identity.node != node) continue;
    if (!std::isfinite(e.value)) continue;
    std::string index = e.identity.gpu_index >= 0 ? std::to_string(e.identity.gpu_index) : std::string();
    if (index.empty()) {
      for (const auto& [key, val] : e.attrs) {
        if (key != "pci") continue;
        auto n = pci.find(e.identity.node);
        if (n == pci.end()) continue;
        auto g = n->second.find(LowerPci(val));
        if (g != n->second.end()) index = g->second.index;
      }
    }
    if (index.empty()) continue;
    if (!gpu_sel.empty() && gpu_sel != fmt::format("gpu={}", Quote(index))) continue;
    GpuDeltas& d = at({e.identity.node, index});
    const int code = static_cast<int>(e.value);
    if (e.source == "kmsg") {
      d.xid_codes_kmsg.push_back(code);
      Note(d.first_kmsg, e.time);
    } else {
      d.xid_codes_nvml.push_back(code);
      Note(d.first_nvml, e.time);
    }
    if (!d.last || e.time > *d.last) d.last = e.time;
  }
  // UUIDs from the GPU info series.
  for (auto& [k, d] : out) {
    auto n = pci.find(k.first);
    if (n == pci.end()) continue;
    for (const auto& [p, info] : n->second) {
      if (info.index == k.second) d.gpu.uuid = info.uuid;
    }
  }
  return out;
}

// Whether a process ran on the GPU: by UUID where both sides know it, else node + index.
bool ProcessOnGpu(const RankProcess& p, const GpuKey& k, const GpuDeltas& d) {
  if (!d.gpu.uuid.empty() && !p.gpu_uuid.empty()) return p.gpu_uuid == d.gpu.uuid;
  return p.node == k.first && p.gpu >= 0 && std::to_string(p.gpu) == k.second;
}

std::string GpuName(const GpuRef& g) { return fmt::format("{}:{}", g.node, g.index); }

// The worst class among the GPU's coded Xids (hardware > driver > unknown > job), and whether
// the NVML counter holds Xids no code explains.
struct XidVerdict {
  bool hardware = false;
  bool driver = false;
  bool job_only = false;     // every coded Xid is job-class and explains the counter
  bool uncoded = false;      // counter growth with no code known
  std::vector<int> codes;
};
XidVerdict JudgeXids(const GpuDeltas& d) {
  XidVerdict v;
  std::set<int> codes(d.xid_codes_nvml.begin(), d.xid_codes_nvml.end());
  codes.insert(d.xid_codes_kmsg.begin(), d.xid_codes_kmsg.end());
  v.codes.assign(codes.begin(), codes.end());
  bool any_job = false, any_other = false;
  for (int c : codes) {
    switch (ClassifyXid(c)) {
      case XidClass::kHardware: v.hardware = true; any_other = true; break;
      case XidClass::kDriver: v.driver = true; any_other = true; break;
      case XidClass::kJob: any_job = true; break;
      case XidClass::kUnknown: any_other = true; break;
    }
  }
  v.uncoded = d.xid_count > 0 && codes.empty();
  v.job_only = any_job && !any_other;
  return v;
}

}  // namespace

XidClass ClassifyXid(int code) {
  switch (code) {
    case 11: case 13: case 31: case 32: case 43: case 69:
      return XidClass::kJob;
    case 38: case 44: case 119: case 120: case 155:
      return XidClass::kDriver;
    case 46: case 48: case 62: case 63: case 64: case 74: case 79: case 92: case 94: case 95: case 121: case 140:
    case 143: case 144: case 145: case 149: case 150: case 156: case 157: case 158:
      return XidClass::kHardware;
    default:
      return XidClass::kUnknown;
  }
}

std::string_view XidClassName(XidClass c) {
  switch (c) {
    case XidClass::kJob: return "job";
    case XidClass::kDriver: return "driver";
    case XidClass::kHardware: return "hardware";
    case XidClass::kUnknown: return "unknown";
  }
  return "unknown";
}

bool GpuDeltas::HardFault() const {
  if (ecc_uncorrected > 0 || remapped_rows > 0 || remap_pending || remap_failure || retired_pending || lost) return true;
  const XidVerdict v = JudgeXids(*this);
  return v.hardware || v.driver || v.uncoded || (!v.codes.empty() && !v.job_only);
}

GpuDeltas GpuDeltasOf(const FleetView& view, const GpuRef& gpu, TimeNs from, TimeNs to) {
  auto all = CollectDeltas(view, gpu.node, fmt::format("gpu={}", Quote(std::to_string(gpu.index))), from, to);
  GpuDeltas out;
  for (auto& [k, d] : all) {
    if (k.first == gpu.node && ParseInt(k.second) == gpu.index) out = std::move(d);
  }
  out.gpu = gpu;
  return out;
}

std::vector<Finding> DetectHardwareFaults(const DetectInput& in) {
  std::vector<Finding> out;
  const TimeNs from = in.from, to = in.now;
  std::map<GpuKey, GpuDeltas> all = CollectDeltas(in.view, "", "", from, to);

  // Faulted GPUs: a hard fault seen by NVML or by the kernel log.
  struct Fault {
    GpuDeltas d;
    XidVerdict x;
    TimeNs first = 0;
    bool hardware = false;  // else driver
  };
  std::map<GpuKey, Fault> faults;
  for (auto& [k, d] : all) {
    if (!d.HardFault()) continue;
    Fault f;
    f.x = JudgeXids(d);
    std::optional<TimeNs> first = d.first_nvml;
    if (d.first_kmsg) Note(first, *d.first_kmsg);
    if (!first) continue;
    f.first = *first;
    f.hardware = !(f.x.driver && !f.x.hardware && d.ecc_uncorrected == 0 && d.remapped_rows == 0 && !d.remap_pending &&
                   !d.remap_failure && !d.retired_pending && !d.lost);
    f.d = d;
    faults.emplace(k, std::move(f));
  }
  if (faults.empty()) return out;

  // kmsg counter growth per node, for GPUs whose kernel-log events could not be resolved.
  std::map<std::string, Growth> kmsg_node;
  for (const auto& v : in.view.Samples("", "ithbat_kmsg_xid_events_total{owner=~\"hardware|driver|unknown\"}",
                                        Lookback(from), to)) {
    const auto& samples = v.second;
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].t < from) continue;
      const double dlt = samples[i].v - samples[i - 1].v;
      const double grew = dlt >= 0 ? dlt : samples[i].v;
      if (grew > 0) kmsg_node[v.first.node].Add(grew, samples[i].t);
    }
  }

  // Which job ran on each faulted GPU.
  std::set<GpuKey> claimed;
  auto job_uses = [](const JobView& j, const GpuKey& k, const GpuDeltas& d) {
    return std::any_of(j.processes.begin(), j.processes.end(),
                       [&](const RankProcess& p) { return ProcessOnGpu(p, k, d); });
  };

  auto build = [&](const JobView* job, std::vector<std::pair<GpuKey, const Fault*>> group) {
    std::sort(group.begin(), group.end(), [](const auto& a, const auto& b) { return a.second->first < b.second->first; });
    const TimeNs t0 = group.front().second->first;
    Finding f;
    f.detector = "hardware_faults";
    f.subjects.job = job != nullptr ? job->id : "";
    std::set<std::string> nodes;
    bool any_hw = false;
    bool corroborated = false;
    TimeNs provable = 0;
    TimeNs last = t0;
    std::vector<std::string> described;
    for (const auto& [k, fault] : group) {
      const GpuDeltas& d = fault->d;
      const bool cause = fault->first <= t0 + kSameIncidentNs;
      if (d.last) last = std::max(last, *d.last);
      std::vector<std::string> what;
      if (!fault->x.codes.empty()) {
        std::vector<std::string> cs;
        for (int c : fault->x.codes) cs.push_back(fmt::format("{} ({})", c, XidClassName(ClassifyXid(c))));
        what.push_back(fmt::format("Xid {}", fmt::join(cs, ", ")));
      } else if (d.xid_count > 0) {
        what.push_back(fmt::format("{:.0f} Xid (code unknown)", d.xid_count));
      }
      if (d.ecc_uncorrected > 0) what.push_back(fmt::format("{:.0f} uncorrectable ECC", d.ecc_uncorrected));
      if (d.remapped_rows > 0) what.push_back(fmt::format("{:.0f} new remapped row(s)", d.remapped_rows));
      if (d.remap_pending) what.push_back("row remap pending");
      if (d.remap_failure) what.push_back("row remap FAILED");
      if (d.retired_pending) what.push_back("page retirement pending");
      if (d.lost) what.push_back("GPU lost");
      const std::string name = GpuName(d.gpu);
      if (cause) {
        any_hw = any_hw || fault->hardware;
        nodes.insert(d.gpu.node);
        f.subjects.gpus.push_back(d.gpu);
        described.push_back(fmt::format("{} ({})", name, fmt::join(what, ", ")));
        if (job != nullptr) {
          // The ranks on this GPU (the newest process of each: a restarted rank is one rank).
          for (int32_t rank : job->Ranks()) {
            const RankProcess* p = job->Process(rank);
            if (p != nullptr && ProcessOnGpu(*p, k, d)) f.subjects.ranks.push_back({p->rank, p->local_rank, p->node, p->pid});
          }
        }
      }
      // NVML evidence.
      if (d.first_nvml) {
        Evidence e;
        e.signal = d.ecc_uncorrected > 0 ? "ithbat_gpu_ecc_errors_total" : "ithbat_gpu_xid_errors_total";
        e.collector = std::string(kCollectorGpu);
        e.subject = name;
        e.observed = d.ecc_uncorrected > 0 ? d.ecc_uncorrected : std::max<double>(d.xid_count, fault->x.codes.size());
        e.expected = 0;
        e.unit = "errors";
        e.note = fmt::format("{} {} at {:+.1f} s from the first fault: {}", cause ? "cause:" : "later (consequence):",
                             name, static_cast<double>(fault->first - t0) / 1e9, fmt::join(what, ", "));
        e.window = {*d.first_nvml, d.last.value_or(*d.first_nvml)};
        f.evidence.push_back(e);
        if (cause) provable = std::max(provable, *d.first_nvml);
      }
      if (d.first_kmsg) {
        Evidence e;
        e.signal = "xid";
        e.collector = std::string(kCollectorKmsg);
        e.subject = name;
        e.observed = static_cast<double>(d.xid_codes_kmsg.size());
        e.unit = "events";
        e.note = fmt::format("kernel log: Xid {} on {}", fmt::join(d.xid_codes_kmsg, ", "), name);
        e.window = {*d.first_kmsg, *d.first_kmsg};
        f.evidence.push_back(e);
        if (cause) {
          corroborated = corroborated || d.first_nvml.has_value();
          provable = std::max(provable, *d.first_kmsg);
        }
      }
    }
    // The kernel log of the node counted hardware/driver Xids it could not tie to a GPU.
    bool kmsg_seen = false;
    for (const auto& e : f.evidence) kmsg_seen = kmsg_seen || e.collector == kCollectorKmsg;
    if (!kmsg_seen) {
      for (const auto& n : nodes) {
        auto it = kmsg_node.find(n);
        if (it == kmsg_node.end() || *it->second.first > t0 + kConsequenceNs) continue;
        Evidence e;
        e.signal = "ithbat_kmsg_xid_events_total";
        e.collector = std::string(kCollectorKmsg);
        e.subject = n;
        e.observed = it->second.total;
        e.unit = "events";
        e.note = fmt::format("the kernel log of {} counted {:.0f} hardware/driver Xid(s)", n, it->second.total);
        e.window = {*it->second.first, *it->second.last};
        f.evidence.push_back(e);
        corroborated = true;
        provable = std::max(provable, *it->second.first);
      }
    }
    // The job's consequences: its errors and its loss going bad after the fault.
    if (job != nullptr) {
      store::EventQuery q;
      q.kinds = {EventKind::kError};
      q.job = job->id;
      q.from = t0 - kSameIncidentNs;
      q.to = std::min(to, t0 + kConsequenceNs);
      std::map<std::string, std::vector<const Event*>> by_class;
      const auto errors = in.view.Events(q);
      for (const auto& e : errors) {
        if (IsConsequenceError(e.name)) by_class[e.name].push_back(&e);
      }
      TimeNs first_consequence = 0;
      for (const auto& [cls, es] : by_class) {
        std::set<int32_t> ranks;
        for (const Event* e : es) ranks.insert(e->identity.rank);
        Evidence e;
        e.signal = cls;
        e.collector = std::string(kCollectorJoblog);
        e.subject = f.subjects.job;
        e.observed = static_cast<double>(es.size());
        e.unit = "events";
        e.note = fmt::format("consequence: the job printed {} {} line(s) from {} rank(s), first {:+.1f} s after the fault",
                             es.size(), cls, ranks.size(), static_cast<double>(es.front()->time - t0) / 1e9);
        e.window = {es.front()->time, es.back()->time};
        f.evidence.push_back(e);
        if (first_consequence == 0 || es.front()->time < first_consequence) first_consequence = es.front()->time;
        last = std::max(last, es.back()->time);
      }
      const auto losses = JobLosses(in.view, *job, job->window.start, to);
      if (auto b = FirstDivergence(losses, kLossSpikeFactor); b && b->time >= t0 - kSameIncidentNs) {
        Evidence e;
        e.signal = "loss";
        e.collector = std::string(kCollectorJoblog);
        e.subject = f.subjects.job;
        e.observed = b->value;
        e.expected = b->lowest;
        e.note = fmt::format("consequence: the loss went {} at step {} ({:+.1f} s after the fault; lowest before {:.3g})",
                             std::isfinite(b->value) ? "up" : "non-finite", b->step,
                             static_cast<double>(b->time - t0) / 1e9, b->lowest);
        e.window = {b->time, b->time};
        f.evidence.push_back(e);
        if (first_consequence == 0 || b->time < first_consequence) first_consequence = b->time;
        last = std::max(last, b->time);
      }
      if (first_consequence != 0) {
        corroborated = true;
        provable = std::max(provable, first_consequence);
      }
      if (!f.subjects.ranks.empty()) {
        std::sort(f.subjects.ranks.begin(), f.subjects.ranks.end(),
                  [](const RankRef& a, const RankRef& b) { return a.rank < b.rank; });
      }
      // GPU time of the job from the fault on: work after it is rolled back or garbage.
      std::set<std::string> gpus;
      for (const auto& p : job->processes) gpus.insert(p.gpu_uuid.empty() ? p.node + ":" + std::to_string(p.gpu) : p.gpu_uuid);
      const TimeNs end = std::min(to, std::max(job->window.end, t0));
      f.lost_gpu_seconds = static_cast<double>(gpus.size()) * static_cast<double>(end - t0) / 1e9;
      f.baseline_origin = "the job's GPU time from the first fault to its last sample";
    }
    f.subjects.nodes.assign(nodes.begin(), nodes.end());
    f.window = {t0, last};
    f.provable_at = provable == 0 ? t0 : provable;
    f.cause = any_hw ? Cause::kGpuHardware : Cause::kDriver;
    f.verdict = corroborated ? Verdict::kInfrastructure : Verdict::kInconclusive;
    f.confidence = corroborated ? 0.9 : 0.4;
    // Who saw the fault when nothing corroborates it (no consequence in the job's output):
    // NVML's counters, the kernel log, or both.
    bool by_gpu = false, by_kmsg = false;
    for (const auto& e : f.evidence) {
      by_gpu = by_gpu || e.collector == kCollectorGpu;
      by_kmsg = by_kmsg || e.collector == kCollectorKmsg;
    }
    const std::string seen_by = by_gpu && by_kmsg ? "NVML and the kernel log"
                                : by_kmsg         ? "the kernel log"
                                                  : "NVML";
    f.summary = fmt::format("{} fault on {}{}{}", any_hw ? "GPU hardware" : "driver/firmware",
                            fmt::join(described, "; "),
                            job != nullptr ? fmt::format(" under job {}", job->id) : std::string(),
                            corroborated ? "" : fmt::format(" (seen by {} only: not corroborated)", seen_by));
    out.push_back(std::move(f));
  };

  for (const auto& job : in.jobs) {
    std::vector<std::pair<GpuKey, const Fault*>> group;
    for (const auto& [k, fault] : faults) {
      // Only faults while the job held the GPU.
      if (fault.first < job.window.start - kSameIncidentNs || fault.first > job.window.end + kSameIncidentNs) continue;
      if (job_uses(job, k, fault.d)) {
        group.emplace_back(k, &fault);
        claimed.insert(k);
      }
    }
    if (!group.empty()) build(&job, std::move(group));
  }
  // Faults on GPUs no job used: one finding per node.
  std::map<std::string, std::vector<std::pair<GpuKey, const Fault*>>> idle;
  for (const auto& [k, fault] : faults) {
    if (!claimed.count(k)) idle[k.first].emplace_back(k, &fault);
  }
  for (auto& [n, group] : idle) build(nullptr, std::move(group));
  return out;
}

}  // namespace ithbat::detect
