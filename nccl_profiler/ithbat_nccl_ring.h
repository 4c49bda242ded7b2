/* The shared-memory ring between libnccl-profiler-ithbat.so (the writer, inside an NCCL job) and
 * the Ithbat agent (the reader, root, maybe outside the job's container). Plain C so that either
 * side can be built without the other.
 *
 * One file per process: $ITHBAT_NCCL_PROFILER_DIR (default /dev/shm) + "/ithbat-ncclprof-<pid>.ring",
 * <pid> as the job sees itself. The writer maps it read-write and, unless ITHBAT_NCCL_PROFILER_KEEP=1,
 * unlinks it at once: the mapping lives as long as the process, a crashed job leaves nothing behind,
 * and the agent reaches the file through /proc/<pid>/map_files (its maps line ends in " (deleted)").
 *
 * Layout: a header of header_size bytes, then `capacity` records of record_size bytes (capacity a
 * power of two). Every multi-byte field is native-endian (the reader runs on the same host).
 *
 * Writing (any number of threads and communicators in the process, lock-free, never blocking):
 *   idx  = atomic_fetch_add(&head, 1)               claims record number idx
 *   slot = idx & (capacity - 1)
 *   CAS slot.seq from its (even, older) value to 2*idx+1   (odd: being written; a slot another
 *        writer holds is skipped and counted in dropped_contended)
 *   store the payload (8-byte words), release fence, store slot.seq = 2*idx+2 (committed).
 * Reading (no writes to the file, so a read-only mapping): for record number idx, read slot.seq
 * (acquire), copy the record, acquire fence, read slot.seq again. Valid only when both reads equal
 * 2*idx+2. A larger value means the writer lapped the reader (overrun: counted, skipped); a torn
 * copy (the two reads differ) is dropped. A reader that starts late begins at
 * max(0, head - capacity). Records are never trusted: sizes, strings and times are checked.
 */
#ifndef ITHBAT_NCCL_RING_H_
#define ITHBAT_NCCL_RING_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ITHBAT_NCCL_RING_MAGIC 0x474e52504e485449ULL /* "ITHNPRNG" little-endian */
/* 2: GPU times are raw pTimers plus a per-communicator GPU-to-host clock correction
 *    (gpu_to_mono_ns); func is 16 bytes. A reader accepts exactly the version it knows. */
#define ITHBAT_NCCL_RING_VERSION 2u
#define ITHBAT_NCCL_RING_FILE_PREFIX "ithbat-ncclprof-"
#define ITHBAT_NCCL_RING_FILE_SUFFIX ".ring"
#define ITHBAT_NCCL_RING_MIN_CAPACITY 16u
#define ITHBAT_NCCL_RING_MAX_CAPACITY (1u << 20)
#define ITHBAT_NCCL_RING_DEFAULT_CAPACITY 4096u

/* IthbatNcclRecord.kind */
#define ITHBAT_NCCL_KIND_COLL 0u
#define ITHBAT_NCCL_KIND_P2P 1u

/* IthbatNcclRecord.flags */
#define ITHBAT_NCCL_FLAG_GPU_TIMED 0x01u /* gpu_start/stop come from KernelCh pTimers */
#define ITHBAT_NCCL_FLAG_EVICTED                                                                      \
  0x02u                                      /* written when its pool slot was reclaimed before every \
                                                channel stopped (times may be partial or absent) */
#define ITHBAT_NCCL_FLAG_BYTES_UNKNOWN 0x04u /* datatype name not recognised: bytes = 0 */
#define ITHBAT_NCCL_FLAG_CLOSED_BY_NEXT                                                           \
  0x08u /* written when a later operation of its communicator started a kernel channel that this  \
           one had used, every channel it started having stopped, though fewer than nChannels did \
           (NCCL versions whose P2p KernelCh count never matches nChannels) */

typedef struct IthbatNcclRingHeader {
  uint64_t magic;                      /* 0   ITHBAT_NCCL_RING_MAGIC */
  uint32_t version;                    /* 8   ITHBAT_NCCL_RING_VERSION */
  uint32_t header_size;                /* 12  sizeof(IthbatNcclRingHeader) */
  uint32_t record_size;                /* 16  sizeof(IthbatNcclRecord) */
  uint32_t capacity;                   /* 20  records, a power of two */
  uint32_t pid;                        /* 24  getpid() of the writer (its own pid namespace) */
  uint32_t flags;                      /* 28  0 */
  int64_t realtime_minus_monotonic_ns; /* 32  CLOCK_REALTIME - CLOCK_MONOTONIC when created */
  uint64_t created_monotonic_ns;       /* 40 */
  uint8_t reserved0[16];               /* 48 */
  uint64_t head;                       /* 64  records ever claimed (atomic) */
  uint8_t pad_head[56];                /* 72  head alone on its cache line */
  /* 128: writer-side counters (atomic, monotonically increasing) */
  uint64_t records_written;   /* committed records */
  uint64_t dropped_pool_full; /* a Coll/P2p event found no free slot in its communicator's pool */
  uint64_t dropped_bad_input; /* NULL/foreign handles, impossible channel ids, NULL descriptors */
  uint64_t dropped_stale;     /* events for a collective already written or evicted */
  uint64_t dropped_contended; /* a ring slot still being written by a writer a full lap behind */
  uint64_t evicted;           /* collectives written early because their slot was needed */
  uint64_t comms;             /* communicators initialised */
  uint64_t comms_refused;     /* init calls refused (too many communicators, no ring) */
  uint8_t reserved1[64];      /* 192 .. 256 */
} IthbatNcclRingHeader;

typedef struct IthbatNcclRecord {
  uint64_t seq;                        /* 0   2*idx+1 while written, 2*idx+2 once committed */
  uint64_t comm_id;                    /* 8   NCCL's commId / commHash (same on every rank) */
  uint64_t seq_number;                 /* 16  Coll: NCCL's per-communicator seqNumber (same on every rank);
                                              P2p: the plugin's own per-communicator counter */
  uint64_t count;                      /* 24  elements as NCCL reports them */
  uint64_t bytes;                      /* 32  bytes per rank (nvidia-abi.md §4.3) */
  uint64_t enqueue_mono_ns;            /* 40  CLOCK_MONOTONIC at the Coll/P2p startEvent (host enqueue) */
  uint64_t gpu_start_ns;               /* 48  first KernelCh start pTimer (the GPU's clock, raw); 0 = none */
  uint64_t gpu_stop_ns;                /* 56  last KernelCh stop pTimer (raw); 0 = none */
  int64_t realtime_minus_monotonic_ns; /* 64  sampled when the record was written */
  int32_t rank;                        /* 72 */
  int32_t nranks;                      /* 76 */
  int32_t peer_or_root;                /* 80  P2p peer, Coll root (-1 when none) */
  uint8_t kind;                        /* 84  ITHBAT_NCCL_KIND_* */
  uint8_t dtype_size;                  /* 85  bytes of one element, 0 unknown */
  uint8_t channels;                    /* 86  KernelCh events that stopped */
  uint8_t flags;                       /* 87  ITHBAT_NCCL_FLAG_* */
  char func[16];                       /* 88  NCCL's func string, NUL-padded, cut at 15 */
  char datatype[16];                   /* 104 NCCL's datatype string, NUL-padded, cut at 15 */
  /* 120 gpu_to_mono_ns: min over this communicator's recent operations (~8.6-17 s) of
   * (CLOCK_MONOTONIC at the operation's first KernelCh stop callback - its pTimer). pTimer + this =
   * host CLOCK_MONOTONIC of the GPU event, late by at most the smallest delivery delay seen (each
   * GPU's timer is its own clock, not the host's). Meaningful with GPU_TIMED. */
  int64_t gpu_to_mono_ns;
} IthbatNcclRecord; /* 128 */

#ifdef __cplusplus
} /* extern "C" */
static_assert(sizeof(IthbatNcclRingHeader) == 256, "ring header ABI");
static_assert(sizeof(IthbatNcclRecord) == 128, "ring record ABI");
#else
_Static_assert(sizeof(IthbatNcclRingHeader) == 256, "ring header ABI");
_Static_assert(sizeof(IthbatNcclRecord) == 128, "ring record ABI");
#endif

#endif /* ITHBAT_NCCL_RING_H_ */
