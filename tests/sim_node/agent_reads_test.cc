// The agent's own node collectors (not only its parsers) pointed at a simulated node's roots:
// host, disk, NFS, InfiniBand, topology and kmsg all read them without one error or degraded
// source, and report what the simulated world did.
#include <chrono>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collect/host/host_collector.h"
#include "collect/kmsg/kmsg_collector.h"
#include "collect/node/node_collectors.h"
#include "collect/node/topology.h"
#include "node/files.h"
#include "node/node_world.h"
#include "node/storage.h"
#include "sim_node/sim_node_testutil.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::sim::node {
namespace {

namespace fs = std::filesystem;
using ithbat::testing::FakeSink;
using ithbat::testing::TempDir;

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

void ExpectClean(agent::Collector& c, FakeSink& sink, TimeNs t) {
  ASSERT_TRUE(c.Init(sink).has_value()) << c.name();
  ASSERT_TRUE(c.Start().has_value()) << c.name();
  ASSERT_TRUE(c.Collect(t).has_value()) << c.name();
  ASSERT_TRUE(c.Collect(t + 1'000'000).has_value()) << c.name();
  const auto h = c.Health();
  EXPECT_EQ(h.errors, 0u) << c.name();
  EXPECT_EQ(h.degraded, "") << c.name();
}

TEST(AgentReadsTest, NodeCollectorsReadASimulatedNodeCleanly) {
  // Privileged tests run (CI is root with /dev/fuse); a machine without them fails loudly.
  ASSERT_TRUE(geteuid() == 0 && fs::exists("/dev/fuse")) << "needs root and /dev/fuse (slowfs mounts)";
  TempDir root;
  auto sc = testing::SmallWorld();
  scenario::MountT<scenario::Plain> ckpt;
  ckpt.name = "ckpt";
  ckpt.path = "/ckpt";
  ckpt.nodes = {"n0", "n1"};
  scenario::MountT<scenario::Plain> local;
  local.name = "scratch";
  local.path = "/scratch";
  local.kind = scenario::MountKind::kLocalNvme;
  local.nodes = {"n0"};
  sc.mounts = {ckpt, local};

  std::vector<net::NicSlot> slots(4);
  for (uint32_t i = 0; i < 4; ++i) {
    std::snprintf(slots[i].node, sizeof(slots[i].node), "n%u", i / 2);
    std::snprintf(slots[i].name, sizeof(slots[i].name), "mlx5_%u", i % 2);
    slots[i].node_id = i / 2;
    slots[i].port = 1;
    slots[i].rate_bps = 400'000'000'000ull;
  }
  net::NetStateMapping net;
  const char* why = nullptr;
  ASSERT_TRUE(net.Create((root.path() / "net.state").c_str(), slots.data(), 4, &why)) << why;

  NodeWorld::Options o;
  o.dir = root.path() / "nodes" / "n0";
  o.scenario = &sc;
  o.node_index = 0;
  o.seed = 1;
  o.net = &net;
  o.nic_slots = {0, 1};
  auto world = NodeWorld::Create(o);
  ASSERT_TRUE(world.has_value()) << world.error().message;
  Storage::Options so;
  so.root = root.path();
  so.scenario = &sc;
  auto storage = Storage::Create(so);
  ASSERT_TRUE(storage.has_value()) << storage.error().message;
  auto ckpt_path = (*storage)->NodePath("n0", "ckpt");
  auto local_path = (*storage)->NodePath("n0", "scratch");
  ASSERT_TRUE(ckpt_path && local_path);

  // The agents start, then the world happens.
  FakeSink ksink;
  auto kmsg = collect::KmsgCollector::Create({.path = (*world)->kmsg()});
  const TimeNs t0 = RealtimeNs();
  ExpectClean(*kmsg, ksink, t0);

  ASSERT_EQ(RunAsNode(0, "dd if=/dev/zero of=" + (*ckpt_path / "shard").string() +
                             " bs=256k count=8 conv=fsync 2>/dev/null"),
            0);
  ASSERT_EQ(RunAsNode(0, "dd if=/dev/zero of=" + (*local_path / "cache").string() +
                             " bs=256k count=4 conv=fsync 2>/dev/null"),
            0);
  net::Add(&net.nic(0)->tx_bytes, 4'000'000);
  scenario::EventT<scenario::Plain> xid;
  xid.kind = scenario::EventKind::kXid;
  xid.node = "n0";
  xid.gpu = 1;
  xid.xid = 43;
  ASSERT_TRUE((*world)->StartEvent(xid, RealtimeNs()).has_value());
  auto written = [&](const char* mount) {
    uint64_t bytes = 0;
    for (const auto& s : (*storage)->Stats(mount, "n0")) bytes += s.write_bytes;
    return bytes;
  };
  for (int i = 0; i < 500 && (written("ckpt") != 2u << 20 || written("scratch") != 1u << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE((*world)->Tick(RealtimeNs()).has_value());
  ASSERT_TRUE((*storage)->Tick(RealtimeNs()).has_value());

  const fs::path procfs = (*world)->procfs();
  const fs::path sysfs = (*world)->sysfs();
  const TimeNs t = RealtimeNs();
  {
    FakeSink sink;
    auto c = collect::HostCollector::Create({.procfs = procfs});
    ExpectClean(*c, sink, t);
    EXPECT_GT(sink.CountWithSamples("ithbat_host_"), 0u);
  }
  {
    FakeSink sink;
    auto c = collect::DiskCollector::Create({.procfs = procfs});
    ExpectClean(*c, sink, t);
    const auto v = sink.FindWith("ithbat_disk_written_bytes_total", {{"device", "nvme1n1"}});
    ASSERT_TRUE(v.has_value());
    ASSERT_FALSE(v->samples.empty());
    EXPECT_EQ(v->samples.back().second, 1u << 20);
  }
  {
    FakeSink sink;
    auto c = collect::NfsCollector::Create({.procfs = procfs});
    ExpectClean(*c, sink, t);
    const auto v = sink.FindWith("ithbat_nfs_written_bytes_total", {{"mountpoint", ckpt_path->string()}});
    ASSERT_TRUE(v.has_value());
    ASSERT_FALSE(v->samples.empty());
    EXPECT_EQ(v->samples.back().second, 2u << 20);
  }
  {
    FakeSink sink;
    auto c = collect::InfinibandCollector::Create({.sysfs = sysfs});
    ExpectClean(*c, sink, t);
    const auto v = sink.FindWith("ithbat_ib_transmit_bytes_total", {{"device", "mlx5_0"}, {"port", "1"}});
    ASSERT_TRUE(v.has_value());
    ASSERT_FALSE(v->samples.empty());
    EXPECT_EQ(v->samples.back().second, 4'000'000);
  }
  {
    FakeSink sink;
    auto c = collect::TopologyCollector::Create({.sysfs = sysfs});
    ExpectClean(*c, sink, t);
    EXPECT_EQ(sink.CountSeries("ithbat_topology_gpu_nic_info"), 8u);  // 4 GPUs x 2 NICs
  }
  ASSERT_TRUE(kmsg->Collect(RealtimeNs() + 1'000'000'000).has_value());
  EXPECT_EQ(kmsg->Health().errors, 0u);
  EXPECT_EQ(kmsg->xid_events(), 1u);  // the live one; the earlier-in-the-day line is history
  (*storage)->Stop();
}

}  // namespace
}  // namespace ithbat::sim::node
