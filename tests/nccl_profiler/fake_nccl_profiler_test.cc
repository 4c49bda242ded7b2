// The fake libnccl drives a profiler plugin the way NCCL documents it (plugins/profiler/README.md):
// loaded by name or path, newest symbol first (the recording plugin exports v4 only), one init per
// communicator with the real arguments, Coll events at enqueue (stop = enqueued), KernelCh
// children with start/stop pTimers, finalize at destroy, nothing when the mask says so and
// nothing at all without NCCL_PROFILER_PLUGIN.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nccl_profiler/workload.h"
#include "testutil/testutil.h"

namespace ithbat::testing {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

struct JobRun {
  std::vector<Child> ranks;
  std::vector<std::string> logs;  // per rank, the recording plugin's lines
};

// Two ranks of the workload with `env`; the plugin logs to dir/log.<pid>.
JobRun RunTwoRanks(const TempDir& dir, std::map<std::string, std::string> env, int collectives,
                   const std::vector<std::string>& extra_rank1 = {}) {
  env["ITHBAT_TEST_PROFILER_LOG"] = (dir.path() / "log").string();
  env["ITHBAT_FAKE_NCCL_SHM_DIR"] = dir.path().string();
  JobRun run;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {ITHBAT_NCCL_WORKLOAD,
                                     "--rank",
                                     std::to_string(r),
                                     "--nranks",
                                     "2",
                                     "--id-file",
                                     (dir.path() / "id").string(),
                                     "--collectives",
                                     std::to_string(collectives),
                                     "--bytes",
                                     "4096",
                                     "--sync-every",
                                     "0"};
    if (r == 1) argv.insert(argv.end(), extra_rank1.begin(), extra_rank1.end());
    run.ranks.push_back(Spawn(argv, env, dir.path(), "rank" + std::to_string(r)));
  }
  for (const Child& c : run.ranks) {
    EXPECT_EQ(WaitExit(c, kTimeout), 0) << ReadAll(c.err);
    run.logs.push_back(ReadAll(dir.path() / ("log." + std::to_string(c.pid))));
  }
  return run;
}

std::string PluginDir() {
  return std::filesystem::path(ITHBAT_TEST_RECORDING_PROFILER).parent_path().string();
}

TEST(FakeNcclProfilerTest, DrivesAV4OnlyPluginByNameAsNcclDocuments) {
  TempDir dir;
  const int kColl = 4;
  JobRun run = RunTwoRanks(dir,
                           {{"NCCL_PROFILER_PLUGIN", "ithbattest"},  // -> libnccl-profiler-ithbattest.so
                            {"LD_LIBRARY_PATH", PluginDir()},
                            {"ITHBAT_FAKE_NCCL_CHANNELS", "3"}},
                           kColl);
  std::set<std::string> hashes;
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = Lines(run.logs[rank]);
    ASSERT_FALSE(lines.empty()) << "the plugin was not loaded by rank " << rank;
    // init <hash> <nNodes> <nranks> <rank> <name>, once, first.
    const auto init = Fields(lines.front());
    ASSERT_EQ(init.size(), 6u);
    EXPECT_EQ(init[0], "init");
    hashes.insert(init[1]);
    EXPECT_EQ(init[2], "1");
    EXPECT_EQ(init[3], "2");
    EXPECT_EQ(init[4], std::to_string(rank));
    EXPECT_EQ(Fields(lines.back()), std::vector<std::string>{"finalize"});
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.rfind("init", 0) == 0; }),
              1);

    std::map<std::string, size_t> coll_line;   // coll handle -> line index of its start
    std::map<std::string, size_t> stopped_at;  // handle -> line index of its stop
    std::map<std::string, std::string> ch_parent;
    std::map<std::string, uint64_t> ch_start, ch_stop;
    std::vector<uint64_t> seqs;
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto f = Fields(lines[i]);
      if (f.size() >= 2 && f[0] == "start" && f[1] == "coll") {
        // start coll <h> <parent> <seq> <func> <count> <datatype> <nChannels> <root>
        ASSERT_EQ(f.size(), 10u) << lines[i];
        coll_line[f[2]] = i;
        seqs.push_back(std::stoull(f[4]));
        EXPECT_EQ(f[5], "AllReduce");
        EXPECT_EQ(f[6], "1024");
        EXPECT_EQ(f[7], "ncclFloat32");
        EXPECT_EQ(f[8], "3");
      } else if (f.size() >= 2 && f[0] == "start" && f[1] == "kernelch") {
        ASSERT_EQ(f.size(), 6u) << lines[i];
        ch_parent[f[2]] = f[3];
        ch_start[f[2]] = std::stoull(f[5]);
        ASSERT_TRUE(coll_line.contains(f[3])) << "KernelCh parent is not a Coll handle: " << lines[i];
        ASSERT_TRUE(stopped_at.contains(f[3])) << "KernelCh before its Coll was stopped (enqueued)";
      } else if (f.size() == 4 && f[0] == "state") {
        EXPECT_EQ(f[2], "22");  // ncclProfilerKernelChStop
        ch_stop[f[1]] = std::stoull(f[3]);
        EXPECT_FALSE(stopped_at.contains(f[1])) << "state after stop";
      } else if (f.size() == 2 && f[0] == "stop") {
        stopped_at[f[1]] = i;
      } else if (f.size() >= 2 && f[0] == "start") {
        ADD_FAILURE() << "an event type not in the mask: " << lines[i];
      }
    }
    EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2, 3}));
    EXPECT_EQ(ch_parent.size(), static_cast<size_t>(3 * kColl));
    for (const auto& [h, parent] : ch_parent) {
      ASSERT_TRUE(ch_stop.contains(h));
      EXPECT_GE(ch_stop[h], ch_start[h]);
      EXPECT_TRUE(stopped_at.contains(h));
    }
  }
  EXPECT_EQ(hashes.size(), 1u) << "commId must be the same on every rank";
}

TEST(FakeNcclProfilerTest, LoadsByPathToo) {
  TempDir dir;
  JobRun run = RunTwoRanks(dir, {{"NCCL_PROFILER_PLUGIN", ITHBAT_TEST_RECORDING_PROFILER}}, 2);
  for (const auto& log : run.logs) EXPECT_NE(log.find("init "), std::string::npos);
}

TEST(FakeNcclProfilerTest, WithoutTheVariableOrWithNoneNothingIsLoaded) {
  TempDir dir;
  JobRun unset = RunTwoRanks(dir, {{"LD_LIBRARY_PATH", PluginDir()}}, 2);
  for (const auto& log : unset.logs) EXPECT_TRUE(log.empty());
  TempDir dir2;
  JobRun none = RunTwoRanks(dir2, {{"NCCL_PROFILER_PLUGIN", "none"}, {"LD_LIBRARY_PATH", PluginDir()}}, 2);
  for (const auto& log : none.logs) EXPECT_TRUE(log.empty());
  TempDir dir3;
  JobRun missing = RunTwoRanks(dir3, {{"NCCL_PROFILER_PLUGIN", "no-such-plugin"}}, 2);  // job still runs
  for (const auto& log : missing.logs) EXPECT_TRUE(log.empty());
}

TEST(FakeNcclProfilerTest, EventsOutsideTheMaskAreNotSent) {
  TempDir dir;
  JobRun run = RunTwoRanks(dir,
                           {{"NCCL_PROFILER_PLUGIN", ITHBAT_TEST_RECORDING_PROFILER},
                            {"ITHBAT_TEST_PROFILER_MASK", "2"}},  // Coll only
                           3);
  for (const auto& log : run.logs) {
    EXPECT_NE(log.find("start coll"), std::string::npos);
    EXPECT_EQ(log.find("kernelch"), std::string::npos);
  }
  TempDir dir2;
  JobRun off = RunTwoRanks(
      dir2, {{"NCCL_PROFILER_PLUGIN", ITHBAT_TEST_RECORDING_PROFILER}, {"ITHBAT_TEST_PROFILER_MASK", "0"}},
      3);
  for (const auto& log : off.logs) EXPECT_EQ(log.find("start"), std::string::npos);
}

// A rank that waits for a late peer shows a longer kernel: the KernelCh pTimers come from the
// simulated stream (the item starts when it reaches the head, ends when every rank arrived).
TEST(FakeNcclProfilerTest, KernelTimesShowTheWaitForALatePeer) {
  TempDir dir;
  constexpr uint64_t kDelayNs = 30'000'000;
  JobRun run = RunTwoRanks(dir,
                           {{"NCCL_PROFILER_PLUGIN", ITHBAT_TEST_RECORDING_PROFILER},
                            {"ITHBAT_FAKE_NCCL_LATENCY_NS", "0"},
                            {"ITHBAT_FAKE_NCCL_CHANNELS", "1"}},
                           4, {"--delay-ms", "30"});
  // Rank 0's kernels (after the first, which also absorbs the bootstrap skew) last >= the delay.
  std::map<std::string, uint64_t> start;
  std::vector<uint64_t> durations;
  for (const auto& l : Lines(run.logs[0])) {
    const auto f = Fields(l);
    if (f.size() == 6 && f[0] == "start" && f[1] == "kernelch") start[f[2]] = std::stoull(f[5]);
    if (f.size() == 4 && f[0] == "state") durations.push_back(std::stoull(f[3]) - start[f[1]]);
  }
  ASSERT_EQ(durations.size(), 4u);
  for (size_t k = 1; k < durations.size(); ++k) EXPECT_GE(durations[k], kDelayNs) << "collective " << k;
}

}  // namespace
}  // namespace ithbat::testing
