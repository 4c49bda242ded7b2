// Storage with real ithbat-slowfs mounts (root and /dev/fuse, like tests/sched_io): per-node
// mountstats and diskstats count what that node's processes did (parsed with the agent's own
// parsers), a slowdown event makes fsync slower, io tenants are real clients, and Stop leaves no
// mount and no process behind. Assertions compare measured values with each other, never with
// a time threshold.
#include "node/storage.h"

#include <chrono>
#include <thread>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/node/node_parse.h"
#include "core/file_util.h"
#include "node/files.h"
#include "sim_node/sim_node_testutil.h"
#include "testutil/testutil.h"

namespace ithbat::sim::node {
namespace {

namespace fs = std::filesystem;
using ithbat::testing::TempDir;

constexpr int64_t kSec = 1'000'000'000;

std::string Read(const fs::path& p) {
  auto t = ReadFileBounded(p, 16 << 20);
  return t ? *t : std::string();
}

// Runs `sh -c script` with ITHBAT_SIM_NODE_ID=<node> (the way the runner starts ranks) and waits.
int RunAsNode(int node, const std::string& script) {
  const std::string id = "ITHBAT_SIM_NODE_ID=" + std::to_string(node);
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const char* envp[] = {"PATH=/usr/bin:/bin", id.c_str(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv),
                  const_cast<char* const*>(envp)) != 0) {
    return -1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Lines of /proc/self/mountinfo that mention `root`.
std::vector<std::string> MountsUnder(const fs::path& root) {
  std::vector<std::string> out;
  const std::string text = Read("/proc/self/mountinfo");
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    if (line.find(root.string()) != std::string_view::npos) out.emplace_back(line);
  }
  return out;
}

// Processes whose command line mentions `root`.
std::vector<int> ProcessesUnder(const fs::path& root) {
  std::vector<int> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = Read(e.path() / "cmdline");
    for (char& c : cmd) {
      if (c == '\0') c = ' ';
    }
    if (cmd.find(root.string()) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

template <class Pred>
bool WaitFor(Pred&& pred) {
  // A wait for something that must happen, bounded only so a broken build does not hang.
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

uint64_t WriteBytes(const std::vector<SlowfsClientStats>& v) {
  uint64_t n = 0;
  for (const auto& s : v) n += s.write_bytes;
  return n;
}

const collect::NfsMount* FindNfs(const std::vector<collect::NfsMount>& mounts, const fs::path& at) {
  for (const auto& m : mounts) {
    if (m.mountpoint == at.string()) return &m;
  }
  return nullptr;
}

const collect::NfsOpStats* FindOp(const collect::NfsMount& m, std::string_view op) {
  for (const auto& o : m.ops) {
    if (o.op == op) return &o;
  }
  return nullptr;
}

const collect::DiskStats* FindDisk(const std::vector<collect::DiskStats>& disks, std::string_view dev) {
  for (const auto& d : disks) {
    if (d.device == dev) return &d;
  }
  return nullptr;
}

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Privileged tests run (CI is root with /dev/fuse); a machine without them fails loudly.
    ASSERT_TRUE(geteuid() == 0 && fs::exists("/dev/fuse")) << "needs root and /dev/fuse (slowfs mounts, bind mounts)";
    scenario_ = testing::SmallWorld();
    scenario::MountT<scenario::Plain> ckpt;
    ckpt.name = "ckpt";
    ckpt.path = "/checkpoints";
    ckpt.kind = scenario::MountKind::kSharedNfs;
    ckpt.nodes = {"n0", "n1"};
    ckpt.write_gbps = 0.5;
    ckpt.fsync_ms = 2;
    scenario::MountT<scenario::Plain> local;
    local.name = "scratch";
    local.path = "/local/scratch";
    local.kind = scenario::MountKind::kLocalNvme;
    local.nodes = {"n0", "n1"};
    local.write_gbps = 2;
    local.fsync_ms = 0.5;
    scenario_.mounts = {ckpt, local};
  }

  std::unique_ptr<Storage> Make() {
    Storage::Options o;
    o.root = root_.path();
    o.scenario = &scenario_;
    o.time_compression = 1;
    o.byte_scale = 1;
    auto s = Storage::Create(o);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
    return s ? std::move(*s) : nullptr;
  }

  TempDir root_;
  scenario::ResolvedScenario scenario_;
};

TEST_F(StorageTest, EachNodeCountsWhatItsOwnProcessesDid) {
  auto st = Make();
  ASSERT_TRUE(st);
  auto p0 = st->NodePath("n0", "ckpt");
  auto p1 = st->NodePath("n1", "ckpt");
  auto l0 = st->NodePath("n0", "scratch");
  auto l1 = st->NodePath("n1", "scratch");
  ASSERT_TRUE(p0 && p1 && l0 && l1);
  EXPECT_FALSE(st->NodePath("n0", "nope").has_value());
  EXPECT_EQ(*p0, root_.path() / "nodes" / "n0" / "fs" / "checkpoints");
  // Every node path is its own mount point (what sched_io labels from mountinfo).
  for (const auto& p : {*p0, *p1, *l0, *l1}) {
    bool found = false;
    for (const auto& line : MountsUnder(p)) found |= line.find("fuse.slowfs") != std::string::npos;
    EXPECT_TRUE(found) << p;
  }

  ASSERT_EQ(
      RunAsNode(0, "dd if=/dev/zero of=" + (*p0 / "a").string() + " bs=1M count=4 conv=fsync 2>/dev/null"),
      0);
  ASSERT_EQ(
      RunAsNode(1, "dd if=/dev/zero of=" + (*l1 / "b").string() + " bs=1M count=2 conv=fsync 2>/dev/null"),
      0);
  // Shared: node 1 sees node 0's file; local: node 0 does not see node 1's.
  EXPECT_EQ(fs::file_size(*p1 / "a"), 4u << 20);
  EXPECT_FALSE(fs::exists(*l0 / "b"));

  ASSERT_TRUE(WaitFor([&] { return WriteBytes(st->Stats("ckpt", "n0")) == (4u << 20); }));
  ASSERT_TRUE(WaitFor([&] { return WriteBytes(st->Stats("scratch", "n1")) == (2u << 20); }));
  EXPECT_EQ(WriteBytes(st->Stats("ckpt", "n1")), 0u);
  EXPECT_EQ(WriteBytes(st->Stats("scratch", "n0")), 0u);
  ASSERT_TRUE(st->Tick(RealtimeNs()).has_value());

  for (int n = 0; n < 2; ++n) {
    const fs::path proc = root_.path() / "nodes" / (n == 0 ? "n0" : "n1") / "proc";
    auto mounts = collect::ParseMountStats(Read(proc / "self" / "mountstats"));
    ASSERT_TRUE(mounts.has_value()) << mounts.error().message;
    const collect::NfsMount* m = FindNfs(*mounts, n == 0 ? *p0 : *p1);
    ASSERT_NE(m, nullptr) << Read(proc / "self" / "mountstats");
    EXPECT_EQ(m->fstype, "nfs4");
    ASSERT_TRUE(m->has_bytes);
    const collect::NfsOpStats* write = FindOp(*m, "WRITE");
    const collect::NfsOpStats* commit = FindOp(*m, "COMMIT");
    ASSERT_TRUE(write && commit);
    if (n == 0) {
      EXPECT_EQ(m->normal_write_bytes, 4u << 20);
      EXPECT_EQ(m->server_write_bytes, 4u << 20);
      EXPECT_GT(write->ops, 0u);
      EXPECT_GE(write->bytes_sent, 4u << 20);
      EXPECT_GE(commit->ops, 1u);
      EXPECT_GE(write->execute_ms, write->rtt_ms);
    } else {
      EXPECT_EQ(m->normal_write_bytes, 0u);
      EXPECT_EQ(write->ops, 0u);
      EXPECT_EQ(commit->ops, 0u);
    }
    auto disks = collect::ParseDiskStats(Read(proc / "diskstats"));
    ASSERT_TRUE(disks.has_value()) << disks.error().message;
    const collect::DiskStats* os = FindDisk(*disks, "nvme0n1");
    const collect::DiskStats* d = FindDisk(*disks, "nvme1n1");
    ASSERT_TRUE(os && d);
    if (n == 1) {
      EXPECT_EQ(d->sectors_written * collect::kDiskSectorBytes, 2u << 20);
      EXPECT_GT(d->writes_completed, 0u);
    } else {
      EXPECT_EQ(d->sectors_written, 0u);
      EXPECT_EQ(d->writes_completed, 0u);
    }
  }

  // Counters only move forward.
  ASSERT_EQ(
      RunAsNode(0, "dd if=/dev/zero of=" + (*p0 / "c").string() + " bs=1M count=1 conv=fsync 2>/dev/null"),
      0);
  ASSERT_TRUE(WaitFor([&] { return WriteBytes(st->Stats("ckpt", "n0")) == (5u << 20); }));
  ASSERT_TRUE(st->Tick(RealtimeNs()).has_value());
  auto again = collect::ParseMountStats(Read(root_.path() / "nodes" / "n0" / "proc" / "self" / "mountstats"));
  ASSERT_TRUE(again.has_value());
  const collect::NfsMount* m = FindNfs(*again, *p0);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->normal_write_bytes, 5u << 20);
  EXPECT_GE(FindOp(*m, "COMMIT")->ops, 2u);
}

// The fsync time of a file on `dir` as this process sees it.
int64_t TimeFsync(const fs::path& dir, int i) {
  const std::string path = (dir / ("f" + std::to_string(i))).string();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  char buf[4096] = {};
  EXPECT_EQ(write(fd, buf, sizeof(buf)), static_cast<ssize_t>(sizeof(buf)));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fsync(fd), 0);
  const auto dt = std::chrono::steady_clock::now() - t0;
  close(fd);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count();
}

TEST_F(StorageTest, SlowdownRampsTheControlAndMakesFsyncSlower) {
  auto st = Make();
  ASSERT_TRUE(st);
  auto p0 = st->NodePath("n0", "ckpt");
  ASSERT_TRUE(p0);
  const fs::path control = root_.path() / "storage" / "ckpt" / "control";
  auto values = [&] {
    std::map<std::string, uint64_t> v;
    const std::string text = Read(control);
    LineReader lines(text);
    std::string_view line;
    while (lines.Next(&line)) {
      const size_t eq = line.find('=');
      if (eq != std::string_view::npos)
        v[std::string(line.substr(0, eq))] = *ParseUint64(line.substr(eq + 1));
    }
    return v;
  };
  const auto healthy = values();
  ASSERT_EQ(healthy.count("write_bandwidth"), 1u) << Read(control);
  EXPECT_EQ(healthy.at("write_bandwidth"), 500'000'000u);
  EXPECT_EQ(healthy.at("fsync_delay_us"), 2000u);

  int64_t before = 0;
  for (int i = 0; i < 3; ++i) before = std::max(before, TimeFsync(*p0, i));

  scenario::EventT<scenario::Plain> e;
  e.id = "slow";
  e.kind = scenario::EventKind::kStorageSlowdown;
  e.mount = "ckpt";
  e.bandwidth_factor = 0.1;
  e.fsync_ms = 200;  // real (the runner compressed it)
  e.ramp_s = 2;
  const int64_t t0 = RealtimeNs();
  ASSERT_TRUE(st->StartEvent(e, t0).has_value());
  ASSERT_TRUE(st->Tick(t0 + kSec).has_value());
  const auto mid = values();
  ASSERT_TRUE(st->Tick(t0 + 2 * kSec).has_value());
  const auto full = values();
  EXPECT_LT(mid.at("write_bandwidth"), healthy.at("write_bandwidth"));
  EXPECT_GT(mid.at("write_bandwidth"), full.at("write_bandwidth"));
  EXPECT_EQ(full.at("write_bandwidth"), 50'000'000u);
  EXPECT_GT(mid.at("fsync_delay_us"), healthy.at("fsync_delay_us"));
  EXPECT_LT(mid.at("fsync_delay_us"), full.at("fsync_delay_us"));
  EXPECT_EQ(full.at("fsync_delay_us"), 200'000u);

  // slowfs re-reads the control file at most every 20 ms: wait until it took effect.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int64_t after = INT64_MAX;
  for (int i = 3; i < 6; ++i) after = std::min(after, TimeFsync(*p0, i));
  EXPECT_GT(after, before);

  ASSERT_TRUE(st->EndEvent(e, t0 + 3 * kSec).has_value());
  EXPECT_EQ(values(), healthy);
}

TEST_F(StorageTest, IoTenantIsARealClientOfItsNodeAndStops) {
  scenario::TenantT<scenario::Plain> t;
  t.id = "backup";
  t.kind = scenario::TenantKind::kIo;
  t.mount = "ckpt";
  t.nodes = {"n1"};
  t.write_gbps = 0.05;
  t.start_s = 0;
  t.end_s = -1;
  scenario_.tenants = {t};
  auto st = Make();
  ASSERT_TRUE(st);
  ASSERT_TRUE(st->Tick(RealtimeNs()).has_value());
  ASSERT_TRUE(WaitFor([&] { return WriteBytes(st->Stats("ckpt", "n1")) > 0; }));
  EXPECT_EQ(WriteBytes(st->Stats("ckpt", "n0")), 0u);
  ASSERT_TRUE(WaitFor([&] {
    for (int pid : ProcessesUnder(root_.path())) {
      if (Read(fs::path("/proc") / std::to_string(pid) / "cmdline").find("io-writer") != std::string::npos)
        return true;
    }
    return false;
  }));
  st->Stop();
  EXPECT_TRUE(ProcessesUnder(root_.path()).empty());
  EXPECT_TRUE(MountsUnder(root_.path()).empty());
}

TEST_F(StorageTest, StopAndDestructorLeaveNoMountAndNoProcess) {
  {
    auto st = Make();
    ASSERT_TRUE(st);
    EXPECT_FALSE(MountsUnder(root_.path()).empty());
    EXPECT_FALSE(ProcessesUnder(root_.path()).empty());
    st->Stop();
    EXPECT_TRUE(MountsUnder(root_.path()).empty());
    EXPECT_TRUE(ProcessesUnder(root_.path()).empty());
    st->Stop();  // idempotent
  }
  {
    auto st = Make();
    ASSERT_TRUE(st);
    auto p0 = st->NodePath("n0", "ckpt");
    ASSERT_TRUE(p0);
    // A file still open at teardown must not keep the mount.
    const int fd = open((*p0 / "open").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    st.reset();
    close(fd);
  }
  EXPECT_TRUE(MountsUnder(root_.path()).empty());
  EXPECT_TRUE(ProcessesUnder(root_.path()).empty());
}

TEST_F(StorageTest, AFailedSetupLeavesNothingMounted) {
  Storage::Options o;
  o.root = root_.path();
  o.scenario = &scenario_;
  o.slowfs = "/bin/false";  // "mounts" nothing
  auto s = Storage::Create(o);
  EXPECT_FALSE(s.has_value());
  EXPECT_TRUE(MountsUnder(root_.path()).empty());
  EXPECT_TRUE(ProcessesUnder(root_.path()).empty());
}

TEST(SlowfsStatsTest, ParsesClientsAndSkipsGarbage) {
  const auto v = ParseSlowfsStats(
      "client=env:0 writes=3 write_bytes=300 write_ns=9 reads=0 read_bytes=0 read_ns=0 fsyncs=1 fsync_ns=5 "
      "closes=2 close_ns=1 opens=2\n"
      "garbage line\n"
      "client=pid:77 writes=x\n"
      "client=pid:78 writes=1 future_key=4\n");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].client, "env:0");
  EXPECT_EQ(v[0].write_bytes, 300u);
  EXPECT_EQ(v[0].fsyncs, 1u);
  EXPECT_EQ(v[0].opens, 2u);
  EXPECT_EQ(v[1].client, "pid:78");
  EXPECT_EQ(v[1].writes, 1u);
}

}  // namespace
}  // namespace ithbat::sim::node
