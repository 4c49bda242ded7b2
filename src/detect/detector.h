#pragma once
// The detectors: one per incident class, grouped in one folder per family (README.md). Each is
// a pure function of what the stores hold up to `now` → findings with evidence. None reads a
// scenario, a simulator file or a list of expected subjects: jobs, ranks and GPUs come from the
// labels the agents attached when they collected (jobs.h).
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/finding.h"
#include "detect/fleet_view.h"
#include "detect/jobs.h"

namespace ithbat::detect {

struct DetectInput {
  const FleetView& view;            // clamped to `now` (FleetView::AsOf)
  const std::vector<JobView>& jobs; // DiscoverJobs over [from, now]
  TimeNs from = 0;                  // the analysis window's start
  TimeNs now = 0;
  // Optional: where a detector says what it measured and why it found nothing (or what it
  // found), one line each, for whoever asks why a diagnosis is missing (the lab prints it under a
  // missed verdict). Null in the live engine.
  std::vector<std::string>* trace = nullptr;
};

using DetectorFn = std::vector<Finding> (*)(const DetectInput&);

struct DetectorInfo {
  std::string_view name;    // "stragglers", "stalls", ...
  std::string_view family;  // its folder under src/detect
  DetectorFn run;
};

// Every detector, in the order the investigator walks them (job → node → network → storage).
std::span<const DetectorInfo> Detectors();

// Runs every detector on one prepared input (the view clamped to in.now, the jobs discovered
// over [in.from, in.now]): callers that also need the jobs (the investigator) discover them once.
std::vector<Finding> RunDetectors(const DetectInput& in);
// The same, preparing the input: the view clamped to `now`, jobs discovered over [from, now].
std::vector<Finding> RunDetectors(const FleetView& view, TimeNs from, TimeNs now);

// One evidence item (core/finding.h Evidence), in the order a detector thinks of it.
Evidence MakeEvidence(std::string signal, std::string_view collector, std::string subject, double observed,
                      double expected, std::string unit, std::string note, TimeWindow window);

// The value of an event's attribute `key`, "" when it has none.
std::string EventAttr(const Event& e, std::string_view key);

// Small statistics every family uses.
double Median(std::vector<double> v);  // NaN for none
double Mean(const std::vector<double>& v);
double Quantile(std::vector<double> v, double q);  // linear interpolation, q in [0, 1]

// The collectors that Evidence::collector names (the two-collector rule counts these).
inline constexpr std::string_view kCollectorGpu = "gpu";           // NVML counters and events
inline constexpr std::string_view kCollectorProbes = "probes";     // eBPF on libcuda/libnccl
inline constexpr std::string_view kCollectorJoblog = "joblog";     // the job's own output
inline constexpr std::string_view kCollectorSchedIo = "sched_io";  // off-CPU time, file I/O latency
inline constexpr std::string_view kCollectorNode = "node";         // mounts, block devices, IB ports
inline constexpr std::string_view kCollectorHost = "host";         // /proc CPU, memory, pressure
inline constexpr std::string_view kCollectorKmsg = "kmsg";         // kernel log Xid lines
inline constexpr std::string_view kCollectorServing = "serving";   // inference servers' /metrics
inline constexpr std::string_view kCollectorNcclProfiler = "nccl_profiler";
inline constexpr std::string_view kCollectorScheduler = "slurm";       // Slurm's prolog/epilog records

}  // namespace ithbat::detect
