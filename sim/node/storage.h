#pragma once
// The world's mounts (scenario `storage.mounts`), as real file systems the ranks write through,
// and the per-node NFS mountstats and block-device diskstats the nodes' agents read.
//
//   shared_nfs   ONE ithbat-slowfs instance per mount (backing storage/<mount>/data, mounted on
//                storage/<mount>/mnt), so its bandwidth is shared by every client of every node
//                (one virtual link). Each node that mounts it gets a bind mount of it at
//                nodes/<node>/fs/<mount path> (its own line in mountinfo, like a real NFS
//                client). The node's proc/self/mountstats gets an NFS (nfs4) device block for
//                it whose WRITE/COMMIT/CLOSE/OPEN op lines and bytes: line count what THAT
//                node's processes did.
//   local_nvme   one slowfs instance PER NODE (backing storage/<mount>/<node>/data, mounted at
//                nodes/<node>/fs/<mount path>) with the mount's bandwidth and fsync latency; the
//                node's proc/diskstats gets a device nvme<k>n1 (k = 1.. in mount order; nvme0n1
//                is the node's idle OS disk) whose write counters are those bytes.
//
// Attribution: slowfs (--client-env ITHBAT_SIM_NODE_ID) keys its stats by the value of that
// variable in the environment of the calling process (read once per process from
// /proc/<pid>/environ), so every process the runner starts with ITHBAT_SIM_NODE_ID=<index>
// (ranks, their data-loader workers, io tenants placed on a node) is counted for that node;
// others are counted per pid and for no node. Stats file format: sim/slowfs/slowfs.cc (top)
// and sim/node/README.md.
//
// Scale: real bandwidth = scenario GB/s × time_compression / byte_scale; real fsync latency =
// scenario fsync_ms / time_compression. Events are handed over already compressed (their
// fsync_ms and ramp_s are real).
//
// storage_slowdown (mount; bandwidth_factor, fsync_ms, ramp_s): the mount's control file moves
// linearly from the healthy values to bandwidth × factor and fsync_ms over ramp_s (Tick), and
// back at EndEvent. io tenants (TenantT kind io): a writer process (ithbat-sim-io-writer, a real
// client of the mount) writes write_gbps (scaled) from start_s to end_s of scenario time, so it
// competes for the link and stalls like any client.
//
// Lifecycle: Create mounts everything (fails, with nothing left mounted, if a mount fails) →
// Tick / StartEvent / EndEvent from one thread → Stop (or the destructor): kills tenants,
// unmounts every bind and FUSE mount (lazily if busy), waits for the slowfs daemons. Needs
// root (or FUSE and bind-mount rights) and /dev/fuse.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "core/result.h"
#include "node/files.h"
#include "scenario/scenario.h"

namespace ithbat::sim::node {

// One client's counters in a slowfs stats file.
struct SlowfsClientStats {
  std::string client;  // "env:<ITHBAT_SIM_NODE_ID value>" or "pid:<tgid>"
  uint64_t writes = 0, write_bytes = 0, write_ns = 0;
  uint64_t reads = 0, read_bytes = 0, read_ns = 0;
  uint64_t fsyncs = 0, fsync_ns = 0;
  uint64_t closes = 0, close_ns = 0;  // close() = FUSE flush
  uint64_t opens = 0;
};
// Parses a slowfs stats file (bounded: at most 4096 clients; malformed lines are skipped).
std::vector<SlowfsClientStats> ParseSlowfsStats(std::string_view text);

class Storage {
 public:
  struct Options {
    std::filesystem::path root;                            // the run dir
    const scenario::ResolvedScenario* scenario = nullptr;  // must outlive the Storage
    double time_compression = 1.0;
    double byte_scale = 1.0;
    int64_t run_start_ns = 0;         // scenario time 0 (tenants' start_s/end_s); 0 = now
    std::filesystem::path slowfs;     // default: the build's ithbat-slowfs
    std::filesystem::path io_writer;  // default: the build's ithbat-sim-io-writer
  };

  struct MountInfo {
    std::string name;
    scenario::MountKind kind = scenario::MountKind::kSharedNfs;
    std::map<std::string, std::filesystem::path> node_paths;  // node → where its ranks write
    // Other mount points of the same file system on this machine (shared_nfs: the one slowfs
    // mount the nodes' bind mounts come from). All simulated nodes share one mount namespace, so
    // an agent that names a mount by its superblock may report any of these.
    std::vector<std::filesystem::path> also_at;
  };

  static Result<std::unique_ptr<Storage>> Create(const Options& options);
  ~Storage();  // Stop()
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Where `node`'s processes reach `mount` (absolute). kNotFound if the node does not mount it.
  // Processes writing there must carry ITHBAT_SIM_NODE_ID=<node index> in their environment
  // (set at exec) to be counted in that node's mountstats.
  Result<std::filesystem::path> NodePath(std::string_view node, std::string_view mount) const;
  const std::vector<MountInfo>& mounts() const { return mounts_; }

  // storage_slowdown events (others are ignored: Ok). EndEvent matches by kind, mount and id.
  Status StartEvent(const scenario::EventT<scenario::Plain>& e, int64_t now_ns);
  Status EndEvent(const scenario::EventT<scenario::Plain>& e, int64_t now_ns);
  // Slowdown ramps, tenants on/off, every node's proc/self/mountstats and proc/diskstats.
  Status Tick(int64_t now_ns);
  // Counters of one mount's slowfs (all clients; for tests and world.json). Empty when unknown.
  std::vector<SlowfsClientStats> Stats(std::string_view mount, std::string_view node = "") const;

  // Moves scenario time 0 (Options::run_start_ns) to the world's real start, once the agents
  // are up; before the first Tick, so no tenant started early.
  void SetRunStart(int64_t run_start_ns);

  // Idempotent; also from the destructor. Leaves no mount and no child process.
  void Stop();

 private:
  struct Instance;  // one slowfs daemon
  struct Slowdown {
    scenario::EventT<scenario::Plain> event;
    int64_t start_ns = 0;
  };
  struct Tenant {
    size_t index = 0;  // into scenario->tenants
    std::string node;  // "" = a client of no node (another cluster's traffic)
    pid_t pid = -1;
    bool done = false;
  };
  struct MountRt {
    size_t index = 0;               // into scenario->mounts
    std::vector<size_t> instances;  // into instances_: one (shared) or one per node (local)
    std::map<std::string, Slowdown> slowdowns;
    uint64_t last_bandwidth = ~0ull;
    uint64_t last_fsync_us = ~0ull;
  };

  explicit Storage(Options options);
  Status Setup();
  Status StartInstance(Instance& inst);
  void ControlValues(const MountRt& m, int64_t now_ns, uint64_t* bandwidth, uint64_t* fsync_delay_us) const;
  static std::string ControlText(uint64_t bandwidth, uint64_t fsync_delay_us);
  Status WriteControl(MountRt& m, bool force, int64_t now_ns);
  Status WriteNodeFiles(int64_t now_ns);
  void UpdateTenants(int64_t now_ns);
  pid_t SpawnTenant(const Tenant& tenant);

  Options options_;
  std::vector<MountInfo> mounts_;
  std::vector<MountRt> mount_rt_;
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<std::filesystem::path> binds_;  // bind mountpoints, unmounted first
  std::vector<Tenant> tenants_;
  FileWriter files_;
  int64_t created_ns_ = 0;
  bool stopped_ = false;
};

}  // namespace ithbat::sim::node
