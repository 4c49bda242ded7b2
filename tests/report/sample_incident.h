#pragma once
// One synthetic incident the report tests and the sample program (report_sample.cc, for the
// headless-Chromium check) both render: job "77" on node gpu-a01 (4 ranks, the rotating
// straggler of SyntheticFleet) over two minutes, with slow fsyncs during two saves, a loss
// curve, an Xid on GPU 2 and a job error, and a hand-built diagnosis whose evidence covers every
// form of signal the report knows: a gauge, a counter (drawn as rate), a ratio of counters, save
// durations from events, a printed scalar, summed error counters (a table) and an aggregate with
// no stored series (a table).
#include <cmath>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/finding.h"
#include "detect/detector.h"
#include "testutil/synthetic_fleet.h"

namespace ithbat::testutil {

inline constexpr int kSampleTicks = 120;
inline constexpr TimeNs kSampleWindowStart = kT0 + 50 * kS;
inline constexpr TimeNs kSampleWindowEnd = kT0 + 80 * kS;

inline void BuildSampleFleet(SyntheticFleet& fleet) {
  const std::string node = "gpu-a01";
  fleet.RotatingStraggler(node, kSampleTicks);
  for (int r = 0; r < 4; ++r) {
    Labels lab = {{"job_id", "77"},           {"rank", std::to_string(r)}, {"pid", std::to_string(100 + r)},
                  {"gpu", std::to_string(r)}, {"mount", "/mnt/ckpt"},      {"op", "fsync"}};
    // Two saves (ticks 55-60 and 75-80): a fsync a second, 1.2 s each on ranks 1-2, 0.2 s on the others.
    std::vector<double> calls(kSampleTicks), secs(kSampleTicks);
    double c = 0, s = 0;
    for (int t = 0; t < kSampleTicks; ++t) {
      const bool saving = (t >= 55 && t < 60) || (t >= 75 && t < 80) || t % 20 == 0;
      if (saving) {
        c += 1;
        s += (t >= 50 && t < 80 && (r == 1 || r == 2)) ? 1.2 : 0.2;
      }
      calls[t] = c;
      secs[t] = s;
    }
    fleet.Series(node, "ithbat_io_calls_total", MetricType::kCounter, lab, calls);
    fleet.Series(node, "ithbat_io_seconds_total", MetricType::kCounter, lab, secs);
    Labels gpu = {{"gpu", std::to_string(r)}, {"gpu_uuid", "GPU-" + std::to_string(r)}};
    std::vector<double> xid(kSampleTicks, 0), ecc(kSampleTicks, 3);  // 3 old ECC errors: history
    for (int t = 62; t < kSampleTicks && r == 2; ++t) xid[t] = 1;
    fleet.Series(node, "ithbat_gpu_xid_errors_total", MetricType::kCounter, gpu, xid);
    fleet.Series(node, "ithbat_gpu_ecc_errors_total", MetricType::kCounter, gpu, ecc);
  }
  // Saves by rank 0, loss by rank 0 every 2 s (a spike after the incident), an error and an Xid.
  auto event = [&](EventKind kind, TimeNs t, int32_t rank) {
    Event e;
    e.time = t;
    e.kind = kind;
    e.identity.job = "77";
    e.identity.rank = rank;
    e.identity.pid = 100 + rank;
    e.source = "joblog";
    return e;
  };
  for (int save : {55, 75}) {
    Event b = event(EventKind::kCheckpointBegin, kT0 + save * kS, 0);
    b.attrs = {{"path", "/mnt/ckpt/step" + std::to_string(save)}};
    fleet.AddEvent(node, b);
    Event e = event(EventKind::kCheckpointEnd, kT0 + (save + 5) * kS, 0);
    e.attrs = b.attrs;
    fleet.AddEvent(node, e);
  }
  for (int t = 0; t < kSampleTicks; t += 2) {
    fleet.Loss(node, 100, t / 2, 3.0 * std::exp(-t / 80.0) + (t >= 90 ? 1.5 : 0), kT0 + t * kS, "77", 0);
  }
  Event err = event(EventKind::kError, kT0 + 82 * kS, 1);
  err.name = "nccl_timeout";
  err.text = "watchdog caught collective operation timeout";
  fleet.AddEvent(node, err);
  Event xid;
  xid.time = kT0 + 62 * kS;
  xid.kind = EventKind::kXid;
  xid.identity.gpu_index = 2;
  xid.source = "kmsg";
  xid.value = 79;
  xid.text = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus";
  fleet.AddEvent(node, xid);
}

// Evidence over the sample window (the detectors' own builder).
inline Evidence SampleEvidence(std::string signal, std::string collector, std::string subject,
                               double observed, double expected, std::string unit, std::string note) {
  return detect::MakeEvidence(std::move(signal), collector, std::move(subject), observed, expected,
                              std::move(unit), std::move(note), {kSampleWindowStart, kSampleWindowEnd});
}

inline Diagnosis SampleDiagnosis() {
  Diagnosis d;
  d.id = "storage-/mnt/ckpt-1";
  d.verdict = Verdict::kInfrastructure;
  d.cause = Cause::kStorage;
  d.state = DiagnosisState::kOpen;
  d.provisional = false;
  d.subjects.job = "77";
  d.subjects.nodes = {"gpu-a01"};
  d.subjects.ranks = {RankRef{1, 1, "gpu-a01", 101}, RankRef{2, 2, "gpu-a01", 102}};
  d.subjects.gpus = {GpuRef{"gpu-a01", 1, "GPU-1"}, GpuRef{"gpu-a01", 2, "GPU-2"}};
  d.subjects.resource = "/mnt/ckpt";
  d.subjects.other_jobs = {"78"};
  d.window = {kSampleWindowStart, kSampleWindowEnd};
  d.summary =
      "fsync on /mnt/ckpt took 1.2 s per call during two saves against 0.2 s before; job 77 stalled 10 s";
  d.fix = "Move checkpoints off the degraded mount or have the storage team check it.";
  d.impact.gpu_hours_lost = 0.011;
  d.impact.productive_share = 0.83;
  d.impact.effective_price_per_gpu_hour = 2.98 / 0.83;
  d.impact.expected_speedup = 1.12;
  d.impact.baseline_origin = "median of 40 steps before the incident (rank 0's step timeline)";
  d.impact.speedup_origin = "the saves before the incident on the same mount";
  d.opened_at = kSampleWindowStart + 5 * kS;
  d.updated_at = kSampleWindowEnd;
  d.evidence = {
      SampleEvidence("ithbat_io_seconds_total/ithbat_io_calls_total{op=\"fsync\"}", "sched_io", "/mnt/ckpt",
                     1.2, 0.2, "s/call", "fsync latency on the mount rose 6x against its baseline"),
      SampleEvidence("checkpoint_begin/checkpoint_end", "joblog", "job 77", 5, 5, "s", "saves took 5 s"),
      SampleEvidence("ithbat_gpu_utilization_ratio", "gpu", "gpu-a01", 0.8, 0.8, "ratio",
                     "GPUs idle during the saves"),
      SampleEvidence("ithbat_probe_nccl_arrival_lag_seconds_total", "probes", "gpu-a01", 10, 0,
                     "% of rank time", "ranks waited for their peers"),
      SampleEvidence("loss", "joblog", "77", 3.1, 1.6, "", "the loss rose after the incident"),
      SampleEvidence("ithbat_gpu_xid_errors_total+ithbat_gpu_ecc_errors_total", "gpu", "gpu-a01:1,gpu-a01:2",
                     1, 0, "GPUs with moving counters", "one Xid on GPU 2; no new ECC error"),
      SampleEvidence("GPUs needed for the same load", "serving", "job 77", 2, 4, "GPUs",
                     "an aggregate with no series"),
  };
  return d;
}

}  // namespace ithbat::testutil
