#include "collect/probes/probe_table.h"

#include <array>

#include "cuda_probes_abi.h"

namespace ithbat::collect::probes {
namespace {

using C = ProbeClass;
using D = CopyDirection;
using L = LibraryKind;
constexpr uint32_t kLaunchGrid = CUDA_PROBE_F_LAUNCH | CUDA_PROBE_F_GRID3;
constexpr uint32_t kLaunchCfg = CUDA_PROBE_F_LAUNCH | CUDA_PROBE_F_GRID_CFG;
constexpr uint32_t kColl = CUDA_PROBE_F_NCCL_COLL;
constexpr uint32_t kCollN = CUDA_PROBE_F_NCCL_COLL | CUDA_PROBE_F_NCCL_TIMES_N;
// Point-to-point: a record, but no step of the communicator's collective seq (ranks differ).
constexpr uint32_t kP2p = CUDA_PROBE_F_NCCL_COLL | CUDA_PROBE_F_NCCL_P2P;
// Host-blocking waits that mark a step's structure: a per-call record at return (step inference).
constexpr uint32_t kSyncRec = CUDA_PROBE_F_SYNC_RECORD;

constexpr ProcAddrQuery Q(std::string_view n, int v, uint64_t f = 0) { return {n, v, f}; }

// ids are positions; keep them dense and stable within a release (they are map keys only while
// the agent runs, never stored).
// clang-format off
const std::array kTable = {
  // id symbol                            class            core  timed dir          bytes dt comm flags   procaddr
  ProbeSpec{0,  L::kCuda, "cuLaunchKernel",                 C::kLaunch, true,  false, D::kNone, 0, 0, 0, kLaunchGrid, Q("cuLaunchKernel", 4000)},
  ProbeSpec{1,  L::kCuda, "cuLaunchKernel_ptsz",            C::kLaunch, true,  false, D::kNone, 0, 0, 0, kLaunchGrid, Q("cuLaunchKernel", 7000, 2)},
  ProbeSpec{2,  L::kCuda, "cuLaunchKernelEx",               C::kLaunch, true,  false, D::kNone, 0, 0, 0, kLaunchCfg, Q("cuLaunchKernelEx", 11060)},
  ProbeSpec{3,  L::kCuda, "cuLaunchKernelEx_ptsz",          C::kLaunch, true,  false, D::kNone, 0, 0, 0, kLaunchCfg, Q("cuLaunchKernelEx", 11060, 2)},
  ProbeSpec{4,  L::kCuda, "cuLaunchCooperativeKernel",      C::kLaunch, true,  false, D::kNone, 0, 0, 0, kLaunchGrid, Q("cuLaunchCooperativeKernel", 9000)},
  ProbeSpec{5,  L::kCuda, "cuLaunchCooperativeKernel_ptsz", C::kLaunch, false, false, D::kNone, 0, 0, 0, kLaunchGrid, Q("cuLaunchCooperativeKernel", 9000, 2)},
  ProbeSpec{6,  L::kCuda, "cuGraphLaunch",                  C::kLaunch, true,  false, D::kNone, 0, 0, 0, CUDA_PROBE_F_LAUNCH, Q("cuGraphLaunch", 10000)},
  ProbeSpec{7,  L::kCuda, "cuGraphLaunch_ptsz",             C::kLaunch, true,  false, D::kNone, 0, 0, 0, CUDA_PROBE_F_LAUNCH, Q("cuGraphLaunch", 10000, 2)},
  ProbeSpec{8,  L::kCuda, "cuStreamSynchronize",            C::kSync, true,  true, D::kNone, 0, 0, 0, kSyncRec, Q("cuStreamSynchronize", 2000)},
  ProbeSpec{9,  L::kCuda, "cuStreamSynchronize_ptsz",       C::kSync, true,  true, D::kNone, 0, 0, 0, kSyncRec, Q("cuStreamSynchronize", 7000, 2)},
  ProbeSpec{10, L::kCuda, "cuEventSynchronize",             C::kSync, true,  true, D::kNone, 0, 0, 0, kSyncRec, Q("cuEventSynchronize", 2000)},
  ProbeSpec{11, L::kCuda, "cuCtxSynchronize",               C::kSync, true,  true, D::kNone, 0, 0, 0, kSyncRec, Q("cuCtxSynchronize", 2000)},
  ProbeSpec{12, L::kCuda, "cuCtxSynchronize_v2",            C::kSync, true,  true, D::kNone, 0, 0, 0, kSyncRec, Q("cuCtxSynchronize", 13000)},
  ProbeSpec{13, L::kCuda, "cuStreamWaitEvent",              C::kEvent, true,  false, D::kNone, 0, 0, 0, 0, Q("cuStreamWaitEvent", 3020)},
  ProbeSpec{14, L::kCuda, "cuStreamWaitEvent_ptsz",         C::kEvent, false, false, D::kNone, 0, 0, 0, 0, Q("cuStreamWaitEvent", 7000, 2)},
  ProbeSpec{15, L::kCuda, "cuEventRecord",                  C::kEvent, true,  false, D::kNone, 0, 0, 0, 0, Q("cuEventRecord", 2000)},
  ProbeSpec{16, L::kCuda, "cuEventRecord_ptsz",             C::kEvent, false, false, D::kNone, 0, 0, 0, 0, Q("cuEventRecord", 7000, 2)},
  ProbeSpec{17, L::kCuda, "cuMemcpyAsync",                  C::kCopy, true,  false, D::kUnknown, 3, 0, 0, 0, Q("cuMemcpyAsync", 4000)},
  ProbeSpec{18, L::kCuda, "cuMemcpyAsync_ptsz",             C::kCopy, false, false, D::kUnknown, 3, 0, 0, 0, Q("cuMemcpyAsync", 7000, 2)},
  ProbeSpec{19, L::kCuda, "cuMemcpyHtoDAsync_v2",           C::kCopy, true,  false, D::kHostToDevice, 3, 0, 0, 0, Q("cuMemcpyHtoDAsync", 3020)},
  ProbeSpec{20, L::kCuda, "cuMemcpyHtoDAsync_v2_ptsz",      C::kCopy, false, false, D::kHostToDevice, 3, 0, 0, 0, Q("cuMemcpyHtoDAsync", 7000, 2)},
  ProbeSpec{21, L::kCuda, "cuMemcpyDtoHAsync_v2",           C::kCopy, true,  false, D::kDeviceToHost, 3, 0, 0, 0, Q("cuMemcpyDtoHAsync", 3020)},
  ProbeSpec{22, L::kCuda, "cuMemcpyDtoHAsync_v2_ptsz",      C::kCopy, false, false, D::kDeviceToHost, 3, 0, 0, 0, Q("cuMemcpyDtoHAsync", 7000, 2)},
  ProbeSpec{23, L::kCuda, "cuMemcpyDtoDAsync_v2",           C::kCopy, true,  false, D::kDeviceToDevice, 3, 0, 0, 0, Q("cuMemcpyDtoDAsync", 3020)},
  ProbeSpec{24, L::kCuda, "cuMemcpyDtoDAsync_v2_ptsz",      C::kCopy, false, false, D::kDeviceToDevice, 3, 0, 0, 0, Q("cuMemcpyDtoDAsync", 7000, 2)},
  ProbeSpec{25, L::kCuda, "cuMemcpyHtoD_v2",                C::kBlockingCopy, false, true, D::kHostToDevice, 3, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemcpyHtoD", 3020)},
  ProbeSpec{26, L::kCuda, "cuMemcpyHtoD_v2_ptds",           C::kBlockingCopy, false, true, D::kHostToDevice, 3, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemcpyHtoD", 7000, 2)},
  ProbeSpec{27, L::kCuda, "cuMemcpyDtoH_v2",                C::kBlockingCopy, true,  true, D::kDeviceToHost, 3, 0, 0, CUDA_PROBE_F_TIMED | kSyncRec, Q("cuMemcpyDtoH", 3020)},
  ProbeSpec{28, L::kCuda, "cuMemcpyDtoH_v2_ptds",           C::kBlockingCopy, false, true, D::kDeviceToHost, 3, 0, 0, CUDA_PROBE_F_TIMED | kSyncRec, Q("cuMemcpyDtoH", 7000, 2)},
  ProbeSpec{29, L::kCuda, "cuMemcpyDtoD_v2",                C::kBlockingCopy, false, true, D::kDeviceToDevice, 3, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemcpyDtoD", 3020)},
  ProbeSpec{30, L::kCuda, "cuMemcpyDtoD_v2_ptds",           C::kBlockingCopy, false, true, D::kDeviceToDevice, 3, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemcpyDtoD", 7000, 2)},
  ProbeSpec{31, L::kCuda, "cuMemcpyPeerAsync",              C::kCopy, false, false, D::kPeer, 5, 0, 0, 0, Q("cuMemcpyPeerAsync", 4000)},
  ProbeSpec{32, L::kCuda, "cuMemcpyPeerAsync_ptsz",         C::kCopy, false, false, D::kPeer, 5, 0, 0, 0, Q("cuMemcpyPeerAsync", 7000, 2)},
  ProbeSpec{33, L::kCuda, "cuMemAlloc_v2",                  C::kAlloc, true,  true, D::kNone, 2, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemAlloc", 3020)},
  ProbeSpec{34, L::kCuda, "cuMemAllocAsync",                C::kAlloc, true,  false, D::kNone, 2, 0, 0, 0, Q("cuMemAllocAsync", 11020)},
  ProbeSpec{35, L::kCuda, "cuMemAllocAsync_ptsz",           C::kAlloc, false, false, D::kNone, 2, 0, 0, 0, Q("cuMemAllocAsync", 11020, 2)},
  ProbeSpec{36, L::kCuda, "cuMemFree_v2",                   C::kFree, true,  true, D::kNone, 0, 0, 0, CUDA_PROBE_F_TIMED, Q("cuMemFree", 3020)},
  ProbeSpec{37, L::kCuda, "cuMemFreeAsync",                 C::kFree, false, false, D::kNone, 0, 0, 0, 0, Q("cuMemFreeAsync", 11020)},
  ProbeSpec{38, L::kCuda, "cuMemFreeAsync_ptsz",            C::kFree, false, false, D::kNone, 0, 0, 0, 0, Q("cuMemFreeAsync", 11020, 2)},
  // NCCL (nvidia-abi.md §4.2): count / dtype / comm argument positions; 7 = first stack slot.
  ProbeSpec{64, L::kNccl, "ncclAllReduce",      C::kNcclColl, true,  false, D::kNone, 3, 4, 6, kColl,  std::nullopt, "all_reduce"},
  ProbeSpec{65, L::kNccl, "ncclAllGather",      C::kNcclColl, true,  false, D::kNone, 3, 4, 5, kCollN, std::nullopt, "all_gather"},
  ProbeSpec{66, L::kNccl, "ncclReduceScatter",  C::kNcclColl, true,  false, D::kNone, 3, 4, 6, kCollN, std::nullopt, "reduce_scatter"},
  ProbeSpec{67, L::kNccl, "ncclBroadcast",      C::kNcclColl, true,  false, D::kNone, 3, 4, 6, kColl,  std::nullopt, "broadcast"},
  ProbeSpec{68, L::kNccl, "ncclReduce",         C::kNcclColl, true,  false, D::kNone, 3, 4, 7, kColl,  std::nullopt, "reduce"},
  ProbeSpec{69, L::kNccl, "ncclSend",           C::kNcclColl, true,  false, D::kNone, 2, 3, 5, kP2p,   std::nullopt, "send"},
  ProbeSpec{70, L::kNccl, "ncclRecv",           C::kNcclColl, true,  false, D::kNone, 2, 3, 5, kP2p,   std::nullopt, "recv"},
  ProbeSpec{71, L::kNccl, "ncclAlltoAll",       C::kNcclColl, false, false, D::kNone, 3, 4, 5, kCollN, std::nullopt, "all_to_all"},
  ProbeSpec{72, L::kNccl, "ncclGather",         C::kNcclColl, false, false, D::kNone, 3, 4, 6, kColl,  std::nullopt, "gather"},
  ProbeSpec{73, L::kNccl, "ncclScatter",        C::kNcclColl, false, false, D::kNone, 3, 4, 6, kColl,  std::nullopt, "scatter"},
  ProbeSpec{74, L::kNccl, "ncclGroupStart",     C::kNcclGroup, true, false, D::kNone, 0, 0, 0, CUDA_PROBE_F_GROUP_START, std::nullopt, "group_start"},
  ProbeSpec{75, L::kNccl, "ncclGroupEnd",       C::kNcclGroup, true, true,  D::kNone, 0, 0, 0, CUDA_PROBE_F_GROUP_END | CUDA_PROBE_F_TIMED, std::nullopt, "group_end"},
  ProbeSpec{76, L::kNccl, "ncclCommInitRank",   C::kNcclComm, true,  true, D::kNone, 0, 0, 0, CUDA_PROBE_F_COMM_INIT | CUDA_PROBE_F_TIMED, std::nullopt, "comm_init"},
  ProbeSpec{77, L::kNccl, "ncclCommInitRankConfig", C::kNcclComm, true, true, D::kNone, 0, 0, 0, CUDA_PROBE_F_COMM_INIT | CUDA_PROBE_F_TIMED, std::nullopt, "comm_init"},
  ProbeSpec{78, L::kNccl, "ncclCommDestroy",    C::kNcclComm, false, false, D::kNone, 0, 0, 0, CUDA_PROBE_F_COMM_DESTROY, std::nullopt, "comm_destroy"},
  ProbeSpec{79, L::kNccl, "ncclCommAbort",      C::kNcclComm, false, false, D::kNone, 0, 0, 0, CUDA_PROBE_F_COMM_DESTROY, std::nullopt, "comm_abort"},
};
// clang-format on
static_assert(kTable.size() < CUDA_PROBES_MAX_PROBES - 1);

}  // namespace

std::string_view ProbeClassName(ProbeClass c) {
  switch (c) {
    case C::kLaunch:
      return "launch";
    case C::kSync:
      return "sync";
    case C::kCopy:
      return "copy";
    case C::kBlockingCopy:
      return "blocking_copy";
    case C::kAlloc:
      return "alloc";
    case C::kFree:
      return "free";
    case C::kEvent:
      return "event";
    case C::kNcclColl:
      return "nccl_collective";
    case C::kNcclGroup:
      return "nccl_group";
    case C::kNcclComm:
      return "nccl_comm";
  }
  return "?";
}

std::string_view CopyDirectionName(CopyDirection d) {
  switch (d) {
    case D::kNone:
      return "";
    case D::kHostToDevice:
      return "h2d";
    case D::kDeviceToHost:
      return "d2h";
    case D::kDeviceToDevice:
      return "d2d";
    case D::kUnknown:
      return "unknown";
    case D::kPeer:
      return "peer";
  }
  return "";
}

uint64_t ProbeSpec::Cookie() const {
  uint32_t f = flags;
  if (timed) f |= CUDA_PROBE_F_TIMED;
  return CUDA_PROBE_COOKIE(id, arg_bytes, arg_dtype, arg_comm, f);
}

std::span<const ProbeSpec> ProbeTable() { return kTable; }

const ProbeSpec* FindProbe(uint16_t id) {
  for (const ProbeSpec& p : kTable) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

}  // namespace ithbat::collect::probes
