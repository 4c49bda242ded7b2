// ithbat-tfevents-writer: a stand-in for a training job that logs to TensorBoard. Appends
// scalar events to an event file at a given rate, with plain write(2) calls, keeping the file
// open while it runs (as SummaryWriter does), so the agent's end-to-end tests can find the
// file among a tracked process's open files and read it as it grows.
//
//   ithbat-tfevents-writer (--file PATH | --logdir DIR) [--tag TAG]... [--steps N]
//       [--start-step S] [--interval-ms MS] [--value V] [--delta D] [--style simple|tensor]
//       [--linger-ms MS]
//
// Step s (S, S+1, ..., S+N-1) writes, for every tag, value V + D * (s - S). Defaults: tag
// train/loss, 10 steps from 1, 100 ms apart, V = 4, D = -0.01, simple_value, no linger. With
// --logdir the file is DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>.0. The file's
// path is printed on the first line of stdout; "done" on the last after the final step.
// Exit status: 0, 2 on bad arguments, 1 when the file cannot be written.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "testutil/tfevents_writer.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "ithbat-tfevents-writer: %s\nusage: ithbat-tfevents-writer (--file PATH | --logdir DIR) [--tag TAG]... "
               "[--steps N] [--start-step S] [--interval-ms MS] [--value V] [--delta D] "
               "[--style simple|tensor] [--linger-ms MS]\n",
               why);
  return 2;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, logdir, style = "simple";
  std::vector<std::string> tags;
  long steps = 10, start_step = 1, interval_ms = 100, linger_ms = 0;
  double value = 4.0, delta = -0.01;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return Usage(("missing value for " + arg).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    if (arg == "--file") {
      file = v;
    } else if (arg == "--logdir") {
      logdir = v;
    } else if (arg == "--tag") {
      tags.emplace_back(v);
    } else if (arg == "--style") {
      style = v;
    } else if (arg == "--value" || arg == "--delta") {
      const double d = std::strtod(v, &end);
      if (end == v || *end != '\0') return Usage(("bad number for " + arg).c_str());
      (arg == "--value" ? value : delta) = d;
    } else if (arg == "--steps" || arg == "--start-step" || arg == "--interval-ms" || arg == "--linger-ms") {
      const long n = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || n < 0) return Usage(("bad count for " + arg).c_str());
      if (arg == "--steps") steps = n;
      if (arg == "--start-step") start_step = n;
      if (arg == "--interval-ms") interval_ms = n;
      if (arg == "--linger-ms") linger_ms = n;
    } else {
      return Usage(("unknown argument " + arg).c_str());
    }
  }
  if (file.empty() == logdir.empty()) return Usage("give exactly one of --file and --logdir");
  if (style != "simple" && style != "tensor") return Usage("--style is simple or tensor");
  if (tags.empty()) tags.emplace_back("train/loss");
  if (file.empty()) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    file = logdir + "/events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host + "." +
           std::to_string(getpid()) + ".0";
  }
  ithbat::testing::TfEventsWriter writer(file);
  if (!writer.ok()) {
    std::fprintf(stderr, "ithbat-tfevents-writer: cannot open %s: %s\n", file.c_str(), std::strerror(errno));
    return 1;
  }
  std::printf("%s\n", file.c_str());
  std::fflush(stdout);
  const auto kind =
      style == "tensor" ? ithbat::testing::ScalarStyle::kTensor : ithbat::testing::ScalarStyle::kSimpleValue;
  if (!writer.WriteFileVersion(WallSeconds())) return 1;
  for (long k = 0; k < steps; ++k) {
    if (k > 0 && interval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    const long step = start_step + k;
    for (const auto& tag : tags) {
      if (!writer.WriteScalar(step, tag, static_cast<float>(value + delta * static_cast<double>(k)), WallSeconds(), kind)) {
        std::fprintf(stderr, "ithbat-tfevents-writer: write failed: %s\n", std::strerror(errno));
        return 1;
      }
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  if (linger_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(linger_ms));
  return 0;
}
