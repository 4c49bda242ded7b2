// SPDX-License-Identifier: GPL-2.0
// Host scheduling and file I/O of tracked processes (src/collect/sched_io; see README.md here
// and there). Everything is aggregated here per root process; user space reads cumulative
// counters each tick.
//
//   tp_btf/sched_switch        on-CPU time; off-CPU interval starts, classified at switch-out
//   tp_btf/sched_wakeup(_new)  splits an off-CPU interval: reason class before, runnable after
//   tp_btf/sched_process_fork  children inherit tracking (value: the root)
//   tp_btf/sched_process_exit  a process's tracked entry goes with its last thread
//   tp_btf/sys_enter, sys_exit write/fsync/close of regular files: latency, bytes, per device
//
// Every program on a hot path (switch, wakeup, every syscall of the node) filters first on
// the cheapest test: a syscall number compare, then one hash lookup in `tracked`.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "sched_io_abi.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING_STATE 0x0000
#define TASK_UNINTERRUPTIBLE_STATE 0x0002
#define TASK_DEAD_STATE 0x0080
// x86: thread_info.status bit of a task inside a 32-bit (ia32) syscall; cleared on return to user.
#define TS_COMPAT_BIT 0x0002
// arm64: pstate bit of a 32-bit (AArch32) user context.
#define PSR_MODE32_BIT_ARM64 0x10
// The futex numbers of the 32-bit ABIs (i386 and arm EABI agree): futex, futex_time64.
#define NR_COMPAT_FUTEX 240
#define NR_COMPAT_FUTEX_TIME64 422
#define S_IFMT_BITS 00170000
#define S_IFREG_BITS 0100000

#if defined(__TARGET_ARCH_x86)
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_PWRITE64 18
#define NR_WRITEV 20
#define NR_FSYNC 74
#define NR_FDATASYNC 75
#define NR_FUTEX 202
#define NR_SYNC_FILE_RANGE 277
#define NR_PWRITEV 296
#define NR_PWRITEV2 328
#define NR_FUTEX_WAITV 449
#define SYSCALL_NR_BTF(regs) ((regs)->orig_ax)
#define SYSCALL_ARG1_BTF(regs) ((regs)->di)
// A compat task's syscall numbers are another table's (i386: 3 is read, 4 is write).
#define IN_COMPAT_SYSCALL(task, regs) (compat_status(task) & TS_COMPAT_BIT)
#elif defined(__TARGET_ARCH_arm64)
#define NR_CLOSE 57
#define NR_WRITE 64
#define NR_WRITEV 66
#define NR_PWRITE64 68
#define NR_PWRITEV 70
#define NR_FSYNC 82
#define NR_FDATASYNC 83
#define NR_SYNC_FILE_RANGE 84
#define NR_FUTEX 98
#define NR_PWRITEV2 287
#define NR_FUTEX_WAITV 449
#define SYSCALL_NR_BTF(regs) ((regs)->syscallno)
#define SYSCALL_ARG1_BTF(regs) ((regs)->orig_x0)
#define IN_COMPAT_SYSCALL(task, regs) ((regs)->pstate & PSR_MODE32_BIT_ARM64)
#else
#error "unsupported architecture"
#endif

#if defined(__TARGET_ARCH_x86)
static __always_inline __u32 compat_status(struct task_struct *task) {
  if (bpf_core_field_exists(task->thread_info.status)) return BPF_CORE_READ(task, thread_info.status);
  return 0;
}
#endif

// Kernels before 5.14 name the state field `state` (a long).
struct task_struct___pre514 {
  long state;
} __attribute__((preserve_access_index));

// The task's state word. Read from the task rather than taken as sched_switch's 4th argument,
// which exists only since 5.18. At the tracepoint it is the state the task blocks in, or
// TASK_WAKING when a wakeup on another CPU already reached it (then the interval is cut at that
// wakeup anyway).
static __always_inline unsigned int task_state(struct task_struct *t) {
  if (bpf_core_field_exists(t->__state)) return BPF_CORE_READ(t, __state);
  return (unsigned int)BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SCHED_IO_MAX_TRACKED);
  __type(key, __u32);  // tgid
  __type(value, struct sched_io_track);
} tracked SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SCHED_IO_MAX_ROOTS);
  __type(key, __u32);  // root tgid
  __type(value, struct sched_io_sched);
} sched SEC(".maps");

enum thread_phase {
  PHASE_ON_CPU = 0,    // running (or not seen leaving yet)
  PHASE_SLEEPING = 1,  // switched out voluntarily; ts = switch-out, cls = reason
  PHASE_RUNNABLE = 2,  // waiting for a CPU; ts = preemption or wakeup
};

// A thread's state is valid only for the task and the tracking it was made under: `epoch` is
// the tracked entry's, `start_time` the task's (a tid reused by another task has another). A
// state that does not match (the process was untracked and tracked again, an idle detach in
// between, a reused tid) is reset without counting anything: the programs do not see untracked
// threads, so its phase, timestamps and call in flight are from before.
struct thread_state {
  __u64 ts;           // start of the current off-CPU phase
  __u64 oncpu_since;  // last switch-in (0: not seen running since the entry was made)
  __u64 call_ts;      // the call in flight's entry time
  __u64 start_time;   // task->start_time of the thread the state belongs to
  __u32 root;
  __u32 epoch;        // sched_io_track.epoch when the state was made
  __u32 call_dev;     // the call in flight's file s_dev
  __u8 scope;
  __u8 phase;
  __u8 cls;
  __u8 call_op;       // the write/fsync/close in flight: sched_io_op + 1 (0: none)
  __u8 exiting;       // checked at sched_process_exit: its TASK_DEAD switch may count its slice
  __u8 pad[7];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, SCHED_IO_MAX_THREADS);
  __type(key, __u32);  // tid
  __type(value, struct thread_state);
} threads SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SCHED_IO_MAX_IO_KEYS);
  __type(key, struct sched_io_io_key);
  __type(value, struct sched_io_io_val);
} io SEC(".maps");

// Longest call per key since user space last deleted the key (it deletes after each read).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SCHED_IO_MAX_IO_KEYS);
  __type(key, struct sched_io_io_key);
  __type(value, __u64);
} io_max SEC(".maps");


struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sched_io_globals);
} globals SEC(".maps");

static __always_inline struct sched_io_globals *g(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&globals, &zero);
}
#define COUNT(field)                                   \
  do {                                                 \
    struct sched_io_globals *_g = g();                 \
    if (_g) __sync_fetch_and_add(&_g->field, 1);       \
  } while (0)

static __always_inline struct sched_io_sched *root_totals(__u32 root) {
  struct sched_io_sched *s = bpf_map_lookup_elem(&sched, &root);
  if (s) return s;
  struct sched_io_sched zero = {};
  bpf_map_update_elem(&sched, &root, &zero, BPF_NOEXIST);  // EEXIST: another CPU made it
  s = bpf_map_lookup_elem(&sched, &root);
  if (!s) COUNT(roots_full);
  return s;
}

static __always_inline __u8 scope_of(__u32 root, __u32 tgid, __u32 tid) {
  if (tgid != root) return SCHED_IO_SCOPE_CHILDREN;
  return tid == root ? SCHED_IO_SCOPE_MAIN : SCHED_IO_SCOPE_THREADS;
}

// A new state for thread `tid` of tracked process `tgid`, under its entry `t`.
static __always_inline void fresh_state(struct thread_state *s, const struct sched_io_track *t, __u32 tgid,
                                        __u32 tid, __u64 start_time) {
  __builtin_memset(s, 0, sizeof(*s));
  s->root = t->root;
  s->epoch = t->epoch;
  s->start_time = start_time;
  s->scope = scope_of(t->root, tgid, tid);
}

// Whether `s` was made for this task under its current tracking (see struct thread_state).
static __always_inline bool state_current(const struct thread_state *s, const struct sched_io_track *t,
                                          __u64 start_time) {
  return s->epoch == t->epoch && s->start_time == start_time && s->root == t->root;
}

// The verifier needs a bound on the very register used as an index, and the compiler may
// check one copy and index with another: the index is masked in asm after the range check
// (the masks keep any value inside the struct; the check keeps it inside the field).
static __always_inline __u64 verifier_bound(__u64 v, __u64 mask) {
  asm volatile("%[v] &= %[m]" : [v] "+r"(v) : [m] "i"(mask));
  return v;
}

static __always_inline void add_offcpu(__u32 root, __u32 scope, __u32 cls, __u64 ns) {
  if (scope >= SCHED_IO_NSCOPES || cls >= SCHED_IO_NCLASSES) return;
  struct sched_io_sched *s = root_totals(root);
  if (!s) return;
  __u64 idx = verifier_bound((__u64)scope * SCHED_IO_NCLASSES + cls, 15);
  __sync_fetch_and_add(&((__u64 *)s->offcpu_ns)[idx], ns);
}

// `dead`: the thread's last slice. Its root's entry is only looked up, never created: the last
// switch of an exiting process can come after user space read the root one last time and
// deleted its aggregates, which must not come back.
static __always_inline void add_oncpu(__u32 root, __u32 scope, __u64 ns, int dead) {
  if (scope >= SCHED_IO_NSCOPES) return;
  struct sched_io_sched *s = dead ? bpf_map_lookup_elem(&sched, &root) : root_totals(root);
  if (!s) return;
  __u64 idx = verifier_bound(scope, 3);
  __sync_fetch_and_add(&s->oncpu_ns[idx], ns);
  if (!dead) __sync_fetch_and_add(&s->switches[idx], 1);
}

// Why `prev` left the CPU. The syscall it sleeps in is its user registers' orig_ax (the
// syscall number stays there for the whole call; -1 outside one), so a futex wait needs no
// syscall hook. A compat (32-bit) task's numbers are its ABI's.
static __always_inline __u8 classify(struct task_struct *prev, unsigned int prev_state) {
  if (prev_state & TASK_UNINTERRUPTIBLE_STATE) return SCHED_IO_CLASS_IO;
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
  if (regs) {
    long nr = SYSCALL_NR_BTF(regs);
    if (IN_COMPAT_SYSCALL(prev, regs)) {
      if (nr == NR_COMPAT_FUTEX || nr == NR_COMPAT_FUTEX_TIME64 || nr == NR_FUTEX_WAITV) return SCHED_IO_CLASS_LOCK;
    } else if (nr == NR_FUTEX || nr == NR_FUTEX_WAITV) {
      return SCHED_IO_CLASS_LOCK;
    }
  }
  return SCHED_IO_CLASS_SLEEP;
}

// The clock is read only once a tracked (or exiting) task is involved: in a VM, reading it can
// cost more than the map lookups that make up the untracked path.
static __always_inline __u64 clock_once(__u64 *now) {
  if (!*now) *now = bpf_ktime_get_ns();
  return *now;
}

static __always_inline void switch_out(struct task_struct *prev, bool preempt, __u64 *clock) {
  __u32 tid = prev->pid;
  if (tid == 0) return;  // idle
  __u32 tgid = prev->tgid;
  const unsigned int prev_state = task_state(prev);
  const bool dead = prev_state & TASK_DEAD_STATE;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t && !dead) return;
  struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
  // No state and exiting: nothing to close. (No state and not exiting implies tracked: the
  // test is written on `dead`, not `t`, because clang folds `!ts && !t` into a pointer OR the
  // verifier refuses.)
  if (!ts && dead) return;
  const __u64 now = clock_once(clock);
  const __u64 start_time = prev->start_time;
  if (ts && dead) {
    // The thread's last switch: its last slice counts when the state is this thread's under
    // its current tracking: checked against `tracked`, or, for the last thread of a process
    // (whose entry sched_process_exit removed already), checked there (`exiting`).
    const bool valid = ts->start_time == start_time && (t ? ts->epoch == t->epoch : ts->exiting);
    if (valid && ts->oncpu_since) add_oncpu(ts->root, ts->scope, now - ts->oncpu_since, 1);
    bpf_map_delete_elem(&threads, &tid);
    return;
  }
  if (!t) return;
  struct thread_state fresh;
  bool is_fresh = false;
  if (!ts || !state_current(ts, t, start_time)) {
    // No state, or a stale one: start over; the stale slice is not counted.
    fresh_state(&fresh, t, tgid, tid, start_time);
    ts = &fresh;
    is_fresh = true;
  } else if (ts->oncpu_since) {
    add_oncpu(ts->root, ts->scope, now - ts->oncpu_since, 0);
  }
  ts->oncpu_since = 0;
  ts->ts = now;
  // Preempted (or yielding while still runnable): waiting for a CPU from now.
  if (preempt || (prev_state & 0xff) == TASK_RUNNING_STATE) {
    ts->phase = PHASE_RUNNABLE;
  } else {
    ts->phase = PHASE_SLEEPING;
    ts->cls = classify(prev, prev_state);
  }
  if (is_fresh && bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) COUNT(threads_full);
}

static __always_inline void switch_in(struct task_struct *next, __u64 *clock) {
  __u32 tid = next->pid;
  if (tid == 0) return;
  __u32 tgid = next->tgid;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return;
  const __u64 now = clock_once(clock);
  const __u64 start_time = next->start_time;
  struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
  if (ts && state_current(ts, t, start_time)) {
    if (ts->phase == PHASE_RUNNABLE) {
      add_offcpu(ts->root, ts->scope, SCHED_IO_CLASS_RUNNABLE, now - ts->ts);
    } else if (ts->phase == PHASE_SLEEPING) {
      // No wakeup seen (attached mid-sleep): the whole interval goes to the reason.
      add_offcpu(ts->root, ts->scope, ts->cls, now - ts->ts);
    }
    ts->phase = PHASE_ON_CPU;
    ts->oncpu_since = now;
    return;
  }
  // First sight under this tracking (or a stale state: replaced, nothing counted).
  struct thread_state fresh;
  fresh_state(&fresh, t, tgid, tid, start_time);
  fresh.phase = PHASE_ON_CPU;
  fresh.oncpu_since = now;
  if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) COUNT(threads_full);
}

// Three arguments: prev_state (the 4th) exists only since 5.18; the state is read from prev.
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next) {
  __u64 now = 0;
  switch_out(prev, preempt, &now);
  switch_in(next, &now);
  return 0;
}

// The end of the reason part of an off-CPU interval: from here the thread waits for a CPU.
static __always_inline int on_wakeup(struct task_struct *p, int is_new) {
  __u32 tgid = p->tgid;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return 0;
  __u32 tid = p->pid;
  __u64 now = bpf_ktime_get_ns();
  const __u64 start_time = p->start_time;
  struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
  if (ts && state_current(ts, t, start_time)) {
    if (ts->phase == PHASE_SLEEPING) {
      add_offcpu(ts->root, ts->scope, ts->cls, now - ts->ts);
      ts->phase = PHASE_RUNNABLE;
      ts->ts = now;
    }
    return 0;
  }
  // Not seen leaving the CPU under this tracking: nothing to split (a stale state is replaced
  // at the switch-in).
  if (!is_new) return 0;
  // A new thread or process: its wait for a first CPU is runnable time.
  struct thread_state fresh;
  fresh_state(&fresh, t, tgid, tid, start_time);
  fresh.phase = PHASE_RUNNABLE;
  fresh.ts = now;
  if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) COUNT(threads_full);
  return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup_tp, struct task_struct *p) { return on_wakeup(p, 0); }

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p) { return on_wakeup(p, 1); }

// ---- process tree ----

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child) {
  __u32 ptgid = parent->tgid;
  __u32 ctgid = child->tgid;
  if (ptgid == ctgid) return 0;  // a new thread: the map is per process
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &ptgid);
  if (!t || (t->flags & SCHED_IO_TRACK_NO_INHERIT)) return 0;
  struct sched_io_track entry = {.root = t->root, .flags = 0, .epoch = t->epoch, .reserved = 0};
  if (bpf_map_update_elem(&tracked, &ctgid, &entry, BPF_NOEXIST)) COUNT(track_full);
  return 0;
}

// Runs for every exiting thread, on that thread (p is current), while its process is still in
// `tracked`: the thread's state is checked here, and marked, because at its TASK_DEAD switch the
// entry of the last thread's process is gone.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p) {
  __u32 tgid = p->tgid;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return 0;
  __u32 tid = p->pid;
  const __u64 start_time = p->start_time;
  struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
  if (ts && state_current(ts, t, start_time)) {
    ts->exiting = 1;
  } else {
    // Stale or missing: it is running now, so its last slice starts here.
    struct thread_state fresh;
    fresh_state(&fresh, t, tgid, tid, start_time);
    fresh.phase = PHASE_ON_CPU;
    fresh.oncpu_since = bpf_ktime_get_ns();
    fresh.exiting = 1;
    if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) COUNT(threads_full);
  }
  // do_exit decrements signal->live before this tracepoint: 0 means the group is dead. The
  // thread's own state goes at its last switch (TASK_DEAD), after its last on-CPU slice.
  if (BPF_CORE_READ(p, signal, live.counter) != 0) return 0;
  bpf_map_delete_elem(&tracked, &tgid);
  return 0;
}

// ---- file I/O ----

static __always_inline int op_of(long nr) {
  switch (nr) {
    case NR_WRITE:
    case NR_PWRITE64:
    case NR_WRITEV:
    case NR_PWRITEV:
    case NR_PWRITEV2:
      return SCHED_IO_OP_WRITE;
    case NR_FSYNC:
    case NR_FDATASYNC:
    case NR_SYNC_FILE_RANGE:
      return SCHED_IO_OP_FSYNC;
    case NR_CLOSE:
      return SCHED_IO_OP_CLOSE;
  }
  return -1;
}

// The superblock device of the regular file at `fd` of the current task; 0 when the fd is not
// open or not a regular file (pipes, sockets, ttys: not storage).
// The task is a trusted BTF pointer (bpf_get_current_task_btf): the walk to the fd array is
// plain loads, not helper calls; from the file on, probe reads (the array slot is indexed by
// a variable).
static __always_inline __u32 regular_file_dev(int fd) {
  if (fd < 0) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  struct files_struct *files = task->files;
  if (!files) return 0;
  struct fdtable *fdt = files->fdt;
  if (!fdt) return 0;
  unsigned int max_fds = fdt->max_fds;
  if ((unsigned int)fd >= max_fds) return 0;
  struct file **fds = fdt->fd;
  struct file *f = NULL;
  bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
  if (!f) return 0;
  struct inode *inode = BPF_CORE_READ(f, f_inode);
  if (!inode) return 0;
  umode_t mode = BPF_CORE_READ(inode, i_mode);
  if ((mode & S_IFMT_BITS) != S_IFREG_BITS) return 0;
  return BPF_CORE_READ(inode, i_sb, s_dev);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(io_enter, struct pt_regs *regs, long id) {
  int op = op_of(id);
  if (op < 0) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (IN_COMPAT_SYSCALL(task, regs)) return 0;  // another syscall table: `id` is not ours
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return 0;
  int fd = (int)SYSCALL_ARG1_BTF(regs);
  __u32 dev = regular_file_dev(fd);
  // The call in flight lives in the thread's state (no insert/delete per call).
  __u32 tid = (__u32)pid_tgid;
  struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);
  if (!dev) {
    // Not a regular file: no call in flight. A call left by a missed exit (detached in between)
    // must not be ended by this call's exit.
    if (ts && ts->call_op) ts->call_op = 0;
    return 0;
  }
  __u64 now = bpf_ktime_get_ns();
  const __u64 start_time = task->start_time;
  if (ts && state_current(ts, t, start_time)) {
    ts->call_ts = now;
    ts->call_dev = dev;
    ts->call_op = op + 1;
    return 0;
  }
  // A thread not switched in since it was tracked (or a stale state): its state starts now.
  struct thread_state fresh;
  fresh_state(&fresh, t, tgid, tid, start_time);
  fresh.phase = PHASE_ON_CPU;
  fresh.oncpu_since = now;
  fresh.call_ts = now;
  fresh.call_dev = dev;
  fresh.call_op = op + 1;
  if (bpf_map_update_elem(&threads, &tid, &fresh, BPF_ANY)) COUNT(inflight_full);
  return 0;
}

static __always_inline __u32 log2_bucket(__u64 v) {
  __u32 r = 0;
  if (v >> 32) { v >>= 32; r += 32; }
  if (v >> 16) { v >>= 16; r += 16; }
  if (v >> 8) { v >>= 8; r += 8; }
  if (v >> 4) { v >>= 4; r += 4; }
  if (v >> 2) { v >>= 2; r += 2; }
  if (v >> 1) { r += 1; }
  return r >= SCHED_IO_HIST ? SCHED_IO_HIST - 1 : r;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(io_exit, struct pt_regs *regs, long ret) {
  if (op_of(SYSCALL_NR_BTF(regs)) < 0) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)pid_tgid;
  struct thread_state *e = bpf_map_lookup_elem(&threads, &tid);
  if (!e || e->call_op == 0) return 0;
  __u64 lat = bpf_ktime_get_ns() - e->call_ts;
  struct sched_io_io_key key = {.root = e->root, .dev = e->call_dev, .op = e->call_op - 1u, .reserved = 0};
  e->call_op = 0;
  // Only a call of a process still tracked, under the tracking it started in: a root user
  // space stopped following must not get its aggregates back.
  __u32 tgid = pid_tgid >> 32;
  struct sched_io_track *t = bpf_map_lookup_elem(&tracked, &tgid);
  if (!t) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (!state_current(e, t, task->start_time)) return 0;
  struct sched_io_io_val *v = bpf_map_lookup_elem(&io, &key);
  if (!v) {
    struct sched_io_io_val zero = {};
    bpf_map_update_elem(&io, &key, &zero, BPF_NOEXIST);
    v = bpf_map_lookup_elem(&io, &key);
    if (!v) {
      COUNT(io_full);
      return 0;
    }
  }
  __sync_fetch_and_add(&v->calls, 1);
  __sync_fetch_and_add(&v->lat_ns, lat);
  if (ret < 0) __sync_fetch_and_add(&v->errors, 1);
  else if (key.op == SCHED_IO_OP_WRITE) __sync_fetch_and_add(&v->bytes, ret);
  __u32 b = log2_bucket(lat);
  if (b < SCHED_IO_HIST) __sync_fetch_and_add(&v->hist[b], 1);
  // Not atomic: two calls ending at once on two CPUs may keep the smaller; a max, not a count.
  __u64 *m = bpf_map_lookup_elem(&io_max, &key);
  if (m) {
    if (lat > *m) *m = lat;
  } else {
    bpf_map_update_elem(&io_max, &key, &lat, BPF_NOEXIST);
  }
  return 0;
}
