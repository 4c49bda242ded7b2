/* The maps shared by sched_io.bpf.c and its user space (src/collect/sched_io/). Plain C,
 * fixed-width fields, no padding holes: the same bytes are written by the BPF program and read
 * by the agent. Change both sides together. */
#ifndef ITHBAT_BPF_SCHED_IO_ABI_H_
#define ITHBAT_BPF_SCHED_IO_ABI_H_

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Processes the kernel filter holds (tgid -> sched_io_track): roots and their descendants. */
#define SCHED_IO_MAX_TRACKED 8192
/* Roots with aggregates (root tgid -> sched_io_sched). */
#define SCHED_IO_MAX_ROOTS 1024
/* Per-thread state (LRU, tid -> private struct: scheduling phase and the call in flight). */
#define SCHED_IO_MAX_THREADS 65536
/* I/O aggregates: (root, dev, op) keys. */
#define SCHED_IO_MAX_IO_KEYS 8192
/* log2 latency buckets (ns): bucket b counts calls with 2^b <= ns < 2^(b+1) (b = 0 also holds
 * 0 ns); the last bucket holds everything from 2^31 ns (2.1 s) up. */
#define SCHED_IO_HIST 32

enum sched_io_scope {
  SCHED_IO_SCOPE_MAIN = 0,     /* the root's thread whose tid == root tgid */
  SCHED_IO_SCOPE_THREADS = 1,  /* the root process's other threads */
  SCHED_IO_SCOPE_CHILDREN = 2, /* every thread of descendant processes */
  SCHED_IO_NSCOPES = 3,
};

enum sched_io_class {
  SCHED_IO_CLASS_RUNNABLE = 0, /* preempted, or woken and waiting for a CPU */
  SCHED_IO_CLASS_LOCK = 1,     /* asleep in futex / futex_waitv, until the wakeup */
  SCHED_IO_CLASS_IO = 2,       /* TASK_UNINTERRUPTIBLE (D state), until the wakeup */
  SCHED_IO_CLASS_SLEEP = 3,    /* any other voluntary sleep, until the wakeup */
  SCHED_IO_NCLASSES = 4,
};

enum sched_io_op {
  SCHED_IO_OP_WRITE = 0, /* write, pwrite64, writev, pwritev, pwritev2 */
  SCHED_IO_OP_FSYNC = 1, /* fsync, fdatasync, sync_file_range */
  SCHED_IO_OP_CLOSE = 2, /* close (the file system's flush runs inside it) */
  SCHED_IO_NOPS = 3,
};

enum sched_io_track_flags {
  SCHED_IO_TRACK_NO_INHERIT = 1, /* children of this process are not tracked */
};

struct sched_io_track {
  __u32 root;  /* tgid of the root this process rolls up to (itself for a root) */
  __u32 flags; /* sched_io_track_flags */
  /* Set by user space, different for every Track (never 0), copied to children at fork. A
   * thread's kernel state made under another epoch is from an earlier tracking (the process
   * left and came back, or was re-rooted): it is reset without counting, so time spent while
   * untracked is never added. */
  __u32 epoch;
  __u32 reserved; /* 0 */
};

/* Per root, cumulative since the entry was created (user space deletes it when the root is gone). */
struct sched_io_sched {
  __u64 offcpu_ns[SCHED_IO_NSCOPES][SCHED_IO_NCLASSES];
  __u64 oncpu_ns[SCHED_IO_NSCOPES];
  __u64 switches[SCHED_IO_NSCOPES]; /* switch-outs (voluntary and not) */
};

struct sched_io_io_key {
  __u32 root;
  __u32 dev; /* the file's superblock s_dev, kernel encoding: major = dev >> 20, minor = dev & 0xfffff */
  __u32 op;  /* sched_io_op */
  __u32 reserved; /* 0 */
};

/* Per (root, dev, op), cumulative. */
struct sched_io_io_val {
  __u64 calls;  /* completed calls (returned, whatever their result) */
  __u64 bytes;  /* write: bytes written (positive return values) */
  __u64 lat_ns; /* entry to exit, summed */
  __u64 errors; /* calls that returned an error */
  __u64 hist[SCHED_IO_HIST];
};

/* Global counters: never silent. */
struct sched_io_globals {
  __u64 track_full;    /* a forked child could not be added to `tracked` */
  __u64 roots_full;    /* a root's aggregate entry could not be created (time lost) */
  __u64 threads_full;  /* a thread's state entry could not be created */
  __u64 io_full;       /* an I/O aggregate entry could not be created (calls lost) */
  __u64 inflight_full; /* a thread's state could not be created at a call's entry (call lost) */
};

#endif /* ITHBAT_BPF_SCHED_IO_ABI_H_ */
