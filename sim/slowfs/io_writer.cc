// ithbat-sim-io-writer: another tenant's I/O on a shared mount (the simulator's io tenants,
// sim/node/storage.h). A real client: it writes files through the mount at a target rate, so
// it takes its share of the mount's modelled link and stalls like everyone else when the
// mount is slow.
//
//   ithbat-sim-io-writer --dir DIR --rate BYTES_PER_S [--chunk BYTES] [--file-bytes BYTES] [--keep N]
//
// Writes DIR/part-<n> in chunks (default 1 MiB) paced to the rate (no catching up on more than
// one second of backlog: a stalled tenant does not burst afterwards), fsyncs and closes each file
// after file-bytes (default 64 MiB) and deletes all but the last `keep` files (default 2). Runs
// until SIGTERM/SIGINT, then removes its files and exits 0. Exit 2 on bad arguments, 1 when DIR
// cannot be created or written.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepNs(int64_t ns) {
  // Sliced so a stop request is seen quickly.
  while (ns > 0 && !g_stop) {
    const int64_t slice = ns < 50'000'000 ? ns : 50'000'000;
    timespec ts{static_cast<time_t>(slice / 1'000'000'000), static_cast<long>(slice % 1'000'000'000)};
    nanosleep(&ts, nullptr);
    ns -= slice;
  }
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --dir DIR --rate BYTES_PER_S [--chunk BYTES] [--file-bytes BYTES] [--keep N]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint64_t rate = 0, chunk = 1 << 20, file_bytes = 64ull << 20, keep = 2;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    std::string_view v = argv[++i];
    if (a == "--dir") {
      dir = std::string(v);
    } else if (a == "--rate") {
      if (!ParseU64(v, &rate)) return Usage(argv[0]);
    } else if (a == "--chunk") {
      if (!ParseU64(v, &chunk) || chunk == 0 || chunk > (64u << 20)) return Usage(argv[0]);
    } else if (a == "--file-bytes") {
      if (!ParseU64(v, &file_bytes) || file_bytes == 0) return Usage(argv[0]);
    } else if (a == "--keep") {
      if (!ParseU64(v, &keep) || keep > 1000) return Usage(argv[0]);
    } else {
      return Usage(argv[0]);
    }
  }
  if (dir.empty() || rate == 0) return Usage(argv[0]);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "ithbat-sim-io-writer: mkdir %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<char> buf(chunk, 'x');
  std::deque<std::string> files;
  uint64_t n = 0;
  const int64_t start = NowNs();
  uint64_t sent = 0;  // bytes the schedule has accounted for
  int64_t schedule_origin = start;
  int rc = 0;
  while (!g_stop) {
    const std::string path = dir + "/part-" + std::to_string(n++);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "ithbat-sim-io-writer: open %s: %s\n", path.c_str(), std::strerror(errno));
      rc = 1;
      break;
    }
    files.push_back(path);
    uint64_t in_file = 0;
    while (!g_stop && in_file < file_bytes) {
      // Pace: the next chunk is due when the bytes so far took their time at the rate.
      const int64_t due = schedule_origin + static_cast<int64_t>(static_cast<double>(sent) * 1e9 / rate);
      const int64_t now = NowNs();
      if (due > now) {
        SleepNs(due - now);
      } else if (now - due > 1'000'000'000) {
        schedule_origin = now;  // stalled: forget the backlog beyond a second
        sent = 0;
      }
      if (g_stop) break;
      const ssize_t w = write(fd, buf.data(), buf.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "ithbat-sim-io-writer: write %s: %s\n", path.c_str(), std::strerror(errno));
        rc = 1;
        g_stop = true;
        break;
      }
      in_file += static_cast<uint64_t>(w);
      sent += static_cast<uint64_t>(w);
    }
    fsync(fd);
    close(fd);
    while (files.size() > keep) {
      unlink(files.front().c_str());
      files.pop_front();
    }
  }
  for (const std::string& f : files) unlink(f.c_str());
  rmdir(dir.c_str());
  return rc;
}
