#pragma once
// The probes: which libcuda/libnccl functions are attached, how (entry, entry+return), what the
// BPF program reads from their arguments (cookie, bpf/cuda_probes_abi.h), and the
// cuGetProcAddress (name, version, flags) triples the CUDA runtime uses to reach each one
// (from libcudart 13's lookups, ../shared/tools/gpu-check/cudart13_lookups.txt, embedded here).
// nvidia-abi.md §3.2/§4.2 give the argument positions; §5 the core set of 46 attachments.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "collect/probes/proc_maps.h"

namespace ithbat::collect::probes {

enum class ProbeClass : uint8_t {
  kLaunch,        // kernel / graph launch (entry only)
  kSync,          // stream/event/context synchronisation (entry + return: host blocked time)
  kCopy,          // asynchronous copy (bytes by direction)
  kBlockingCopy,  // synchronous copy (bytes, and host blocked time)
  kAlloc,         // allocation (bytes)
  kFree,
  kEvent,     // event record / stream wait (dependency edges)
  kNcclColl,  // NCCL collective or point-to-point
  kNcclGroup,
  kNcclComm,  // communicator init / destroy
};
std::string_view ProbeClassName(ProbeClass c);

enum class CopyDirection : uint8_t { kNone, kHostToDevice, kDeviceToHost, kDeviceToDevice, kUnknown, kPeer };
std::string_view CopyDirectionName(CopyDirection d);  // "h2d", "d2h", "d2d", "unknown", "peer"

struct ProcAddrQuery {
  std::string_view name;
  int version = 0;
  uint64_t flags = 0;  // 0 = default, 2 = per-thread default stream
};

struct ProbeSpec {
  uint16_t id = 0;  // cookie probe id; dense, < CUDA_PROBES_MAX_PROBES - 1
  LibraryKind library = LibraryKind::kCuda;
  std::string_view symbol;  // exported name (for NCCL the public nccl* alias; pnccl* is its twin)
  ProbeClass cls = ProbeClass::kLaunch;
  bool core = false;   // one of nvidia-abi.md §5's 46 (reported when missing from a library)
  bool timed = false;  // a uretprobe too
  CopyDirection direction = CopyDirection::kNone;
  uint8_t arg_bytes = 0;                  // argument with a byte (NCCL: element) count, 1..7; 0 none
  uint8_t arg_dtype = 0;                  // NCCL
  uint8_t arg_comm = 0;                   // NCCL
  uint32_t flags = 0;                     // CUDA_PROBE_F_*
  std::optional<ProcAddrQuery> procaddr;  // the cuGetProcAddress triple that means this symbol
  std::string_view nccl_op;               // NCCL: the op label ("all_reduce", ...)

  uint64_t Cookie() const;
};

std::span<const ProbeSpec> ProbeTable();
const ProbeSpec* FindProbe(uint16_t id);

}  // namespace ithbat::collect::probes
