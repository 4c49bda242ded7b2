// Cost of the sched_io BPF programs (bpf/sched_io.bpf.c) to the processes of a node, as ratios
// measured in one run on one machine. Root only (loads BPF).
//
// What is timed (each a tight loop in this process; the median of kRounds interleaved rounds):
//   switch   two threads pinned to one CPU hand a byte back and forth over two pipes: every
//            hand-off is one context switch (plus a wakeup, a read and a write); per switch
//   write    pwrite() of 64 bytes to a regular file on the local disk (page cache)
//   fsync    fdatasync() of a regular file with nothing dirty (the syscall and the file system's
//            check, no device I/O: the cost the probe adds is what is compared)
//   getppid  a syscall the programs do not time: what every other syscall pays (number filter)
// In three states:
//   off        the programs loaded but detached (the baseline: a node with nothing tracked)
//   untracked  attached, this process not in the filter (every process of a node with a job)
//   tracked    attached, this process tracked (the job's processes)
//
//   sched_io_bench [--rounds N] [--scale X]
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collect/sched_io/sched_io_bpf.h"

using ithbat::collect::sched_io::SchedIoBpf;

namespace {

double NowNs() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// ns per context switch: n round trips between two threads on one CPU = 2n switches.
double SwitchNs(int n) {
  int a[2], b[2];
  if (pipe(a) != 0 || pipe(b) != 0) return -1;
  std::thread peer([&] {
    Pin(0);
    char c;
    for (int i = 0; i < n; ++i) {
      if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) break;
    }
  });
  Pin(0);
  char c = 'x';
  const double t0 = NowNs();
  for (int i = 0; i < n; ++i) {
    if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) break;
  }
  const double t = NowNs() - t0;
  peer.join();
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
  return t / (2.0 * n);
}

double WriteNs(int fd, int n) {
  char buf[64];
  std::memset(buf, 'y', sizeof(buf));
  const double t0 = NowNs();
  for (int i = 0; i < n; ++i) {
    if (pwrite(fd, buf, sizeof(buf), (i % 1024) * 64) != sizeof(buf)) return -1;
  }
  return (NowNs() - t0) / n;
}

double FsyncNs(int fd, int n) {
  const double t0 = NowNs();
  for (int i = 0; i < n; ++i) fdatasync(fd);
  return (NowNs() - t0) / n;
}

double GetppidNs(int n) {
  const double t0 = NowNs();
  for (int i = 0; i < n; ++i) (void)getppid();
  return (NowNs() - t0) / n;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double scale = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--scale") scale = std::max(0.01, std::atof(argv[i + 1]));
  }
  auto bpf = SchedIoBpf::Load(/*attach=*/false);
  if (!bpf) {
    std::fprintf(stderr, "sched_io_bench: %s\n", bpf.error().message.c_str());
    return 1;
  }
  char path[] = "/tmp/sched_io_bench.XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  unlink(path);
  std::vector<char> init(64 * 1024, 'z');
  if (write(fd, init.data(), init.size()) != static_cast<ssize_t>(init.size())) return 1;
  fsync(fd);

  const int n_switch = static_cast<int>(50000 * scale), n_write = static_cast<int>(200000 * scale),
            n_fsync = static_cast<int>(50000 * scale), n_sys = static_cast<int>(500000 * scale);
  const char* states[] = {"off", "untracked", "tracked"};
  std::vector<double> sw[3], wr[3], fs[3], sy[3];
  for (int r = 0; r < rounds; ++r) {
    for (int s = 0; s < 3; ++s) {
      (void)(*bpf)->Untrack(getpid());
      if (auto st = (*bpf)->SetAttached(s != 0); !st) {
        std::fprintf(stderr, "sched_io_bench: %s\n", st.error().message.c_str());
        return 1;
      }
      if (s == 2) (void)(*bpf)->Track(getpid(), getpid());
      sw[s].push_back(SwitchNs(n_switch));
      wr[s].push_back(WriteNs(fd, n_write));
      fs[s].push_back(FsyncNs(fd, n_fsync));
      sy[s].push_back(GetppidNs(n_sys));
    }
  }
  (void)(*bpf)->SetAttached(false);
  const auto io = (*bpf)->ReadIo();
  uint64_t counted_writes = 0;
  for (const auto& e : io) {
    if (e.key.op == SCHED_IO_OP_WRITE) counted_writes += e.value.calls;
  }
  std::printf("sched_io_bench: median of %d interleaved rounds, ns per operation\n", rounds);
  std::printf("%-10s %12s %12s %12s %12s\n", "state", "switch", "pwrite64B", "fdatasync", "getppid");
  double base[4] = {Median(sw[0]), Median(wr[0]), Median(fs[0]), Median(sy[0])};
  for (int s = 0; s < 3; ++s) {
    std::printf("%-10s %12.1f %12.1f %12.1f %12.1f\n", states[s], Median(sw[s]), Median(wr[s]), Median(fs[s]),
                Median(sy[s]));
  }
  for (int s = 1; s < 3; ++s) {
    std::printf("%-10s %11.3fx %11.3fx %11.3fx %11.3fx   (ratio to off)\n", states[s], Median(sw[s]) / base[0],
                Median(wr[s]) / base[1], Median(fs[s]) / base[2], Median(sy[s]) / base[3]);
  }
  for (int s = 1; s < 3; ++s) {
    std::printf("%-10s %+11.1f %+11.1f %+11.1f %+11.1f   (ns added)\n", states[s], Median(sw[s]) - base[0],
                Median(wr[s]) - base[1], Median(fs[s]) - base[2], Median(sy[s]) - base[3]);
  }
  std::printf("writes counted while tracked: %llu (expected %llu)\n", static_cast<unsigned long long>(counted_writes),
              static_cast<unsigned long long>(rounds) * n_write);
  const auto g = (*bpf)->Globals();
  std::printf("lost: track_full=%llu roots_full=%llu threads_full=%llu io_full=%llu inflight_full=%llu\n",
              (unsigned long long)g.track_full, (unsigned long long)g.roots_full, (unsigned long long)g.threads_full,
              (unsigned long long)g.io_full, (unsigned long long)g.inflight_full);
  close(fd);
  return 0;
}
