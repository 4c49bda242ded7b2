#pragma once
// `ithbat demo`: the first thing a newcomer runs (`make demo`). Until the fleet simulator
// exists it runs the real agent in-process on this machine's /proc, serving HTTP on a free
// loopback port, for a few seconds, then prints what it saw: series stored, a few host values
// (CPU busy, memory available, pressure), collector health, and the first lines of /metrics
// fetched over HTTP like a Prometheus server would. SIGINT ends it early (with the summary).
#include <optional>
#include <string>

#include "store/store.h"

namespace ithbat::cli {

// Returns the process exit code (0 ok, 1 when the agent could not start or /metrics could
// not be fetched).
// nvml_library: the NVML to load (the Makefile passes the fake from build/sim/lib on a
// machine without GPUs; empty = the default soname).
int RunDemo(int seconds, const std::string& nvml_library);

// Share of CPU time spent outside idle and iowait between the first and last samples of
// ithbat_host_cpu_seconds_total in [from, to], in percent; nullopt without two samples.
std::optional<double> CpuBusyPercent(const store::Store& store, TimeNs from, TimeNs to);

// The newest value in [from, to] of the first series matching `selector` (a PromQL selector).
std::optional<double> LatestValue(const store::Store& store, const std::string& selector, TimeNs from,
                                  TimeNs to);

}  // namespace ithbat::cli
