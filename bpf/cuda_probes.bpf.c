// SPDX-License-Identifier: GPL-2.0
// CUDA driver and NCCL API probes (src/collect/probes): entry uprobes on libcuda/libnccl
// functions, uretprobes on the calls whose duration matters, aggregated in the kernel.
//
// Two programs, written once and attached many times: probe_enter (uprobe) and probe_exit
// (uretprobe). Each attachment carries a 64-bit cookie (cuda_probes_abi.h) that names the probe
// id and says what to read from the arguments, so one program serves every function of a
// family and user space decides the table. Attachments are per process (pid-filtered), at file
// offsets resolved by user space (exported symbols and cuGetProcAddress results).
//
// What a hit costs: one trap plus a few hash updates. Launch probes are entry-only (one trap);
// per-call records go to the ring buffer only for NCCL collectives, communicator init and the
// returns of host-blocking syncs (CUDA_PROBE_F_SYNC_RECORD): the marks step inference reads.
//
// Communicator identity across processes: ncclCommInitRank(Config) receives the 128-byte
// ncclUniqueId BY VALUE (x86-64: a struct over 16 bytes is copied to the stack, at [rsp+8] at
// entry, and rank stays the 3rd integer argument; aarch64: passed by reference in x2, rank in
// x3). Every rank of one communicator receives the same bytes; their hash is NCCL's own
// commHash (nccl_comm_hash.h), so it names the communicator on every rank and in the profiler
// plugin's records. Collectives carry it, with a flag saying whether their seq counts from the
// init (equal across ranks) or only from attachment.
//
// Sequence numbers: collectives only. ncclSend/ncclRecv (CUDA_PROBE_F_NCCL_P2P) do not advance
// the collective seq: point-to-point calls differ between ranks (pipeline stages, batched
// isend/irecv), so counting them would shift every later collective's seq on some ranks only.
// NCCL numbers collectives and p2p operations separately too. P2P records carry their own
// per-communicator count, are flagged CUDA_REC_F_P2P and never CUDA_REC_F_SEQ_EXACT.
// Not probed (not in the probe table): ncclCommInitAll (one process, a fresh id made inside),
// ncclCommSplit / ncclCommInitRankScalable (the id is not an argument, or is behind a pointer to
// several): their communicators have comm_id_hash 0 and an inexact seq.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cuda_probes_abi.h"
#include "nccl_comm_hash.h"

char LICENSE[] SEC("license") = "GPL";

#define EEXIST 17

// libbpf 1.1's bpf_tracing.h stops at PT_REGS_PARM5.
#if defined(__TARGET_ARCH_x86)
#define ITHBAT_PARM6(ctx) (((struct pt_regs *)(ctx))->r9)
#elif defined(__TARGET_ARCH_arm64)
#define ITHBAT_PARM6(ctx) (((struct user_pt_regs *)(ctx))->regs[5])
#endif

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CUDA_PROBES_MAX_STATS);
  __type(key, struct cuda_probe_key);
  __type(value, struct cuda_probe_value);
} stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct cuda_probe_global);
} globals SEC(".maps");

// Entry of a timed call, per (process, thread, probe): calls of one family do not nest on one
// thread, different families may (NCCL init synchronises streams).
struct entry_val {
  __u64 time_ns;
  __u64 arg1;
  __u64 arg2;
  __u64 arg3;
  __u64 id_hash;  // ncclCommInitRank*: hash of the ncclUniqueId argument (0 = unread)
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, CUDA_PROBES_MAX_THREADS);
  __type(key, struct cuda_entry_key);
  __type(value, struct entry_val);
} entries SEC(".maps");

// Last launch time per (process, thread), stamped with the thread's start time (inter-launch
// gap). User space deletes a process's entries when it detaches it.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, CUDA_PROBES_MAX_THREADS);
  __type(key, struct cuda_thread_key);
  __type(value, struct cuda_thread_launch);
} last_launch SEC(".maps");

// NCCL group nesting depth per (process, thread), stamped the same way.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, CUDA_PROBES_MAX_THREADS);
  __type(key, struct cuda_thread_key);
  __type(value, struct cuda_thread_group);
} group_depth SEC(".maps");

struct comm_key {
  __u32 tgid;
  __u32 pad;
  __u64 comm;
};
struct comm_info {
  __u64 seq;      // collectives since the init (exact) or since first seen
  __u64 p2p_seq;  // ncclSend/ncclRecv calls, counted apart (never comparable across ranks)
  __s32 nranks;
  __s32 rank;
  __u64 id_hash;  // 0: the init was not seen
  __u32 exact;    // 1: created at the init's return, so seq counts from the init
  __u32 pad;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, CUDA_PROBES_MAX_COMMS);
  __type(key, struct comm_key);
  __type(value, struct comm_info);
} comms SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} records SEC(".maps");

static __always_inline struct cuda_probe_global *global(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&globals, &zero);
}

static __always_inline struct cuda_probe_value *stat_slot(__u32 tgid, __u32 probe, __u32 slot) {
  struct cuda_probe_key k = {.tgid = tgid, .probe = (__u16)probe, .slot = (__u16)slot};
  struct cuda_probe_value *v = bpf_map_lookup_elem(&stats, &k);
  if (v) return v;
  struct cuda_probe_value zero = {};
  long err = bpf_map_update_elem(&stats, &k, &zero, BPF_NOEXIST);
  if (err && err != -EEXIST) {
    struct cuda_probe_global *g = global();
    if (g) __sync_fetch_and_add(&g->stats_full, 1);
    return 0;
  }
  return bpf_map_lookup_elem(&stats, &k);
}

static __always_inline void stat_add(__u32 tgid, __u32 probe, __u32 slot, __u64 count, __u64 sum) {
  struct cuda_probe_value *v = stat_slot(tgid, probe, slot);
  if (!v) return;
  __sync_fetch_and_add(&v->count, count);
  if (sum) __sync_fetch_and_add(&v->sum, sum);
}

static __always_inline __u32 log2_bucket(__u64 v) {
  __u32 r = 0;
  if (v >> 32) { v >>= 32; r += 32; }
  if (v >> 16) { v >>= 16; r += 16; }
  if (v >> 8) { v >>= 8; r += 8; }
  if (v >> 4) { v >>= 4; r += 4; }
  if (v >> 2) { v >>= 2; r += 2; }
  if (v >> 1) { r += 1; }
  return r < CUDA_HIST_BUCKETS ? r : CUDA_HIST_BUCKETS - 1;
}

// Argument n (1-based) at function entry, per the platform's calling convention
// (nvidia-abi.md §3.2): x86-64 passes 6 in registers, the 7th at [rsp+8] (return address at
// [rsp]); aarch64 passes 8 in registers.
static __always_inline __u64 arg_n(struct pt_regs *ctx, __u32 n) {
  switch (n) {
    case 1: return PT_REGS_PARM1(ctx);
    case 2: return PT_REGS_PARM2(ctx);
    case 3: return PT_REGS_PARM3(ctx);
    case 4: return PT_REGS_PARM4(ctx);
    case 5: return PT_REGS_PARM5(ctx);
    case 6: return ITHBAT_PARM6(ctx);
    case 7: {
#if defined(__TARGET_ARCH_x86)
      __u64 v = 0;
      bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8));
      return v;
#elif defined(__TARGET_ARCH_arm64)
      return ((struct user_pt_regs *)ctx)->regs[6];
#else
      return 0;
#endif
    }
    default: return 0;
  }
}

// ncclDataType_t → bytes (nvidia-abi.md §4.3); 0 for an unknown type.
static __always_inline __u64 nccl_type_size(__s32 t) {
  switch (t) {
    case 0: case 1: case 10: case 11: return 1;
    case 6: case 9: return 2;
    case 2: case 3: case 7: return 4;
    case 4: case 5: case 8: return 8;
    default: return 0;
  }
}

// NCCL's commHash of the ncclUniqueId passed by value (bpf/nccl_comm_hash.h: getHash over its
// 128 bytes): the value NCCL gives profiler plugins as the communicator id, so these records join
// theirs. 0 when the id cannot be read ("not seen").
static __always_inline __u64 unique_id_hash(struct pt_regs *ctx) {
#if defined(__TARGET_ARCH_x86)
  // SysV x86-64: a struct over 16 bytes is copied onto the stack (MEMORY class), at [rsp+8].
  const void *id = (void *)(PT_REGS_SP(ctx) + 8);
#elif defined(__TARGET_ARCH_arm64)
  // AAPCS64: a composite over 16 bytes is passed by reference, the pointer in x2.
  const void *id = (void *)PT_REGS_PARM3(ctx);
#else
  const void *id = 0;  // unknown convention: the read fails, the hash stays 0 ("not seen")
#endif
  unsigned char bytes[ITHBAT_NCCL_UNIQUE_ID_BYTES] = {};
  if (bpf_probe_read_user(bytes, sizeof(bytes), id) != 0) return 0;
  return ithbat_nccl_comm_hash(bytes);
}

// ncclCommInitRank*'s rank: the 3rd integer argument on x86-64 (the id went to the stack), the
// 4th register on aarch64 (x2 holds the id's address).
static __always_inline __u64 comm_init_rank_arg(struct pt_regs *ctx) {
#if defined(__TARGET_ARCH_arm64)
  return PT_REGS_PARM4(ctx);
#else
  return PT_REGS_PARM3(ctx);
#endif
}

// Start time of the current thread: what tells a reused tid from the thread that had it.
static __always_inline __u64 thread_start(void) {
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  return BPF_CORE_READ(task, start_time);
}

static __always_inline __u32 current_group_depth(const struct cuda_thread_key *tk, __u64 started) {
  struct cuda_thread_group *g = bpf_map_lookup_elem(&group_depth, tk);
  return g && g->thread_start == started ? g->depth : 0;
}

static __always_inline __u64 nccl_collective(struct pt_regs *ctx, __u64 cookie, __u32 probe, __u32 tgid,
                                             __u32 tid, __u64 now, __u64 started) {
  __u32 flags = CUDA_PROBE_COOKIE_FLAGS(cookie);
  __u64 count = arg_n(ctx, CUDA_PROBE_COOKIE_ARG_BYTES(cookie));
  __s32 dtype = (__s32)arg_n(ctx, CUDA_PROBE_COOKIE_ARG_DTYPE(cookie));
  __u64 comm = arg_n(ctx, CUDA_PROBE_COOKIE_ARG_COMM(cookie));
  __u64 bytes = count * nccl_type_size(dtype);
  const int p2p = (flags & CUDA_PROBE_F_NCCL_P2P) != 0;

  struct comm_key ck = {.tgid = tgid, .comm = comm};
  struct comm_info *ci = bpf_map_lookup_elem(&comms, &ck);
  if (!ci) {
    // First sight of a communicator whose init was not seen: seq counts from here (inexact).
    struct comm_info fresh = {.seq = 0, .p2p_seq = 0, .nranks = -1, .rank = -1, .id_hash = 0, .exact = 0};
    bpf_map_update_elem(&comms, &ck, &fresh, BPF_NOEXIST);
    ci = bpf_map_lookup_elem(&comms, &ck);
  }
  __u64 seq = 0;
  __s32 nranks = -1, rank = -1;
  __u64 id_hash = 0;
  __u32 exact = 0;
  if (ci) {
    // Not atomic: NCCL forbids concurrent calls on one communicator, so one thread at a time
    // bumps a given comm's sequence. P2P calls have their own count (see the top).
    if (p2p) {
      ci->p2p_seq += 1;
      seq = ci->p2p_seq;
    } else {
      ci->seq += 1;
      seq = ci->seq;
    }
    nranks = ci->nranks;
    rank = ci->rank;
    id_hash = ci->id_hash;
    exact = ci->exact;
  } else {
    struct cuda_probe_global *g = global();
    if (g) __sync_fetch_and_add(&g->comms_full, 1);
  }
  if ((flags & CUDA_PROBE_F_NCCL_TIMES_N) && nranks > 0) bytes *= (__u64)nranks;

  struct cuda_probe_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
  if (!r) {
    struct cuda_probe_global *g = global();
    if (g) __sync_fetch_and_add(&g->ring_dropped, 1);
    return bytes;
  }
  r->kind = CUDA_REC_COLLECTIVE;
  r->tgid = tgid;
  r->tid = tid;
  r->probe = (__u16)probe;
  struct cuda_thread_key tk = {.tgid = tgid, .tid = tid};
  r->group_depth = (__u16)current_group_depth(&tk, started);
  r->time_ns = now;
  r->comm = comm;
  r->seq = seq;
  r->count = count;
  r->bytes = bytes;
  r->dtype = dtype;
  r->nranks = nranks;
  r->rank = rank;
  r->pad = 0;
  r->duration_ns = 0;
  r->comm_id_hash = id_hash;
  r->rec_flags = p2p ? CUDA_REC_F_P2P : exact ? CUDA_REC_F_SEQ_EXACT : 0;
  r->pad2 = 0;
  bpf_ringbuf_submit(r, 0);
  return bytes;
}

SEC("uprobe")
int probe_enter(struct pt_regs *ctx) {
  __u64 cookie = bpf_get_attach_cookie(ctx);
  __u32 probe = CUDA_PROBE_COOKIE_ID(cookie);
  __u32 flags = CUDA_PROBE_COOKIE_FLAGS(cookie);
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  __u64 now = bpf_ktime_get_ns();
  if (probe >= CUDA_PROBES_MAX_PROBES) return 0;

  // Only the per-thread paths need the thread's start time (one kernel read).
  __u64 started = 0;
  const __u32 per_thread =
      CUDA_PROBE_F_LAUNCH | CUDA_PROBE_F_NCCL_COLL | CUDA_PROBE_F_GROUP_START | CUDA_PROBE_F_GROUP_END;
  if (flags & per_thread) started = thread_start();
  struct cuda_thread_key tk = {.tgid = tgid, .tid = tid};

  __u64 sum = 0;
  if (flags & CUDA_PROBE_F_GRID3) {
    sum = (__u64)(__u32)PT_REGS_PARM2(ctx) * (__u32)PT_REGS_PARM3(ctx) * (__u32)PT_REGS_PARM4(ctx);
  } else if (flags & CUDA_PROBE_F_GRID_CFG) {
    __u32 grid[3] = {};
    if (bpf_probe_read_user(grid, sizeof(grid), (void *)PT_REGS_PARM1(ctx)) == 0)
      sum = (__u64)grid[0] * grid[1] * grid[2];
  } else if (flags & CUDA_PROBE_F_NCCL_COLL) {
    sum = nccl_collective(ctx, cookie, probe, tgid, tid, now, started);
  } else if (CUDA_PROBE_COOKIE_ARG_BYTES(cookie)) {
    sum = arg_n(ctx, CUDA_PROBE_COOKIE_ARG_BYTES(cookie));
  }
  stat_add(tgid, probe, CUDA_SLOT_CALLS, 1, sum);

  if (flags & CUDA_PROBE_F_LAUNCH) {
    struct cuda_thread_launch *last = bpf_map_lookup_elem(&last_launch, &tk);
    if (last && last->thread_start == started) {
      __u64 gap = now > last->time_ns ? now - last->time_ns : 0;
      last->time_ns = now;
      stat_add(tgid, CUDA_PROBE_ID_LAUNCH_GAP, CUDA_SLOT_HIST + log2_bucket(gap), 1, gap);
      struct cuda_probe_value *m = stat_slot(tgid, CUDA_PROBE_ID_LAUNCH_GAP, CUDA_SLOT_GAP_MAX);
      if (m) {
        __sync_fetch_and_add(&m->count, 1);
        if (m->sum < gap) m->sum = gap;  // racy max: a lost update only lowers one tick's max
      }
    } else {
      // The first launch this thread makes since attachment has no gap; so has the first of a
      // thread that reuses the tid of an exited one (another start time).
      struct cuda_thread_launch fresh = {.time_ns = now, .thread_start = started};
      bpf_map_update_elem(&last_launch, &tk, &fresh, BPF_ANY);
    }
  }
  if (flags & CUDA_PROBE_F_GROUP_START) {
    struct cuda_thread_group *g = bpf_map_lookup_elem(&group_depth, &tk);
    if (g && g->thread_start == started) {
      g->depth += 1;
    } else {
      struct cuda_thread_group one = {.thread_start = started, .depth = 1};
      bpf_map_update_elem(&group_depth, &tk, &one, BPF_ANY);
    }
  }
  if (flags & CUDA_PROBE_F_GROUP_END) {
    struct cuda_thread_group *g = bpf_map_lookup_elem(&group_depth, &tk);
    if (g && g->thread_start == started && g->depth > 0) g->depth -= 1;
  }
  if (flags & CUDA_PROBE_F_COMM_DESTROY) {
    struct comm_key ck = {.tgid = tgid, .comm = PT_REGS_PARM1(ctx)};
    bpf_map_delete_elem(&comms, &ck);
  }
  if (flags & CUDA_PROBE_F_TIMED) {
    struct cuda_entry_key ek = {.tgid = tgid, .tid = tid, .probe = probe};
    struct entry_val ev = {.time_ns = now,
                           .arg1 = PT_REGS_PARM1(ctx),
                           .arg2 = PT_REGS_PARM2(ctx),
                           .arg3 = (flags & CUDA_PROBE_F_COMM_INIT) ? comm_init_rank_arg(ctx) : PT_REGS_PARM3(ctx),
                           .id_hash = (flags & CUDA_PROBE_F_COMM_INIT) ? unique_id_hash(ctx) : 0};
    bpf_map_update_elem(&entries, &ek, &ev, BPF_ANY);
  }
  return 0;
}

SEC("uretprobe")
int probe_exit(struct pt_regs *ctx) {
  __u64 cookie = bpf_get_attach_cookie(ctx);
  __u32 probe = CUDA_PROBE_COOKIE_ID(cookie);
  __u32 flags = CUDA_PROBE_COOKIE_FLAGS(cookie);
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  __u64 now = bpf_ktime_get_ns();
  if (probe >= CUDA_PROBES_MAX_PROBES) return 0;

  struct cuda_entry_key ek = {.tgid = tgid, .tid = tid, .probe = probe};
  struct entry_val *ev = bpf_map_lookup_elem(&entries, &ek);
  if (!ev) {
    struct cuda_probe_global *g = global();
    if (g) __sync_fetch_and_add(&g->entry_missing, 1);
    return 0;
  }
  __u64 d = now > ev->time_ns ? now - ev->time_ns : 0;
  __u64 comm_ptr_addr = ev->arg1;
  __s32 nranks = (__s32)ev->arg2;
  __s32 rank = (__s32)ev->arg3;
  __u64 start = ev->time_ns;
  __u64 id_hash = ev->id_hash;
  __u32 arg_bytes = CUDA_PROBE_COOKIE_ARG_BYTES(cookie);
  __u64 sync_bytes = arg_bytes == 1 ? ev->arg1 : arg_bytes == 2 ? ev->arg2 : arg_bytes == 3 ? ev->arg3 : 0;
  bpf_map_delete_elem(&entries, &ek);
  stat_add(tgid, probe, CUDA_SLOT_LATENCY, 1, d);
  stat_add(tgid, probe, CUDA_SLOT_HIST + log2_bucket(d), 1, d);

  if (flags & CUDA_PROBE_F_SYNC_RECORD) {
    struct cuda_probe_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
    if (!r) {
      struct cuda_probe_global *g = global();
      if (g) __sync_fetch_and_add(&g->ring_dropped, 1);
      return 0;
    }
    __builtin_memset(r, 0, sizeof(*r));
    r->kind = CUDA_REC_SYNC;
    r->tgid = tgid;
    r->tid = tid;
    r->probe = (__u16)probe;
    r->time_ns = start;
    r->bytes = sync_bytes;
    r->dtype = -1;
    r->nranks = -1;
    r->rank = -1;
    r->duration_ns = d;
    bpf_ringbuf_submit(r, 0);
    return 0;
  }

  // ncclSuccess, or ncclInProgress (7) from a non-blocking init (config.blocking = 0): *comm is
  // set at return either way and no collective can precede the init on that communicator.
  const __s32 rc = (__s32)PT_REGS_RC(ctx);
  if ((flags & CUDA_PROBE_F_COMM_INIT) && (rc == 0 || rc == 7)) {
    __u64 comm = 0;
    if (bpf_probe_read_user(&comm, sizeof(comm), (void *)comm_ptr_addr) != 0 || comm == 0) return 0;
    struct comm_key ck = {.tgid = tgid, .comm = comm};
    // Created (or reset) at the init: seq counts from here on every rank alike (exact).
    struct comm_info ci = {.seq = 0, .p2p_seq = 0, .nranks = nranks, .rank = rank, .id_hash = id_hash, .exact = 1};
    bpf_map_update_elem(&comms, &ck, &ci, BPF_ANY);
    struct cuda_probe_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
    if (!r) {
      struct cuda_probe_global *g = global();
      if (g) __sync_fetch_and_add(&g->ring_dropped, 1);
      return 0;
    }
    __builtin_memset(r, 0, sizeof(*r));
    r->kind = CUDA_REC_COMM_INIT;
    r->tgid = tgid;
    r->tid = tid;
    r->probe = (__u16)probe;
    r->time_ns = start;
    r->comm = comm;
    r->nranks = nranks;
    r->rank = rank;
    r->duration_ns = d;
    r->comm_id_hash = id_hash;
    r->rec_flags = CUDA_REC_F_SEQ_EXACT;
    bpf_ringbuf_submit(r, 0);
  }
  return 0;
}
