#pragma once
// One simulated node's hardware and statistics roots, as the node's own `ithbat agent` reads
// them: a fake-GPU state file (the fake libnvidia-ml maps it), a --procfs root, a --sysfs root
// and a --kmsg file. The runner creates one NodeWorld per scenario node, ticks it every ~250 ms
// (real time) and hands it the timeline's hardware events; the agent only ever sees the files.
//
// Directory (Options::dir, normally <run>/nodes/<node>):
//   gpu.state                  fake state (ITHBAT_FAKE_STATE): the node's GPU models and count,
//                              UUIDs distinct per node (seeded from the node name and seed)
//   proc/{stat,meminfo,loadavg,vmstat,pressure/*}   the REAL host's files, mirrored each Tick
//                              (the host is what the node's processes really run on)
//   proc/self/mountstats, proc/diskstats            written by Storage (storage.h), not here
//   sys/bus/pci/devices/<bdf>  symlinks into sys/devices/pci<dom>:<bus>/...: the PCIe tree that
//                              puts each NIC behind the same PCIe switch as the GPUs the
//                              scenario's nics[].gpus lists (PIX), other pairs across host
//                              bridges / NUMA nodes (NODE/SYS), so the agent's topology
//                              collector maps GPU↔NIC as the scenario says
//   sys/class/infiniband/<nic>/{device, ports/<port>/{state,phys_state,rate,counters/*}}
//                              from the net state slots of the node's NICs
//   kmsg                       kernel log in /dev/kmsg record format (pri,seq,usec,flags;msg),
//                              appended; Xid lines as the NVIDIA driver prints them
//
// Units and time: every time handed in (now_ns, event ramp_s/duration_s) is REAL (already
// compressed by the runner). Rates that come from the scenario (background per-hour rates, an
// event's symbol_errors_per_s) are per scenario-second and are multiplied by
// Options::time_compression here.
//
// Background mess (scenario `background`, when enabled), all drawn from Options::seed and the
// node name, so a seed reproduces it exactly: a per-GPU clock cap within -clock_spread_pct of
// the model's max SM clock (draws above the max mean no cap); power capping (the limit stays
// the model's; each GPU's demand curve in the fake's power model is drawn so a training load
// asks for more than the limit and runs capped with the SW power cap reason; with
// power_capping off a fully loaded GPU just fits under the limit);
// corrected ECC errors and IB symbol errors (into the net slot) as Poisson processes whose
// arrival times are drawn ahead, so counts at a run time do not depend on the tick rate; an old
// row remap set at creation (never moves); one Xid from another job earlier in the day, written
// to kmsg dated before the run (no NVML event: those are live).
//
// Events (StartEvent/EndEvent): the GPU/node/NIC kinds of scenario::EventKind. Settings
// (clock caps, power limits, health, congestion, temperature offsets, reasons) are recomputed
// from the background plus every active event, so overlapping events compose and EndEvent
// restores exactly what was there; counters (ECC, Xid, link_downed, NVLink errors) only move
// forward. silent_corruption changes nothing visible (it is only recorded). The effect of a
// fault on the job (NaN, loss spike, crash) is the runner's business.
//
// Lifecycle: Create → Tick/StartEvent/EndEvent (from one thread, or serialised by the caller)
// → destruction. The state file and the roots outlive the object (the run dir is the
// runner's). Errors: Create fails when a file cannot be written or the scenario node is
// invalid; Tick reports the first file it could not write and goes on with the others.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/result.h"
#include "fake_state/fake_state_api.h"
#include "net/net_state.h"
#include "node/files.h"
#include "scenario/scenario.h"

namespace ithbat::sim::node {

using Event = scenario::EventT<scenario::Plain>;

class NodeWorld {
 public:
  struct Options {
    std::filesystem::path dir;                             // nodes/<node>; created if missing
    const scenario::ResolvedScenario* scenario = nullptr;  // must outlive the NodeWorld
    size_t node_index = 0;                                 // into scenario->nodes
    uint64_t seed = 0;
    double time_compression = 1.0;  // scenario seconds per real second
    double byte_scale = 1.0;
    net::NetStateMapping* net = nullptr;          // the world's; may be null (no IB traffic)
    std::vector<uint32_t> nic_slots;              // slot of scenario->nodes[i].nics[k], same order
    int64_t run_start_ns = 0;                     // 0 = now: "earlier in the day" is before it
    std::filesystem::path host_procfs = "/proc";  // the real files mirrored each Tick
  };

  struct GpuInfo {
    uint32_t index = 0;
    std::string uuid;
    std::string pci_bus_id;  // NVML form, "00000000:18:00.0"
  };
  struct NicInfo {
    std::string name;
    uint32_t port = 1;
    uint32_t slot = 0;
    std::vector<int64_t> gpus;
    std::string pci_bus_id;  // sysfs form, "0000:19:00.0"
  };

  static Result<std::unique_ptr<NodeWorld>> Create(const Options& options);
  ~NodeWorld();
  NodeWorld(const NodeWorld&) = delete;
  NodeWorld& operator=(const NodeWorld&) = delete;

  const std::string& name() const { return name_; }
  std::filesystem::path dir() const { return options_.dir; }
  std::filesystem::path state_path() const { return options_.dir / "gpu.state"; }
  std::filesystem::path procfs() const { return options_.dir / "proc"; }
  std::filesystem::path sysfs() const { return options_.dir / "sys"; }
  std::filesystem::path kmsg() const { return options_.dir / "kmsg"; }
  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  const std::vector<NicInfo>& nics() const { return nics_; }
  // The node's fake GPUs (the runner adds processes/work through it if it wants to).
  FakeState& state() { return *state_; }

  // Every ~250 ms real: host files, IB counters, background Poisson processes, event ramps.
  Status Tick(int64_t now_ns);
  // The world's real start, once the agents are up (Create may run long before): background
  // rates count from here.
  void SetRunStart(int64_t ns) { options_.run_start_ns = ns; }
  // Hardware events of this node (e.node must be this node's name; kInvalidArgument otherwise,
  // and for a GPU/NIC the node does not have). Kinds that are not this node's hardware
  // (storage_slowdown, rank_hang, host_cpu_contention) are accepted and ignored.
  Status StartEvent(const Event& e, int64_t now_ns);
  // Ends an event started before (matched by kind, gpu, nic and id); unknown = Ok, no-op.
  Status EndEvent(const Event& e, int64_t now_ns);

  // Events started and not ended; silent_corruption ones included (ground truth only).
  size_t active_events() const { return active_.size(); }
  // Ground truth of the background (world.json): the GPU given the old row remap and the GPU of
  // the earlier Xid line (-1 when none), and every kmsg message written, in order.
  int old_remap_gpu() const { return old_remap_gpu_; }
  int earlier_xid_gpu() const { return earlier_xid_gpu_; }
  const std::vector<std::string>& kmsg_messages() const { return kmsg_lines_; }

 private:
  struct Active {
    Event event;
    int64_t start_ns = 0;
  };
  struct GpuBase {
    uint32_t max_sm_mhz = 0;
    uint32_t clock_cap_mhz = 0;   // background spread (0 = none)
    uint32_t power_limit_mw = 0;  // the model's limit
    uint32_t min_power_limit_mw = 0;
    uint32_t power_per_activity_mw = 0;
    int32_t idle_temp_c = 0;
    int32_t sw_slowdown_c = 0;
    double ecc_rate = 0;    // corrected ECC per real second
    double next_ecc_s = 0;  // next arrival, real seconds since run start
    std::mt19937_64 rng;
  };
  struct NicRuntime {
    double symbol_rate = 0;  // background, per real second
    double next_symbol_s = 0;
    double symbol_carry = 0;  // fractional symbol errors from event rates
    uint64_t link_error_recovery = 0;
    // Without a net state (tests): the counters live here.
    uint64_t local_symbols = 0;
    uint64_t local_downed = 0;
    uint64_t local_health_ppm = 1'000'000;
    std::mt19937_64 rng;
  };

  explicit NodeWorld(Options options);
  Status Init();
  Status BuildPciTree();
  Status WriteNicFiles(size_t nic, bool force);
  Status MirrorHostFiles();
  Status AppendKmsg(int level, const std::string& message, uint64_t usec);
  Status LogXid(uint32_t gpu, uint32_t xid);
  Status ApplySettings(int64_t now_ns);
  Result<int> NicIndex(const std::string& name) const;
  static std::string EventKey(const Event& e);

  Options options_;
  std::string name_;
  const scenario::NodeT<scenario::Plain>* node_ = nullptr;
  std::unique_ptr<FakeState> state_;
  std::vector<GpuInfo> gpus_;
  std::vector<NicInfo> nics_;
  std::vector<GpuBase> base_;
  std::vector<NicRuntime> nic_rt_;
  std::map<std::string, Active> active_;
  std::mt19937_64 rng_;
  FileWriter files_;
  uint64_t kmsg_seq_ = 0;
  int64_t last_tick_ns_ = 0;
  int old_remap_gpu_ = -1;
  int earlier_xid_gpu_ = -1;
  std::vector<std::string> kmsg_lines_;
};

}  // namespace ithbat::sim::node
