#pragma once
// Evidence bundles: one SQLite file holding everything the diagnosis of one job rests on — every
// series, event and step span of the nodes the job ran on, over a window — plus the diagnoses
// computed from exactly that data. `ithbat record` writes one; `ithbat diagnose FILE` re-runs the
// engine on it offline and must get the same diagnoses; `ithbat report FILE` draws it. It is the
// operator's proof in an SLA dispute: a third party can re-check it with the same engine, or read
// it with sqlite3 (the tables are documented in docs/bundles.md).
//
// What goes in: the job's nodes' series and events in the window (other jobs on those nodes
// included: a mount or a link hurting several jobs is part of the proof), except other jobs'
// raw log lines (kind log_line), which are theirs and prove nothing about this job.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"
#include "detect/fleet_view.h"
#include "investigate/investigator.h"

namespace ithbat::bundle {

inline constexpr std::string_view kBundleFormat = "ithbat.bundle/v1";

// Reading bounds: a bundle is a file someone handed over; it must not take the reader down.
inline constexpr uint64_t kMaxBundleBytes = 8ull << 30;
inline constexpr int64_t kMaxSeries = 500'000;
inline constexpr int64_t kMaxSamples = 200'000'000;
inline constexpr int64_t kMaxEvents = 5'000'000;
inline constexpr int64_t kMaxSteps = 20'000'000;
inline constexpr int64_t kMaxDiagnoses = 10'000;

struct RecordOptions {
  std::string job;         // the job the bundle is about (required)
  TimeNs from = kMinTime;  // window; kMinTime / kMaxTime: the job's whole run as the stores hold it
  TimeNs to = kMaxTime;
  std::string source;  // where the data came from, for the reader ("agent 10.0.0.7:9479", a data dir)
  double list_price_per_gpu_hour = 0;
};

struct BundleMeta {
  std::string format;  // kBundleFormat
  std::string job;
  TimeNs from = 0, to = 0;  // the window the data covers and the diagnoses were made as of (`to`)
  TimeNs created = 0;
  std::string source;
  std::string ithbat_version;  // of the writer
  std::vector<std::string> nodes;
  double list_price_per_gpu_hour = 0;
};

struct RecordSummary {
  BundleMeta meta;
  int64_t series = 0, samples = 0, events = 0, steps = 0, diagnoses = 0;
};

// The diagnoses about `job` (its own, and those naming it among other_jobs), offline over `view`
// as of `to`: what `record` stores and what `diagnose FILE` recomputes.
std::vector<Diagnosis> DiagnoseJob(const detect::FleetView& view, const std::string& job, TimeNs from,
                                   TimeNs to, double list_price_per_gpu_hour);

// Writes a new bundle at `path` (an existing file is an error: a bundle is evidence, never
// overwritten). The window is clamped to what the stores hold of the job; the job must have run
// in it (kNotFound otherwise, naming the jobs that did).
Result<RecordSummary> WriteBundle(const detect::FleetView& view, const RecordOptions& options,
                                  const std::string& path);

struct Bundle {
  BundleMeta meta;
  detect::FleetView view;            // one in-memory store per recorded node
  std::vector<Diagnosis> diagnoses;  // as recorded
};

// Reads a bundle; a file that is not one, a newer format, or rows that break the schema give a
// clear error naming the table and row. Bounded by the kMax* limits above.
Result<Bundle> ReadBundle(const std::string& path);

}  // namespace ithbat::bundle
