/* The records and maps shared by joblog_capture.bpf.c and its user space
 * (src/collect/joblog/ebpf_source.cc). Plain C, fixed-width fields, no padding holes: the
 * same bytes are written by the BPF program and read by the agent. Change both sides together. */
#ifndef ITHBAT_BPF_JOBLOG_CAPTURE_ABI_H_
#define ITHBAT_BPF_JOBLOG_CAPTURE_ABI_H_

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Data bytes per ring-buffer record. A write larger than this becomes several records. */
#define JOBLOG_CHUNK_BYTES 4096
/* At most this many records per syscall (64 KiB); the rest of a larger write is counted as
 * truncated (stats), never copied. */
#define JOBLOG_MAX_CHUNKS_PER_CALL 16
/* writev: the first this many iovecs are looked at (write, pwrite64 and writev are captured;
 * pwritev is not). */
#define JOBLOG_MAX_IOVECS 16
/* Tracked processes the kernel map holds (tgid -> joblog_track). */
#define JOBLOG_MAX_TRACKED 8192

enum joblog_record_type {
  JOBLOG_REC_DATA = 1, /* bytes written to stdout/stderr (or a dup of them) */
  JOBLOG_REC_FORK = 2, /* a tracked process forked: tgid = child, tid = parent tgid, root set */
  JOBLOG_REC_EXIT = 3, /* the last thread of a tracked process exited: tgid */
};

enum joblog_track_flags {
  JOBLOG_TRACK_NO_INHERIT = 1, /* children of this process are not tracked (a launcher) */
};

struct joblog_track {
  __u32 flags;    /* joblog_track_flags */
  __u32 root;     /* tgid of the tracked process this one descends from (itself for a root) */
  __u32 seq;      /* captured calls of this process so far (user space writes 0) */
  __u32 reserved; /* 0 */
};

struct joblog_header {
  __u32 type;      /* joblog_record_type */
  __u32 tgid;      /* the process (FORK: the child) */
  __u32 tid;       /* the writing thread (FORK: the parent's tgid) */
  __s32 fd;        /* the fd written to (FORK/EXIT: -1) */
  __u64 boot_ns;   /* bpf_ktime_get_boot_ns() at syscall exit (user space adds realtime - boottime) */
  __u64 total_len; /* bytes the call wrote (its return value; writev: within the first
                    * JOBLOG_MAX_IOVECS iovecs) */
  __u64 offset;    /* of this record's bytes within the call's bytes (FORK: the root's tgid) */
  __u32 len;       /* data bytes following the header */
  __u16 stream;    /* 1 = stdout, 2 = stderr: fd 1/2, or an fd sharing their struct file */
  __u16 flags;     /* JOBLOG_DATA_* */
  /* DATA: the number of this call among the process's captured calls, from 1; every record of
   * one call has the same. A number skipped (seq > last + 1) means a whole call was lost (ring
   * full): a partial line pending before it must not be glued to what follows. Counted without
   * an atomic (kernels before 5.12 have no fetch-add), so two threads writing at once on two
   * CPUs may share a number or arrive out of order: only a jump forward is a gap.
   * FORK/EXIT: 0. */
  __u32 seq;
  __u32 reserved; /* 0 */
};

enum joblog_data_flags {
  JOBLOG_DATA_MORE_IOVECS = 1, /* writev with more iovecs than were looked at */
};

/* Per-CPU counters (one array entry); user space sums the CPUs. */
struct joblog_stats {
  __u64 records;          /* data records written to the ring */
  __u64 bytes;            /* data bytes written to the ring */
  __u64 lost_records;     /* records the ring had no room for (data, fork, exit) */
  __u64 lost_bytes;       /* data bytes of those records */
  __u64 truncated_writes; /* calls with more bytes than JOBLOG_MAX_CHUNKS_PER_CALL records hold */
  __u64 truncated_bytes;  /* bytes of those calls that were not copied */
  __u64 read_errors;      /* user memory that could not be read (not resident) */
  __u64 track_full;       /* children not tracked because the map was full */
};

#endif /* ITHBAT_BPF_JOBLOG_CAPTURE_ABI_H_ */
