#pragma once
// The subset of the NCCL API (libnccl.so.2, NCCL 2.28 `nccl.h`) the fake libnccl exports and
// Ithbat's probes target (../shared/design/nvidia-abi.md §4), declared by hand. Every function
// exists twice, as in the real library: `pnccl*` (strong) and `nccl*` (weak alias at the same
// address), so a probe must attach once per address, not once per name.
#include <cstddef>
#include <cstdint>

#include "fake_cuda/cuda_abi.h"

extern "C" {

// NOLINTBEGIN(readability-identifier-naming) — NVIDIA's names.
typedef int ncclResult_t;
enum : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8,
};

typedef struct ncclComm* ncclComm_t;
typedef CUstream cudaStream_t;  // the runtime's stream type is the driver's (struct CUstream_st*)

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef int ncclDataType_t;  // §4.3
enum : int {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12,
};
typedef int ncclRedOp_t;
enum : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 };

// 2.28 layout (80 bytes); the fake reads `size`, `magic`, `version` and `commName` only.
#define NCCL_CONFIG_MAGIC 0xcafebeef
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;
static_assert(sizeof(ncclConfig_t) == 80);
static_assert(offsetof(ncclConfig_t, netName) == 32);
static_assert(offsetof(ncclConfig_t, commName) == 48);

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809

// (return type, name, parameters). The fake defines `pncclX` and aliases `ncclX` to it.
#define ITHBAT_NCCL_EXPORTS(X)                                                                               \
  X(ncclResult_t, GetVersion, (int* version))                                                                \
  X(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId))                                                    \
  X(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))              \
  X(ncclResult_t, CommInitRankConfig,                                                                        \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))                    \
  X(ncclResult_t, CommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))                           \
  X(ncclResult_t, CommFinalize, (ncclComm_t comm))                                                           \
  X(ncclResult_t, CommDestroy, (ncclComm_t comm))                                                            \
  X(ncclResult_t, CommAbort, (ncclComm_t comm))                                                              \
  X(ncclResult_t, CommCount, (const ncclComm_t comm, int* count))                                            \
  X(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device))                                        \
  X(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank))                                          \
  X(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError))                           \
  X(ncclResult_t, AllReduce,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,            \
     ncclComm_t comm, cudaStream_t stream))                                                                  \
  X(ncclResult_t, Broadcast,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream))                                                                                   \
  X(ncclResult_t, Reduce,                                                                                    \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,  \
     ncclComm_t comm, cudaStream_t stream))                                                                  \
  X(ncclResult_t, AllGather,                                                                                 \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,       \
     cudaStream_t stream))                                                                                   \
  X(ncclResult_t, ReduceScatter,                                                                             \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,        \
     ncclComm_t comm, cudaStream_t stream))                                                                  \
  X(ncclResult_t, Send,                                                                                      \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,                 \
     cudaStream_t stream))                                                                                   \
  X(ncclResult_t, Recv,                                                                                      \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) \
  X(ncclResult_t, GroupStart, (void))                                                                        \
  X(ncclResult_t, GroupEnd, (void))                                                                          \
  X(const char*, GetErrorString, (ncclResult_t result))                                                      \
  X(const char*, GetLastError, (ncclComm_t comm))

#define ITHBAT_NCCL_DECLARE(ret, name, params) \
  ret nccl##name params;                       \
  ret pnccl##name params;                      \
  typedef ret(*nccl##name##_fn) params;
ITHBAT_NCCL_EXPORTS(ITHBAT_NCCL_DECLARE)
#undef ITHBAT_NCCL_DECLARE
// NOLINTEND(readability-identifier-naming)

}  // extern "C"

namespace ithbat::sim::nccl {
// Bytes of one element (§4.3); 0 for an invalid type.
inline constexpr size_t DataTypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}
// Ranks one communicator may have in the fake (the shared-memory file is sized for it).
inline constexpr int kMaxRanks = 64;
}  // namespace ithbat::sim::nccl
