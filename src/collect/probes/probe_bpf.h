#pragma once
// The loaded BPF program (bpf/cuda_probes.bpf.c) and its per-process attachments. One load per
// agent; the two programs are attached per (process, library file), each target with its cookie
// (probe id + what to read) and the process's pid as filter.
//
// Two ways to attach, chosen at Load:
//   uprobe_multi (kernel 6.6+): ONE link per (process, file, entry|return) carrying every
//     offset and cookie. Preferred: detaching a uprobe waits for an RCU grace period per link
//     (measured here: ~0.1 s per link on 6.18), so 60 single links take seconds to detach while
//     two multi links take two waits. libbpf 1.1 has no API for it; Attach issues BPF_LINK_CREATE
//     itself with the (stable) uapi layout.
//   perf-event uprobes (older kernels): one link per target and direction.
//
// Thread-compatible: the collector calls it from its Collect only.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collect/probes/target_resolver.h"
#include "core/result.h"
#include "cuda_probes_abi.h"

struct cuda_probes_bpf;
struct bpf_link;
struct ring_buffer;

namespace ithbat::collect::probes {

// The links of one process to one library file. Destroying it detaches them.
class Attachment {
 public:
  Attachment() = default;
  ~Attachment();
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  // Kernel links held (multi mode: up to 2; perf mode: one per target and direction).
  size_t links() const { return links_.size() + fds_.size(); }
  // Probe points attached (targets + return probes), whatever the mode.
  size_t points() const { return points_; }
  size_t failed() const { return failed_; }
  const std::string& first_error() const { return first_error_; }

 private:
  friend class ProbeBpf;
  std::vector<bpf_link*> links_;
  std::vector<int> fds_;  // uprobe_multi link fds
  size_t points_ = 0;
  size_t failed_ = 0;
  std::string first_error_;
};

class ProbeBpf {
 public:
  // Opens and loads the skeleton. Errors (kUnavailable) carry libbpf's reason.
  static Result<std::unique_ptr<ProbeBpf>> Load();
  ~ProbeBpf();
  ProbeBpf(const ProbeBpf&) = delete;
  ProbeBpf& operator=(const ProbeBpf&) = delete;

  // Attaches `targets` of the file at `path` (a path the agent reaches: AgentPathFor) to pid:
  // an entry uprobe per target and a return probe for timed ones. Per-target failures are
  // counted in the attachment; an error only when nothing attached.
  Result<std::unique_ptr<Attachment>> Attach(int32_t pid, const std::string& path,
                                             const std::vector<Target>& targets);

  struct StatEntry {
    cuda_probe_key key;
    cuda_probe_value value;
  };
  // Every stats entry (bounded by the map size).
  Status ReadStats(std::vector<StatEntry>* out) const;
  // Zeroes the per-tick maxima of tgid (CUDA_SLOT_GAP_MAX).
  void ResetMaxima(uint32_t tgid);
  // Deletes every entry of tgid from every map — counters, per-thread state, communicators —
  // (after its links are gone).
  void ForgetProcess(uint32_t tgid);
  // Entries of tgid per map (diagnostics and tests; walks the maps).
  struct KeyCounts {
    size_t stats = 0, last_launch = 0, group_depth = 0, entries = 0, comms = 0;
  };
  KeyCounts CountKeys(uint32_t tgid) const;
  // Consumes ring-buffer records (at most what is there now).
  int DrainRecords(const std::function<void(const cuda_probe_record&)>& fn);
  cuda_probe_global Globals() const;
  bool multi() const { return multi_; }

 private:
  ProbeBpf() = default;
  Result<std::unique_ptr<Attachment>> AttachMulti(int32_t pid, const std::string& path,
                                                  const std::vector<Target>& targets);
  cuda_probes_bpf* skel_ = nullptr;
  bool multi_ = false;
  ring_buffer* rb_ = nullptr;
  std::function<void(const cuda_probe_record&)> sink_;
  static int OnRecord(void* ctx, void* data, size_t size);
};

}  // namespace ithbat::collect::probes
