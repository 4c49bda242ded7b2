/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* The contract between bpf/cuda_probes.bpf.c and src/collect/probes: map layouts, record
 * layouts and the attach cookie. Plain C types only (both the BPF program, with vmlinux.h, and
 * C++ user space include it). Change both sides together. */
#ifndef ITHBAT_BPF_CUDA_PROBES_ABI_H_
#define ITHBAT_BPF_CUDA_PROBES_ABI_H_

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Attach cookie (bpf_get_attach_cookie), 64 bits, set per attachment by user space:
 *   bits  0..15  probe id (src/collect/probes/probe_table.h; < CUDA_PROBES_MAX_PROBES)
 *   bits 16..19  argument (1..7) that holds a byte count / element count (0 = none)
 *   bits 20..23  NCCL: argument holding the data type (1..7)
 *   bits 24..27  NCCL: argument holding the communicator (1..7; 7 = first stack slot)
 *   bits 32..47  flags (CUDA_PROBE_F_*) */
#define CUDA_PROBE_COOKIE(id, arg_bytes, arg_dtype, arg_comm, flags)                         \
  ((__u64)(id) | ((__u64)(arg_bytes) << 16) | ((__u64)(arg_dtype) << 20) |                 \
   ((__u64)(arg_comm) << 24) | ((__u64)(flags) << 32))
#define CUDA_PROBE_COOKIE_ID(c) ((__u32)((c)&0xffff))
#define CUDA_PROBE_COOKIE_ARG_BYTES(c) ((__u32)(((c) >> 16) & 0xf))
#define CUDA_PROBE_COOKIE_ARG_DTYPE(c) ((__u32)(((c) >> 20) & 0xf))
#define CUDA_PROBE_COOKIE_ARG_COMM(c) ((__u32)(((c) >> 24) & 0xf))
#define CUDA_PROBE_COOKIE_FLAGS(c) ((__u32)(((c) >> 32) & 0xffff))

enum cuda_probe_flags {
  CUDA_PROBE_F_LAUNCH = 1 << 0,       /* a kernel launch: inter-launch gap per thread */
  CUDA_PROBE_F_GRID3 = 1 << 1,        /* grid blocks = arg2 * arg3 * arg4 (cuLaunchKernel) */
  CUDA_PROBE_F_GRID_CFG = 1 << 2,     /* grid blocks from CUlaunchConfig* arg1 (cuLaunchKernelEx) */
  CUDA_PROBE_F_TIMED = 1 << 3,        /* entry and return attached: latency */
  CUDA_PROBE_F_NCCL_COLL = 1 << 4,    /* an NCCL collective / p2p: ring record */
  CUDA_PROBE_F_NCCL_TIMES_N = 1 << 5, /* bytes = count * size(dtype) * nranks */
  CUDA_PROBE_F_GROUP_START = 1 << 6,
  CUDA_PROBE_F_GROUP_END = 1 << 7,
  CUDA_PROBE_F_COMM_INIT = 1 << 8,    /* ncclCommInitRank*: comm**=arg1, nranks=arg2, rank=arg3 */
  CUDA_PROBE_F_COMM_DESTROY = 1 << 9, /* ncclCommDestroy/Abort: comm=arg1 */
  /* With CUDA_PROBE_F_TIMED: a CUDA_REC_SYNC record per call at its return (host-blocking syncs
   * and blocking device-to-host copies: they mark a training step's structure, e.g. loss.item()
   * or the optimizer's sync). Rare calls, so per-call records cost little; the aggregate
   * counters are kept as well. */
  CUDA_PROBE_F_SYNC_RECORD = 1 << 10,
  /* With CUDA_PROBE_F_NCCL_COLL: a point-to-point call (ncclSend/ncclRecv). It does not advance
   * the communicator's collective seq (p2p calls differ between ranks); its record carries a
   * separate p2p count and CUDA_REC_F_P2P, never CUDA_REC_F_SEQ_EXACT. */
  CUDA_PROBE_F_NCCL_P2P = 1 << 11,
};

#define CUDA_PROBES_MAX_PROBES 128

/* Stats map: key (tgid, probe, slot) -> (count, sum). Counters only grow while the process is
 * attached (user space deletes a process's keys after it detached), except the *_MAX slots that
 * user space reads and zeroes each tick. */
enum cuda_probe_slot {
  CUDA_SLOT_CALLS = 0,   /* count = calls (entries); sum = bytes or grid blocks */
  CUDA_SLOT_LATENCY = 1, /* count = returns seen; sum = ns between entry and return */
  CUDA_SLOT_GAP_MAX = 2, /* CUDA_PROBE_ID_LAUNCH_GAP only: sum = max gap ns since last reset */
  CUDA_SLOT_HIST = 8,    /* + log2 bucket (ns): latency of a timed probe, or gaps of
                            CUDA_PROBE_ID_LAUNCH_GAP; count per bucket, sum = ns in it */
};
#define CUDA_HIST_BUCKETS 40 /* 2^0 ns .. 2^39 ns (~9 min); larger values go to the last */

/* Pseudo probe ids (not attachments): aggregates the program keeps per process. */
#define CUDA_PROBE_ID_LAUNCH_GAP (CUDA_PROBES_MAX_PROBES - 1)

struct cuda_probe_key {
  __u32 tgid;
  __u16 probe;
  __u16 slot;
};

struct cuda_probe_value {
  __u64 count;
  __u64 sum;
};

/* Global counters (array map, index 0). */
struct cuda_probe_global {
  __u64 stats_full;    /* a stats update found the map full (counts lost) */
  __u64 ring_dropped;  /* ring-buffer records dropped (buffer full) */
  __u64 entry_missing; /* a return without its entry (attached mid-call) */
  __u64 comms_full;    /* communicator table full */
};

/* Keys of the per-thread maps (last_launch, group_depth, entries). Every map key of this
 * program starts with the tgid, so user space deletes a detached process's entries from every map
 * by that first field; keying by tgid as well as tid also keeps a tid reused by another process
 * from meeting the old thread's state. */
struct cuda_thread_key {
  __u32 tgid;
  __u32 tid;
};
struct cuda_entry_key {
  __u32 tgid;
  __u32 tid;
  __u32 probe;
};
/* Per-thread state stamped with the thread's start time (task_struct.start_time): a tid reused
 * inside the same process (after the old thread exited) has another start time, so it starts
 * afresh instead of inheriting the old thread's last launch or group depth. */
struct cuda_thread_launch {
  __u64 time_ns;      /* last launch (bpf_ktime_get_ns) */
  __u64 thread_start; /* task start_time of the thread that launched */
};
struct cuda_thread_group {
  __u64 thread_start;
  __u32 depth;
  __u32 pad;
};

#define CUDA_PROBES_MAX_STATS 32768
#define CUDA_PROBES_MAX_COMMS 4096
#define CUDA_PROBES_MAX_THREADS 65536

/* Per-collective record through the ring buffer (kind = CUDA_REC_*). Times: CLOCK_MONOTONIC
 * (bpf_ktime_get_ns) at entry of the API call, i.e. host enqueue time. */
enum cuda_probe_record_kind {
  CUDA_REC_COLLECTIVE = 1,
  CUDA_REC_COMM_INIT = 2,
  CUDA_REC_SYNC = 3, /* a CUDA_PROBE_F_SYNC_RECORD call returned: time_ns = entry, duration_ns,
                        probe, tid; bytes = the byte argument (blocking copies), else 0 */
};

/* cuda_probe_record.rec_flags */
enum cuda_probe_record_flags {
  /* seq counts from the communicator's init (its ncclCommInitRank* return was seen): every rank
   * numbers the same collective alike (NCCL requires all ranks to call collectives on a
   * communicator in the same order; p2p calls are not counted in it). Without it seq counts
   * from the first collective seen. */
  CUDA_REC_F_SEQ_EXACT = 1 << 0,
  /* A point-to-point call (ncclSend/ncclRecv): seq is this process's p2p count on the
   * communicator, not comparable across ranks; never aligned across processes. */
  CUDA_REC_F_P2P = 1 << 1,
};

struct cuda_probe_record {
  __u32 kind;
  __u32 tgid;
  __u32 tid;
  __u16 probe;
  __u16 group_depth; /* NCCL group nesting depth of the thread at the call (0 = not in a group) */
  __u64 time_ns;     /* CLOCK_MONOTONIC at entry */
  __u64 comm;        /* ncclComm_t (an address in the process) */
  __u64 seq;         /* CUDA_REC_COLLECTIVE: per-communicator collective number (1-based), from the
                        init with CUDA_REC_F_SEQ_EXACT, else from the first one seen; with
                        CUDA_REC_F_P2P the communicator's p2p call count instead */
  __u64 count;       /* elements */
  __u64 bytes;       /* count * size(dtype) (* nranks where the op's message is the whole buffer) */
  __s32 dtype;
  __s32 nranks;      /* -1 when the communicator's init was not seen */
  __s32 rank;
  __s32 pad;
  __u64 duration_ns; /* CUDA_REC_COMM_INIT: init call duration; CUDA_REC_SYNC: call duration */
  /* Appended (older readers copy only the prefix they know). */
  __u64 comm_id_hash; /* CUDA_REC_COLLECTIVE / CUDA_REC_COMM_INIT: NCCL's commHash of the
                         ncclUniqueId given to ncclCommInitRank* (nccl_comm_hash.h): equal on
                         every rank of one communicator, across processes, and equal to the
                         commId NCCL gives profiler plugins; 0 = the init was not seen */
  __u32 rec_flags;    /* CUDA_REC_F_* */
  __u32 pad2;
};

#endif /* ITHBAT_BPF_CUDA_PROBES_ABI_H_ */
