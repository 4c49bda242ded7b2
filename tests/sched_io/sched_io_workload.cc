// The program the sched_io tests follow. It does known things and prints what it measured
// itself (key=value lines on stdout), so the tests compare the kernel's accounting with lower
// bounds that hold by construction:
//   sleep    N sleeps of D ms on the main thread
//   lock     a helper thread holds a mutex for H ms while the main thread waits for it
//   io       on each of two directories: W writes of 4 KiB, K fsyncs, one close (each timed)
//   spin     two threads pinned to one CPU spin until each has S ms of CPU time
//   child    a forked child sleeps C ms and exits
// It waits for one byte on stdin before starting (so the agent tracks it first) and for one
// more before exiting (so the test reads the counters while it is alive).
//
//   sched_io_workload SLOW_DIR LOCAL_DIR N D H W K S C
//
// Loop mode, for tests that track, untrack and track again while it runs: the main thread
// sleeps 2 ms at a time, one thread spins, one writes and fdatasyncs a file in DIR and writes a
// pipe, all until one byte arrives on stdin (then it exits 0). It prints ready=1 and its tids.
//
//   sched_io_workload --loop DIR
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t Now(clockid_t c = CLOCK_MONOTONIC) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepMs(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1'000'000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

long Tid() { return syscall(SYS_gettid); }

void WaitGate() {
  char c;
  while (read(0, &c, 1) < 0) {
  }
}

struct Timed {
  int64_t sum = 0, max = 0;
  int calls = 0;
  void Add(int64_t ns) {
    sum += ns;
    max = std::max(max, ns);
    ++calls;
  }
};

void Report(const char* prefix, const char* what, const Timed& t) {
  std::printf("%s_%s_calls=%d\n%s_%s_ns=%lld\n%s_%s_max_ns=%lld\n", prefix, what, t.calls, prefix, what,
              static_cast<long long>(t.sum), prefix, what, static_cast<long long>(t.max));
}

// W writes, K fsyncs, one close on a new file in dir; prints the calls and their durations.
int DoIo(const std::string& dir, const char* prefix, int writes, int fsyncs) {
  const std::string path = dir + "/workload-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "open %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<char> block(4096, 'x');
  Timed w, s, c;
  long long bytes = 0;
  for (int i = 0; i < writes; ++i) {
    int64_t t0 = Now();
    ssize_t n = write(fd, block.data(), block.size());
    w.Add(Now() - t0);
    if (n > 0) bytes += n;
  }
  for (int i = 0; i < fsyncs; ++i) {
    int64_t t0 = Now();
    fsync(fd);
    s.Add(Now() - t0);
  }
  int64_t t0 = Now();
  close(fd);
  c.Add(Now() - t0);
  Report(prefix, "write", w);
  Report(prefix, "fsync", s);
  Report(prefix, "close", c);
  std::printf("%s_bytes=%lld\n", prefix, bytes);
  return 0;
}

int Loop(const std::string& dir) {
  const std::string path = dir + "/loop-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  int p[2];
  if (fd < 0 || pipe2(p, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "open %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::atomic<bool> stop{false};
  std::atomic<long> spin_tid{0}, io_tid{0};
  std::thread spinner([&] {
    spin_tid = Tid();
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::thread io([&] {
    io_tid = Tid();
    std::vector<char> block(4096, 'x');
    char c = 0;
    while (!stop.load()) {
      if (pwrite(fd, block.data(), block.size(), 0) < 0) break;
      fdatasync(fd);
      if (write(p[1], "x", 1) != 1 || read(p[0], &c, 1) != 1) break;
    }
  });
  while (spin_tid == 0 || io_tid == 0) sched_yield();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("tid_main=%ld\ntid_spin=%ld\ntid_io=%ld\nready=1\n", Tid(), spin_tid.load(), io_tid.load());
  pollfd in{0, POLLIN, 0};
  while (poll(&in, 1, 2) == 0) {
  }
  stop = true;
  spinner.join();
  io.join();
  close(fd);
  unlink(path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--loop") return Loop(argv[2]);
  if (argc != 10) {
    std::fprintf(stderr, "usage: %s SLOW_DIR LOCAL_DIR N D H W K S C\n", argv[0]);
    return 2;
  }
  const std::string slow = argv[1], local = argv[2];
  const int n_sleeps = std::atoi(argv[3]), sleep_ms = std::atoi(argv[4]), hold_ms = std::atoi(argv[5]);
  const int writes = std::atoi(argv[6]), fsyncs = std::atoi(argv[7]), spin_ms = std::atoi(argv[8]);
  const int child_ms = std::atoi(argv[9]);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The loader's own opens and closes are over: the test tracks the process from here.
  std::printf("ready=1\n");
  WaitGate();
  std::printf("tid_main=%ld\n", Tid());

  // sleep
  for (int i = 0; i < n_sleeps; ++i) SleepMs(sleep_ms);

  // lock: the holder takes the mutex, says so, holds it for H ms; main waits in lock().
  std::mutex m;
  std::atomic<bool> held{false};
  std::atomic<long> holder_tid{0};
  std::thread holder([&] {
    holder_tid = Tid();
    m.lock();
    held = true;
    SleepMs(hold_ms);
    m.unlock();
  });
  while (!held) sched_yield();
  int64_t t0 = Now();
  m.lock();
  const int64_t lock_wait = Now() - t0;
  m.unlock();
  holder.join();
  std::printf("tid_holder=%ld\nlock_wait_ns=%lld\n", holder_tid.load(), static_cast<long long>(lock_wait));

  // io
  if (DoIo(slow, "slow", writes, fsyncs) != 0) return 1;
  if (DoIo(local, "local", writes, fsyncs) != 0) return 1;

  // spin: two threads on one CPU, each until it has S ms of CPU time.
  std::atomic<int> ready{0};
  int64_t wall[2] = {0, 0}, cpu[2] = {0, 0};
  long tids[2] = {0, 0};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 2; ++i) {
    spinners.emplace_back([&, i] {
      tids[i] = Tid();
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(0, &set);
      sched_setaffinity(0, sizeof(set), &set);
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      const int64_t w0 = Now(), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
      while (Now(CLOCK_THREAD_CPUTIME_ID) - c0 < static_cast<int64_t>(spin_ms) * 1'000'000) {
      }
      wall[i] = Now() - w0;
      cpu[i] = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
    });
  }
  for (auto& t : spinners) t.join();
  for (int i = 0; i < 2; ++i) {
    std::printf("tid_spin%d=%ld\nspin%d_wall_ns=%lld\nspin%d_cpu_ns=%lld\n", i, tids[i], i,
                static_cast<long long>(wall[i]), i, static_cast<long long>(cpu[i]));
  }

  // child
  pid_t child = fork();
  if (child == 0) {
    SleepMs(child_ms);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child_pid=%d\ndone=1\n", child);
  WaitGate();
  return 0;
}
