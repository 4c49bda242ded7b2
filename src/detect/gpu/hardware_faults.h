#pragma once
// Hardware faults: a GPU that failed under a job (or under nobody) → infrastructure:
// gpu_hardware, or driver for driver/firmware Xids.
//
// Signals, all as DELTAS inside the analysis window (a count or flag already there when the
// window opened is history, not cause — an old remapped row, an Xid from earlier in the day):
//   gpu collector (NVML):  ithbat_gpu_xid_errors_total growth and NVML Xid events (with the
//                          code); ithbat_gpu_ecc_errors_total{type="uncorrected"} growth;
//                          ithbat_gpu_remapped_rows{kind="uncorrected"} growth; row remap
//                          pending/failure, retired-pages pending and ithbat_gpu_lost going 0 → 1.
//   kmsg collector:        Xid events from the kernel log (code, PCI address → GPU through
//                          ithbat_gpu_info's pci_bus_id) and ithbat_kmsg_xid_events_total growth.
//   joblog collector:      what the job printed after the fault: error events (uncorrectable
//                          ECC, CUDA errors, NCCL timeouts of the other ranks) and its loss going
//                          non-finite or spiking — the consequences, listed as evidence.
// A verdict needs the NVML signal and one of the other two; NVML alone is inconclusive.
//
// Xid classes (docs/xid.md, our reading of NVIDIA's catalog; the same table as the kmsg
// collector's owner label):
//   job:      11, 13, 31, 32, 43, 69 — the application's own fault (illegal address, bad
//             instruction, corrupted push buffer). NOT hardware: no finding here.
//   driver:   38, 44, 119, 120, 155 — driver / GSP firmware → infrastructure: driver.
//   hardware: 46, 48, 62, 63, 64, 74, 79, 92, 94, 95, 121, 140, 143, 144, 145, 149, 150, 156,
//             157, 158 → infrastructure: gpu_hardware.
//   unknown:  8, 45, 68, 109, 154 and codes not in the table — they follow another Xid or vary;
//             never a cause on their own.
// An NVML Xid counter delta that the coded events of the same GPU fully explain as job-class
// Xids is the job's; a delta with no code at all counts as a fault of unknown class (it may be
// corroborated by a coded kernel-log Xid of the same GPU).
//
// The first fault across the job's GPUs (all nodes) is the cause; GPUs that fault more than
// kSameIncidentNs later, and the other ranks' NCCL timeouts/errors, are consequences.
#include <optional>
#include <string>
#include <vector>

#include "core/finding.h"
#include "core/time.h"
#include "detect/detector.h"

namespace ithbat::detect {

// Counters are sampled once per agent interval (1 s): two GPUs whose faults are stamped within
// two intervals of each other may have failed together (one event, e.g. a node's PCIe switch),
// later ones are the aftermath of the first.
inline constexpr TimeNs kSameIncidentNs = 2 * kNsPerSec;
// What the job printed this long after the fault is its consequence: NCCL's default watchdog
// is 10 min (600 s); a job that dies of a GPU fault reports it within that.
inline constexpr TimeNs kConsequenceNs = 660 * kNsPerSec;
// To tell a flag that flips inside the window from one already set, the view looks back this far
// before the window for the last sample (several agent intervals: a late tick is still found).
inline constexpr TimeNs kHistoryLookbackNs = 30 * kNsPerSec;

// Thermal / power-brake clock events on at least this many samples count as a sign on the GPU
// (one sample is not a pattern; three in a run window is the lab's debounce).
inline constexpr double kSoftThermalSamples = 3;

enum class XidClass : uint8_t { kJob, kDriver, kHardware, kUnknown };
XidClass ClassifyXid(int code);
std::string_view XidClassName(XidClass c);

// What moved on one GPU in [from, to]: counter growth and flags that were set inside the window.
struct GpuDeltas {
  GpuRef gpu;
  double xid_count = 0;          // NVML Xid counter growth
  double ecc_uncorrected = 0;    // uncorrectable ECC growth (volatile, or aggregate if larger)
  double remapped_rows = 0;      // rows remapped for uncorrectable errors, growth
  bool remap_pending = false;    // went 0 → 1 in the window
  bool remap_failure = false;
  bool retired_pending = false;
  bool lost = false;
  double nvlink_errors = 0;      // NVLink error counters, growth
  double thermal_samples = 0;    // samples with a thermal / power-brake clock event active
  std::vector<int> xid_codes_nvml;  // codes of NVML Xid events of this GPU in the window
  std::vector<int> xid_codes_kmsg;  // codes of kernel-log Xid events resolved to this GPU
  std::optional<TimeNs> first_nvml;  // first NVML sign (counter growth or event)
  std::optional<TimeNs> first_kmsg;  // first kernel-log Xid of this GPU
  std::optional<TimeNs> last;        // last sign of either

  // Hard faults: anything but job-class Xids, thermal and NVLink errors.
  bool HardFault() const;
  // Soft signs that still rule out "hardware innocence" for a divergence.
  bool SoftSigns() const { return nvlink_errors > 0 || thermal_samples >= kSoftThermalSamples; }
};

// The deltas of one GPU (node and NVML index; the UUID is carried through) over [from, to].
GpuDeltas GpuDeltasOf(const FleetView& view, const GpuRef& gpu, TimeNs from, TimeNs to);

std::vector<Finding> DetectHardwareFaults(const DetectInput& in);

}  // namespace ithbat::detect
