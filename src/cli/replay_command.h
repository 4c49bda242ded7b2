#pragma once
// `ithbat replay [--job ID] [--node NAME] [--world-size N] [--interval SECONDS] [--kmsg FILE]…
//                [--scrape FILE]… [--json] [--trace] LOG…`: the diagnosis engine over material
// someone handed over — a job's log files, kernel-log lines, saved /metrics bodies of an
// inference server — as one node's evidence, offline.
//
// Each LOG is one process's output (its own framework detection, as each process is in the
// agent), read by exactly the agent's pipeline (log_events.h) and stored as the agent's
// collector stores it (collect/joblog/stored_event.h, step_spans.h) in an in-memory store; each
// kmsg FILE's Xid lines as the kmsg collector stores them; each scrape FILE's samples as the
// serving collector stores a scrape (collect/serving: the same normalisation and series). Then the detectors
// and the investigator run over that store as they do over an agent's, and the diagnoses are printed as
// `ithbat diagnose` prints them.
//
// What a replay cannot know, it does not invent, and says so:
//  - Time: logs carry no common clock (many lines no time at all), so by default line n of every
//    file is dated start + (n − 1) × interval. Order within a file is kept; order across files is
//    by line number only. Durations the engine measures from it are the replay's, not the job's.
//    With --times stamps, a file whose lines carry stamps (collect/joblog/text/line_time.h) is
//    dated by them — durations and order across such files are the job's — and undated material
//    is dated by number from the earliest stamp.
//  - Processes: a log names ranks (a "[rank3]:" prefix), not pids; each (file, rank) is given a
//    number in place of a pid so the engine can tell the streams apart.
//  - GPUs: a kernel log names PCI addresses; each address is given an index by first appearance.
//  - Servers: a saved scrape names no process or port. The engine is told by its metric names
//    (vllm:, sglang:, tgi_); the scrapes of one engine are one server's (pid 0, port 0), the
//    k-th dated start + (k − 1) × interval. A scrape of something else (a DCGM exporter's) is
//    read and said to hold no server's metrics.
//  - Collectors: a replay holds the job's output (joblog), the kernel log (kmsg) and the serving
//    scrapes (serving) only. A verdict
//    needs two collectors (docs/diagnoses.md), so what the material cannot prove comes out
//    inconclusive, naming the suspected cause — and the collectors that would have decided it are
//    listed.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/result.h"
#include "core/time.h"
#include "detect/fleet_view.h"

namespace ithbat::cli {

struct ReplayCommandOptions {
  std::vector<std::string> logs;  // job output files, one process each
  std::vector<std::string> kmsg;  // kernel-log files (dmesg, dmesg -T, journalctl -k, syslog)
  std::vector<std::string> scrapes;  // saved /metrics bodies of an inference server, in scrape order
  std::string job = "replay";
  std::string node = "replay";
  int32_t world_size = -1;        // the job's world size when known (names ranks that stayed silent)
  double interval_seconds = 1.0;  // between two lines of a file
  std::string times = "lines";    // "lines": dated by line number; "stamps": by each line's own stamp
  std::string format = "auto";    // the job-output parser (as `ithbat parse --format`)
  double list_price_per_gpu_hour = 0;
  size_t max_events = 0;  // the store's bound; 0 = kReplayMaxEvents
  bool json = false;   // schema v1 diagnosis lines only
  bool trace = false;  // what each detector measured
  std::string color = "auto";
};

// Where the material came from and what it held, per file.
struct ReplayFile {
  std::string path;
  bool kernel_log = false;
  bool scrape = false;  // a saved /metrics body; `framework` is its engine
  uint64_t lines = 0;
  std::string framework;
  uint64_t copies = 0;                      // lines dropped as copies of a recent line (other ranks')
  uint64_t stamped = 0;                     // --times stamps: lines that carried a stamp
  TimeNs first_time = 0, last_time = 0;     // --times stamps: the file's first and last stamp (0: none)
  std::map<std::string, uint64_t> by_kind;  // event kind → count
  std::map<std::string, uint64_t> errors;   // error class (or Xid code) → count
  std::string failure;                      // why it could not be read, "" when it was
  std::vector<std::string> notes;           // what was read only in part, or not used, and why
};

struct ReplayResult {
  std::vector<ReplayFile> files;
  std::map<std::string, int32_t> gpus;  // PCI address → the index the replay gave it
  TimeNs start = 0, end = 0;            // the material's synthetic span; the engine looks at `end`
  uint64_t events = 0, dropped = 0;     // stored; refused or let go by the store's bounds
  uint64_t scrapes = 0;                 // saved /metrics bodies of a server ingested
  std::vector<Diagnosis> diagnoses;
  std::vector<std::string> trace;
  detect::FleetView view;
};

// The material's first line is dated at this instant (2000-01-01T00:00:00Z): plainly not a real
// time, so no one mistakes a replay's times for the job's.
inline constexpr TimeNs kReplayStart = 946'684'800LL * kNsPerSec;
// The engine looks at the material this long after its last line, as a live agent would keep
// looking after a job's last line: long enough for the detectors that wait for what follows an
// event (a rank that launches nothing after its OOM: 10 s) to decide.
inline constexpr TimeNs kReplayTail = 60 * kNsPerSec;
// --times stamps: a file is dated by its stamps when one of its first this many lines (read from
// its first this many bytes) holds one; a stamp without a year is read in this year (plainly not
// a real one, as kReplayStart).
inline constexpr size_t kReplayStampLookaheadLines = 1000;
inline constexpr size_t kReplayStampLookaheadBytes = 1 << 20;
inline constexpr int kReplayStampYear = 2000;
// Bounds of the in-memory store: a replay reads files someone handed over.
inline constexpr size_t kReplayMaxEvents = 2'000'000;
inline constexpr size_t kReplayMaxFiles = 4096;
// (file, rank) streams given a number of their own (a job of 100 000 ranks in one file fits).
inline constexpr size_t kReplayMaxStreams = 1 << 17;
// Distinct error classes or Xid codes tallied per file; the rest count as "other".
inline constexpr size_t kReplayMaxTallyKeys = 256;

Result<ReplayResult> Replay(const ReplayCommandOptions& options);

// Exit status: 0 when every file was read (whatever the diagnoses), 1 when one could not be (the
// others are still replayed), 2 for a usage error.
int RunReplayCommand(const ReplayCommandOptions& options, std::FILE* out, std::FILE* err);

}  // namespace ithbat::cli
