#include "lab/signal_checks.h"

#include "lab/check_util.h"
#include "lab/checks_gpu.h"
#include "lab/checks_host_fabric.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>

namespace ithbat::sim::lab {
using scenario::ExpectedFinding;

bool FindingCheck::ok() const {
  if (skipped) return false;
  for (const auto& s : signals) {
    if (!s.ok) return false;
  }
  return !budget || budget->ok();
}

bool ScenarioCheck::ok() const {
  for (const auto& s : world) {
    if (!s.ok) return false;
  }
  for (const auto& f : findings) {
    if (!f.ok()) return false;
  }
  return true;
}

bool ScenarioCheck::any_skipped() const {
  return std::any_of(findings.begin(), findings.end(), [](const FindingCheck& f) { return f.skipped; });
}

std::vector<SignalResult> CheckWorldRan(const World& world, const Evidence& evidence) {
  std::vector<SignalResult> out;
  // Every node's GPUs are in its agent's store (NVML through the fake, per node).
  {
    SignalResult r{"every node's GPUs are collected", true, "", std::nullopt};
    std::vector<std::string> parts;
    for (const auto& node : world.nodes) {
      auto util = evidence.Mean(node.name, "ithbat_gpu_utilization_ratio", world.started, world.ended);
      parts.push_back(fmt::format("{} {}/{}", node.name, util.size(), node.gpus.size()));
      if (util.size() < node.gpus.size() || node.gpus.empty()) r.ok = false;
    }
    r.observed = fmt::format("GPU series per node: {}", fmt::join(parts, ", "));
    out.push_back(std::move(r));
  }
  // Every rank of every job was seen launching work by its node's agent (eBPF on libcuda).
  for (const auto& job : world.jobs) {
    SignalResult r{fmt::format("job {}: every rank's launches probed", job.id), true, "", std::nullopt};
    int seen = 0;
    // How the launch probes ran (the straggler detector's work proxy differs between the two): the
    // ranks' mean on-fraction under the overhead budget, and the cost per hit the agents measured
    // (a machine whose traps are cheap runs its worlds' probes exact).
    std::vector<double> on_fraction, hit_cost;
    for (const auto& rank : job.ranks) {
      double launches = 0;
      const std::string pid = Quote(std::to_string(rank.pid));
      for (const auto& v : evidence.Increase(rank.node, fmt::format("ithbat_probe_launches_total{{pid={}}}", pid),
                                             job.started, JobEnd(world, job), Evidence::Birth::kZero)) {
        launches += v.value;
      }
      seen += launches > 0 ? 1 : 0;
      for (const auto& v : evidence.Mean(rank.node, fmt::format("ithbat_probe_launch_on_fraction{{pid={}}}", pid),
                                         job.started, JobEnd(world, job))) {
        on_fraction.push_back(v.value);
      }
    }
    for (const auto& node : JobNodes(job)) {
      for (const auto& v : evidence.Mean(node, "ithbat_probe_hit_cost_seconds", job.started, JobEnd(world, job))) {
        hit_cost.push_back(v.value);
      }
    }
    auto mean = [](const std::vector<double>& v) {
      return v.empty() ? std::nan("") : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    };
    r.ok = seen == static_cast<int>(job.ranks.size()) && !job.ranks.empty();
    r.observed = fmt::format("{}/{} ranks; launch probes attached {:.0f}% of the time on average (cost per hit {:.1f} us)",
                             seen, job.ranks.size(), 100 * mean(on_fraction), 1e6 * mean(hit_cost));
    out.push_back(std::move(r));
  }
  // Every inference server was discovered by its node's agent and scraped.
  for (const auto& server : world.servers) {
    SignalResult r{fmt::format("server {}: discovered and scraped", server.id), false, "", std::nullopt};
    const auto series = evidence.Max(server.node, "ithbat_serving_max_num_seqs", server.started,
                                     server.ended > 0 ? server.ended : world.ended);
    r.ok = !series.empty();
    r.observed = fmt::format("{} serving series with a slot count on {}", series.size(), server.node);
    out.push_back(std::move(r));
  }
  return out;
}

FindingCheck CheckDataImbalance(const World& world, const Evidence& evidence, const ExpectedFinding& f) {
  FindingCheck out;
  out.expected = Describe(f);
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  const TimeNs from = job->started;
  const TimeNs to = JobEnd(world, *job);
  // 1. The slowest rank rotates: per node, the last-arrival counts over the local ranks.
  SignalResult rotates{"the slowest rank rotates (last arrival spread over ranks, every node)", true, "",
                       std::nullopt};
  std::vector<std::string> parts;
  TimeNs seen = 0;
  int judged = 0;
  for (const auto& node : JobNodes(*job)) {
    const auto series =
        evidence.Samples(node, fmt::format("ithbat_probe_nccl_last_arrivals_total{{{}}}", JobPids(*job, node)), from, to);
    const size_t n = std::count_if(job->ranks.begin(), job->ranks.end(),
                                   [&](const WorldRank& r) { return r.node == node; });
    if (n < 2) continue;
    // Merge every rank's increments into one time-ordered list to find when the spread appeared.
    std::vector<std::pair<TimeNs, std::string>> increments;
    std::map<std::string, double> per_rank;
    for (const auto& [v, samples] : series) {
      const std::string rank = Label(v.labels, "rank");
      for (size_t i = 1; i < samples.size(); ++i) {
        const double d = samples[i].v - samples[i - 1].v;
        if (d <= 0) continue;
        per_rank[rank] += d;
        for (int k = 0; k < std::min(d, 1000.0); ++k) increments.emplace_back(samples[i].t, rank);
      }
    }
    double total = 0, top = 0;
    std::string top_rank;
    for (const auto& [r, c] : per_rank) {
      total += c;
      if (c > top) {
        top = c;
        top_rank = r;
      }
    }
    const double fair = total / static_cast<double>(n);
    const size_t spread = std::count_if(per_rank.begin(), per_rank.end(), [&](const auto& p) {
      return p.second >= kRotationMinFairShare * fair;
    });
    const size_t need = (n + 1) / 2;
    // With two ranks a fair split is already half: allow 1.5 fair shares there.
    const double max_share = std::max(kRotationMaxShare, 1.5 / static_cast<double>(n));
    const bool ok = total >= 2.0 * static_cast<double>(n) && top <= max_share * total && spread >= need;
    // A rank made slow by its own GPU is last on its node whatever the data does: that node
    // cannot show rotation, and its persistence is thermal_power's evidence (a finding of its
    // own), not evidence against imbalance. Such a node is left out; rotation must hold on every
    // other node, and at least one node must be judged.
    if (!ok && total > 0 && top > max_share * total) {
      const WorldRank* hot = nullptr;
      for (const auto& r : job->ranks) {
        if (r.node == node && std::to_string(r.rank) == top_rank) hot = &r;
      }
      if (hot != nullptr && ThermalActiveShare(evidence, node, hot->gpu, from, to) >= kThermalActiveShare) {
        parts.push_back(fmt::format("{}: rank {} last in {:.0f}% and its GPU is thermally throttled: node left out",
                                    node, top_rank, 100.0 * top / total));
        continue;
      }
    }
    ++judged;
    parts.push_back(fmt::format("{}: {} aligned-last over {} ranks, top rank {:.0f}%, {} ranks ≥ half a fair share",
                                node, total, per_rank.size(), total > 0 ? 100.0 * top / total : 0.0, spread));
    if (!ok) {
      rotates.ok = false;
      continue;
    }
    // First time at which `need` distinct ranks had been last at least once.
    std::sort(increments.begin(), increments.end());
    std::set<std::string> distinct;
    for (const auto& [t, r] : increments) {
      distinct.insert(r);
      if (distinct.size() >= need) {
        seen = std::max(seen, t);
        break;
      }
    }
  }
  if (judged == 0) {
    rotates.ok = false;
    parts.push_back("no node with two ranks of the job and no throttled last rank");
  }
  rotates.observed = fmt::format("{}", fmt::join(parts, "; "));
  if (rotates.ok && seen > 0) rotates.first_seen = seen;
  out.signals.push_back(rotates);

  // 2. Ranks wait for their peers.
  SignalResult waits{"ranks wait for their peers (NCCL arrival lag)", false, "", std::nullopt};
  double lag = 0;
  for (const auto& node : JobNodes(*job)) {
    for (const auto& v :
         evidence.Increase(node, fmt::format("ithbat_probe_nccl_arrival_lag_seconds_total{{{}}}", JobPids(*job, node)),
                           from, to, Evidence::Birth::kZero)) {
      lag += v.value;
    }
  }
  const double rank_seconds = static_cast<double>(to - from) / 1e9 * static_cast<double>(job->ranks.size());
  const double share = rank_seconds > 0 ? lag / rank_seconds : 0;
  waits.ok = share >= kMinWaitShare;
  waits.observed = fmt::format("{:.1f} s of arrival lag over {:.0f} rank-seconds ({:.1f}%)", lag, rank_seconds,
                               100 * share);
  out.signals.push_back(waits);

  // 3. The lateness is work, not the host: a data straggler's GPU is the busiest of the job,
  // never launch-starved while its peers wait (the host-jitter look-alike rotates and waits too,
  // but its late rank's GPU runs dry first; CheckHostBottleneck judges the opposite).
  SignalResult work{"the late ranks' GPUs are busy, not launch-starved by their hosts", false, "", std::nullopt};
  const LaunchStarvation st = CountLaunchStarvation(evidence, *job, from, to);
  work.ok = !st.HostBound();
  work.observed = fmt::format("{} samples of a starved GPU among busy peers, the rank then last in {}", st.samples,
                              st.followed_by_last);
  out.signals.push_back(work);
  out.budget = std::nullopt;
  return out;
}

FindingCheck CheckStorage(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const ExpectedFinding& f) {
  FindingCheck out;
  out.expected = Describe(f);
  const WorldJob* job = world.Job(f.job);
  const WorldMount* mount = world.Mount(f.resource);
  if (job == nullptr || mount == nullptr) {
    out.signals.push_back({"the job and the mount exist", false,
                           fmt::format("job {} {}, mount {} {}", f.job, job ? "found" : "missing", f.resource,
                                       mount ? "found" : "missing"),
                           std::nullopt});
    return out;
  }
  const auto onset = BudgetStart(world, resolved, f.budget, job);
  const TimeNs t0 = onset.value_or(world.started);

  // The mount label each node's agent gives the mount: the longest label that is a prefix of the
  // path the node's ranks write to, or one of the file system's other mount points (an agent
  // names a mount by its superblock, and every simulated node shares this machine's mounts).
  auto under = [](const std::string& path, const std::string& m) {
    return !m.empty() && path.rfind(m, 0) == 0 && (path.size() == m.size() || path[m.size()] == '/' || m == "/");
  };
  // Every label that names it counts (a process may see it through either mount point).
  std::map<std::string, std::set<std::string>> labels_of;
  for (const auto& [node, path] : mount->node_paths) {
    std::string longest_prefix;
    for (const auto& [v, samples] : evidence.Samples(node, "ithbat_io_calls_total", job->started, JobEnd(world, *job))) {
      const std::string m = Label(v.labels, "mount");
      if (std::find(mount->also_at.begin(), mount->also_at.end(), m) != mount->also_at.end() || m == path) {
        labels_of[node].insert(m);
      } else if (under(path, m) && m.size() > longest_prefix.size()) {
        longest_prefix = m;
      }
    }
    // A label that is only a prefix of the path (the agent saw a parent mount) counts when
    // nothing names the mount itself.
    if (labels_of[node].empty() && !longest_prefix.empty()) labels_of[node].insert(longest_prefix);
  }

  // fsync+close latency of the job on the mount over a window, all nodes.
  // One op's latency (seconds, calls) of the job on the mount over a window, all nodes.
  auto latency = [&](const char* op, TimeNs a, TimeNs b) -> std::pair<double, double> {
    double secs = 0, calls = 0;
    for (const auto& [node, labels] : labels_of) {
      for (const auto& m : labels) {
        const std::string sel = fmt::format("{{{},op=\"{}\",mount={}}}", JobPids(*job, node), op, Quote(m));
        // Per-process, per-mount counters: registered at the process's first call there.
        for (const auto& v : evidence.Increase(node, "ithbat_io_seconds_total" + sel, a, b, Evidence::Birth::kZero)) {
          secs += v.value;
        }
        for (const auto& v : evidence.Increase(node, "ithbat_io_calls_total" + sel, a, b, Evidence::Birth::kZero)) {
          calls += v.value;
        }
      }
    }
    return {secs, calls};
  };
  // A save's window starts a little before it and ends a little after: the agent samples its
  // counters once per tick, and the increase over a save is the difference of the samples around it.
  const TimeNs tail = 2 * kNsPerSec;
  const TimeNs head = 2 * kNsPerSec;
  // write, fsync and close are judged apart: which of them carries a slow server depends on the
  // client (NFS flushes at close, a local file system at fsync, a full page cache throttles
  // write), and a mean over all would dilute the one that moved.
  constexpr std::array<const char*, 3> kOps = {"write", "fsync", "close"};
  std::array<double, 3> base_s{}, base_c{};
  std::vector<const WorldSave*> after;
  for (const auto& s : job->saves) {
    if (s.start < t0) {
      for (size_t o = 0; o < kOps.size(); ++o) {
        auto [secs, calls] = latency(kOps[o], s.start - head, s.end + tail);
        base_s[o] += secs;
        base_c[o] += calls;
      }
    } else {
      after.push_back(&s);
    }
  }
  SignalResult lat{fmt::format("write/fsync/close latency on {} rose against its baseline", f.resource), false, "",
                   std::nullopt};
  std::vector<std::string> parts;
  for (const WorldSave* s : after) {
    std::vector<std::string> ops;
    for (size_t o = 0; o < kOps.size(); ++o) {
      auto [secs, calls] = latency(kOps[o], s->start - head, s->end + tail);
      const double mean = calls > 0 ? secs / calls : 0;
      const double base = base_c[o] > 0 ? base_s[o] / base_c[o] : 0;
      ops.push_back(fmt::format("{} {:.3f}s", kOps[o], mean));
      if (!lat.ok && base > 0 && mean >= kStorageLatencyFactor * base) {
        lat.ok = true;
        lat.first_seen = s->end;
      }
    }
    parts.push_back(fmt::format("save@{} {}", s->step, fmt::join(ops, " ")));
  }
  std::vector<std::string> labels;
  for (const auto& [node, ms] : labels_of) {
    for (const auto& m : ms) labels.push_back(node + "=" + m);
  }
  auto mean_of = [&](size_t o) { return base_c[o] > 0 ? base_s[o] / base_c[o] : 0.0; };
  lat.observed = fmt::format(
      "mount label(s) {}; baseline write {:.4f}s/call over {} calls, fsync {:.4f}s over {}, close {:.4f}s over {}; "
      "after the onset: {}",
      labels.empty() ? std::string("none found") : fmt::format("{}", fmt::join(labels, ",")), mean_of(0), base_c[0],
      mean_of(1), base_c[1], mean_of(2), base_c[2],
      parts.empty() ? std::string("no saves") : fmt::format("{}", fmt::join(parts, "; ")));
  out.signals.push_back(lat);

  // The job stops during the slow saves: its launch gaps there (when the probes' duty cycle had
  // them attached: a gap is never measured across a detached slice), or its GPUs idle.
  SignalResult gaps{"the job stops during the saves after the onset (launch gaps or idle GPUs)", false, "",
                    std::nullopt};
  auto in_save = [&](TimeNs t, bool after_only) {
    for (const auto& s : job->saves) {
      if (t >= s.start && t <= s.end + tail && (!after_only || s.start >= t0)) return true;
    }
    return false;
  };
  double gap_in = 0, gap_out = 0;
  double util_in = 0, util_out = 0;
  int n_in = 0, n_out = 0;
  for (const auto& node : JobNodes(*job)) {
    for (const auto& [v, samples] :
         evidence.Samples(node, fmt::format("ithbat_probe_launch_gap_max_seconds{{{}}}", JobPids(*job, node)),
                          job->started, JobEnd(world, *job))) {
      for (const auto& smp : samples) {
        if (in_save(smp.t, true)) gap_in = std::max(gap_in, smp.v);
        if (!in_save(smp.t, false)) gap_out = std::max(gap_out, smp.v);
      }
    }
    std::vector<std::string> gpus;
    for (const auto& r : job->ranks) {
      if (r.node == node) gpus.push_back(std::to_string(r.gpu));
    }
    for (const auto& [v, samples] :
         evidence.Samples(node, fmt::format("ithbat_gpu_utilization_ratio{{gpu=~\"{}\"}}", fmt::join(gpus, "|")),
                          job->started, JobEnd(world, *job))) {
      // Skip the start (model loading) and the first step: only steady training counts as "outside".
      const TimeNs steady = job->steps.empty() ? job->started : job->steps.front().end;
      for (const auto& smp : samples) {
        if (smp.t < steady) continue;
        if (in_save(smp.t, true)) {
          util_in += smp.v;
          ++n_in;
        } else if (!in_save(smp.t, false)) {
          util_out += smp.v;
          ++n_out;
        }
      }
    }
  }
  const double mean_in = n_in > 0 ? util_in / n_in : -1;
  const double mean_out = n_out > 0 ? util_out / n_out : -1;
  const bool gap_ok = gap_in > 0 && gap_in >= kLaunchGapFactor * gap_out;
  const bool idle_ok = n_in > 0 && n_out > 0 && mean_in <= kSaveIdleFactor * mean_out;
  gaps.ok = gap_ok || idle_ok;
  gaps.observed = fmt::format(
      "largest launch gap in saves after the onset {:.2f}s, outside saves {:.2f}s; GPU utilisation in those saves "
      "{:.2f}, outside saves {:.2f}",
      gap_in, gap_out, mean_in, mean_out);
  if (gaps.ok) gaps.first_seen = lat.first_seen;
  out.signals.push_back(gaps);

  // The agent saw the saves in the job's own output.
  SignalResult saves{"the saves are in the job's output", false, "", std::nullopt};
  store::EventQuery q;
  q.kinds = {EventKind::kCheckpointBegin, EventKind::kCheckpointEnd};
  q.pid = LoggingPid(*job);
  const size_t n = evidence.Events(q).size();
  saves.ok = n > 0;
  saves.observed = fmt::format("{} checkpoint events; {} saves made", n, job->saves.size());
  out.signals.push_back(saves);

  out.budget = Budget(world, resolved, f.budget, job, lat.first_seen);
  return out;
}


FindingCheck CheckRecipeNumerics(const World& world, const Evidence& evidence, const ExpectedFinding& f) {
  FindingCheck out;
  out.expected = Describe(f);
  const WorldJob* job = world.Job(f.job);
  if (job == nullptr) return NoJob(f);
  SignalResult diverges{"the loss diverges in the job's output", false, "", std::nullopt};
  auto d = Divergence(evidence, *job);
  if (d) {
    diverges.ok = true;
    diverges.first_seen = d->second;
    diverges.observed = fmt::format("first loss spike or NaN at step {}", d->first);
  } else {
    diverges.observed = "no loss above the spike factor and no NaN";
  }
  out.signals.push_back(diverges);

  SignalResult clean{"the job's GPUs show no hardware fault over the run", true, "", std::nullopt};
  double faults = 0;
  for (const auto& r : job->ranks) {
    const std::string gpu = fmt::format("gpu={}", Quote(std::to_string(r.gpu)));
    for (const auto& v : evidence.Increase(r.node, fmt::format("ithbat_gpu_xid_errors_total{{{}}}", gpu), job->started,
                                           JobEnd(world, *job))) {
      faults += v.value;
    }
    for (const auto& v : evidence.Increase(
             r.node, fmt::format("ithbat_gpu_ecc_errors_total{{{},type=\"uncorrected\",counter=\"volatile\"}}", gpu),
             job->started, JobEnd(world, *job))) {
      faults += v.value;
    }
  }
  clean.ok = faults == 0;
  clean.observed = fmt::format("{} Xid + uncorrectable ECC over the job's {} GPUs", faults, job->ranks.size());
  out.signals.push_back(clean);

  if (f.confirm) {
    SignalResult again{fmt::format("the rerun {} diverges at the same point", f.confirm->job), false, "",
                       std::nullopt};
    const WorldJob* rerun = world.Job(f.confirm->job);
    auto r = rerun != nullptr ? Divergence(evidence, *rerun) : std::nullopt;
    if (r && d) {
      again.ok = std::llabs(r->first - d->first) <= kDivergenceAlignSteps;
      again.first_seen = r->second;
      again.observed = fmt::format("rerun diverges at step {} (original {})", r->first, d->first);
    } else {
      again.observed = r ? "original never diverged" : "the rerun never diverged";
    }
    out.signals.push_back(again);
  }
  return out;
}

FindingCheck CheckServingConfig(const World& world, const Evidence& evidence, const ExpectedFinding& f) {
  FindingCheck out;
  out.expected = Describe(f);
  const WorldServer* server = world.Server(f.job);
  if (server == nullptr) {
    out.signals.push_back({"the server ran", false, fmt::format("no server {} in world.json", f.job), std::nullopt});
    return out;
  }
  // The agent labels a server's series by the process it found (discovery by command line).
  const TimeNs to = server->ended > 0 ? server->ended : world.ended;
  auto series = [&](const char* metric) {
    std::map<TimeNs, double> by_time;
    for (const auto& [v, samples] : evidence.Samples(server->node, metric, server->started, to)) {
      for (const auto& s : samples) by_time[s.t] += s.v;
    }
    return by_time;
  };
  const auto running = series("ithbat_serving_requests_running");
  const auto waiting = series("ithbat_serving_requests_waiting");
  const auto slots = series("ithbat_serving_max_num_seqs");
  const auto kv = series("ithbat_serving_kv_cache_usage_ratio");
  double slot_count = 0;
  for (const auto& [t, v] : slots) slot_count = std::max(slot_count, v);

  SignalResult queue{"requests wait while slots are free", false, "", std::nullopt};
  int both = 0, seen = 0, streak = 0;
  double run_sum = 0, wait_sum = 0;
  for (const auto& [t, w] : waiting) {
    auto r = running.find(t);
    if (r == running.end()) continue;
    ++seen;
    run_sum += r->second;
    wait_sum += w;
    const bool free_slots = slot_count > 0 && r->second <= kServingFreeSlotShare * slot_count;
    if (w >= 1 && free_slots) {
      ++both;
      if (++streak == kServingDebounce && !queue.first_seen) queue.first_seen = t;
    }
  }
  queue.ok = seen > 0 && static_cast<double>(both) >= kServingWaitingShare * seen && queue.first_seen.has_value();
  queue.observed = fmt::format("{} of {} scrapes with requests waiting and at most {:.0f}% of {:.0f} slots running; mean "
                               "running {:.1f}, waiting {:.1f}",
                               both, seen, 100 * kServingFreeSlotShare, slot_count, seen ? run_sum / seen : 0.0,
                               seen ? wait_sum / seen : 0.0);
  out.signals.push_back(queue);

  SignalResult room{"the KV cache has headroom", false, "", std::nullopt};
  double kv_sum = 0, kv_max = 0;
  for (const auto& [t, v] : kv) {
    kv_sum += v;
    kv_max = std::max(kv_max, v);
  }
  const double kv_mean = kv.empty() ? -1 : kv_sum / static_cast<double>(kv.size());
  room.ok = !kv.empty() && kv_mean <= kServingKvHeadroom;
  room.observed = fmt::format("KV cache usage mean {:.2f}, peak {:.2f} over {} scrapes", kv_mean, kv_max, kv.size());
  out.signals.push_back(room);
  return out;
}

FindingCheck CheckNothing(const World& world, const Evidence& evidence) {
  FindingCheck out;
  out.expected = "none";
  SignalResult clean{"no hardware fault on any node", true, "", std::nullopt};
  double faults = 0;
  for (const auto& node : world.nodes) {
    for (const auto& v : evidence.Increase(node.name, "ithbat_gpu_xid_errors_total", world.started, world.ended)) {
      faults += v.value;
    }
    for (const auto& v : evidence.Increase(node.name, "ithbat_gpu_ecc_errors_total{type=\"uncorrected\",counter=\"volatile\"}",
                                           world.started, world.ended)) {
      faults += v.value;
    }
  }
  clean.ok = faults == 0;
  clean.observed = fmt::format("{} Xid + uncorrectable ECC", faults);
  out.signals.push_back(clean);
  for (const auto& job : world.jobs) {
    // Steps from the job's own output, or inferred by the probes (a block-buffered log may not
    // have reached the pipe yet in a short run, as with a real job).
    SignalResult steps{fmt::format("job {}'s steps are seen (logged or inferred)", job.id), false, "", std::nullopt};
    store::EventQuery q;
    q.kinds = {EventKind::kStep, EventKind::kLoss};
    q.pid = LoggingPid(job);
    const size_t n = evidence.Events(q).size();
    double inferred = 0;
    for (const auto& node : JobNodes(job)) {
      for (const auto& v : evidence.Increase(node, fmt::format("ithbat_probe_steps_total{{{}}}", JobPids(job, node)),
                                             job.started, JobEnd(world, job), Evidence::Birth::kZero)) {
        inferred = std::max(inferred, v.value);
      }
    }
    steps.ok = n > 0 || inferred > 0;
    steps.observed =
        fmt::format("{} step/loss events, up to {:.0f} steps inferred per rank, {} steps made", n, inferred, job.steps.size());
    out.signals.push_back(steps);
  }
  return out;
}

FindingCheck CheckFinding(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                          const ExpectedFinding& f) {
  FindingCheck c;
  switch (f.cause) {
    case scenario::Cause::kDataImbalance:
      c = CheckDataImbalance(world, evidence, f);
      c.budget = Budget(world, resolved, f.budget, world.Job(f.job),
                        c.signals.empty() ? std::nullopt : c.signals.front().first_seen);
      return c;
    case scenario::Cause::kStorage:
      return CheckStorage(world, evidence, resolved, f);
    case scenario::Cause::kServingConfig:
      c = CheckServingConfig(world, evidence, f);
      c.budget = Budget(world, resolved, f.budget, nullptr,
                        c.signals.empty() ? std::nullopt : c.signals.front().first_seen);
      return c;
    case scenario::Cause::kRecipeNumerics:
      c = CheckRecipeNumerics(world, evidence, f);
      c.budget = Budget(world, resolved, f.budget, world.Job(f.job),
                        c.signals.empty() ? std::nullopt : c.signals.front().first_seen);
      return c;
    case scenario::Cause::kThermalPower:
      return CheckThermalPower(world, evidence, resolved, f);
    case scenario::Cause::kGpuHardware:
      return CheckGpuHardware(world, evidence, resolved, f);
    case scenario::Cause::kSilentDataCorruption:
      return CheckSilentDataCorruption(world, evidence, resolved, f);
    case scenario::Cause::kNoLearning:
      return CheckNoLearning(world, evidence, resolved, f);
    case scenario::Cause::kHang:
      return CheckHang(world, evidence, resolved, f);
    case scenario::Cause::kNetwork:
      return CheckNetwork(world, evidence, resolved, f);
    case scenario::Cause::kHostBottleneck:
      return CheckHostBottleneck(world, evidence, resolved, f);
    case scenario::Cause::kInputPipeline:
      return CheckInputPipeline(world, evidence, resolved, f);
    default:
      break;
  }
  c.expected = Describe(f);
  c.skipped = true;
  c.skip_reason = fmt::format("no signal check for cause {} yet", scenario::CauseName(f.cause));
  return c;
}

ScenarioCheck CheckScenario(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                            const scenario::Expectations& expect) {
  ScenarioCheck out;
  out.world = CheckWorldRan(world, evidence);
  if (expect.expects_nothing || expect.findings.empty()) {
    out.findings.push_back(CheckNothing(world, evidence));
    return out;
  }
  for (const auto& f : expect.findings) {
    FindingCheck c = CheckFinding(world, evidence, resolved, f);
    out.findings.push_back(std::move(c));
  }
  return out;
}

}  // namespace ithbat::sim::lab
