// SPDX-License-Identifier: GPL-2.0
// Job output capture: the bytes tracked processes write to their stdout/stderr, copied into a
// ring buffer for src/collect/joblog (see README.md here and there).
//
// Three attachments of the same logic; user space loads one set (autoload) after probing:
//   fexit    fexit/<arch>_sys_{write,writev,pwrite64}: runs only on those syscalls (preferred)
//   tp_btf   tp_btf/sys_exit: BTF raw tracepoint, runs on every syscall and filters by number
//   raw_tp   raw_tp/sys_exit: the same for kernels without tp_btf
// All capture at syscall EXIT (see capture()).
// plus sched_process_fork (children inherit tracking) and sched_process_exit (entries of
// exited processes are removed) in the matching flavour.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "joblog_capture_abi.h"

char LICENSE[] SEC("license") = "GPL";

#if defined(__TARGET_ARCH_x86)
#define NR_WRITE 1
#define NR_PWRITE64 18
#define NR_WRITEV 20
#define SYSCALL(name) "fexit/__x64_sys_" #name
#define SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)
#define SYSCALL_NR_BTF(regs) ((regs)->orig_ax)
#elif defined(__TARGET_ARCH_arm64)
#define NR_WRITE 64
#define NR_WRITEV 66
#define NR_PWRITE64 68
#define SYSCALL(name) "fexit/__arm64_sys_" #name
#define SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
#define SYSCALL_NR_BTF(regs) ((regs)->syscallno)
#else
#error "unsupported architecture"
#endif

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, JOBLOG_MAX_TRACKED);
  __type(key, __u32);  // tgid
  __type(value, struct joblog_track);
} tracked SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 8 << 20);  // user space may resize before load
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct joblog_stats);
} stats SEC(".maps");

// One record being built (header + one chunk): too big for the 512-byte BPF stack.
struct scratch {
  struct joblog_header h;
  __u8 data[JOBLOG_CHUNK_BYTES];
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct scratch);
} scratch_map SEC(".maps");

static __always_inline struct joblog_stats *my_stats(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&stats, &zero);
}

// 1 or 2 when `fd` is stdout/stderr or refers to the same open file as fd 1 or 2 (dup2'd,
// `exec 3>&1`), else 0.
static __always_inline int stream_of(int fd) {
  if (fd == 1 || fd == 2) return fd;
  if (fd < 0) return 0;
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
  if (!fdt) return 0;
  unsigned int max_fds = BPF_CORE_READ(fdt, max_fds);
  if ((unsigned int)fd >= max_fds) return 0;
  struct file **fds = BPF_CORE_READ(fdt, fd);
  struct file *f = NULL, *f1 = NULL, *f2 = NULL;
  bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
  if (!f) return 0;
  bpf_probe_read_kernel(&f1, sizeof(f1), &fds[1]);
  if (f == f1) return 1;
  bpf_probe_read_kernel(&f2, sizeof(f2), &fds[2]);
  if (f == f2) return 2;
  return 0;
}

// Waking the reader on every record (the default) costs an interrupt-work item and an epoll
// wakeup per write: several microseconds. The reader polls with a short timeout and consumes
// whatever is there, so wake it only when the ring is a quarter full.
static __always_inline __u64 wakeup_flags(void) {
  __u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
  __u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
  return avail > size / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

// One record: the header already in this CPU's scratch (set by capture()), `len` bytes from
// user memory at `uptr`. A global (non-static) function: the verifier checks it once, not once
// per loop iteration of every caller, which keeps the callers' loops within its limits.
__noinline int emit_chunk(__u64 uptr, __u64 len, __u64 off) {
  __u32 zero = 0;
  struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
  struct joblog_stats *st = bpf_map_lookup_elem(&stats, &zero);
  if (!s || !st) return -1;
  __u32 n = len;
  if (n > JOBLOG_CHUNK_BYTES) n = JOBLOG_CHUNK_BYTES;
  barrier_var(n);
  if (n > JOBLOG_CHUNK_BYTES) return -1;
  if (bpf_probe_read_user(s->data, n, (const void *)uptr)) {
    st->read_errors++;
    return -1;
  }
  s->h.offset = off;
  s->h.len = n;
  if (bpf_ringbuf_output(&events, s, sizeof(struct joblog_header) + n, wakeup_flags())) {
    st->lost_records++;
    st->lost_bytes += n;
    return -1;
  }
  st->records++;
  st->bytes += n;
  return 0;
}

// Emits up to `len` bytes at `uptr` as chunks, numbered from `off` within the call, and never
// past JOBLOG_MAX_CHUNKS_PER_CALL chunks' worth of the call. Returns the bytes handed out
// (copied or counted lost). Global for the same reason as emit_chunk.
__noinline __u64 emit_buffer(__u64 uptr, __u64 len, __u64 off) {
  const __u64 max_bytes = (__u64)JOBLOG_MAX_CHUNKS_PER_CALL * JOBLOG_CHUNK_BYTES;
  __u64 done = 0;
  for (int i = 0; i < JOBLOG_MAX_CHUNKS_PER_CALL; i++) {
    if (done >= len || off + done >= max_bytes) break;
    __u64 n = len - done;
    if (n > JOBLOG_CHUNK_BYTES) n = JOBLOG_CHUNK_BYTES;
    emit_chunk(uptr + done, n, off + done);
    done += n;
  }
  return done;
}

// Copies what one write-family call wrote, at syscall exit: `written` (the return value) bytes
// of the buffer `ptr` (vec = 0) or of the iovec array `ptr` (vec = 1, `count` = iovcnt).
// At exit, not entry, because the kernel has just read those bytes: their pages are present,
// whereas at entry a buffer the process never touched since fork (a string literal in a
// not-yet-faulted page) cannot be read without faulting, which BPF may not do. It also makes
// the record exactly what was written (short writes, failed writes: nothing).
static __always_inline int capture(int fd, const void *ptr, __u64 count, int vec, long written) {
  if (written <= 0) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  struct joblog_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return 0;
  int stream = stream_of(fd);
  if (!stream) return 0;
  __u32 zero = 0;
  struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
  struct joblog_stats *st = my_stats();
  if (!s || !st) return 0;

  s->h.type = JOBLOG_REC_DATA;
  s->h.tgid = tgid;
  s->h.tid = (__u32)pid_tgid;
  s->h.fd = fd;
  s->h.boot_ns = bpf_ktime_get_boot_ns();
  s->h.stream = stream;
  s->h.flags = 0;
  // Not atomic (see joblog_header.seq): a rare shared number only hides a gap, never makes one.
  __u32 seq = t->seq + 1;
  t->seq = seq;
  s->h.seq = seq;
  s->h.reserved = 0;

  __u64 total = 0;
  __u64 off = 0;  // bytes of the call handed out so far
  if (!vec) {
    total = written;
    s->h.total_len = total;
    off = emit_buffer((__u64)ptr, total, 0);
  } else {
    const struct iovec *iov = ptr;
    struct iovec v[JOBLOG_MAX_IOVECS];
    int nv = 0;
    __u64 left = written;  // the kernel consumes iovecs in order
    for (int i = 0; i < JOBLOG_MAX_IOVECS; i++) {
      if (i >= count || left == 0) break;
      if (bpf_probe_read_user(&v[i], sizeof(v[i]), &iov[i])) break;
      if (v[i].iov_len > left) v[i].iov_len = left;
      left -= v[i].iov_len;
      total += v[i].iov_len;
      nv = i + 1;
    }
    if (left > 0) s->h.flags |= JOBLOG_DATA_MORE_IOVECS;
    s->h.total_len = total;
    for (int i = 0; i < JOBLOG_MAX_IOVECS; i++) {
      if (i >= nv) break;
      off += emit_buffer((__u64)v[i].iov_base, v[i].iov_len, off);
    }
  }
  if (off < total) {
    st->truncated_writes++;
    st->truncated_bytes += total - off;
  }
  return 0;
}

// ---- fexit: only the write-family syscalls run these ----

SEC(SYSCALL(write))
int BPF_PROG(fx_write, struct pt_regs *regs, long ret) {
  return capture((int)PT_REGS_PARM1_CORE_SYSCALL(regs), (const void *)PT_REGS_PARM2_CORE_SYSCALL(regs),
                 PT_REGS_PARM3_CORE_SYSCALL(regs), 0, ret);
}

SEC(SYSCALL(pwrite64))
int BPF_PROG(fx_pwrite64, struct pt_regs *regs, long ret) {
  return capture((int)PT_REGS_PARM1_CORE_SYSCALL(regs), (const void *)PT_REGS_PARM2_CORE_SYSCALL(regs),
                 PT_REGS_PARM3_CORE_SYSCALL(regs), 0, ret);
}

SEC(SYSCALL(writev))
int BPF_PROG(fx_writev, struct pt_regs *regs, long ret) {
  return capture((int)PT_REGS_PARM1_CORE_SYSCALL(regs), (const void *)PT_REGS_PARM2_CORE_SYSCALL(regs),
                 PT_REGS_PARM3_CORE_SYSCALL(regs), 1, ret);
}

// ---- sys_exit: every syscall runs these; the number filters ----
// The argument registers are still the caller's at exit (x86: di/si/dx are not written;
// arm64: PT_REGS_PARM1_CORE_SYSCALL reads orig_x0), the number is in orig_ax / syscallno.

static __always_inline int on_sys_exit(struct pt_regs *regs, long id, long ret) {
  if (id != NR_WRITE && id != NR_WRITEV && id != NR_PWRITE64) return 0;
  return capture((int)PT_REGS_PARM1_CORE_SYSCALL(regs), (const void *)PT_REGS_PARM2_CORE_SYSCALL(regs),
                 PT_REGS_PARM3_CORE_SYSCALL(regs), id == NR_WRITEV, ret);
}

// tp_btf arguments are typed kernel pointers: the number is a plain (CO-RE relocated) load,
// not a helper call. This runs on every syscall of the node, so it is kept that short.
SEC("tp_btf/sys_exit")
int BPF_PROG(tp_sys_exit, struct pt_regs *regs, long ret) { return on_sys_exit(regs, SYSCALL_NR_BTF(regs), ret); }

SEC("raw_tp/sys_exit")
int raw_sys_exit(struct bpf_raw_tracepoint_args *ctx) {
  struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
  return on_sys_exit(regs, SYSCALL_NR(regs), (long)ctx->args[1]);
}

// ---- process tree ----

static __always_inline void emit_control(__u32 type, __u32 tgid, __u32 tid, __u64 root) {
  struct joblog_header *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
  if (!h) {
    struct joblog_stats *st = my_stats();
    if (st) st->lost_records++;
    return;
  }
  h->type = type;
  h->tgid = tgid;
  h->tid = tid;
  h->fd = -1;
  h->boot_ns = bpf_ktime_get_boot_ns();
  h->total_len = 0;
  h->offset = root;
  h->len = 0;
  h->stream = 0;
  h->flags = 0;
  h->seq = 0;
  h->reserved = 0;
  bpf_ringbuf_submit(h, 0);
}

static __always_inline int on_fork(struct task_struct *parent, struct task_struct *child) {
  __u32 ptgid = BPF_CORE_READ(parent, tgid);
  __u32 ctgid = BPF_CORE_READ(child, tgid);
  if (ptgid == ctgid) return 0;  // a new thread: the map is per process
  struct joblog_track *t = bpf_map_lookup_elem(&tracked, &ptgid);
  if (!t || (t->flags & JOBLOG_TRACK_NO_INHERIT)) return 0;
  struct joblog_track child_entry = {.flags = 0, .root = t->root, .seq = 0, .reserved = 0};
  if (bpf_map_update_elem(&tracked, &ctgid, &child_entry, BPF_NOEXIST)) {
    struct joblog_stats *st = my_stats();
    if (st) st->track_full++;
    return 0;
  }
  emit_control(JOBLOG_REC_FORK, ctgid, ptgid, child_entry.root);
  return 0;
}

static __always_inline int on_exit(struct task_struct *p) {
  __u32 tgid = BPF_CORE_READ(p, tgid);
  if (!bpf_map_lookup_elem(&tracked, &tgid)) return 0;
  // do_exit decrements signal->live before this tracepoint: 0 means the last thread of the
  // process is leaving (the group is dead), whichever thread that is.
  int live = BPF_CORE_READ(p, signal, live.counter);
  if (live != 0) return 0;
  bpf_map_delete_elem(&tracked, &tgid);
  emit_control(JOBLOG_REC_EXIT, tgid, BPF_CORE_READ(p, pid), 0);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(tp_fork, struct task_struct *parent, struct task_struct *child) { return on_fork(parent, child); }

SEC("raw_tp/sched_process_fork")
int raw_fork(struct bpf_raw_tracepoint_args *ctx) {
  return on_fork((struct task_struct *)ctx->args[0], (struct task_struct *)ctx->args[1]);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(tp_exit, struct task_struct *p) { return on_exit(p); }

SEC("raw_tp/sched_process_exit")
int raw_exit(struct bpf_raw_tracepoint_args *ctx) { return on_exit((struct task_struct *)ctx->args[0]); }
