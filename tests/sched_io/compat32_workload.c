/* A 32-bit (ia32) program for the sched_io tests, freestanding (no 32-bit libc needed): every
 * syscall it makes is a compat one, numbered from the i386 table. It writes, fsyncs, reads and
 * closes a regular file (i386 read is 3, x86-64's close; none of these may be counted as file
 * I/O) and sleeps 100 ms in futex (i386 240: that is lock time).
 *
 *   sched_io_compat32_workload FILE
 * Prints ready=1, waits for a byte on stdin, does the above, prints done=1, waits for one more
 * byte, exits 0 (1 when the file cannot be opened). */
#define NR_EXIT 1
#define NR_READ 3
#define NR_WRITE 4
#define NR_OPEN 5
#define NR_CLOSE 6
#define NR_LSEEK 19
#define NR_FSYNC 118
#define NR_FUTEX 240

static long sys3(long nr, long a, long b, long c) {
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
  return ret;
}

static long sys4(long nr, long a, long b, long c, long d) {
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(d) : "memory");
  return ret;
}

static void say(const char* s) {
  long n = 0;
  while (s[n]) ++n;
  sys3(NR_WRITE, 1, (long)s, n);
}

static void gate(void) {
  char c;
  sys3(NR_READ, 0, (long)&c, 1);
}

static char block[4096];

void cstart(long* sp) __attribute__((used));
void cstart(long* sp) {
  char** argv = (char**)(sp + 1);
  if (sp[0] < 2) sys3(NR_EXIT, 2, 0, 0);
  say("ready=1\n");
  gate();
  long fd = sys3(NR_OPEN, (long)argv[1], 0100 | 01000 | 2, 0644); /* O_CREAT|O_TRUNC|O_RDWR */
  if (fd < 0) sys3(NR_EXIT, 1, 0, 0);
  for (int i = 0; i < 4; ++i) {
    sys3(NR_WRITE, fd, (long)block, sizeof(block));
    sys3(NR_FSYNC, fd, 0, 0);
    sys3(NR_LSEEK, fd, 0, 0);
    sys3(NR_READ, fd, (long)block, sizeof(block));
  }
  int word = 0;
  long ts[2] = {0, 100000000}; /* old_timespec32: 100 ms */
  sys4(NR_FUTEX, (long)&word, 128 /* FUTEX_WAIT_PRIVATE */, 0, (long)ts);
  sys3(NR_CLOSE, fd, 0, 0);
  say("done=1\n");
  gate();
  sys3(NR_EXIT, 0, 0, 0);
}

__asm__(".globl _start\n_start:\n  movl %esp, %eax\n  andl $-16, %esp\n  pushl %eax\n  pushl %eax\n  call cstart\n  hlt\n");
